from __future__ import annotations

import re

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.triton import (
    TRITON_TEXT, arg, assignments, block_bounds, cast_source, compile_time_branch, innermost_loop, is_load, is_none,
    kernels, nodes_under, runtime_value, tl_op,
)
from kcheck.rules.triton.allocations import (
    padded_allocation, page_local, page_table_lookup, padded_index_list, scratch, static_tiles,
)
from kcheck.rules.triton.launches import code, divisors, launched_ragged, launches, passed_literals, passed_values

# A kernel whose name or docstring states the no-mask precondition (the launcher guarantees it).
DECLARED_EXACT = re.compile(r"no[ _-]?(column[ _-])?mask|unmasked|nomask|\beven\b|divisib|multiple of", re.IGNORECASE)


class UnmaskedTailAccess(Rule):
    """A `tl.load` or `tl.store` over a blocked dimension with no mask.

    ## What it does
    Inside a `@triton.jit` function, finds `tl.load`/`tl.store` calls whose pointer is built from
    `tl.arange(0, BLOCK...)` offsets (directly or through assigned names) and that pass no `mask`
    and no `boundary_check`, where the file shows that the size along that block is not a whole
    number of blocks: the same kernel compares offsets of that block with a runtime size
    (`mask = offs < n` used on another access, `tl.where(cols < N, ...)`: the unmasked access is
    inconsistent with it), or a launch in the module passes the block as
    `triton.next_power_of_2(n)` or divides a runtime size by it in the grid (`triton.cdiv(n, BLOCK)`;
    also `n // BLOCK` when the module never checks `n % BLOCK`: the grid drops the partial last
    block, and the access would run past the end on a rounded-up grid). A grid passed by name is
    read through what the launching function assigns to it (`grid = (n // BLOCK,)`), and a grid name
    that is a parameter of the launching function through what its callers pass (`launch(x, n // BLOCK)`).
    Inside a loop, the comparison must be in the same loop: a loop over full blocks whose
    ragged tail is peeled off and masked outside it (`full_end = start + n // BLOCK * BLOCK`)
    is whole. Without such evidence an unmasked access is taken to rely on a launcher guarantee (whole tiles
    of a head dimension, loops over full blocks only, buffers sized in blocks) and is not reported. A bound whose name contains `BLOCK`, `TILE` or `CHUNK` marks a
    blocked dimension that can have a partial last block (names follow their latest
    assignment, and values read by `tl.load` are data, not offsets); one named for a model dimension taken
    whole (`BLOCK_DMODEL`, `BLOCK_HEADDIM`, `BLOCK_DPE`, `BLOCK_ROPE`, `BLOCK_D`) does not. Offsets that were wrapped (`offs % N`)
    or clamped (`tl.minimum`, `tl.where`) are safe, and so is an access inside an
    `if EVEN_K:`-style branch on a `tl.constexpr` parameter, or in a kernel whose name or
    docstring states the precondition ("no mask", "even", "divisible", "multiple of"): an
    unmasked fast path the launcher chose on purpose. Two more launcher guarantees are
    recognised: a block parameter that every launch in the module passes a value the module
    checks divisibility by (`BLOCK_H=_BLOCK_H` beside `if H % _BLOCK_H != 0: <fallback>`, also by
    value: `BLOCK_N=BN` with `BM, BN = 32, 128` beside `PRE = 128; assert n % PRE == 0`); a grid
    over a size named for a problem size the module states at its top level (`cdiv(N, BLOCK_N)`
    beside `N = 12288`, a benchmark's stated shape) with a literal block width that divides it; and a
    load of an index list (`sorted_token_ids`, `ids`, `slots`) whose values the kernel then
    compares to a sentinel (`ids < num_valid`): such lists are padded to whole blocks. And a
    kernel launched on one program per row (no ceil-division in the grid) with a fixed block
    (a literal or a module constant) that addresses `row * BLOCK + tl.arange(0, BLOCK)` reads
    rows exactly BLOCK wide. Scratch buffers the launcher allocates in whole blocks (a pointer
    parameter named `*partial*`, `scratch`, `workspace`, `Mp`), buffers every launch in the module
    passes from an allocation rounded up to a multiple of the block the launch states
    (`torch.empty((b, h, seqlen_q_rounded))` with `seqlen_q_rounded = math.ceil(seqlen_q / 128) *
    128` and `BLOCK_M=128`, `(n + BLOCK_M - 1) // BLOCK_M * BLOCK_M`; also through one `empty_like`
    of such a tensor; not a rounding to 32 under a block of 64, nor an autotuned block) and tiles addressed as
    `t * TILE + tl.arange(0, TILE)` in a `tl.static_range(NUM_TILES)` loop over compile-time
    constants are whole too. So are two paged-cache accesses: a read inside one cache page whose
    id the kernel loaded from a table (`cache + page * stride_page + tl.arange(0, BLOCK) * stride_pos`,
    the block's offsets not shifted by a tile start), since pages are allocated whole; and a
    page-table lookup one entry per page (`tl.load(block_table + offs // PAGE_SIZE)`) whose page
    ids, and every address computed from them here or in the module's jit helpers they are passed
    to, reach only masked loads and stores: the lanes past the sequence read the padding of the
    table's row and their ids are never dereferenced. A block parameter the launches pass by
    position counts for the divisibility check as one passed by keyword.

    ## Why is this bad?
    When the size is not a multiple of the block (4,097 tokens, a hidden size of 5,120 under a
    block of 8,192), the lanes of the last block run past the end of the tensor. A load reads
    another tensor's memory, which usually does not crash and turns into plausible but wrong
    output; a store corrupts a neighbour. Tests on round shapes never see it.

    ## Example
    ```python
    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        tl.store(out_ptr + offs, x * 2)
    ```

    ## Use instead
    ```python
    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, x * 2, mask=mask)
    ```
    """

    CODE = "KC501"
    NAME = "unmasked-tail-access"
    MESSAGE = ("tl.{op}() with offsets from tl.arange(0, {bound}) and no mask: the last block {what} past the end "
               "when the size is not a multiple of {bound}")
    SEVERITY = "error"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("triton-cuda/masks-on-tail-blocks",)
    VALID = [
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, y_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * BLOCK_SIZE + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * BLOCK_SIZE + cols, x, mask=mask)
""",
        """
