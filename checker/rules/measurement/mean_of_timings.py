from __future__ import annotations

import re

import libcst as cst

from kcheck.model import HOST_TIMERS
from kcheck.rule import Rule
from kcheck.rules.measurement import Scope, arg, code, device_timing, int_value, last, nodes_under, region_root

MEANS = {"mean", "fmean", "average"}
FEW_RUNS = 20  # a window averaging this many runs or fewer is "a handful"
# Calls whose result holds timings or their statistics (``benchmark_forward``, ``timeit``,
# ``get_timing_stats``, ``timing_fn``): a ``.mean`` or ``["mean"]`` read off it is a mean of timings.
TIMING_RESULT = re.compile(r"bench|timeit|timing|elapsed|^time_|_time$|autorange", re.IGNORECASE)
SPREAD = re.compile(r"median|percentile|quantile", re.IGNORECASE)
ESTIMATE = re.compile(r"estimat|n_repeat|calibrat", re.IGNORECASE)
# Benchmark helpers whose statistic defaults to the mean when neither ``return_mode`` nor
# ``quantiles`` is given: triton.testing's ``do_bench`` and ``do_bench_cudagraph`` (since Triton 2.1;
# the catalog's measuring/median-of-device-events) and the copies that keep that signature.
DEFAULT_MEAN_BENCH = {"do_bench", "do_bench_cudagraph"}
# A function named for benchmarking anywhere in its name (``run_benchmark``, ``_do_bench``) is
# measurement code for this rule even outside test and benchmark files.
BENCH_NAME = re.compile(r"bench", re.IGNORECASE)


