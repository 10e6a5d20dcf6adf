"""Residual add, RMSNorm and FP8 quantization in one pass: the pre-norm step feeding an FP8 GEMM.

``residual ← x + residual`` (rounded to the dtype, in place by default, as ``fused_add_rms_norm``
and the engines do), then ``q, scale = per_token_fp8_quant(rms_norm(residual, weight))``: the norm
reads the rounded sum s, ``y = (s · weight) / sqrt(mean(s²) + eps)`` is rounded to the dtype as the unfused op stores it, and the
quantization is ``per_token_fp8_quant``'s (dynamic per-token scales
``max(max|y| / 448, 1 / (448·512))``) or a division by one given ``static_scale``. All arithmetic in
fp32 (triton-cuda/fp32-accumulation); x is not written (the normalized row goes out as e4m3).
Against the upcast torch reference: the residual bit-exact on a GPU, the e4m3 values within one
e4m3 step and the scales within one ulp of the dtype (``rms_norm_fp8_quant.TOLERANCES``).

bytes = 3·T·H·s + T·H + 4·T + H·s (read x and the residual, write the residual, q and the scales,
read the weight): 7 bytes an element in bf16 where the unfused pair moves 11 (fused add+RMSNorm
reads 4 and writes 4, the quantization reads 2 and writes 1); FLOPs ≈ 8·T·H
(norm-rope/fused-add-rmsnorm, gemm/fp8-per-token-quantization).

Catalog: norm-rope/fused-add-rmsnorm, gemm/fp8-per-token-quantization, hardware/fp8-formats,
triton-cuda/fp32-accumulation, triton-cuda/int64-offsets, triton-cuda/masks-on-tail-blocks,
triton-cuda/constexpr-block-sizes, triton-cuda/autotune-keys, triton-cuda/declared-fallbacks.

Declared fallbacks (to :func:`reference`, announced once): input dtypes other than
bf16/fp16/fp32, tensors that are not 2-D with a unit-stride last dimension, hidden sizes over
65536, GPUs below compute capability 8.9 (no e4m3 conversion), devices without a Triton backend.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kcheck.kernels import fused_add_rms_norm as fused
from kcheck.kernels._launch import ROWS_PINS, ROW_CANDIDATES, device_reason, fallback, row_grid, token_bucket, tuning
from kcheck.kernels._rows import add_residual, row_tile
from kcheck.kernels.harness import Case, KernelSpec
from kcheck.kernels.per_token_fp8_quant import FP8, FP8_MAX, MIN_CAPABILITY
from kcheck.kernels.rms_norm import MAX_HIDDEN, QWEN3_8B, SUPPORTED_DTYPES, TOKENS
from kcheck.kernels.rms_norm import TOLERANCES as DTYPE_TOLERANCES
from kcheck.kernels.rms_norm_fp8_quant import (
    _quantize, from_reference, norm_to_e4m3, outputs, quant_meta, readout, scale_input, tolerances,
)


@triton.autotune(
    **tuning(ROW_CANDIDATES, ROWS_PINS),
    key=["N", "token_bucket", "STATIC"],
    restore_value=["r_ptr"],  # tuning runs must not accumulate into the residual
)
@triton.jit
def _fused_add_rms_norm_fp8_quant_kernel(
    x_ptr,  # [M, N] input (read only)
    r_ptr,  # [M, N] residual
    w_ptr,  # [N] weight
    rout_ptr,  # [M, N] x + residual (may alias the residual)
    q_ptr,  # [M, N] float8_e4m3fn output
    s_ptr,  # [M] fp32 scales written (dynamic) or the one fp32 scale read (static)
    stride_xm,  # row strides, in elements
    stride_rm,
    stride_rom,
    stride_qm,
    M,  # rows (tokens)
    N,  # hidden size
    eps,  # added to the mean square
    token_bucket,  # autotune key only: the token-count regime
    FP8_MAX: tl.constexpr,  # largest finite e4m3 value
    MIN_SCALE: tl.constexpr,  # lower bound on a dynamic scale
    STATIC: tl.constexpr,  # one given scale instead of one computed per row
    ROUND_IN_FP32: tl.constexpr,  # round to the e4m3 grid before the cast (interpreter only)
    BLOCK_N: tl.constexpr,  # next power of two >= N
    ROWS: tl.constexpr,  # rows per program
):
    rows, cols, mask = row_tile(M, N, ROWS, BLOCK_N)  # int64 rows
    sf, w = add_residual(x_ptr, r_ptr, w_ptr, rout_ptr, stride_xm, stride_rm, stride_rom, rows, cols, mask, N)
    # The norm of s·w rounded to the dtype, as the unfused op stores it, then quantized (one
    # reduction for the sum of squares and max|s·w|; see rms_norm_fp8_quant).
    norm_to_e4m3(sf, w, rout_ptr, q_ptr, s_ptr, rows, cols, mask, stride_qm, M, N, eps,
                 FP8_MAX, MIN_SCALE, STATIC, ROUND_IN_FP32)


def reference(x, residual, weight, eps=1e-6, out=None, scale=None, residual_out=None, static_scale=None):
    """The unfused reference, plain torch: ``fused_add_rms_norm``'s then the FP8 quantization;
    returns new ``(q, scale, x + residual)`` and never writes its arguments."""
    y, s = fused.reference(x, residual, weight, eps)
    return (*_quantize(y, static_scale), s)


def fused_add_rms_norm_fp8_quant(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    static_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return ``(q [T, H] e4m3, scale, x + residual)``; the sum goes over ``residual`` unless
    ``residual_out`` is given, and ``scale`` is the per-token scales [T, 1] or ``static_scale``."""
    if x.dim() != 2:
        raise ValueError(f"fused_add_rms_norm_fp8_quant: x must be [T, H], got {tuple(x.shape)}")
    residual_out = residual if residual_out is None else residual_out
    for name, t in (("residual", residual), ("residual_out", residual_out)):
        if t.shape != x.shape or t.dtype != x.dtype:
            raise ValueError(f"fused_add_rms_norm_fp8_quant: {name} {tuple(t.shape)} {t.dtype} does not match x {tuple(x.shape)} {x.dtype}")
    if weight.shape != x.shape[-1:] or weight.dtype != x.dtype:
        raise ValueError(f"fused_add_rms_norm_fp8_quant: weight {tuple(weight.shape)} {weight.dtype} does not match x")
    out, scale = outputs("fused_add_rms_norm_fp8_quant", x, x.shape[1], out, scale, static_scale)
    reason = (
        f"dtype {x.dtype}" if x.dtype not in SUPPORTED_DTYPES
        else "not 2-D with a unit-stride last dimension"
        if any(t.dim() != 2 or t.stride(-1) != 1 for t in (residual, residual_out, out)) or x.stride(-1) != 1
        or not weight.is_contiguous()
        else f"hidden size {x.shape[1]} > {MAX_HIDDEN}" if x.shape[1] > MAX_HIDDEN
        else device_reason(x, MIN_CAPABILITY)
    )
    if reason is not None:
        fallback("fused_add_rms_norm_fp8_quant", reason)
        q, s, res = reference(x, residual, weight, eps, static_scale=static_scale)
        residual_out.copy_(res)
        return (*from_reference(out, scale, static_scale, q, s), residual_out)
    M, N = x.shape
    _fused_add_rms_norm_fp8_quant_kernel[row_grid(M)](
        x, residual, weight, residual_out, out, scale,
        x.stride(0), residual.stride(0), residual_out.stride(0), out.stride(0), M, N, eps, token_bucket(M),
        **quant_meta(static_scale), BLOCK_N=triton.next_power_of_2(N),
    )
    return out, scale, residual_out


