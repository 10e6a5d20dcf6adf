from __future__ import annotations


import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.measurement import (
    EMPTY_FACTORIES, TOLERANCE_COMPARES, Scope, arg, is_compare, nodes_under,
)


class NanEqualComparison(Rule):
    """A comparison that lets NaN equal NaN.

    ## What it does
    In test and benchmark code, finds `assert_close`, `allclose`, `isclose` and
    `assert_allclose` calls with `equal_nan=True` that compare two buffers the test allocates
    without values (`torch.empty*`, `.new_empty`) or fills with NaN: two outputs, each written by
    a kernel. An element that neither kernel writes is then NaN (or the same stale memory) on
    both sides and passes. Against an independent reference, finite where the output was left
    unwritten, a NaN still fails, so such comparisons are left alone, as are tests that put NaN
    or infinity into their inputs on purpose (`float("nan")`, `torch.inf`, in the body or a
    `parametrize` decorator): then matching NaNs is the point.

    ## Why is this bad?
    A NaN in a kernel's output is a bug (an unwritten element of a NaN-poisoned buffer, an
    overflow, a division by a zero norm). With `equal_nan=True` a NaN passes as soon as the
    other side has one in the same place, and when both sides are poisoned outputs, the
    elements both kernels skip are exactly such places: poisoning outputs with NaN, the best way
    to find unwritten elements, stops working. NaN must never pass.

    ## Example
    ```python
    out = torch.empty_like(x).fill_(float("nan"))
    ref = torch.empty_like(x).fill_(float("nan"))
    ops.rms_norm(out, x, w, eps)
    ops.rms_norm_reference(ref, x, w, eps)
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1.6e-2, equal_nan=True)
    ```

    ## Use instead
    ```python
    assert not out.isnan().any()
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1.6e-2)
    ```
    """

    CODE = "KC403"
    NAME = "nan-equal-comparison"
    MESSAGE = "equal_nan=True lets a NaN output pass: unwritten and poisoned elements are no longer caught"
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("verification/nan-never-passes", "verification/poisoned-outputs")
    VALID = [
        """
import torch
def test_norm():
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2, equal_nan=False)
""",
        """
import numpy as np
def summarize(a, b):
    return np.isclose(a, b, equal_nan=True)
""",
        """
import torch
def test_jsd(p, q):
    torch.testing.assert_close(jsd(p, q), torch_jsd(p, q), atol=1e-5, rtol=1e-5, equal_nan=True)
""",
    ]
    INVALID = [
        """
import torch
def test_norm(x, w):
    out = torch.empty_like(x).fill_(float("nan"))
    ref = torch.empty_like(x).fill_(float("nan"))
    ops.rms_norm(out, x, w, 1e-6)
    ops.rms_norm_reference(ref, x, w, 1e-6)
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2, equal_nan=True)
""",
        """
import torch
def check_topk(scores, k):
    values = torch.empty(scores.shape[0], k, device="cuda")
    ref = scores.new_empty(scores.shape[0], k)
    topk(scores, values)
    topk_reference(scores, ref)
    return torch.allclose(values, ref, equal_nan=True)
""",
    ]
    PREFILTER = (r"equal_nan",)
    NEEDS = ("output check",)

    def leave_Module(self, original_node: cst.Module) -> None:
        scope = Scope(self)
        for node in nodes_under(original_node, nested=True):
            if type(node) is cst.Call and is_compare(self.model, node, TOLERANCE_COMPARES):
                flag = arg(node, 99, "equal_nan")
                if type(flag) is cst.Name and flag.value == "True" and scope.covers(node) \
                        and not self._nan_inputs(node) and self._both_unset(node):
                    self.report(node)

    def _both_unset(self, call: cst.Call) -> bool:
        """Both compared values are buffers the test allocates without values (``torch.empty*``,
        ``.new_empty``) or fills with NaN: an element neither side writes is NaN (or the same stale
        memory) on both, and equal_nan makes it match. Against an independent reference (finite
        where the output is unwritten) a NaN still fails, so that is left alone."""
        fn = self.model.enclosing_function(call)
        if fn is None:
            return False
        unset: set[str] = set()
        for n in nodes_under(fn.body, nested=True):
            if type(n) is cst.Assign and len(n.targets) == 1 and type(n.targets[0].target) is cst.Name:
                if _unset_value(self.model, n.value):
                    unset.add(n.targets[0].target.value)
        sides = [a.value for a in call.args if a.keyword is None][:2]
        names = [_base(s) for s in sides]
        return len(names) == 2 and all(name in unset for name in names)

    def _nan_inputs(self, call: cst.Call) -> bool:
        """The test puts NaN or infinity into its inputs on purpose (``float("nan")``, ``torch.inf``),
        in its body or its decorators (``@pytest.mark.parametrize("v", [float("nan")])``)."""
        fn = self.model.enclosing_function(call)
        root = fn if fn is not None else call
        poison = {id(x) for n in nodes_under(root, nested=True)  # NaN that poisons an output is no input
                  if type(n) is cst.Assign and _unset_value(self.model, n.value) for x in nodes_under(n.value)}
        for n in nodes_under(root):
            if id(n) in poison:
                continue
            if type(n) is cst.SimpleString and str(n.evaluated_value).lower().lstrip("+-") in ("nan", "inf"):
                return True
            if type(n) is cst.Attribute and n.attr.value in ("nan", "inf") and type(n.value) is cst.Name:
                return True
        return False


def _base(expr: cst.CSTNode) -> str | None:
    """``out`` for ``out``, ``out[:n]``, ``out.float()``: the buffer a compared value reads."""
    while True:
        if type(expr) is cst.Subscript:
            expr = expr.value
        elif type(expr) is cst.Call and type(expr.func) is cst.Attribute and not expr.args:
            expr = expr.func.value
        else:
            break
    return expr.value if type(expr) is cst.Name else None


def _unset_value(model, value: cst.CSTNode) -> bool:
    """``torch.empty(...)``, ``x.new_empty(...)``, ``torch.full(..., nan)``, ``torch.empty(...).fill_(nan)``."""
    if type(value) is not cst.Call:
        return False
    name = model.call_name(value) or ""
    if name in EMPTY_FACTORIES or (type(value.func) is cst.Attribute and value.func.attr.value in (
            "new_empty", "empty_like")):
        return True
    text = cst.Module([]).code_for_node(value)
    if type(value.func) is cst.Attribute and value.func.attr.value == "fill_":
        return "nan" in text.lower()
    return name.split(".")[-1] in ("full", "full_like") and "nan" in text.lower()


