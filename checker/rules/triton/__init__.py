"""KC5xx: Triton kernel hygiene, checked inside ``@triton.jit`` functions.

The rules of this family read the kernels the module model found (``model.triton_kernels``) and
share a small view of each one: its parameters (which are ``tl.constexpr``), its assignments in
source order, and the names of ``triton.language`` calls.
"""

from __future__ import annotations

import ast
import re
import weakref
from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from kcheck.claims import TRITON_DECORATORS
from kcheck.gate import NESTED_SCOPES, ast_nodes, dotted, import_bindings, resolve
from kcheck.model import SCOPES_AND_LAMBDAS, children, subtree
from kcheck.triton_values import arg, param_arg  # noqa: F401 - the rules import them from here

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


# -- gates: the kernels the model will find, read from the ``ast`` -------------------------------
#
# Every KC5xx rule reads ``model.triton_kernels``: functions with a decorator whose qualified name
# (resolved through the module's import table) is ``triton.jit``/``triton.autotune``/
# ``triton.heuristics``, exactly (``kcheck.claims.TRITON_DECORATORS``). ``@triton.jit`` under
# ``from vllm.triton_utils import triton`` resolves to ``vllm.triton_utils.triton.jit`` and is not
# one. The gates below find the same kernels from the ``ast`` (the same flat import table: every
# import of the module, the last one of a name winning) and look at their calls, so a file whose
# kernels cannot trigger a rule stays away from libcst. Where the tree does not line up with the
# summary, ``triton_gate_view`` returns None and the gates let the file through.

_STATEMENT_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")
_BODY_FIELDS: dict[type, tuple[str, ...]] = {}


def _body_fields(kind: type) -> tuple[str, ...]:
    """The fields of a statement type that hold statements (or except handlers, match cases)."""
    fields = _BODY_FIELDS.get(kind)
    if fields is None:
        fields = _BODY_FIELDS[kind] = tuple(f for f in _STATEMENT_BODIES if f in kind._fields)
    return fields


# the one field of the expression nodes that spell an identifier; any other expression spells none


def ast_arg(call: ast.Call, index: int, keyword: str) -> ast.AST | None:
    """``arg`` over ``ast``: the argument given by ``keyword`` or at positional ``index``."""
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    return positional[index] if index < len(positional) else None


@dataclass
class GateKernel:
    """A function the model will take for a Triton kernel, as the gates see it."""

    node: ast.FunctionDef | ast.AsyncFunctionDef
    view: "GateView"  # a weak proxy: the view owns its kernels
    params: list[str]  # positional-only, plain and keyword-only, as ``Kernel.params``
    constexprs: set[str]  # annotated ``tl.constexpr`` (never more than the rule's: string annotations are not counted)
    # every call in the kernel's own scope with its ``triton.language`` op (None for other calls):
    # the body's, and those of its decorators, defaults and lambdas too (more than the rules read)
    calls: list[tuple[ast.Call, str | None]] = field(default_factory=list)
    _body: list[ast.AST] | None = None
    _assigned: dict[str, list[ast.AST]] | None = None
    _augmented: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        return self.node.name

    def runtime_params(self) -> set[str]:
        return set(self.params) - self.constexprs

    def tl_calls(self, *ops: str) -> Iterator[tuple[ast.Call, str]]:
        """``(call, op)`` for each ``triton.language.<op>(...)`` call (any alias), op in ``ops``."""
        for call, op in self.calls:
            if op is not None and op in ops:
                yield call, op

    def assigned(self) -> dict[str, list[ast.AST]]:
        """Each plain name the body assigns (``=``, annotated with a value, augmented) with the
        values, as ``Kernel.assigns`` and ``assignments`` read them (computed once, on demand)."""
        if self._assigned is None:
            self._assigned, self._augmented = {}, set()
            stack = list(self.node.body)
            while stack:  # statements only: assignments are never expressions
                node = stack.pop()
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            self._assigned.setdefault(target.id, []).append(node.value)
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                    if isinstance(node.target, ast.Name) and node.value is not None:
                        self._assigned.setdefault(node.target.id, []).append(node.value)
                        if isinstance(node, ast.AugAssign):
                            self._augmented.add(node.target.id)
                elif not isinstance(node, NESTED_SCOPES):
                    for name in _body_fields(type(node)):
                        stack.extend(getattr(node, name))
        return self._assigned

    def statements(self, *kinds: type) -> Iterator[ast.stmt]:
        """The body's statements of the given types, at any depth outside nested functions and classes."""
        stack = list(self.node.body)
        while stack:
            node = stack.pop()
            if isinstance(node, kinds):
                yield node
            if not isinstance(node, NESTED_SCOPES):
                for name in _body_fields(type(node)):
                    stack.extend(getattr(node, name))

    def compile_time(self) -> set[str]:
        """``Kernel.compile_time`` over ``ast``."""
        return fixed_compile_time(self.constexprs, {
            name: [{m.id for m in ast.walk(v) if type(m) is ast.Name} for v in values]
            for name, values in self.assigned().items()})

    def augmented(self) -> set[str]:
        """The plain names the body assigns with ``+=``-style statements."""
        self.assigned()
        return self._augmented

    def body_nodes(self) -> list[ast.AST]:
        """Every node of the body, not entering nested functions, classes or lambdas: what
        ``nodes_under(fn.body)`` walks (computed once, on demand)."""
        if self._body is None:
            self._body = list(ast_nodes(self.node.body, into_scopes=False))
        return self._body


