"""KC4xx: how tests and benchmarks verify and measure kernels.

These rules apply to test and benchmark code only, decided cheaply:

- a file in measurement code by its path (``test_*.py``, ``*_test.py``, ``conftest.py``, anything
  under ``tests/``, ``bench*``, ``benchmarks/``, ``profil*``, ``perf*``), or that calls
  ``assert_close``, ``allclose`` or ``do_bench``: every function in it;
- elsewhere, functions (and their nested functions) named as measurement code: ``test*``,
  ``bench*``, ``time*``, ``measure*``, ``profil*``, ``perf*``, ``verify*`` or ``check*``.

The same definition of measurement code (:meth:`kcheck.model.ModuleModel.in_measurement_code`)
decides which event windows and host timers the KC2xx rules look at.

The timing rules (KC407-KC409) also need the file to import a GPU library (torch, triton, ...):
a host timer in a CPU-only script measures something else.

The per-dtype tolerance limits (:data:`TOLERANCE_LIMITS`) are data, kept here in one place.
"""

from __future__ import annotations

import ast
import builtins
import re
from functools import cached_property

import libcst as cst

from kcheck.claims import in_kernel_module
from kcheck.gate import ast_nodes, dotted, import_bindings, reachable
from kcheck.model import BENCH_TIMERS, HOST_TIMERS, MEASUREMENT_FUNCTION, MEASUREMENT_PATH
from kcheck.rules.triton import arg, nodes_under  # noqa: F401 - shared helpers, re-exported

SCOPE_CALLS = {"assert_close", "allclose", "do_bench"}
GPU_MODULES = ("torch", "triton", "cupy", "cuda", "jax", "tilelang", "cutlass", "flashinfer", "vllm", "sglang")

# The loosest atol and rtol a comparison may use for an output dtype before it stops checking
# anything. They sit well above torch.testing.assert_close's defaults (bf16: rtol 1.6e-2,
# fp16: rtol 1e-3, fp32: rtol 1.3e-6, atol 1e-5 for all three; see the catalog entry
# verification/tolerances-by-dtype), leaving room for long reductions and TF32, so that only
# tolerances that are far too loose are reported. Quantised outputs (FP8, INT8, FP4) are not judged.
TOLERANCE_LIMITS: dict[str, tuple[float, float]] = {  # dtype -> (atol limit, rtol limit)
    "float64": (1e-5, 1e-5),
    "float32": (1e-3, 1e-3),
    "float16": (5e-2, 5e-2),
    "bfloat16": (1e-1, 1e-1),
}
DTYPE_NAMES = {
    "float64": "float64", "double": "float64", "fp64": "float64",
    "float32": "float32", "fp32": "float32", "tf32": "float32",
    "float16": "float16", "half": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
}
QUANTIZED = re.compile(r"float8|fp8|int8|uint8|int4|fp4|float4|e2m1|mxfp|nvfp|e4m3|e5m2|quant|block_?scaled",
                       re.IGNORECASE)

# Comparisons: the last component of the called name. Those with tolerances take (a, b, rtol, atol).
TOLERANCE_COMPARES = {"assert_close", "assert_allclose", "allclose", "isclose", "assert_verbose_allclose"}
COMPARES = TOLERANCE_COMPARES | {"equal", "array_equal", "assert_equal", "assert_array_equal"}

RANDOM_CALLS = {
    "randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "randperm", "normal", "normal_",
    "uniform_", "random_", "bernoulli", "bernoulli_", "multinomial", "exponential_", "cauchy_", "log_normal_",
    "geometric_", "make_tensor", "uniform", "standard_normal", "load", "load_file",  # real data counts too
}
# Constant inputs; torch.arange and torch.linspace are not among them: their values are distinct,
# which is the right input for an indexing test.
CONSTANT_FACTORIES = {
    "torch.zeros", "torch.ones", "torch.full", "torch.zeros_like", "torch.ones_like", "torch.full_like", "torch.eye",
}
EMPTY_FACTORIES = {"torch.empty", "torch.empty_like", "torch.empty_strided"}
TENSOR_FACTORIES = {name.split(".")[-1] for name in CONSTANT_FACTORIES | EMPTY_FACTORIES} | {
    "tensor", "as_tensor", "from_numpy", "array", "asarray", "arange", "linspace"} | (RANDOM_CALLS - {"load", "load_file"})


