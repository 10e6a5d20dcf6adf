from __future__ import annotations

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.measurement import (
    TIMED_KINDS, Scope, arg, code, int_value, last, nodes_under, region_root, work_calls,
)


class MissingWarmup(Rule):
    """A timed call with no warm-up call before the timing starts.

    ## What it does
    In test and benchmark code, finds CUDA-event windows (`start.record()` ... `end.record()`)
    and host-timer windows (`perf_counter()` ... `perf_counter()`) where the timed function is
    not called anywhere before the window opens, and the function has no warm-up of its own
    (nothing named `warmup`, `warm_up`, `n_warmup`...). Also finds `do_bench(..., warmup=0)`.

    ## Why is this bad?
    The first call of a Triton kernel compiles it, the first call with a new autotune key runs
    every config, `torch.compile` traces and compiles, and the caching allocator grows its pool.
    A window that includes the first call measures all of that once, and averaged over a few
    iterations it dominates the number. Warm up each shape before timing it.

    ## Example
    ```python
    start.record()
    for _ in range(100):
        fused_add_rms_norm(x, residual, w, eps)
    end.record()
    ```

    ## Use instead
    ```python
    for _ in range(10):
        fused_add_rms_norm(x, residual, w, eps)
    torch.cuda.synchronize()
    start.record()
    for _ in range(100):
        fused_add_rms_norm(x, residual, w, eps)
    end.record()
    ```
    """

    CODE = "KC407"
    NAME = "missing-warmup"
    MESSAGE = "{call}() is timed {how}: the measurement includes compilation, autotuning and allocator growth"
    SEVERITY = "warning"
    KNOWLEDGE = ("measuring/warmup-and-compilation",)
    VALID = [
        """
import torch
def bench(fn, x):
    fn(x)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(100):
        fn(x)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 100
""",
        """
import time, torch
def bench(fn, x, warmup=10):
    for _ in range(warmup):
        fn(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(100):
        fn(x)
    torch.cuda.synchronize()
    return time.perf_counter() - t0
""",
    ]
    INVALID = [
        """
import torch
def bench(fn, x):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(100):
        fn(x)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 100
""",
        """
import triton
def bench(x):
    return triton.testing.do_bench(lambda: kernel(x), warmup=0, rep=100)
""",
    ]
    PREFILTER = (r"record|perf_counter|time\(|monotonic|default_timer|do_bench",)

    @classmethod
    def gate(cls, summary, config) -> bool:
        return bool(summary.all_names & {"record", "perf_counter", "perf_counter_ns", "time", "monotonic",
                                         "default_timer", "do_bench"})

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        scope = Scope(self)
        if not scope.gpu:
            return
        for region in model.timed_regions:
            if region.kind not in TIMED_KINDS or not scope.covers(region.nodes[0]):
                continue
            timed = work_calls(model, region.nodes)
            if not timed:
                continue
            root = region_root(model, region)
            order: dict[int, int] = {}
            warm = False
            for i, n in enumerate(nodes_under(root)):
                order[id(n)] = i
                if isinstance(n, cst.Name) and "warm" in n.value.lower():
                    warm = True
            if warm:
                continue
            start = order.get(id(self._outermost_loop(region.nodes[0], root)), order.get(id(region.nodes[0]), 0))
            names = {code(c.func) for c in timed}
            before = any(isinstance(n, cst.Call) and order.get(id(n), start) < start and code(n.func) in names
                         for n in nodes_under(root))
            if not before:
                self.report(timed[0], call=code(timed[0].func), how="with no warm-up call before the timing starts")
        for node in nodes_under(original_node, nested=True):
            if isinstance(node, cst.Call) and last(model.call_name(node)) == "do_bench":
                if int_value(None, arg(node, 99, "warmup")) == 0:
                    self.report(node, call="do_bench", how="with warmup=0")

    def _outermost_loop(self, node: cst.CSTNode, root: cst.CSTNode) -> cst.CSTNode:
        """The outermost loop around a region inside ``root`` (its first iteration is cold too)."""
        found = node
        for anc in self.model.ancestors(node):
            if anc is root:
                break
            if isinstance(anc, (cst.For, cst.While)):
                found = anc
        return found
