"""What a module's launches say about a kernel (``kernel[grid](args...)``): the argument each
launch gives each parameter, the names in those arguments, and the source of the grid with what
the launching function (and its same-module callers) assign to the grid's names.

Shared by the KC5xx rules that weigh sizes: KC501 (is the last block ragged, or dropped?) and
KC502 (what tensor does a program-id product address?). Read from source only; nothing here runs.
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from kcheck.rules.triton import names_in, nodes_under
from kcheck.triton_values import param_arg


def code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def launches(model, k) -> Iterator[cst.Call]:
    """Each ``k[grid](...)`` call in the module, in the model's order of launch sites."""
    for site in model.launch_sites.values():
        func = site.call.func
        if type(func) is cst.Subscript and model.dotted(func.value) == k.name:
            yield site.call


def bound_args(call: cst.Call, params: list[str]) -> dict[str, cst.BaseExpression]:
    """The argument a launch gives each parameter: positional ones in order up to a ``*args``
    (the positions after it are unknown), keyword ones by name (``**kwargs`` gives nothing)."""
    out: dict[str, cst.BaseExpression] = {}
    position, starred = 0, False
    for a in call.args:
        if a.star:
            starred = starred or a.star == "*"
            continue
        if a.keyword is not None:
            out[a.keyword.value] = a.value
        elif not starred and position < len(params):
            out[params[position]] = a.value
            position += 1
    return out


def launch_words(model, k) -> dict[str, set[str]]:
    """For each kernel parameter, the names in what the module's launches pass for it
    (``logits.stride(0)`` gives ``logits`` and ``stride``)."""
    out: dict[str, set[str]] = {}
    for call in launches(model, k):
        for name, value in bound_args(call, list(k.params)).items():
            out.setdefault(name, set()).update(names_in(value))
    return out


def passed_values(model, k) -> tuple[int, dict[str, set[str | None]]]:
    """The number of launches, and for each parameter what they pass as a dotted name or a literal
    (None for anything else: ``BLOCK_H=_BLOCK_H`` gives ``_BLOCK_H``, ``BLOCK=64`` gives ``64``)."""
    count, passed = 0, {}
    for call in launches(model, k):
        count += 1
        for name, value in bound_args(call, list(k.params)).items():
            passed.setdefault(name, set()).add(model.dotted(value) or getattr(value, "value", None))
    return count, passed


def grid_text(model, call: cst.Call) -> str:
    """The source of a launch's grid, followed by what the launching function assigns to the
    names in it (``grid = (n // BLOCK,)``, then ``k[grid](...)``), and by what its same-module
    callers pass for those of its parameters the grid reads (``def launch(x, n_blocks):
    k[(n_blocks,)](...)`` called as ``launch(x, x.numel() // BLOCK)``), with what the callers
    assign to the names in that."""
    if not call.func.slice:
        return ""
    grid = call.func.slice[0].slice
    text = code(grid)
    fn = model.enclosing_function(call)
    names = {n.value for n in nodes_under(grid) if type(n) is cst.Name}
    if fn is None or not names:
        return text
    extra, more = assigned_text(fn, names)
    text += extra
    ps = fn.params
    params = {p.name.value for p in [*ps.posonly_params, *ps.params, *ps.kwonly_params]}
    for name in (names | more) & params:
        for caller in model.callers(fn):
            value = param_arg(caller, fn, name)
            if value is None:
                continue
            text += " " + code(value)
            outer = model.enclosing_function(caller)
            if outer is not None:  # ``n_blocks = x.numel() // BLOCK; launch(x, n_blocks)``
                text += assigned_text(outer, {n.value for n in nodes_under(value) if type(n) is cst.Name})[0]
    return text


def assigned_text(fn: cst.FunctionDef, names: set[str]) -> tuple[str, set[str]]:
    """The source of what ``fn`` assigns to ``names``, and the names those values read."""
    text, read = "", set()
    for node in nodes_under(fn.body):
        if type(node) is cst.Assign and any(type(t.target) is cst.Name and t.target.value in names
                                             for t in node.targets):
            text += " " + code(node.value)
            read |= {n.value for n in nodes_under(node.value) if type(n) is cst.Name}
    return text, read


def divisors(model, module: cst.Module) -> set[str | None]:
    """What the module checks divisibility by (``H % _BLOCK_H != 0`` ahead of a fallback, ``assert
    n % BLOCK == 0``), as dotted names and literals; and the names the module binds to such a
    divisor (``bm, bn = cfg["bm"], cfg["bn"]`` beside ``I % cfg["bn"] == 0``): a launch passing
    one of them gets whole blocks of it."""
    moduli = [n.right for n in nodes_under(module, nested=True)
              if type(n) is cst.BinaryOperation and type(n.operator) is cst.Modulo]
    out = {model.dotted(m) or getattr(m, "value", None) for m in moduli}
    # ``PRE_BLOCK = 128; assert N_CTX % PRE_BLOCK == 0``: the module checks divisibility by 128
    out |= {literal(model, m) for m in moduli if type(m) is cst.Name} - {None}
    texts = {_norm(code(m)) for m in moduli if model.dotted(m) is None}
    if not texts:
        return out
    for node in nodes_under(module, nested=True):
        if type(node) is not cst.Assign:
            continue
        for t in node.targets:
            pairs = [(t.target, node.value)]
            if type(t.target) in (cst.Tuple, cst.List) and type(node.value) in (cst.Tuple, cst.List) \
                    and len(t.target.elements) == len(node.value.elements):
                pairs = [(a.value, b.value) for a, b in zip(t.target.elements, node.value.elements)]
            out |= {target.value for target, value in pairs
                    if type(target) is cst.Name and _norm(code(value)) in texts}
    return out