@dataclass
class GateView:
    imports: dict[str, str]  # local name -> qualified name, as ``ModuleModel.imports``
    kernels: list[GateKernel]

    def qualname(self, node: ast.AST) -> str | None:
        """``ModuleModel.qualname`` over ``ast``: the first component resolved through the imports."""
        return resolve(dotted(node), self.imports)

    def tl_op(self, call: ast.Call) -> str | None:
        """``tl_op`` over ``ast``: ``load`` for ``tl.load(...)`` (``triton.language`` under any alias)."""
        func = call.func
        if type(func) is ast.Attribute and type(func.value) is ast.Name:  # qualname's commonest case, inline
            name = f"{self.imports.get(func.value.id, func.value.id)}.{func.attr}"
        else:
            name = self.qualname(func) or ""
        return _tl_name(name)

    def is_tl_attr(self, node: ast.AST | None, *attrs: str) -> bool:
        name = self.qualname(node) if node is not None else None
        return name is not None and any(name in (f"triton.language.{a}", f"tl.{a}") for a in attrs)


def _tl_name(name: str) -> str | None:
    for prefix in ("triton.language.", "tl."):
        if name.startswith(prefix):
            return name[len(prefix):]
    return None


def triton_gate_view(summary) -> GateView | None:
    """The file's Triton kernels as the model will find them (computed once per file, shared by
    the family's gates through ``summary.memo``); None when undecided (let the file through)."""
    if "triton" not in summary.memo:
        summary.memo["triton"] = _gate_view(summary)
    return summary.memo["triton"]


def _gate_view(summary) -> GateView | None:
    if summary.tree is None:
        return None
    # A decorator that resolves to triton.jit ends in jit (or autotune, heuristics), unless it is
    # a bare name imported under another one (``from triton import jit as tjit``).
    if not (any(f.decorators & KERNEL_NAMES for f in summary.functions)
            or summary.imports & TRITON_DECORATORS):
        return GateView({}, [])
    imports: dict[str, str] = {}
    defs: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    stack: list[ast.AST] = list(reversed(summary.tree.body))
    while stack:  # statements only, in source order: imports and defs are never expressions
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.update(import_bindings(node))
            continue
        kind = type(node)
        if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            defs.append(node)
        for name in reversed(_body_fields(kind)):  # the first field's first statement on top
            stack.extend(reversed(getattr(node, name)))
    functions = summary.functions
    if len(defs) != len(functions) or any(d.name != f.name for d, f in zip(defs, functions)):
        return None  # the summary's functions are these defs in the same order; if not, undecided
    view = GateView(imports, [])
    by_summary: dict[int, GateKernel] = {}
    for node, fs in zip(defs, functions):
        targets = [d.func if isinstance(d, ast.Call) else d for d in node.decorator_list]
        if any((view.qualname(t) or "") in TRITON_DECORATORS for t in targets):
            a = node.args
            params = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            constexprs = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)
                          if p.annotation is not None and not isinstance(p.annotation, ast.Constant)
                          and (view.qualname(p.annotation) or "").split(".")[-1] == "constexpr"}
            kernel = GateKernel(node, weakref.proxy(view), params, constexprs)  # no cycle: the view holds the kernels
            view.kernels.append(kernel)
            by_summary[id(fs)] = kernel
    if by_summary:
        for call, fs in summary.calls:
            kernel = by_summary.get(id(fs)) if fs is not None else None
            if kernel is not None:
                kernel.calls.append((call, view.tl_op(call)))
    return view
