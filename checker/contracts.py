"""Contracts: what a function demands of its parameters before it does its work.

A kernel wrapper states the inputs its kernel was written for as checks that stop the call:
``assert x.dtype == torch.bfloat16``, ``assert group_size in SUPPORTED_GROUP_SIZES``,
``if head_dim not in (64, 128): raise ValueError(...)``. A caller that picks the wrapper over a
fallback on a test that says nothing of those properties sends every other input into the check,
where it crashes instead of taking the fallback (``KC302``). The project index records each
function's demands here, over ``ast``, once per file, and carries them across modules through the
calls that pass a parameter on unchanged, so a rule sees what a call in its file will demand.

A demand is ``(parameter, property, line)``; the property is one of

- ``dtype``: the parameter's ``.dtype`` tested against dtype constants;
- ``layout``: ``is_contiguous()`` or a stride tested against a constant;
- ``shape``: its sizes (``.shape``, ``.size()``, ``.numel()``, ``len()``, or a local bound from
  them) tested against a literal other than 0 or 1, a literal collection, a module constant or
  a divisibility;
- ``value``: the parameter itself tested that way (``group_size in (32, 64, 128)``).

Checks that compare two inputs with each other only (``a.shape[1] == b.shape[0]``), that test for
``None`` or a type, that only rule out empty inputs (``n > 0``), or that state a rank (``x.dim() ==
2``: the function's API) are not demands of a kernel: every correct implementation makes them, the
fallback too.
"""

from __future__ import annotations

import ast

from kcheck.gate import dotted

Demand = tuple[str, str, int]  # (parameter, property, line)

_SIZE_ATTRS = frozenset({"shape"})
_SIZE_CALLS = frozenset({"size", "numel"})  # a rank (``ndim``, ``dim()``) is the API's contract, not the kernel's
# methods that keep a tensor's identity for a caller's argument (``x.reshape(-1, k)`` is still x's data)
KEEPS = frozenset({"reshape", "view", "flatten", "squeeze", "unsqueeze", "contiguous", "t", "transpose",
                   "permute", "to", "float", "half", "bfloat16", "expand", "clone", "detach"})


def demands(fn: ast.FunctionDef | ast.AsyncFunctionDef, constants: set[str]) -> tuple[Demand, ...]:
    """The demands of one function's own checks (``assert`` and ``if ...: raise``, outside nested
    functions and loops, in statement order), on its own parameters."""
    params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]} - {"self", "cls"}
    if not params:
        return ()
    sizes: dict[str, set[str]] = {}  # a local bound from parameters' sizes -> those parameters
    found: list[Demand] = []
    stack = list(reversed(fn.body))
    while stack:
        stmt = stack.pop()
        kind = type(stmt)
        if kind is ast.Assign or kind is ast.AnnAssign:
            value = stmt.value
            if value is None:
                continue
            roots = _size_roots(value, params, sizes)
            targets = stmt.targets if kind is ast.Assign else [stmt.target]
            for t in targets:
                for el in (t.elts if type(t) is ast.Tuple else [t]):
                    if type(el) is ast.Name:
                        if roots:
                            sizes[el.id] = roots
                        else:
                            sizes.pop(el.id, None)
                            params.discard(el.id)  # rebound: no longer the caller's value
        elif kind is ast.Assert:
            found.extend(_demands_of(stmt.test, params, sizes, constants, stmt.lineno))
        elif kind is ast.If:
            if stmt.body and type(stmt.body[0]) is ast.Raise:
                found.extend(_demands_of(stmt.test, params, sizes, constants, stmt.lineno))
            else:
                stack.extend(reversed([*stmt.body, *stmt.orelse]))
        elif kind in (ast.With, ast.AsyncWith, ast.Try):
            stack.extend(reversed(stmt.body))
    first: dict[tuple[str, str], int] = {}  # each (parameter, property) at its first check
    for param, prop, line in found:
        first.setdefault((param, prop), line)
    return tuple(sorted(((param, prop, line) for (param, prop), line in first.items()), key=lambda d: (d[2], d[0], d[1])))


