from __future__ import annotations

import re

import libcst as cst

from kcheck.model import ends_in_generation, is_host_timer, walk
from kcheck.rule import Rule
from kcheck.rules.timed_path import cpu_device_branch, gpu_work

# Text of a file that can put work on a GPU.
GPU_TEXT = re.compile(r"cuda|gpu|device|accelerator|triton|xpu|\bhip\b|Event", re.I)


class HostTimerWithoutSync(Rule):
    """A host timer stopped before the GPU work it times has finished.

    ## What it does
    Finds host-timer windows (`t0 = time.perf_counter()` ... `time.perf_counter() - t0`, also
    `time.time()`, `time.monotonic()`, `timeit.default_timer()`) that launch GPU work (a `torch`
    call, a Triton launch `kernel[grid](...)`, or a call of a `fn`/`model`/`op` callable; an
    awaited call, or any call in an `async def`, is a coroutine, not a launch) with no synchronize between the last launch and
    the stop timestamp. Device bookkeeping (`torch.get_device_module().reset_peak_memory_stats()`,
    `torch.cuda.memory_allocated()`) queues no kernel, and neither does a `torch.distributed`
    send/recv over a CPU group (`group=world.cpu_group`) or of a tensor made without a device
    (`torch.zeros(1, dtype=torch.int64)`): a clock ping-pong or an engine's end-to-end request
    timing is not reported. Checkpoint and file I/O (`torch.save`, `torch.distributed.checkpoint`)
    queue no kernel either, nor does a call whose operands are all host tensors the function made
    or moved there (`w = torch.randn(n, n).to("cpu")`; `torch.mm(x, w)`, `ext.forward(n,
    x[i].data_ptr())`): a CPU kernel's benchmark times it right with the host clock. A window whose last work is a `generate()` call is synced: a
    generation loop reads each step's tokens on the host to decide whether to stop (Hugging Face
    Transformers tests its stopping flag as a Python bool every step), so it returns with its GPU
    work done. The closing synchronize (of any backend: `torch.mps.synchronize()`) may be written as
    a conditional expression and followed by host bookkeeping that queues nothing: a barrier across
    ranks or a device query (`dist.barrier()`, also under `if dist.is_initialized():`), a name
    bound (`_ = y`), a tokenizer's decoding or a progress bar's update.

    Event windows and host-timer windows count in measurement code only: files under
    `bench*/`, `benchmarks/`, `tests/`, `profil*`, `perf*` (or named `test_*.py`, `bench*.py`),
    and functions named `bench*`, `test*`, `time*`, `measure*`, `profil*`, `perf*`, `verify*`,
    `check*` and the functions they contain. Elsewhere, serving code that times a whole operation for a log line is measuring
    that operation, syncs included. `do_bench`-style timers count everywhere. A file that never
    names a GPU (no `cuda`, `device`, `gpu`, `accelerator`, `triton`, `Event`) times CPU work,
    for which the host timer is the right clock, and is not checked (a timing helper in such a
    file that other files hand GPU work to is missed); so is a window in the body of
    `if device_type == "cpu":` (any name spelled with `device`, or `x.device.type == "cpu"`), of
    `if not torch.cuda.is_available():`, or in the `else` of `if torch.cuda.is_available():` (or of
    a local bound to it, `use_cuda = torch.cuda.is_available()`): a benchmark's clock for machines
    without a GPU.

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
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
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
    x = x.cuda()
    t0 = time.perf_counter()
    for _ in range(100):
        y = fn(x)
    return (time.perf_counter() - t0) / 100
""",
        """
import time, torch
def bench(x, w):
    x, w = x.to("cuda"), w.to("cuda")
    start = time.time()
    y = torch.nn.functional.linear(x, w)
    z = y.relu()
    end = time.time()
    return end - start
""",
    ]
    PREFILTER = (r"perf_counter|time\(|monotonic|default_timer", "(?i)" + GPU_TEXT.pattern)  # the rule's own text test
    NEEDS = ("host-timer reaches gpu-work",)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        if not GPU_TEXT.search(self.context.source):
            return  # a file that never names a GPU times CPU work: the host timer is the right clock
        for region in model.timed_regions:
            if region.kind != "host-timer" or region.synced_before_stop or ends_in_generation(model, region.nodes):
                continue
            clock = next((c for c in walk(region.stop) if type(c) is cst.Call and is_host_timer(model, c)),
                         region.stop)  # the stop statement may hold both branches of a device test
            if cpu_device_branch(model, clock):
                continue  # ``if device_type == "cpu":``: the host timer is the right clock for CPU work
            if any(gpu_work(model, call) for call, _ in model.calls_in(region.nodes, depth=0)):
                self.report(region.stop)
