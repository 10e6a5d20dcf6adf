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

import libcst as cst

from kcheck.facts import fact
from kcheck.gate import ast_nodes, dotted, import_bindings
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


MOCKS = {"monkeypatch", "mocker", "Mock", "MagicMock", "AsyncMock", "patch", "SimpleNamespace", "create_autospec"}


def mocked(model, fn: cst.FunctionDef) -> bool:
    """The test runs on stand-ins (``monkeypatch``, ``Mock``, ``patch``, ``SimpleNamespace``): it
    checks plumbing with values chosen so the expected result is known, not a kernel's arithmetic."""
    if any(p.name.value in MOCKS for p in fn.params.params):
        return True
    return any(type(n) is cst.Name and n.value in MOCKS for n in nodes_under(fn, nested=True)) or any(
        last(model.qualname(d.decorator.func if type(d.decorator) is cst.Call else d.decorator)) in MOCKS
        for d in fn.decorators)


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


TIMER_TEXT = r"record|elapsed_time|perf_counter|time\(|time_ns|monotonic|default_timer|do_bench"


def uses(summary, wanted: set[str]) -> bool:
    """The file names one of ``wanted``, or imports it under another name."""
    return bool(summary.all_names & wanted) or any(i.split(".")[-1] in wanted for i in summary.imports)


# -- what the family's facts read from the ast, once per file -------------------------------------


class GateFacts:
    """The ``ast`` counterparts of the import table and of :class:`Scope`, for the family's facts.

    Built once per file (``gate_facts(summary)``, kept in ``summary.memo["measurement"]``) by one walk
    over the statements (imports and definitions): expressions are already in ``summary.calls``.
    Where a local name is imported twice, every reading is kept, so that a fact asking "could this
    be X" errs wide.
    """

    def __init__(self, summary) -> None:
        self.summary = summary
        self.aliases: dict[str, set[str]] = {}  # local name -> the dotted names it was imported as
        self.measured: dict[int, bool] = {}  # id(FunctionSummary) -> in measurement code by its or an outer def's name
        defs: list[ast.AST] = []
        self.class_in_def = False  # a class body inside a def: its calls come with no function
        self._walk(summary.tree.body if summary.tree is not None else [], defs, False, False)
        aligned = len(defs) == len(summary.functions) and all(
            d.name == f.name for (d, _), f in zip(defs, summary.functions))
        self.measured = {id(f): m for (_, m), f in zip(defs, summary.functions)} if aligned else {}
        self.alias_last = {k: {v.split(".")[-1] for v in vs} for k, vs in self.aliases.items()}
        self.whole_file = bool(MEASUREMENT_PATH.search(summary.path)) or any(
            self.lasts(c) & SCOPE_CALLS for c, _ in summary.calls)
        self._module_in_scope = self.whole_file or self.class_in_def or not aligned

    def _walk(self, body, defs, measured: bool, in_def: bool) -> None:
        for stmt in body:
            kind = type(stmt)
            if kind is ast.Import or kind is ast.ImportFrom:
                for local, full in import_bindings(stmt):
                    self.aliases.setdefault(local, set()).add(full)
            elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                inner = measured or bool(MEASUREMENT_FUNCTION.match(stmt.name))
                defs.append((stmt, inner))
                self._walk(stmt.body, defs, inner, True)
            elif kind is ast.ClassDef:
                self.class_in_def |= in_def
                self._walk(stmt.body, defs, measured, in_def)
            else:
                for name in stmt._fields:  # compound statements: their bodies, handlers and cases
                    value = getattr(stmt, name, None)
                    if type(value) is list and value and isinstance(
                            value[0], (ast.stmt, ast.excepthandler, ast.match_case)):
                        for item in value:
                            self._walk([item] if isinstance(item, ast.stmt) else item.body, defs, measured, in_def)

    def lasts(self, call: ast.Call) -> set[str]:
        """Every reading of the last component of the called name (an attribute's own name even
        where the model gives the call none: ``(a - b).abs()``)."""
        func = call.func
        if type(func) is ast.Name:
            return self.alias_last.get(func.id) or {func.id}
        if type(func) is ast.Attribute:
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

    def in_scope(self, f) -> bool:
        """Whether code whose innermost function is ``f`` (None: the module or a class body) may be
        measurement code, as ``Scope.covers`` decides it (undecided: yes)."""
        if self.whole_file:
            return True
        if f is None:
            return self._module_in_scope
        return self.measured.get(id(f), True)


def gate_facts(summary) -> GateFacts:
    got = summary.memo.get("measurement")
    if got is None:
        got = summary.memo["measurement"] = GateFacts(summary)
    return got


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


