from __future__ import annotations

import ast
import re

import libcst as cst

from kcheck.model import MEASUREMENT_PATH
from kcheck.rule import Rule
from kcheck.rules.measurement import (
    TIMER_TEXT, Scope, benchmark_code, device_timing, nodes_under, reads_back, region_root, work_calls,
)

FLUSH_WORDS = ("flush", "l2", "clear_cache", "cache_clear")
LOOPS = (ast.For, ast.AsyncFor, ast.While)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# L2 of an H100 or H200 (catalog: hardware/h200-sxm and hardware/h100-sxm, fact l2-size: 50 MB).
L2_BYTES = 50 * 1000 * 1000
ALLOCATORS = {"randn", "rand", "empty", "zeros", "ones", "full", "normal", "randn_like"}
DTYPE_BYTES = {"float64": 8, "double": 8, "int64": 8, "long": 8, "float32": 4, "float": 4, "int32": 4, "int": 4,
               "float16": 2, "half": 2, "bfloat16": 2, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


class TimedWithoutL2Flush(Rule):
    """The same inputs timed over and over with L2 never flushed.

    ## What it does
    In test and benchmark code, finds CUDA-event and host-timer windows that time the same
    call repeatedly — a loop inside the window, or a window inside a loop — when the inputs do
    not rotate with the loop variable (`xs[i % n]` as an argument, or `shard.cuda()` for each
    `shard` of a list: the object whose method is timed) and nothing in that loop or the same-module
    helpers it calls flushes L2 (a name with `flush`, `l2` or `clear_cache` in it; a function that
    flushes in one loop measures there, and its other windows only size the run). A flush before
    the loop (a cache buffer zeroed once, then warm-up and the timed loop) leaves every timed
    iteration after the first on a warm L2, and is reported. Inputs
    that the loop body takes from the loop variable (`x, y = data_sets[i % n]`,
    `inputs_for(idx)`) rotate too. Collectives (`all_reduce`, `all_to_all`, dispatch/combine)
    are not reported: their cost is the interconnect. A timing helper that times only the callable
    it is given, with no caller in the module (a shared utility whose callers live elsewhere), is not
    judged: what it reads is unknown there (one that flushes once, outside its loop, still is). Only code that measures to report a number
    is judged (a benchmark or timing file, or a `bench*`/`time*`/`measure*` function; not a
    `test_*` function timing for information, nor serving code profiling itself), and a window
    that accumulates values read back every step (`count += x.sum().item()`) is a host-side loop,
    not a kernel timing.
    Inputs named for tensors far larger than L2 (MoE expert weights `w1`/`w2`, `fused_experts`,
    `logits` in a file about a vocabulary or cross-entropy), in the timed call or in the callers
    of a timing helper that times a parameter, are not reported either: flushing changes
    nothing for them.
    Nor is a file that allocates a tensor larger than L2 (50 MB on H100 and H200) at the
    shapes it spells out: literal dimensions, or names whose value the file gives (an argparse
    `default=`, under its long option's name or else its short one's, `-M` as `args.M`; a
    parameter default, a constant), as in `torch.randn(args.num_rows,
    args.num_cols, dtype=torch.float32)` with defaults 1024 and 131072 (512 MB), or expert
    weights of `local_experts x 2 * intermediate x hidden` (not one under `if option:` with the
    option a parameter defaulting to False, an opt-in path). An unknown dimension counts as 1, a
    name given several values as its smallest and a `dtype=` the file does not spell out as 2
    bytes, so the estimate is a lower bound for 16-bit data. Whole-model steps
    (`model_runner.decode(...)`, an inference engine's or benchmarker's `run`) stream every
    layer's weights and are not reported either. Nor is a benchmark of host overhead, by its
    module's or timing function's docstring ("the overhead of API logging", "launch overhead"):
    it times the same device work with and without a host-side feature, and L2 is as warm on
    both sides of the difference it reports. Nor is a serving engine's runtime autotuner (a
    module named `*autotun*.py` outside test and benchmark paths), which ranks candidates timed
    alike on live inputs, in the cache state they will run in, and reports no figure.
    `triton.testing.do_bench` flushes L2 itself and is not reported. The rule sees sizes
    only where the file spells them out (not a kernel whose inputs are small but
    whose output is hundreds of MB, nor shapes built from a table of cases), so it reports at
    `info` level.

    ## Why is this bad?
    An H100 has 50 MB of L2 and an H200 the same. Inputs of a few megabytes (a decode batch's
    activations, one layer's norm weight) stay in L2 between iterations, so the kernel reads at
    L2 speed, several times HBM bandwidth, and looks faster than it will be inside a model where
    other layers evict them. Write a buffer larger than L2 between calls (outside the events),
    or rotate among enough copies of the inputs.

    ## Example
    ```python
    start.record()
    for _ in range(100):
        rms_norm(x, w)
    end.record()
    ```

    ## Use instead
    ```python
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    for i in range(100):
        flush.zero_()
        starts[i].record()
        rms_norm(x, w)
        ends[i].record()
    ```
    """

    CODE = "KC409"
    NAME = "timed-without-l2-flush"
    MESSAGE = ("{call}() runs {times} on the same inputs with L2 {flushed}: small inputs stay in L2 and the "
               "number is optimistic (flush L2 or rotate inputs)")
    SEVERITY = "info"
    PREVIEW = True
    KNOWLEDGE = ("measuring/l2-flushing", "hardware/h100-sxm", "hardware/h200-sxm")
    VALID = [
        """
import torch
def bench(fn, x, iters=100):
    fn(x)
    cache = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    for i in range(iters):
        cache.zero_()
        starts[i].record()
        fn(x)
        ends[i].record()
""",
        """
import torch
def bench(fn, xs, iters=100):
    fn(xs[0])
    start.record()
    for i in range(iters):
        fn(xs[i % len(xs)])
    end.record()
""",
    ]
    INVALID = [
        """
import torch
def bench(fn, x, iters=100):
    fn(x)
    start.record()
    for _ in range(iters):
        fn(x)
    end.record()
print(bench(my_kernel, torch.randn(64, 64, device="cuda")))
""",
        """
import time, torch
def bench(fn, x, iters=100):
    fn(x)
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(x)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
print(bench(my_kernel, torch.randn(64, 64, device="cuda")))
""",
    ]
    PREFILTER = (TIMER_TEXT, r"for |while ")
    NEEDS = ("timing",)

    _vocab_found: bool | None = None  # whether the file's text names a vocabulary (``_vocab``)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        scope = Scope(self)
        if not scope.gpu:
            return
        reported: set[int] = set()
        if self._static_bytes() > L2_BYTES:
            return  # the file allocates a tensor larger than L2 at its default shapes: flushing changes little
        if HOST_OVERHEAD.search(original_node.get_docstring() or ""):
            return  # measures a host-side cost: the same device work, warm L2 on both sides of the difference
        if AUTOTUNER.search(model.path) and not MEASUREMENT_PATH.search(model.path):
            return  # a runtime autotuner ranks candidates timed alike on live inputs; no figure is reported
        for region in model.timed_regions:
            if not device_timing(region) or not scope.covers(region.nodes[0]):
                continue
            root = region_root(model, region)
            fn = region.function
            if type(fn) is cst.FunctionDef and HOST_OVERHEAD.search(fn.get_docstring() or ""):
                continue  # a timing function documented as measuring host overhead
            if id(root) in reported or not benchmark_code(model, region) or reads_back(region):
                continue
            loop = next((s for s in region.nodes if type(s) in (cst.For, cst.While)), None)
            times = "repeatedly inside the timed window"
            if loop is None:
                loop = next((a for a in model.ancestors(region.nodes[0]) if type(a) in (cst.For, cst.While)
                             and model.inside(a, root)), None)
                times = "once per timed iteration"
            buffers = self._flush_buffers(root)
            if loop is None or any(self._flushes(other, buffers) for other in nodes_under(root)
                                   if type(other) in (cst.For, cst.While)):
                continue  # no repeated timing, or L2 is flushed on every iteration of a loop here
                # (a window in another loop then only sizes the measurement)
            timed = work_calls(model, region.nodes)
            if not timed:
                continue
            varying = _varying(loop)
            if any(type(n) is cst.Name and n.value in varying for c in timed for part in _operands(c)
                   for n in nodes_under(part)):
                continue  # inputs rotate with the loop (``fn(xs[i % n])``, ``shard.cuda()`` over shards)
            if all(_collective(model, c) for c in timed):
                continue  # a collective moves data between GPUs: L2 is not what it measures
            if self._large_inputs(region, timed):
                continue  # expert weights or vocabulary logits: far larger than L2 already
            site = self._flushes(root, buffers)
            if site is None and self._unknown_work(region, timed):
                continue  # times a callable passed in by callers elsewhere: what it reads is unknown here
            reported.add(id(root))
            flushed = "flushed only outside the timed loop" if site is not None else "never flushed"
            related = ((site, "L2 flushed here, outside the timed loop"),) if site is not None else ()
            self.report(timed[0], call=model.dotted(timed[0].func) or "the timed call", times=times, flushed=flushed,
                        related=related)

    def _large_inputs(self, region, timed) -> bool:
        """The timed inputs are named for tensors far larger than L2 (MoE expert weights ``w1``/``w2``,
        vocabulary logits): in the timed calls, or at the same-module calls of a timing helper whose
        timed call is a parameter (``_timed_loop(lambda: fwd(logits, target), ...)``)."""
        texts = [self.model.dotted(c.func) or "" for c in timed]
        texts += [n.value for c in timed for a in c.args for n in nodes_under(a.value) if type(n) is cst.Name]
        fn = region.function
        if fn is not None:
            params = {p.name.value for p in fn.params.params}
            if any(type(c.func) is cst.Name and c.func.value in params for c in timed):
                for site in self.model.callers(fn):
                    caller = self.model.enclosing_function(site) or site
                    texts += [n.value for n in nodes_under(caller, nested=True) if type(n) is cst.Name]
        return any(LARGE.search(t) or ("logits" in t.lower() and self._vocab()) for t in texts)

    def _unknown_work(self, region, timed) -> bool:
        """The window times only a callable that its function takes as a parameter (``fn()`` in
        ``def cuda_event_us(fn, ...)``) and nothing in this module calls that function: the work
        and its inputs come from callers elsewhere, so whether they fit in L2 is unknown here.
        (A helper that flushes once, outside its timed loop, is reported all the same: that is
        wrong whatever it times.)"""
        fn = region.function
        if type(fn) is not cst.FunctionDef:
            return False
        params = {p.name.value for p in [*fn.params.params, *fn.params.kwonly_params]}
        if not all(type(c.func) is cst.Name and c.func.value in params for c in timed):
            return False
        outer = [a for a in self.model.ancestors(fn) if type(a) is cst.FunctionDef]
        return not any(self.model.callers(f) for f in [fn, *outer])

    def _vocab(self) -> bool:
        """The file is about a vocabulary or cross-entropy (its ``logits`` are a vocabulary's, not a
        router's). Searched once per file: once per timing window made large files quadratic."""
        if self._vocab_found is None:
            self._vocab_found = bool(VOCAB.search(self.context.source))
        return self._vocab_found

    def _static_bytes(self) -> int:
        """The largest tensor the file allocates (``torch.randn``/``empty``/``zeros``/``full``...)
        whose shape it spells out: literal dimensions, or names and ``args.x`` attributes whose
        value the file gives (an argparse ``default=``, a parameter default, a constant). An
        unknown dimension counts as 1 and a name with several values as its smallest, so this is
        a lower bound; the dtype is read from ``dtype=`` (default float32)."""
        values = _int_values(self.model, self.context.module)
        best = 0
        for call in self.model.calls:
            name = self.model.qualname(call.func) or self.model.dotted(call.func) or ""
            if not name.startswith("torch.") or name.rsplit(".", 1)[-1] not in ALLOCATORS:
                continue
            if self._opt_in(call):
                continue  # under ``if option:`` with the option off by default: not what runs
            dims = [a.value for a in call.args if a.keyword is None and not a.star]
            if name.endswith(("full", "normal")) or (dims and type(dims[0]) in (cst.Tuple, cst.List)):
                dims = [e.value for e in dims[0].elements] if dims and type(dims[0]) in (cst.Tuple, cst.List) \
                    else []
            size = 1
            known = 0
            for d in dims:
                v = _int_of(d, values)
                if v is not None and v > 0:
                    size *= v
                    known += 1
            if known < 2:
                continue  # one known dimension says nothing about the tensor
            width = 4
            for a in call.args:
                if a.keyword is not None and a.keyword.value == "dtype":
                    dtype = self.model.dotted(a.value) or ""
                    width = DTYPE_BYTES.get(dtype.rsplit(".", 1)[-1], 1 if "." in dtype else 2)
            best = max(best, size * width)
        return best

    def _opt_in(self, node: cst.CSTNode) -> bool:
        """``node`` runs only under ``if option:`` where ``option`` is a parameter of the function
        around it that defaults to False (``high_precision=False``): an opt-in path."""
        model = self.model
        fn = model.enclosing_function(node)
        if fn is None:
            return False
        off = {p.name.value for p in [*fn.params.params, *fn.params.kwonly_params]
               if type(p.default) is cst.Name and p.default.value == "False"}
        return any(type(a) is cst.If and type(a.test) is cst.Name and a.test.value in off
                   for a in model.ancestors(node) if model.inside(a, fn))

    def _flush_buffers(self, root: cst.CSTNode) -> set[str]:
        """Names ``root`` binds to a value named for flushing (``buffer = torch.empty(flush_size)``)."""
        out = set()
        for n in nodes_under(root):
            if type(n) is cst.Assign and any(
                    any(w in (x.value if type(x) is cst.Name else x.attr.value).lower() for w in FLUSH_WORDS)
                    for x in nodes_under(n.value) if type(x) in (cst.Name, cst.Attribute)):
                out |= {t.target.value for t in n.targets if type(t.target) is cst.Name}
        return out

    def _flushes(self, root: cst.CSTNode, buffers: frozenset | set = frozenset()) -> cst.CSTNode | None:
        """The first node under ``root`` (or in the helpers it calls) that flushes L2, else None."""
        roots = [root] + [c for c, _ in self.model.calls_in([root])]
        for r in roots:
            target = self.model.callee(r) if type(r) is cst.Call else r
            for n in nodes_under(target if target is not None else r):
                text = n.value if type(n) is cst.Name else (n.attr.value if type(n) is cst.Attribute else "")
                if any(w in text.lower() for w in FLUSH_WORDS):
                    return n
                if type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value in ("zero_", "fill_") \
                        and ("cache" in (self.model.dotted(n.func.value) or "").lower()
                             or self.model.dotted(n.func.value) in buffers):
                    return n
        return None


def _int_values(model, module: cst.Module) -> dict[str, int]:
    """Name -> the smallest integer the file gives it: ``add_argument("--num-cols", default=131072)``
    (as ``num_cols``; ``add_argument("-M", default=4096)`` as ``M``), ``def f(n=1024)``, ``HIDDEN = 7168``."""
    found: dict[str, set[int]] = {}
    for node in nodes_under(module, nested=True):
        if type(node) is cst.Call and type(node.func) is cst.Attribute \
                and node.func.attr.value == "add_argument":
            flags = [a.value.evaluated_value for a in node.args if a.keyword is None
                     and type(a.value) is cst.SimpleString and a.value.evaluated_value.startswith("-")]
            # argparse's dest: the first long option, else the first short one (``-M`` -> ``M``)
            flag = next((f for f in flags if f.startswith("--")), flags[0] if flags else None)
            default = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "default"), None)
            dest = next((a.value.evaluated_value for a in node.args if a.keyword is not None
                         and a.keyword.value == "dest" and type(a.value) is cst.SimpleString), None)
            v = _literal_int(default)
            if v is not None and (flag or dest):
                found.setdefault(dest or flag.lstrip("-").replace("-", "_"), set()).add(v)
        elif type(node) is cst.Param and node.default is not None:
            v = _literal_int(node.default)
            if v is not None:
                found.setdefault(node.name.value, set()).add(v)
        elif type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
            v = _literal_int(node.value)
            if v is not None:
                found.setdefault(node.targets[0].target.value, set()).add(v)
    return {k: min(v) for k, v in found.items()}


