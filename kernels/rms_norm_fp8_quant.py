"""RMSNorm straight to FP8: ``q, scale = per_token_fp8_quant(rms_norm(x, weight))`` in one pass.

For each row t: ``y = (x · weight) / sqrt(mean(x²) + eps)`` in fp32, rounded to x's dtype as the
unfused ``rms_norm`` stores it, then quantized as ``per_token_fp8_quant`` does: dynamic,
``scale[t] = max(max|y[t, :]| / 448, 1 / (448·512))`` and ``q = clamp(y / scale, ±448)`` rounded
to float8_e4m3fn; or, given ``static_scale`` (one fp32 value), ``q = clamp(y / static_scale, ±448)``
and no scale is written. The division is correctly rounded (gemm/fp8-per-token-quantization).
Rounding y to the dtype first is what makes the result the unfused pair's wherever the sum of
squares and the products round alike (``rms_norm`` multiplies ``(x · rstd) · weight``; here
``(x · weight) · rstd``, so that max|y| is max|x · weight| · rstd and one reduction gives both the
sum of squares and the maximum). Against the upcast torch reference of the unfused pair the e4m3
values are within one e4m3 step and the scales within one ulp of the dtype (``TOLERANCES``).

bytes = T·H·s + T·H + 4·T + H·s (read x, write q, write the scales, read the weight), 3 bytes
an element in bf16 where the unfused pair moves 7 (rms_norm reads 2 and writes 2, the
quantization reads them back and writes 1); FLOPs ≈ 7·T·H. Memory-bound
(norm-rope/rmsnorm-roofline).

Catalog: gemm/fp8-per-token-quantization, norm-rope/rmsnorm-roofline, hardware/fp8-formats,
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

from kcheck.kernels import per_token_fp8_quant as fp8
from kcheck.kernels._launch import INTERPRET, ROWS_PINS, ROW_CANDIDATES, device_reason, fallback, row_grid, token_bucket, tuning
from kcheck.kernels._rows import row_tile
from kcheck.kernels.harness import Case, KernelSpec, Tolerance
from kcheck.kernels.per_token_fp8_quant import FP8, FP8_MAX, MIN_CAPABILITY, MIN_SCALE, round_like, row_scales, sum_and_absmax, to_e4m3, widen
from kcheck.kernels import rms_norm as rms
from kcheck.kernels.rms_norm import MAX_HIDDEN, QWEN3_8B, SUPPORTED_DTYPES, TOKENS


@triton.jit
def norm_to_e4m3(v, w, like_ptr, q_ptr, s_ptr, rows, cols, mask, stride_qm, M, N, eps,
                 FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr, STATIC: tl.constexpr, ROUND_IN_FP32: tl.constexpr):
    """RMSNorm of the fp32 rows ``v`` times the weight ``w``, rounded to ``like_ptr``'s dtype as the
    unfused norm stores it, quantized to e4m3 at ``q_ptr`` with the rows' scales (``row_scales``:
    written to ``s_ptr``, or the static one read from it). Shared by both fused norms."""
    vw = v * w
    # One reduction gives both the sum of squares and max|v·w|. With y = (v·w)·rstd, rstd > 0 the
    # same for the whole row, max|y| = (max|v·w|)·rstd exactly, since rounding is monotone: the
    # scale needs no second reduction over y, which would wait for rstd.
    ss, amax_vw = tl.reduce((v * v, tl.abs(vw)), 1, sum_and_absmax)
    rstd = tl.rsqrt(ss / N + eps)
    # Rounded to the input dtype, as rms_norm stores it: the quantization sees the unfused op's values.
    y = round_like(vw * rstd[:, None], like_ptr, ROUND_IN_FP32)
    amax = (amax_vw * rstd).to(like_ptr.dtype.element_ty).to(tl.float32)  # = max|y|, bit for bit
    scale, r = row_scales(amax, s_ptr, rows, M, FP8_MAX, MIN_SCALE, STATIC)
    q = to_e4m3(y, scale, r, FP8_MAX, ROUND_IN_FP32)
    tl.store(q_ptr + rows * stride_qm + cols, q.to(q_ptr.dtype.element_ty), mask=mask)


@triton.autotune(
    **tuning(ROW_CANDIDATES, ROWS_PINS),
    key=["N", "token_bucket", "STATIC"],
)
@triton.jit
def _rms_norm_fp8_quant_kernel(
    x_ptr,  # [M, N] input, unit stride along N
    w_ptr,  # [N] weight
    q_ptr,  # [M, N] float8_e4m3fn output
    s_ptr,  # [M] fp32 scales written (dynamic) or the one fp32 scale read (static)
    stride_xm,  # elements between rows of x
    stride_qm,  # elements between rows of q
    M,  # rows (tokens)
    N,  # hidden size
    eps,  # added to the mean square
    token_bucket,  # autotune key only: the token-count regime
    FP8_MAX: tl.constexpr,  # largest finite e4m3 value
    MIN_SCALE: tl.constexpr,  # lower bound on a dynamic scale
    STATIC: tl.constexpr,  # one given scale instead of one computed per row
    ROUND_IN_FP32: tl.constexpr,  # round to the e4m3 grid before the cast (interpreter only)
    BLOCK_N: tl.constexpr,  # next power of two >= N: one row per register tile
    EVEN: tl.constexpr,  # N == BLOCK_N
    ROWS: tl.constexpr,  # rows per program
):
    rows, cols, mask = row_tile(M, N, ROWS, BLOCK_N)  # int64 rows
    if EVEN and ROWS == 1:
        # One whole row a program and N = BLOCK_N: every lane is in bounds. Unmasked, each 16-byte
        # load needs no zeroed registers and no predicate: about 25 instructions a thread fewer,
        # 0.8 an element on 4 warps.
        x = widen(tl.load(x_ptr + rows * stride_xm + cols), ROUND_IN_FP32)
        w = widen(tl.load(w_ptr + cols), ROUND_IN_FP32)  # in flight with x
        norm_to_e4m3(x, w, x_ptr, q_ptr, s_ptr, rows, cols, None, stride_qm, M, N, eps,
                     FP8_MAX, MIN_SCALE, STATIC, ROUND_IN_FP32)
    else:
        x = widen(tl.load(x_ptr + rows * stride_xm + cols, mask=mask, other=0.0), ROUND_IN_FP32)
        w = widen(tl.load(w_ptr + cols, mask=cols < N, other=0.0), ROUND_IN_FP32)  # in flight with x
        norm_to_e4m3(x, w, x_ptr, q_ptr, s_ptr, rows, cols, mask, stride_qm, M, N, eps,
                     FP8_MAX, MIN_SCALE, STATIC, ROUND_IN_FP32)


def _quantize(y: torch.Tensor, static_scale: torch.Tensor | None):
    """The quantization of the reference: ``per_token_fp8_quant``'s, or division by the static scale."""
    if static_scale is None:
        return fp8.reference(y)
    return (y.float() / static_scale.float()).clamp(-FP8_MAX, FP8_MAX).to(FP8), static_scale