# --------------------------------------------------------------------------- specification


def make_inputs(shape, dtype, device, gen, in_place: bool = True, row_pad: int = 0, scale: float = 1.0,
                static: bool = False) -> dict:
    """x and residual ~ N(0, scale²), rows padded by ``row_pad``; the residual updated in place unless
    ``in_place`` is false; with ``static``, a per-tensor scale of 2/448."""
    T, H = shape["tokens"], shape["hidden"]
    lim = torch.finfo(dtype).max / 2  # keep x + residual finite

    def rand():
        t = torch.randn(T, H + row_pad, generator=gen, device=device)[:, :H]
        return (t * scale).clamp(-lim, lim).to(dtype)

    inputs = {"x": rand(), "residual": rand(), "weight": (1 + 0.1 * torch.randn(H, generator=gen, device=device)).to(dtype),
              "eps": 1e-6, "out": torch.empty(T, H, dtype=FP8, device=device)}
    if not in_place:
        inputs["residual_out"] = torch.empty(T, H, dtype=dtype, device=device)
    return {**inputs, **scale_input(T, device, static, 2.0 / FP8_MAX)}


def _unfused(inputs: dict):
    """Our two kernels back to back: fused add+RMSNorm (residual in place, the normalized rows into a
    bf16 buffer made once outside the timing), then the per-token quantization of that buffer."""
    from kcheck.kernels.per_token_fp8_quant import per_token_fp8_quant

    if "scale" not in inputs or "residual_out" in inputs:
        return None
    x, r, w, eps, q, s = (inputs[k] for k in ("x", "residual", "weight", "eps", "out", "scale"))
    tmp = torch.empty_like(x)
    return lambda: per_token_fp8_quant(fused.fused_add_rms_norm(x, r, w, eps, out=tmp)[0], out=q, scale=s)


