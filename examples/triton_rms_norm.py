"""A Triton RMSNorm written the way first drafts often are, with the usual hygiene mistakes.

`kcheck check examples/` reports them (KC5xx): unmasked tail blocks, 32-bit row offsets,
a bf16 sum of squares, a block size that is not a `tl.constexpr`, an autotune key that
ignores the hidden size. Compare with `kernels/rms_norm.py`, which does all of it right.
"""

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK_SIZE": b}, num_warps=w) for b in (1024, 4096, 8192) for w in (4, 8)],
    key=[],
)
@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, stride_row, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_row + cols)
    w = tl.load(w_ptr + cols)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(out_ptr + row * stride_row + cols, x * rstd * w)


@triton.jit
def _rms_norm_rows_kernel(x_ptr, w_ptr, out_ptr, stride_row, n_rows, n_cols, eps, BLOCK_M, BLOCK_N: tl.constexpr):
    first = tl.program_id(0) * BLOCK_M
    cols = tl.arange(0, BLOCK_N)
    for r in range(BLOCK_M):
        row = first + r
        if row < n_rows:
            x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
            rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
            tl.store(out_ptr + row * stride_row + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=cols < n_cols)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, out: torch.Tensor | None = None) -> torch.Tensor:
    """bf16 RMSNorm over the last dimension of a contiguous 2-D tensor."""
    out = torch.empty_like(x) if out is None else out
    _rms_norm_kernel[(x.shape[0],)](x, weight, out, x.stride(0), x.shape[1], eps)
    return out
