"""Residual add then RMSNorm, the pre-norm step of every decoder layer.

``residual_out = x + residual`` (rounded to the dtype, as the engines store it) and
``out = residual_out / sqrt(mean(residual_out²) + eps) * weight``, both returned. By default
both are written in place, ``out`` over ``x`` and ``residual_out`` over ``residual``, which is
what vLLM and SGLang do; pass ``out``/``residual_out`` to write elsewhere. The norm reads the
rounded sum, so ``out`` equals ``rms_norm(residual_out)``. The add, the sum of squares and the
scaling run in fp32 (triton-cuda/fp32-accumulation).

bytes = 4·T·H·s + H·s (read x and residual, write both outputs, read the weight); FLOPs ≈ 5·T·H.
Fusing saves the round trip of the sum through memory: unfused, it is 6·T·H·s
(norm-rope/fused-add-rmsnorm).

Catalog: norm-rope/fused-add-rmsnorm, norm-rope/rmsnorm-roofline, triton-cuda/fp32-accumulation,
triton-cuda/int64-offsets, triton-cuda/masks-on-tail-blocks, triton-cuda/constexpr-block-sizes,
triton-cuda/autotune-keys, triton-cuda/declared-fallbacks.

Declared fallbacks (to :func:`reference`, announced once): dtypes other than bf16/fp16/fp32,
tensors that are not 2-D with a unit-stride last dimension, hidden sizes over 65536, devices
without a Triton backend.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kcheck.kernels._launch import FUSED_PINS, ROW_CANDIDATES, device_reason, fallback, row_grid, token_bucket, tuning
from kcheck.kernels._rows import add_residual, row_tile
from kcheck.kernels.harness import Case, KernelSpec
from kcheck.kernels.rms_norm import MAX_HIDDEN, QWEN3_8B, SUPPORTED_DTYPES, TOKENS, TOLERANCES


@triton.autotune(
    **tuning(ROW_CANDIDATES, FUSED_PINS),
    key=["N", "token_bucket"],
    restore_value=["x_ptr", "r_ptr"],  # tuning runs must not accumulate into in-place inputs
)
@triton.jit
def _fused_add_rms_norm_kernel(
    x_ptr,  # [M, N] input
    r_ptr,  # [M, N] residual
    w_ptr,  # [N] weight
    out_ptr,  # [M, N] normalised output (may alias x)
    rout_ptr,  # [M, N] x + residual (may alias residual)
    stride_xm,  # row strides, in elements
    stride_rm,
    stride_om,
    stride_rom,
    M,  # rows (tokens)
    N,  # hidden size
    eps,  # added to the mean square
    token_bucket,  # autotune key only: the token-count regime
    BLOCK_N: tl.constexpr,  # next power of two >= N
    ROWS: tl.constexpr,  # rows per program
):
    rows, cols, mask = row_tile(M, N, ROWS, BLOCK_N)  # int64 rows
    sf, w = add_residual(x_ptr, r_ptr, w_ptr, rout_ptr, stride_xm, stride_rm, stride_rom, rows, cols, mask, N)
    rstd = tl.rsqrt(tl.sum(sf * sf, axis=1) / N + eps)
    tl.store(out_ptr + rows * stride_om + cols, (sf * rstd[:, None] * w).to(out_ptr.dtype.element_ty), mask=mask)


def reference(x, residual, weight, eps=1e-6, out=None, residual_out=None):
    """Plain torch, upcast to fp32; returns new tensors (never writes its arguments)."""
    s = (x.float() + residual.float()).to(x.dtype)
    sf = s.float()
    y = sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype), s


def _unsupported(*tensors: torch.Tensor) -> str | None:
    x = tensors[0]
    if x.dtype not in SUPPORTED_DTYPES:
        return f"dtype {x.dtype}"
    if any(t.dim() != 2 or t.stride(-1) != 1 for t in tensors):
        return "not 2-D with a unit-stride last dimension"
    if x.shape[-1] > MAX_HIDDEN:
        return f"hidden size {x.shape[-1]} > {MAX_HIDDEN}"
    return device_reason(x, (8, 0))


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(rms_norm(x + residual), x + residual)``, in place over (x, residual) by default."""
    out = x if out is None else out
    residual_out = residual if residual_out is None else residual_out
    for name, t in (("residual", residual), ("out", out), ("residual_out", residual_out)):
        if t.shape != x.shape or t.dtype != x.dtype:
            raise ValueError(f"fused_add_rms_norm: {name} {tuple(t.shape)} {t.dtype} does not match x {tuple(x.shape)} {x.dtype}")
    if weight.shape != x.shape[-1:] or weight.dtype != x.dtype or not weight.is_contiguous():
        raise ValueError(f"fused_add_rms_norm: weight {tuple(weight.shape)} {weight.dtype} does not match x")
    reason = _unsupported(x, residual, out, residual_out)
    if reason is not None:
        fallback("fused_add_rms_norm", reason)
        y, s = reference(x, residual, weight, eps)
        return out.copy_(y), residual_out.copy_(s)
    M, N = x.shape
    _fused_add_rms_norm_kernel[row_grid(M)](
        x, residual, weight, out, residual_out,
        x.stride(0), residual.stride(0), out.stride(0), residual_out.stride(0),
        M, N, eps, token_bucket(M), BLOCK_N=triton.next_power_of_2(N),
    )
    return out, residual_out


