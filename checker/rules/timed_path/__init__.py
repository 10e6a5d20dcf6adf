"""KC2xx: logging and host syncs in timed and per-step paths.

The rules of this family share one question, "which calls run inside this region, directly or
through a same-module helper", answered here over the module model's timed regions.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

import libcst as cst

TIMED = ("event-window", "bench-callable", "host-timer")
SYNC_NAMES = {"synchronize", "item", "cpu", "tolist", "numpy", "nonzero", "where", "unique",
              "masked_select", "repeat_interleave"}
TIMER_NAMES = {"record", "perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
               "default_timer", "do_bench", "do_bench_cudagraph", "bench_gpu_time", "benchmark_fn"}
LOG_NAMES = {"print", "logger", "log", "logging", "LOGGER", "_logger", "_LOGGER", "LOG", "warn", "warnings", "write"}
COMPILE_NAMES = {"compile", "optimize", "load_inline", "load"}
SYNC_TEXT = r"synchronize|\.item\(|\.cpu\(|\.tolist\(|\.numpy\(|nonzero|where\(|unique|masked_select|repeat_interleave|['\"]cpu['\"]"
TIMER_TEXT = r"\.record\(|perf_counter|time\(|monotonic|default_timer|do_bench|bench_gpu_time|benchmark_fn"


def timed_gate(summary, wanted: set[str]) -> bool:
    """A scope that starts a timer and reaches one of ``wanted``; event windows and host timers
    count only in measurement code (see :meth:`kcheck.model.ModuleModel.in_measurement_code`)."""
    from kcheck.model import BENCH_TIMERS, MEASUREMENT_FUNCTION, MEASUREMENT_PATH

    measuring = bool(MEASUREMENT_PATH.search(summary.path))
    return any(
        (s.names & BENCH_TIMERS or (s.names & TIMER_NAMES and (measuring or MEASUREMENT_FUNCTION.match(s.name))))
        and summary.reaches(s, wanted)
        for s in summary.scopes())


def graph_gate(summary, wanted: set[str]) -> bool:
    return any("graph" in s.names and summary.reaches(s, wanted) for s in summary.scopes())


def hot_gate(summary, config, wanted: set[str]) -> bool:
    return any(config.is_hot_path(f.name) and summary.reaches(f, wanted) for f in summary.functions)


def region_calls(model, kinds: tuple[str, ...]) -> Iterator[tuple[object, cst.Call, cst.Call | None]]:
    """(region, call, via) for every call inside a region of one of ``kinds``, each call once."""
    seen: set[int] = set()
    for region in model.timed_regions:
        if region.kind not in kinds:
            continue
        roots = [n for n in region.nodes if id(n) not in region.exempt]
        for call, via in model.calls_in(roots):
            if id(call) not in seen:
                seen.add(id(call))
                yield region, call, via


def report_calls(rule, kinds: tuple[str, ...], classify: Callable, template: str) -> None:
    """Report each call in ``kinds`` regions that ``classify(call)`` names, at the call or at the helper call."""
    model = rule.model
    for region, call, via in region_calls(model, kinds):
        what = classify(call)
        if not what:
            continue
        where = via if via is not None else call
        helper = f" (inside {model.dotted(via.func)}())" if via is not None else ""
        rule.report(where, template.format(what=what, helper=helper, region=region.label))


GPU_WORK_NAMES = {"torch", "kernel", "fn", "func", "model", "op", "launch"}
# torch calls that queue no kernel: device bookkeeping and memory statistics.
NOT_A_LAUNCH = re.compile(
    r"^torch\.(get_device_module(\(\))?(\.\w+)?|(cuda|xpu|accelerator)\.(reset_peak_memory_stats|max_memory_allocated|"
    r"memory_allocated|memory_reserved|max_memory_reserved|memory_stats|empty_cache|set_device|current_device|"
    r"device_count|get_device_name|is_available))$")
# A torch factory that makes a host tensor unless it is given a device.
FACTORIES = {"zeros", "ones", "empty", "full", "tensor", "arange"}
GPU_METHODS = {"forward", "cuda"}  # x.forward(...), x.cuda(): GPU work whatever x is


def gpu_work(model, call: cst.Call) -> bool:
    """Whether a call written in a region launches GPU work: a ``torch`` call, a Triton launch
    ``kernel[grid](...)``, or a call of a ``fn``/``model``/``op`` callable. An awaited call
    (``await func(...)``), or any call in an ``async def``, is a coroutine: a request or I/O, not
    a launch."""
    if isinstance(model.parent(call), cst.Await):
        return False
    function = model.enclosing_function(call)
    if function is not None and function.asynchronous is not None:
        return False
    name = model.call_name(call) or ""
    if NOT_A_LAUNCH.search(name):
        return False  # device bookkeeping (memory statistics, the device module), no kernel
    if name.startswith("torch.distributed.") and _cpu_collective(model, call):
        return False  # a send/recv over a CPU (gloo) group or of a tensor built on the host
    if name.startswith("torch.") and not name.startswith(("torch.cuda.Event", "torch.cuda.synchronize")):
        # a tensor built as an argument (``wrapper.plan(torch.arange(n, device=d))``) is not the
        # timed work; the call it is handed to decides
        return not isinstance(model.parent(call), cst.Arg)
    func = call.func
    if isinstance(func, cst.Subscript):  # kernel[grid](...) of a Triton kernel or a kernel-like name
        value = func.value
        return isinstance(value, cst.Name) and (value.value in GPU_WORK_NAMES or any(
            k.name.value == value.value for k in model.triton_kernels))
    if isinstance(func, cst.Name) and func.value in GPU_WORK_NAMES:
        return True
    return isinstance(func, cst.Attribute) and func.attr.value in GPU_METHODS or (
        isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in GPU_WORK_NAMES
    )


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
            if isinstance(n, cst.Assign) and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name):
                assigned[n.targets[0].target.value] = n.value
    for arg in call.args:
        value = arg.value
        if isinstance(value, cst.Name) and value.value in assigned:
            value = assigned[value.value]
        text = model.dotted(value) or ""
        if arg.keyword is not None and arg.keyword.value == "group" and re.search(r"cpu|gloo", text, re.I):
            return True
        if arg.keyword is None and isinstance(value, cst.Call) and (model.call_name(value) or "").split(".")[-1] in FACTORIES \
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


def off_the_step(model, node: cst.CSTNode) -> bool:
    """Whether ``node`` runs only off the normal step: in an ``except`` handler or a branch that
    only logs and gives up (error paths),
    under an ``if`` on a debug switch or one that fills the cache its test reads (once per key),
    or after an early ``if not <debug switch>: return`` in its function."""
    function = None
    child = node
    for anc in model.ancestors(node):
        if isinstance(anc, cst.ExceptHandler) or _error_branch(model, anc):
            return True
        if isinstance(anc, (cst.If, cst.IfExp)) and child is not anc.test and _names_flag(anc.test):
            # the branch taken when the switch is on: the body of ``if debug:``, the else of
            # ``if not self.enable_timing:`` (whose body is the normal path)
            negated = isinstance(anc.test, cst.UnaryOperation) and isinstance(anc.test.operator, cst.Not)
            if (child is anc.body) != negated:
                return True
        if isinstance(anc, cst.If) and _fills_cache(model, anc):
            return True
        if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
            function = anc
            break
        child = anc
    if isinstance(function, cst.FunctionDef) and isinstance(function.body, cst.IndentedBlock):
        for stmt in function.body.body:
            if any(n is stmt for n in model.ancestors(node)):
                break
            if isinstance(stmt, cst.If) and _names_flag(stmt.test) and isinstance(stmt.body, cst.IndentedBlock) and any(
                isinstance(s, cst.SimpleStatementLine) and any(isinstance(x, cst.Return) for x in s.body)
                for s in stmt.body.body
            ):
                return True
    return False


def _error_branch(model, block: cst.CSTNode) -> bool:
    """``else: print(f"[ERROR] unsupported backend {b}"); return None``: a branch that only logs and
    then gives up (``return``, ``return None``, ``raise``) is an error path."""
    if not isinstance(block, cst.IndentedBlock) or not isinstance(model.parent(block), (cst.If, cst.Else)):
        return False
    *body, last = block.body
    if not (isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1 and (
        isinstance(last.body[0], cst.Raise) or isinstance(last.body[0], cst.Return) and (
            last.body[0].value is None or isinstance(last.body[0].value, cst.Name) and last.body[0].value.value == "None"))):
        return False
    return bool(body) and all(
        isinstance(s, cst.SimpleStatementLine) and all(
            isinstance(x, cst.Expr) and isinstance(x.value, cst.Call) and model.log_kind(x.value) for x in s.body)
        for s in body)


def _fills_cache(model, node: cst.If) -> bool:
    """``if _handles.get(dev) is None: _handles[dev] = create(); print(...)``: a branch that fills
    the cache its test reads runs once per key, not on every step."""
    from kcheck.model import walk

    tested = {model.dotted(n) for n in walk(node.test) if isinstance(n, (cst.Name, cst.Attribute))}
    tested.discard(None)
    for n in walk(node.body):
        if isinstance(n, cst.Assign):
            for t in n.targets:
                target = t.target.value if isinstance(t.target, cst.Subscript) else t.target
                if isinstance(target, (cst.Name, cst.Attribute)) and model.dotted(target) in tested:
                    return True
    return False


def _names_flag(test: cst.CSTNode) -> bool:
    from kcheck.model import walk

    return any(isinstance(n, cst.Name) and DEBUG_FLAG.search(n.value) or isinstance(n, cst.Attribute)
               and DEBUG_FLAG.search(n.attr.value) for n in walk(test))