def _literal_int(node) -> int | None:
    return _int_of(node, {}) if node is not None else None


def _int_of(node, values: dict[str, int]) -> int | None:
    """The integer value of a literal, a known name or ``args.name``, or their ``*``, ``//``, ``<<``, ``**``."""
    if type(node) is cst.Integer:
        return int(node.evaluated_value)
    if type(node) is cst.Name:
        return values.get(node.value)
    if type(node) is cst.Attribute:
        return values.get(node.attr.value)
    if type(node) is cst.BinaryOperation:
        a, b = _int_of(node.left, values), _int_of(node.right, values)
        if a is None or b is None:
            return None
        if type(node.operator) is cst.Multiply:
            return a * b
        if type(node.operator) is cst.FloorDivide and b:
            return a // b
        if type(node.operator) is cst.LeftShift and b < 64:
            return a << b
        if type(node.operator) is cst.Power and b < 64:
            return a ** b
    return None


def _operands(call: cst.Call) -> list[cst.CSTNode]:
    """What a call works on: its arguments, and the object whose method it is."""
    receiver = [call.func.value] if type(call.func) is cst.Attribute else []
    return [*receiver, *(a.value for a in call.args)]


def _targets(loop: cst.CSTNode) -> set[str]:
    if type(loop) is cst.For:
        return {n.value for n in nodes_under(loop.target) if type(n) is cst.Name}
    return set()