def int_value(fn: cst.CSTNode | None, node: cst.CSTNode | None, module: cst.Module | None = None,
              depth: int = 3) -> int | None:
    """An integer literal, or a parameter of ``fn`` whose default is one; given the ``module``,
    also a name bound to one literal only (in ``fn``, or at the module's top level: ``repeats =
    3``) and a command-line option's default (``args.repeats`` of
    ``add_argument("--repeats", type=int, default=10)``), the count a script runs with unless told
    otherwise."""
    if type(node) is cst.Integer:
        return int(node.evaluated_value)
    if type(node) is cst.Name and type(fn) is cst.FunctionDef:
        for p in [*fn.params.params, *fn.params.kwonly_params]:
            if p.name.value == node.value:
                return int(p.default.evaluated_value) if type(p.default) is cst.Integer else None
    if module is None:
        return None
    if type(node) is cst.Name:
        for root in ([fn.body] if type(fn) is cst.FunctionDef else []) + [module]:
            values = [s for n in nodes_under(root) if type(n) is cst.SimpleStatementLine
                      for name, s in _assigned(n) if name == node.value]
            if values:
                if len(values) != 1 or type(values[0]) is cst.AugAssign:
                    return None
                value = values[0].value
                if type(value) in (cst.Name, cst.Attribute) and depth:  # ``niters = repeats``
                    return int_value(fn, value, module, depth - 1)
                return int(value.evaluated_value) if type(value) is cst.Integer else None
        return None
    if type(node) is cst.Attribute and type(node.value) in (cst.Name, cst.Attribute):
        return option_default(module, node.attr.value)
    return None


def _assigned(line: cst.SimpleStatementLine):
    """``(name, statement)`` for each plain name a line assigns, augmented assignments included
    (a count that changes is no constant)."""
    for s in line.body:
        if type(s) is cst.Assign:
            for t in s.targets:
                if type(t.target) is cst.Name:
                    yield t.target.value, s
        elif type(s) is cst.AugAssign and type(s.target) is cst.Name:
            yield s.target.value, s
        elif type(s) is cst.AnnAssign and type(s.target) is cst.Name and s.value is not None:
            yield s.target.value, s


def option_default(module: cst.Module, dest: str) -> int | None:
    """The integer default of the command-line option stored as ``dest``
    (``add_argument("--num-iters", type=int, default=10)`` for ``num_iters``), else None."""
    for n in nodes_under(module, nested=True):
        if type(n) is not cst.Call or type(n.func) is not cst.Attribute or n.func.attr.value != "add_argument":
            continue
        flags = [str(a.value.evaluated_value) for a in n.args if a.keyword is None and type(a.value) is cst.SimpleString]
        explicit = next((a.value for a in n.args if a.keyword is not None and a.keyword.value == "dest"), None)
        if type(explicit) is cst.SimpleString:
            names = {str(explicit.evaluated_value)}
        else:
            longs = [f for f in flags if f.startswith("--")] or flags
            names = {longs[0].lstrip("-").replace("-", "_")} if longs else set()
        if dest in names:
            default = next((a.value for a in n.args if a.keyword is not None and a.keyword.value == "default"), None)
            return int(default.evaluated_value) if type(default) is cst.Integer else None
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


# -- the family's facts (kcheck.facts), over the ast ----------------------------------------------

# a function named as the reference an output is checked against, and the reductions it may
# compute in too narrow a type (KC406)
REFERENCE = re.compile(
    r"^_?(ref|reference|naive|native|torch|baseline|golden)(_|$)|_(ref|reference|naive|native|torch|golden)$"
    r"|^forward_native$", re.IGNORECASE)
REDUCTIONS = {"sum", "mean", "var", "std", "softmax", "log_softmax", "logsumexp", "cumsum", "norm", "var_mean",
              "prod"}


@fact("output check")
def checks_output(summary, config) -> bool:
    """Measurement code (:meth:`GateFacts.in_scope`) compares outputs or takes an ``abs()`` or a
    ``norm()`` (a relative error)."""
    if not uses(summary, COMPARES | {"abs", "norm"}):
        return False
    facts = gate_facts(summary)
    return any(facts.lasts(call) & (COMPARES | {"abs", "norm"}) and facts.in_scope(f) for call, f in summary.calls)


@fact("timing")
def takes_a_time(summary, config) -> bool:
    """The file may take a time itself (what :func:`measures` reads, by any reading of the names):
    a timer, an event's ``record``/``elapsed_time``, a benchmark timer or a function named for
    timing called, a harnessed solution class or ``custom_kernel`` defined, or project functions
    that time (``Config.measuring``)."""
    if config.measuring or {"ModelNew", "Model"} & summary.class_names or "custom_kernel" in summary.function_names():
        return True
    facts = gate_facts(summary)
    timers = {n.rsplit(".", 1)[-1] for n in HOST_TIMERS} | BENCH_TIMERS | TIMING_LASTS | {"record"}
    return any(lst in timers or TIMING_CALL.match(lst) or any(q.startswith(("timeit", "torch.utils.benchmark"))
                                                            for q in facts.qualnames(call.func))
               for call, _ in summary.calls for lst in facts.lasts(call))


@fact("reference reduction")
def reference_reduces(summary, config) -> bool:
    """A function named as a reference (not a test): it may reduce in low precision, or be
    called with inputs cast down to 16 bits."""
    return any(REFERENCE.search(f.name) and not f.name.startswith("test") for f in summary.functions)
