"""KC5xx: Triton kernel hygiene, checked inside ``@triton.jit`` functions.

The rules of this family read the kernels the module model found (``model.triton_kernels``) and
share a small view of each one: its parameters (which are ``tl.constexpr``), its assignments in
source order, and the names of ``triton.language`` calls.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from kcheck.project import TRITON_DECORATORS
from kcheck.facts import fact
from kcheck.gate import dotted, import_bindings
from kcheck.model import SCOPES_AND_LAMBDAS, children, subtree
from kcheck.triton_values import arg  # noqa: F401 - the rules import it from here

TRITON_TEXT = r"triton"
KERNEL_NAMES = {"jit", "autotune", "heuristics"}
# Meta-parameters by name: upper-case block/tile sizes, group sizes, and the launch options.
META_PARAM = re.compile(r"^(BLOCK|TILE)(_|$)|_(BLOCK|TILE)(_|$)|^GROUP_SIZE|^num_warps$|^num_stages$")
# A tl.arange over one of these names covers a blocked (tail-able) dimension...
BLOCKED_BOUND = re.compile(r"BLOCK|TILE|CHUNK", re.IGNORECASE)
# ...unless the name says it is a model dimension taken whole (BLOCK_DMODEL, BLOCK_HEADDIM,
# BLOCK_DPE, BLOCK_ROPE, BLOCK_D): kernels size those exactly and check the head size in the wrapper.
EXACT_BOUND = re.compile(r"DMODEL|HEAD|DIM|DPE|ROPE|_D[KV]?$", re.IGNORECASE)


def nodes_under(root: cst.CSTNode, nested: bool = False) -> Iterator[cst.CSTNode]:
    """Every node under ``root`` (itself included), in source order; nested function, class and
    lambda bodies only when ``nested``."""
    return subtree(root, () if nested else SCOPES_AND_LAMBDAS)


def assignments(line: cst.SimpleStatementLine) -> Iterator[tuple[str, cst.BaseSmallStatement]]:
    """``(name, statement)`` for each plain name the line's statements assign (``=``, annotated
    with a value, or augmented), in source order."""
    for stmt in line.body:
        if type(stmt) is cst.Assign:
            targets = [t.target for t in stmt.targets]
        elif type(stmt) in (cst.AnnAssign, cst.AugAssign) and stmt.value is not None:
            targets = [stmt.target]
        else:
            continue
        for target in targets:
            if type(target) is cst.Name:
                yield target.value, stmt


def tl_op(model, call: cst.CSTNode) -> str | None:
    """``load`` for ``tl.load(...)`` (``triton.language`` under any alias), else None."""
    if type(call) is not cst.Call:
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


def is_none(node: cst.CSTNode | None) -> bool:
    return type(node) is cst.Name and node.value == "None"


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
    _values: dict[str, list[cst.BaseExpression]] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.fn.name.value

    def values(self, name: str) -> list[cst.BaseExpression]:
        """The values the body assigns to ``name``, in source order (``assigns`` indexed once)."""
        if self._values is None:
            self._values = {}
            for target, value, _stmt in self.assigns:
                self._values.setdefault(target, []).append(value)
        return self._values.get(name, [])

    def runtime_params(self) -> set[str]:
        return set(self.params) - self.constexprs

    def compile_time(self) -> set[str]:
        """The constexpr parameters and the locals computed from them alone (``even = EVEN and
        ROWS == 1``): a branch on any of these is chosen when the kernel is compiled."""
        return fixed_compile_time(self.constexprs, {name: [names_in(v) for v in self.values(name)]
                                                    for name, _value, _stmt in self.assigns})

    def calls(self, model, op: str) -> Iterator[cst.Call]:
        for node in nodes_under(self.fn.body):
            if type(node) is cst.Call and tl_op(model, node) == op:
                yield node

    def pointers(self, model) -> set[str]:
        """The parameters the kernel addresses memory from: the base of a ``tl.load``/``tl.store``/
        atomic address (``BLOCK_TABLE + pid * stride``, also through a local it is built in) or a
        block pointer's ``base``. Whatever they are named, they are tensors, not meta-parameters."""
        found: set[str] = set()
        for node in nodes_under(self.fn.body):
            op = tl_op(model, node) if type(node) is cst.Call else None
            if op in ("load", "store") or (op or "").startswith("atomic_"):
                address = arg(node, 0, "pointer")
            elif op == "make_block_ptr":
                address = arg(node, 0, "base")
            else:
                continue
            todo, seen = [address], set()
            while todo:
                for name in _addends(todo.pop()):
                    if name in self.params:
                        found.add(name)
                    elif name not in seen:
                        seen.add(name)
                        todo.extend(self.values(name))
        return found


def kernels(model) -> list[Kernel]:
    return [_kernel(model, fn) for fn in model.triton_kernels]