def reference(x, weight, eps=1e-6, out=None, scale=None, static_scale=None):
    """The unfused reference: ``rms_norm``'s (upcast, ``x · rstd · weight``, rounded to x's dtype),
    then the FP8 quantization, both plain torch; returns new ``(q, scale)`` (``static_scale`` itself
    when given). The kernel multiplies in another order, ``(x · weight) · rstd``, so y may differ by
    one ulp of the dtype where the two fp32 products round apart; that is within ``TOLERANCES``."""
    return _quantize(rms.reference(x, weight, eps), static_scale)


def check_static_scale(op: str, static_scale: torch.Tensor | None, x: torch.Tensor) -> None:
    if static_scale is not None and (static_scale.numel() != 1 or static_scale.dtype != torch.float32
                                     or static_scale.device != x.device):
        raise ValueError(f"{op}: static_scale must be one float32 value on {x.device}, got "
                         f"{tuple(static_scale.shape)} {static_scale.dtype} on {static_scale.device}")


def quant_meta(static_scale: torch.Tensor | None) -> dict:
    """The quantization's launch keywords, the same for the three fused FP8 kernels."""
    return dict(FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE, STATIC=static_scale is not None, ROUND_IN_FP32=INTERPRET)


def from_reference(out: torch.Tensor, scale: torch.Tensor, static_scale, q: torch.Tensor, s: torch.Tensor):
    """The fallback's result: the reference's e4m3 values into ``out`` and its scales into ``scale``
    (left alone when it is the given static scale); returns ``(out, scale)``."""
    return out.copy_(q), (scale if static_scale is not None else scale.copy_(s))


