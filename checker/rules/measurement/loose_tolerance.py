from __future__ import annotations

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.measurement import (
    TOLERANCE_COMPARES, TOLERANCE_LIMITS, Scope, arg, dtypes_in, is_compare, module_statements, nodes_under,
    number, scope_gate,
)


class LooseTolerance(Rule):
    """A comparison whose `atol` or `rtol` is far too loose for the output dtype.

    ## What it does
    In test and benchmark code, finds `assert_close`, `allclose`, `isclose` and
    `assert_allclose` calls whose `atol` or `rtol` (a literal, or a module-level constant; by
    position only for torch's and numpy's own functions, whose order is known) is
    above the limit for the dtypes the test uses. The limits are a table kept as data
    (`kcheck.rules.measurement.TOLERANCE_LIMITS`): 1e-3 for FP32, 5e-2 for FP16 and 1e-1 for
    BF16, each far above `torch.testing.assert_close`'s defaults. The dtypes come from the
    function and its decorators (`pytest.mark.parametrize`), else from the module's top level
    (FP32 named in a function that compares `.float()` copies says nothing about the output);
    the loosest one wins, BF16 is assumed when none is named, and tests of quantised outputs
    (FP8, INT8, FP4) are not judged.

    ## Why is this bad?
    A tolerance is the check. `atol=1.0` on BF16 values of magnitude about one accepts any
    answer of the right sign and rough size: a kernel that drops a term, uses the wrong epsilon
    or reads the wrong row still passes. Start from the dtype's defaults and widen only with a
    stated reason (a long reduction), in proportion.

    ## Example
    ```python
    torch.testing.assert_close(out, ref, atol=1.0, rtol=1.0)
    ```

    ## Use instead
    ```python
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1.6e-2)  # bf16
    ```
    """

    CODE = "KC402"
    NAME = "loose-tolerance"
    MESSAGE = "{which}={value:g} is far too loose for {dtype} output (limit {limit:g}): this comparison accepts wrong kernels"
    SEVERITY = "warning"
    KNOWLEDGE = ("verification/tolerances-by-dtype",)
    VALID = [
        """
import torch
def test_norm():
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    torch.testing.assert_close(norm(x), ref(x), atol=2e-2, rtol=1.6e-2)
""",
        """
import torch
def test_fp8_gemm():
    a = torch.randn(8, 64).to(torch.float8_e4m3fn)
    torch.testing.assert_close(gemm(a), ref(a), atol=0.5, rtol=0.5)
""",
        """
import pytest, torch
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_silu_and_mul(dtype):
    x = torch.randn(8, 128, dtype=dtype)
    assert torch.allclose(silu_and_mul(x), ref(x), atol=1e-2, rtol=1e-2)
""",
    ]
    INVALID = [
        """
import torch
def test_norm():
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    torch.testing.assert_close(norm(x), ref(x), atol=1.0, rtol=1.0)
""",
        """
import torch
ATOL = 1e-2
def test_softmax():
    x = torch.randn(8, 64, dtype=torch.float32)
    assert torch.allclose(softmax(x), torch.softmax(x, -1), 1e-5, ATOL)
""",
    ]
    PREFILTER = (r"close",)

    @classmethod
    def gate(cls, summary, config) -> bool:
        return scope_gate(summary, TOLERANCE_COMPARES)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        scope = Scope(self)
        module_dtypes = dtypes_in(model, module_statements(original_node))
        for node in nodes_under(original_node, nested=True):
            if not (isinstance(node, cst.Call) and is_compare(model, node, TOLERANCE_COMPARES) and scope.covers(node)):
                continue
            dtypes = self._dtypes(node)
            if dtypes <= {"float32", "float64"} and self._upcast_args(node):
                dtypes = set()  # fp32 copies of outputs of unknown precision: fp32 says nothing
            dtypes = dtypes or module_dtypes
            if "quantized" in dtypes:
                continue
            dtypes = dtypes & TOLERANCE_LIMITS.keys() or {"bfloat16"}
            loosest = max(dtypes, key=lambda d: TOLERANCE_LIMITS[d])
            positional = (model.call_name(node) or "").split(".")[0] in ("torch", "numpy", "np")
            for which, index, slot in (("rtol", 2, 1), ("atol", 3, 0)):
                value = number(original_node, arg(node, index if positional else 99, which))
                limit = TOLERANCE_LIMITS[loosest][slot]
                if value is not None and value > limit:
                    self.report(node, which=which, value=value, dtype=loosest, limit=limit)
                    break

    def _dtypes(self, call: cst.Call) -> set[str]:
        """Dtypes named in the enclosing functions and their decorators (empty: ask the module)."""
        found: set[str] = set()
        for fn in (a for a in self.model.ancestors(call) if isinstance(a, cst.FunctionDef)):
            found |= dtypes_in(self.model, [fn])
        return found

    def _upcast_args(self, call: cst.Call) -> bool:
        """The compared values are upcast copies (``out.float()``, ``out.to(torch.float32)``)."""
        for a in call.args[:2]:
            value = a.value
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in (
                    "float", "double", "to"):
                return True
        return False
