from __future__ import annotations

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.measurement import (
    COMPARES, CONSTANT_FACTORIES, RANDOM_CALLS, Scope, calls, is_compare, last, nodes_under, scope_gate, uses,
)


class ConstantTestInputs(Rule):
    """A correctness check that only ever sees constant inputs.

    ## What it does
    In test and benchmark code, finds functions that compare a result (`assert_close`,
    `allclose`, `torch.equal`, ...) when every input they build comes from `torch.zeros`,
    `torch.ones`, `torch.full` or `torch.eye` and nothing
    random is drawn: no `torch.randn`/`rand`/`randint`/`normal_`/`uniform_`/`make_tensor`, no
    loaded data, neither in the function (classes and helpers defined in it included), in the
    same-module helpers, classes and fixtures it uses, nor in its decorators; seeding a generator (`manual_seed`, `set_seed`) counts as drawing. Buffers
    that are themselves compared (outputs) and constants written inside the comparison (the
    expected value) do not count as inputs, and neither do integer and boolean tensors (lengths,
    indices and flags are metadata that tests write by hand on purpose). Tests whose every
    comparison has a hand-written expected value (`torch.tensor([0., 1.])`) check behaviour on
    chosen inputs, not a kernel against a reference, and are left alone.

    `torch.arange` is not reported: its values are distinct, the right input for an indexing test.

    ## Why is this bad?
    Constant inputs make a wrong kernel look right: every row of `torch.ones` is the same, so
    swapped or repeated row indices, a stride bug or a tile written twice all give the same
    answer; zeros make an unwritten output or a missing term look correct. Constant data also
    runs faster than real data (less switching, lower power, higher clocks), so timings taken
    on it are optimistic.

    ## Example
    ```python
    def test_rms_norm():
        x = torch.ones(16, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(rms_norm(x, w), rms_norm_ref(x, w))
    ```

    ## Use instead
    ```python
    def test_rms_norm():
        torch.manual_seed(0)
        x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(rms_norm(x, w), rms_norm_ref(x, w))
    ```
    """

    CODE = "KC401"
    NAME = "constant-test-inputs"
    MESSAGE = ("{factory}() is the only kind of input {function}() checks: constant inputs hide wrong indexing "
               "and unwritten outputs; draw random inputs with a fixed seed")
    SEVERITY = "warning"
    KNOWLEDGE = ("verification/fresh-random-inputs", "measuring/zeros-vs-random-data")
    VALID = [
        """
import torch
def test_add():
    torch.manual_seed(0)
    x = torch.randn(8, 64, device="cuda")
    bias = torch.zeros(64, device="cuda")
    torch.testing.assert_close(add(x, bias), x + bias)
""",
        """
import pytest, torch
@pytest.fixture
def x():
    return torch.randn(8, 64)
def test_add(x):
    out = torch.zeros_like(x)
    add(x, out)
    torch.testing.assert_close(out, x)
""",
        """
import torch
def make_inputs():
    return torch.ones(4, 4)
""",
    ]
    INVALID = [
        """
import torch
def test_rms_norm():
    x = torch.ones(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(rms_norm(x, w), rms_norm_ref(x, w))
""",
        """
import torch
def check_scale(n=128):
    x = torch.full((n, 4), 2.0, device="cuda")
    s = torch.ones(n, 1, device="cuda")
    assert torch.equal(scale_rows(x, s), x * s)
""",
    ]
    PREFILTER = (r"zeros|ones|full|eye",)

    @classmethod
    def gate(cls, summary, config) -> bool:
        return scope_gate(summary, {"zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "eye"}) and uses(
            summary, COMPARES)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        scope = Scope(self)
        for fn in scope.functions():
            reached = calls(model, fn.body)
            compares = [c for c in reached if is_compare(model, c)]
            if not compares or self._draws_random(fn, reached) or all(self._literal_expected(c, fn) for c in compares):
                continue
            compared = {_base(a.value) for c in compares for a in c.args}
            expected = {id(n) for c in compares for a in c.args for n in nodes_under(a.value)}
            for node in nodes_under(fn.body):
                if isinstance(node, cst.Call) and (model.call_name(node) or "") in CONSTANT_FACTORIES:
                    if _integer(model, node):
                        continue  # lengths, indices and flags: metadata written by hand on purpose
                    target = self._assigned_name(node)
                    if (target is not None and target in compared) or id(node) in expected:
                        continue  # an output buffer or the expected value, not an input
                    self.report(node, factory=model.call_name(node), function=fn.name.value)
                    break

    def _draws_random(self, fn: cst.FunctionDef, reached: list[cst.Call]) -> bool:
        model = self.model
        roots: list[cst.CSTNode] = [d.decorator for d in fn.decorators]
        for n in nodes_under(fn.body, nested=True):  # classes and helpers defined in the test, or instantiated
            if isinstance(n, (cst.FunctionDef, cst.ClassDef)):
                roots.append(n)
            elif isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in model.classes:
                roots.append(model.classes[n.func.value])
        for p in fn.params.params:  # same-module fixtures named as parameters
            fixture = model.local_function(p.name.value)
            if fixture is not None:
                roots.append(fixture.body)
        extra = [c for r in roots for c in nodes_under(r, nested=True) if isinstance(c, cst.Call)]
        return any(last(model.call_name(c)) in RANDOM_CALLS or "random" in (model.call_name(c) or "")
                   or "seed" in last(model.call_name(c) or model.dotted(c.func)).lower()
                   for c in [*reached, *extra])

    def _literal_expected(self, compare: cst.Call, fn: cst.FunctionDef) -> bool:
        """One side of the comparison is written out by hand (``torch.tensor([0., 1.])``,
        ``torch.zeros(1, 5)``): a behaviour test whose small constant inputs are chosen on purpose."""
        literal = LITERAL_TENSORS
        values, passed = {}, set()  # constants by name; names handed to a call other than a comparison
        for n in nodes_under(fn.body):
            if isinstance(n, cst.Assign) and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name):
                values[n.targets[0].target.value] = n.value
            elif isinstance(n, cst.Call) and not is_compare(self.model, n):
                passed |= {x.value.value for x in n.args if isinstance(x.value, cst.Name)}
        for a in compare.args[:2]:
            value = a.value
            if isinstance(value, cst.Name) and value.value not in passed:
                value = values.get(value.value, value)
            if isinstance(value, cst.Call) and (self.model.call_name(value) or "") in literal:
                return True
        return False

    def _assigned_name(self, call: cst.Call) -> str | None:
        for anc in self.model.ancestors(call):
            if isinstance(anc, cst.Assign):
                targets = [t.target for t in anc.targets]
                return targets[0].value if len(targets) == 1 and isinstance(targets[0], cst.Name) else None
            if isinstance(anc, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return None
        return None


def _base(expr: cst.CSTNode) -> str | None:
    """``out`` for ``out``, ``out.float()``, ``out.view(-1).cpu()``: a buffer compared as it is."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in AS_IS:
        expr = expr.func.value
    return expr.value if isinstance(expr, cst.Name) else None


# Methods that hand a buffer over unchanged (a copy, a cast, a view): ``out.float()`` is still ``out``.
AS_IS = {"float", "double", "half", "bfloat16", "to", "cpu", "cuda", "view", "reshape", "flatten", "contiguous",
         "clone", "detach", "squeeze", "unsqueeze", "view_as", "reshape_as"}
LITERAL_TENSORS = CONSTANT_FACTORIES | {"torch.tensor", "torch.as_tensor"}
INTEGER_DTYPES = {"int8", "int16", "int32", "int64", "long", "int", "uint8", "bool", "short"}


def _integer(model, call: cst.Call) -> bool:
    """A factory with an integer or boolean dtype (``torch.ones(n, dtype=torch.int32)``)."""
    dtype = next((a.value for a in call.args if a.keyword and a.keyword.value == "dtype"), None)
    return dtype is not None and (model.dotted(dtype) or "").split(".")[-1] in INTEGER_DTYPES