# Calls into kernel code by their qualified name: kernel modules and libraries, Triton, fused ops,
# and the communication kernels (custom all-reduce, all-to-all dispatch and combine).
KERNEL_CALL = re.compile(
    r"(^|\.)(ops|_custom_ops|custom_ops|kernels?|csrc|_C|sgl_kernel|flashinfer|liger_kernel|deep_gemm|triton\w*"
    r"|cuda\w*|fla|aiter|cutlass\w*|flash_attn\w*|xformers|fbgemm\w*|quack|tilelang)(\.|$)|kernel|triton|fused|cuda"
    r"|all_?reduce|reduce_?scatter|all_?gather|all_?to_?all|dispatch|combine|symm_mem|quick_?reduce|custom_ar",
    re.IGNORECASE)


# Methods that move or convert a tensor or module (``model.cuda()``, ``x.to("cuda")``), never a kernel.
PLACEMENT = {"cuda", "cpu", "to", "eval", "train", "float", "half", "bfloat16", "double", "contiguous",
             "requires_grad_"}


def kernel_call(model, call: cst.Call) -> bool:
    """A kernel launch or dispatch (as the model found them), or a call into kernel code by name.
    Only the called name counts: in ``HFModel().cuda().eval()`` the receivers are calls of their
    own (judged when met), and ``.cuda()`` places a module or tensor on the device."""
    if id(call) in model.launch_sites:
        return True
    return _kernel_name(model.call_name(call) or model.dotted(call.func) or "")


def _kernel_name(name: str) -> bool:
    """A called name into kernel code (``kernel_call``'s test of the name): not ``torch.*`` nor a
    placement method, and the kernel pattern matches its last call in a chain."""
    if name.startswith("torch.") or last(name) in PLACEMENT:
        return False
    return bool(KERNEL_CALL.search(name.rsplit("().", 1)[-1]))


def _may_be_kernel_call(facts, call: ast.Call) -> bool:
    """Whether :func:`kernel_call` may hold for an ``ast`` call, by every reading of its name: a
    subscripted launch (``kernel[grid](...)``), a ``torch.ops`` or kernel-module launch, or a name
    the kernel pattern matches. Launches through names bound to a registry or an extension are
    the caller's to rule out (``GateFacts.may_reach_kernel``)."""
    func = call.func
    if type(func) is ast.Subscript:
        return True
    names = facts.qualnames(func)
    written = dotted(func)
    if written is not None:
        names = names | {written}
    return any(name.startswith("torch.ops.") or in_kernel_module(name) or _kernel_name(name) for name in names)


MOCKS = {"monkeypatch", "mocker", "Mock", "MagicMock", "AsyncMock", "patch", "SimpleNamespace", "create_autospec"}


def mocked(model, fn: cst.FunctionDef) -> bool:
    """The test runs on stand-ins (``monkeypatch``, ``Mock``, ``patch``, ``SimpleNamespace``): it
    checks plumbing with values chosen so the expected result is known, not a kernel's arithmetic."""
    if any(p.name.value in MOCKS for p in fn.params.params):
        return True
    return any(type(n) is cst.Name and n.value in MOCKS for n in nodes_under(fn, nested=True)) or any(
        last(model.qualname(d.decorator.func if type(d.decorator) is cst.Call else d.decorator)) in MOCKS
        for d in fn.decorators)


