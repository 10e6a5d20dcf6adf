from __future__ import annotations

import libcst as cst

from kcheck.model import walk
from kcheck.rule import Rule
from kcheck.rules.timed_path import (
    SYNC_TEXT, TIMED, TIMER_TEXT, first_in_statement, gpu_work, native_wait_line, off_the_step, region_calls,
    through,
)


class HostSyncInTimedRegion(Rule):
    """A host sync inside the code a benchmark times.

    ## What it does
    Finds calls that make the CPU wait for the GPU (`torch.cuda.synchronize()`, `.item()`,
    `.cpu()`, `.tolist()`, `.numpy()`, `torch.nonzero`, one-argument `torch.where`, `int()` or
    `float()` of a GPU tensor, a branch on `(t > 0).any()`, ...) inside a measured region: between
    two CUDA-event `record()` calls, in a callable given to `do_bench`, inside a host-timer window
    (`time.perf_counter()` ... `time.perf_counter()`), or in the forward of a kernel-generation
    solution (`ModelNew`, a solution's `Model`, a leaderboard `custom_kernel`), which the task's
    harness times; a sync in a helper is reported where it is written. A call of an inline
    extension (`load_inline`) whose C++ host function waits (`cudaDeviceSynchronize()`, a
    blocking `cudaMemcpy`, `.item<float>()`, `.cpu()`, or a helper that does) is a sync too,
    reported at the C++ line that waits, with the line of the call. Also in
    same-module helpers that are harness work: handed a result the region computed
    (`check_nan(out)` after `out = fn(x)`) or called beside the GPU work the region launches
    (`fn(x); check(x)`). A helper that is the region's only work (`attention(q, k, v)`,
    `tune(M, N, K)`, also with its own backward on its output) is the operation being measured,
    or a job of measurements, and its syncs are its own cost. Nor is an experiment that times
    itself for information: a `.item()` folded into a host statistic (`count += int(m.sum().item())`,
    `lo = min(lo, q.min().item())`) in a host-timer window whose elapsed time is only printed or
    logged computes the experiment's result, it is not a harness sync in a measurement.

    Event windows and host-timer windows count in measurement code only: files under
    `bench*/`, `benchmarks/`, `tests/`, `profil*`, `perf*` (or named `test_*.py`, `bench*.py`),
    and functions named `bench*`, `test*`, `time*`, `measure*`, `profil*`, `perf*`, `verify*`,
    `check*` and the functions they contain. Elsewhere, serving code that times a whole operation for a log line is measuring
    that operation, syncs included. `do_bench`-style timers count everywhere. A host-timer window
    around measurements of its own (inner windows, a `do_bench`) times a whole job, not GPU work.

    ## Why is this bad?
    A sync drains the GPU queue and adds a host round trip to every timed iteration, so the
    number measures launch latency and the sync rather than the kernel. It also hides whether
    the kernel overlaps with its neighbours, which is what the serving engine will see. The one
    sync a host-timer window needs is the one right before the stop timestamp; that one is fine.

    ## Example
    ```python
    start.record()
    for _ in range(iters):
        out = kernel(x)
        torch.cuda.synchronize()
    end.record()
    ```

    ## Use instead
    ```python
    start.record()
    for _ in range(iters):
        out = kernel(x)
    end.record()
    torch.cuda.synchronize()
    ```
    """

    CODE = "KC201"
    NAME = "host-sync-in-timed-region"
    MESSAGE = "{what}{helper} in {region}: the host waits for the GPU inside the measurement"
    SEVERITY = "error"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("measuring/keep-timed-path-clean", "measuring/host-syncs")
    VALID = [
        """
import torch
def bench(fn, x, iters=100):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn(x)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters
""",
        """
import time, torch
def bench(fn, x):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        fn(x)
    torch.cuda.synchronize()
    return time.perf_counter() - t0
""",
        """
import time, torch
def bench(fn, x):
    t0 = time.perf_counter()
    counts = torch.tensor([1, 2, 3])
    total = counts.sum().item()
    fn(x)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, total
""",
    ]
    INVALID = [
        """
import torch
def bench(fn, x, iters=100):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        y = fn(x)
        torch.cuda.synchronize()
    end.record()
""",
        """
import triton
def run(x):
    return triton.testing.do_bench(lambda: kernel(x).sum().item())
""",
        """
import time, torch
def check_and_step(x):
    return x.max().item()
def bench(fn, x):
    t0 = time.perf_counter()
    for _ in range(10):
        fn(x)
        check_and_step(x)
    torch.cuda.synchronize()
    return time.perf_counter() - t0
""",
    ]
    PREFILTER = (SYNC_TEXT, TIMER_TEXT)
    NEEDS = ("timed reaches sync",)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        seen: set[int] = set()  # statements already reported (first_in_statement)
        # a helper called off the measured path (below a lazy initialiser's guard, in an error
        # handler, under a debug switch) is not entered
        follow = lambda site: not off_the_step(model, site)  # noqa: E731
        for region, call, via in region_calls(model, TIMED, follow=follow):
            what = model.sync_kind(call, model.enclosing_function(call))
            if not what or (via is not None and not _harness_helper(model, region, via)) or off_the_step(model, call):
                continue  # off the measured path: an error handler, an opt-in switch, a cache fill (once per key)
            if via is None and _gathers_statistic(model, call) and _informational(model, region):
                continue  # an experiment's own statistics, timed only for a printed figure
            if first_in_statement(model, call, seen):
                self.report(call, what=what, helper=through(model, call, via), region=region.label,
                            line=native_wait_line(self, call))


