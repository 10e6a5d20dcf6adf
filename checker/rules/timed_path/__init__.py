"""KC2xx: logging and host syncs in timed and per-step paths.

The rules of this family share one question, "which calls run inside this region, directly or
through a same-module helper", answered here over the module model's timed regions, and, for the
gates, over the ``ast`` (:class:`FileView`).
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Iterator

import libcst as cst

from kcheck import facts
from kcheck.gate import dotted, import_bindings
from kcheck.project import step_loops as step_loops_of
from kcheck.native import file_host_syncs, wait_line
from kcheck.values import HOST, READING_BUILTINS, REDUCTIONS, host_tensor
from kcheck.model import (
    BENCH_TIMERS, COMPILERS, HOST_TIMERS, LOG_METHODS, LOGGER_NAMES, MEASUREMENT_FUNCTION, MEASUREMENT_PATH, MEMOIZERS,
    SYNC_FUNCTIONS, SYNC_METHODS, tested_read_ast, waiting_read_ast, walk,
)

TIMED = ("event-window", "bench-callable", "host-timer")
# last components of the decorators that register a custom op's implementation (a wide superset of
# the model's custom-op claims, whose implementation is a per-step path)
REGISTERING = {"custom_op", "register_kernel", "impl"}
SYNC_TEXT = r"\b(int|float|bool|complex|max|min|sum|any|all|range|divmod)\(|\b(if|while|assert)\b|synchronize|argwhere|equal\(|allclose|\.item\(|\.cpu\(|\.tolist\(|\.numpy\(|nonzero|where\(|unique|masked_select|repeat_interleave|['\"]cpu['\"]|Synchronize|cudaMemcpy|\.item<|\["
TIMER_TEXT = r"\.record\(|perf_counter|time\(|monotonic|default_timer|do_bench|bench_gpu_time|benchmark_fn" \
    r"|ModelNew|custom_kernel|class Model\b"  # and what a task's harness times


# -- gates: the timed regions as the ``ast`` shows them ------------------------------------------
#
# A rule of this family reports a call found in a timed region (or in a same-module helper the
# region calls, to three levels), so a file can only be flagged when (1) it holds a region of a
# kind the rule reads and (2) a call the rule classifies is reachable from it. The gates check
# both over the ``ast``, always erring wide: a window runs from the first to the last timer call
# of its function (the model's windows lie inside that span), a helper is any same-module
# function of the called name, and a call is classified by the same qualified names the model
# uses, resolved through the file's imports. Each step first asks the summary's names whether
# it can find anything at all, so most files cost a few set lookups.


def _arguments(call: ast.Call) -> list[ast.AST]:
    """Every argument's value, positional, starred and keyword."""
    return [a.value if type(a) is ast.Starred else a for a in call.args] + [k.value for k in call.keywords]


# A region kind can only exist where one of these words is a name, attribute or imported name.
KIND_WORDS = {
    "event-window": {"record"},
    "host-timer": {name.split(".")[-1] for name in HOST_TIMERS},
    "bench-callable": BENCH_TIMERS | {"ModelNew", "Model", "custom_kernel"},  # and what a task's harness times
    "graph-capture": {"graph"},
}
# A call of a class can only be written with one of these last components (after the imports).
SYNC_WORDS = {name.split(".")[-1] for name in SYNC_FUNCTIONS} | set(SYNC_METHODS) | {"synchronize", "where", "to"} \
    | READING_BUILTINS | REDUCTIONS
LOG_WORDS = LOG_METHODS | {"print", "warn", "write", "pprint"}
COMPILE_WORDS = {name.split(".")[-1] for name in COMPILERS}
GRAPH_CAPTURE = {"torch.cuda.graph", "torch.cuda.graphs.graph"}
_BLOCKS = {kind: fields for kind, fields in (
    (ast.FunctionDef, ("body",)), (ast.AsyncFunctionDef, ("body",)), (ast.ClassDef, ("body",)),
    (ast.If, ("body", "orelse")), (ast.For, ("body", "orelse")), (ast.AsyncFor, ("body", "orelse")),
    (ast.While, ("body", "orelse")), (ast.With, ("body",)), (ast.AsyncWith, ("body",)),
    (ast.Try, ("body", "handlers", "orelse", "finalbody")),  # ``_fields`` order, as the summary walks
    (getattr(ast, "TryStar", ast.Try), ("body", "handlers", "orelse", "finalbody")), (ast.Match, ("cases",)),
)}


_TESTS = (ast.If, ast.While, ast.Assert, ast.IfExp)