def scale_input(T: int, device, static: bool, static_value: float) -> dict[str, torch.Tensor]:
    """The scale argument of a fused FP8 op's inputs: a per-tensor ``static_scale`` of
    ``static_value`` when ``static``, else an empty ``scale`` [T, 1] for the per-token scales."""
    if static:
        return {"static_scale": torch.full((1,), static_value, dtype=torch.float32, device=device)}
    return {"scale": torch.empty(T, 1, dtype=torch.float32, device=device)}


def outputs(op: str, x: torch.Tensor, width: int, out, scale, static_scale):
    """The e4m3 output [T, width] and the scales [T, 1] (the static scale when given), checked or made."""
    T = x.shape[0]
    out = torch.empty(T, width, dtype=FP8, device=x.device) if out is None else out
    if out.shape != (T, width) or out.dtype != FP8:
        raise ValueError(f"{op}: out {tuple(out.shape)} {out.dtype} must be ({T}, {width}) {FP8}")
    check_static_scale(op, static_scale, x)
    if static_scale is not None:
        return out, static_scale
    scale = torch.empty(T, 1, dtype=torch.float32, device=x.device) if scale is None else scale
    if scale.shape != (T, 1) or scale.dtype != torch.float32:
        raise ValueError(f"{op}: scale {tuple(scale.shape)} {scale.dtype} must be ({T}, 1) float32")
    return out, scale


def rms_norm_fp8_quant(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    static_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of each row of ``x`` [T, H] quantized to e4m3; returns ``(q [T, H], scale)``: the
    per-token scales [T, 1] (into ``scale`` if given), or ``static_scale`` when one is given."""
    if x.dim() != 2:
        raise ValueError(f"rms_norm_fp8_quant: x must be [T, H], got {tuple(x.shape)}")
    if weight.shape != x.shape[-1:] or weight.dtype != x.dtype:
        raise ValueError(f"rms_norm_fp8_quant: weight {tuple(weight.shape)} {weight.dtype} does not match x {tuple(x.shape)} {x.dtype}")
    out, scale = outputs("rms_norm_fp8_quant", x, x.shape[1], out, scale, static_scale)
    reason = (
        f"dtype {x.dtype}" if x.dtype not in SUPPORTED_DTYPES
        else "not 2-D with a unit-stride last dimension" if x.stride(-1) != 1 or out.stride(-1) != 1 or not weight.is_contiguous()
        else f"hidden size {x.shape[1]} > {MAX_HIDDEN}" if x.shape[1] > MAX_HIDDEN
        else device_reason(x, MIN_CAPABILITY)
    )
    if reason is not None:
        fallback("rms_norm_fp8_quant", reason)
        return from_reference(out, scale, static_scale, *reference(x, weight, eps, static_scale=static_scale))
    M, N = x.shape
    _rms_norm_fp8_quant_kernel[row_grid(M)](
        x, weight, out, scale, x.stride(0), out.stride(0), M, N, eps, token_bucket(M),
        **quant_meta(static_scale), BLOCK_N=triton.next_power_of_2(N), EVEN=N == triton.next_power_of_2(N),
    )
    return out, scale


# --------------------------------------------------------------------------- specification


def e4m3_steps(q: torch.Tensor) -> torch.Tensor:
    """Each e4m3 value's signed position on the e4m3 grid (0 for ±0, ±1 for the smallest subnormals,
    ±126 for ±448): the difference of two positions is their distance in e4m3 steps."""
    bits = q.view(torch.uint8).to(torch.int32)
    return torch.where(bits >= 128, -(bits - 128), bits).float()


def readout(outputs):
    """The e4m3 values as grid positions (compared in steps) and the scales as fp32."""
    q, s, *rest = outputs
    return (e4m3_steps(q), s.float(), *(t.float() for t in rest))


def tolerances(scale_rtol: float):
    """e4m3 values within one step of the reference (and 1% normwise in steps); scales within
    ``scale_rtol``, one ulp of the dtype relative, since the largest |y| may round differently."""
    return (Tolerance(rel=1e-2, atol=1.0, rtol=0.0), Tolerance(rel=scale_rtol, atol=0.0, rtol=scale_rtol))


TOLERANCES = {"bfloat16": tolerances(2.0**-7), "float16": tolerances(2.0**-10)}
"""One step of e4m3 and one ulp of the dtype for the scale. On a GPU the norm's fp32 sum of squares
may add in another order than torch's and round y to the neighbouring value of the dtype: y, and
with it the scale if y is the row's largest, moves by one ulp, and a value near an e4m3 rounding
boundary lands one step over. (Triton's CPU interpreter truncates the fp32 → bf16 cast, which
moves y by up to one ulp too.)"""


def make_inputs(shape, dtype, device, gen, row_pad: int = 0, scale: float = 1.0, zero_row: bool = False,
                static: bool = False) -> dict:
    """x ~ N(0, scale²) with ``row_pad`` extra elements between rows (optionally an all-zero row);
    weight ~ 1 + N(0, 0.1²); with ``static``, a per-tensor scale of 2/448 (|y| beyond 2 saturates)."""
    T, H = shape["tokens"], shape["hidden"]
    x = torch.randn(T, H + row_pad, generator=gen, device=device, dtype=torch.float32) * scale
    if zero_row:
        x[T // 2] = 0
    x = x.clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max).to(dtype)[:, :H]
    w = (1 + 0.1 * torch.randn(H, generator=gen, device=device)).to(dtype)
    return {"x": x, "weight": w, "eps": 1e-6, "out": torch.empty(T, H, dtype=FP8, device=device),
            **scale_input(T, device, static, 2.0 / FP8_MAX)}


def _unfused(inputs: dict):
    """Our two kernels back to back, the bf16 intermediate in a buffer made once outside the timing."""
    from kcheck.kernels.per_token_fp8_quant import per_token_fp8_quant
    from kcheck.kernels.rms_norm import rms_norm

    if "scale" not in inputs:
        return None
    x, w, eps, q, s = inputs["x"], inputs["weight"], inputs["eps"], inputs["out"], inputs["scale"]
    tmp = torch.empty_like(x)
    return lambda: per_token_fp8_quant(rms_norm(x, w, eps, out=tmp), out=q, scale=s)


def _mover(inputs: dict):
    """The fused op's bytes in its pattern, without its arithmetic (the ceiling it is held to)."""
    from kcheck.kernels._movers import row_mover

    return row_mover(inputs["x"], inputs["weight"], inputs["out"], inputs.get("scale"))


