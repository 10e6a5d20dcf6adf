"""Dynamic per-token FP8 (e4m3) quantization, the activation side of an FP8 GEMM.

For each row t: ``scale[t] = max(max_j |x[t, j]| / 448, 1 / (448·512))`` and
``q[t, :] = clamp(x[t, :] / scale[t], −448, 448)`` rounded to float8_e4m3fn, so that
``q · scale ≈ x`` (gemm/fp8-per-token-quantization). 448 is e4m3's largest finite value; the
lower bound on the scale keeps an all-zero row finite. The maximum and the division run in
fp32, the division correctly rounded so the result matches torch bit for bit. On a GPU the
hardware conversion rounds to e4m3 (nearest, ties to even). Triton 3.9's CPU interpreter rounds
that conversion half-up without carrying into the exponent (126.7 becomes 64, not 128), so under
``TRITON_INTERPRET=1`` the kernel first rounds on the e4m3 grid in fp32 and the cast is exact.

bytes = T·H·s + T·H + 4·T (read x, write q, write the fp32 scales); FLOPs ≈ 3·T·H.

Catalog: gemm/fp8-per-token-quantization, triton-cuda/fp32-accumulation, triton-cuda/int64-offsets,
triton-cuda/masks-on-tail-blocks, triton-cuda/constexpr-block-sizes, triton-cuda/autotune-keys,
triton-cuda/declared-fallbacks.

Declared fallbacks (to :func:`reference`, announced once): input dtypes other than
bf16/fp16/fp32, tensors that are not 2-D with a unit-stride last dimension, hidden sizes over
65536, GPUs below compute capability 8.9 (no e4m3 conversion), devices without a Triton backend.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kcheck.kernels._launch import INTERPRET, ROWS_PINS, ROW_CANDIDATES, device_reason, fallback, token_bucket, tuning
from kcheck.kernels.harness import Case, KernelSpec, Tolerance
from kcheck.kernels.rms_norm import MAX_HIDDEN, QWEN3_8B, SUPPORTED_DTYPES, TOKENS

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
MIN_SCALE = 1.0 / (FP8_MAX * 512.0)
MIN_CAPABILITY = (8, 9)


@triton.jit
def _round_to_e4m3(v):
    """Round fp32 values in [-448, 448] to the nearest e4m3 value, ties to even, in fp32 arithmetic."""
    a = tl.abs(v)
    # e4m3 keeps 3 mantissa bits: the spacing at |v| in [2^e, 2^(e+1)) is 2^(e-3), and 2^-9 below 2^-6.
    e = tl.maximum(((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, -6)
    spacing = ((e - 3 + 127) << 23).to(tl.float32, bitcast=True)
    # Adding and subtracting 1.5·2^23 rounds to an integer, ties to even (a / spacing < 16).
    r = ((a / spacing + 12582912.0) - 12582912.0) * spacing
    return tl.where(v < 0, -r, r)


@triton.jit
def quantize_rows(x, s_ptr, rows, M, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr, STATIC: tl.constexpr,
                  ROUND_IN_FP32: tl.constexpr):
    """fp32 rows ``x`` ([ROWS, BLOCK], masked lanes 0) to e4m3 values in fp32, ready for the cast.

    Dynamic (``STATIC`` false): each row's scale, ``max(max|x| / FP8_MAX, MIN_SCALE)``, is stored
    at ``s_ptr + rows``. Static: the one fp32 scale at ``s_ptr`` is read.
    """
    scale, r = row_scales(tl.max(tl.abs(x), axis=1), s_ptr, rows, M, FP8_MAX, MIN_SCALE, STATIC)
    return to_e4m3(x, scale, r, FP8_MAX, ROUND_IN_FP32)


@triton.jit
def row_scales(amax, s_ptr, rows, M, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr, STATIC: tl.constexpr):
    """Each row's scale ([ROWS, 1]) and its reciprocal, correctly rounded, from the rows' max|x|
    (``amax``, [ROWS]): computed and stored at ``s_ptr + rows`` (dynamic), or the one scale at
    ``s_ptr`` (static). Shared by every kernel that quantizes per token, this op and the fused norm
    and activation ops, so that they all follow one scale rule."""
    if STATIC:
        scale = tl.load(s_ptr + rows * 0, mask=rows < M, other=1.0)  # the one scale, broadcast to the rows
    else:
        scale = tl.maximum(amax / FP8_MAX, MIN_SCALE)[:, None]
        tl.store(s_ptr + rows, scale, mask=rows < M)
    return scale, tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)


@triton.jit
def to_e4m3(x, scale, r, FP8_MAX: tl.constexpr, ROUND_IN_FP32: tl.constexpr):
    """``x / scale``, the quotient correctly rounded, given ``r = 1 / scale`` (correctly rounded), ready
    for the cast to e4m3, which clamps it at ±FP8_MAX (under the interpreter, clamped and rounded here)."""
    # x / scale, correctly rounded as torch's division is (an approximate one flips e4m3 rounding
    # on ties), without a correctly rounded division per element: with r = 1/scale correctly
    # rounded (one division per row), q = x·r is within an ulp, x − q·scale is exact in an fma,
    # and q + (x − q·scale)·r rounds to the correctly rounded quotient (Markstein's correction;
    # underflow aside, which e4m3 flushes to zero anyway). On an H200 at T=16384 this took the
    # kernel from 51.7 to 47.4 us (one row, 4 warps) and changed none of the 67,108,864 e4m3 values.
    # The residual as fma(q, -scale, x), the same value as fma(-q, scale, x): negating q made LLVM
    # form x·(-r) as a product of its own, one more instruction an element.
    q = x * r
    q = tl.fma(tl.fma(q, -scale, x), r, q)
    if ROUND_IN_FP32:
        q = _round_to_e4m3(tl.clamp(q, -FP8_MAX, FP8_MAX))
    # On a GPU the cast itself saturates: Triton converts fp32 to e4m3 with cvt.rn.satfinite, which
    # gives ±FP8_MAX beyond it, so a clamp here is one instruction an element for nothing.
    return q


@triton.jit
def round_like(v, like_ptr, INTERPRETED: tl.constexpr):
    """fp32 ``v`` rounded to ``like_ptr``'s element type (to nearest, ties to even) and back in fp32,
    as a kernel that stores v in that dtype leaves it. For bf16 on a GPU (not ``INTERPRETED``), two values an
    instruction (``cvt.rn.bf16x2.f32``, the same rounding as Triton's one-at-a-time ``cvt.rn.bf16.f32``)
    and back by a shift and a mask: 1.5 instructions an element instead of 2."""
    if not INTERPRETED and like_ptr.dtype.element_ty == tl.bfloat16:
        return tl.inline_asm_elementwise(
            "{ .reg .b32 t; cvt.rn.bf16x2.f32 t, $3, $2; shl.b32 $0, t, 16; and.b32 $1, t, 0xffff0000; }",
            "=r,=r,r,r", [v], dtype=tl.float32, is_pure=True, pack=2)
    return v.to(like_ptr.dtype.element_ty).to(tl.float32)


@triton.jit
def widen(v, INTERPRETED: tl.constexpr):
    """bf16 or fp16 ``v`` in fp32. For bf16 on a GPU (not ``INTERPRETED``), two values an instruction
    pair from the register that holds them both (``shl`` 16 for the low half, ``and`` 0xffff0000 for
    the high one): Triton 3.6 widens the high half with a ``prmt`` and a shift, 1.5 instructions an
    element instead of 1. The same values, bit for bit: a bf16 is the top half of its fp32."""
    if not INTERPRETED and v.dtype == tl.bfloat16:
        return tl.inline_asm_elementwise(
            "{ shl.b32 $0, $2, 16; and.b32 $1, $2, 0xffff0000; }",
            "=r,=r,r", [v], dtype=tl.float32, is_pure=True, pack=2)
    return v.to(tl.float32)


@triton.jit
def sum_and_absmax(a_sum, a_max, b_sum, b_max):
    """Combine function of one reduction that gives a row's sum and its maximum together."""
    return a_sum + b_sum, tl.maximum(a_max, b_max)


@triton.autotune(
    **tuning(ROW_CANDIDATES, ROWS_PINS),
    key=["N", "token_bucket"],
)
@triton.jit
def _per_token_fp8_quant_kernel(
    x_ptr,  # [M, N] input
    q_ptr,  # [M, N] float8_e4m3fn output
    s_ptr,  # [M] fp32 scales
    stride_xm,  # elements between rows of x
    stride_qm,  # elements between rows of q
    M,  # rows (tokens)
    N,  # hidden size
    token_bucket,  # autotune key only: the token-count regime
    FP8_MAX: tl.constexpr,  # largest finite e4m3 value
    MIN_SCALE: tl.constexpr,  # lower bound on the scale
    ROUND_IN_FP32: tl.constexpr,  # round to the e4m3 grid before the cast (interpreter only: module docstring)
    BLOCK_N: tl.constexpr,  # next power of two >= N
    ROWS: tl.constexpr,  # rows per program
):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]  # int64 row offsets
    cols = tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    x = tl.load(x_ptr + rows * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    q = quantize_rows(x, s_ptr, rows, M, FP8_MAX, MIN_SCALE, False, ROUND_IN_FP32)
    tl.store(q_ptr + rows * stride_qm + cols, q.to(q_ptr.dtype.element_ty), mask=mask)


def reference(x: torch.Tensor, out: torch.Tensor | None = None, scale: torch.Tensor | None = None):
    """Plain torch in fp32; returns new ``(q, scale)`` with scale of shape [T, 1]."""
    xf = x.float()
    s = (xf.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=MIN_SCALE)
    return (xf / s).clamp(-FP8_MAX, FP8_MAX).to(FP8), s


def per_token_fp8_quant(
    x: torch.Tensor, out: torch.Tensor | None = None, scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize each row of ``x`` [T, H] to e4m3 with its own scale; returns ``(q [T, H], scale [T, 1])``."""
    if x.dim() != 2:
        raise ValueError(f"per_token_fp8_quant: x must be [T, H], got {tuple(x.shape)}")
    out = torch.empty(x.shape, dtype=FP8, device=x.device) if out is None else out
    scale = torch.empty(x.shape[0], 1, dtype=torch.float32, device=x.device) if scale is None else scale
    if out.shape != x.shape or out.dtype != FP8:
        raise ValueError(f"per_token_fp8_quant: out {tuple(out.shape)} {out.dtype} must be {tuple(x.shape)} {FP8}")
    if scale.shape != (x.shape[0], 1) or scale.dtype != torch.float32:
        raise ValueError(f"per_token_fp8_quant: scale {tuple(scale.shape)} {scale.dtype} must be ({x.shape[0]}, 1) float32")
    reason = (
        f"dtype {x.dtype}" if x.dtype not in SUPPORTED_DTYPES
        else "last dimension not unit-stride" if x.stride(-1) != 1 or out.stride(-1) != 1
        else f"hidden size {x.shape[1]} > {MAX_HIDDEN}" if x.shape[1] > MAX_HIDDEN
        else device_reason(x, MIN_CAPABILITY)
    )
    if reason is not None:
        fallback("per_token_fp8_quant", reason)
        q, s = reference(x)
        return out.copy_(q), scale.copy_(s)
    M, N = x.shape
    grid = lambda meta: (triton.cdiv(M, meta["ROWS"]),)  # noqa: E731
    _per_token_fp8_quant_kernel[grid](
        x, out, scale, x.stride(0), out.stride(0), M, N, token_bucket(M),
        FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE, ROUND_IN_FP32=INTERPRET, BLOCK_N=triton.next_power_of_2(N),
    )
    return out, scale


# --------------------------------------------------------------------------- specification


def make_inputs(shape, dtype, device, gen, row_pad: int = 0, scale: float = 1.0, zero_row: bool = False) -> dict:
    """x ~ N(0, scale²) with rows padded by ``row_pad``; optionally one all-zero row."""
    T, H = shape["tokens"], shape["hidden"]
    x = torch.randn(T, H + row_pad, generator=gen, device=device) * scale
    if zero_row:
        x[T // 2] = 0
    x = x.clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max).to(dtype)[:, :H]
    return {"x": x, "out": torch.empty(T, H, dtype=FP8, device=device),
            "scale": torch.empty(T, 1, dtype=torch.float32, device=device)}


def readout(outputs):
    """Compare the e4m3 values themselves (in units of each row's scale) and the scales."""
    q, s = outputs
    return q.float(), s


# One e4m3 ulp is 1/8 relative (2^-9 absolute below the normal range); a rounding tie that
# lands differently costs at most that, and only for rare elements.
FP8_TOLERANCE = Tolerance(rel=1e-2, atol=2.0**-9, rtol=0.13)

SPEC = KernelSpec(
    name="per_token_fp8_quant",
    impl=per_token_fp8_quant,
    reference=reference,
    make_inputs=make_inputs,
    cases=(
        Case("one-token", "decode step: a single program, T=1", {"tokens": 1, "hidden": 4096}),
        Case("tail-rows", "T not a multiple of the rows per program: masked tail rows", {"tokens": 37, "hidden": 4096}),
        Case("odd-hidden", "hidden size not a power of two: masked tail columns", {"tokens": 5, "hidden": 5120 + 17}),
        Case("zero-row", "an all-zero row: the scale's lower bound keeps q finite", {"tokens": 6, "hidden": 4096}, {"zero_row": True}),
        Case("odd-stride", "rows of x padded by 3 elements: non-contiguous, unaligned rows", {"tokens": 7, "hidden": 4096}, {"row_pad": 3}),
        Case("near-limit", "|x| near the fp16 maximum: large scales, values at ±448 after scaling", {"tokens": 4, "hidden": 4096}, {"scale": 2e4}),
        Case("tiny", "|x| ~ 1e-6: scales near the lower bound, e4m3 subnormals", {"tokens": 4, "hidden": 4096}, {"scale": 1e-6}),
        Case("largest", "largest benchmark shape, T=16384", {"tokens": 16384, "hidden": 4096}, large=True),
    ),
    bench_shapes=tuple({"tokens": t, **QWEN3_8B} for t in TOKENS),
    tolerances={"bfloat16": FP8_TOLERANCE, "float16": FP8_TOLERANCE},
    bytes=lambda s, dt: s["tokens"] * s["hidden"] * (dt.itemsize + 1) + 4 * s["tokens"],
    flops=lambda s: 3 * s["tokens"] * s["hidden"],
    catalog=(
        "gemm/fp8-per-token-quantization", "triton-cuda/fp32-accumulation", "triton-cuda/int64-offsets",
        "triton-cuda/masks-on-tail-blocks", "triton-cuda/constexpr-block-sizes", "triton-cuda/autotune-keys",
        "triton-cuda/declared-fallbacks",
    ),
    fallbacks=("dtype not bf16/fp16/fp32", "last dimension not unit-stride", f"hidden > {MAX_HIDDEN}",
               "compute capability below 8.9", "no Triton backend for the device"),
    out_args=("out", "scale"),
    readout=readout,
    min_capability=MIN_CAPABILITY,
)