class FileView:
    """What the family's gates derive once per file (``summary.memo["timed_path"]``), each part
    when first asked: the import aliases, each function's ``ast`` node, enclosing function and
    owner, the ``with`` statements, the calls grouped by their innermost function (``None``:
    module and class level), and the regions of each kind."""

    def __init__(self, summary) -> None:
        self.summary = summary
        self.imported = {i.rsplit(".", 1)[-1] for i in summary.imports}  # last components
        self.words = summary.all_names | self.imported | summary.class_names
        self.names = summary.function_names()
        self._walked = False
        self._calls: dict[int | None, list[ast.Call]] | None = None
        self._by_name: dict[str, list[int]] | None = None
        self._measuring: dict[int | None, bool] = {}
        self._classified: dict[tuple[str, int], bool] = {}
        self._regions: dict[str, list] = {}
        self._bodies: dict[int, list[ast.Call]] = {}

    # -- the statement walk: imports, defs, withs -------------------------------------------

    def _walk(self) -> None:
        self._walked = True
        self._aliases: dict[str, set[str]] = {}
        self._nodes: list[ast.AST] = []
        self._parent: list[int | None] = []
        self._owner: list[str] = []  # the name of the class or function a def is written in
        self._withs: list[tuple[ast.AST, int | None]] = []
        if self.summary.tree is not None:
            self._statements(self.summary.tree.body, None, "")
        functions = self.summary.functions
        # the defs in the summary's order (both walks are pre-order); in any doubt, no nesting known
        self._exact = len(self._nodes) == len(functions) and all(
            n.name == f.name for n, f in zip(self._nodes, functions))

    def _statements(self, body: list, function: int | None, owner: str) -> None:
        stack = [(stmt, function, owner) for stmt in reversed(body)]  # pre-order, as the summary's walk
        while stack:
            stmt, function, owner = stack.pop()
            kind = type(stmt)
            if kind is ast.Import or kind is ast.ImportFrom:
                for local, full in import_bindings(stmt):
                    self._aliases.setdefault(local, set()).add(full)
                continue
            fields = _BLOCKS.get(kind)
            if fields is None:
                continue
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                self._nodes.append(stmt)
                self._parent.append(function)
                self._owner.append(owner)
                function, owner = len(self._nodes) - 1, stmt.name
            elif kind is ast.ClassDef:
                owner = stmt.name
            elif kind is ast.With or kind is ast.AsyncWith:
                self._withs.append((stmt, function))
            inner = []
            for name in fields:
                value = getattr(stmt, name)
                if name == "handlers" or name == "cases":
                    for v in value:
                        inner.extend(v.body)
                elif value:
                    inner.extend(value)
            stack.extend([(v, function, owner) for v in reversed(inner)])

    def __getattr__(self, name: str):
        if name in ("aliases", "nodes", "parent", "owner", "withs", "exact"):
            if not self._walked:
                self._walk()
            return self.__dict__["_" + name]
        raise AttributeError(name)

    @property
    def calls(self) -> dict[int | None, list[ast.Call]]:
        if self._calls is None:
            index = {id(f): i for i, f in enumerate(self.summary.functions)}
            self._calls = {}
            for call, f in self.summary.calls:
                self._calls.setdefault(index[id(f)] if f is not None else None, []).append(call)
        return self._calls

    def body(self, i: int) -> list[ast.Call]:
        """The calls in def ``i``'s body: its decorators and defaults run where it is defined."""
        found = self._bodies.get(i)
        if found is None:
            found = self.calls.get(i, [])
            if self.summary.functions[i].decorators and self.exact:  # defaults are kept: a superset
                start = self.nodes[i].body[0].lineno
                found = [c for c in found if c.lineno >= start]
            self._bodies[i] = found
        return found

    @property
    def native_syncs(self) -> dict[str, str]:
        """The functions of the file's inline C++/CUDA sources that wait for the GPU (:mod:`kcheck.native`)."""
        found = self.summary.memo.get("native_syncs")
        if found is None:
            tree = self.summary.tree
            found = self.summary.memo["native_syncs"] = {} if tree is None or not {"load_inline", "load"} & self.words else \
                file_host_syncs(n.value for n in ast.walk(tree) if type(n) is ast.Constant and type(n.value) is str)
        return found

    @property
    def tested_calls(self) -> set[int]:
        """The ids of the calls inside a branch's test (``if``, ``while``, ``assert``, ``a if t else b``)."""
        found = self.summary.memo.get("tested_calls")
        if found is None:
            found = self.summary.memo["tested_calls"] = set()
            if self.summary.tree is not None:
                for node in ast.walk(self.summary.tree):
                    if type(node) in (ast.If, ast.While, ast.Assert, ast.IfExp):
                        found.update(id(n) for n in ast.walk(node.test) if type(n) is ast.Call)
        return found

    def waits(self, i: int | None) -> bool:
        """Whether def ``i``'s own body (the whole file, for ``None`` or when the defs cannot be
        matched to their nodes) holds a subscript that may wait for the GPU
        (:func:`kcheck.model.waiting_read_ast`: ``x[mask]``, ``x[ids == 0]``, ``x[:lens[i]]``) or a
        branch's test, which may take a GPU tensor's truth value (``ModuleModel.test_sync``)."""
        memo = self.summary.memo.setdefault("waiting_reads", {})
        key = i if i is not None and self.exact else None
        if key not in memo:
            tree = self.summary.tree
            roots = [] if tree is None else list(self.nodes[key].body) if key is not None else [tree]
            stack, found = roots, False
            while stack and not found:
                node = stack.pop()
                found = waiting_read_ast(node) or type(node) in _TESTS and tested_read_ast(node.test)
                stack.extend(c for c in ast.iter_child_nodes(node)
                             if key is None or type(c) not in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
            memo[key] = found
        return memo[key]

    def reaches_waiting(self, i: int | None, depth: int = 3) -> bool:
        """Whether def ``i`` or a helper it calls (to ``depth``) :meth:`waits`."""
        if i is None or not self.exact:
            return self.waits(None)
        seen, frontier = {i}, [i]
        for level in range(depth + 1):
            if any(self.waits(j) for j in frontier):
                return True
            if level == depth:
                break
            nxt = []
            for j in frontier:
                for call in self.body(j):
                    for k in self.callees(call):
                        if k not in seen:
                            seen.add(k)
                            nxt.append(k)
            frontier = nxt
        return False

    @property
    def by_name(self) -> dict[str, list[int]]:
        """Name -> the defs a call of it may reach (not memoized ones, which the model skips)."""
        if self._by_name is None:
            self._by_name = {}
            for i, f in enumerate(self.summary.functions):
                if not f.decorators & MEMOIZERS:
                    self._by_name.setdefault(f.name, []).append(i)
        return self._by_name

    # -- names ------------------------------------------------------------------------------

    def qualnames(self, node: ast.AST) -> list[str]:
        """Every qualified name ``node`` may stand for (the model's ``qualname``, over all imports of
        its first component)."""
        name = dotted(node)
        if name is None:
            return []
        head, _, rest = name.partition(".")
        call = head.endswith("()")
        targets = self.aliases.get(head[:-2] if call else head)
        if not targets:
            return [name]
        suffix = "()" if call else ""
        return [f"{t}{suffix}.{rest}" if rest else f"{t}{suffix}" for t in targets]

    def may_be(self, func: ast.AST, wanted: set[str]) -> bool:
        """Whether a called ``func`` may stand for a name whose last component is in ``wanted``: an
        attribute's is its own; a bare name's is its own or, through an import, the imported one's
        (looked up only when the file imports such a name)."""
        if type(func) is ast.Attribute:
            return func.attr in wanted
        if type(func) is ast.Name:
            return func.id in wanted or not wanted.isdisjoint(self.imported) and any(
                t.rsplit(".", 1)[-1] in wanted for t in self.aliases.get(func.id, ()))
        return False

    def measuring(self, function: int | None) -> bool:
        """Whether event windows and host timers count here: measurement code by path, or a
        function (or one around it) named like measurement code."""
        if function not in self._measuring:
            functions = self.summary.functions
            if MEASUREMENT_PATH.search(self.summary.path):
                found = True
            elif not any(MEASUREMENT_FUNCTION.match(f.name) for f in functions):
                found = False
            elif function is not None and MEASUREMENT_FUNCTION.match(functions[function].name):
                found = True
            elif function is None or not self.exact:  # a class body may sit in a function: any will do
                found = any(MEASUREMENT_FUNCTION.match(f.name) for f in self.summary.functions)
            else:
                found, i = False, function
                while i is not None and not found:
                    found = bool(MEASUREMENT_FUNCTION.match(self.nodes[i].name))
                    i = self.parent[i]
            self._measuring[function] = found
        return self._measuring[function]

    def is_async(self, function: int | None) -> bool:
        return function is not None and self.exact and type(self.nodes[function]) is ast.AsyncFunctionDef

    # -- regions: (kind, function index or None, the calls written in the region) -------------

    def regions(self, kind: str, config=None) -> list[tuple[str, int | None, list[ast.Call]]]:
        found = self._regions.get(kind)
        if found is None:
            words = KIND_WORDS.get(kind)
            found = self._regions[kind] = [] if words is not None and not words & self.words else getattr(
                self, "_" + kind.replace("-", "_"))(config)
        return found

    def _windows(self, kind: str, is_timer) -> list:
        out = []
        for function, calls in self.calls.items():
            timers = [c.lineno for c in calls if is_timer(c)]
            if len(timers) >= 2 and self.measuring(function):
                lo, hi = min(timers), max(timers)
                out.append((kind, function, [c for c in calls if lo <= c.lineno <= hi]))
        return out

    def _event_window(self, config) -> list:
        def record(c: ast.Call) -> bool:
            f = c.func
            if not (type(f) is ast.Attribute and f.attr == "record" and len(c.args) + len(c.keywords) <= 1):
                return False
            names = self.qualnames(f)
            return not (names and all(q.startswith("torch.cuda.memory") for q in names))
        return self._windows("event-window", record)

    def _host_timer(self, config) -> list:
        words = KIND_WORDS["host-timer"]
        return self._windows("host-timer", lambda c: self.may_be(c.func, words) and (
            dotted(c.func) in HOST_TIMERS or any(q in HOST_TIMERS for q in self.qualnames(c.func))))

    def _bench_callable(self, config) -> list:
        out = []
        # what a task's harness times (the model's HARNESS_TIMED claims, widely): a ModelNew's or
        # Model's forward, and with a custom_kernel in the file any function
        harnessed = {"ModelNew", "Model"} & self.summary.class_names
        for i, f in enumerate(self.summary.functions):
            if "custom_kernel" in self.words or harnessed and f.name == "forward" and (
                    not self.exact or self.owner[i] in harnessed):
                out.append(("bench-callable", i, self.body(i)))
        for call, _ in self.summary.calls:
            if not self.may_be(call.func, BENCH_TIMERS):
                continue
            for value in _arguments(call):
                if type(value) is ast.Call and any(q.endswith("partial") for q in self.qualnames(value.func)):
                    targets = _arguments(value)
                else:
                    targets = [value]
                for target in targets:
                    if type(target) is ast.Lambda:
                        out.append(("bench-callable", None, [n for n in ast.walk(target.body) if type(n) is ast.Call]))
                    elif type(target) is ast.Name:
                        for i, f in enumerate(self.summary.functions):  # the model takes any def of the name
                            if f.name == target.id:
                                out.append(("bench-callable", i, self.body(i)))
        return out

    def _graph_capture(self, config) -> list:
        out = []
        for stmt, function in self.withs:
            if any(type(item.context_expr) is ast.Call and self.may_be(item.context_expr.func, {"graph"})
                   and GRAPH_CAPTURE & set(self.qualnames(item.context_expr.func)) for item in stmt.items):
                lo, hi = stmt.body[0].lineno, stmt.end_lineno
                calls = self.calls.get(function, ()) if self.exact else [c for c, _ in self.summary.calls]
                out.append(("graph-capture", function, [c for c in calls if lo <= c.lineno <= hi]))
        return out

    def _hot_path(self, config) -> list:
        hot = config.is_hot_path
        indexed = {name.rsplit(".", 1)[-1] for name, _ in config.per_step}  # by short name: looser than the model
        # a "Cls.m" pattern by its method's name alone: looser than the model, which knows the class
        indexed |= {p.rsplit(".", 1)[-1] for p in config.hot_path_functions if "." in p}
        # and a function looping over steps (the index's ``step_loops``, by short name; asked of the
        # file's own tree when it is checked alone, and any function when the defs cannot be matched
        # to their nodes)
        if config.indexed:
            looping = {name.rsplit(".", 1)[-1] for name, _ in config.step_loops}
            return [("hot-path", i, self.body(i)) for i, f in enumerate(self.summary.functions)
                    if hot(f.name) or f.name in indexed or f.decorators & REGISTERING or f.name in looping]
        return [("hot-path", i, self.body(i)) for i, f in enumerate(self.summary.functions)
                if hot(f.name) or f.name in indexed or f.decorators & REGISTERING
                or (not self.exact or bool(step_loops_of(self.nodes[i])))]

    # -- reachability ---------------------------------------------------------------------------

    def callees(self, call: ast.Call) -> list[int]:
        """The same-module functions a call may reach (``helper(...)``, ``self.helper(...)``)."""
        func = call.func
        if type(func) is ast.Name:
            return self.by_name.get(func.id, ())
        if type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id in ("self", "cls"):
            return self.by_name.get(func.attr, ())
        return ()

    def reaches(self, calls: list[ast.Call], pred, depth: int = 3) -> bool:
        """Whether ``pred`` holds for a call in ``calls`` or in the helpers they call (to ``depth``)."""
        seen: set[int] = set()
        frontier = calls
        for level in range(depth + 1):
            nxt: list[ast.Call] = []
            for call in frontier:
                if pred(call):
                    return True
                if level < depth:
                    for i in self.callees(call):
                        if i not in seen:
                            seen.add(i)
                            nxt.extend(self.body(i))
            frontier = nxt
        return False

    def classified(self, what: str, call: ast.Call) -> bool:
        """``CLASSIFY[what](self, call)``, once per call."""
        key = (what, id(call))
        hit = self._classified.get(key)
        if hit is None:
            hit = self._classified[key] = CLASSIFY[what](self, call)
        return hit


def file_view(summary) -> FileView:
    view = summary.memo.get("timed_path")
    if view is None:
        view = summary.memo["timed_path"] = FileView(summary)
    return view


def region_reaches(summary, kinds: tuple[str, ...], what: str, config=None) -> bool:
    """Whether a region of one of ``kinds`` reaches a call of class ``what`` (see ``CLASSIFY``)."""
    view = file_view(summary)
    if what == "sync" and "hot-path" in kinds and any(
            view.reaches_waiting(i) for _, i, _ in view.regions("hot-path", config)):
        return True  # a hot path that reaches a read through a boolean mask (``x[mask]``): KC203 reads subscripts
    if what in WORDS and WORDS[what].isdisjoint(view.words) and not (what == "sync" and view.native_syncs):
        return False
    return any(view.reaches(calls, lambda c: view.classified(what, c))
               for kind in kinds for _, _, calls in view.regions(kind, config))


def _sync(view: FileView, call: ast.Call) -> bool:
    """What ``ModuleModel.sync_kind`` can call a host sync (never less)."""
    if type(call.func) is ast.Attribute and call.func.attr in view.native_syncs:
        return True  # ``ext.fn(x)`` whose C++ host code waits
    if not view.may_be(call.func, SYNC_WORDS):
        return False
    names = view.qualnames(call.func)
    positional = len(call.args) + sum(1 for k in call.keywords if k.arg is None)
    for name in names:
        if name in SYNC_FUNCTIONS and not (
                name == "torch.repeat_interleave" and any(k.arg == "output_size" for k in call.keywords)):
            return True
        if name == "torch.where" and positional == 1:
            return True
    func = call.func
    if type(func) is ast.Name and func.id in READING_BUILTINS:
        return any(type(a) is not ast.Constant for a in call.args)  # ``int(t)``: kcheck.values decides
    if type(func) is not ast.Attribute:
        return False
    method = func.attr
    if method in REDUCTIONS and id(call) in view.tested_calls:
        return True  # ``if (ids < 0).any():``
    if method == "synchronize" or method == "nonzero":
        return True
    if method in SYNC_METHODS:
        return not (call.args or call.keywords)
    return method == "to" and any(type(v) is ast.Constant and v.value == "cpu" for v in _arguments(call))


def _log(view: FileView, call: ast.Call) -> bool:
    """What ``ModuleModel.log_kind`` can call printing or logging (never less)."""
    func = call.func
    if not view.may_be(func, LOG_WORDS):
        return False
    if type(func) is ast.Name and func.id == "print" and "print" not in view.names:
        return True
    if any(q in ("warnings.warn", "tqdm.write", "pprint.pprint") for q in view.qualnames(func)):
        return True
    if type(func) is ast.Attribute and func.attr in LOG_METHODS:
        base = dotted(func.value) or ""
        return base.split(".")[-1] in LOGGER_NAMES or base.startswith("logging") or "logging" in view.qualnames(func.value)
    return False


def _compile(view: FileView, call: ast.Call) -> bool:
    return view.may_be(call.func, COMPILE_WORDS) and any(
        q in COMPILERS for q in view.qualnames(call.func))


def _gpu_work(view: FileView, call: ast.Call) -> bool:
    """What :func:`gpu_work` can call a launch (never less; awaited calls are not told apart)."""
    names = view.qualnames(call.func)
    if names and all(NOT_A_LAUNCH.search(n) for n in names):
        return False
    if any(n.startswith("torch.") and not n.startswith(("torch.cuda.Event", "torch.cuda.synchronize")) for n in names):
        return True
    func = call.func
    if type(func) is ast.Subscript:
        value = func.value
        return type(value) is ast.Name and (value.id in GPU_WORK_NAMES or value.id in view.names)
    if type(func) is ast.Name:
        return func.id in GPU_WORK_NAMES
    return type(func) is ast.Attribute and (
        func.attr in GPU_METHODS or type(func.value) is ast.Name and func.value.id in GPU_WORK_NAMES)


CLASSIFY = {"sync": _sync, "log": _log, "compile": _compile, "gpu-work": _gpu_work}
WORDS = {"sync": SYNC_WORDS, "log": LOG_WORDS, "compile": COMPILE_WORDS}

# The family's facts (:mod:`kcheck.facts`): "<region> reaches <call class>".
REGION_KINDS = {"timed": TIMED, "capture": ("graph-capture",), "hot-path": ("hot-path",), "host-timer": ("host-timer",)}
for _region, _what in (("timed", "sync"), ("capture", "sync"), ("hot-path", "sync"), ("timed", "log"),
                       ("capture", "log"), ("hot-path", "log"), ("timed", "compile"), ("hot-path", "compile"),
                       ("host-timer", "gpu-work")):
    facts.register(f"{_region} reaches {_what}",
                   lambda summary, config, kinds=REGION_KINDS[_region], what=_what:
                   region_reaches(summary, kinds, what, config))


def region_calls(model, kinds: tuple[str, ...], follow: Callable | None = None
                 ) -> Iterator[tuple[object, cst.Call, cst.Call | None]]:
    """(region, call, via) for every call inside a region of one of ``kinds``, each call once
    (``follow``: as in :meth:`kcheck.model.ModuleModel.calls_in`)."""
    seen: set[int] = set()
    for region in model.timed_regions:
        if region.kind not in kinds:
            continue
        roots = [n for n in region.nodes if id(n) not in region.exempt]
        for call, via in model.calls_in(roots, follow=follow):
            if id(call) not in seen and id(call) not in region.exempt:
                seen.add(id(call))
                yield region, call, via


def report_calls(rule, kinds: tuple[str, ...], classify: Callable, template: str | Callable) -> None:
    """Report each call in ``kinds`` regions that ``classify(call)`` names, where it is written (see
    ``through``); ``template`` is the message, or a function of (region, call) that picks it (None:
    not a finding in that region)."""
    model = rule.model
    seen: set[int] = set()
    for region, call, via in region_calls(model, kinds):
        what = classify(call)
        if not what:
            continue
        text = template(region, call) if callable(template) else template
        if text is None or not first_in_statement(model, call, seen):
            continue
        rule.report(call, text.format(what=what, helper=through(model, call, via), region=region.label),
                    line=native_wait_line(rule, call))


# -- the project index's answers per function -----------------------------------------------------
#
# What kind of code a function is and where its loops over steps are is decided once, by the project
# index over the ``ast`` (``kcheck.project.file_facts``), and reaches the rules through the file's
# configuration (``Config.contexts``, ``Config.step_loops``). A file checked on its own text, with no
# project scan around it, asks the index's same function of its own tree.


def _scope_index(model) -> tuple[dict[str, str], dict[str, tuple[int, ...]]]:
    found = model.__dict__.get("_scope_index")
    if found is None:
        config = model.config
        if config.indexed:
            found = dict(config.contexts), dict(config.step_loops)
        else:
            found = _own_answers(model)
        model.__dict__["_scope_index"] = found
    return found


def _own_answers(model) -> tuple[dict[str, str], dict[str, tuple[int, ...]]]:
    import warnings

    from kcheck.project import file_facts, scope_answers

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(model.module.code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}, {}
    answers = scope_answers(model.path, file_facts(tree, model.path))
    return dict(answers["contexts"]), dict(answers["step_loops"])


def context(model, function) -> str | None:
    """Why ``function`` is not serving code that may run every step (the index's
    ``function_context`` for that definition), or None."""
    if type(function) is not cst.FunctionDef:
        return None
    contexts = _scope_index(model)[0]
    return contexts.get("*") or contexts.get(model.scope_names.get(id(function), function.name.value))


def step_loops(model, function) -> list[cst.CSTNode]:
    """The loops over steps in ``function``'s own body that the index found (``kcheck.project.
    step_loops``: the outermost that do not train), matched to the libcst ``for``/``while`` nodes by
    their place among the function's own loop statements."""
    if type(function) is not cst.FunctionDef:
        return []
    ordinals = _scope_index(model)[1].get(model.scope_names.get(id(function), function.name.value))
    if not ordinals:
        return []
    own = [n for n in walk(function.body, into_scopes=False) if type(n) in (cst.For, cst.While)]
    return [own[k] for k in ordinals if k < len(own)]


def native_wait_line(rule, call: cst.Call) -> int | None:
    """For a call of an inline extension whose C++ host code waits for the GPU, the line of the
    file where it waits (the line to change, and the one a reviewer reads); None otherwise."""
    launch = rule.model.launch_sites.get(id(call))
    if launch is None or not launch.host_sync:
        return None
    return wait_line(rule.context.source, launch.name.split(".")[-1], launch.host_sync)


def first_in_statement(model, call: cst.Call, seen: set[int]) -> bool:
    """Whether ``call`` is the first a rule reports in its statement (``x.cpu().numpy()``,
    ``if a.any().item() or b.any().item():``: one finding for the statement), recording it in ``seen``."""
    stmt = next((a for a in model.ancestors(call) if type(a) in (cst.SimpleStatementLine, cst.If, cst.While)),
                call)
    if id(stmt) in seen:
        return False
    seen.add(id(stmt))
    return True


def through(model, call: cst.Call, via: cst.Call | None) -> str:
    """How a region reaches a call written in a helper: reported where it is written (where the fix
    goes, once however many regions reach it), the message says through which call."""
    if via is None:
        return ""
    where = model.context_of(call) or "the module"
    name = model.dotted(via.func) or ""
    if name.rsplit(".", 1)[-1] == where.rsplit(".", 1)[-1]:
        return f" (in {where}())"  # the helper the region calls
    return f" (in {where}(), reached through {name}())"


GPU_WORK_NAMES = {"torch", "kernel", "fn", "func", "model", "op", "launch"}
# torch calls that queue no kernel: device bookkeeping and memory statistics.
NOT_A_LAUNCH = re.compile(
    r"^torch\.(get_device_module(\(\))?(\.\w+)?|(cuda|xpu|accelerator)\.(reset_peak_memory_stats|max_memory_allocated|"
    r"memory_allocated|memory_reserved|max_memory_reserved|memory_stats|empty_cache|set_device|current_device|"
    r"device_count|get_device_name|is_available)"
    # checkpoint and file I/O: the host writes or reads, no kernel is queued
    r"|save|load|distributed\.checkpoint\.\w+(\.\w+)*)$")
# A torch factory that makes a host tensor unless it is given a device.
FACTORIES = {"zeros", "ones", "empty", "full", "tensor", "arange"}
GPU_METHODS = {"forward", "cuda"}  # x.forward(...), x.cuda(): GPU work whatever x is


def gpu_work(model, call: cst.Call) -> bool:
    """Whether a call written in a region launches GPU work: a ``torch`` call, a Triton launch
    ``kernel[grid](...)``, or a call of a ``fn``/``model``/``op`` callable. An awaited call
    (``await func(...)``), or any call in an ``async def``, is a coroutine: a request or I/O, not
    a launch."""
    if type(model.parent(call)) is cst.Await:
        return False
    function = model.enclosing_function(call)
    if function is not None and function.asynchronous is not None:
        return False
    name = model.call_name(call) or ""
    if NOT_A_LAUNCH.search(name):
        return False  # device bookkeeping (memory statistics, the device module), no kernel
    if name.startswith("torch.distributed.") and _cpu_collective(model, call):
        return False  # a send/recv over a CPU (gloo) group or of a tensor built on the host
    if _host_operands(model, call):
        return False  # ``torch.mm(x, w)`` of tensors made or moved to the host: CPU work
    if name.startswith("torch.") and not name.startswith(("torch.cuda.Event", "torch.cuda.synchronize")):
        # a tensor built as an argument (``wrapper.plan(torch.arange(n, device=d))``) is not the
        # timed work; the call it is handed to decides
        return type(model.parent(call)) is not cst.Arg
    func = call.func
    if type(func) is cst.Subscript:  # kernel[grid](...) of a Triton kernel or a kernel-like name
        value = func.value
        return type(value) is cst.Name and (value.value in GPU_WORK_NAMES or any(
            k.name.value == value.value for k in model.triton_kernels))
    if type(func) is cst.Name and func.value in GPU_WORK_NAMES:
        return True
    return type(func) is cst.Attribute and func.attr.value in GPU_METHODS or (
        type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value in GPU_WORK_NAMES
    )


def _host_operands(model, call: cst.Call) -> bool:
    """Whether a call works on host tensors only: the values model puts every argument on the host,
    and one of them is, or is read from, a tensor the function made or moved there (``x =
    torch.randn(n)``, ``w = w.to("cpu")``; ``linear.forward(n, x[i].data_ptr())``)."""
    args = [a.value for a in call.args]
    if not args or any(model.places.place(a) != HOST for a in args):
        return False
    return any(_host_array(model, a) for a in args)


def _host_array(model, expr: cst.CSTNode) -> bool:
    while type(expr) is cst.Subscript or type(expr) is cst.Call and type(expr.func) is cst.Attribute:
        expr = expr.value if type(expr) is cst.Subscript else expr.func.value  # ``x[i].data_ptr()`` reads x
    if type(expr) is not cst.Name:
        return False
    function = model.enclosing_function(expr)
    for node in walk(function.body) if function is not None else ():
        if type(node) is cst.Assign and any(type(t.target) is cst.Name and t.target.value == expr.value
                                             for t in node.targets):
            base = node.value
            while type(base) is cst.Call and type(base.func) is cst.Attribute and type(base.func.value) is cst.Call:
                base = base.func.value  # ``torch.randn(...).to("cpu").contiguous()``: the factory
            if type(base) is cst.Call and (model.call_name(base) or "").startswith("torch."):
                return True
    return False


def _cpu_collective(model, call: cst.Call) -> bool:
    """``dist.send(msg, peer, group=world.cpu_group)``, or ``dist.recv(msg, ...)`` of ``msg =
    torch.zeros(1, dtype=torch.int64)`` made in the same function or its class's ``__init__``
    without a device: a CPU ping-pong, no GPU work."""
    from kcheck.model import walk

    function = model.enclosing_function(call)
    scope = function if function is not None else None
    assigned: dict[str, cst.CSTNode] = {}
    if scope is not None:
        for n in walk(scope):
            if type(n) is cst.Assign and len(n.targets) == 1 and type(n.targets[0].target) is cst.Name:
                assigned[n.targets[0].target.value] = n.value
    for arg in call.args:
        value = arg.value
        if type(value) is cst.Name and value.value in assigned:
            value = assigned[value.value]
        text = model.dotted(value) or ""
        if arg.keyword is not None and arg.keyword.value == "group" and re.search(r"cpu|gloo", text, re.I):
            return True
        if arg.keyword is None and type(value) is cst.Call and (model.call_name(value) or "").split(".")[-1] in FACTORIES \
                and (model.call_name(value) or "").startswith("torch.") \
                and not any(a.keyword is not None and a.keyword.value == "device" for a in value.args):
            return True
    return False


# Debugging tools: a dumper's step() prints by design.
DEBUG_PATH = re.compile(r"(^|/)debug[^/]*(/|\.py$)", re.I)
# Reference implementations: written to be right, not fast (reference.py, ref.py, *_reference.py).
REFERENCE_PATH = re.compile(r"(^|/|_)(ref|reference)\.py$", re.I)
# A debug switch: ``envs.SGLANG_TRACE_X.get()``, ``self.debug``, ``VERBOSE``, ``trace_e2e``,
# ``self.enable_timing``, ``profile``.
DEBUG_FLAG = re.compile(r"(^|_)envs?($|_)|debug|verbose|trace|timing|profil", re.I)


def off_the_step(model, node: cst.CSTNode, serving: bool = False) -> bool:
    """Whether ``node`` runs only off the normal step: in an ``except`` handler or a branch that
    only logs and gives up (error paths), in a branch that never runs (``if False:``; an option no
    caller turns on; ``if p is None:`` where every caller passes ``p``), below a lazy initialiser's
    guard (the project index's ``once_after``), under an ``if`` on a debug switch or one that fills
    the cache its test reads (once per key), or after an early ``if not <debug switch>: return`` in
    its function. On a ``serving`` step (a hot path, not a benchmark's timed call: a harness times
    a module in training mode unless it calls ``.eval()``), also in the body of ``if self.training:``."""
    function = None
    child = node
    off = _scope_params(model, node, model.config.options_off)
    given = _scope_params(model, node, model.config.given_params)
    for anc in model.ancestors(node):
        if type(anc) is cst.ExceptHandler or _error_branch(model, anc):
            return True
        if type(anc) is cst.If and child is not anc.test and off and _option_test(anc.test, off) is not None and (
                (child is anc.body) == _option_test(anc.test, off)):
            return True  # ``if check_inputs:`` where no caller turns ``check_inputs`` on
        if type(anc) in (cst.If, cst.IfExp) and child is not anc.test and given and (
                _none_test(anc.test, given) is not None) and ((child is anc.body) == _none_test(anc.test, given)):
            return True  # ``if seq_len is None:`` where every caller passes ``seq_len``
        if type(anc) is cst.Assert and child is anc.msg:
            return True  # an assert's message is built only when the assert fails
        if type(anc) in (cst.If, cst.IfExp) and child is not anc.test and (
                _names_flag(anc.test) or _diagnostic_env_switch(model, anc.test)):
            # the branch taken when the switch is on: the body of ``if debug:``, the else of
            # ``if not self.enable_timing:`` (whose body is the normal path)
            negated = type(anc.test) is cst.UnaryOperation and type(anc.test.operator) is cst.Not
            if (child is anc.body) != negated:
                return True
        if type(anc) is cst.If and child is anc.body and _fills_cache(model, anc):
            return True
        if type(anc) is cst.If and child is anc.orelse and _fills_cache(model, anc, other=True):
            return True  # the ``else`` that refills what the test found stale
        if type(anc) in (cst.If, cst.While) and child is anc.body and _never_true(anc.test):
            return True  # ``if False:``, ``if 0:``, ``if TYPE_CHECKING:``: a branch that never runs
        if type(anc) is cst.If and child is not anc.test and _on_cuda(anc.test) is not None and (
                (child is anc.body) != _on_cuda(anc.test)):
            return True  # the other side of ``if x.is_cuda:``: the CPU's path
        if serving and type(anc) is cst.If and child is anc.body and _training_mode(anc.test):
            return True  # ``if self.training:``: a module in training mode, never a serving step
        if type(anc) is cst.If and child is not anc.test and _host_copy(anc.test) is not None and (
                (child is anc.body) != _host_copy(anc.test)):
            return True  # the side of ``if meta.seq_lens_cpu is not None:`` taken when the host copy is missing
        if type(anc) is cst.If and child is anc.body and _cpu_conjunct(anc.test):
            return True  # ``if not x.is_cuda and ...:``
        if type(anc) is cst.BooleanOperation and type(anc.operator) is cst.And and child is anc.right \
                and _cpu_conjunct(anc.left):
            return True  # ``not x.is_cuda and torch.equal(x, y)``: evaluated on the CPU's path only
        if type(anc) in (cst.FunctionDef, cst.Lambda):
            function = anc
            break
        child = anc
    if type(function) is cst.FunctionDef and type(function.body) is cst.IndentedBlock:
        guard = dict(model.config.once_after).get(model.scope_names.get(id(function), ""))
        if guard is not None and any(  # below a lazy initialiser's guard: the first call only
                n is stmt for stmt in function.body.body[guard + 1:] for n in model.ancestors(node)):
            return True
        for i, stmt in enumerate(function.body.body):
            if any(n is stmt for n in model.ancestors(node)):
                if i and any(_lazy_guard(model, function, j) for j in range(i)):
                    return True  # below ``if hasattr(self, "_layout"): return ...`` that the rest fills
                break
            if type(stmt) is cst.If and (_names_flag(stmt.test) or _on_cuda(stmt.test) or _host_copy(stmt.test)
                                         or off and _option_test(stmt.test, off) is False) \
                    and type(stmt.body) is cst.IndentedBlock and _exits(stmt.body):
                # below ``if not <debug switch>: return``, ``if x.is_cuda: return kernel(x)`` or
                # ``if meta.lens_cpu is not None: return <host path>``
                return True
    return False


def _scope_params(model, node: cst.CSTNode, pairs: tuple[tuple[str, str], ...]) -> set[str]:
    """The parameters of ``node``'s function among the index's ``(function, parameter)`` answers:
    ``Config.options_off`` (options no caller turns on), ``Config.given_params`` (None defaults
    every caller overrides)."""
    if not pairs:
        return set()
    function = model.enclosing_function(node)
    scope = model.scope_names.get(id(function), "") if function is not None else ""
    return {param for name, param in pairs if name == scope}


def _none_test(test: cst.CSTNode, given: set[str]) -> bool | None:
    """True for ``if p is None:``, False for ``if p is not None:``, of a parameter in ``given``; None
    for any other test."""
    if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.left) is cst.Name \
            and test.left.value in given:
        c = test.comparisons[0]
        if type(c.comparator) is cst.Name and c.comparator.value == "None":
            return True if type(c.operator) is cst.Is else False if type(c.operator) is cst.IsNot else None
    return None


