"""Gate helpers for the timing rules (KC407, KC408; KC409 can take ``benchmark_windows``) and KC410.

A gate must be a necessary condition of its rule (see :mod:`kcheck.gate`): each helper here
answers a question about the ``ast`` summary *more loosely* than the libcst model answers it,
never more tightly, so a file the rule would flag always gets through. Where it cannot follow
what the model does (a class body inside a def, defs that do not line up with the summary), it
says yes. Names resolve through :class:`kcheck.rules.measurement.GateFacts` (the import table and
the defs, built once per file for the whole family); what is derived here is kept in
``summary.memo["timing"]``.
"""

from __future__ import annotations

import ast
import re
from functools import cached_property

from kcheck.gate import NESTED_SCOPES, ast_children
from kcheck.model import HOST_TIMERS, MEASUREMENT_FUNCTION, MEASUREMENT_PATH, SYNC_FUNCTIONS, SYNC_METHODS
from kcheck.rules.measurement import GPU_MODULES, gate_facts, uses

# a function that measures to report a number (``benchmark_code``, KC407's ``_benchmark``)
BENCH_FUNCTION = re.compile(r"^_?(bench|time|timeit|timing|measure|run_bench)", re.IGNORECASE)
HOST_TIMER_LASTS = {name.split(".")[-1] for name in HOST_TIMERS}
# the names a timing window, a list of timings or a do_bench call is written with
TIMING_NAMES = HOST_TIMER_LASTS | {"record", "elapsed_time", "do_bench"}
# the last part of every call ``ModuleModel.sync_kind`` may take for a host sync
SYNC_LASTS = {name.split(".")[-1] for name in SYNC_FUNCTIONS} | set(SYNC_METHODS) | {"synchronize", "where", "to"}


def gpu(summary) -> bool:
    """The file imports a GPU library: ``Scope.gpu`` reads the same imports (less star imports)."""
    return any(i.split(".")[0] in GPU_MODULES for i in summary.imports)


def may_time(summary) -> bool:
    """The cheap first test of the timing rules' gates: a GPU import, and a name that a timing
    window, a list of timings or a ``do_bench`` call needs (or an import ending in one)."""
    return gpu(summary) and uses(summary, TIMING_NAMES)


def timing_facts(summary) -> "TimingFacts":
    got = summary.memo.get("timing")
    if got is None:
        got = summary.memo["timing"] = TimingFacts(summary)
    return got


def benchmark_windows(summary) -> list:
    """The shared gate of the rules that judge a benchmark's timing windows (KC407, KC409): in a
    file that may time, the functions (None: module or class level) that may hold one."""
    return timing_facts(summary).benchmark_windows if may_time(summary) else []


def benchmark_device_windows(summary) -> list:
    """``benchmark_windows`` that may also time the device (``TimingFacts.device_windows``): what
    a rule that skips a window unless ``device_timing(region)`` may judge."""
    if not may_time(summary):
        return []
    facts = timing_facts(summary)
    device = {id(f) for f in facts.device_windows}
    return [f for f in facts.benchmark_windows if id(f) in device]


def last(node: ast.AST) -> str:
    """The last part of a called name as written: ``x`` of ``a.b.x`` ("" for anything else)."""
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def keyword(call: ast.Call, name: str):
    """The value of a keyword argument written as a literal, or None."""
    for k in call.keywords:
        if k.arg == name and isinstance(k.value, ast.Constant):
            return k.value.value
    return None


def identifiers(root: ast.AST, nested: bool) -> set[str]:
    """The names under ``root`` that libcst holds as ``Name`` nodes there too: names, attributes,
    parameters, keywords, ``def`` and ``class`` names (a subset of what a rule's ``cst.Name`` scan
    sees, so "a rule sees no such name" implies "none here"). Without ``nested``, nested functions,
    classes and lambdas are left out, as ``nodes_under`` leaves them out."""
    out: set[str] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is ast.Name:
            out.add(node.id)
        elif kind is ast.Attribute:
            out.add(node.attr)
        elif kind is ast.arg:
            out.add(node.arg)
        elif kind is ast.keyword and node.arg:
            out.add(node.arg)
        elif isinstance(node, NESTED_SCOPES):
            if node is not root and not nested:
                continue
            if kind is not ast.Lambda:
                out.add(node.name)
        stack.extend(ast_children(node))
    return out


