from __future__ import annotations

import ast
import re

import libcst as cst

from kcheck.gate import NESTED_SCOPES, ast_children, dotted
from kcheck.model import HOST_TIMERS, MEASUREMENT_PATH
from kcheck.rule import Rule
from kcheck.rules.measurement import (
    TIMER_TEXT, Scope, arg, code, device_timing, int_value, last, nodes_under, reads_back, region_root,
    work_calls,
)


BENCH_NAME = re.compile(r"^_?(bench|time|timeit|timing|measure|run_bench)", re.IGNORECASE)


class MissingWarmup(Rule):
    """A timed call with no warm-up call before the timing starts.

    ## What it does
    In test and benchmark code, finds CUDA-event windows (`start.record()` ... `end.record()`)
    and host-timer windows (`perf_counter()` ... `perf_counter()`) where the timed function is
    not called anywhere before the window opens, and the function has no warm-up of its own
    (nothing named `warmup`, `warm_up`, `n_warmup`...). When the timed call is a parameter
    (`fn(*args)` in a timing helper), the helper's same-module callers must warm up the callable
    they pass instead; a timing function whose first call's result is thrown away is warmed by
    that call, and so is one nested in a benchmark that calls it (or an alias of it) for a
    warm-up first, and a local closure (`runner()`) whose work was called before, or a local alias
    (`runner = call_fn`) of a function called before. A window that accumulates values read back
    to the host on every step (`count += x.sum().item()`) is a host-side statistics loop, not a
    kernel timing. Only code that measures to report a number is judged: a benchmark or timing
    file, or a function named `bench*`/`time*`/`measure*`; a window whose elapsed time is only
    asserted under a bound (`assert elapsed < DEADLOCK_SECONDS`, a hang check), a `test_*` function printing how long its reference took, and
    serving code profiling itself (`_profile_*`), are left alone. Also finds `do_bench(..., warmup=0)`.

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
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
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
if __name__ == "__main__":
    print(bench(my_kernel, torch.randn(4096, 4096, device="cuda")))
""",
        """
import torch
def bench_gemm(a, b):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    c = my_gemm(a, b)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)
""",
        """
import triton
def bench(x):
    return triton.testing.do_bench(lambda: kernel(x), warmup=0, rep=100)
""",
    ]
    PREFILTER = (TIMER_TEXT,)
    NEEDS = ("timing",)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        scope = Scope(self)
        if not scope.gpu:
            return
        for region in model.timed_regions:
            if not device_timing(region) or not scope.covers(region.nodes[0]):
                continue
            timed = work_calls(model, region.nodes)
            if not timed:
                continue
            root = region_root(model, region)
            if not self._benchmark(region):
                continue
            # calls before the window in source order warm it up: before the loops around it, or
            # earlier in the same iteration (for _ in range(20): fn() just above the window)
            start = region.nodes[0]
            names = {code(c.func) for c in timed}
            for c in timed:  # a local closure (runner()) is warmed by a call of what it runs (call_fn())
                target = model.callee(c)
                if target is not None:
                    names |= {code(x.func) for x in nodes_under(target.body) if type(x) is cst.Call}
            if reads_back(region):
                continue  # reads a value back every step: a host-side statistics loop, not a kernel timing
            if self._watchdog(root):
                continue  # the elapsed time is asserted under a bound: a hang or timeout check, not a figure
            fn_body = region.function.body if region.function is not None else root
            for _ in range(2):  # runner = call_fn: the alias is warmed by a call of what it names
                for n in nodes_under(fn_body):
                    if type(n) is cst.Assign and type(n.value) is cst.Name and any(
                            type(t.target) is cst.Name and t.target.value in names for t in n.targets):
                        names.add(n.value.value)
            if self._warm(root, start, names):
                continue
            if self._warmed_by_first_call(region.function, original_node) or self._warmed_by_parent(region.function):
                continue
            by_callers = self._warmed_by_callers(region.function, timed, original_node)
            if by_callers is None or not by_callers:
                self.report(timed[0], call=code(timed[0].func), how="with no warm-up call before the timing starts")
        for node in nodes_under(original_node, nested=True):
            if type(node) is cst.Call and last(model.call_name(node)) == "do_bench":
                if int_value(None, arg(node, 99, "warmup")) == 0:
                    self.report(node, call="do_bench", how="with warmup=0")

    def _benchmark(self, region) -> bool:
        """Code that measures to report a number: a benchmark or timing file, or a function named
        bench*/time*/measure*. A test (test_*) that prints how long its reference took, and serving
        code that profiles itself (_profile_prefill_latency, check_*), are judged by other means."""
        fn = region.function
        names = [a.name.value for a in [fn, *self.model.ancestors(fn)] if type(a) is cst.FunctionDef] if fn else []
        if any(n.lower().startswith(("test", "_test")) for n in names[:1]):
            return False
        if MEASUREMENT_PATH.search(self.model.path):
            return True
        return any(BENCH_NAME.match(n) for n in names)

    def _watchdog(self, root: cst.CSTNode) -> bool:
        """The function asserts (or raises) on the elapsed time it took against a bound
        (``assert elapsed < DEADLOCK_SECONDS``): the window guards against a hang, and the first
        call's compilation is part of what it allows for."""
        model = self.model
        body = root.body if type(root) is cst.FunctionDef else root
        elapsed: set[str] = set()
        for n in nodes_under(body):
            if type(n) is cst.Assign and any(
                    type(x) is cst.Call and (model.call_name(x) in HOST_TIMERS or last(model.dotted(x.func)) == "elapsed_time")
                    for x in nodes_under(n.value)) and type(n.value) is not cst.Call:
                elapsed |= {t.target.value for t in n.targets if type(t.target) is cst.Name}
        checks = [n.test for n in nodes_under(body) if type(n) is cst.Assert]
        checks += [n.test for n in nodes_under(body) if type(n) is cst.If
                   and any(type(x) is cst.Raise for x in nodes_under(n.body))]
        return any(type(c) is cst.Comparison and any(type(x) is cst.Name and x.value in elapsed for x in nodes_under(c))
                   for t in checks for c in nodes_under(t))

    def _warm(self, root: cst.CSTNode, start: cst.CSTNode, names: set[str]) -> bool:
        """``root`` warms up: it names a warm-up, or calls one of ``names`` before ``start``."""
        seen_start = False
        for n in nodes_under(root):
            if n is start:
                seen_start = True
            if type(n) is cst.Name and "warm" in n.value.lower():
                return True
            if not seen_start and type(n) is cst.Call and code(n.func) in names:
                return True
        return False

    def _warmed_by_first_call(self, fn, module) -> bool:
        """The timing function is called more than once and its first result is thrown away
        (``gen()  # warm-up`` then ``[gen() for _ in range(n)]``)."""
        if fn is None:
            return False
        sites = self.model.callers(fn)
        return len(sites) >= 2 and type(self.model.parent(sites[0])) is cst.Expr

    def _warmed_by_parent(self, fn) -> bool:
        """A timing function nested in a benchmark that warms it up: the enclosing function calls
        it (or an alias, ``run_benchmark = run_cuda_benchmark``) once and throws the result away
        before the measured call, or names a warm-up (``num_warmup_iters``)."""
        if fn is None:
            return False
        parent = self.model.enclosing_function(fn)
        if parent is None:
            return False
        names = {fn.name.value}
        for n in nodes_under(parent.body):
            if type(n) is cst.Assign and type(n.value) is cst.Name and n.value.value in names:
                names |= {t.target.value for t in n.targets if type(t.target) is cst.Name}
        sites = [n for n in nodes_under(parent.body) if type(n) is cst.Call and type(n.func) is cst.Name
                 and n.func.value in names]
        if len(sites) >= 2 and type(self.model.parent(sites[0])) is cst.Expr:
            return True
        return bool(sites) and any(type(n) is cst.Name and "warm" in n.value.lower()
                                   for n in nodes_under(parent.body))

    def _warmed_by_callers(self, fn, timed, module) -> bool | None:
        """When every timed call is a call of a parameter (``fn(*args)``), the callers warm up or
        not: True if every same-module call site does (or there is none to judge), False if one
        does not, None when the timed calls are not all parameters."""
        if fn is None:
            return None
        params = [p.name.value for p in fn.params.params]
        called = {c.func.value for c in timed if type(c.func) is cst.Name}
        if not called or not called <= set(params):
            return None
        sites = self.model.callers(fn)
        for site in sites:
            passed = {code(v) for v in (arg(site, params.index(p), p) for p in called) if v is not None}
            stmt = next((a for a in self.model.ancestors(site) if type(a) is cst.SimpleStatementLine), site)
            caller = self.model.enclosing_function(site) or module
            if not self._warm(caller, stmt, passed):
                return False
        return True