def _addends(expr: cst.CSTNode | None) -> Iterator[str]:
    """The bare names summed in an address (``p + offs`` gives ``p`` and ``offs``, not the names
    inside a product: a stride or a block size scales an offset, it is not a base)."""
    if type(expr) is cst.Name:
        yield expr.value
    elif type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Add:
        yield from _addends(expr.left)
        yield from _addends(expr.right)


def _kernel(model, fn: cst.FunctionDef) -> Kernel:
    k = Kernel(fn)
    ps = fn.params
    for p in [*ps.posonly_params, *ps.params, *ps.kwonly_params]:
        k.params[p.name.value] = p
        if p.annotation is not None and _is_constexpr(model, p.annotation.annotation):
            k.constexprs.add(p.name.value)
    for node in nodes_under(fn.body):
        if type(node) is cst.Assign:
            for t in node.targets:
                if type(t.target) is cst.Name:
                    k.assigns.append((t.target.value, node.value, node))
        elif type(node) is cst.AnnAssign and type(node.target) is cst.Name and node.value is not None:
            k.assigns.append((node.target.value, node.value, node))
        elif type(node) is cst.AugAssign and type(node.target) is cst.Name:
            k.assigns.append((node.target.value, node.value, node))
            k.augmented.add(id(node))
    return k


def _is_constexpr(model, annotation: cst.BaseExpression) -> bool:
    if type(annotation) is cst.SimpleString:
        return annotation.evaluated_value.split(".")[-1] == "constexpr"
    return (model.qualname(annotation) or "").split(".")[-1] == "constexpr"


def fixed_compile_time(constexprs: set[str], reads: dict[str, list[set[str]]]) -> set[str]:
    """``constexprs`` and every name whose assigned values all read only names already in the set."""
    known = set(constexprs)
    grew = True
    while grew:
        grew = False
        for name, values in reads.items():
            if name not in known and values and all(v <= known for v in values):
                known.add(name)
                grew = True
    return known


def names_in(node: cst.CSTNode) -> set[str]:
    return {n.value for n in nodes_under(node) if type(n) is cst.Name}


def names_outside_loads(model, expr: cst.CSTNode) -> Iterator[str]:
    """The names ``expr`` reads outside ``tl.load`` calls (what a load returns is data, not an
    address), in the order of a walk that visits later children first."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if type(node) is cst.Call and tl_op(model, node) == "load":
            continue
        if type(node) is cst.Name:
            yield node.value
            continue
        stack.extend(children(node))


# Calls that stop a block's offsets: wrapping and clamping bound them, and a loaded value is data.
OFFSET_STOPS = {"minimum", "where", "load"}


def block_bounds(model, expr: cst.CSTNode, tainted: dict[str, str]) -> Iterator[str]:
    """Each BLOCK bound whose ``tl.arange`` offsets ``expr`` carries unwrapped, in the order found;
    ``tainted`` maps a local name to the bound its offsets come from. Wrapping (``%``), clamping
    (``tl.minimum``, ``tl.where``) and loading (a loaded value is data, bounded by that load's own
    mask) stop the offsets."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if type(node) is cst.BinaryOperation and type(node.operator) is cst.Modulo:
            continue
        if type(node) is cst.Call:
            op = tl_op(model, node)
            if op in OFFSET_STOPS:
                continue
            if op == "arange":
                bound = arg(node, 1, "end")
                if type(bound) is cst.Name and BLOCKED_BOUND.search(bound.value) \
                        and not EXACT_BOUND.search(bound.value):
                    yield bound.value
        if type(node) is cst.Name and node.value in tainted:
            yield tainted[node.value]
        stack.extend(node.children)


def innermost_loop(model, node: cst.CSTNode, k: Kernel):
    """The innermost ``for``/``while`` loop of the kernel around ``node`` (None outside loops)."""
    for anc in model.ancestors(node):
        if anc is k.fn:
            return None
        if type(anc) in (cst.For, cst.While):
            return anc
    return None


def runtime_value(expr: cst.CSTNode, k: Kernel) -> bool:
    """A value known only at run time: a non-constexpr parameter, a local, a load or a call."""
    if type(expr) in (cst.Integer, cst.Float):
        return False
    names = names_in(expr) - k.constexprs
    if any(type(n) is cst.Call for n in nodes_under(expr)):
        return True
    return any(n in k.params or not n.isupper() for n in names)


def is_load(model, expr: cst.CSTNode) -> bool:
    """``tl.load(...)``, or ``tl.load(...).to(...)``: a value read from memory."""
    while type(expr) is cst.Call and type(expr.func) is cst.Attribute and \
            expr.func.attr.value in ("to", "cast") and type(expr.func.value) is cst.Call:
        expr = expr.func.value
    return tl_op(model, expr) == "load"


