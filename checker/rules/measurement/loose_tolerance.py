from __future__ import annotations

import re

import libcst as cst

from kcheck.model import walk
from kcheck.rule import Rule
from kcheck.rules.measurement import (
    QUANTIZED, TOLERANCE_COMPARES, TOLERANCE_LIMITS, Scope, arg, calls, dtypes_in, is_compare, kernel_call, module_statements,
    nodes_under, number,
)


# A comment that states why the tolerance is wide: a cause (rounding, accumulation, a dtype, an
# order of operations), not the words "tolerance", "loose" or "relaxed" alone, which only restate it.
REASON = re.compile(r"noise|ulp|round|accumulat|error|precision|approx|drift|differ|bf16|fp16|"
                    r"tf32|nondetermin|atomic|order", re.IGNORECASE)
# A comment that admits the tolerance is a problem to fix is no reason for it.
ADMITS = re.compile(r"\b(TODO|FIXME|XXX|HACK)\b|too (loose|high|large)", re.IGNORECASE)
QUICK_REDUCE = re.compile(r"quick_?(all_?)?reduce|quickreduce|\bqr_", re.IGNORECASE)


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
    (FP32 named in a function that compares `.float()` copies says nothing about the output),
    and, when the function names only FP32/FP64 (often a scale or a sink beside the output), also
    from the module constants it reads (`DTYPE = torch.bfloat16`) and the same-module helpers it
    calls (the input builders); the loosest one wins, and BF16 is assumed when none is named.
    FP32 in a test that names TF32 (`FIXUP_TF32_RTOL`, `allow_tf32`) is judged like FP16, whose
    10 mantissa bits TF32 keeps.

    Tolerances chosen per dtype and passed by name are judged against the dtype they were chosen
    for and reported where they are written: a `pytest.mark.parametrize` row that binds the
    tolerance beside its dtype (`(torch.bfloat16, 1e4, 1e-2)`; a row naming no dtype is judged
    by the test's dtypes, a row naming a quantised one is not judged), and a local
    `atol = 20.0 if out_dtype == torch.bfloat16 else 1.0`, whose first value is judged as BF16
    even in a test that also runs FP8 inputs (their output is BF16). Values that reach the
    comparison through local names are followed too: tuples assigned under a dtype test
    (`rtol, atol = 3e-2, 5e-2` under `if itype == torch.bfloat16:`, judged as BF16; the other
    branch of such a test, by the test's other dtypes; a value assigned under an `if` that tests
    something other than the dtype, such as a width or a mode, is not judged), a value scaled at the comparison
    (`atol=atol * 10`, reported at the comparison), and a checking helper's tolerance parameter
    (`def check_close(out, ref, atol=1e-2)`: its default, and the keyword each same-module caller
    passes, judged by that caller's dtypes; the kernel then runs at the callers). Not judged this way: the
    outputs of a training run (the test or its helpers call `optimizer.step()`), whose error
    compounds over the steps.

    Three more ways of passing a tolerance are read the same way: a dict of tolerances keyed by
    dtype (`atol, rtol = TOLS[dtype]`, each entry judged for the dtype its key names; a dict whose
    comment gives the reason for its values is not judged), a checking helper's tolerance parameter
    with no default, passed by each same-module caller by keyword or by position (reported at the
    caller, the loosest per call), and an assertion that the error stays under a number:
    `assert (out - ref).abs().max() < 0.5` (or a name holding that value) is judged as an `atol`,
    `assert (out - ref).norm() / ref.norm() < 0.2` as an `rtol`.

    A comment that only restates the tolerance ("tolerance", "loose", "relaxed") or admits it is a
    problem (TODO, FIXME, "too loose") is no reason for it.

    Not judged: tests of quantised outputs (FP8, INT8, FP4, block-scaled, a test or a call named for
    quantisation, a quick all-reduce that compresses its payload); tests that run no kernel (no
    launch and no call into kernel code in the test or its helpers: end-to-end model and server
    outputs, such as an fp32 engine's logits against the Hugging Face model's, where `.cuda()`
    only places the reference model on the device); and a comparison with a comment that gives
    the reason for its tolerance, on it or just above it ("bf16 accumulation", "loose: rounding
    noise"): the tolerance was widened on purpose, as this rule asks.

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
    PREVIEW = True  # below the bar on the test split of 2026-12-07 (12 of 17): benchmarks/results/evaluation-test.md
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
from mylib import ops
def test_norm():
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    torch.testing.assert_close(ops.norm(x), ref(x), atol=1.0, rtol=1.0)
""",
        """
import torch
from mylib import ops
def test_norm_max_error():
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    assert (ops.norm(x) - ref(x)).abs().max() < 1.0
""",
        """
import torch
ATOL = 1e-2
def test_softmax():
    x = torch.randn(8, 64, dtype=torch.float32)
    assert torch.allclose(softmax_triton(x), torch.softmax(x, -1), 1e-5, ATOL)
""",
    ]
    PREFILTER = (r"close|abs\(|norm\(",)
    NEEDS = ("output check",)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        self._reported: set[int] = set()  # tolerance values reported where they are written
        self._passed_in: dict[int, int] = {}  # id(value passed to a checking helper) -> id(the call passing it)
        scope = Scope(self)
        module_dtypes = dtypes_in(model, module_statements(original_node))
        for node in nodes_under(original_node, nested=True):
            if not (type(node) is cst.Call and is_compare(model, node, TOLERANCE_COMPARES) and scope.covers(node)):
                continue
            if self._reasoned(node) or not self._checks_kernel(node):
                continue
            positional = (model.call_name(node) or "").split(".")[0] in ("torch", "numpy", "np")
            if self._chosen_per_dtype(node, original_node, positional):
                continue
            if self._quantized_path(node):
                continue
            loosest = self._loosest(node, original_node, module_dtypes, self._upcast_args(node))
            if loosest is None:
                continue
            for which, index, slot in (("rtol", 2, 1), ("atol", 3, 0)):
                base, factor = _scaled(original_node, arg(node, index if positional else 99, which))
                value = number(original_node, base)
                value = value * factor if value is not None else None
                limit = TOLERANCE_LIMITS[loosest][slot]
                if value is not None and value > limit:
                    self.report(node, which=which, value=value, dtype=loosest, limit=limit)
                    break

        for node in nodes_under(original_node, nested=True):
            if type(node) is not cst.Assert or not scope.covers(node):
                continue
            bound = self._error_bound(node.test)
            if bound is None or self._reasoned(node) or not self._checks_kernel(node) or self._quantized_path(node):
                continue
            which, value, upcast = bound
            loosest = self._loosest(node, original_node, module_dtypes, upcast)
            if loosest is None:
                continue
            limit = TOLERANCE_LIMITS[loosest][0 if which == "atol" else 1]
            if value > limit:
                self.report(node, which="the max-abs-error bound" if which == "atol" else "the relative-error bound",
                            value=value, dtype=loosest, limit=limit)

    def _loosest(self, node: cst.CSTNode, module: cst.Module, module_dtypes: set[str], upcast: bool) -> str | None:
        """The loosest output dtype a comparison at ``node`` may judge (None: a quantised test)."""
        dtypes = self._dtypes(node)
        if dtypes <= {"float32", "float64"} and upcast:
            dtypes = set()  # fp32 copies of outputs of unknown precision: fp32 says nothing
        if dtypes and dtypes <= {"float32", "float64"}:
            # fp32 named in the test is often a side tensor (a scale, a sink, an fp32 reference)
            # while the output's dtype comes from a module constant (DTYPE = torch.bfloat16) or
            # an input helper: judge by the loosest of all
            dtypes = dtypes | self._indirect_dtypes(node, module)
        dtypes = dtypes or module_dtypes
        if "quantized" in dtypes:
            return None
        if "float32" in dtypes and self._tf32(node):
            dtypes = dtypes | {"float16"}  # TF32 keeps FP16's 10 mantissa bits
        dtypes = dtypes & TOLERANCE_LIMITS.keys() or {"bfloat16"}
        return max(dtypes, key=lambda d: TOLERANCE_LIMITS[d])

    def _error_bound(self, test: cst.BaseExpression):
        """``(which, bound, upcast)`` for an assertion that an output's error stays under a number
        (a literal or a module constant): the largest absolute difference
        (``(out - ref).abs().max() < 0.5``, ``torch.max(torch.abs(out - ref)) <= tol``, or a name
        the function assigned such a value) is an ``atol``; that difference or its norm divided by
        the reference's (``(out - ref).norm() / ref.norm() < 0.2``) an ``rtol``. ``upcast``: the
        difference is taken between ``.float()`` copies."""
        if type(test) is not cst.Comparison or len(test.comparisons) != 1 or type(
                test.comparisons[0].operator) not in (cst.LessThan, cst.LessThanEqual):
            return None
        value = number(self.context.module, test.comparisons[0].comparator)
        if value is None:
            return None
        left = test.left
        if type(left) is cst.Name:
            fn = self.model.enclosing_function(test)
            bound = [a.value for a in nodes_under(fn.body) if type(a) is cst.Assign and len(a.targets) == 1
                     and type(a.targets[0].target) is cst.Name and a.targets[0].target.value == left.value] if fn else []
            if len(bound) != 1:
                return None
            left = bound[0]
        while type(left) is cst.Call and type(left.func) is cst.Attribute and left.func.attr.value in ("item", "float"):
            left = left.func.value
        if type(left) is cst.Call and type(left.func) is cst.Name and left.func.value == "float" and left.args:
            left = left.args[0].value
        which = None
        if type(left) is cst.BinaryOperation and type(left.operator) is cst.Divide:
            if self._difference(left.left, ("abs", "norm")):
                which = "rtol"
        elif self._difference(left, ("abs",)) and any(
                type(c) is cst.Call and _called(c) in ("max", "amax") for c in nodes_under(left)):
            which = "atol"
        if which is None:
            return None
        upcast = any(type(c) is cst.Call and type(c.func) is cst.Attribute and c.func.attr.value in ("float", "double")
                     for c in nodes_under(left))
        return which, value, upcast

    def _difference(self, expr: cst.CSTNode, ops: tuple[str, ...]) -> bool:
        """``expr`` takes one of ``ops`` (``abs``, ``norm``) of a difference of two values."""
        return any(type(c) is cst.Call and _called(c) in ops and any(
            type(b) is cst.BinaryOperation and type(b.operator) is cst.Subtract for b in nodes_under(c))
            for c in nodes_under(expr))

    def _chosen_per_dtype(self, call: cst.Call, module: cst.Module, positional: bool) -> bool:
        """Tolerances chosen per dtype where the comparison reads them by name: a
        ``pytest.mark.parametrize`` row that binds the tolerance beside its dtype
        (``(torch.bfloat16, 1e4, 1e-2)``), or a local ``atol = 20.0 if dtype == torch.bfloat16
        else 1e-2``. Each value is judged against the dtype it was chosen for (a row naming no
        dtype, against the test's loosest), and reported where it is written. True when the
        comparison's tolerances were resolved this way (reported or not)."""
        model = self.model
        fn = model.enclosing_function(call)
        if fn is None:
            return False
        if any(type(c.func) is cst.Attribute and c.func.attr.value == "step" for c in calls(model, fn.body)):
            return True  # outputs of a training run (optimizer.step()): error compounds over steps, not judged
        resolved = False
        found = []
        for which, index, slot in (("rtol", 2, 1), ("atol", 3, 0)):
            name, factor = _scaled(module, arg(call, index if positional else 99, which))
            if type(name) is not cst.Name or number(module, name) is not None:
                continue
            rows = list(self._rows(fn, name.value))
            passed = {id(v) for _, v in self._callers_passing(fn, name.value)}  # written at each caller
            for value, dtype in [*rows, *self._local(fn, name.value)]:
                resolved = True
                local = not any(value is v for v, _ in rows) and id(value) not in passed
                if dtype is None or type(dtype) is frozenset:
                    dtypes = self._dtypes(call) or dtypes_in(model, module_statements(module))
                    if local and dtypes <= {"float32", "float64"}:
                        # fp32 named beside the output (a state, a scale): the output's dtype may come
                        # from module constants, input helpers, or the tests that call this one
                        dtypes = dtypes | self._indirect_dtypes(call, module) | dtypes_in(model, [
                            c for c in (model.enclosing_function(x) for x in model.callers(fn)) if c is not None])
                    if "quantized" in dtypes or self._quantized_path(call):
                        continue
                    if type(dtype) is frozenset:  # the other branch of a test naming these dtypes
                        dtypes = dtypes - dtype if dtypes - dtype else dtypes
                    dtypes = dtypes & TOLERANCE_LIMITS.keys() or {"bfloat16"}
                    dtype = max(dtypes, key=lambda d: TOLERANCE_LIMITS[d])
                got = number(module, value)
                if got is None:
                    continue
                got *= factor
                limit = TOLERANCE_LIMITS[dtype][slot]
                # a value scaled at the comparison is reported there, the others where written
                where = value if factor == 1 else call
                if got > limit and id(where) not in self._reported:
                    found.append((got / limit, local, where, which, got, dtype, limit))
        # of the values bound by local names, only the loosest is reported per comparison, and of
        # those a caller passes to a checking helper, only the loosest per call
        seen: set[int] = set()
        for ratio, local, where, which, got, dtype, limit in sorted(found, key=lambda f: -f[0]):
            key = 0 if local else self._passed_in.get(id(where))
            if id(where) in self._reported or (key is not None and key in seen):
                continue
            self._reported.add(id(where))
            if key is not None:
                seen.add(key)
            self.report(where, which=which, value=got, dtype=dtype, limit=limit)
        return resolved

    def _local(self, fn: cst.FunctionDef, name: str):
        """(value, dtype) of each value the function gives ``name``: its parameter default, a
        same-module caller's keyword (``check(out, ref, atol=0.5)``, judged by the caller's
        dtypes), and its assignments (``rtol, atol = 3e-2, 5e-2`` included, and each side of
        ``A if <test> else B``). A value is chosen for the dtype of the test it sits under
        (``if dtype == torch.bfloat16:``, or an ``if``-expression's test) and for the others on
        the other side (a frozenset of the dtypes it was not chosen for); None: not chosen per
        dtype."""
        yield from self._conditional(fn, name)
        for p in [*fn.params.params, *fn.params.kwonly_params]:
            if p.name.value == name:
                if p.default is not None:
                    yield p.default, None
                for caller, value in self._callers_passing(fn, name):
                    found = dtypes_in(self.model, [caller]) & TOLERANCE_LIMITS.keys()
                    if "quantized" not in dtypes_in(self.model, [caller]) and not _quantized_name(caller.name.value):
                        yield value, (max(found, key=lambda d: TOLERANCE_LIMITS[d]) if found else None)
        for n in nodes_under(fn.body):
            if type(n) is not cst.Assign or len(n.targets) != 1:
                continue
            target = n.targets[0].target
            if type(target) is cst.Name and target.value == name:
                at = None
            elif type(target) in (cst.Tuple, cst.List):
                at = next((i for i, e in enumerate(target.elements)
                           if type(e.value) is cst.Name and e.value.value == name), None)
                if at is None:
                    continue
            else:
                continue
            outer = self._branch_dtype(fn, n)
            if outer is False:
                continue
            value = n.value
            if type(value) is cst.Subscript:  # ``atol, rtol = TOLS[dtype]``: each entry for its key's dtype
                yield from self._dict_entries(fn, value, at)
                continue
            if type(value) is cst.IfExp:
                if type(n.value) is cst.IfExp and at is None and type(target) is cst.Name:
                    continue  # ``name = A if test else B``: judged by _conditional
                chosen = self._row_dtype(value.test)
                if chosen is False:
                    continue
                sides = [(value.body, chosen or outer), (value.orelse, frozenset({chosen}) if chosen else outer)]
            else:
                sides = [(value, outer)]
            for side, dtype in sides:
                if at is not None:
                    if type(side) not in (cst.Tuple, cst.List) or at >= len(side.elements):
                        continue
                    side = side.elements[at].value
                if type(side) in (cst.Integer, cst.Float):
                    yield side, dtype

    def _dict_entries(self, fn: cst.FunctionDef, sub: cst.Subscript, at: int | None):
        """(value, dtype) of each entry of a dict of tolerances keyed by dtype that ``sub`` indexes
        (``TOLS[dtype]``, ``TOLS[(dtype, mode)]``; the dict bound in ``fn`` or at the module's top
        level): the entry's tolerance (its ``at``-th item when a tuple is unpacked) for the dtype
        its key names. Not judged: a key naming a quantised dtype, several or none, and a dict
        whose statement gives the reason for its values in a comment."""
        if type(sub.value) is not cst.Name:
            return
        found = None
        for root in (fn.body, self.context.module):
            for stmt in nodes_under(root):
                if type(stmt) is cst.SimpleStatementLine:
                    for small in stmt.body:
                        if type(small) is cst.Assign and type(small.value) is cst.Dict and any(
                                type(t.target) is cst.Name and t.target.value == sub.value.value for t in small.targets):
                            found = (stmt, small.value)
            if found:
                break
        if found is None or _gives_reason(cst.Module([]).code_for_node(found[0])):
            return
        for element in found[1].elements:
            if type(element) is not cst.DictElement:
                continue
            dtype = self._row_dtype(element.key)
            if not dtype:
                continue
            value = element.value
            if at is not None:
                if type(value) not in (cst.Tuple, cst.List) or at >= len(value.elements):
                    continue
                value = value.elements[at].value
            if type(value) in (cst.Integer, cst.Float):
                yield value, dtype

    def _branch_dtype(self, fn: cst.FunctionDef, node: cst.CSTNode):
        """The dtype the innermost ``if`` around ``node`` (inside ``fn``) tests for: its name when
        ``node`` is in the body, the frozenset of it when in the ``else``; None when no ``if``
        is around it; False when the test names a quantised dtype, several, or none (a value
        chosen for a mode, a width or a flag is chosen for something this rule cannot see)."""
        child = node
        for anc in self.model.ancestors(node):
            if anc is fn:
                return None
            if type(anc) is cst.If:
                dtype = self._row_dtype(anc.test)
                if dtype is None or dtype is False:
                    return False  # chosen under a test of something else (a mode, a width, a flag)
                inside = any(x is child for x in [anc.body])
                return dtype if inside else frozenset({dtype})
            child = anc
        return None

    def _callers_passing(self, fn: cst.FunctionDef, name: str):
        """(caller, value) for each same-module call of ``fn`` that passes ``name``, by keyword or
        by position (``check(out, ref, 1.0, 1.0)``; a method called on ``self`` skips ``self``)."""
        params = list(fn.params.params)
        at = next((i for i, p in enumerate(params) if p.name.value == name), None)
        for call in self.model.calls:
            if type(call) is not cst.Call or self.model.callee(call) is not fn:
                continue
            value = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)
            if value is None and at is not None:
                index = at - (1 if params and params[0].name.value in ("self", "cls")
                              and type(call.func) is cst.Attribute else 0)
                positional = [a for a in call.args if a.keyword is None and not a.star]
                if len(positional) == len([a for a in call.args if a.keyword is None]) and 0 <= index < len(positional):
                    value = positional[index].value
            caller = self.model.enclosing_function(call)
            if value is not None and caller is not None:
                self._passed_in[id(value)] = id(call)
                yield caller, value

    def _row_dtype(self, row: cst.CSTNode) -> str | None | bool:
        """The one float dtype a parametrize row or a branch's test names (None: none; False:
        a quantised one, or several)."""
        found = dtypes_in(self.model, [row])
        if "quantized" in found:
            return False
        found &= TOLERANCE_LIMITS.keys()
        return next(iter(found)) if len(found) == 1 else (None if not found else False)

    def _rows(self, fn: cst.FunctionDef, name: str):
        """(value, dtype) of each ``pytest.mark.parametrize`` row binding ``name``."""
        for d in fn.decorators:
            dec = d.decorator
            if type(dec) is not cst.Call or last_name(self.model, dec) != "parametrize" or len(dec.args) < 2:
                continue
            names = dec.args[0].value
            if type(names) is cst.SimpleString:
                argnames = [n.strip() for n in str(names.evaluated_value).split(",")]
            elif type(names) in (cst.List, cst.Tuple):
                argnames = [str(e.value.evaluated_value) for e in names.elements if type(e.value) is cst.SimpleString]
            else:
                continue
            if name not in argnames or len(argnames) < 2 or type(dec.args[1].value) not in (cst.List, cst.Tuple):
                continue
            at = argnames.index(name)
            for element in dec.args[1].value.elements:
                row = element.value
                items = None
                if type(row) in (cst.Tuple, cst.List):
                    items = [e.value for e in row.elements]
                elif type(row) is cst.Call and last_name(self.model, row) == "param":
                    if _skipped(self.model, row):
                        continue  # ``pytest.param(..., marks=pytest.mark.skip)``: the row never runs
                    items = [a.value for a in row.args if a.keyword is None]
                if items is None or at >= len(items):
                    continue
                dtype = self._row_dtype(row)
                if dtype is not False:
                    yield items[at], dtype

    def _conditional(self, fn: cst.FunctionDef, name: str):
        """(value, dtype) of ``name = A if <test naming a dtype> else B`` in ``fn``'s body: ``A``
        is chosen for the dtype the test names (``B`` for the others, not judged here)."""
        for n in nodes_under(fn.body):
            if type(n) is cst.Assign and len(n.targets) == 1 and type(n.targets[0].target) is cst.Name \
                    and n.targets[0].target.value == name and type(n.value) is cst.IfExp:
                dtype = self._row_dtype(n.value.test)
                if dtype:
                    yield n.value.body, dtype

    def _indirect_dtypes(self, call: cst.Call, module: cst.Module) -> set[str]:
        """Dtypes of the module constants the test reads and of the same-module helpers it calls."""
        model = self.model
        fn = model.enclosing_function(call)
        if fn is None:
            return set()
        constants: dict[str, cst.CSTNode] = {}
        for stmt in module_statements(module):
            if type(stmt) is cst.SimpleStatementLine:
                for small in stmt.body:
                    if type(small) is cst.Assign:
                        for t in small.targets:
                            if type(t.target) is cst.Name:
                                constants[t.target.value] = small.value
        roots: list[cst.CSTNode] = []
        for n in nodes_under(fn.body):
            if type(n) is cst.Name and n.value in constants:
                roots.append(constants[n.value])
            elif type(n) is cst.Call:
                helper = model.callee(n)
                if helper is not None and helper is not fn:
                    roots.append(helper)
        return dtypes_in(model, roots)

    def _tf32(self, call: cst.Call) -> bool:
        """The comparison or its function names TF32 (``FIXUP_TF32_RTOL``, ``allow_tf32``)."""
        fn = self.model.enclosing_function(call)
        for n in nodes_under(fn if fn is not None else call):
            text = n.value if type(n) is cst.Name else (n.attr.value if type(n) is cst.Attribute else "")
            if "tf32" in text.lower():
                return True
        return False

    def _checks_kernel(self, call: cst.Call) -> bool:
        """The test runs a kernel (a launch, or a call into kernel code) in the function, the
        same-module helpers it calls or the same-module classes it builds; end-to-end model and
        server outputs are judged elsewhere."""
        fn = self.model.enclosing_function(call)
        if fn is None:
            return True
        reached = calls(self.model, fn.body)
        if any(kernel_call(self.model, c) for c in reached):
            return True
        # a same-module module wrapper built in the test (``LigerLMHeadCE(...)``): its methods run
        # the kernel (``self.ce_loss = LigerFusedLinearCrossEntropyLoss(...)`` in ``__init__``)
        classes = {c.name.value: c for c in nodes_under(self.context.module, nested=True) if type(c) is cst.ClassDef}
        built = {last_name(self.model, c) for c in reached} & classes.keys()
        if any(kernel_call(self.model, c) for name in built for c in nodes_under(classes[name], nested=True)
               if type(c) is cst.Call):
            return True
        # a checking helper (``check_close(out, ref, atol=...)``): the kernel runs at its callers
        callers = [self.model.enclosing_function(c) for c in self.model.callers(fn)]
        return any(c is not None and c is not fn and any(kernel_call(self.model, x) for x in calls(self.model, c.body))
                   for c in callers)

    def _reasoned(self, call: cst.Call) -> bool:
        """A comment on the comparison (or just above it) gives the reason for the tolerance."""
        for anc in self.model.ancestors(call):
            if isinstance(anc, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return _gives_reason(cst.Module([]).code_for_node(anc))
        return False

    def _quantized_path(self, call: cst.Call) -> bool:
        """The test runs a quantised path (a call or the test named ``quant``, ``fp8``, a quick
        all-reduce that compresses its payload): its error is the quantisation's, not judged."""
        fn = self.model.enclosing_function(call)
        if fn is None:
            return False
        return _quantized_name(fn.name.value) or any(
            _quantized_name((self.model.dotted(c.func) or "").split(".")[-1])
            for c in nodes_under(fn.body) if type(c) is cst.Call)

    def _dtypes(self, call: cst.Call) -> set[str]:
        """Dtypes named in the enclosing functions and their decorators (empty: ask the module)."""
        found: set[str] = set()
        for fn in (a for a in self.model.ancestors(call) if type(a) is cst.FunctionDef):
            found |= dtypes_in(self.model, [fn])
        return found

    def _upcast_args(self, call: cst.Call) -> bool:
        """The compared values are upcast copies (``out.float()``, ``out.to(torch.float32)``)."""
        for a in call.args[:2]:
            value = a.value
            if type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in (
                    "float", "double", "to"):
                return True
        return False


def last_name(model, call: cst.Call) -> str:
    return (model.call_name(call) or model.dotted(call.func) or "").split(".")[-1]


def _called(call: cst.Call) -> str:
    """The called name's last part, on any receiver (``(a - b).abs()``: ``abs``)."""
    func = call.func
    return func.attr.value if type(func) is cst.Attribute else (func.value if type(func) is cst.Name else "")


def _quantized_name(name: str) -> bool:
    """A function or call named for a quantised path or a quick all-reduce."""
    return bool(QUANTIZED.search(name) or QUICK_REDUCE.search(name))


def _gives_reason(code: str) -> bool:
    """Whether a comment in ``code`` gives a reason for a tolerance."""
    return any(REASON.search(c) and not ADMITS.search(c) for c in re.findall(r"#[^\n]*", code))


def _skipped(model, row: cst.Call) -> bool:
    """A ``pytest.param`` row whose marks skip it unconditionally (``pytest.mark.skip``, not ``skipif``)."""
    marks = next((a.value for a in row.args if a.keyword is not None and a.keyword.value == "marks"), None)
    if marks is None:
        return False
    for node in walk(marks):
        target = node.func if type(node) is cst.Call else node
        if type(target) is cst.Attribute and target.attr.value == "skip" and (model.dotted(target.value) or "").endswith("mark"):
            return True
    return False


def _scaled(module: cst.Module, node: cst.CSTNode | None) -> tuple[cst.CSTNode | None, float]:
    """A tolerance written as a value times a number (``atol * 10``, ``2 * ATOL``, ``atol / 2``):
    the value and the factor; anything else: the node itself and 1."""
    if type(node) is cst.BinaryOperation and type(node.operator) in (cst.Multiply, cst.Divide):
        right = number(module, node.right)
        if right:
            return node.left, (right if type(node.operator) is cst.Multiply else 1 / right)
        left = number(module, node.left)
        if left is not None and type(node.operator) is cst.Multiply:
            return node.right, left
    return node, 1.0
