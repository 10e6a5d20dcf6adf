from __future__ import annotations

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.measurement import (
    CONSTANT_FACTORIES, RANDOM_CALLS, Scope, calls, is_compare, last, nodes_under, scope_gate,
)


class ConstantTestInputs(Rule):
    """A correctness check that only ever sees constant inputs.

    ## What it does
    In test and benchmark code, finds functions that compare a result (`assert_close`,
    `allclose`, `torch.equal`, ...) when every input they build comes from `torch.zeros`,
    `torch.ones`, `torch.full`, `torch.arange`, `torch.linspace` or `torch.eye` and nothing
    random is drawn: no `torch.randn`/`rand`/`randint`/`normal_`/`uniform_`/`make_tensor`, no
    loaded data, neither in the function, in the same-module helpers and fixtures it uses, nor
    in its decorators; seeding a generator (`manual_seed`, `set_seed`) counts as drawing. Buffers
    that are themselves compared (outputs) and constants written inside the comparison (the
    expected value) do not count as inputs.

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
def check_gather(n=128):
    idx = torch.arange(n, device="cuda")
    src = torch.arange(n * 4, device="cuda").view(n, 4).float()
    assert torch.equal(gather(src, idx), src[idx])
""",
    ]
    PREFILTER = (r"zeros|ones|full|arange|linspace|eye",)

    @classmethod
    def gate(cls, summary, config) -> bool:
        return scope_gate(summary, {"zeros", "ones", "full", "arange", "zeros_like", "ones_like", "full_like",
                                    "linspace", "eye"})

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        scope = Scope(self)
        for fn in scope.functions():
            reached = calls(model, fn.body)
            compares = [c for c in reached if is_compare(model, c)]
            if not compares or self._draws_random(fn, reached):
                continue
            compared = {_base(a.value) for c in compares for a in c.args}
            expected = {id(n) for c in compares for a in c.args for n in nodes_under(a.value)}
            for node in nodes_under(fn.body):
                if isinstance(node, cst.Call) and (model.call_name(node) or "") in CONSTANT_FACTORIES:
                    target = self._assigned_name(node)
                    if (target is not None and target in compared) or id(node) in expected:
                        continue  # an output buffer or the expected value, not an input
                    self.report(node, factory=model.call_name(node), function=fn.name.value)
                    break

    def _draws_random(self, fn: cst.FunctionDef, reached: list[cst.Call]) -> bool:
        model = self.model
        roots: list[cst.CSTNode] = [d.decorator for d in fn.decorators]
        for p in fn.params.params:  # same-module fixtures named as parameters
            fixture = model.local_function(p.name.value)
            if fixture is not None:
                roots.append(fixture.body)
        extra = [c for r in roots for c in calls(model, r)]
        return any(last(model.call_name(c)) in RANDOM_CALLS or "random" in (model.call_name(c) or "")
                   or "seed" in last(model.call_name(c) or model.dotted(c.func)).lower()
                   for c in [*reached, *extra])

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
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        expr = expr.func.value
    return expr.value if isinstance(expr, cst.Name) else None