CASES = (
    *rms.ROW_CASES,
    Case("zero-row", "an all-zero row: y = 0, and the scale's lower bound keeps q finite", {"tokens": 6, "hidden": 4096}, {"zero_row": True}),
    Case("static", "a given per-tensor scale of 2/448: no scales written, the 5% of |y| beyond 2 saturate at ±448", {"tokens": 37, "hidden": 4096}, {"static": True}),
    Case("largest", "largest benchmark shape, T=16384", {"tokens": 16384, "hidden": 4096}, large=True),
    Case("largest-static", "largest benchmark shape with a given per-tensor scale", {"tokens": 16384, "hidden": 4096}, {"static": True}, large=True),
)

SPEC = KernelSpec(
    name="rms_norm_fp8_quant",
    impl=rms_norm_fp8_quant,
    reference=reference,
    make_inputs=make_inputs,
    cases=CASES,
    bench_shapes=tuple({"tokens": t, **QWEN3_8B} for t in TOKENS),
    tolerances=TOLERANCES,
    bytes=lambda s, dt: s["tokens"] * s["hidden"] * (dt.itemsize + 1) + 4 * s["tokens"] + s["hidden"] * dt.itemsize,
    flops=lambda s: 7 * s["tokens"] * s["hidden"],
    catalog=(
        "gemm/fp8-per-token-quantization", "norm-rope/rmsnorm-roofline", "hardware/fp8-formats",
        "triton-cuda/fp32-accumulation", "triton-cuda/int64-offsets", "triton-cuda/masks-on-tail-blocks",
        "triton-cuda/constexpr-block-sizes", "triton-cuda/autotune-keys", "triton-cuda/declared-fallbacks",
    ),
    fallbacks=("dtype not bf16/fp16/fp32", "not 2-D with a unit-stride last dimension", f"hidden > {MAX_HIDDEN}",
               "compute capability below 8.9", "no Triton backend for the device"),
    out_args=("out", "scale"),
    readout=readout,
    peers={"unfused": _unfused},
    other_peers={"mover": _mover},
    min_capability=MIN_CAPABILITY,
)
