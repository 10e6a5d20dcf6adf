from __future__ import annotations


import libcst as cst

from kcheck.model import MEASUREMENT_PATH, walk
from kcheck.rule import Rule
from kcheck.rules.timed_path import (
    context, first_in_statement,
    DEBUG_PATH, TIMED, gpu_work, off_the_step, region_calls, through,
)
from kcheck.values import HOST


class LoggingInTimedPath(Rule):
    """Printing or logging inside a measured region, a graph capture, or tensors in a hot path.

    ## What it does
    Finds `print()`, `logging`/`logger` calls and `warnings.warn` inside a CUDA-event window, a
    callable given to `do_bench`, a host-timer window or a `torch.cuda.graph` capture, and, in
    per-step hot paths (`forward`, decode and step functions), logging calls and `print()`s that
    format a tensor argument of the function, and `print()`s that run on every step (a print
    under an `if` of the step, without the step's tensors, is a rare event's message: an
    overflow, a missing kernel). Device-side prints
    (`tl.device_print`) are not reported.

    Event windows and host-timer windows count in measurement code only: files under
    `bench*/`, `benchmarks/`, `tests/`, `profil*`, `perf*` (or named `test_*.py`, `bench*.py`),
    and functions named `bench*`, `test*`, `time*`, `measure*`, `profil*`, `perf*`, `verify*`,
    `check*` and the functions they contain. Elsewhere, serving code that times a whole operation for a log line is measuring
    that operation, syncs included. `do_bench`-style timers count everywhere. A host-timer
    window counts only when its own statements launch GPU work (a `torch` call, a Triton launch,
    a call of a `fn`/`model`/`op` callable): one around a CI run, an eval or a tuning sweep times
    a job, and a print there costs nothing that matters, as does one around measurements of its own
    (inner windows, a `do_bench`: a whole script's total time); nor does a print of host values after
    the window's closing synchronize (the GPU work is over). Windows pair up as the code's differences of the timers' names say (lap timers
    `t1`, `qt2`, `t2` with `qt2 - t1` and `t2 - qt2`), else in order, so a print
    between two windows of one function is outside both. Per-step hot paths count outside test
    and benchmark files (a dataset's `sample()` in a benchmark is not a serving step), outside
    debugging tools (`debug*/` folders, `debug*.py`) and in serving code only: the project index's
    context of each function, as KC203 reads it (an offline calibration wrapper's `_forward` is no
    serving step). In every region, a call in an `except`
    handler or a branch that only logs and gives up (`else: print("[ERROR] ..."); return None`;
    error paths), under a debug switch (`if envs.TRACE_X.get():`, `if self.debug:`,
    or after `if not <switch>: return` in a helper), or in a branch that fills the cache its test
    reads (`if _handles.get(dev) is None: _handles[dev] = ...`, once per key) is not reported.

    ## Why is this bad?
    Formatting a tensor copies it to the host and synchronizes; even a plain string costs
    microseconds of host time per call, which a benchmark then reports as kernel time. In a
    hot path it runs every step; inside a graph capture it runs once at capture and never again,
    so the log lies about what replays do.

    ## Example
    ```python
    def forward(self, x, residual):
        logger.debug("residual: %s", residual)
        return fused_add_rms_norm(x, residual, self.weight, self.eps)
    ```

    ## Use instead
    ```python
    def forward(self, x, residual):
        return fused_add_rms_norm(x, residual, self.weight, self.eps)
    ```
    """

    CODE = "KC204"
    NAME = "logging-in-timed-path"
    MESSAGE = "{what}{helper} in {region}: host work and, for tensors, a sync on the measured path"
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("measuring/keep-timed-path-clean",)
    VALID = [
        """
import logging, torch
logger = logging.getLogger(__name__)
def bench(fn, x):
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn(x)
    end.record()
    torch.cuda.synchronize()
    logger.info("took %.3f ms", start.elapsed_time(end))
""",
        """
import logging, torch
logger = logging.getLogger(__name__)
class Layer(torch.nn.Module):
    def forward(self, x):
        logger.debug("running layer %s", self.name)
        return x * 2
""",
        """
import triton
import triton.language as tl
@triton.jit
def kernel(x_ptr):
    tl.device_print("x", tl.load(x_ptr))
""",
    ]
    INVALID = [
        """
import torch
def bench(fn, x):
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(10):
        y = fn(x)
        print(i, y)
    end.record()
""",
        """
import logging, torch
logger = logging.getLogger(__name__)
class Layer(torch.nn.Module):
    def forward(self, x, residual):
        logger.debug("residual: %s", residual)
        return x + residual
""",
    ]
    PREFILTER = (r"print|log|warn|write",)
    NEEDS = ("timed reaches log", "capture reaches log", "hot-path reaches log")

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        seen: set[int] = set()  # statements already reported (first_in_statement)
        on_step = lambda site: not off_the_step(model, site)  # noqa: E731 - helpers called off the step are not entered
        for region, call, via in region_calls(model, TIMED + ("graph-capture", "hot-path"), follow=on_step):
            what = model.log_kind(call)
            if not what:
                continue
            if region.kind == "hot-path" and (MEASUREMENT_PATH.search(model.path) or DEBUG_PATH.search(model.path)
                                              or context(model, region.function) is not None):
                continue  # not a serving step: a test's forward, a debugging tool's step(), calibration or
                # training code (the index's ``function_context``, which KC203 reads too)
            if off_the_step(model, call):
                continue  # an error path or a debug trace: not run on every step or iteration
            if region.kind == "host-timer" and not _launches(model, region):
                continue  # wall time of a job (a CI run, an eval, a tuning sweep), not of GPU work
            if region.kind == "host-timer" and _after_closing_sync(model, region, call):
                continue  # ``torch.cuda.synchronize(); print(f"{n} tokens")`` before the stop: the GPU work is done
            if region.kind == "hot-path" and not self._formats_argument(call, region.function) and (
                    what != "print()" or _conditional(model, call) or via is not None and _conditional(model, via)):
                continue  # a log line without the step's tensors (its level check is cheap), or a print on
                # a branch of the step (an overflow, a missing kernel): a rare event's message
            if first_in_statement(model, call, seen):
                self.report(call, what=what, helper=through(model, call, via), region=region.label)

    def _formats_argument(self, call: cst.Call, function: cst.FunctionDef | None) -> bool:
        """Whether a logging call passes one of the function's parameters that may be a tensor (a
        forward's input): not one annotated with another type (``n: int``) or known on the host."""
        if function is None:
            return False
        params = {p.name.value: p for p in function.params.params if p.name.value not in ("self", "cls")}
        names = []
        for arg in call.args:
            value = arg.value
            if type(value) is cst.Name:
                names.append(value)
            elif type(value) is cst.FormattedString:
                names += [part.expression for part in value.parts
                          if type(part) is cst.FormattedStringExpression and type(part.expression) is cst.Name]
        return any(n.value in params and _may_be_tensor(self.model, params[n.value], n) for n in names)


