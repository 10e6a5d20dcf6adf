from __future__ import annotations

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.measurement import TOLERANCE_COMPARES, Scope, arg, is_compare, nodes_under, scope_gate


class NanEqualComparison(Rule):
    """A comparison that lets NaN equal NaN.

    ## What it does
    In test and benchmark code, finds `assert_close`, `allclose`, `isclose` and
    `assert_allclose` calls with `equal_nan=True`, unless the test puts NaN or infinity into
    its inputs on purpose (`float("nan")`, `torch.inf`): then matching NaNs is the point.

    ## Why is this bad?
    A NaN in a kernel's output is a bug (an unwritten element of a NaN-poisoned buffer, an
    overflow, a division by a zero norm). With `equal_nan=True` a NaN passes as soon as the
    reference has one in the same place, and a reference computed the same wrong way often
    does; poisoning outputs with NaN, the best way to find unwritten elements, stops working
    at the same moment. NaN must never pass.

    ## Example
    ```python
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
    ]
    INVALID = [
        """
import torch
def test_norm():
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2, equal_nan=True)
""",
        """
import torch
def check_topk(values, ref):
    return torch.allclose(values, ref, equal_nan=True)
""",
    ]
    PREFILTER = (r"equal_nan",)

    @classmethod
    def gate(cls, summary, config) -> bool:
        return scope_gate(summary, TOLERANCE_COMPARES)

    def leave_Module(self, original_node: cst.Module) -> None:
        scope = Scope(self)
        for node in nodes_under(original_node, nested=True):
            if isinstance(node, cst.Call) and is_compare(self.model, node, TOLERANCE_COMPARES):
                flag = arg(node, 99, "equal_nan")
                if isinstance(flag, cst.Name) and flag.value == "True" and scope.covers(node) \
                        and not self._nan_inputs(node):
                    self.report(node)

    def _nan_inputs(self, call: cst.Call) -> bool:
        """The test puts NaN or infinity into its inputs on purpose (``float("nan")``, ``torch.inf``)."""
        fn = self.model.enclosing_function(call)
        for n in nodes_under(fn.body if fn is not None else call):
            if isinstance(n, cst.SimpleString) and str(n.evaluated_value).lower().lstrip("+-") in ("nan", "inf"):
                return True
            if isinstance(n, cst.Attribute) and n.attr.value in ("nan", "inf") and isinstance(n.value, cst.Name):
                return True
        return False