import triton
import triton.language as tl
@triton.jit
def mm(a_ptr, M, K, stride_am, stride_ak, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    offs_m = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_k = tl.arange(0, BLOCK_K)
    ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    if EVEN_K:
        a = tl.load(ptrs)
    else:
        a = tl.load(ptrs, mask=offs_k[None, :] < K, other=0.0)
""",
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, M, N, BLOCK: tl.constexpr, EVEN: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    even = EVEN and ROWS == 1
    if even:
        x = tl.load(x_ptr + rows * N + cols)
    else:
        x = tl.load(x_ptr + rows * N + cols, mask=(rows < M) & (cols < N), other=0.0)
""",
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    p = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (0, 0), (BLOCK_M, BLOCK_N), (1, 0))
    x = tl.load(p, boundary_check=(0, 1))
    d = tl.arange(0, HEAD_DIM)
""",
    ]
    INVALID = [
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, y_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * n_cols + cols)
    tl.store(y_ptr + row * n_cols + cols, x, mask=cols < n_cols)
""",
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, y_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    full = n_cols == BLOCK_SIZE
    if full:
        x = tl.load(x_ptr + tl.program_id(0) * n_cols + cols)
        tl.store(y_ptr + cols, x, mask=cols < n_cols)
""",
        """
import triton
import triton.language as language
from triton import jit
@jit
def k(out_ptr, val, N, BLOCK: language.constexpr):
    offs = language.program_id(0) * BLOCK + language.arange(0, BLOCK)
    ptrs = out_ptr + offs
    language.store(ptrs, val)
def fill(out, val, n):
    k[(triton.cdiv(n, 256),)](out, val, n, BLOCK=256)
