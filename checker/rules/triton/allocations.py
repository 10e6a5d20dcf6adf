"""Unmasked accesses that stay inside whole allocations, for KC501: buffers the launcher sizes in
blocks (split partials, scratch, allocations rounded up to whole blocks), tiles a compile-time loop covers exactly, index lists padded
to whole blocks with a sentinel, accesses inside one page of a paged cache, and page-table reads
whose page ids reach only masked accesses. Each takes the kernel (``rules.triton.Kernel``), the
access and the offsets its names carry (``tainted``: name -> BLOCK bound); nothing is run.
"""

from __future__ import annotations

import re

import libcst as cst

from kcheck.rules.triton import block_bounds, is_load, names_in, nodes_under, reaches_only_masked, tl_op
from kcheck.rules.triton.launches import assigned_text, bound_args, code, launches

# Buffers sized by blocks, never by the data: split-K and split-KV partials, scratch, workspaces.
SCRATCH = re.compile(r"partial|scratch|workspace|tmp|_buf$|^(Mp|Lp|Op|Mid_O|Mid_LSE)$", re.IGNORECASE)
# Index lists and tables padded to whole blocks (MoE block alignment, paged-attention tables).
INDEX_LIST = re.compile(r"ids|idx|indices|sorted|slot|table|loc", re.IGNORECASE)


def scratch(pointer: cst.CSTNode, k) -> bool:
    """A scratch buffer the launcher allocates in whole blocks (``ts_partial_ptr``, ``Mp``,
    ``workspace``): split-K and split-KV partials are sized by the block, never by the data."""
    return any(SCRATCH.search(n) for n in _pointer_params(pointer, k))


# A size rounded up to a multiple: ``math.ceil(n / 128) * 128``, ``triton.cdiv(n, 64) * 64``,
# ``(n + 127) // 128 * 128``, ``(n + BLOCK_M - 1) // BLOCK_M * BLOCK_M``, ``n_blocks * 128`` of
# ``n_blocks = cdiv(n, 128)``, ``round_up(n, 128)``: the multiple, a literal or a name.
MULTIPLE = re.compile(r"(?:ceil\w*\([^()]*?(?:/|,)\s*\w+\s*\)|//\s*\w+\s*\)?|_blocks?\b)\s*\*\s*(\w+)"
                      r"|round_?up\w*\([^()]*,\s*(\w+)\s*\)", re.IGNORECASE)
FACTORY = re.compile(r"\b(empty|zeros|ones|full|empty_strided|new_empty|new_zeros)(_like)?\(")


def padded_allocation(model, pointer: cst.CSTNode, bound: str, k) -> bool:
    """Whether every launch of ``k`` passes, for the pointer this access goes through, a tensor its
    launching function allocates with a size rounded up to a multiple of the block the launch
    passes for ``bound`` (``seqlen_q_rounded = math.ceil(seqlen_q / 128) * 128`` with
    ``BLOCK_M=128``; directly or through one ``*_like`` of such a tensor): the last block's lanes land
    in the padding. A rounding to less than the block (to 32 under a block of 64), or a block the
    launch does not state (autotuned), is no such guarantee."""
    params = _pointer_params(pointer, k) & k.pointers(model)  # the tensors, not the sizes beside them
    found = False
    for call in launches(model, k):
        fn = model.enclosing_function(call)
        args = bound_args(call, list(k.params))
        passed = [v for name, v in args.items() if name in params]
        given = args.get(bound)
        block = _literal(fn, given) if fn is not None else None
        if fn is None or not passed or given is None:
            return False
        named = model.dotted(given)  # ``(n + BLOCK_M - 1) // BLOCK_M * BLOCK_M`` with ``BLOCK_M=BLOCK_M``
        for value in passed:
            text, names = code(value), {n.value for n in nodes_under(value) if type(n) is cst.Name}
            for _ in range(4):  # out = torch.empty_like(lse); lse = torch.empty((b, h, seqlen_q_rounded)); ...
                more_text, names = assigned_text(fn, names)
                text += more_text
            multiples = [m.group(1) or m.group(2) for m in MULTIPLE.finditer(text)]
            if not (FACTORY.search(text) and multiples and all(
                    m == named or m.isdigit() and block and int(m) % block == 0 for m in multiples)):
                return False
            found = True
    return found


def _literal(fn: cst.FunctionDef, value: cst.CSTNode | None) -> int | None:
    """An integer literal, or a name the function binds to one (``BLOCK = 128``)."""
    if type(value) is cst.Name:
        text, _ = assigned_text(fn, {value.value})
        text = text.strip()
        return int(text) if text.isdigit() else None
    return int(value.value) if type(value) is cst.Integer and value.value.isdigit() else None


def _pointer_params(pointer: cst.CSTNode, k) -> set[str]:
    """The kernel's parameters an address is built from, through the kernel's own assignments
    (``mp_ptrs = Mp + pid * BLOCK_M + ...``)."""
    names = names_in(pointer)
    for _ in range(2):
        for n in nodes_under(k.fn.body):
            if type(n) is cst.Assign and any(type(t.target) is cst.Name and t.target.value in names
                                                 for t in n.targets):
                names |= names_in(n.value)
    return names & set(k.params)