def _mover(inputs: dict):
    """The fused op's bytes in its pattern (two rows read, the residual written over the one, e4m3 and
    one fp32 a row written), without its arithmetic."""
    from kcheck.kernels._movers import pair_mover

    if "residual_out" in inputs:
        return None
    return pair_mover(inputs["x"], inputs["residual"], inputs["weight"], inputs["out"], inputs.get("scale"))


TOLERANCES = {"bfloat16": (*tolerances(2.0**-6), DTYPE_TOLERANCES["bfloat16"]),
              "float16": (*tolerances(2.0**-9), DTYPE_TOLERANCES["float16"])}
"""The e4m3 values within one step, as for ``rms_norm_fp8_quant``; the residual as for
``fused_add_rms_norm`` (one rounding of an fp32 sum: bit-exact on a GPU); the scales within two ulps
of the dtype: under the CPU interpreter, whose fp32 → bf16 cast truncates, the residual moves by
up to one ulp and the normalized row by another. On a GPU the residual is exact and the bound of
``rms_norm_fp8_quant`` (one ulp) is what the arithmetic allows."""

SPEC = KernelSpec(
    name="fused_add_rms_norm_fp8_quant",
    impl=fused_add_rms_norm_fp8_quant,
    reference=reference,
    make_inputs=make_inputs,
    cases=(
        Case("one-token", "decode step: a single program, T=1", {"tokens": 1, "hidden": 4096}),
        Case("out-of-place", "the sum into a separate residual_out, the residual left as it was", {"tokens": 33, "hidden": 4096}, {"in_place": False}),
        Case("tail-rows", "T not a multiple of the rows per program: masked tail rows", {"tokens": 37, "hidden": 4096}),
        Case("odd-hidden", "hidden size not a power of two: masked tail columns", {"tokens": 5, "hidden": 5120 + 17}),
        Case("small-hidden", "hidden smaller than a warp's vector width", {"tokens": 9, "hidden": 24}),
        Case("odd-stride", "input rows padded by 3 elements: non-contiguous, unaligned rows", {"tokens": 7, "hidden": 4096}, {"row_pad": 3}),
        Case("near-limit", "|x| near the dtype's maximum: the add must not overflow in fp32", {"tokens": 4, "hidden": 4096}, {"scale": 1e4}),
        Case("static", "a given per-tensor scale of 2/448: no scales written, |y| beyond 2 saturates", {"tokens": 37, "hidden": 4096}, {"static": True}),
        Case("largest", "largest benchmark shape, T=16384", {"tokens": 16384, "hidden": 4096}, large=True),
        Case("largest-static", "largest benchmark shape with a given per-tensor scale", {"tokens": 16384, "hidden": 4096}, {"static": True}, large=True),
    ),
    bench_shapes=tuple({"tokens": t, **QWEN3_8B} for t in TOKENS),
    tolerances=TOLERANCES,
    bytes=lambda s, dt: s["tokens"] * s["hidden"] * (3 * dt.itemsize + 1) + 4 * s["tokens"] + s["hidden"] * dt.itemsize,
    flops=lambda s: 8 * s["tokens"] * s["hidden"],
    catalog=(
        "norm-rope/fused-add-rmsnorm", "gemm/fp8-per-token-quantization", "hardware/fp8-formats",
        "triton-cuda/fp32-accumulation", "triton-cuda/int64-offsets", "triton-cuda/masks-on-tail-blocks",
        "triton-cuda/constexpr-block-sizes", "triton-cuda/autotune-keys", "triton-cuda/declared-fallbacks",
    ),
    fallbacks=("dtype not bf16/fp16/fp32", "not 2-D with a unit-stride last dimension", f"hidden > {MAX_HIDDEN}",
               "compute capability below 8.9", "no Triton backend for the device"),
    out_args=("out", "scale", "residual_out"),
    readout=readout,
    peers={"unfused": _unfused},
    other_peers={"mover": _mover},
    min_capability=MIN_CAPABILITY,
)
