"""RMSNorm: ``out[t, :] = x[t, :] / sqrt(mean(x[t, :]²) + eps) * weight``.

Sum of squares, scale and weight product all in fp32, rounded once on store
(triton-cuda/fp32-accumulation). One row is held in registers, so x is read once:
bytes = 2·T·H·s + H·s (read x, write out, read the weight), FLOPs ≈ 4·T·H. At Qwen3-8B
sizes it is memory-bound by two orders of magnitude (norm-rope/rmsnorm-roofline).

Catalog: norm-rope/rmsnorm-roofline, triton-cuda/fp32-accumulation, triton-cuda/int64-offsets,
triton-cuda/masks-on-tail-blocks, triton-cuda/constexpr-block-sizes, triton-cuda/autotune-keys,
triton-cuda/declared-fallbacks.

Declared fallbacks (to :func:`reference`, announced once): dtypes other than bf16/fp16/fp32,
a last dimension that is not unit-stride, inputs that are not 2-D and cannot be viewed as
such, hidden sizes over 65536, and devices without a Triton backend.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kcheck.kernels._launch import ROWS_PINS, ROW_CANDIDATES, device_reason, fallback, row_grid, token_bucket, tuning
from kcheck.kernels._rows import row_tile
from kcheck.kernels.harness import Case, KernelSpec, Tolerance

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MAX_HIDDEN = 65536


@triton.autotune(
    **tuning(ROW_CANDIDATES, ROWS_PINS),
    key=["N", "token_bucket"],
)
@triton.jit
def _rms_norm_kernel(
    x_ptr,  # [M, N] input, unit stride along N
    w_ptr,  # [N] weight
    out_ptr,  # [M, N] output, unit stride along N
    stride_xm,  # elements between rows of x
    stride_om,  # elements between rows of out
    M,  # rows (tokens)
    N,  # hidden size
    eps,  # added to the mean square
    token_bucket,  # autotune key only: the token-count regime
    BLOCK_N: tl.constexpr,  # next power of two >= N: one row per register tile
    ROWS: tl.constexpr,  # rows per program
):
    rows, cols, mask = row_tile(M, N, ROWS, BLOCK_N)  # int64 rows
    x = tl.load(x_ptr + rows * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)  # in flight with x, not after the sum
    # fp32 sum of squares: bf16 would lose the small terms, fp16 would overflow at |x| > 256.
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * rstd[:, None] * w
    tl.store(out_ptr + rows * stride_om + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, out: torch.Tensor | None = None) -> torch.Tensor:
    """Plain torch, upcast to fp32, rounded once to x's dtype. Ignores ``out`` (returns a new tensor)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype)


def _unsupported(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> str | None:
    if x.dtype not in SUPPORTED_DTYPES:
        return f"dtype {x.dtype}"
    if x.dim() != 2 or out.dim() != 2:
        return f"{x.dim()}-D input that cannot be viewed as 2-D"
    if x.stride(-1) != 1 or out.stride(-1) != 1 or not weight.is_contiguous():
        return "last dimension not unit-stride"
    if x.shape[-1] > MAX_HIDDEN:
        return f"hidden size {x.shape[-1]} > {MAX_HIDDEN}"
    return device_reason(x, (8, 0))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, out: torch.Tensor | None = None) -> torch.Tensor:
    """RMSNorm over the last dimension of ``x`` ([T, H], any row stride) into ``out`` (new if None)."""
    if weight.shape != x.shape[-1:] or weight.dtype != x.dtype:
        raise ValueError(f"rms_norm: weight {tuple(weight.shape)} {weight.dtype} does not match x {tuple(x.shape)} {x.dtype}")
    if out is None:
        out = torch.empty_like(x)
    elif out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"rms_norm: out {tuple(out.shape)} {out.dtype} does not match x {tuple(x.shape)} {x.dtype}")
    x2 = x.view(-1, x.shape[-1]) if x.dim() != 2 and x.is_contiguous() else x
    o2 = out.view(-1, out.shape[-1]) if out.dim() != 2 and out.is_contiguous() else out
    reason = _unsupported(x2, weight, o2)
    if reason is not None:
        fallback("rms_norm", reason)
        return out.copy_(reference(x, weight, eps))
    M, N = x2.shape
    _rms_norm_kernel[row_grid(M)](
        x2, weight, o2, x2.stride(0), o2.stride(0), M, N, eps, token_bucket(M), BLOCK_N=triton.next_power_of_2(N)
    )
    return out