def _varying(loop: cst.CSTNode) -> set[str]:
    """The loop variable and the names the loop body assigns from it (``x, y = data[i % n]``,
    ``logits = inputs_for(idx)``): inputs that rotate with the loop."""
    varying = _targets(loop)
    assigns = [n for n in nodes_under(loop.body) if type(n) is cst.Assign]
    for _ in range(3):
        for a in assigns:
            if any(type(n) is cst.Name and n.value in varying for n in nodes_under(a.value)):
                varying |= {n.value for t in a.targets for n in nodes_under(t.target) if type(n) is cst.Name}
    return varying


# Tensors far larger than L2 in any real configuration: MoE expert weights, vocabulary logits, and
# whole-model steps (a serving model runner, an inference engine), which stream every layer's weights.
LARGE = re.compile(r"^w(1|2|13|_?gate_up|_?down)(_|$)|vocab|lm_head|fused_experts"
                   r"|model_runner|engine|benchmarker|\bllm\b", re.IGNORECASE)
VOCAB = re.compile(r"vocab|cross_entropy", re.IGNORECASE)

# A benchmark of host overhead, by its docstring: "measure the overhead of API logging", "Python
# dispatch overhead", "launch overhead". It times the same device work with and without a host-side
# feature, and the difference is the result, which L2 warms equally on both sides.
HOST_OVERHEAD = re.compile(
    r"\b(?:host|cpu|python|launch|logging|log|decorator|wrapper|api|dispatch|hook|tracing|instrumentation)\b"
    r"[\w\s-]{0,30}\boverhead|\boverhead\b[\w\s-]{0,20}\b(?:of|from|in|on)\b[\w\s-]{0,20}"
    r"\b(?:host|cpu|python|launch|logging|log|decorator|wrapper|api|dispatch|hook|tracing|instrumentation)\b",
    re.IGNORECASE)

# A module of serving code named for autotuning (``layers/attention/autotune.py``): it times
# candidate implementations on the live inputs to pick one, each under the same cache state, which
# is the state they will run in; it reports no figure.
AUTOTUNER = re.compile(r"(^|/)[^/]*autotun[^/]*\.py$", re.IGNORECASE)

# Collectives and point-to-point transfers: their cost is the interconnect, not L2 hits.
COLLECTIVE = re.compile(r"all_?reduce|all_?gather|all_?to_?all|reduce_?scatter|broadcast|\bsend|\brecv|a2a|barrier"
                        r"|\bnccl|dispatch|combine", re.IGNORECASE)


def _collective(model, call: cst.Call, depth: int = 2) -> bool:
    """A collective or point-to-point transfer by its name, or a call of a same-module function
    (a ``fwd()`` closure around ``fast_all_to_all(...)``) whose own work is only collectives."""
    if COLLECTIVE.search(model.dotted(call.func) or ""):
        return True
    target = model.callee(call)
    if target is None or depth == 0:
        return False
    inner = work_calls(model, [target.body])
    return bool(inner) and all(_collective(model, c, depth - 1) for c in inner)