# -- the gate's mirror of ``_warm`` -------------------------------------------------------------


def _calls(roots, direct: bool):
    """The calls under ``roots`` (a node or a list of statements) outside nested defs, classes and
    lambdas; with ``direct``, only those ``work_calls`` may list: not inside another call's
    arguments, not a ``with`` item's context manager."""
    stack = [roots] if isinstance(roots, ast.AST) else list(roots)
    first = stack[0] if isinstance(roots, ast.AST) else None
    while stack:
        node = stack.pop()
        if isinstance(node, NESTED_SCOPES) and node is not first:
            continue
        if type(node) is ast.Call:
            yield node
            if direct:
                stack.append(node.func)  # a call's arguments hold no direct call
                continue
        if direct and type(node) in (ast.With, ast.AsyncWith):
            stack.extend(node.body)
            continue
        stack.extend(ast_children(node))


def _text(call: ast.Call) -> str | None:
    """``code(call.func)`` where the ast can spell it exactly: a dotted name on one line, with no
    parentheses or spaces in it (its width is its length), starting where the call starts."""
    func = call.func
    name = dotted(func) if type(func) in (ast.Name, ast.Attribute) else None
    if name is None or "(" in name or func.lineno != func.end_lineno or func.col_offset != call.col_offset:
        return None
    return name if func.end_col_offset - func.col_offset == len(name) else None
