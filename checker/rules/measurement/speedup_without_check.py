from __future__ import annotations

import ast
import re

import libcst as cst

from kcheck.model import LOG_METHODS, MEASUREMENT_FUNCTION
from kcheck.rule import Rule
from kcheck.rules.measurement import COMPARES, Scope, is_compare, last, nodes_under, timing

SPEEDUP = re.compile(r"speed[- _]?up|\d?x faster|faster than|times faster", re.IGNORECASE)
CHECKERS = ("assert", "verify", "check", "validate", "compare", "test_")
# Words of a function's name (split at underscores) that say it checks results wherever they stand:
# ``sanity_check_outputs``, ``run_correctness_check``, ``_verify``. Not ``compare``: ``compare_backends``
# in a benchmark compares timings.
CHECK_PARTS = {"assert", "verify", "check", "checks", "validate", "correctness", "sanity"}
PRINTED_MESSAGE = ("a speed-up is reported but this file's comparison of the candidate's output is only printed, "
                   "never acted on: a microbenchmark can reject a kernel, never accept one (fail on a mismatch)")
NOT_OUTPUT_CHECKS = ("is_available", "is_cuda", "shape", "dtype", "device", "is_contiguous", "version")


class SpeedupWithoutCheck(Rule):
    """A benchmark that reports a speed-up and never checks the candidate's output.

    ## What it does
    In test and benchmark code, finds a reported speed-up (a printed, logged or stored string
    saying "speedup", "speed-up", "x faster", or a variable named `*speedup*`) in a module that
    never checks the candidate's result: no `assert_close`/`allclose`/`isclose`/`torch.equal`,
    no call to a `verify*`/`check*`/`assert*`/`compare*` function or one with `check`, `verify`,
    `validate`, `correctness` or `sanity` among the words of its name (`sanity_check_outputs`),
    and no `assert` on values (asserts on shapes, dtypes, devices and availability do not count).
    A check whose outcome only warns still counts: it is there and runs. Comparisons that are
    only printed (`print(torch.allclose(a, b))`) decide nothing; the report then says so.

    ## Why is this bad?
    A kernel bug produces fluent, plausible, wrong output at a very good latency: a kernel that
    skips work is fast. A microbenchmark can reject a kernel, never accept one, and a speed-up
    measured on a candidate that was not verified in the same script, on the same inputs, is no
    evidence at all.

    ## Example
    ```python
    t_ref = do_bench(lambda: torch_rms_norm(x, w))
    t_new = do_bench(lambda: rms_norm(x, w))
    print(f"speedup: {t_ref / t_new:.2f}x")
    ```

    ## Use instead
    ```python
    torch.testing.assert_close(rms_norm(x, w), torch_rms_norm(x.float(), w.float()).to(x.dtype),
                               atol=1e-2, rtol=1.6e-2)
    t_ref = do_bench(lambda: torch_rms_norm(x, w))
    t_new = do_bench(lambda: rms_norm(x, w))
    print(f"speedup: {t_ref / t_new:.2f}x")
    ```
    """

    CODE = "KC410"
    NAME = "speedup-without-check"
    MESSAGE = ("a speed-up is reported but nothing in this file checks the candidate's output: a microbenchmark "
               "can reject a kernel, never accept one")
    SEVERITY = "error"
    KNOWLEDGE = ("profiling/microbenchmark-rejects-never-accepts", "verification/ways-kernels-cheat-benchmarks")
    VALID = [
        """
import torch
from triton.testing import do_bench
def bench(x, w):
    torch.testing.assert_close(rms_norm(x, w), ref(x, w), atol=1e-2, rtol=1.6e-2)
    t_ref = do_bench(lambda: ref(x, w))
    t_new = do_bench(lambda: rms_norm(x, w))
    print(f"speedup: {t_ref / t_new:.2f}x")
""",
        """
def describe(a, b):
    return f"speedup {a / b:.2f}x"
""",
    ]
    INVALID = [
        """
import torch
from triton.testing import do_bench
def bench(x, w):
    t_ref = do_bench(lambda: ref(x, w))
    t_new = do_bench(lambda: rms_norm(x, w))
    print(f"speedup: {t_ref / t_new:.2f}x")
""",
        """
import time
def benchmark(fn, baseline, x):
    assert x.is_cuda
    speedup = timeit(baseline, x) / timeit(fn, x)
    results = {"speedup": speedup}
    return results
""",
    ]
    PREFILTER = (r"(?i)speed[- _]?up|faster",)

    @classmethod
    def gate(cls, summary, config) -> bool:
        """Necessary: nothing in the file certainly checks the output (``_gate_checks``), and a
        claim (a string saying "speedup", or an assignment to ``*speedup*``) in measurement code
        (``Scope.covers``: the path, a call that may be ``assert_close``/``allclose``/``do_bench``,
        or a ``test*``/``bench*``/... def around it)."""
        if summary.tree is None:
            return True
        facts = timing.timing_facts(summary)
        if _gate_checks(facts):
            return False
        whole = facts.facts.whole_file
        if not whole and not any(MEASUREMENT_FUNCTION.match(f.name) for f in summary.functions):
            return False
        return _gate_claim(summary.tree, whole)

    def leave_Module(self, original_node: cst.Module) -> None:
        checked = self._checks_output(original_node)
        if checked is True:
            return
        scope = Scope(self)
        for node in nodes_under(original_node, nested=True):
            claim = False
            if isinstance(node, cst.SimpleString):
                if isinstance(self.model.parent(node), cst.Expr):
                    continue  # a docstring describes, it does not report
                claim = bool(SPEEDUP.search(str(node.evaluated_value)))
            elif isinstance(node, cst.FormattedStringText):
                claim = bool(SPEEDUP.search(node.value))
            elif isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name):
                claim = "speedup" in node.target.value.lower()
            if claim and scope.covers(node):
                self.report(self._statement(node), PRINTED_MESSAGE if checked == "printed" else None)
                return

    def _statement(self, node: cst.CSTNode) -> cst.CSTNode:
        for anc in self.model.ancestors(node):
            if isinstance(anc, cst.SimpleStatementLine):
                return anc.body[0]
        return node

    def _checks_output(self, module: cst.Module) -> bool | str:
        """True when the module checks the candidate's output: a comparison (``assert_close``,
        ``allclose``...) or a call of a function named for checking (``check*``, ``verify*``,
        ``sanity_check_outputs``) whose result is not only printed, or an ``assert`` on values.
        A check that warns counts (``if not sanity_check(...): print("WARN")``): it is there and
        runs. ``"printed"`` when the only comparisons are printed (``print(torch.allclose(a, b))``)."""
        model = self.model
        printed = False
        for n in nodes_under(module, nested=True):
            if isinstance(n, cst.Call):
                name = last(model.dotted(n.func)).lower()
                checks = is_compare(model, n, COMPARES) or name.startswith(CHECKERS) or _check_name(name)
                if checks and not any(isinstance(a, cst.Call) and model.log_kind(a) for a in model.ancestors(n)):
                    return True
                printed = printed or checks  # a comparison that is only printed decides nothing
            elif isinstance(n, cst.Assert):
                words = {x.value for x in nodes_under(n.test) if isinstance(x, cst.Name)}
                words |= {x.attr.value for x in nodes_under(n.test) if isinstance(x, cst.Attribute)}
                if not any(w.startswith(NOT_OUTPUT_CHECKS) for w in words):
                    return True
        return "printed" if printed else False


