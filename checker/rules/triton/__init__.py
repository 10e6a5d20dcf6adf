"""KC5xx: Triton kernel hygiene, checked inside ``@triton.jit`` functions.

The rules of this family read the kernels the module model found (``model.triton_kernels``) and
share a small view of each one: its parameters (which are ``tl.constexpr``), its assignments in
source order, and the names of ``triton.language`` calls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from kcheck.model import children

TRITON_TEXT = r"triton"
KERNEL_NAMES = {"jit", "autotune", "heuristics"}
# Meta-parameters by name: upper-case block/tile sizes, group sizes, and the launch options.
META_PARAM = re.compile(r"^(BLOCK|TILE)(_|$)|_(BLOCK|TILE)(_|$)|^GROUP_SIZE|^num_warps$|^num_stages$")
# A tl.arange over one of these names covers a blocked (tail-able) dimension...
BLOCKED_BOUND = re.compile(r"BLOCK|TILE|CHUNK", re.IGNORECASE)
# ...unless the name says it is a model dimension taken whole (BLOCK_DMODEL, BLOCK_HEADDIM,
# BLOCK_DPE, BLOCK_ROPE, BLOCK_D): kernels size those exactly and check the head size in the wrapper.
EXACT_BOUND = re.compile(r"DMODEL|HEAD|DIM|DPE|ROPE|_D[KV]?$", re.IGNORECASE)


def kernel_gate(summary) -> bool:
    """A file with at least one function decorated ``jit``/``autotune``/``heuristics``."""
    return any(f.decorators & KERNEL_NAMES for f in summary.functions)


def nodes_under(root: cst.CSTNode, nested: bool = False) -> Iterator[cst.CSTNode]:
    """Every node under ``root`` (itself included), in source order; nested function, class and
    lambda bodies only when ``nested``."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if not nested and isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and node is not root:
            continue
        stack.extend(reversed(children(node)))


def assignments(line: cst.SimpleStatementLine) -> Iterator[tuple[str, cst.BaseSmallStatement]]:
    """``(name, statement)`` for each plain name the line's statements assign (``=``, annotated
    with a value, or augmented), in source order."""
    for stmt in line.body:
        if isinstance(stmt, cst.Assign):
            targets = [t.target for t in stmt.targets]
        elif isinstance(stmt, (cst.AnnAssign, cst.AugAssign)) and stmt.value is not None:
            targets = [stmt.target]
        else:
            continue
        for target in targets:
            if isinstance(target, cst.Name):
                yield target.value, stmt


def tl_op(model, call: cst.CSTNode) -> str | None:
    """``load`` for ``tl.load(...)`` (``triton.language`` under any alias), else None."""
    if not isinstance(call, cst.Call):
        return None
    name = model.call_name(call) or ""
    for prefix in ("triton.language.", "tl."):
        if name.startswith(prefix):
            return name[len(prefix):]
    return None


def is_tl_attr(model, node: cst.CSTNode, *attrs: str) -> bool:
    """Whether ``node`` is ``tl.<one of attrs>`` (``tl.float32``, ``tl.int64``...)."""
    name = model.qualname(node) or ""
    return any(name in (f"triton.language.{a}", f"tl.{a}") for a in attrs)


def arg(call: cst.Call, index: int, keyword: str) -> cst.BaseExpression | None:
    """The argument given by ``keyword`` or at positional ``index``."""
    for a in call.args:
        if a.keyword is not None and a.keyword.value == keyword:
            return a.value
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    return positional[index] if index < len(positional) else None


def is_none(node: cst.CSTNode | None) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


@dataclass
class Kernel:
    """One ``@triton.jit`` function as the KC5xx rules see it."""

    fn: cst.FunctionDef
    params: dict[str, cst.Param] = field(default_factory=dict)
    constexprs: set[str] = field(default_factory=set)
    # (target name, value, statement) for every simple assignment, in source order;
    # ``x += v`` is recorded as (x, v, stmt) with ``augmented`` in ``augmented``.
    assigns: list[tuple[str, cst.BaseExpression, cst.CSTNode]] = field(default_factory=list)
    augmented: set[int] = field(default_factory=set)  # ids of augmented-assignment statements

    @property
    def name(self) -> str:
        return self.fn.name.value

    def runtime_params(self) -> set[str]:
        return set(self.params) - self.constexprs

    def calls(self, model, op: str) -> Iterator[cst.Call]:
        for node in nodes_under(self.fn.body):
            if isinstance(node, cst.Call) and tl_op(model, node) == op:
                yield node


def kernels(model) -> list[Kernel]:
    return [_kernel(model, fn) for fn in model.triton_kernels]


def _kernel(model, fn: cst.FunctionDef) -> Kernel:
    k = Kernel(fn)
    ps = fn.params
    for p in [*ps.posonly_params, *ps.params, *ps.kwonly_params]:
        k.params[p.name.value] = p
        if p.annotation is not None and _is_constexpr(model, p.annotation.annotation):
            k.constexprs.add(p.name.value)
    for node in nodes_under(fn.body):
        if isinstance(node, cst.Assign):
            for t in node.targets:
                if isinstance(t.target, cst.Name):
                    k.assigns.append((t.target.value, node.value, node))
        elif isinstance(node, cst.AnnAssign) and isinstance(node.target, cst.Name) and node.value is not None:
            k.assigns.append((node.target.value, node.value, node))
        elif isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name):
            k.assigns.append((node.target.value, node.value, node))
            k.augmented.add(id(node))
    return k


def _is_constexpr(model, annotation: cst.BaseExpression) -> bool:
    if isinstance(annotation, cst.SimpleString):
        return annotation.evaluated_value.split(".")[-1] == "constexpr"
    return (model.qualname(annotation) or "").split(".")[-1] == "constexpr"


def names_in(node: cst.CSTNode) -> set[str]:
    return {n.value for n in nodes_under(node) if isinstance(n, cst.Name)}