def mocked_def(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """What :func:`mocked` certainly finds in a def, read off the ``ast``: a plain parameter, a name
    or an attribute named for a stand-in anywhere in it (each is a libcst ``Name`` too)."""
    return any(a.arg in MOCKS for a in node.args.args) or any(
        (type(n) is ast.Name and n.id in MOCKS) or (type(n) is ast.Attribute and n.attr in MOCKS)
        for n in ast_nodes([node]))


def last(name: str | None) -> str:
    return (name or "").split(".")[-1]


def number(module: cst.Module, node: cst.CSTNode | None) -> float | None:
    """A numeric literal, or a module-level constant holding one, else None."""
    if type(node) in (cst.Integer, cst.Float):
        return float(node.evaluated_value)
    if type(node) is cst.Name:
        for stmt in module.body:
            if type(stmt) is cst.SimpleStatementLine:
                for s in stmt.body:
                    if (type(s) is cst.Assign and len(s.targets) == 1 and type(s.targets[0].target) is cst.Name
                            and s.targets[0].target.value == node.value and type(s.value) in (cst.Integer, cst.Float)):
                        return float(s.value.evaluated_value)
    return None


class Scope:
    """Whether a node belongs to test or benchmark code (see the module docstring)."""

    def __init__(self, rule) -> None:
        ctx = rule.context
        self.model = model = rule.model
        cached = model.__dict__.get("_measurement_scope")
        if cached is None:
            calls_scope = any(type(n) is cst.Call and last(model.call_name(n)) in SCOPE_CALLS
                              for n in nodes_under(ctx.module, nested=True))
            gpu = any(q.split(".")[0] in GPU_MODULES for q in model.imports.values())
            cached = model.__dict__["_measurement_scope"] = (bool(MEASUREMENT_PATH.search(ctx.path)) or calls_scope, gpu)
        self.whole_file, self.gpu = cached

    def covers(self, node: cst.CSTNode) -> bool:
        return self.whole_file or self.model.in_measurement_code(node)

    def functions(self) -> list[cst.FunctionDef]:
        return [fn for defs in self.model.functions.values() for fn in defs if self.covers(fn)]


TIMER_NAMES = {"record", "elapsed_time", "perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic",
               "monotonic_ns", "default_timer", "do_bench"}
TIMER_TEXT = r"record|elapsed_time|perf_counter|time\(|time_ns|monotonic|default_timer|do_bench"


def uses(summary, wanted: set[str]) -> bool:
    """The file names one of ``wanted``, or imports it under another name."""
    return bool(summary.all_names & wanted) or any(i.split(".")[-1] in wanted for i in summary.imports)


# -- gates: what the KC4xx rules' gates derive from the ast summary, once per file -------------------


class GateFacts:
    """The ast counterparts of what :class:`Scope` and the model tell the rules, for the gates.

    Built once per file (``gate_facts(summary)``, kept in ``summary.memo["measurement"]``) by one walk
    over the statements only (imports, function definitions, assignments): expressions are already
    in ``summary.calls``. Names resolve through the import table as ``ModuleModel.qualname`` does;
    where a local name is imported twice, every reading is kept, so that a gate asking "could this
    be X" stays a necessary condition.
    """

    def __init__(self, summary) -> None:
        self.summary = summary
        self.aliases: dict[str, set[str]] = {}  # local name -> the dotted names it was imported as
        self.constants: dict[str, list[float]] = {}  # module-level NAME = number
        self.quantized: dict[int, bool] = {}  # id(function) -> a quantised call in its own body (KC402's gate)
        self.names_quantized: dict[int, bool] = {}  # id(function) -> a quantised type named around it (KC402's gate)
        self._reaches_kernel: dict[int, bool] = {}  # id(function) -> may_reach_kernel's answer
        defs: list[ast.AST] = []  # every def, in the order of ``summary.functions``
        parents: list[int] = []  # index of the enclosing def in ``defs``, or -1
        self.class_parents: list[int] = []  # index of the def around each class (-1: none)
        self.assigns: dict[int, list[ast.Assign]] = {}  # def index (-1: top level) -> its own Assign statements
        self._walk(summary.tree.body if summary.tree is not None else [], defs, parents, -1, -1)
        functions = summary.functions
        self.aligned = len(defs) == len(functions) and all(d.name == f.name for d, f in zip(defs, functions))
        index = {id(f): i for i, f in enumerate(functions)} if self.aligned else {}
        self._index = index
        self.defs = defs
        self.parents = parents
        self.alias_last = {k: {v.split(".")[-1] for v in vs} for k, vs in self.aliases.items()}
        # functions in measurement code by name: their own or an enclosing function's
        measured: list[bool] = []
        for i, d in enumerate(defs):
            measured.append(bool(MEASUREMENT_FUNCTION.match(d.name)) or (parents[i] >= 0 and measured[parents[i]]))
        self.measured = measured
        # ``summary.calls`` gives None as the function of code in a class body, even in a class
        # defined inside a def, where the model sees the def around it
        self.class_in_def = any(p >= 0 for p in self.class_parents)
        class_in_measured = any(p >= 0 and measured[p] for p in self.class_parents)
        self.whole_file = bool(MEASUREMENT_PATH.search(summary.path)) or any(
            self.called(c, SCOPE_CALLS) for c, _ in summary.calls)
        self._module_in_scope = self.whole_file or class_in_measured or not self.aligned

    def _walk(self, body, defs, parents, parent: int, owner: int | None) -> None:
        """``parent``: the innermost enclosing def (-1: none); ``owner``: whose own statements
        these are (the def's index, -1 for the module, None in a class body)."""
        for stmt in body:
            kind = type(stmt)
            if kind is ast.Import or kind is ast.ImportFrom:
                for local, full in import_bindings(stmt):
                    self.aliases.setdefault(local, set()).add(full)
            elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                defs.append(stmt)
                parents.append(parent)
                self._walk(stmt.body, defs, parents, len(defs) - 1, len(defs) - 1)
                continue
            elif kind is ast.ClassDef:
                self.class_parents.append(parent)
                self._walk(stmt.body, defs, parents, parent, None)
                continue
            elif kind is ast.Assign:
                if owner is not None:
                    self.assigns.setdefault(owner, []).append(stmt)
                if owner == -1 and len(stmt.targets) == 1 and type(stmt.targets[0]) is ast.Name:
                    value = _number(stmt.value)
                    if value is not None:
                        self.constants.setdefault(stmt.targets[0].id, []).append(value)
                continue
            for name in stmt._fields:  # compound statements: their bodies, handlers and cases, in order
                value = getattr(stmt, name, None)
                if type(value) is list and value and isinstance(value[0], (ast.stmt, ast.excepthandler, ast.match_case)):
                    for item in value:
                        if isinstance(item, ast.stmt):
                            self._walk([item], defs, parents, parent, owner)
                        else:
                            self._walk(item.body, defs, parents, parent, owner)

    # -- names --------------------------------------------------------------------------------------

    def called(self, call: ast.Call, wanted) -> bool:
        """Whether the call's name could end in one of ``wanted`` (``last(model.call_name(call))``)."""
        func = call.func
        if type(func) is ast.Attribute:
            return func.attr in wanted
        if type(func) is ast.Name:
            lasts = self.alias_last.get(func.id)
            return func.id in wanted if lasts is None else not lasts.isdisjoint(wanted)
        return False

    def lasts(self, call: ast.Call) -> set[str]:
        """Every reading of ``last(model.call_name(call))`` ("" where the name is not dotted)."""
        func = call.func
        if type(func) is ast.Name:
            return self.alias_last.get(func.id) or {func.id}
        if type(func) is ast.Attribute and dotted(func) is not None:
            return {func.attr}
        return {""}

    def qualnames(self, node: ast.AST) -> set[str]:
        """Every reading of ``model.qualname(node)`` (empty where it is None)."""
        name = dotted(node)
        if name is None:
            return set()
        head, dot, rest = name.partition(".")
        bare = head[:-2] if head.endswith("()") else head
        if bare not in self.aliases:
            return {name}
        suffix = "()" if head.endswith("()") else ""
        return {f"{full}{suffix}{dot}{rest}" for full in self.aliases[bare]}

    # -- functions ----------------------------------------------------------------------------------

    def node(self, f) -> ast.AST | None:
        """The ast ``def`` of a ``FunctionSummary`` (None if the walk and the summary disagree)."""
        i = self._index.get(id(f))
        return None if i is None else self.defs[i]

    def in_scope(self, f) -> bool:
        """Whether code whose innermost function is ``f`` (None: the module or a class body) may be
        measurement code, as ``Scope.covers`` decides it. Without the ast ``def`` at hand, yes."""
        if self.whole_file:
            return True
        if f is None:
            return self._module_in_scope
        i = self._index.get(id(f))
        return True if i is None else self.measured[i]

    def chain(self, f) -> list[ast.AST]:
        """``f``'s def and the defs around it, innermost first (none without the ast at hand)."""
        i = self._index.get(id(f), -1) if f is not None else -1
        out = []
        while i >= 0:
            out.append(self.defs[i])
            i = self.parents[i]
        return out

    def within(self, f) -> set[int]:
        """ids of the summaries of ``f`` and every def nested in it (at any depth)."""
        i = self._index.get(id(f))
        if i is None:
            return set()
        inside = {i}
        for j in range(i + 1, len(self.defs)):  # nested defs follow their parent in pre-order
            if self.parents[j] in inside:
                inside.add(j)
            else:
                break
        functions = self.summary.functions
        return {id(functions[j]) for j in inside}

    def may_reach_kernel(self, f) -> bool:
        """Whether a call that ``calls(model, fn.body)`` reaches from ``f``'s def may be a kernel
        call (:func:`kernel_call`): one written in ``f`` or in a same-module function it names, to
        three calls down (every definition of a name counts), that may be a kernel call by any
        reading of its name. Always yes where calls of plain names can be launches (a kernel
        registry, a built extension in the file)."""
        if self.launches_by_binding:
            return True
        got = self._reaches_kernel.get(id(f))
        if got is None:
            summary = self.summary
            helpers = reachable(summary, f.names, 3)
            got = self._reaches_kernel[id(f)] = any(
                _may_be_kernel_call(self, call) for call, g in summary.calls
                if g is not None and (g is f or g.name in helpers))
        return got

    @cached_property
    def launches_by_binding(self) -> bool:
        """Whether calls of plain names may be launches to the model: names bound to an extension
        built here (``torch.utils.cpp_extension``) or looked up in a module-level dict (a registry)."""
        summary = self.summary
        return "cpp_extension" in summary.all_names or any("cpp_extension" in i for i in summary.imports) or any(
            type(s) in (ast.Assign, ast.AnnAssign) and type(s.value) is ast.Dict and s.value.keys
            for s in (summary.tree.body if summary.tree is not None else ()))

    def own_assigns(self, f) -> list[ast.Assign]:
        """The ``=`` statements in ``f``'s body, outside nested defs and classes."""
        i = self._index.get(id(f))
        return [] if i is None else self.assigns.get(i, [])


def gate_facts(summary) -> GateFacts:
    got = summary.memo.get("measurement")
    if got is None:
        got = summary.memo["measurement"] = GateFacts(summary)
    return got


def _number(node: ast.AST) -> float | None:
    """A numeric literal (not a bool), as :func:`number` reads it."""
    if type(node) is ast.Constant and type(node.value) in (int, float):
        return float(node.value)
    return None


def own_nodes(roots: list[ast.AST]):
    """Every node under ``roots`` outside nested defs, classes and lambdas: ``nodes_under`` on the
    ast (``own_nodes(fn.body)`` for a def's body)."""
    return ast_nodes(roots, into_scopes=False)


def calls(model, root: cst.CSTNode, depth: int = 3):
    """Every call under ``root`` and in the same-module helpers it reaches."""
    return [c for c, _ in model.calls_in([root], depth)]


def is_compare(model, call: cst.Call, names=COMPARES) -> bool:
    return last(model.call_name(call)) in names


def dtypes_in(model, nodes) -> set[str]:
    """Canonical dtypes named under ``nodes``; ``quantized`` when an FP8/INT8/FP4 type is named."""
    found: set[str] = set()
    for root in nodes:
        for n in nodes_under(root):
            text = None
            if type(n) is cst.Attribute:
                text = n.attr.value
            elif type(n) is cst.SimpleString:
                text = str(n.evaluated_value)
            elif type(n) is cst.Name:
                text = n.value
            if not text:
                continue
            if QUANTIZED.search(text):
                found.add("quantized")
            elif text in DTYPE_NAMES and (type(n) is not cst.Name or text in ("bfloat16", "float16")):
                found.add(DTYPE_NAMES[text])
    return found


def module_statements(module: cst.Module) -> list[cst.CSTNode]:
    """The module's top-level statements other than function and class definitions."""
    return [s for s in module.body if type(s) not in (cst.FunctionDef, cst.ClassDef)]


# -- timing ------------------------------------------------------------------------------------

# Calls in a timed region that belong to the measurement, not to the work being timed.
MEASUREMENT_CALLS = {
    "record", "synchronize", "elapsed_time", "perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic",
    "monotonic_ns", "default_timer", "append", "range", "len", "print", "zip", "enumerate", "int", "float",
    "Event", "empty_cache", "zero_", "fill_", "item", "replay", "nvtx", "range_push", "range_pop", "extend",
}


def device_timing(region) -> bool:
    """A CUDA-event window, or a host-timer window synchronised before its stop. An unsynchronised
    host-timer window times CPU work, or is KC206's finding (host timers need a sync)."""
    return region.kind == "event-window" or (region.kind == "host-timer" and region.synced_before_stop)


def code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node).strip()


