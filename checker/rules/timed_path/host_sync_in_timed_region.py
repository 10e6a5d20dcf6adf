from __future__ import annotations

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.timed_path import SYNC_NAMES, SYNC_TEXT, TIMED, TIMER_TEXT, report_calls, timed_gate


class HostSyncInTimedRegion(Rule):
    """A host sync inside the code a benchmark times.

    ## What it does
    Finds calls that make the CPU wait for the GPU (`torch.cuda.synchronize()`, `.item()`,
    `.cpu()`, `.tolist()`, `.numpy()`, `torch.nonzero`, one-argument `torch.where`, ...) inside a
    measured region: between two CUDA-event `record()` calls, in a callable given to `do_bench`,
    or inside a host-timer window (`time.perf_counter()` ... `time.perf_counter()`), including
    same-module helpers the region calls.

    Event windows and host-timer windows count in measurement code only: files under
    `bench*/`, `benchmarks/`, `tests/`, `profil*`, `perf*` (or named `test_*.py`, `bench*.py`),
    and functions named `bench*`, `test*`, `time*`, `measure*`, `profil*`, `perf*`, `verify*`,
    `check*` and the functions they contain. Elsewhere, serving code that times a whole operation for a log line is measuring
    that operation, syncs included. `do_bench`-style timers count everywhere.

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

    @classmethod
    def gate(cls, summary, config) -> bool:
        return timed_gate(summary, SYNC_NAMES)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        report_calls(self, TIMED, lambda c: model.sync_kind(c, model.enclosing_function(c)), self.MESSAGE)