def _harness_helper(model, region, via: cst.Call) -> bool:
    """Whether a helper call in a region is harness work added to the measurement: it is handed a
    result the region computed (``check(out)`` after ``out = fn(x)``), or it runs beside other GPU
    work the region launches (``fn(x); check(x)``). A helper that is the region's only work
    (``attention(q, k, v)``, ``tune(M, N, K)``) is the operation being measured, or a job of
    measurements, and its syncs are its own cost."""
    cache = model.__dict__.setdefault("_timed_work", {})
    if id(region) not in cache:
        cache[id(region)] = [c for c, _ in model.calls_in(region.nodes, depth=0) if gpu_work(model, c)]
    results = _bound_from(model, via)  # ``om = attention(q, k, v)``: om is the operation's output
    if any(c is not via and not _consumes(c, results) for c in cache[id(region)]):
        return True  # other timed work beside the helper (its own backward does not count)
    bound: set[str] = set()
    for root in region.nodes:
        for node in walk(root):
            targets = []  # names bound to what a call returned (``out = fn(x)``, not ``n = shape[0]``)
            if type(node) in (cst.Assign, cst.AnnAssign, cst.AugAssign) and node.value is not None and any(
                type(n) is cst.Call for n in walk(node.value)
            ):
                targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]
            for target in targets:
                bound.update(n.value for n in walk(target) if type(n) is cst.Name)
    return any(type(n) is cst.Name and n.value in bound for arg in via.args for n in walk(arg.value))


def _bound_from(model, call: cst.Call) -> set[str]:
    parent = model.parent(call)
    if type(parent) is cst.Assign:
        return {n.value for t in parent.targets for n in walk(t.target) if type(n) is cst.Name}
    return set()


def _consumes(call: cst.Call, names: set[str]) -> bool:
    return bool(names) and any(type(n) is cst.Name and n.value in names for a in call.args for n in walk(a.value))


def _gathers_statistic(model, call: cst.Call) -> bool:
    """A value sync whose result is folded into a host statistic (``count += int(m.sum().item())``,
    ``lo = min(lo, float(q.min().item()))``): the value is what the code is computing."""
    for anc in model.ancestors(call):
        if type(anc) is cst.AugAssign:
            return True
        if type(anc) is cst.Assign:
            names = {n.value for t in anc.targets for n in walk(t.target) if type(n) is cst.Name}
            return any(type(n) is cst.Name and n.value in names for n in walk(anc.value))
        if isinstance(anc, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return False
    return False


def _informational(model, region) -> bool:
    """A host-timer window whose elapsed time (``elapsed = perf_counter() - t0``) is only printed or
    logged: the code times itself for information, it is not a benchmark's measurement."""
    stop = region.stop
    if region.kind != "host-timer" or region.function is None or type(stop) is not cst.SimpleStatementLine:
        return False
    assign = stop.body[0] if len(stop.body) == 1 else None
    if type(assign) is not cst.Assign or len(assign.targets) != 1 or type(assign.targets[0].target) is not cst.Name:
        return False
    name = assign.targets[0].target.value
    uses = [n for n in walk(region.function) if type(n) is cst.Name and n.value == name and n is not assign.targets[0].target]
    return bool(uses) and all(any(type(a) is cst.Call and model.log_kind(a) for a in model.ancestors(n)) for n in uses)