def _size_roots(expr: ast.expr, params: set[str], sizes: dict[str, set[str]]) -> set[str]:
    """The parameters whose sizes ``expr`` is computed from, when it reads sizes only."""
    roots: set[str] = set()
    for node in ast.walk(expr):
        if type(node) is ast.Attribute and node.attr in _SIZE_ATTRS and type(node.value) is ast.Name \
                and node.value.id in params:
            roots.add(node.value.id)
        elif type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr in _SIZE_CALLS \
                and type(node.func.value) is ast.Name and node.func.value.id in params:
            roots.add(node.func.value.id)
        elif type(node) is ast.Name and node.id in sizes:
            roots |= sizes[node.id]
    return roots


def _demands_of(test: ast.expr, params: set[str], sizes: dict[str, set[str]], constants: set[str],
                line: int) -> list[Demand]:
    out: list[Demand] = []
    parts = test.values if type(test) is ast.BoolOp else [test]
    for part in parts:
        if type(part) is ast.UnaryOp and type(part.op) is ast.Not:
            part = part.operand
        if type(part) is ast.BoolOp:
            out.extend(_demands_of(part, params, sizes, constants, line))
            continue
        if type(part) is ast.Call:
            name = dotted(part.func) or ""
            if name.endswith(".is_contiguous") and name.count(".") == 1 and name.split(".")[0] in params:
                out.append((name.split(".")[0], "layout", line))
            continue
        if type(part) is not ast.Compare or any(type(op) in (ast.Is, ast.IsNot) for op in part.ops):
            continue
        sides = [part.left, *part.comparators]
        fixed = [s for s in sides if _constant(s, constants)]
        if not fixed or len(fixed) == len(sides):
            continue
        if all(_trivial(s) for s in fixed) and not any(type(s) is ast.BinOp and type(s.op) is ast.Mod
                                                       for s in sides):
            continue  # ``n > 0``, ``x.dim() == 1``: an emptiness check, not a divisibility
        for side in sides:
            if side in fixed:
                continue
            for param, prop in _read(side, params, sizes):
                out.append((param, prop, line))
    return out


def _read(expr: ast.expr, params: set[str], sizes: dict[str, set[str]]) -> set[tuple[str, str]]:
    """What of which parameters one side of a comparison reads; empty when it also reads anything
    else that varies (another input, a local), which makes it a consistency check, not a demand."""
    kind = type(expr)
    if kind is ast.Name:
        if expr.id in params:
            return {(expr.id, "value")}
        return {(p, "shape") for p in sizes.get(expr.id, ())}
    if kind is ast.Attribute and type(expr.value) is ast.Name and expr.value.id in params:
        if expr.attr == "dtype":
            return {(expr.value.id, "dtype")}
        if expr.attr in _SIZE_ATTRS:
            return {(expr.value.id, "shape")}
        return set()
    if kind is ast.Subscript:
        return _read(expr.value, params, sizes)
    if kind is ast.Call and type(expr.func) is ast.Attribute and type(expr.func.value) is ast.Name \
            and expr.func.value.id in params:
        if expr.func.attr == "stride":
            return {(expr.func.value.id, "layout")}
        if expr.func.attr in _SIZE_CALLS:
            return {(expr.func.value.id, "shape")}
        return set()
    if kind is ast.Call and type(expr.func) is ast.Name and expr.func.id == "len" and len(expr.args) == 1:
        got = _read(expr.args[0], params, sizes)
        return {(p, "shape") for p, _ in got}
    if kind is ast.BinOp and type(expr.op) is ast.Mod:
        by = expr.right  # a literal, a module constant, or an upper-case name (``K % BLOCK``, ``n % N``)
        return _read(expr.left, params, sizes) if _constant(by, set()) or type(by) is ast.Name and by.id.isupper() \
            else set()
    return set()


def _constant(expr: ast.expr, constants: set[str]) -> bool:
    """A literal, a collection of literals, a module constant (``SUPPORTED``, an ``UPPER`` name) or a
    dtype (``torch.bfloat16``)."""
    kind = type(expr)
    if kind is ast.Constant:
        return type(expr.value) in (int, float, str)
    if kind in (ast.Tuple, ast.List, ast.Set):
        return bool(expr.elts) and all(_constant(e, constants) for e in expr.elts)
    if kind is ast.Name:
        return expr.id in constants or expr.id.isupper() and len(expr.id) > 1
    if kind is ast.Attribute:
        text = dotted(expr) or ""
        return text.startswith(("torch.", "tl.")) and text.count(".") == 1 or expr.attr.isupper()
    if kind is ast.BinOp:
        return _constant(expr.left, constants) and _constant(expr.right, constants)
    return False


