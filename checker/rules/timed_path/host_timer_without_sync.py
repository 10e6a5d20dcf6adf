from __future__ import annotations

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.timed_path import TIMER_NAMES, timed_gate

GPU_WORK_NAMES = {"torch", "kernel", "fn", "func", "model", "op", "launch"}
GPU_METHODS = {"forward", "cuda"}  # x.forward(...), x.cuda(): GPU work whatever x is


class HostTimerWithoutSync(Rule):
    """A host timer stopped before the GPU work it times has finished.

    ## What it does
    Finds host-timer windows (`t0 = time.perf_counter()` ... `time.perf_counter() - t0`, also
    `time.time()`, `time.monotonic()`, `timeit.default_timer()`) that launch GPU work (a `torch`
    call, a Triton launch `kernel[grid](...)`, or a call of a `fn`/`model`/`op` callable) with no
    synchronize between the last launch and the stop timestamp.

    Event windows and host-timer windows count in measurement code only: files under
    `bench*/`, `benchmarks/`, `tests/`, `profil*`, `perf*` (or named `test_*.py`, `bench*.py`),
    and functions named `bench*`, `test*`, `time*`, `measure*`, `profil*`, `perf*`, `verify*`,
    `check*` and the functions they contain. Elsewhere, serving code that times a whole operation for a log line is measuring
    that operation, syncs included. `do_bench`-style timers count everywhere.

    ## Why is this bad?
    Kernel launches return as soon as the work is queued. Without a sync the timer measures how
    fast Python can enqueue launches, not how long the GPU takes, and a slower kernel can look
    faster. The error is largest exactly where it matters: short kernels in a loop.

    ## Example
    ```python
    t0 = time.perf_counter()
    for _ in range(100):
        y = kernel(x)
    elapsed = time.perf_counter() - t0
    ```

    ## Use instead
    ```python
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(100):
        y = kernel(x)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    ```
    """

    CODE = "KC206"
    NAME = "host-timer-without-sync"
    MESSAGE = "host timer stopped without a device synchronize: it measures launch time, not GPU time"
    SEVERITY = "error"
    KNOWLEDGE = ("measuring/host-timers-need-sync", "measuring/median-of-device-events")
    VALID = [
        """
import time, torch
def bench(fn, x):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(100):
        fn(x)
    torch.cuda.synchronize()
    return time.perf_counter() - t0
""",
        """
import time
def load(path):
    t0 = time.perf_counter()
    data = open(path).read()
    parsed = data.split()
    return parsed, time.perf_counter() - t0
""",
    ]
    INVALID = [
        """
import time, torch
def bench(fn, x):
    t0 = time.perf_counter()
    for _ in range(100):
        y = fn(x)
    return (time.perf_counter() - t0) / 100
""",
        """
import time, torch
def bench(x, w):
    start = time.time()
    y = torch.nn.functional.linear(x, w)
    z = y.relu()
    end = time.time()
    return end - start
""",
    ]
    PREFILTER = (r"perf_counter|time\(|monotonic|default_timer",)

    @classmethod
    def gate(cls, summary, config) -> bool:
        kernels = {f.name for f in summary.functions if f.decorators & {"jit", "autotune", "heuristics"}}
        return timed_gate(summary, GPU_WORK_NAMES | GPU_METHODS | kernels)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        for region in model.timed_regions:
            if region.kind != "host-timer" or region.synced_before_stop:
                continue
            if any(self._is_gpu_work(call) for call, _ in model.calls_in(region.nodes, depth=0)):
                self.report(region.stop)

    def _is_gpu_work(self, call: cst.Call) -> bool:
        model = self.model
        name = model.call_name(call) or ""
        if name.startswith("torch.") and not name.startswith(("torch.cuda.Event", "torch.cuda.synchronize")):
            return True
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