def _option_test(test: cst.CSTNode, off: set[str]) -> bool | None:
    """True for ``if option:``, False for ``if not option:``, None for any other test."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = _option_test(test.expression, off)
        return None if inner is None else not inner
    return True if type(test) is cst.Name and test.value in off else None


def _host_copy(test: cst.CSTNode) -> bool | None:
    """True for a test that a host copy of the step's metadata is at hand (``meta.seq_lens_cpu is not
    None``, ``self._has_cpu_track_metadata(batch)``, a bare ``meta.lens_cpu``), False for its
    negation, None for any other test. An engine fills such copies when it builds the step's
    metadata, so the device read on the other side is a fallback for callers that do not."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = _host_copy(test.expression)
        return None if inner is None else not inner
    if type(test) is cst.Comparison and len(test.comparisons) == 1:
        c = test.comparisons[0]
        if type(c.comparator) is cst.Name and c.comparator.value == "None" and type(c.operator) in (cst.Is, cst.IsNot) \
                and host_tensor(test.left):
            return type(c.operator) is cst.IsNot
        return None
    if type(test) is cst.Call and type(test.func) in (cst.Name, cst.Attribute):
        name = test.func.value if type(test.func) is cst.Name else test.func.attr.value
        return True if re.match(r"_*(has|have|use)_\w*(cpu|host)", name) else None
    if type(test) in (cst.Name, cst.Attribute):  # ``meta.lens_cpu``; ``_is_cpu`` asks which backend this is
        last = test.value if type(test) is cst.Name else test.attr.value
        return True if host_tensor(test) and not re.match(r"_*is_", last) else None
    return None