class TimingFacts:
    """What the timing gates derive from the summary and ``GateFacts``, each part on first use."""

    def __init__(self, summary) -> None:
        self.summary = summary
        self.facts = gate_facts(summary)
        self.path = bool(MEASUREMENT_PATH.search(summary.path))
        self._names: dict[tuple, set[str]] = {}

    def host_timer(self, call: ast.Call) -> bool:
        """A call ``ModuleModel`` may take for a host timer (``time.perf_counter()``, an alias)."""
        func = call.func
        if type(func) is ast.Attribute:
            if func.attr not in HOST_TIMER_LASTS:
                return False
        elif type(func) is not ast.Name or (func.id not in HOST_TIMER_LASTS and func.id not in self.facts.aliases):
            return False
        return not self.facts.qualnames(func).isdisjoint(HOST_TIMERS)

    def in_def_named(self, f, pattern: re.Pattern) -> bool:
        """Whether ``f`` or a def around it is named to match ``pattern``. For ``f`` None (module or
        class level; the model sees the def around a class body) or a def the facts do not know,
        whether any def in the file is."""
        facts = self.facts
        node = facts.node(f) if f is not None else None
        if node is None:
            return any(pattern.match(g.name) for g in self.summary.functions)
        i = self._def_index[id(node)]
        while i >= 0:
            if pattern.match(facts.defs[i].name):
                return True
            i = facts.parents[i]
        return False

    @cached_property
    def _def_index(self) -> dict[int, int]:
        return {id(d): i for i, d in enumerate(self.facts.defs)}

    @cached_property
    def windows(self) -> list:
        """The functions (None: module or class level) where ``ModuleModel`` may find a timed
        region: two ``.record()`` calls, or two host-timer calls. The model pairs them in one block
        of one function; here they need only share the function."""
        records: dict = {}
        timers: dict = {}
        found: dict = {}
        for call, f in self.summary.calls:
            func = call.func
            if type(func) is ast.Attribute and func.attr == "record" and len(call.args) + len(call.keywords) <= 1:
                counts = records
            elif self.host_timer(call):
                counts = timers
            else:
                continue
            key = id(f)
            counts[key] = counts.get(key, 0) + 1
            if counts[key] == 2:
                found[key] = f
        return list(found.values())

    @cached_property
    def device_windows(self) -> list:
        """The windows that may time the device (``device_timing``): two ``record()`` calls in the
        function (an event window), or two host-timer calls and a call that may be a host sync
        (``sync_kind``'s names: ``synchronize``, ``item``, ``cpu``, ...), which a host-timer window
        needs before its stop. The sync may be anywhere in the function here."""
        records: dict = {}
        syncs: set = set()
        called = self.facts.called
        for call, f in self.summary.calls:
            func = call.func
            if type(func) is ast.Attribute and func.attr == "record" and len(call.args) + len(call.keywords) <= 1:
                records[id(f)] = records.get(id(f), 0) + 1
            elif called(call, SYNC_LASTS):
                syncs.add(id(f))
        return [f for f in self.windows if records.get(id(f), 0) >= 2 or id(f) in syncs]

    def paired_windows(self, f) -> list[tuple[list[ast.stmt], ast.stmt | None, bool]] | None:
        """The windows ``ModuleModel`` pairs in ``f``'s own code (``_find_timed_regions``): per block,
        the statements holding an odd number of ``record()`` (host-timer) calls pair up in order,
        and a pair more than one statement apart frames a window; host timers with an odd count
        keep one window from the first to the last. Each window comes as (its statements, the
        innermost loop of ``f`` around its block or None, whether it may time the device: an
        event window, or a host-timer window with a call that may sync in its last statement or
        its stop, where ``synced_before_stop`` needs one). None where the ast cannot mirror what libcst sees: ``f``
        unknown, two statements on one line (one libcst statement), a timer call that only some
        readings of its name make a timer, or a ``record`` the model may take for
        ``torch.cuda.memory``'s."""
        node = self.facts.node(f) if f is not None else None
        if node is None:
            return None
        records: dict[int, dict[int, int]] = {}
        timers: dict[int, dict[int, int]] = {}
        blocks: dict[int, tuple[list, ast.stmt | None]] = {}
        stack: list[tuple[list, tuple, ast.stmt | None]] = [(node.body, (), None)]
        while stack:
            body, chain, in_loop = stack.pop()
            blocks[id(body)] = (body, in_loop)
            for i, stmt in enumerate(body):
                if i and stmt.lineno == body[i - 1].end_lineno:
                    return None  # ``a(); b()``: one statement for libcst
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue  # a def statement runs none of the calls in it
                held = chain + ((id(body), i),)
                loop = stmt if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)) else in_loop
                exprs: list[ast.AST] = []
                for name, value in ast.iter_fields(stmt):
                    if name in ("body", "orelse", "finalbody") and isinstance(value, list):
                        if value:
                            stack.append((value, held, loop))
                    elif name in ("handlers", "cases"):
                        for part in value:
                            exprs += [v for k, v in ast.iter_fields(part) if k != "body" and isinstance(v, ast.AST)]
                            stack.append((part.body, held, loop))
                    elif isinstance(value, ast.AST):
                        exprs.append(value)
                    elif isinstance(value, list):
                        exprs += [v for v in value if isinstance(v, ast.AST)]
                for call in _calls_outside_lambdas(exprs):
                    func = call.func
                    if type(func) is ast.Attribute and func.attr == "record" \
                            and len(call.args) + len(call.keywords) <= 1:
                        if any(q.startswith("torch.cuda.memory") for q in self.facts.qualnames(func)):
                            return None
                        counts = records
                    else:
                        readings = self.facts.qualnames(func) if type(func) in (ast.Name, ast.Attribute) else set()
                        timer = {q in HOST_TIMERS for q in readings}
                        if timer == {True, False}:
                            return None
                        if timer != {True}:
                            continue
                        counts = timers
                    for block, index in held:
                        per = counts.setdefault(block, {})
                        per[index] = per.get(index, 0) + 1
        out: list[tuple[list[ast.stmt], ast.stmt | None, bool]] = []
        for counts, lap in ((records, False), (timers, True)):
            for key, per in counts.items():
                ordered = sorted(i for i, n in per.items() if n % 2)
                if not ordered:
                    continue
                pairs = list(zip(ordered[::2], ordered[1::2]))
                if lap and len(ordered) % 2:
                    pairs = [(ordered[0], ordered[-1])]
                body, in_loop = blocks[key]
                out += [(body[a + 1:b], in_loop, not lap or self._may_sync(body[b - 1]) or self._may_sync(body[b]))
                        for a, b in pairs if b - a > 1]
        return out

    def _may_sync(self, stmt: ast.stmt) -> bool:
        """A call under ``stmt`` that ``sync_kind`` may take for a host sync."""
        return any(type(n) is ast.Call and self.facts.called(n, SYNC_LASTS) for n in ast.walk(stmt))

    @cached_property
    def measured_windows(self) -> list:
        """Windows in measurement code, the only place the model makes timed regions
        (``in_measurement_code``: the path, or a ``test*``/``bench*``/... def around them)."""
        return [f for f in self.windows if self.path or self.in_def_named(f, MEASUREMENT_FUNCTION)]

    @cached_property
    def benchmark_windows(self) -> list:
        """Measured windows in code that measures to report a number (``benchmark_code``): the
        innermost def not ``test*``, and a benchmark path or a ``bench*``/``time*``/... def around."""
        return [f for f in self.measured_windows
                if (f is None or not f.name.lower().startswith(("test", "_test")))
                and (self.path or self.in_def_named(f, BENCH_FUNCTION))]

    @cached_property
    def statements(self) -> list[ast.stmt]:
        """Every statement in the file, at any depth (``GateFacts`` keeps only some)."""
        out: list[ast.stmt] = []
        stack = list(reversed(self.summary.tree.body)) if self.summary.tree is not None else []
        while stack:
            stmt = stack.pop()
            out.append(stmt)
            for name in ("body", "handlers", "orelse", "finalbody", "cases"):
                for part in getattr(stmt, name, ()):
                    stack.extend([part] if isinstance(part, ast.stmt) else part.body)  # a handler, a case
        return out

    def names_in(self, f, part: str) -> set[str] | None:
        """``identifiers`` of ``f``'s def: ``own`` (``nodes_under(fn)``: no nested scopes),
        ``all`` (``nodes_under(fn, nested=True)``) or ``body`` (``nodes_under(fn.body,
        nested=True)``); None when the def is not known."""
        node = self.facts.node(f) if f is not None else None
        if node is None:
            return None
        key = (id(f), part)
        if key not in self._names:
            if part == "body":
                self._names[key] = set().union(*(identifiers(s, nested=True) for s in node.body))
            else:
                self._names[key] = identifiers(node, nested=part == "all")
        return self._names[key]


def _calls_outside_lambdas(roots: list[ast.AST]):
    """The calls under ``roots`` (expressions), not inside a lambda: those libcst finds in the
    statements around them (``_statements_holding`` stops at a lambda)."""
    stack = list(roots)
    while stack:
        node = stack.pop()
        if type(node) is ast.Lambda:
            continue
        if type(node) is ast.Call:
            yield node
        stack.extend(ast_children(node))
