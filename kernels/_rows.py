"""Pieces the row-wise kernels share: a program's tile of whole rows, and the residual add.

``@triton.jit`` helpers called from the kernels; Triton inlines them, so each kernel compiles to
what it did when the lines stood in its body. The RMSNorm, fused add+RMSNorm, their FP8 variants
and the movers that stand beside them all hold ``ROWS`` whole rows a program in one register tile
of ``BLOCK_N`` columns (the next power of two of the row width), masked on both edges.

Catalog: triton-cuda/int64-offsets, triton-cuda/masks-on-tail-blocks, triton-cuda/constexpr-block-sizes.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def row_tile(M, N, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's rows [ROWS, 1] (int64), the columns [1, BLOCK_N] and the mask of both edges."""
    # int64 row offsets: M * stride overflows int32 beyond 2^31 elements (16384 x 131072).
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    return rows, cols, mask


@triton.jit
def add_residual(x_ptr, r_ptr, w_ptr, rout_ptr, stride_xm, stride_rm, stride_rom, rows, cols, mask, N):
    """The residual add of the fused norms: the rows of x and of the residual read, the weight read
    in flight with them, and ``x + residual`` stored at ``rout_ptr`` rounded to its dtype. Returns
    the stored sum back in fp32 and the weight in fp32: the norm that follows sees exactly the
    residual the engines keep."""
    x = tl.load(x_ptr + rows * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + rows * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)  # in flight with x and r
    # Round the sum to the storage dtype first, so the norm sees exactly the stored residual.
    s = (x + r).to(rout_ptr.dtype.element_ty)
    tl.store(rout_ptr + rows * stride_rom + cols, s, mask=mask)
    return s.to(tl.float32), w

