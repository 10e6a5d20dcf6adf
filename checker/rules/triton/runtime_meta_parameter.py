from __future__ import annotations

import re

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.triton import (
    META_PARAM, TRITON_TEXT, arg, kernels, nodes_under, tl_op,
)

# The arguments of these triton.language calls must be compile-time values: (position, keyword).
SHAPE_OPS = {
    "arange": ((0, "start"), (1, "end")), "zeros": ((0, "shape"),), "full": ((0, "shape"),),
    "reshape": ((1, "shape"),), "view": ((1, "shape"),), "broadcast_to": ((1, "shape"),),
    "static_range": ((0, "arg1"), (1, "arg2"), (2, "arg3")),
}


class RuntimeMetaParameter(Rule):
    """A block size or `num_warps` taken as a plain runtime argument instead of a `tl.constexpr`.

    ## What it does
    Finds parameters of a `@triton.jit` function that are not annotated `tl.constexpr` but are
    either named like a meta-parameter (`BLOCK`, `BLOCK_SIZE_M`, `TILE_N`, `GROUP_SIZE_M`,
    `num_warps`, `num_stages`) or used where Triton needs a compile-time value (the bounds of
    `tl.arange`, the shape of `tl.zeros`/`tl.full`/`tl.reshape`, `tl.static_range`). A
    `@triton.jit` helper called from another kernel in the module is left alone: its arguments
    are compile-time values whenever its callers pass compile-time values. Counts of blocks
    (`NUM_BLOCK`, `N_TILES`: a loop bound) are not block sizes, a parameter the kernel loads or
    stores through (`tl.load(BLOCK_TABLE + pid * stride)`: a paged cache's block table) is a
    tensor whatever its name, and `len(buffers)` of a tuple argument is static (Triton
    specialises on a tuple's length).

    ## Why is this bad?
    A block size the compiler does not know cannot size registers or unroll loops: used as a
    shape it fails to compile on the first launch, and used only in arithmetic it silently costs
    the specialisation (every offset becomes a runtime multiply). `num_warps` and `num_stages`
    are launch options; declared as a kernel argument they are only a number the kernel reads,
    and the launch does not use the value the author meant.

    ## Example
    ```python
    @triton.jit
    def add_kernel(x_ptr, y_ptr, n, BLOCK_SIZE):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    ```

    ## Use instead
    ```python
    @triton.jit
    def add_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    ```
    """

    CODE = "KC504"
    NAME = "runtime-meta-parameter"
    MESSAGE = "{param} of {kernel}() is {why} but is not a tl.constexpr: annotate it `{param}: tl.constexpr`"
    SEVERITY = "error"
    PREVIEW = True  # below the bar on the test split of 2026-12-06 (2 of 7): benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("triton-cuda/constexpr-block-sizes",)
    VALID = [
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, n, block_size, BLOCK_SIZE: tl.constexpr, num_warps_hint: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    page = offs // block_size
""",
        """
import triton
@triton.jit
def k(x_ptr, BLOCK: "tl.constexpr"):
    pass
def launch(BLOCK_SIZE):
    return BLOCK_SIZE
""",
        """
import triton
import triton.language as tl
@triton.jit
def paged(out_ptr, BLOCK_TABLE, stride_bt, PAGE: tl.constexpr):
    row = BLOCK_TABLE + tl.program_id(0) * stride_bt
    page = tl.load(row + tl.arange(0, PAGE))
    tl.store(out_ptr + tl.arange(0, PAGE), page)
""",
    ]
    INVALID = [
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, n, BLOCK_SIZE):
    offs = tl.program_id(0) * BLOCK_SIZE
""",
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, n, width):
    offs = tl.arange(0, width)
""",
        """
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr, num_warps):
    offs = tl.arange(0, BLOCK)
""",
    ]
    PREFILTER = (TRITON_TEXT,)
    NEEDS = ("triton kernel",)

    def leave_Module(self, original_node: cst.Module) -> None:
        all_kernels = kernels(self.model)
        helpers = {c.func.value for k in all_kernels for c in nodes_under(k.fn.body)
                   if type(c) is cst.Call and type(c.func) is cst.Name}
        for k in all_kernels:
            if k.name in helpers or k.name in self.model.config.called_plainly:
                continue  # an inlined helper (here or in another module's kernel): its arguments are
                # constexpr when its callers pass constexprs
            runtime = k.runtime_params() - k.pointers(self.model)
            shaped: set[str] = set()
            for node in nodes_under(k.fn.body):
                op = tl_op(self.model, node) if type(node) is cst.Call else None
                if op in SHAPE_OPS:
                    for index, keyword in SHAPE_OPS[op]:
                        a = arg(node, index, keyword)
                        if a is not None:
                            shaped |= _bare_names(a) & runtime
            for name in sorted(runtime):
                if name in shaped:
                    why = "used as a shape or tl.arange bound"
                elif META_PARAM.search(name) and not COUNT.match(name):
                    why = "a launch option" if name.startswith("num_") else "a block size"
                else:
                    continue
                self.report(k.params[name], param=name, kernel=k.name, why=why)


def _bare_names(node: cst.CSTNode) -> set[str]:
    """Names used as values: in ``x.shape`` the shape of a tensor is read, which is static already,
    and so is ``len(buffers)`` of a tuple argument (Triton specialises on a tuple's length)."""
    bases = {id(n.value) for n in nodes_under(node) if type(n) is cst.Attribute}
    bases |= {id(a.value) for n in nodes_under(node)
              if type(n) is cst.Call and type(n.func) is cst.Name and n.func.value == "len" for a in n.args}
    return {n.value for n in nodes_under(node) if type(n) is cst.Name and id(n) not in bases}


# A count of blocks (NUM_BLOCK, N_BLOCKS, NUM_TILES) is a loop bound, not a block size.
COUNT = re.compile(r"^(NUM|N)_(?!warps$|stages$)", re.IGNORECASE)