def _cpu_conjunct(test: cst.CSTNode) -> bool:
    """A test that holds only off the GPU: ``not x.is_cuda``, or an ``and`` with such a part."""
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return _cpu_conjunct(test.left) or _cpu_conjunct(test.right)
    return _on_cuda(test) is False


def _exits(block: cst.IndentedBlock) -> bool:
    """Whether a block leaves its function: a ``return`` among its statements, or a last ``raise``
    (``if x.is_cuda: ...; return kernel(x); raise ValueError(...)``)."""
    simple = [s for s in block.body if type(s) is cst.SimpleStatementLine]
    return any(type(x) is cst.Return for s in simple for x in s.body) or bool(block.body) and type(
        block.body[-1]) is cst.SimpleStatementLine and type(block.body[-1].body[-1]) is cst.Raise


def _on_cuda(test: cst.CSTNode) -> bool | None:
    """True for a test that a tensor is on the GPU (``x.is_cuda``, ``x.device.type == "cuda"``),
    False for its negation, None for any other test."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = _on_cuda(test.expression)
        return None if inner is None else not inner
    if type(test) is cst.Attribute and test.attr.value == "is_cuda":
        return True
    if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.left) is cst.Attribute \
            and test.left.attr.value == "type" and type(test.comparisons[0].comparator) is cst.SimpleString:
        equal = type(test.comparisons[0].operator) is cst.Equal
        unequal = type(test.comparisons[0].operator) is cst.NotEqual
        if test.comparisons[0].comparator.evaluated_value == "cuda" and (equal or unequal):
            return equal
    return None


def _training_mode(test: cst.CSTNode) -> bool:
    """A test that a module is in training mode (``self.training``, ``module.training``, alone or
    as one operand of an ``and``): serving runs modules in eval mode."""
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return _training_mode(test.left) or _training_mode(test.right)
    return type(test) is cst.Attribute and test.attr.value == "training"


def _error_branch(model, block: cst.CSTNode) -> bool:
    """``else: print(f"[ERROR] unsupported backend {b}"); return None``: a branch that only logs and
    then gives up (``return``, ``return None``), or any branch that ends by raising, is an error path."""
    if type(block) is not cst.IndentedBlock or type(model.parent(block)) not in (cst.If, cst.Else):
        return False
    *body, last = block.body
    if type(last) is cst.SimpleStatementLine and any(type(x) is cst.Raise for x in last.body):
        return True  # a branch that ends by raising: what it does first (a debug message) is the error's
    if not (type(last) is cst.SimpleStatementLine and len(last.body) == 1 and (
        type(last.body[0]) is cst.Raise or type(last.body[0]) is cst.Return and (
            last.body[0].value is None or type(last.body[0].value) is cst.Name and last.body[0].value.value == "None"))):
        return False
    return bool(body) and all(
        type(s) is cst.SimpleStatementLine and all(
            type(x) is cst.Expr and type(x.value) is cst.Call and model.log_kind(x.value) for x in s.body)
        for s in body)


def _fills_cache(model, node: cst.If, other: bool = False) -> bool:
    """``if _handles.get(dev) is None: _handles[dev] = create(); print(...)``: a branch that fills
    the cache its test reads runs once per key, not on every step. So does a lazy first-call
    set-up: ``if self.step_index is None: self._init_step_index(t)``, where the test reads a
    property and the branch (or a method of the class it calls) sets the attribute behind it
    (``self._step_index``). With ``other``: the ``else`` of a test that the cache holds what is
    wanted (``if self._c is not None and self._c[:2] == key: ... else: self._c = (*key, build())``).

    What is filled must outlive the call: an attribute, a container filled by subscript, or a name
    the function declares ``global``/``nonlocal``. A local name the branch rebinds (``if x is None:
    x = default()``, ``if not found: found = scan()``) is an ordinary branch, taken on every call
    that needs it."""
    from kcheck.model import walk

    if not (_presence_test(node.test) if other else _absence_test(node.test)):
        return False  # ``if (ids < 0).any(): ids = ids.clamp(min=0)`` fixes data on every step
    tested = {model.dotted(n) for n in walk(node.test) if type(n) in (cst.Name, cst.Attribute)}
    tested |= {asked for n in walk(node.test) if (asked := _hasattr_asks(model, n))}
    tested.discard(None)
    # ``self.step_index`` is read through a property whose state is ``self._step_index``
    tested |= {f"{head}._{attr}" for head, _, attr in (t.rpartition(".") for t in tested)
               if head and not attr.startswith("_")}
    function = model.enclosing_function(node)
    declared = _declared(function) if function is not None else None
    # a local fetched from a cache (``compiled = self._compiled.get(key)``, ``k = _cache[key]``):
    # the branch fills the cache it came from
    for n in walk(function.body) if function is not None else ():
        if type(n) is cst.Assign and len(n.targets) == 1 and model.dotted(n.targets[0].target) in tested:
            value = n.value
            source = value.func.value if type(value) is cst.Call and type(value.func) is cst.Attribute \
                and value.func.attr.value == "get" else value.value if type(value) is cst.Subscript else None
            if type(source) is cst.Attribute or type(source) is cst.Name and declared is not None and \
                    source.value in declared | model.module_names():
                tested = tested | {model.dotted(source)}
    body = node.orelse if other else node.body
    if _assigns(model, body, tested, declared):
        return True
    # a method of the class called in the branch that sets what the test reads (one level down)
    return any(type(n) is cst.Call and type(n.func) is cst.Attribute and type(n.func.value) is cst.Name
               and n.func.value.value in ("self", "cls") and (target := model.callee(n)) is not None
               and _assigns(model, target.body, tested, None) for n in walk(body))


def _lazy_guard(model, function, i: int) -> bool:
    """Whether statement ``i`` of ``function`` is a lazy initialiser's guard: an ``if`` that returns
    what was cached (``if hasattr(self, "_layout"): return self._layout``, ``if self._key == key:
    return``, ``if _ws is not None: return _ws``) when the statements after it fill what it tests,
    themselves or through a method of the class (``self._set_layout(...)``): those run once per
    key. The index answers the same for top-level functions and methods (``once_after``, also for
    a file checked alone); this covers the methods of classes defined inside functions."""
    from kcheck.model import walk

    stmt = function.body.body[i]
    if type(stmt) is not cst.If or stmt.orelse is not None or type(stmt.body) is not cst.IndentedBlock \
            or not stmt.body.body or type(stmt.body.body[-1]) is not cst.SimpleStatementLine \
            or type(stmt.body.body[-1].body[-1]) is not cst.Return:
        return False
    tested: set[str] = set()
    parts = [stmt.test]
    while parts:
        part = parts.pop()
        if type(part) is cst.BooleanOperation:
            parts += [part.left, part.right]
        elif type(part) is cst.Call and _hasattr_asks(model, part):
            tested.add(_hasattr_asks(model, part))
        elif type(part) is cst.Comparison and _presence_test(part) or type(part) is cst.Attribute:
            tested |= {t for n in walk(part) if type(n) is cst.Attribute and (t := model.dotted(n))}
    if not tested:
        return False
    declared = _declared(function)
    for rest in function.body.body[i + 1:]:
        if _assigns(model, rest, tested, declared) or any(
                type(n) is cst.Call and type(n.func) is cst.Attribute and type(n.func.value) is cst.Name
                and n.func.value.value == "self" and (target := model.callee(n)) is not None
                and _assigns(model, target.body, tested, None) for n in walk(rest)):
            return True
    return False


def _hasattr_asks(model, node: cst.CSTNode) -> str | None:
    """What ``hasattr(obj, "name")`` asks for, as dotted text (``Fn.kernel``); None for anything else."""
    if type(node) is not cst.Call or type(node.func) is not cst.Name or node.func.value != "hasattr" \
            or len(node.args) != 2 or type(node.args[1].value) is not cst.SimpleString:
        return None
    head = model.dotted(node.args[0].value)
    return f"{head}.{node.args[1].value.evaluated_value}" if head else None


def _declared(function) -> set[str]:
    """The names a function declares ``global`` or ``nonlocal``."""
    from kcheck.model import walk

    return {n.name.value for stmt in walk(function.body, into_scopes=False) if type(stmt) in (cst.Global, cst.Nonlocal)
            for n in stmt.names}


def _presence_test(test: cst.CSTNode) -> bool:
    """A test that something is cached: ``x is not None``, ``k in cache``, ``self._key == key``,
    ``self._c[:2] == (ptr, shape)``, every part of an ``and`` such a test."""
    if type(test) is cst.BooleanOperation:
        return type(test.operator) is cst.And and _presence_test(test.left) and _presence_test(test.right)
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return False
    c = test.comparisons[0]
    if type(c.operator) is cst.IsNot:
        return type(c.comparator) is cst.Name and c.comparator.value == "None"
    if type(c.operator) is cst.In:
        return True
    if type(c.operator) is cst.Equal:
        sides = [x.value if type(x) is cst.Subscript else x for x in (test.left, c.comparator)]
        return any(type(x) is cst.Attribute for x in sides)
    return False


def _never_true(test: cst.CSTNode) -> bool:
    """A test that is false whenever the code runs: ``False``, ``0``, ``None``, ``TYPE_CHECKING``."""
    if type(test) is cst.Name:
        return test.value in ("False", "None", "TYPE_CHECKING")
    if type(test) is cst.Attribute:
        return test.attr.value == "TYPE_CHECKING"
    return type(test) is cst.Integer and test.value in ("0", "0x0")


def _absence_test(test: cst.CSTNode) -> bool:
    """A test for something missing: ``x is None``, ``key not in cache``, ``not self._ready``,
    ``not hasattr(self, "_w")``, or such a test joined with others by ``and``/``or``."""
    kind = type(test)
    if kind is cst.BooleanOperation:
        return _absence_test(test.left) or _absence_test(test.right)
    if kind is cst.UnaryOperation and type(test.operator) is cst.Not:
        return type(test.expression) in (cst.Name, cst.Attribute, cst.Call, cst.Subscript)
    if kind is cst.Comparison:
        return any(type(c.operator) in (cst.Is, cst.NotIn, cst.Equal) and (
            type(c.comparator) is cst.Name and c.comparator.value == "None" or type(c.operator) is cst.NotIn)
            for c in test.comparisons)
    return False


def _assigns(model, body: cst.CSTNode, tested: set[str], declared: set[str] | None = None) -> bool:
    """Whether ``body`` assigns (or subscript-assigns) one of the ``tested`` names. With
    ``declared`` (the function's ``global``/``nonlocal`` names), a bare name counts only when
    declared there or filled by subscript: rebinding a local is no cache."""
    from kcheck.model import walk

    for n in walk(body):
        targets = [t.target for t in n.targets] if type(n) is cst.Assign else [n.target] if type(n) is cst.AnnAssign else []
        for target in targets:
            for el in ([e.value for e in target.elements] if type(target) in (cst.Tuple, cst.List) else [target]):
                sub = type(el) is cst.Subscript
                el = el.value if sub else el
                if type(el) in (cst.Name, cst.Attribute) and model.dotted(el) in tested and (
                        declared is None or sub or type(el) is cst.Attribute or el.value in declared):
                    return True
    return False


# What a diagnostic switch read from the environment is named for: ``_FP8_LOG_SCALES =
# os.environ.get("X_FP8_LOG_SCALES")``, ``DUMP_TENSORS = os.getenv(...)``, ``CHECK_NAN``.
DIAGNOSTIC_WORD = re.compile(r"(^|_)(log|logging|dump|stats|check|checks|nan|debug|verbose|trace|profile)(_|$)", re.I)


def _diagnostic_env_switch(model, test: cst.CSTNode) -> bool:
    """A test of a module-level name bound from the environment (``os.environ``, ``os.getenv``) and
    named for diagnostics (``if _FP8_LOG_SCALES:``): an opt-in switch, off in normal serving."""
    from kcheck.model import walk

    found = model.__dict__.get("_env_switches")
    if found is None:
        found = model.__dict__["_env_switches"] = set()
        for stmt in model.module.body if model.module is not None else ():
            if type(stmt) is not cst.SimpleStatementLine:
                continue
            for small in stmt.body:
                if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name \
                        and any(type(n) is cst.Attribute and model.dotted(n) in ("os.environ", "os.getenv")
                                for n in walk(small.value)):
                    found.add(small.targets[0].target.value)
    return bool(found) and any(type(n) is cst.Name and n.value in found and DIAGNOSTIC_WORD.search(n.value)
                               for n in walk(test))


def _names_flag(test: cst.CSTNode) -> bool:
    from kcheck.model import walk

    return any(type(n) is cst.Name and DEBUG_FLAG.search(n.value) or type(n) is cst.Attribute
               and DEBUG_FLAG.search(n.attr.value) for n in walk(test))


def cpu_device_branch(model, node: cst.CSTNode) -> bool:
    """Whether ``node`` sits in the body of ``if device_type == "cpu":`` (any name or attribute
    spelled with ``device``), of ``if not torch.cuda.is_available():``, or in the ``else`` of ``if
    torch.cuda.is_available():`` (or of a ``use_cuda``-style flag): code that runs only when the work
    is on the CPU."""
    child = node
    for anc in model.ancestors(node):
        if type(anc) in (cst.FunctionDef, cst.Lambda):
            return False
        if type(anc) is cst.If:
            test = anc.test
            if child is anc.body and (_names_cpu_device(test) or type(test) is cst.UnaryOperation
                                      and type(test.operator) is cst.Not and _asks_cuda(model, test.expression)):
                return True
            if type(anc.orelse) is cst.Else and child is anc.orelse and _asks_cuda(model, test):
                return True
        child = anc
    return False


def _asks_cuda(model, test: cst.CSTNode) -> bool:
    """``torch.cuda.is_available()``, or a local bound to it in the function (``use_cuda =
    torch.cuda.is_available()``, also unpacked: ``times, use_cuda = [], torch.cuda.is_available()``)."""
    if type(test) is cst.Call:
        return (model.call_name(test) or "") == "torch.cuda.is_available"
    function = model.enclosing_function(test)
    if type(test) is not cst.Name or function is None:
        return False
    for node in walk(function.body, into_scopes=False):
        if type(node) is cst.Assign:
            for target in node.targets:
                pairs = [(target.target, node.value)]
                if type(target.target) is cst.Tuple and type(node.value) is cst.Tuple \
                        and len(target.target.elements) == len(node.value.elements):
                    pairs = [(t.value, v.value) for t, v in zip(target.target.elements, node.value.elements)]
                if any(type(t) is cst.Name and t.value == test.value and type(v) is cst.Call
                       and _asks_cuda(model, v) for t, v in pairs):
                    return True
    return False


def _names_cpu_device(test: cst.CSTNode) -> bool:
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    left = test.left
    name = left.value if type(left) is cst.Name else left.attr.value if type(left) is cst.Attribute else ""
    if type(left) is cst.Attribute and name == "type" and type(left.value) in (cst.Name, cst.Attribute):
        name = "device"  # ``x.device.type == "cpu"``
    return "device" in name and type(target.operator) is cst.Equal and type(target.comparator) is cst.SimpleString \
        and target.comparator.evaluated_value == "cpu"