# --------------------------------------------------------------------------- specification


def make_inputs(shape, dtype, device, gen, in_place: bool = False, row_pad: int = 0, scale: float = 1.0) -> dict:
    """x and residual ~ N(0, scale²), rows padded by ``row_pad``; separate outputs unless ``in_place``."""
    T, H = shape["tokens"], shape["hidden"]
    lim = torch.finfo(dtype).max / 2  # keep x + residual finite

    def rand():
        t = torch.randn(T, H + row_pad, generator=gen, device=device)[:, :H]
        return (t * scale).clamp(-lim, lim).to(dtype)

    inputs = {"x": rand(), "residual": rand(), "weight": (1 + 0.1 * torch.randn(H, generator=gen, device=device)).to(dtype), "eps": 1e-6}
    if not in_place:
        inputs["out"] = torch.empty(T, H, dtype=dtype, device=device)
        inputs["residual_out"] = torch.empty(T, H, dtype=dtype, device=device)
    return inputs


def _liger(inputs: dict):
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    except ImportError:
        return None
    x, r, w, eps = inputs["x"], inputs["residual"], inputs["weight"], inputs["eps"]
    return lambda: LigerFusedAddRMSNormFunction.apply(x, r, w, eps, 0.0, "llama", False)


SPEC = KernelSpec(
    name="fused_add_rms_norm",
    impl=fused_add_rms_norm,
    reference=reference,
    make_inputs=make_inputs,
    cases=(
        Case("one-token", "decode step: a single program, T=1", {"tokens": 1, "hidden": 4096}),
        Case("in-place", "the engines' mode: out over x, residual_out over residual", {"tokens": 33, "hidden": 4096}, {"in_place": True}),
        Case("tail-rows", "T not a multiple of the rows per program: masked tail rows", {"tokens": 37, "hidden": 4096}),
        Case("odd-hidden", "hidden size not a power of two: masked tail columns", {"tokens": 5, "hidden": 5120 + 17}),
        Case("odd-stride", "input rows padded by 3 elements: non-contiguous, unaligned rows", {"tokens": 7, "hidden": 4096}, {"row_pad": 3}),
        Case("near-limit", "|x| near the dtype's maximum: the add must not overflow in fp32", {"tokens": 4, "hidden": 4096}, {"scale": 1e4}),
        Case("largest", "largest benchmark shape, T=16384", {"tokens": 16384, "hidden": 4096}, large=True),
    ),
    bench_shapes=tuple({"tokens": t, **QWEN3_8B} for t in TOKENS),
    tolerances=TOLERANCES,
    bytes=lambda s, dt: (4 * s["tokens"] * s["hidden"] + s["hidden"]) * dt.itemsize,
    flops=lambda s: 5 * s["tokens"] * s["hidden"],
    catalog=(
        "norm-rope/fused-add-rmsnorm", "norm-rope/rmsnorm-roofline", "triton-cuda/fp32-accumulation",
        "triton-cuda/int64-offsets", "triton-cuda/masks-on-tail-blocks", "triton-cuda/constexpr-block-sizes",
        "triton-cuda/autotune-keys", "triton-cuda/declared-fallbacks",
    ),
    fallbacks=("dtype not bf16/fp16/fp32", "not 2-D with a unit-stride last dimension", f"hidden > {MAX_HIDDEN}",
               "no Triton backend for the device"),
    out_args=("out", "residual_out"),
    peers={"liger": _liger},
)