def static_tiles(model, call: cst.Call, pointer: cst.CSTNode, bound: str, k) -> bool:
    """``for t in tl.static_range(NUM_TILES): ptr + t * TILE + tl.arange(0, TILE)`` with both
    compile-time constants: the loop covers NUM_TILES whole tiles by construction."""
    for anc in model.ancestors(call):
        if anc is k.fn:
            return False
        if type(anc) is cst.For and type(anc.iter) is cst.Call and \
                tl_op(model, anc.iter) == "static_range" and type(anc.target) is cst.Name:
            extent = set().union(*(names_in(a.value) for a in anc.iter.args)) if anc.iter.args else set()
            if not extent <= k.constexprs:
                return False  # a runtime trip count: the tiles need not cover a whole row
            var = anc.target.value
            return any(type(n) is cst.BinaryOperation and type(n.operator) is cst.Multiply
                       and {getattr(n.left, "value", None), getattr(n.right, "value", None)} == {var, bound}
                       for n in nodes_under(pointer))
    return False


def padded_index_list(model, call: cst.Call, pointer: cst.CSTNode, k) -> bool:
    """A load of an index list (``sorted_token_ids``, ``ids``, ``slots``) whose values the kernel
    then compares (``ids < num_valid``, ``ids >= 0``): the list is padded to whole blocks with a
    sentinel, as MoE block alignment and paged-attention tables are."""
    if not INDEX_LIST.search(" ".join(names_in(pointer))):
        return False
    stmt = model.parent(call)
    while stmt is not None and type(stmt) not in (cst.Assign, cst.AnnAssign, cst.SimpleStatementLine):
        stmt = model.parent(stmt)
    if type(stmt) not in (cst.Assign, cst.AnnAssign):
        return False
    targets = [t.target for t in stmt.targets] if type(stmt) is cst.Assign else [stmt.target]
    loaded = {t.value for t in targets if type(t) is cst.Name}
    return any(type(n) is cst.Comparison and names_in(n) & loaded for n in nodes_under(k.fn.body))


def page_local(model, k, pointer: cst.CSTNode, tainted: dict[str, str], loaded: set[str], bare: set[str]) -> bool:
    """``cache + page * stride_page + tl.arange(0, BLOCK) * stride_pos`` with ``page`` read from
    a table (``page = tl.load(block_table + blk)``) and the block's offsets the bare arange, not
    shifted by a tile start: the access stays inside one page of a paged cache, and pages are
    allocated whole. The address may be a name the kernel assigns once to such a sum
    (``kc_ptrs = kc + page * stride + offs[:, None] * stride_s; tl.load(kc_ptrs)``). (A row
    base from a program id, ``row * n_cols + cols``, is no page: a row can be narrower than
    the block.)"""
    def paged(expr) -> bool:
        return any(type(n) is cst.BinaryOperation and type(n.operator) is cst.Multiply and any(
            (type(side) is cst.Name and side.value in loaded) or is_load(model, side)
            for side in (n.left, n.right)) for n in nodes_under(expr))

    exprs, seen = [pointer], set()
    for expr in exprs:
        for n in nodes_under(expr):
            if type(n) is not cst.Name or n.value not in tainted or n.value in bare | seen:
                continue
            values = k.values(n.value)
            if len(values) == 1 and paged(values[0]):
                seen.add(n.value)
                exprs.append(values[0])
                continue
            return False  # offsets shifted by a start (``pos = i + off_k``) can leave the page
    return any(paged(e) for e in exprs)


def page_table_lookup(model, call: cst.Call, pointer: cst.CSTNode, k, tainted: dict[str, str]) -> bool:
    """``page = tl.load(block_table + row + offs // PAGE_SIZE)``: a page table read one entry per
    page (the offsets divided down by the page size), whose values address only masked loads
    and stores. The lanes past the sequence read the padding of the table's row (sized for the
    longest sequence), and the page ids they get are never dereferenced unmasked."""
    if not INDEX_LIST.search(" ".join(names_in(pointer) & set(k.params))):
        return False
    exprs, seen = [pointer], set()
    for expr in exprs:  # the pointer and the values of the offset names it reads (l_blk = offs // PAGE)
        for n in names_in(expr) & set(tainted) - seen:
            seen.add(n)
            exprs.extend(k.values(n))
    if not any(type(n) is cst.BinaryOperation and type(n.operator) is cst.FloorDivide
               and set(block_bounds(model, n.left, tainted)) for e in exprs for n in nodes_under(e)):
        return False
    stmt = model.parent(call)
    while stmt is not None and type(stmt) not in (cst.Assign, cst.SimpleStatementLine):
        stmt = model.parent(stmt)
    if type(stmt) is not cst.Assign or not all(type(t.target) is cst.Name for t in stmt.targets):
        return False
    return reaches_only_masked(model, k, {t.target.value for t in stmt.targets}, call, depth=2)