def _check_name(name: str) -> bool:
    """A function named for checking results by one word of its name (``sanity_check_outputs``)."""
    return not CHECK_PARTS.isdisjoint(name.lower().split("_"))


# -- gate -----------------------------------------------------------------------------------------

# calls that may be print() or logging (``ModuleModel.log_kind``), by their last name part
LOG_LASTS = LOG_METHODS | {"print", "warn", "write", "pprint"}


def _gate_checks(facts) -> bool:
    """Whether ``_checks_output`` certainly holds: a call that is a comparison under every name
    the imports may give it, or named ``assert*``/``check*``/..., outside every call that may log;
    or an ``assert`` whose names (attributes, keywords and parameters too: libcst holds them as
    names) include none of ``NOT_OUTPUT_CHECKS``."""
    lasts = facts.facts.lasts
    logged: set[int] = set()  # calls inside a call that may log (``log_kind``)
    for call, _ in facts.summary.calls:
        if id(call) not in logged and (timing.last(call.func) in LOG_LASTS or not lasts(call).isdisjoint(LOG_LASTS)):
            logged.update(id(n) for n in ast.walk(call) if n is not call)
    for call, _ in facts.summary.calls:
        if id(call) in logged:
            continue
        if lasts(call) <= COMPARES or (
                timing.dotted(call.func) is not None and timing.last(call.func).lower().startswith(CHECKERS)):
            return True
    return any(type(s) is ast.Assert and not any(
        w.startswith(NOT_OUTPUT_CHECKS) for w in timing.identifiers(s.test, nested=True)) for s in facts.statements)


def _gate_claim(tree: ast.Module, whole_file: bool) -> bool:
    """A string saying "speedup" or an assignment to a ``*speedup*`` name, anywhere when
    ``whole_file``, else under a def named as measurement code. Strings that are statements of
    their own count too: the rule skips a docstring, but not one written in parts (``"a" "b"``),
    which ``ast`` joins into one."""
    stack = [(tree, whole_file)]
    while stack:
        node, scoped = stack.pop()
        kind = type(node)
        if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            scoped = scoped or bool(MEASUREMENT_FUNCTION.match(node.name))
        elif scoped:
            if kind is ast.Constant:
                if isinstance(node.value, (str, bytes)) and SPEEDUP.search(str(node.value)):
                    return True
            elif kind is ast.Assign:
                if any(isinstance(t, ast.Name) and "speedup" in t.id.lower() for t in node.targets):
                    return True
        stack.extend((child, scoped) for child in ast.iter_child_nodes(node))
    return False