def literal(model, name: cst.Name) -> str | None:
    """The integer literal a name holds where it is read: every assignment to it in the enclosing
    function (or, outside one, the module) binds the same integer (``BLOCK = 128``, also by
    unpacking ``BM, BN = 32, 128`` or in several branches); None otherwise."""
    scope = model.enclosing_function(name) or model.module
    if scope is None:
        return None
    found: set[str | None] = set()
    for node in nodes_under(scope.body if type(scope) is cst.FunctionDef else scope):
        if type(node) is not cst.Assign:
            continue
        for t in node.targets:
            pairs = [(t.target, node.value)]
            if type(t.target) in (cst.Tuple, cst.List):
                values = node.value.elements if type(node.value) in (cst.Tuple, cst.List) else ()
                if len(values) != len(t.target.elements):
                    values = [None] * len(t.target.elements)
                pairs = [(a.value, getattr(b, "value", None)) for a, b in zip(t.target.elements, values)]
            for target, value in pairs:
                if type(target) is cst.Name and target.value == name.value:
                    found.add(value.value if type(value) is cst.Integer else None)
        if len(found) > 1:
            return None
    return next(iter(found)) if len(found) == 1 else None


def passed_literals(model, k) -> dict[str, set[str | None]]:
    """For each parameter, the integer literal each launch passes, directly (``BLOCK=128``) or
    through a name the launching function binds to one (``BLOCK_N1 = 128``); None for others."""
    passed: dict[str, set[str | None]] = {}
    for call in launches(model, k):
        for name, value in bound_args(call, list(k.params)).items():
            found = value.value if type(value) is cst.Integer else \
                literal(model, value) if type(value) is cst.Name else None
            passed.setdefault(name, set()).add(found)
    return passed


def module_constants(model) -> dict[str, int]:
    """Integer constants the module binds once at its top level (``N = 12288``): a benchmark
    problem's stated sizes, which its ``get_inputs`` builds the tensors from."""
    found = model.__dict__.get("_int_constants")
    if found is None:
        seen: dict[str, list] = {}
        for stmt in model.module.body if model.module is not None else ():
            if type(stmt) is not cst.SimpleStatementLine:
                continue
            for small in stmt.body:
                if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name:
                    v = small.value
                    seen.setdefault(small.targets[0].target.value, []).append(
                        int(v.value) if type(v) is cst.Integer and v.value.isdigit() else None)
        found = model.__dict__["_int_constants"] = {k: v[0] for k, v in seen.items() if len(v) == 1 and v[0]}
    return found


def _fixed_multiple(model, grid: str, block: cst.BaseExpression) -> bool:
    """The grid divides a size named for one of the module's stated problem sizes (``cdiv(N,
    BLOCK_N)`` or ``N // BLOCK_N`` beside a top-level ``N = 12288``) by a block whose literal value
    (``BLOCK_N = 128`` in the launcher) divides that size: the stated problem has whole blocks."""
    width = block.value if type(block) is cst.Integer else literal(model, block) if type(block) is cst.Name else None
    if width is None or not width.isdigit() or int(width) == 0:
        return False
    constants = module_constants(model)
    value = re.escape(code(block))
    sizes = re.findall(r"cdiv\(\s*(\w+)\s*,\s*%s\s*\)|(\w+)\s*//\s*%s\b" % (value, value), grid)
    names = [a or b for a, b in sizes]
    return bool(names) and all(n in constants and constants[n] % int(width) == 0 for n in names)


def _norm(text: str) -> str:
    return text.replace("'", '"').replace(" ", "")


def launched_ragged(model, k, checked: set) -> tuple[set[str], set[str]]:
    """The block parameters a launch in the module rounds up from a size (passed as
    ``triton.next_power_of_2(n)``, or divided into a runtime size by a ``cdiv`` in the grid), and
    among them those the grid floor-divides a size by (``size // BLOCK`` programs, with no check
    of the size against a divisor in ``checked``: the tail block is dropped)."""
    ragged: set[str] = set()
    dropped: set[str] = set()
    for call in launches(model, k):
        grid = grid_text(model, call)
        for a in call.args:
            if a.keyword is None:
                continue
            kw = a.keyword.value
            value = code(a.value)
            dotted_value = model.dotted(a.value) or value
            if _fixed_multiple(model, grid, a.value):
                continue  # the module's stated problem size is a whole number of these blocks
            for m in re.finditer(r"([\w.()\[\]]+)\s*//\s*([\w.]+)", grid):
                if m.group(2) == value and not m.group(1).isdigit() and dotted_value not in checked:
                    ragged.add(kw)
                    dropped.add(kw)
            if type(a.value) is cst.Call and (model.dotted(a.value.func) or "").endswith("next_power_of_2") \
                    and not all(type(x.value) is cst.Integer for x in a.value.args):
                ragged.add(kw)
            for m in re.finditer(r"cdiv\(([^,()]+(?:\([^()]*\))?[^,()]*),\s*([^()]+?)\s*\)", grid):
                if m.group(2) == value or re.fullmatch(r"\w+\[['\"]%s['\"]\]" % re.escape(kw), m.group(2)):
                    if not m.group(1).strip().isdigit():
                        ragged.add(kw)
    return ragged, dropped