# --------------------------------------------------------------------------- specification


def make_inputs(shape, dtype, device, gen, row_pad: int = 0, scale: float = 1.0) -> dict:
    """x ~ N(0, scale²) with ``row_pad`` extra elements between rows; weight ~ 1 + N(0, 0.1²)."""
    T, H = shape["tokens"], shape["hidden"]
    x = torch.randn(T, H + row_pad, generator=gen, device=device, dtype=torch.float32)[:, :H]
    x = (x * scale).clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max).to(dtype)
    w = (1 + 0.1 * torch.randn(H, generator=gen, device=device)).to(dtype)
    return {"x": x, "weight": w, "eps": 1e-6, "out": torch.empty(T, H, dtype=dtype, device=device)}


def _liger(inputs: dict):
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except ImportError:
        return None
    x, w, eps = inputs["x"], inputs["weight"], inputs["eps"]
    return lambda: LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama", False)


QWEN3_8B = {"hidden": 4096}
TOKENS = (1, 32, 256, 4096, 16384)
TOLERANCES = {
    # One rounding of the fp32 result to the output dtype: half an ulp, so rtol covers one ulp.
    "bfloat16": Tolerance(rel=8e-3, atol=1e-2, rtol=1.6e-2),
    "float16": Tolerance(rel=1e-3, atol=1e-3, rtol=2e-3),
}

ROW_CASES = (
    Case("one-token", "decode step: a single program, T=1", {"tokens": 1, "hidden": 4096}),
    Case("tail-rows", "T not a multiple of the rows per program: masked tail rows", {"tokens": 37, "hidden": 4096}),
    Case("odd-hidden", "hidden size not a power of two: masked tail columns", {"tokens": 5, "hidden": 5120 + 17}),
    Case("small-hidden", "hidden smaller than a warp's vector width", {"tokens": 9, "hidden": 24}),
    Case("odd-stride", "rows of x padded by 3 elements: non-contiguous, unaligned rows", {"tokens": 7, "hidden": 4096}, {"row_pad": 3}),
    Case("near-limit", "|x| near the fp16 maximum: fp16 sums of squares would overflow", {"tokens": 4, "hidden": 4096}, {"scale": 2e4}),
)
"""The regime boundaries of a row-wise norm over x [T, H]; ``rms_norm_fp8_quant`` checks the same ones."""

SPEC = KernelSpec(
    name="rms_norm",
    impl=rms_norm,
    reference=reference,
    make_inputs=make_inputs,
    cases=(
        *ROW_CASES,
        Case("largest", "largest benchmark shape, T=16384", {"tokens": 16384, "hidden": 4096}, large=True),
    ),
    bench_shapes=tuple({"tokens": t, **QWEN3_8B} for t in TOKENS),
    tolerances=TOLERANCES,
    bytes=lambda s, dt: (2 * s["tokens"] * s["hidden"] + s["hidden"]) * dt.itemsize,
    flops=lambda s: 4 * s["tokens"] * s["hidden"],
    catalog=(
        "norm-rope/rmsnorm-roofline", "triton-cuda/fp32-accumulation", "triton-cuda/int64-offsets",
        "triton-cuda/masks-on-tail-blocks", "triton-cuda/constexpr-block-sizes", "triton-cuda/autotune-keys",
        "triton-cuda/declared-fallbacks",
    ),
    fallbacks=("dtype not bf16/fp16/fp32", "last dimension not unit-stride", "not viewable as 2-D",
               f"hidden > {MAX_HIDDEN}", "no Triton backend for the device"),
    out_args=("out",),
    peers={"liger": _liger},
)