def work_calls(model, nodes) -> list[cst.Call]:
    """The calls a timed region times: everything but the timers, syncs, logging and bookkeeping."""
    out = []
    for root in nodes:
        for n in nodes_under(root):
            if type(n) is cst.Call and (_inside_call(model, n, root) or type(model.parent(n)) is cst.WithItem):
                continue  # an argument of another call (alloc() in torch.tensor([...])) or a context manager
            if type(n) is cst.Call and last(model.dotted(n.func) or code(n.func)) not in MEASUREMENT_CALLS:
                if type(n.func) is cst.Name and n.func.value in BUILTINS and n.func.value not in model.functions:
                    continue  # min(), sorted(), isinstance(): Python's own functions are no GPU work
                if model.log_kind(n) or model.sync_kind(n) or model.compile_kind(n) or type(n.func) is cst.Call:
                    continue  # KC2xx's business, or the call of a compiled callable
                if (model.call_name(n) or "").split(".")[0] in ("torch", "numpy", "np") and last(
                        model.call_name(n)) in TENSOR_FACTORIES:
                    continue  # building a tensor is setup, not the work timed
                if type(n.func) is cst.Attribute and type(n.func.value) is cst.Call:
                    continue  # the outer call of a chain (fn(x).sum()): the inner one is listed
                out.append(n)
    return out


