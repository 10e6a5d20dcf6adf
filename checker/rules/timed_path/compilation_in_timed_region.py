from __future__ import annotations

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.timed_path import TIMED, off_the_step, report_calls


class CompilationInTimedRegion(Rule):
    """Compiling inside a measured region or a per-step path.

    ## What it does
    Finds `torch.compile(...)`, `torch._dynamo.optimize(...)`, `triton.compile(...)` and
    `torch.utils.cpp_extension.load_inline/load(...)` called inside a CUDA-event window, a
    callable given to `do_bench` or a host-timer window, and the extension builds and
    `triton.compile` calls of a per-step hot path. A compile whose result is kept under a guard on
    the same name (`if _compiled is None: _compiled = torch.compile(fn)`, `if key not in cache:
    cache[key] = ...`, `if not hasattr(Fn, "kernel"): Fn.kernel = load_inline(...)`, a flag set
    once) or below a lazy builder's guard that returns what it kept (`if _ext is not None: return
    _ext`) runs once and is not reported: the harness's warm-up takes it. So does a compile on an
    error path. `torch.compile(fn)` in a per-step path is not
    reported either: Dynamo keeps what it compiled with the function's code, so a new wrapper of the
    same function, or of a new closure over it, compiles only on the first step (measured:
    `benchmarks/results/dynamo_rewrap.json`, one graph over five re-wrapped steps; the wrapper
    itself costs about 0.1 ms of host work a step).

    ## Why is this bad?
    Compilation takes seconds; inside a timed region it swamps the kernel's microseconds, and a
    warm-up that did not run the same function does not help. `load_inline`/`cpp_extension.load`
    and `triton.compile` do their build or load work on every call, also on every step.

    ## Example
    ```python
    start.record()
    out = torch.compile(rms_norm)(x, w)
    end.record()
    ```

    ## Use instead
    ```python
    compiled = torch.compile(rms_norm)
    compiled(x, w)  # warm-up: compile outside the window
    start.record()
    out = compiled(x, w)
    end.record()
    ```
    """

    CODE = "KC205"
    NAME = "compilation-in-timed-region"
    MESSAGE = "{what}{helper} in {region}: compilation lands in the measurement"
    SEVERITY = "error"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("measuring/warmup-and-compilation", "measuring/keep-timed-path-clean")
    VALID = [
        """
import torch
def bench(fn, x):
    compiled = torch.compile(fn)
    compiled(x)
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    start.record()
    compiled(x)
    end.record()
""",
        """
import torch
class Block(torch.nn.Module):
    def forward(self, x):
        return torch.compile(self.mlp)(x)  # a new wrapper each step; Dynamo compiles once
""",
    ]
    INVALID = [
        """
import torch
def bench(fn, x):
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    start.record()
    y = torch.compile(fn)(x)
    end.record()
""",
        """
import torch
from torch.utils.cpp_extension import load_inline
class Block(torch.nn.Module):
    def forward(self, x):
        return load_inline("mlp", cpp_sources=SOURCE, functions=["mlp"]).mlp(x)
""",
    ]
    PREFILTER = (r"compile|optimize|load_inline|cpp_extension",)
    NEEDS = ("timed reaches compile", "hot-path reaches compile")

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        report_calls(self, TIMED + ("hot-path",), lambda c: None if off_the_step(model, c)
                     else model.compile_kind(c),
                     lambda region, call: None if region.kind == "hot-path"
                     and (model.call_name(call) or "") in DYNAMO else self.MESSAGE)


# Dynamo's entry points: a new wrapper per call reuses what was compiled for the same code
# (benchmarks/results/dynamo_rewrap.json: one graph over five re-wrapped steps), so on a per-step
# path only the first call compiles; in a timed region that first call is the measurement.
DYNAMO = {"torch.compile", "torch._dynamo.optimize"}