def compile_time_branch(model, node: cst.CSTNode, k: Kernel) -> bool:
    """Inside an ``if`` on a constexpr parameter, or a local computed from them alone (an unmasked
    fast path chosen at launch)."""
    fixed = k.compile_time()
    for anc in model.ancestors(node):
        if anc is k.fn:
            return False
        if type(anc) in (cst.If, cst.IfExp) and names_in(anc.test) & fixed:
            return True
    return False


def cast_source(model, call) -> str | None:
    """``pid`` of ``pid.to(...)``, ``pid.cast(...)`` or ``tl.cast(pid, ...)``."""
    if type(call) is not cst.Call:
        return None
    if type(call.func) is cst.Attribute and call.func.attr.value in ("to", "cast"):
        source = call.func.value
    elif tl_op(model, call) == "cast" and call.args:
        source = call.args[0].value
    else:
        return None
    return source.value if type(source) is cst.Name else None


def reaches_only_masked(model, k: Kernel, ids: set[str], skip: cst.Call | None, depth: int) -> bool:
    """Whether the values of ``ids`` (page ids), and every address the kernel computes from them,
    reach only masked loads and stores, here or in the module's jit helpers they are passed to
    (``depth`` levels down). ``skip`` is the load that produced them."""
    ids = set(ids)
    changed = True
    while changed:  # every address computed from the page ids, in any order (loaded values are data)
        changed = False
        for name, value, _ in k.assigns:
            if name not in ids and not ids.isdisjoint(names_outside_loads(model, value)):
                ids.add(name)
                changed = True
    for n in nodes_under(k.fn.body):
        if type(n) is not cst.Call or n is skip:
            continue
        op = tl_op(model, n)
        if all(ids.isdisjoint(names_outside_loads(model, a.value)) for a in n.args):
            continue
        if op in ("load", "store"):
            mask = arg(n, 1 if op == "load" else 2, "mask")
            if (mask is None or is_none(mask)) and arg(n, 99, "boundary_check") is None \
                    and not ids.isdisjoint(names_outside_loads(model, arg(n, 0, "pointer") or n)):
                return False  # a page id dereferenced unmasked
        elif op is None and not (type(n.func) is cst.Attribute and n.func.attr.value in ("to", "cast")):
            helper = next((h for h in kernels(model) if type(n.func) is cst.Name and h.name == n.func.value), None)
            if helper is None or depth == 0:
                return False  # handed to a function the rules do not read
            order, passed, i = list(helper.params), set(), 0
            for a in n.args:
                if a.star:
                    return False
                name = a.keyword.value if a.keyword is not None else (order[i] if i < len(order) else None)
                i += a.keyword is None
                if name is not None and not ids.isdisjoint(names_outside_loads(model, a.value)):
                    passed.add(name)
            if not reaches_only_masked(model, helper, passed, None, depth - 1):
                return False
    return True


# -- the family's facts (kcheck.facts), over the ast ----------------------------------------------
#
# Every KC5xx rule reads ``model.triton_kernels``: functions with a decorator whose qualified name
# (resolved through the module's import table) is ``triton.jit``/``triton.autotune``/
# ``triton.heuristics``, exactly (``kcheck.project.TRITON_DECORATORS``). The facts find the same
# decorators from the ``ast``, resolving each through every import of its first name.


def _kernel_decorators(summary) -> list[set[str]]:
    """For each def of the file that may be a Triton kernel, the qualified names of its decorators
    (every reading); cached in ``summary.memo``."""
    found = summary.memo.get("triton")
    if found is None:
        found = summary.memo["triton"] = []
        if summary.tree is not None and (any(f.decorators & KERNEL_NAMES for f in summary.functions)
                                         or summary.imports & TRITON_DECORATORS):
            imports: dict[str, set[str]] = {}
            defs = []
            for node in ast.walk(summary.tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for local, full in import_bindings(node):
                        imports.setdefault(local, set()).add(full)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.decorator_list:
                    defs.append(node)
            for node in defs:
                names = set()
                for d in node.decorator_list:
                    name = dotted(d.func if isinstance(d, ast.Call) else d) or ""
                    head, dot, rest = name.partition(".")
                    names |= {f"{q}{dot}{rest}" for q in imports.get(head, ())} | {name}
                if names & TRITON_DECORATORS:
                    found.append(names)
    return found


@fact("triton kernel")
def defines_kernel(summary, config) -> bool:
    """The file defines a Triton kernel."""
    return bool(_kernel_decorators(summary))


@fact("autotuned kernel")
def defines_autotuned_kernel(summary, config) -> bool:
    """A Triton kernel of the file carries ``triton.autotune``."""
    return any("triton.autotune" in names for names in _kernel_decorators(summary))