def _inside_call(model, node: cst.CSTNode, root: cst.CSTNode) -> bool:
    for anc in model.ancestors(node):
        if anc is root:
            return False
        if type(anc) is cst.Arg:
            return True
    return False


BUILTINS = frozenset(dir(builtins))


def region_root(model, region) -> cst.CSTNode:
    """The function a region lives in, or the module."""
    if region.function is not None:
        return region.function
    node = region.nodes[0]
    for node in model.ancestors(region.nodes[0]):
        pass
    return node


def int_value(fn: cst.CSTNode | None, node: cst.CSTNode | None) -> int | None:
    """An integer literal, or a parameter of ``fn`` whose default is one."""
    if type(node) is cst.Integer:
        return int(node.evaluated_value)
    if type(node) is cst.Name and type(fn) is cst.FunctionDef:
        for p in [*fn.params.params, *fn.params.kwonly_params]:
            if p.name.value == node.value and type(p.default) is cst.Integer:
                return int(p.default.evaluated_value)
    return None


BENCH_FUNCTION = re.compile(r"^_?(bench|time|timeit|timing|measure|run_bench)", re.IGNORECASE)


def benchmark_code(model, region) -> bool:
    """Code that measures to report a number: a benchmark or timing file, or a function named
    bench*/time*/measure*; not a ``test_*`` function timing for information, nor serving code
    profiling itself (``_profile_prefill_latency``)."""
    fn = region.function
    names = [a.name.value for a in [fn, *model.ancestors(fn)] if type(a) is cst.FunctionDef] if fn else []
    if any(n.lower().startswith(("test", "_test")) for n in names[:1]):
        return False
    if MEASUREMENT_PATH.search(model.path):
        return True
    return any(BENCH_FUNCTION.match(n) for n in names)


