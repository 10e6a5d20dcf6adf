"""Movers for the fused FP8 ops: the bytes of each op, in its pattern, without its arithmetic.

Each is a plain Triton copy-and-convert on the same grid as the op it stands beside: one program
for ``ROWS`` whole rows, the bf16 (or fp16) input read once, the weight read where the op reads
one, the row written as e4m3 (a plain conversion: no norm, no maximum, no division) and one fp32
value a row written where the op writes its scale. Autotuned over the op's own candidates. The
benchmark times them as the ceiling a fused op is held to (``other_peers`` "mover": timed, never
taken as a peer, since they compute nothing useful). They never run in verification.

Catalog: measuring/achievable-bandwidth, triton-cuda/int64-offsets, triton-cuda/masks-on-tail-blocks,
triton-cuda/constexpr-block-sizes, triton-cuda/autotune-keys.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kcheck.kernels._launch import ROWS_PINS, ROW_CANDIDATES, row_grid, token_bucket, tuning
from kcheck.kernels._rows import row_tile
from kcheck.kernels.silu_and_mul_fp8_quant import GATED_CANDIDATES, GATED_PINS


@triton.jit
def _one_per_row(s_ptr, rows, M, ROWS: tl.constexpr, SCALES: tl.constexpr):
    """Where the op writes its scales: one fp32 value a row (when ``SCALES``)."""
    if SCALES:
        tl.store(s_ptr + rows, tl.full((ROWS, 1), 1.0, tl.float32), mask=rows < M)


@triton.autotune(**tuning(ROW_CANDIDATES, ROWS_PINS), key=["N", "token_bucket", "SCALES"])
@triton.jit
def _row_mover_kernel(
    x_ptr,  # [M, N] input
    w_ptr,  # [N] weight
    q_ptr,  # [M, N] float8_e4m3fn output
    s_ptr,  # [M] fp32, one value written a row when SCALES
    stride_xm,  # elements between rows of x
    stride_qm,  # elements between rows of q
    M,  # rows
    N,  # row width
    token_bucket,  # autotune key only
    SCALES: tl.constexpr,  # write one fp32 value a row
    BLOCK_N: tl.constexpr,  # next power of two >= N
    ROWS: tl.constexpr,  # rows per program
):
    rows, cols, mask = row_tile(M, N, ROWS, BLOCK_N)
    x = tl.load(x_ptr + rows * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(q_ptr + rows * stride_qm + cols, (x * w).to(q_ptr.dtype.element_ty), mask=mask)
    _one_per_row(s_ptr, rows, M, ROWS, SCALES)


@triton.autotune(**tuning(ROW_CANDIDATES, ROWS_PINS), key=["N", "token_bucket", "SCALES"],
                 restore_value=["r_ptr"])
@triton.jit
def _pair_mover_kernel(
    x_ptr,  # [M, N] input
    r_ptr,  # [M, N] residual, overwritten with x + r rounded
    w_ptr,  # [N] weight
    q_ptr,  # [M, N] float8_e4m3fn output
    s_ptr,  # [M] fp32, one value written a row when SCALES
    stride_xm,  # row strides, in elements
    stride_rm,
    stride_qm,
    M,  # rows
    N,  # row width
    token_bucket,  # autotune key only
    SCALES: tl.constexpr,  # write one fp32 value a row
    BLOCK_N: tl.constexpr,  # next power of two >= N
    ROWS: tl.constexpr,  # rows per program
):
    rows, cols, mask = row_tile(M, N, ROWS, BLOCK_N)
    x = tl.load(x_ptr + rows * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + rows * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    s = x + r
    tl.store(r_ptr + rows * stride_rm + cols, s.to(r_ptr.dtype.element_ty), mask=mask)
    tl.store(q_ptr + rows * stride_qm + cols, (s * w).to(q_ptr.dtype.element_ty), mask=mask)
    _one_per_row(s_ptr, rows, M, ROWS, SCALES)


def _launcher(kernel, x: torch.Tensor, out: torch.Tensor, scale: torch.Tensor | None, width: int, block: str,
              tensors: tuple, strides: tuple):
    """A zero-argument callable launching the mover ``kernel`` over ``out``'s rows (None off a GPU):
    its ``tensors``, then the scales (``out`` in their place, not written, when there are none), the
    row ``strides``, the rows, ``width`` and the token bucket, and ``block`` = next power of two >= width."""
    if x.device.type != "cuda":
        return None
    M = out.shape[0]
    s = scale if scale is not None else out  # not written when there are no scales
    grid, meta = row_grid(M), {"SCALES": scale is not None, block: triton.next_power_of_2(width)}
    return lambda: kernel[grid](*tensors, s, *strides, M, width, token_bucket(M), **meta)


def row_mover(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, scale: torch.Tensor | None):
    """A zero-argument callable moving ``rms_norm_fp8_quant``'s bytes (None off a GPU)."""
    return _launcher(_row_mover_kernel, x, out, scale, x.shape[1], "BLOCK_N", (x, weight, out),
                     (x.stride(0), out.stride(0)))


def pair_mover(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, out: torch.Tensor,
               scale: torch.Tensor | None):
    """A zero-argument callable moving ``fused_add_rms_norm_fp8_quant``'s bytes, residual in place."""
    return _launcher(_pair_mover_kernel, x, out, scale, x.shape[1], "BLOCK_N", (x, residual, weight, out),
                     (x.stride(0), residual.stride(0), out.stride(0)))


@triton.autotune(**tuning(GATED_CANDIDATES, GATED_PINS), key=["I", "token_bucket", "SCALES"])
@triton.jit
def _gated_mover_kernel(
    x_ptr,  # [M, 2I]: two halves read, as SiLU-and-mul reads gate and up
    q_ptr,  # [M, I] float8_e4m3fn output
    s_ptr,  # [M] fp32, one value written a row when SCALES
    stride_xm,  # elements between rows of x
    stride_qm,  # elements between rows of q
    M,  # rows
    I,  # output width
    token_bucket,  # autotune key only
    SCALES: tl.constexpr,  # write one fp32 value a row
    BLOCK_I: tl.constexpr,  # next power of two >= I
    ROWS: tl.constexpr,  # rows per program
):
    rows, cols, mask = row_tile(M, I, ROWS, BLOCK_I)
    g = tl.load(x_ptr + rows * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + rows * stride_xm + I + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(q_ptr + rows * stride_qm + cols, (g * u).to(q_ptr.dtype.element_ty), mask=mask)
    _one_per_row(s_ptr, rows, M, ROWS, SCALES)


def gated_mover(x: torch.Tensor, out: torch.Tensor, scale: torch.Tensor | None):
    """A zero-argument callable moving ``silu_and_mul_fp8_quant``'s bytes, over that op's candidates."""
    return _launcher(_gated_mover_kernel, x, out, scale, out.shape[1], "BLOCK_I", (x, out), (x.stride(0), out.stride(0)))
