from __future__ import annotations

import ast
import re

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.measurement import (
    COMPARES, EMPTY_FACTORIES, Scope, calls, gate_facts, is_compare, last, mocked, nodes_under, uses,
)

FILLS = {"fill_", "copy_", "normal_", "uniform_", "random_", "fill_diagonal_"}
REFERENCE_BUFFER = re.compile(r"(^|_)(ref|reference|expected|expect|baseline|golden|gold|naive)(_|$)", re.IGNORECASE)


class UnpoisonedOutput(Rule):
    """An output buffer from `torch.empty` compared without being poisoned first.

    ## What it does
    In test and benchmark code, finds a buffer allocated with `torch.empty`, `torch.empty_like`,
    `torch.empty_strided` or `.new_empty`, handed to a call that writes it (the kernel under
    test, or its wrapper), and later compared, with no fill before the call: no
    `.fill_(float("nan"))` or other non-zero fill, no `.copy_`, no random fill. Buffers written
    by a `torch.*` operator (`out=` of a library op writes every element) are not reported, and
    neither are the reference's own outputs (`ref_out`, `expected`, `baseline`): an element the
    reference leaves unwritten makes the check fail, it cannot hide a kernel bug. Tests on
    stand-ins (`monkeypatch`, `Mock`, `patch`) check dispatch, not a kernel's writes, and are left
    alone.

    ## Why is this bad?
    `torch.empty` does not clear memory. The caching allocator hands back the block that the
    reference (or the previous test case) just freed, so the buffer often already holds the
    right answer. A kernel that writes nothing, skips the tail block or masks off a row passes.
    Fill outputs with NaN (a sentinel for integers) before each call, so that anything left
    unwritten fails the comparison.

    ## Example
    ```python
    out = torch.empty_like(x)
    ops.rms_norm(out, x, weight, eps)
    torch.testing.assert_close(out, ref)
    ```

    ## Use instead
    ```python
    out = torch.empty_like(x).fill_(float("nan"))
    ops.rms_norm(out, x, weight, eps)
    torch.testing.assert_close(out, ref)
    ```
    """

    CODE = "KC405"
    NAME = "unpoisoned-output"
    MESSAGE = ("{name} comes from {factory}(), is written by {writer}() and compared without being poisoned: "
               "stale memory can hold the right answer; fill it with NaN first")
    SEVERITY = "warning"
    KNOWLEDGE = ("verification/poisoned-outputs", "verification/nan-never-passes")
    VALID = [
        """
import torch
def test_norm(x, w):
    out = torch.empty_like(x)
    out.fill_(float("nan"))
    rms_norm(out, x, w, 1e-6)
    torch.testing.assert_close(out, ref(x, w))
""",
        """
import torch
def test_norm(x, w):
    out = torch.full_like(x, float("nan"))
    rms_norm(out, x, w, 1e-6)
    ref = torch.empty_like(x)
    torch.mul(x, w, out=ref)
    torch.testing.assert_close(out, ref)
""",
    ]
    INVALID = [
        """
import torch
def test_norm(x, w):
    out = torch.empty_like(x)
    rms_norm(out, x, w, 1e-6)
    torch.testing.assert_close(out, ref(x, w))
""",
        """
import torch
def test_quant(x):
    q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty(x.shape[0], 1, device=x.device)
    per_token_quant(x, out=q, scales=s)
    torch.testing.assert_close(s, ref_scales(x))
""",
    ]
    PREFILTER = (r"empty",)

    @classmethod
    def gate(cls, summary, config) -> bool:
        """A function in measurement code that assigns ``b = torch.empty*(...)`` (or ``.new_empty``)
        in its own body and, in calls written in it, hands ``b`` to a comparison and to a call
        outside ``torch.`` that is no method of such a buffer: what a report needs."""
        if not uses(summary, EMPTY_LAST):
            return False
        facts = gate_facts(summary)
        if not facts.aligned:
            return True
        own_calls: dict[int, list[ast.Call]] = {}
        for call, f in summary.calls:
            if f is not None:
                own_calls.setdefault(id(f), []).append(call)
        for f in summary.functions:
            if id(f) not in own_calls or not facts.in_scope(f):
                continue
            buffers = {a.targets[0].id for a in facts.own_assigns(f)
                       if len(a.targets) == 1 and type(a.targets[0]) is ast.Name and _empty_call(facts, a.value)}
            candidates = {b for b in buffers if not REFERENCE_BUFFER.search(b)}
            if not candidates:
                continue
            compared: set[str] = set()
            written: set[str] = set()
            for call in own_calls[id(f)]:
                func = call.func
                if type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id in buffers:
                    continue  # out.fill_(...), out.copy_(...)
                passed = {v.id for v in _arg_values(call) if type(v) is ast.Name} & candidates
                if not passed:
                    continue
                lasts = facts.lasts(call)
                if lasts & COMPARES:
                    compared |= passed
                names = facts.qualnames(func)
                if lasts - COMPARES and (not names or any(
                        not n.startswith("torch.") or n.startswith("torch.ops.") for n in names)):
                    written |= passed
                if compared & written:
                    return True
        return False

    def leave_Module(self, original_node: cst.Module) -> None:
        for fn in Scope(self).functions():
            self._check(fn)

    def _check(self, fn: cst.FunctionDef) -> None:
        model = self.model
        if mocked(model, fn):
            return  # a dispatch test on stand-ins (monkeypatch, Mock): no kernel output to poison
        buffers: dict[str, tuple[cst.Call, str]] = {}
        for node in nodes_under(fn.body):
            if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                factory = self._empty(node.value)
                if factory:
                    buffers[node.targets[0].target.value] = (node.value, factory)
        if not buffers:
            return
        poisoned: set[str] = set()
        written: dict[str, str] = {}
        compared: set[str] = set()
        for call in calls(model, fn.body, depth=0):
            func = call.func
            if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in buffers:
                if func.attr.value in FILLS and not _zero_fill(call):
                    poisoned.add(func.value.value)
                continue
            passed = {a.value.value for a in call.args if isinstance(a.value, cst.Name) and a.value.value in buffers}
            if not passed:
                continue
            name = model.call_name(call) or ""
            if is_compare(model, call):
                compared |= passed
            elif not name.startswith("torch.") or name.startswith("torch.ops."):
                for b in passed:
                    launched = func.value if isinstance(func, cst.Subscript) else func  # kernel[grid](...)
                    written.setdefault(b, name or model.dotted(launched) or "a call")
        for node in nodes_under(fn.body):  # out[...] = ... writes it too
            if isinstance(node, cst.Assign):
                for t in node.targets:
                    if isinstance(t.target, cst.Subscript) and isinstance(t.target.value, cst.Name):
                        poisoned.add(t.target.value.value)
        for b in buffers:
            if REFERENCE_BUFFER.search(b):
                continue  # the reference's own output: stale memory there fails the check, it hides nothing
            if b in written and b in compared and b not in poisoned:
                call, factory = buffers[b]
                self.report(call, name=b, factory=factory, writer=last(written[b]) or written[b])

    def _empty(self, value: cst.CSTNode) -> str | None:
        """``torch.empty`` (or ``.new_empty``) when ``value`` allocates without a fill."""
        if not isinstance(value, cst.Call):
            return None
        name = self.model.call_name(value) or ""
        if name in EMPTY_FACTORIES:
            return name
        if isinstance(value.func, cst.Attribute) and value.func.attr.value == "new_empty":
            return ".new_empty"
        return None


def _zero_fill(call: cst.Call) -> bool:
    return bool(call.args) and isinstance(call.args[0].value, (cst.Integer, cst.Float)) and float(
        call.args[0].value.evaluated_value) == 0.0


EMPTY_LAST = {name.split(".")[-1] for name in EMPTY_FACTORIES} | {"new_empty"}


def _empty_call(facts, value: ast.AST) -> bool:
    """``torch.empty*(...)`` or ``x.new_empty(...)``: what ``UnpoisonedOutput._empty`` accepts."""
    if type(value) is not ast.Call:
        return False
    if type(value.func) is ast.Attribute and value.func.attr == "new_empty":
        return True
    return not facts.qualnames(value.func).isdisjoint(EMPTY_FACTORIES)


def _arg_values(call: ast.Call) -> list[ast.AST]:
    """Every argument's value, positional (``*x`` as ``x``) and keyword (``**x`` as ``x``)."""
    return [a.value if type(a) is ast.Starred else a for a in call.args] + [k.value for k in call.keywords]