def reads_back(region) -> bool:
    """The window accumulates values read back to the host on every step
    (``count += int((q < t).sum().item())``): a host-side statistics loop, not a kernel timing."""
    return any(type(a) is cst.AugAssign and any(
        type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "item"
        for n in nodes_under(a.value)) for node in region.nodes for a in nodes_under(node))


# Timers that a file may call to measure: host clocks, CUDA events' elapsed_time, benchmark timers,
# and torch.utils.benchmark / timeit.
TIMING_LASTS = {"elapsed_time", "blocked_autorange", "adaptive_autorange"}


def measures(model) -> bool:
    """Whether the file takes a time itself: a timed window the model found (CUDA events, a host
    timer, a callable given to ``do_bench``), a call of a host clock, a benchmark timer or
    ``elapsed_time``, or a call of a project function that times (the project index's
    ``Config.measuring``), or of a function named for timing that is not the module's own
    (``bench_kineto``, ``time_variant``, ``timeit(fn, x)``: its body is elsewhere). A file that
    does none of these (a summary over stored results, a leaderboard builder, a prompt template)
    reports figures measured elsewhere."""
    if any(r.kind in ("event-window", "bench-callable", "host-timer") for r in model.timed_regions):
        return True
    if model.config.measuring:
        return True
    for call in model.calls:
        name = model.call_name(call) or ""
        lst = last(name)
        if name in HOST_TIMERS or lst in BENCH_TIMERS or lst in TIMING_LASTS or name.startswith(
                ("timeit.", "torch.utils.benchmark.")):
            return True
        if model.callee(call) is None and TIMING_CALL.match(lst):
            return True  # a timing function from elsewhere (``bench_kineto``, ``timeit(fn, x)``)
    return False


TIMING_CALL = re.compile(r"^_?(bench|benchmark|time|timeit|timed|timing|measure|profile)(_|$)", re.IGNORECASE)