""",
    ]
    PREFILTER = (TRITON_TEXT, r"arange")
    NEEDS = ("triton kernel",)

    def leave_Module(self, original_node: cst.Module) -> None:
        # names and literals the module checks divisibility by (``H % _BLOCK_H != 0`` ahead of a
        # fallback, ``assert n % BLOCK == 0``): the launcher guarantees whole blocks of them
        self._divisors = divisors(self.model, original_node)
        for k in kernels(self.model):
            doc = k.fn.get_docstring() or ""
            if not (DECLARED_EXACT.search(doc) or DECLARED_EXACT.search(k.name)):
                self._exact = self._checked_bounds(k)
                # blocks a launch rounds up from a size, and those whose grid floor-divides the size
                self._ragged, self._dropped = launched_ragged(self.model, k, self._divisors)
                self._report = False
                self._ragged_in: dict[str, set] = {}  # bound -> innermost loops holding a ragged comparison
                self._check(k)  # first pass: which bounds the kernel itself treats as ragged
                self._report = True
                self._check(k)

    def _note_ragged(self, node: cst.CSTNode, k, tainted: dict[str, str]) -> None:
        """``offs < n`` with offs carrying a BLOCK bound and n a runtime value: the kernel itself
        says the dimension is not a whole number of blocks."""
        for cmp in nodes_under(node):
            if not (type(cmp) is cst.Comparison and len(cmp.comparisons) == 1):
                continue
            right = cmp.comparisons[0].comparator
            if type(cmp.comparisons[0].operator) not in (cst.LessThan, cst.LessThanEqual, cst.GreaterThan,
                                                             cst.GreaterThanEqual):
                continue
            for a, b in ((cmp.left, right), (right, cmp.left)):
                bounds = self._bounds(a, tainted)
                if bounds and runtime_value(b, k):
                    loop = innermost_loop(self.model, cmp, k)
                    for bound in bounds:
                        self._ragged_in.setdefault(bound, set()).add(loop)

    def _checked_bounds(self, k) -> set[str]:
        """The kernel's block parameters that every launch in the module passes a value whose
        divisibility the module checks (``BLOCK_H=_BLOCK_H`` beside ``if H % _BLOCK_H != 0:``)."""
        count, passed = passed_values(self.model, k)
        self._row_blocks = {name for name, values in passed.items() if count and self._whole_rows(k, values)}
        literals = passed_literals(self.model, k)  # ``BLOCK_N1 = 128`` beside ``assert n % PRE_BLOCK == 0``
        return {name for name, values in passed.items()
                if count and len(values) == 1 and None not in values and values <= self._divisors} | {
            name for name, values in literals.items() if count and None not in values and values <= self._divisors}

    def _whole_rows(self, k, values) -> bool:
        """Every launch gives the block a fixed size (a literal or a module constant) on a grid of
        one program per row (no ceil-division in it): ``row * BLOCK + tl.arange(0, BLOCK)`` then
        addresses rows exactly BLOCK wide, as in a kernel over a [tokens, 128] buffer."""
        if not values or not all(isinstance(v, str) and (v.isdigit() or v.isupper() or v.lstrip("_").isupper())
                                 for v in values):
            return False
        return not any(re.search(r"cdiv|//|ceil|\+.*-\s*1|lambda|grid", code(call.func.slice[0].slice))
                       for call in launches(self.model, k) if call.func.slice)

    def _bounds(self, expr: cst.CSTNode, tainted: dict[str, str]) -> set[str]:
        return set(block_bounds(self.model, expr, tainted))

    def _bound(self, expr: cst.CSTNode, tainted: dict[str, str]) -> str | None:
        return next(block_bounds(self.model, expr, tainted), None)

    def _check(self, k) -> None:
        """One pass in source order: the offsets a name carries are those of its latest assignment."""
        tainted: dict[str, str] = {}  # name -> the BLOCK bound its offsets come from
        self._bare: set[str] = set()  # names whose latest value is a bare ``tl.arange(0, BLOCK)``
        self._loaded: set[str] = set()  # names whose latest value is read by ``tl.load`` (page ids)
        for node in nodes_under(k.fn.body):
            if type(node) is not cst.SimpleStatementLine:
                continue
            if not self._report:
                self._note_ragged(node, k, tainted)
            for sub in nodes_under(node):
                if self._report and type(sub) is cst.Call and tl_op(self.model, sub) in ("load", "store"):
                    self._access(sub, k, tainted)
            for name, stmt in assignments(node):
                fresh = type(stmt) is not cst.AugAssign
                # ``page = tl.load(table + i)``, then ``page = page.to(tl.int64)``: widened, still a page id
                loaded = fresh and (is_load(self.model, stmt.value)
                                    or cast_source(self.model, stmt.value) in self._loaded)
                self._bare.discard(name)
                self._loaded.discard(name)
                if fresh and tl_op(self.model, stmt.value) == "arange":
                    self._bare.add(name)
                if loaded:
                    self._loaded.add(name)
                bound = self._bound(stmt.value, tainted)
                if bound is not None:
                    tainted[name] = bound
                elif type(stmt) is not cst.AugAssign:
                    tainted.pop(name, None)

    def _access(self, call: cst.Call, k, tainted: dict[str, str]) -> None:
        op = tl_op(self.model, call)
        mask = arg(call, 1 if op == "load" else 2, "mask")
        if (mask is not None and not is_none(mask)) or arg(call, 99, "boundary_check") is not None:
            return
        pointer = arg(call, 0, "pointer")
        bound = self._bound(pointer, tainted) if pointer is not None else None
        if bound in self._exact or (op == "load" and (padded_index_list(self.model, call, pointer, k)
                                                      or page_table_lookup(self.model, call, pointer, k, tainted))):
            return
        if bound is not None and page_local(self.model, k, pointer, tainted, self._loaded, self._bare):
            return
        if bound is not None and (scratch(pointer, k) or static_tiles(self.model, call, pointer, bound, k)
                                  or padded_allocation(self.model, pointer, bound, k)):
            return
        if bound in self._row_blocks and any(
                type(n) is cst.BinaryOperation and type(n.operator) is cst.Multiply
                and bound in {getattr(n.left, "value", None), getattr(n.right, "value", None)}
                for n in nodes_under(pointer)):
            return  # row * BLOCK + tl.arange(0, BLOCK) on a one-program-per-row grid
        if bound is not None:
            # only where the kernel or its launch shows the size is not a whole number of blocks
            loop = innermost_loop(self.model, call, k)
            bound = next((b for b in sorted(self._bounds(pointer, tainted))
                          if b in self._ragged or (loop is None and b in self._ragged_in)
                          or loop in self._ragged_in.get(b, ())), None)
        if bound is not None and not compile_time_branch(self.model, call, k):
            what = "reads" if op == "load" else "writes"
            if bound in self._dropped:
                what = f"is never launched (the grid floor-divides the size) and, launched, {what}"
            self.report(call, op=op, bound=bound, what=what)