class MeanOfTimings(Rule):
    """Timings reported as a mean, or averaged over a handful of runs.

    ## What it does
    In test and benchmark code, finds the ways of reporting a mean where a median is
    needed: the mean (`statistics.mean`, `np.mean`, `.mean()`, `sum(t) / len(t)`) of a list of
    per-run timings (filled from `elapsed_time` or host timers); `do_bench(...,
    return_mode="mean")`; the mean read off a timing helper's result (`m.mean` of
    `_, m = benchmark_forward(...)`, `stats["mean"]` of `get_timing_stats(times)`,
    `timer.blocked_autorange().mean`; a same-module helper whose own mean is reported is not
    reported again at its callers); `triton.testing.do_bench(fn)` and `do_bench_cudagraph(fn)`
    called with neither `return_mode` nor `quantiles` (their default statistic is the mean; so is
    that of a same-module copy whose `return_mode` defaults to `"mean"`, and of TileLang's
    profiler); a running total of per-run timings divided by the count (`total += start.elapsed_time(end)`
    in the loop, `total / iters` after it); and a timed
    window around `for _ in range(N)` with N of 20 or fewer, or a host-timed total divided by
    such a loop's count (`(time.perf_counter() - t0) / iters`, wherever the two timers stand),
    which is a mean of a handful of runs. The count may be written elsewhere: a name bound once
    to a number (in the function or at the module's top level, `repeats = 3`), an alias of a
    parameter (`niters = repeats`), or a command-line option's default (`args.num_iters` of
    `add_argument("--num-iters", default=10)`); a script's top level is judged like a function.
    Per-run timings include values computed from a timer (`tokens / (time.perf_counter() - t0)`)
    and the values of a same-module helper that returns one (`times.append(time_once(fn))`),
    kept in a list or a dict entry (`metrics["tokens_per_sec"].append(...)`, `ret += [...]`).
    Besides test and benchmark code, a function named for benchmarking (`run_benchmark`,
    `do_bench_cudagraph`) is judged wherever it stands.

    A mean reported beside the median or percentiles (a function that computes or reads those
    too, `stats["median"]` included) is an extra column, and a short window that only estimates
    a call's time to size the real measurement (named `estimate_ms`, `n_repeat`, or whose time
    flows into a later loop's count, as `do_bench` does) is not a report: neither is reported.

    ## Why is this bad?
    Kernel timings have a long right tail: clock changes, interrupts, other tenants and the
    occasional allocator or compilation event. The mean follows the tail, so two runs of the
    same code disagree, and a handful of runs is not enough to see the spread at all. Report
    the median of many device-event timings with its spread (`do_bench(fn, return_mode="median")`:
    its default statistic is the mean).

    ## Example
    ```python
    times = []
    for _ in range(20):
        start.record(); fn(x); end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    print(f"{statistics.mean(times):.3f} ms")
    ```

    ## Use instead
    ```python
    print(f"{statistics.median(times):.3f} ms (p20-p80 {q20:.3f}-{q80:.3f})")
    ```
    """

    CODE = "KC408"
    NAME = "mean-of-timings"
    MESSAGE = "{what}: report the median of many runs (and their spread); the mean follows the slow tail"
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("measuring/median-of-device-events",)
    VALID = [
        """
import statistics, torch
def bench(fn, x):
    times = []
    for _ in range(200):
        start.record(); fn(x); end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)
""",
        """
import numpy as np
def test_outputs(out):
    assert np.mean(out) > 0
""",
    ]
    INVALID = [
        """
import statistics, torch
def bench(fn, x):
    times = []
    for _ in range(200):
        start.record(); fn(x); end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.mean(times)
""",
        """
import triton
def bench(fn):
    return triton.testing.do_bench(fn, return_mode="mean")
""",
        """
import triton
def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100)
""",
        """
import torch
def bench(fn, iters=100):
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    total = 0.0
    for _ in range(iters):
        start.record(); fn(); end.record()
        torch.cuda.synchronize()
        total += start.elapsed_time(end)
    return total / iters
""",
        """
import time, torch
def bench_host(fn, x, iters=5):
    fn(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters
""",
    ]
    PREFILTER = (r"mean|average|sum\(|do_bench|range\(|\+=",)
    NEEDS = ("timing",)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        scope = _BenchScope(Scope(self), model)
        if not scope.gpu:
            return
        self._totals: dict[int, set[str]] = {}  # id(function) -> names holding a running total of per-run timings
        timings = self._timing_lists(original_node)
        read: set[int] = set()  # statements with a mean read off timings reported
        self._meaned = {id(model.enclosing_function(n)) for n in nodes_under(original_node, nested=True)
                        if self._mean_of_list(n, timings)}  # functions whose own mean is reported
        for node in nodes_under(original_node, nested=True):
            if type(node) not in (cst.Call, cst.BinaryOperation, cst.Attribute, cst.Subscript) or not scope.covers(node):
                continue
            if self._mean_of_list(node, timings):
                self.report(node, what="the mean of per-run timings is reported")
            elif type(node) is cst.Call:
                name = last(model.call_name(node) or model.dotted(node.func))
                if name == "do_bench":
                    mode = arg(node, 99, "return_mode")
                    if type(mode) is cst.SimpleString and mode.evaluated_value == "mean":
                        self.report(node, what='do_bench(return_mode="mean") reports the mean')
                        continue
                if self._default_mean(node):
                    self.report(node, what=f"{name}() without return_mode or quantiles reports the mean")
            elif type(node) in (cst.Attribute, cst.Subscript) and self._mean_read(node, timings) \
                    and not self._median_too(node):
                stmt = next((a for a in model.ancestors(node) if isinstance(
                    a, (cst.SimpleStatementLine, cst.BaseCompoundStatement))), node)
                if id(stmt) not in read:  # one finding per statement
                    read.add(id(stmt))
                    self.report(node, what="the mean of the timings is reported")
        totals: set[int] = set()  # divisions reported as a running total's mean
        for node in nodes_under(original_node, nested=True):
            if type(node) is cst.BinaryOperation and type(node.operator) is cst.Divide and scope.covers(node) \
                    and self._running_total(node):
                totals.add(id(node))
                self.report(node, what="a running total of per-run timings divided by the count is their mean")
        windows: set[int] = set()  # functions with a window reported
        for region in model.timed_regions:
            if not device_timing(region) or not scope.covers(region.nodes[0]):
                continue
            root = region_root(model, region)
            for stmt in region.nodes:
                if type(stmt) is cst.For and type(stmt.iter) is cst.Call and \
                        model.dotted(stmt.iter.func) == "range" and len(stmt.iter.args) == 1:
                    n = int_value(root, stmt.iter.args[0].value, original_node)
                    if n is not None and 1 < n <= FEW_RUNS and not self._estimate(root):
                        windows.add(id(root))
                        self.report(stmt, what=f"one window over {n} runs gives the mean of a handful of runs")
        for node in nodes_under(original_node, nested=True):
            if type(node) is cst.BinaryOperation and type(node.operator) is cst.Divide and scope.covers(node) \
                    and id(node) not in totals:
                fn = model.enclosing_function(node)
                if fn is None and not any(type(a) in (cst.ClassDef, cst.Lambda) for a in model.ancestors(node)):
                    fn = original_node  # a script's top level: its statements are the benchmark
                if fn is not None and id(fn) not in windows:
                    n = self._divided_total(fn, node)
                    if n is not None and not self._estimate(fn) and not self._median_too(node):
                        windows.add(id(fn))
                        self.report(node, what=f"a total over {n} runs divided by the count is the mean of a "
                                               "handful of runs")

    def _default_mean(self, call: cst.Call) -> bool:
        """``do_bench(fn)`` or ``do_bench_cudagraph(fn, rep=...)`` with neither ``return_mode`` nor
        ``quantiles``: Triton's (and TileLang's profiler's) default statistic is the mean, and so is
        that of a same-module copy (by any name) whose ``return_mode`` defaults to ``"mean"``. A result unpacked
        into several names comes from the old signature, whose default was the median and the
        20th and 80th percentiles."""
        model = self.model
        qual = model.call_name(call) or model.dotted(call.func) or ""
        helper = model.callee(call)
        if (last(qual) not in DEFAULT_MEAN_BENCH and helper is None) or len(call.args) - sum(
                a.keyword is not None for a in call.args) > 3:
            return False
        if any(a.keyword is not None and a.keyword.value in ("return_mode", "quantiles", "percentiles")
               for a in call.args) or any(a.star for a in call.args):
            return False
        parent = model.parent(call)
        if type(parent) is cst.Assign and any(type(t.target) in (cst.Tuple, cst.List) for t in parent.targets):
            return False
        if helper is not None:
            default = next((p.default for p in [*helper.params.params, *helper.params.kwonly_params]
                            if p.name.value == "return_mode"), None)
            known = type(default) is cst.SimpleString and default.evaluated_value == "mean"
        else:
            receiver = call.func.value if type(call.func) is cst.Attribute else None
            known = qual.startswith(("triton.", "tilelang.")) or (
                receiver is not None and "profiler" in code(receiver).lower()
                and any(q.split(".")[0] == "tilelang" for q in model.imports.values()))
        return known and not self._median_too(call)

    def _running_total(self, node: cst.BinaryOperation) -> bool:
        """``total / iters`` (or ``/ len(...)``) where ``total`` is a name the same function adds
        per-run timings to inside a loop (``total += start.elapsed_time(end)``): the mean of the runs."""
        left = node.left
        if type(left) is cst.Call and type(left.func) is cst.Name and left.func.value in ("float", "int"):
            left = left.args[0].value if left.args else left
        if type(left) not in (cst.Name, cst.Attribute, cst.Subscript):
            return False
        fn = self.model.enclosing_function(node)
        if fn is None or code(left) not in self._totals.get(id(fn), set()):
            return False
        return not self._median_too(node) and not self._estimate(fn)

    def _mean_of_list(self, node: cst.CSTNode, timings: set[str]) -> bool:
        """``statistics.mean(times)``, ``np.mean(times)``, ``sum(times) / len(times)`` over a list
        of per-run timings, in a function that reports no median."""
        model = self.model
        if type(node) is cst.Call:
            found = last(model.call_name(node) or model.dotted(node.func)) in MEANS and self._mentions(node, timings)
        elif type(node) is cst.BinaryOperation:
            found = type(node.operator) is cst.Divide and type(node.left) is cst.Call and last(
                model.dotted(node.left.func)) == "sum" and self._mentions(node.left, timings)
        else:
            return False
        return found and not self._median_too(node)

    def _timer_value(self, expr: cst.CSTNode) -> bool:
        """A timer call under ``expr`` (``time.perf_counter() - t0``, ``start.elapsed_time(end)``)."""
        model = self.model
        return any(type(n) is cst.Call and (model.call_name(n) in HOST_TIMERS
                                            or last(model.dotted(n.func)) == "elapsed_time") for n in nodes_under(expr))

    def _divided_total(self, fn: cst.FunctionDef | cst.Module, node: cst.BinaryOperation) -> int | None:
        """``(time.perf_counter() - t0) / iters`` (or a name holding such a total) where ``iters``
        is the count of a ``for _ in range(iters)`` loop in the same function, of 2 to FEW_RUNS
        runs: the window around the loop, wherever its timers stand (one inside a ``with``
        block, the other in the ``return``), reports the mean of a handful of runs."""
        right = node.right
        n = int_value(fn, right, self.context.module)
        if n is None or not 1 < n <= FEW_RUNS:
            return None
        body = fn.body if type(fn) is cst.FunctionDef else fn
        totals = {t.target.value for a in nodes_under(body) if type(a) is cst.Assign and self._timer_value(a.value)
                  for t in a.targets if type(t.target) is cst.Name}
        if not (self._timer_value(node.left) or any(type(x) is cst.Name and x.value in totals
                                                    for x in nodes_under(node.left))):
            return None
        count = code(right) if type(right) in (cst.Name, cst.Attribute) else None
        for loop in nodes_under(body):
            if type(loop) is cst.For and type(loop.iter) is cst.Call and self.model.dotted(loop.iter.func) == "range" \
                    and len(loop.iter.args) == 1:
                arg0 = loop.iter.args[0].value
                if (type(arg0) in (cst.Name, cst.Attribute) and code(arg0) == count) or (
                        count is None and type(arg0) is cst.Integer and int(arg0.evaluated_value) == n):
                    return n
        return None

    def _mean_read(self, node: cst.Attribute | cst.Subscript, timings: set[str]) -> bool:
        """``m.mean`` or ``stats["mean"]`` (not a call: ``.mean()`` is judged above) read off a
        name the same function assigned from a call that returns timings or their statistics
        (``_, m = benchmark_forward(...)``, ``stats = get_timing_stats(times)``, a call given a
        list of per-run timings): the figure reported is a mean."""
        model = self.model
        if type(node) is cst.Attribute:
            if node.attr.value != "mean" or type(model.parent(node)) is cst.Call and model.parent(node).func is node:
                return False
            base = node.value
        else:
            key = node.slice[0].slice if len(node.slice) == 1 and type(node.slice[0].slice) is cst.Index else None
            if key is None or type(key.value) is not cst.SimpleString or key.value.evaluated_value != "mean":
                return False
            base = node.value
        if type(base) is cst.Call:  # ``timer.blocked_autorange().mean``, ``Timer(...).timeit(100).mean``
            return bool(TIMING_RESULT.search(last(model.call_name(base) or model.dotted(base.func) or "")))
        if type(base) is not cst.Name:
            return False
        fn = model.enclosing_function(node)
        if fn is None:
            return False
        for a in nodes_under(fn.body):
            if type(a) is not cst.Assign or type(a.value) is not cst.Call:
                continue
            bound = {x.value for t in a.targets for x in nodes_under(t.target) if type(x) is cst.Name}
            if base.value not in bound:
                continue
            helper = model.callee(a.value)
            if helper is not None and id(helper) in self._meaned:
                continue  # the same-module helper's mean is reported where it is taken
            name = last(model.call_name(a.value) or model.dotted(a.value.func))
            if TIMING_RESULT.search(name) or any(type(x) is cst.Name and x.value in timings
                                                 for arg0 in a.value.args for x in nodes_under(arg0.value)):
                return True
        return False

    def _median_too(self, node: cst.CSTNode) -> bool:
        """The function reports the median or percentiles as well (a name, an attribute or a
        ``stats["median"]`` entry): the mean is an extra column."""
        fn = self.model.enclosing_function(node)
        return fn is not None and any(
            (type(n) is cst.Name and SPREAD.search(n.value)) or (type(n) is cst.Attribute and SPREAD.search(n.attr.value))
            or (type(n) is cst.SubscriptElement and type(n.slice) is cst.Index and type(n.slice.value) is cst.SimpleString
                and SPREAD.search(n.slice.value.value))  # stats["median"]
            for n in nodes_under(fn.body, nested=True))

    def _estimate(self, root: cst.CSTNode) -> bool:
        """The short window only estimates the time of a call to size the real measurement
        (``estimate_ms = ...; n_repeat = int(rep / estimate_ms)``), as ``do_bench`` does: a name
        says so, or the time it measured flows into the count of a later loop
        (``est = start.elapsed_time(end) / 5; iters = int(budget_ms / est); for _ in range(iters)``)."""
        if any(type(n) is cst.Name and ESTIMATE.search(n.value) for n in nodes_under(root, nested=True)):
            return True
        timed: set[str] = set()  # names holding a measured time, or derived from one
        for a in nodes_under(root, nested=True):
            if type(a) is cst.Assign and (self._timer_value(a.value) or any(
                    type(x) is cst.Name and x.value in timed for x in nodes_under(a.value))):
                timed |= {t.target.value for t in a.targets if type(t.target) is cst.Name}
        return bool(timed) and any(
            type(c) is cst.Call and self.model.dotted(c.func) == "range"
            and any(type(x) is cst.Name and x.value in timed for arg0 in c.args for x in nodes_under(arg0.value))
            for c in nodes_under(root, nested=True))

    def _mentions(self, node: cst.CSTNode, timings: set[str]) -> bool:
        return any((type(n) is cst.Name and n.value in timings) or (type(n) is cst.Subscript and code(n) in timings)
                   for n in nodes_under(node))

    def _timing_lists(self, module: cst.Module) -> set[str]:
        """Names of lists filled with per-run timings: ``times.append(start.elapsed_time(end))``,
        ``times.append(time.perf_counter() - t0)``, or a comprehension over elapsed times."""
        model = self.model
        timer_names: set[str] = set()  # names holding a timestamp or an elapsed time
        for n in nodes_under(module, nested=True):
            if type(n) is cst.Assign and type(n.value) is cst.Call and (
                    model.call_name(n.value) in HOST_TIMERS or last(model.dotted(n.value.func)) == "elapsed_time"):
                timer_names |= {t.target.value for t in n.targets if type(t.target) is cst.Name}
        # and names computed from those in the same function: ``t = time.perf_counter() - t0``,
        # ``tokens_sec = tokens / t`` (a rate is a timing too)
        for fn in [module, *(f for f in nodes_under(module, nested=True) if type(f) is cst.FunctionDef)]:
            local = set(timer_names)
            for n in nodes_under(fn.body if type(fn) is cst.FunctionDef else fn):
                if type(n) is cst.Assign and any(
                        (type(x) is cst.Name and x.value in local) or (type(x) is cst.Call and (
                            model.call_name(x) in HOST_TIMERS or last(model.dotted(x.func)) == "elapsed_time"))
                        for x in nodes_under(n.value)):
                    local |= {t.target.value for t in n.targets if type(t.target) is cst.Name}
            timer_names |= local

        def returns_time(fn: cst.FunctionDef) -> bool:
            """A same-module helper whose returned value is a timer reading or a name derived from one
            (``return start.elapsed_time(end) / iters``, ``return time.perf_counter() - t0``)."""
            local = set(timer_names)
            for n in nodes_under(fn.body):
                if type(n) is cst.Assign and any(
                        (type(x) is cst.Name and x.value in local) or (type(x) is cst.Call and (
                            model.call_name(x) in HOST_TIMERS or last(model.dotted(x.func)) == "elapsed_time"))
                        for x in nodes_under(n.value)):
                    local |= {t.target.value for t in n.targets if type(t.target) is cst.Name}
            return any(type(r) is cst.Return and r.value is not None and any(
                (type(x) is cst.Name and x.value in local) or (type(x) is cst.Call and (
                    model.call_name(x) in HOST_TIMERS or last(model.dotted(x.func)) == "elapsed_time"))
                for x in nodes_under(r.value)) for r in nodes_under(fn.body))

        def is_timing(expr) -> bool:
            for s in nodes_under(expr):
                if type(s) is cst.Call and (last(model.dotted(s.func)) == "elapsed_time"
                                                or model.call_name(s) in HOST_TIMERS):
                    return True
                if type(s) is cst.Call:  # ``times.append(time_once(fn))``: a helper that returns a timing
                    helper = model.callee(s)
                    if helper is not None and returns_time(helper):
                        return True
                if type(s) is cst.Name and s.value in timer_names:
                    return True
            return False

        lists: set[str] = set()
        for n in nodes_under(module, nested=True):
            if type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "append" \
                    and type(n.func.value) in (cst.Name, cst.Subscript) and n.args and is_timing(n.args[0].value):
                lists.add(code(n.func.value))  # ``times`` or ``metrics["tokens_per_sec"]``
            elif type(n) is cst.Assign and type(n.value) in (cst.ListComp, cst.List) and is_timing(n.value):
                lists |= {t.target.value for t in n.targets if type(t.target) is cst.Name}
            elif type(n) is cst.AugAssign and type(n.operator) is cst.AddAssign and is_timing(n.value) and type(
                    n.target) in (cst.Name, cst.Attribute, cst.Subscript):
                if type(n.value) in (cst.List, cst.ListComp):
                    lists.add(code(n.target))  # ``ret += [start.elapsed_time(end) / n_repeat]``
                elif any(type(a) in (cst.For, cst.While) for a in model.ancestors(n)):
                    fn = model.enclosing_function(n)  # ``total += start.elapsed_time(end)``, once per run
                    if fn is not None:
                        self._totals.setdefault(id(fn), set()).add(code(n.target))
        return lists


class _BenchScope:
    """The family's scope, and functions named for benchmarking anywhere in their name."""

    def __init__(self, scope: Scope, model) -> None:
        self.scope, self.model, self.gpu = scope, model, scope.gpu

    def covers(self, node: cst.CSTNode) -> bool:
        if self.scope.covers(node):
            return True
        chain = [node] if type(node) is cst.FunctionDef else []
        chain += [a for a in self.model.ancestors(node) if type(a) is cst.FunctionDef]
        return any(BENCH_NAME.search(f.name.value) for f in chain)


# -- gate -----------------------------------------------------------------------------------------


