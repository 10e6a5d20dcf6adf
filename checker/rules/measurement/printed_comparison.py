from __future__ import annotations

import re

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.measurement import Scope, is_compare, last, nodes_under

ASSERTING = ("assert", "fail", "exit")
# A checking helper named so among the words of its name (gems_assert_close, _assert_equal,
# check_assert_close): a project's own wrapper of an assert.
ASSERT_WORD = re.compile(r"(^|_)assert(_|$)", re.IGNORECASE)
# Helpers that only report (print_mismatch_details, log_errors, show_diff).
REPORTER = re.compile(r"^_?(print|log|report|show|dump|describe|display|summari[sz]e|emit)", re.IGNORECASE)
# Error measures compared with a bound (if max_diff > tol:).
ERROR_NAME = re.compile(r"diff|err|mismatch|dist|sim", re.IGNORECASE)
# Timing columns of a benchmark table.
TIMING = re.compile(r"time|_ms$|^ms$|_us$|^us$|lat|speed|^spd$|^t_|tflop|gbps|bandwidth|^bw", re.IGNORECASE)


class PrintedComparison(Rule):
    """A result compared only by printing the difference.

    ## What it does
    In test and benchmark code, finds functions (and script top levels) that print or log a
    comparison — the result of `allclose`/`isclose`/`equal`, or an error such as
    `(out - ref).abs().max()`, directly or as returned by a same-module helper that measures it
    (`err = relative_error(out, ref)`) — and never check it: no `assert`, no `raise`, no `assert_*`
    call, no `pytest.fail` or `sys.exit`, the difference is not returned to a caller, and the
    function is not a helper whose callers all assert. A checking helper that prints a comparison
    and returns it is reported where it is called as a bare statement (`check(out, ref)`, its
    result dropped) by a caller that checks nothing itself. Also left alone: a comparison whose result
    decides something (`if not torch.allclose(...): return False`, `results[k] = passed`,
    `if max_diff > tol:`), reporting helpers (`print_*`, `log_*`, `report_*`, `show_*`), and a
    printed row of a benchmark table (the error is a column beside the timings).

    ## Why is this bad?
    A printed difference is read once, by a person, on the shape they tried; afterwards the
    script keeps passing whatever the kernel returns. A kernel bug produces plausible output at
    a good latency, so nobody rereads the log. A check that cannot fail is not a check.

    ## Example
    ```python
    out = rms_norm(x, w)
    print("max diff:", (out - ref).abs().max().item())
    ```

    ## Use instead
    ```python
    out = rms_norm(x, w)
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1.6e-2)
    ```
    """

    CODE = "KC404"
    NAME = "printed-comparison"
    MESSAGE = "{what} is printed but never checked in {where}: nothing fails when the kernel is wrong"
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("verification/ways-kernels-cheat-benchmarks", "verification/tolerances-by-dtype")
    VALID = [
        """
import torch
def test_norm():
    out = norm(x)
    print("max diff", (out - ref).abs().max().item())
    torch.testing.assert_close(out, ref)
""",
        """
import torch
def max_error(out, ref):
    err = (out - ref).abs().max()
    print(err)
    return err
""",
    ]
    INVALID = [
        """
import torch
def bench_norm(x, w, ref):
    out = norm(x, w)
    print("max diff:", (out - ref).abs().max().item())
""",
        """
import torch
if __name__ == "__main__":
    out = kernel(x)
    print("match:", torch.allclose(out, ref, atol=1e-2))
""",
        """
import logging
logger = logging.getLogger(__name__)
def verify(out, ref):
    diff = (out.float() - ref.float()).abs().max().item()
    logger.info("max abs diff %f", diff)
""",
    ]
    PREFILTER = (r"print|log|warn|write",)
    NEEDS = ("output check",)

    def leave_Module(self, original_node: cst.Module) -> None:
        scope = Scope(self)
        roots: list[tuple[cst.CSTNode, str]] = [(fn, f"{fn.name.value}()") for fn in scope.functions()]
        if scope.whole_file:
            roots.append((original_node, "this script"))
        for root, where in roots:
            if type(root) is cst.FunctionDef and (self._callers_check(root, original_node)
                                                     or REPORTER.match(root.name.value)):
                continue  # a reporting helper (print_mismatch_details) of checks made elsewhere
            if self._decides(root):
                continue  # the comparison's result decides something: the printed error is extra detail
            self._check(root, where)

    def _decides(self, root: cst.CSTNode) -> bool:
        """A comparison whose result is used, not only printed: in an ``if`` or a ``return``
        (``if not torch.allclose(...): return False``), or stored (``results[k] = passed``),
        or an error measure compared with a bound (``if max_diff > tol:``)."""
        model = self.model
        body = root.body if type(root) is cst.FunctionDef else root
        results: set[str] = set()
        for n in nodes_under(body):
            if type(n) is cst.Assign and len(n.targets) == 1 and type(n.targets[0].target) is cst.Name and \
                    any(type(c) is cst.Call and is_compare(model, c) for c in nodes_under(n.value)):
                results.add(n.targets[0].target.value)
        for n in nodes_under(body):
            tests = []
            if type(n) in (cst.If, cst.While):
                tests = [n.test]
            elif type(n) is cst.IfExp:
                tests = [n.test]
            elif type(n) is cst.Return and n.value is not None:
                tests = [n.value]
            elif type(n) is cst.Assign and any(type(t.target) is cst.Subscript for t in n.targets):
                tests = [n.value]
            for t in tests:
                for x in nodes_under(t):
                    if type(x) is cst.Call and is_compare(model, x):
                        return True
                    if type(x) is cst.Name and x.value in results:
                        return True
                    if type(x) is cst.Comparison and self._difference(x, set()) is None and type(n) is cst.If \
                            and any(type(y) is cst.Name and ERROR_NAME.search(y.value) for y in nodes_under(x)):
                        return True
        return False

    def _returns_error(self, fn: cst.FunctionDef) -> bool:
        """A helper whose returned value is a comparison or an error measure of its arguments
        (``return float((num / den).item())`` after ``num = (a - b).abs().max()``)."""
        memo = self.__dict__.setdefault("_error_helpers", {})
        if id(fn) not in memo:
            memo[id(fn)] = False  # a helper that calls itself returns no error through that call
            diffs: set[str] = set()
            found = False
            for node in nodes_under(fn.body):
                if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
                    if self._difference(node.value, diffs):
                        diffs.add(node.targets[0].target.value)
                elif type(node) is cst.Return and node.value is not None and self._difference(node.value, diffs):
                    found = True
            memo[id(fn)] = found
        return memo[id(fn)]

    def _callers_check(self, fn: cst.FunctionDef, module: cst.Module) -> bool:
        """A helper that prints statistics for callers that all assert (there is at least one)."""
        callers = [self.model.enclosing_function(c) for c in self.model.callers(fn)]
        return bool(callers) and all(c is not None and self._asserts(c) for c in callers)

    def _asserts(self, fn: cst.FunctionDef) -> bool:
        for node in nodes_under(fn.body):
            if type(node) in (cst.Assert, cst.Raise):
                return True
            if type(node) is cst.Call and (last(self.model.call_name(node)).startswith(ASSERTING)
                                           or ASSERT_WORD.search(last(self.model.call_name(node)))):
                return True
        return False

    def _check(self, root: cst.CSTNode, where: str) -> None:
        model = self.model
        body = root.body if type(root) is cst.FunctionDef else root
        diffs: set[str] = set()
        printed: list[tuple[cst.Call, str]] = []
        returned: set[str] = set()
        for node in nodes_under(body):
            if type(node) in (cst.Assert, cst.Raise):
                return
            if type(node) is cst.Call:
                name = last(model.call_name(node))
                if name.startswith(ASSERTING) or ASSERT_WORD.search(name):
                    return
            if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
                if self._difference(node.value, diffs):
                    diffs.add(node.targets[0].target.value)
            if type(node) is cst.Return and node.value is not None:
                returned |= {n.value for n in nodes_under(node.value) if type(n) is cst.Name}
                if self._difference(node.value, diffs):
                    return
            if type(node) is cst.Expr and type(node.value) is cst.Call:
                helper = model.callee(node.value)
                if type(helper) is cst.FunctionDef and helper is not root and self._returns_error(helper) \
                        and not self._asserts(helper) and any(
                            type(c) is cst.Call and model.log_kind(c) for c in nodes_under(helper.body)):
                    # ``check(out, ref)`` as a statement: the helper prints the comparison it
                    # returns, and the caller drops it
                    printed.append((node.value, f"the comparison returned by {helper.name.value}()"))
            if type(node) is cst.Call and model.log_kind(node):
                if any(type(x) is cst.Name and TIMING.search(x.value) for a in node.args for x in nodes_under(a.value)):
                    continue  # a row of a benchmark table: the error is a column beside the timings
                for a in node.args:
                    what = self._difference(a.value, diffs)
                    if what:
                        printed.append((node, what))
                        break
        for call, what in printed:
            if what in returned:
                continue
            self.report(call, what=what, where=where)
            return

    def _difference(self, expr: cst.CSTNode, diffs: set[str]) -> str | None:
        """What in ``expr`` is a comparison or an error measure, or None; a call of a same-module
        helper that returns one (``relative_error(out, ref)``) is one too."""
        for n in nodes_under(expr):
            if type(n) is cst.Name and n.value in diffs:
                return n.value
            if type(n) is cst.Call:
                if is_compare(self.model, n):
                    return f"{last(self.model.call_name(n))}()"
                helper = self.model.callee(n)
                if type(helper) is cst.FunctionDef and self._returns_error(helper):
                    return f"the error from {helper.name.value}()"
                func = n.func
                if type(func) is cst.Attribute and func.attr.value == "abs" and any(
                        type(s) is cst.BinaryOperation and type(s.operator) is cst.Subtract
                        for s in nodes_under(func.value)):
                    return "the difference"
                if last(self.model.call_name(n)) == "abs" and n.args and any(
                        type(s) is cst.BinaryOperation and type(s.operator) is cst.Subtract
                        for s in nodes_under(n.args[0].value)):
                    return "the difference"
        return None