def _trivial(expr: ast.expr) -> bool:
    """0 or 1: an emptiness or a degenerate-size check, which any implementation makes."""
    return type(expr) is ast.Constant and expr.value in (0, 1)


# call heads that are never the project's own functions: torch and friends, builtins
_FOREIGN = frozenset({"torch", "F", "nn", "np", "numpy", "math", "triton", "tl", "os", "re", "json", "logger",
                      "logging", "warnings", "len", "isinstance", "getattr", "setattr", "hasattr", "print", "int",
                      "float", "bool", "str", "list", "tuple", "dict", "set", "range", "enumerate", "zip", "min",
                      "max", "sum", "any", "all", "sorted", "super", "type", "id", "repr", "iter", "next"})


def may_demand(call: str, params: tuple[str, ...]) -> bool:
    """Whether a call (dotted text as written) can be a project function whose contract matters:
    not a method of one of the caller's parameters (``x.view(...)``), nor torch's, a builtin's or
    another library's that the index never resolves (what ``FileFacts.forwards`` keeps)."""
    head = call.split(".", 1)[0]
    return head not in _FOREIGN and head not in params


def argument_root(expr: ast.expr) -> str | None:
    """The caller's name an argument passes on (``x``, ``self.w``), through methods that keep its
    data (``x.reshape(-1, k)``); None for anything computed."""
    while type(expr) is ast.Call and type(expr.func) is ast.Attribute and expr.func.attr in KEEPS:
        expr = expr.func.value
    text = dotted(expr) if type(expr) in (ast.Name, ast.Attribute) else None
    return text if text and text.count(".") <= 1 else None


def call_demands(files: dict, resolve) -> dict[str, tuple]:
    """File path -> ``(function, call text, ((position, keyword, property, where), ...))`` for each
    call with arguments whose callee, resolved across the project, demands something of them:
    ``position`` is the argument's place among the call's positional ones (-1: by keyword only),
    ``keyword`` the parameter's name, ``where`` the check (``path:line name``). A function's demands
    include those of the calls that pass one of its parameters on unchanged, two calls deep."""
    own: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
    for path, facts in files.items():
        for name, found in facts.demands.items():
            own[(path, name)] = {(param, prop, f"{path}:{line} {name}") for param, prop, line in found}
    for _ in range(2):  # what a parameter passed on meets in the callee
        grown = False
        for path, facts in files.items():
            for name, calls in facts.forwards.items():
                for text, positional, keywords in calls:
                    hit = resolve(path, name, text)
                    if hit is None or not own.get(hit):
                        continue
                    for param, prop, where in list(own[hit]):
                        root = _passed(files[hit[0]].params.get(hit[1], ()), hit[1], param, positional, keywords)
                        if root is not None and "." not in root:
                            mine = own.setdefault((path, name), set())
                            if (root, prop, where) not in mine:
                                mine.add((root, prop, where))
                                grown = True
        if not grown:
            break
    out: dict[str, list] = {}
    for path, facts in files.items():
        for name, passes in facts.passes.items():
            for text, _count, _keywords in passes:
                hit = resolve(path, name, text)
                if hit is None or not own.get(hit):
                    continue
                params = files[hit[0]].params.get(hit[1], ())
                offset = _bound(params, hit[1])
                wanted = []
                for param, prop, where in sorted(own[hit]):
                    index = next((j for j, p in enumerate(params) if p.lstrip("*") == param), None)
                    if index is None:
                        continue
                    position = index - offset if not params[index].startswith("*") and index >= offset else -1
                    wanted.append((position, param, prop, where))
                if wanted:
                    out.setdefault(path, []).append((name, text, tuple(wanted)))
    return {path: tuple(sorted(set(found))) for path, found in out.items()}


def _passed(params: tuple[str, ...], callee: str, param: str, positional: tuple, keywords: tuple) -> str | None:
    """The caller's parameter passed on to the callee's ``param`` (``FileFacts.forwards``), or None."""
    offset = _bound(params, callee)
    for kw, root in keywords:
        if kw == param:
            return root
    index = next((j for j, p in enumerate(params) if p == param), None)
    if index is None or index < offset:
        return None
    return next((root for position, root in positional if position == index - offset), None)


def _bound(params: tuple[str, ...], callee: str) -> int:
    """1 for a method whose first parameter the call binds (``self``, ``cls``), else 0."""
    return 1 if "." in callee and params[:1] in (("self",), ("cls",)) else 0