def _may_be_tensor(model, param: cst.Param, use: cst.Name) -> bool:
    """A parameter that may hold a tensor: unannotated or annotated with a tensor type (also in an
    ``Optional``/union), and not known on the host by the values model."""
    if param.annotation is not None:
        text = cst.Module([]).code_for_node(param.annotation.annotation)
        if "Tensor" not in text and "tensor" not in text:
            return False  # ``int``, ``str``, ``list[int]``, ``Config``: formatting it moves no tensor
    return model.places.place(use) != HOST


def _conditional(model, node: cst.CSTNode) -> bool:
    """Whether ``node`` runs only on some calls of its function: under an ``if``, a conditional
    expression, a ``while`` or a ``try``'s handler."""
    for anc in model.ancestors(node):
        kind = type(anc)
        if kind in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
            return False
        if kind in (cst.If, cst.IfExp, cst.ExceptHandler, cst.While, cst.Else):
            return True
    return False


def _after_closing_sync(model, region, call: cst.Call) -> bool:
    """Whether ``call`` lies in a statement after the window's closing synchronize (its ``exempt``
    statements) and formats only host values: the GPU work it measures is over."""
    closing = [i for i, stmt in enumerate(region.nodes) if id(stmt) in region.exempt]
    if not closing:
        return False
    later = region.nodes[closing[-1] + 1:]
    if not any(n is call for stmt in later for n in walk(stmt)):
        return False
    return all(model.places.place(a.value) == HOST or type(a.value) is cst.FormattedString and all(
        model.places.place(p.expression) == HOST for p in a.value.parts if type(p) is cst.FormattedStringExpression)
        for a in call.args)


def _launches(model, region) -> bool:
    """Whether a host-timer window launches GPU work in its own statements (cached per region)."""
    cache = model.__dict__.setdefault("_timer_launches", {})
    if id(region) not in cache:
        cache[id(region)] = any(gpu_work(model, c) for c, _ in model.calls_in(region.nodes, depth=0))
    return cache[id(region)]


