from __future__ import annotations

import ast
import re

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.measurement import (
    CONSTANT_FACTORIES, QUANTIZED, RANDOM_CALLS, TENSOR_FACTORIES, Scope, dotted, arg, calls, is_compare,
    kernel_call, last, mocked, nodes_under, own_nodes,
)


class ConstantTestInputs(Rule):
    """A correctness check that only ever sees constant inputs.

    ## What it does
    In test and benchmark code, finds functions that check a kernel against a reference on
    placeholder inputs: the function calls a kernel (a Triton launch, `torch.ops`, or a call into
    a kernel module: `ops.`, `_custom_ops`, `kernels`, `triton`, `flashinfer`, `sgl_kernel` ...), a
    `torch.zeros`/`ones`/`eye` input (or `torch.full` of 0 or 1) reaches a comparison
    (`assert_close`, `allclose`, `torch.equal`, ...) written in the function, and the other side of
    that comparison is a reference computation, and nothing random is drawn: no
    `torch.randn`/`rand`/`randint`/`normal_`/`uniform_`/`make_tensor`, no loaded data, neither in
    the function (classes and helpers defined in it included), in the same-module helpers, classes
    and fixtures it uses, nor in its decorators; seeding a generator (`manual_seed`, `set_seed`)
    counts as drawing.

    Left alone, because the constants there are chosen on purpose:

    - outputs and expected values (buffers that are compared, constants written inside the
      comparison), accumulators and buffers the test writes into (`acc += ...`, `buf[i] = ...`,
      `out=buf`, `buf.fill_(...)`), integer and boolean tensors (lengths, indices, flags), empty
      tensors, FP8/FP4 tensors (quantisation scales) and a handful of values (`torch.ones(1)`, a
      scale; `torch.zeros(2, 4)`, a worked example);
    - tests whose expected value is worked out by hand: a literal tensor, `torch.arange`, or plain
      arithmetic of the inputs with a number (`inp * world_size`, `2.0 / FP8_MAX`);
    - tests that compare a function with itself (a cache, determinism or round-trip test);
    - edge-case tests: a `torch.full` with a chosen value (64.0, -inf, 0.5) or an empty tensor in
      the function;
    - tests that also build data with distinct values (`torch.arange`/`linspace`, a `torch.tensor`
      of fractional values) or take inputs from an input helper (`make_inputs`, `gdn_inputs`);
    - tests on stand-ins (`monkeypatch`, `Mock`, `patch`, `SimpleNamespace`).

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
        torch.testing.assert_close(ops.rms_norm(x, w), rms_norm_ref(x, w))
    ```

    ## Use instead
    ```python
    def test_rms_norm():
        torch.manual_seed(0)
        x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(ops.rms_norm(x, w), rms_norm_ref(x, w))
    ```
    """

    CODE = "KC401"
    NAME = "constant-test-inputs"
    MESSAGE = ("{factory}() is the only kind of input {function}() checks: constant inputs hide wrong indexing "
               "and unwritten outputs; draw random inputs with a fixed seed")
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
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
from mylib import ops
def test_rms_norm():
    x = torch.ones(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(ops.rms_norm(x, w), rms_norm_ref(x, w))
""",
        """
import torch
from mylib.kernels import scale_rows
def check_scale(n=128):
    x = torch.ones(n, 4, device="cuda")
    s = torch.ones(n, 1, device="cuda")
    assert torch.equal(scale_rows(x, s), scale_rows_ref(x, s))
""",
    ]
    PREFILTER = (r"zeros|ones|full|eye",)
    NEEDS = ("output check",)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        scope = Scope(self)
        for fn in scope.functions():
            reached = calls(model, fn.body)
            compares = [c for c in reached if is_compare(model, c)]
            if not compares or self._draws_random(fn, reached) or all(self._literal_expected(c, fn) for c in compares):
                continue
            if not any(self._kernel_call(c) for c in reached):
                continue  # no kernel under test: a check of Python plumbing, a cache or a layout
            if mocked(model, fn) or self._varied_data(fn, reached) or any(
                    (_chosen_value(model, n) or (_empty(n) and last(model.call_name(n)) in TENSOR_FACTORIES))
                    for n in nodes_under(fn.body, nested=True) if type(n) is cst.Call):
                continue  # a behaviour test on stand-ins, or inputs with distinct values built by hand
            own = {id(n) for n in nodes_under(fn.body, nested=True)}
            references = [c for c in compares if id(c) in own and self._against_reference(c, fn)]
            if not references:
                continue  # every expected value is worked out by hand from the chosen constants
            compared = {_base(a.value) for c in compares for a in c.args}
            expected = {id(n) for c in compares for a in c.args for n in nodes_under(a.value)}
            written = _written(fn)
            for node in nodes_under(fn.body):
                if type(node) is cst.Call and (model.call_name(node) or "") in CONSTANT_FACTORIES:
                    if _integer(model, node) or _empty(node) or _single(node) or _quantized(model, node):
                        continue  # lengths, indices and flags: metadata written by hand on purpose
                    target = self._assigned_name(node)
                    if target is not None and target in written:
                        continue  # an accumulator or a buffer filled later, not an input
                    if (target is not None and target in compared) or id(node) in expected:
                        continue  # an output buffer or the expected value, not an input
                    if _chosen_value(model, node):
                        continue  # a value picked for an edge case (64.0, -inf, 0.5), not a placeholder
                    if not self._feeds(node, target, fn, references):
                        continue  # not an input of what is compared against a reference
                    self.report(node, factory=model.call_name(node), function=fn.name.value)
                    break

    def _draws_random(self, fn: cst.FunctionDef, reached: list[cst.Call]) -> bool:
        model = self.model
        roots: list[cst.CSTNode] = [d.decorator for d in fn.decorators]
        for n in nodes_under(fn.body, nested=True):  # classes and helpers defined in the test, or instantiated
            if type(n) in (cst.FunctionDef, cst.ClassDef):
                roots.append(n)
            elif type(n) is cst.Call and type(n.func) is cst.Name and n.func.value in model.classes:
                roots.append(model.classes[n.func.value])
        for p in fn.params.params:  # same-module fixtures named as parameters
            fixture = model.local_function(p.name.value)
            if fixture is not None:
                roots.append(fixture.body)
        extra = [c for r in roots for c in nodes_under(r, nested=True) if type(c) is cst.Call]
        return any(last(model.call_name(c)) in RANDOM_CALLS or "random" in (model.call_name(c) or "")
                   or "seed" in last(model.call_name(c) or model.dotted(c.func)).lower()
                   for c in [*reached, *extra])

    def _literal_expected(self, compare: cst.Call, fn: cst.FunctionDef) -> bool:
        """One side of the comparison is written out by hand (``torch.tensor([0., 1.])``,
        ``torch.zeros(1, 5)``): a behaviour test whose small constant inputs are chosen on purpose."""
        literal = LITERAL_TENSORS
        values, passed, _, _ = self._bindings(fn)
        for a in compare.args[:2]:
            value = a.value
            if type(value) is cst.Name and value.value not in passed:
                value = values.get(value.value, value)
            if type(value) is cst.Call and (self.model.call_name(value) or "") in literal:
                return True
        return False

    def _kernel_call(self, call: cst.Call) -> bool:
        """A kernel launch or dispatch, or a call into kernel code (``ops.``, ``_custom_ops``,
        ``kernels``, ``triton``, ``flashinfer``, ``sgl_kernel``, an all-reduce ...)."""
        return kernel_call(self.model, call)

    def _varied_data(self, fn: cst.FunctionDef, reached: list[cst.Call]) -> bool:
        """The test also builds inputs with distinct values: ``torch.arange``/``linspace`` data or a
        ``torch.tensor`` written with fractional values. The constants are then padding, initial
        states or fill values around data chosen on purpose."""
        model = self.model
        for c in reached:
            name = model.call_name(c) or ""
            if name in ("torch.arange", "torch.linspace", "torch.logspace") and not _integer(model, c):
                return True
            if name in ("torch.tensor", "torch.as_tensor") and not _integer(model, c) and c.args and any(
                    type(n) is cst.Float for n in nodes_under(c.args[0].value)):
                return True
            if INPUT_HELPER.search(last(name)) and not name.startswith("torch."):
                return True  # inputs made by a helper this file cannot see into (another module's)
        return False

    def _bindings(self, fn: cst.FunctionDef) -> tuple[dict, set[str], set[str], set[str]]:
        """What the function's names are bound to: values by name (``a, b = f(x)`` binds both to the
        call), names handed to a call other than a comparison (in-place outputs), names bound to tensors
        built here, and names bound otherwise (tuple unpacking, loops, ``with ... as``)."""
        model = self.model
        values: dict[str, cst.BaseExpression] = {}
        tensors: set[str] = set()  # names bound to tensors built in the function
        passed: set[str] = set()  # names handed to a call other than a comparison (in-place outputs)
        unpacked: set[str] = set()  # names bound otherwise (tuple unpacking, loops, with ... as)
        for n in nodes_under(fn.body):
            if (type(n) is cst.Assign and len(n.targets) == 1 and type(n.targets[0].target) is cst.Tuple
                    and type(n.value) is cst.Call):
                for el in n.targets[0].target.elements:  # a, b = f(x): both come from f
                    if type(el.value) is cst.Name:
                        values[el.value.value] = n.value
            if type(n) is cst.Assign and len(n.targets) == 1 and type(n.targets[0].target) is cst.Name:
                values[n.targets[0].target.value] = n.value
                if type(n.value) is cst.Call and last(model.call_name(n.value)) in TENSOR_FACTORIES:
                    tensors.add(n.targets[0].target.value)
            elif type(n) in (cst.Assign, cst.AugAssign, cst.For, cst.AsName):
                targets = n.targets if type(n) is cst.Assign else [n]
                for t in targets:
                    unpacked.update(x.value for x in nodes_under(getattr(t, "target", t) if type(t) is not cst.For else t.target) if type(x) is cst.Name)
            elif type(n) is cst.Call and not is_compare(model, n):
                passed |= {x.value.value for x in n.args if type(x.value) is cst.Name}

        return values, passed, tensors, unpacked

    def _against_reference(self, compare: cst.Call, fn: cst.FunctionDef) -> bool:
        """Neither side of the comparison is worked out by hand (a constant, a literal tensor, or
        plain arithmetic of the inputs with a number: ``inp * world_size``, ``2.0 / FP8_MAX``): the
        result is checked against a reference computation, which the same constants fool."""
        work = _HandWork(self.model, *self._bindings(fn))
        sides = [a.value for a in compare.args if a.keyword is None][:2]
        if len(sides) != 2 or any(work.by_hand(s) for s in sides):
            return False
        computed = [work.computations(s) for s in sides]
        # a reference is computed, and by something else than the result it checks (not a cache,
        # determinism or round-trip test calling the same function twice)
        return any(computed) and computed[0] != computed[1]

    def _feeds(self, node: cst.Call, target: str | None, fn: cst.FunctionDef, references: list[cst.Call]) -> bool:
        """The constant reaches a side of a comparison against a reference: through assignments
        and calls (``y = op(x)``, ``op(out, x)`` writing ``out``)."""
        model = self.model
        reached: set[str] = {target} if target else set()
        if not target:  # built inline: op(torch.ones(...)) or y = f(torch.ones(...))
            for anc in model.ancestors(node):
                if type(anc) is cst.Call and not is_compare(model, anc):
                    reached |= {a.value.value for a in anc.args if type(a.value) is cst.Name}
                elif type(anc) is cst.Assign:
                    reached |= {x.value for t in anc.targets for x in nodes_under(t.target) if type(x) is cst.Name}
                    break
                elif isinstance(anc, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                    break
        steps = []
        for n in nodes_under(fn.body, nested=True):
            if type(n) is cst.Assign:
                steps.append(({x.value for t in n.targets for x in nodes_under(t.target) if type(x) is cst.Name},
                              names_of(n.value)))
            elif type(n) is cst.Call and not is_compare(model, n):
                args = {a.value.value for a in n.args if type(a.value) is cst.Name}
                steps.append((args, set().union(*(names_of(a.value) for a in n.args)) if n.args else set()))
        for _ in range(6):
            grown = set(reached)
            for targets, used in steps:
                if used & grown:
                    grown |= targets
            if grown == reached:
                break
            reached = grown
        return any(names_of(a.value) & reached for c in references for a in c.args[:2])

    def _assigned_name(self, call: cst.Call) -> str | None:
        for anc in self.model.ancestors(call):
            if type(anc) is cst.Assign:
                targets = [t.target for t in anc.targets]
                return targets[0].value if len(targets) == 1 and type(targets[0]) is cst.Name else None
            if isinstance(anc, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return None
        return None


def _base(expr: cst.CSTNode) -> str | None:
    """``out`` for ``out``, ``out.float()``, ``out.view(-1).cpu()``: a buffer compared as it is."""
    while type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in AS_IS:
        expr = expr.func.value
    return expr.value if type(expr) is cst.Name else None


# Methods that hand a buffer over unchanged (a copy, a cast, a view): ``out.float()`` is still ``out``.
AS_IS = {"float", "double", "half", "bfloat16", "to", "cpu", "cuda", "view", "reshape", "flatten", "contiguous",
         "clone", "detach", "squeeze", "unsqueeze", "view_as", "reshape_as"}
LITERAL_TENSORS = CONSTANT_FACTORIES | {"torch.tensor", "torch.as_tensor"}
# Methods that only reshape or repeat a hand-written expectation (``torch.arange(k).expand(b, k)``).
SHAPE = {"expand", "expand_as", "repeat", "permute", "transpose", "t", "broadcast_to", "narrow", "tile"}
# Helpers that build a test's inputs (``make_inputs``, ``gdn_inputs``, ``generate_data``).
INPUT_HELPER = re.compile(r"input|^_?(make|gen|generate|create|sample|random|rand)_|_data$|^_?get_data", re.IGNORECASE)
INTEGER_DTYPES = {"int8", "int16", "int32", "int64", "long", "int", "uint8", "bool", "short"}


def _integer(model, call: cst.Call) -> bool:
    """A factory with an integer or boolean dtype (``torch.ones(n, dtype=torch.int32)``), or a
    ``torch.full``/``full_like`` of an integer without a dtype (``torch.full((n,), step)`` is int64)."""
    dtype = next((a.value for a in call.args if a.keyword and a.keyword.value == "dtype"), None)
    if dtype is None and last(model.call_name(call)) in ("full", "full_like"):
        fill = arg(call, 1, "fill_value")
        if type(fill) is cst.UnaryOperation:
            fill = fill.expression
        return type(fill) is cst.Integer
    return dtype is not None and (model.dotted(dtype) or "").split(".")[-1] in INTEGER_DTYPES


def names_of(node: cst.CSTNode) -> set[str]:
    return {n.value for n in nodes_under(node, nested=True) if type(n) is cst.Name}


def _chosen_value(model, call: cst.Call) -> bool:
    """``torch.full``/``full_like`` with a fill other than 0 or 1: a value picked on purpose (an edge
    case: a large magnitude, -inf, a rounding tie), unlike a placeholder of zeros or ones."""
    if last(model.call_name(call)) not in ("full", "full_like"):
        return False
    fill = arg(call, 1, "fill_value")
    return not (type(fill) in (cst.Integer, cst.Float) and fill.evaluated_value in (0, 1))


def _quantized(model, call: cst.Call) -> bool:
    """A factory with an FP8/FP4 dtype: quantisation scales set to one on purpose."""
    dtype = next((a.value for a in call.args if a.keyword and a.keyword.value == "dtype"), None)
    return dtype is not None and bool(QUANTIZED.search(model.dotted(dtype) or ""))


def _single(call: cst.Call) -> bool:
    """``torch.ones(1)``, ``torch.zeros(1, 2)``: a handful of values (a scale, a worked example),
    not data with rows that could be mixed up."""
    sizes = [a.value for a in call.args if a.keyword is None]
    if len(sizes) == 1 and type(sizes[0]) in (cst.Tuple, cst.List):
        sizes = [e.value for e in sizes[0].elements]
    if not sizes or not all(type(v) is cst.Integer for v in sizes):
        return False
    count = 1
    for v in sizes:
        count *= int(v.evaluated_value)
    return count <= 8


def _empty(call: cst.Call) -> bool:
    """A factory with a literal 0 among its sizes: an empty tensor has no values to be constant."""
    sizes = [a.value for a in call.args if a.keyword is None]
    if len(sizes) == 1 and type(sizes[0]) in (cst.Tuple, cst.List):
        sizes = [e.value for e in sizes[0].elements]
    return any(type(v) is cst.Integer and v.evaluated_value == 0 for v in sizes)


def _written(fn: cst.FunctionDef) -> set[str]:
    """Names the function writes into after building them: ``acc += ...``, ``buf[i] = ...``,
    ``out=acc``, ``acc.add_(...)``: accumulators and buffers, not inputs."""
    out: set[str] = set()
    for n in nodes_under(fn.body, nested=True):
        if type(n) is cst.AugAssign and type(n.target) is cst.Name:
            out.add(n.target.value)
        elif type(n) in (cst.Assign, cst.AugAssign):
            for t in (n.targets if type(n) is cst.Assign else [n]):
                target = t.target
                if type(target) is cst.Subscript and type(target.value) is cst.Name:
                    out.add(target.value.value)
        elif type(n) is cst.Call:
            for a in n.args:
                if a.keyword is not None and a.keyword.value == "out" and type(a.value) is cst.Name:
                    out.add(a.value.value)
            func = n.func
            if (type(func) is cst.Attribute and type(func.value) is cst.Name and func.attr.value.endswith("_")
                    and not func.attr.value.startswith("_")):
                out.add(func.value.value)
    return out


# -- the gate's ast counterparts of the helpers above ---------------------------------------------


def _varies(facts, call: ast.Call) -> bool:
    """Whether ``_varied_data`` counts the call as data with distinct values, whatever the import
    table says: ``torch.arange``/``linspace``/``logspace`` or a ``torch.tensor`` of fractional
    literals (neither of an integer dtype), or an input helper outside ``torch``."""
    dtype = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    integer = dtype is not None and (dotted(dtype) or "").split(".")[-1] in INTEGER_DTYPES
    first = call.args[0] if call.args and type(call.args[0]) is not ast.Starred else None

    def varies(name: str) -> bool:
        if name in ("torch.arange", "torch.linspace", "torch.logspace") and not integer:
            return True
        if name in ("torch.tensor", "torch.as_tensor") and not integer and first is not None and any(
                type(n) is ast.Constant and type(n.value) is float for n in own_nodes([first])):
            return True
        return bool(INPUT_HELPER.search(last(name))) and not name.startswith("torch.")

    return all(varies(name) for name in facts.qualnames(call.func) or {""})


class _HandWork:
    """Whether a compared value is worked out by hand (``by_hand``, ``scalar``) or computed, and by
    which calls (``computations``), through one test function's assignments (``_bindings``)."""

    def __init__(self, model, values, passed, tensors, unpacked) -> None:
        self.model, self.values, self.passed, self.tensors, self.unpacked = model, values, passed, tensors, unpacked

    def scalar(self, e, depth=0) -> bool:
        if type(e) in (cst.Integer, cst.Float):
            return True
        if type(e) is cst.UnaryOperation:
            return self.scalar(e.expression, depth)
        if type(e) is cst.Name:
            if e.value in self.tensors:
                return False
            if e.value in self.values and depth < 4:
                return self.scalar(self.values[e.value], depth + 1)
            if e.value.isupper():
                return True  # WORLD_SIZE, FP8_MAX: a module constant
            # a parameter or a constant: a number
            return e.value not in self.passed and e.value not in self.unpacked
        if type(e) is cst.Attribute:
            return e.value is not None and type(e.value) is not cst.Call and (self.model.dotted(e) or "").isupper()
        if type(e) is cst.BinaryOperation:
            return self.scalar(e.left, depth) and self.scalar(e.right, depth)
        return False

    def by_hand(self, e, depth=0) -> bool:
        while type(e) is cst.Call and type(e.func) is cst.Attribute and e.func.attr.value in AS_IS | SHAPE:
            e = e.func.value
        if type(e) in (cst.Integer, cst.Float, cst.UnaryOperation):
            return self.scalar(e)
        if type(e) is cst.Name:
            if e.value in self.passed or e.value not in self.values or depth >= 4:
                return self.scalar(e)
            return self.by_hand(self.values[e.value], depth + 1)
        if type(e) is cst.Call:
            return (self.model.call_name(e) or "") in LITERAL_TENSORS | {"torch.arange", "torch.linspace"}
        if type(e) is cst.Subscript:
            return self.by_hand(e.value, depth)
        if type(e) in (cst.ListComp, cst.GeneratorExp):
            return self.by_hand(e.elt, depth)
        if type(e) is cst.DictComp:
            return self.by_hand(e.value, depth)
        if type(e) is cst.BinaryOperation:
            return self.scalar(e.left) or self.scalar(e.right) or (
                self.by_hand(e.left, depth) and self.by_hand(e.right, depth))
        return False

    def computations(self, e, depth=0) -> set[str]:
        """The calls that compute ``e`` (names resolved through assignments), casts aside."""
        found: set[str] = set()
        for n in nodes_under(e, nested=True):
            if type(n) is cst.Name and n.value in self.values and depth < 4:
                found |= self.computations(self.values[n.value], depth + 1)
            elif type(n) is cst.Call and not (type(n.func) is cst.Attribute and n.func.attr.value in AS_IS):
                name = self.model.dotted(n.func) or ""
                if name not in LITERAL_TENSORS and last(self.model.call_name(n)) not in TENSOR_FACTORIES:
                    found.add(name)
        return found
