"""SiLU-and-mul straight to FP8: ``q, scale = per_token_fp8_quant(silu(x[:, :I]) * x[:, I:])`` in one pass.

For x of shape [T, 2I]: ``y = silu(g) · u`` with ``silu(g) = g · sigmoid(g)`` in fp32, rounded to
x's dtype as ``silu_and_mul`` stores it, then quantized as ``per_token_fp8_quant`` does: dynamic
per-token scales ``max(max|y[t, :]| / 448, 1 / (448·512))``, or a division by one given
``static_scale``; the division correctly rounded (gemm/fp8-per-token-quantization). A per-token
scale needs the whole row's maximum before any value is written, so each program holds whole
rows (``I`` up to 32768), as a power-of-two head and a tail tile (8192 + 4096 columns at I=12288),
where ``silu_and_mul`` tiles a row over several programs. Against the
upcast torch reference the e4m3 values are within one e4m3 step and the scales within one ulp of
the dtype (``rms_norm_fp8_quant.TOLERANCES``).

bytes = 2·T·I·s + T·I + 4·T (read gate and up, write q and the scales): 5 bytes an element of
the output in bf16 where the unfused pair moves 9 (SiLU-and-mul reads 4 and writes 2, the
quantization reads 2 and writes 1); FLOPs ≈ 8·T·I plus one exponential an element
(moe/silu-and-mul-activation).

Catalog: moe/silu-and-mul-activation, gemm/fp8-per-token-quantization, hardware/fp8-formats,
triton-cuda/fp32-accumulation, triton-cuda/int64-offsets, triton-cuda/masks-on-tail-blocks,
triton-cuda/constexpr-block-sizes, triton-cuda/autotune-keys, triton-cuda/declared-fallbacks.

Declared fallbacks (to :func:`reference`, announced once): input dtypes other than
bf16/fp16/fp32, tensors that are not 2-D with a unit-stride last dimension, intermediate sizes
over 32768, GPUs below compute capability 8.9 (no e4m3 conversion), devices without a Triton
backend.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kcheck.kernels import silu_and_mul as silu
from kcheck.kernels._launch import device_reason, fallback, row_grid, token_bucket, tuning
from kcheck.kernels.harness import Case, KernelSpec
from kcheck.kernels.per_token_fp8_quant import FP8, FP8_MAX, MIN_CAPABILITY, round_like, row_scales, to_e4m3, widen
from kcheck.kernels.rms_norm import SUPPORTED_DTYPES, TOKENS
from kcheck.kernels.rms_norm_fp8_quant import TOLERANCES, _quantize, from_reference, outputs, quant_meta, readout, scale_input

MAX_INTERMEDIATE = 32768
"""Whole rows are held in registers: 2 x 32768 fp32 values over a program's warps at most."""

GATED_CANDIDATES = (
    triton.Config({"ROWS": 1}, num_warps=16),
    triton.Config({"ROWS": 1}, num_warps=8),
    triton.Config({"ROWS": 1}, num_warps=4),
    triton.Config({"ROWS": 1}, num_warps=32),
    triton.Config({"ROWS": 2}, num_warps=16),
    triton.Config({"ROWS": 2}, num_warps=32),
)
"""Rows per program and warps; the first is the interpreter's. At I=12288 a row is 8192 + 4096
columns of gate and of up in registers: 24 values of each a thread at 16 warps."""

GATED_PINS = {bucket: {"ROWS": 1, "num_warps": 32} for bucket in (1, 64, 1024)}
"""The small token buckets' configuration (see ``_launch.pinned``): one row on 32 warps. In a sweep of
every candidate on an H200 (2026-12-04, 5 interleaved rounds, ``benchmarks/kernels_fused_fp8.py``;
``results/variants/h200_fused_fp8_candidates.json``) it was the fastest at T=1, 32 and 256 (6.82,
7.10 and 10.27 us; 16 warps took 7.17 at T=1, and 7.28 in the results run that followed, where our
unfused pair took 7.23)."""


@triton.jit
def sigmoid(g, INTERPRETED: tl.constexpr):
    """``tl.sigmoid(g)`` for fp32 ``g``, bit for bit as Triton 3.6 computes it on sm_90, in 5
    instructions instead of 12 (on a GPU; under the interpreter, ``tl.sigmoid`` itself).

    Triton: ``1 / (1 + exp(-g))`` with ``exp(v) = ex2.approx(v · log2 e)`` keeping subnormal
    results (three more instructions) and the division as ``div.full.f32`` (a denominator over
    2^126 and the numerator scaled by 1/4 first: four more). Here: ``ex2.approx.ftz`` of
    ``g · -log2 e`` (a result under 2^-126 vanishes in ``1 + e`` either way; ``-g · c`` is
    ``g · -c`` exactly), ``(1 + e) / 4`` in one fma (a power of two on a normal number: exact), its
    ``rcp.approx``, times 1/4 (exact while the reciprocal is normal, i.e. for 1 + e <= 2^126,
    and beyond what div.full's scaled path gives). Checked on an H200 for every non-NaN bf16 gate
    (65,282 values, ``benchmarks/kernels_fused_fp8_lean.py``): ``g · sigmoid(g)`` equal in all bits.
    """
    if INTERPRETED:
        return tl.sigmoid(g)
    return tl.inline_asm_elementwise(
        """{
        .reg .f32 t;
        mul.rn.f32 t, $1, 0fBFB8AA3B;
        ex2.approx.ftz.f32 t, t;
        fma.rn.f32 t, t, 0f3E800000, 0f3E800000;
        rcp.approx.ftz.f32 t, t;
        mul.rn.f32 $0, t, 0f3E800000;
        }""",
        "=r,r", [g], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _silu_mul(x_row, cols, mask, I, INTERPRETED: tl.constexpr, EVEN: tl.constexpr):
    """silu(gate) · up for the columns ``cols`` of the rows at ``x_row``, rounded to the input dtype
    as ``silu_and_mul`` stores it, back in fp32; unmasked when ``EVEN`` (every lane in bounds)."""
    if EVEN:
        g = widen(tl.load(x_row + cols), INTERPRETED)
        u = widen(tl.load(x_row + I + cols), INTERPRETED)
    else:
        g = widen(tl.load(x_row + cols, mask=mask, other=0.0), INTERPRETED)
        u = widen(tl.load(x_row + I + cols, mask=mask, other=0.0), INTERPRETED)
    # fp32 sigmoid, the one silu_and_mul computes: the quantization sees its values.
    return round_like(g * sigmoid(g, INTERPRETED) * u, x_row, INTERPRETED)


@triton.autotune(
    **tuning(GATED_CANDIDATES, GATED_PINS),
    key=["I", "token_bucket", "STATIC"],
)
@triton.jit
def _silu_and_mul_fp8_quant_kernel(
    x_ptr,  # [M, 2I]: gate in the first half of each row, up in the second
    q_ptr,  # [M, I] float8_e4m3fn output
    s_ptr,  # [M] fp32 scales written (dynamic) or the one fp32 scale read (static)
    stride_xm,  # elements between rows of x
    stride_qm,  # elements between rows of q
    M,  # rows (tokens)
    I,  # intermediate size
    token_bucket,  # autotune key only: the token-count regime
    FP8_MAX: tl.constexpr,  # largest finite e4m3 value
    MIN_SCALE: tl.constexpr,  # lower bound on a dynamic scale
    STATIC: tl.constexpr,  # one given scale instead of one computed per row
    ROUND_IN_FP32: tl.constexpr,  # round to the e4m3 grid before the cast, plain tl.sigmoid (interpreter only)
    BLOCK_A: tl.constexpr,  # the largest power of two <= I: the head of each row, unmasked columns
    BLOCK_B: tl.constexpr,  # next power of two >= I - BLOCK_A (0: no tail): the rest of the row
    EVEN: tl.constexpr,  # I == BLOCK_A + BLOCK_B: with one row a program, no lane is masked
    ROWS: tl.constexpr,  # rows per program
):
    # A whole row is two register tiles, a power-of-two head and a masked tail, rather than one tile
    # of next_power_of_2(I) columns: at I=12288 that is 8192 + 4096 columns with none masked, where
    # one 16384-wide tile computes a quarter of its sigmoids and divisions on masked lanes.
    # int64 row offsets: row * stride exceeds 2^31 at T=87382 for I=12288.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]
    x_row = x_ptr + rows * stride_xm
    q_row = q_ptr + rows * stride_qm
    # Unmasked when one row a program fills both tiles (8192 + 4096 at I=12288): no zeroed registers
    # and predicates for the 16-byte loads and stores.
    even = EVEN and ROWS == 1
    cols_a = tl.arange(0, BLOCK_A)[None, :]
    mask_a = (rows < M) & (cols_a < I)
    y_a = _silu_mul(x_row, cols_a, mask_a, I, ROUND_IN_FP32, even)
    # The tail is read before either maximum is reduced: reduced in between (as it was up to
    # issue 26's second pass), the barriers of the head's reduction held the tail's loads back, and
    # each program waited on memory twice.
    if BLOCK_B > 0:
        cols_b = BLOCK_A + tl.arange(0, BLOCK_B)[None, :]
        mask_b = (rows < M) & (cols_b < I)
        y_b = _silu_mul(x_row, cols_b, mask_b, I, ROUND_IN_FP32, even)
        amax = tl.maximum(tl.max(tl.abs(y_a), axis=1), tl.max(tl.abs(y_b), axis=1))
    else:
        amax = tl.max(tl.abs(y_a), axis=1)
    scale, r = row_scales(amax, s_ptr, rows, M, FP8_MAX, MIN_SCALE, STATIC)
    if even:
        tl.store(q_row + cols_a, to_e4m3(y_a, scale, r, FP8_MAX, ROUND_IN_FP32).to(q_ptr.dtype.element_ty))
    else:
        tl.store(q_row + cols_a, to_e4m3(y_a, scale, r, FP8_MAX, ROUND_IN_FP32).to(q_ptr.dtype.element_ty), mask=mask_a)
    if BLOCK_B > 0:
        if even:
            tl.store(q_row + cols_b, to_e4m3(y_b, scale, r, FP8_MAX, ROUND_IN_FP32).to(q_ptr.dtype.element_ty))
        else:
            tl.store(q_row + cols_b, to_e4m3(y_b, scale, r, FP8_MAX, ROUND_IN_FP32).to(q_ptr.dtype.element_ty),
                     mask=mask_b)


def split(I: int) -> tuple[int, int]:
    """A row of ``I`` columns as a power-of-two head and a power-of-two tile holding the rest (0 if none)."""
    head = 1 << (I.bit_length() - 1)
    return head, (triton.next_power_of_2(I - head) if I > head else 0)


def reference(x, out=None, scale=None, static_scale=None):
    """The unfused reference, plain torch: ``silu_and_mul``'s then the FP8 quantization; returns new
    ``(q, scale)`` (``static_scale`` itself when given)."""
    return _quantize(silu.reference(x), static_scale)


def silu_and_mul_fp8_quant(
    x: torch.Tensor,
    out: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    static_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``silu(x[:, :I]) * x[:, I:]`` for x [T, 2I] (any row stride) quantized to e4m3; returns
    ``(q [T, I], scale)``: the per-token scales [T, 1], or ``static_scale`` when one is given."""
    if x.dim() != 2 or x.shape[-1] % 2:
        raise ValueError(f"silu_and_mul_fp8_quant: x must be [T, 2I], got {tuple(x.shape)}")
    I = x.shape[1] // 2
    out, scale = outputs("silu_and_mul_fp8_quant", x, I, out, scale, static_scale)
    reason = (
        f"dtype {x.dtype}" if x.dtype not in SUPPORTED_DTYPES
        else "not 2-D with a unit-stride last dimension" if x.stride(-1) != 1 or out.stride(-1) != 1
        else f"intermediate size {I} > {MAX_INTERMEDIATE}" if I > MAX_INTERMEDIATE
        else device_reason(x, MIN_CAPABILITY)
    )
    if reason is not None:
        fallback("silu_and_mul_fp8_quant", reason)
        return from_reference(out, scale, static_scale, *reference(x, static_scale=static_scale))
    M = x.shape[0]
    _silu_and_mul_fp8_quant_kernel[row_grid(M)](
        x, out, scale, x.stride(0), out.stride(0), M, I, token_bucket(M),
        **quant_meta(static_scale), BLOCK_A=split(I)[0], BLOCK_B=split(I)[1], EVEN=sum(split(I)) == I,
    )
    return out, scale


# --------------------------------------------------------------------------- specification


def make_inputs(shape, dtype, device, gen, row_pad: int = 0, scale: float = 1.0, static: bool = False) -> dict:
    """x ~ N(0, 1) with the gate half scaled by ``scale`` (both halves when ``scale`` < 1) and rows
    padded by ``row_pad``; with ``static``, a per-tensor scale of 1/448 (|y| beyond 1 saturates)."""
    T, I = shape["tokens"], shape["intermediate"]
    x = torch.randn(T, 2 * I + row_pad, generator=gen, device=device)
    x[:, :I] *= scale
    if scale < 1:
        x[:, I:] *= scale
    x = x.clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max).to(dtype)[:, : 2 * I]
    return {"x": x, "out": torch.empty(T, I, dtype=FP8, device=device), **scale_input(T, device, static, 1.0 / FP8_MAX)}


def _unfused(inputs: dict):
    """Our two kernels back to back, the bf16 intermediate in a buffer made once outside the timing."""
    from kcheck.kernels.per_token_fp8_quant import per_token_fp8_quant

    if "scale" not in inputs:
        return None
    x, q, s = inputs["x"], inputs["out"], inputs["scale"]
    tmp = torch.empty(x.shape[0], x.shape[1] // 2, dtype=x.dtype, device=x.device)
    return lambda: per_token_fp8_quant(silu.silu_and_mul(x, out=tmp), out=q, scale=s)


def _mover(inputs: dict):
    """The fused op's bytes in its pattern (whole rows of both halves read, e4m3 and one fp32 a row
    written), without its arithmetic."""
    from kcheck.kernels._movers import gated_mover

    return gated_mover(inputs["x"], inputs["out"], inputs.get("scale"))


QWEN3_8B = {"intermediate": 12288}

SPEC = KernelSpec(
    name="silu_and_mul_fp8_quant",
    impl=silu_and_mul_fp8_quant,
    reference=reference,
    make_inputs=make_inputs,
    cases=(
        Case("one-token", "decode step: one row, T=1", {"tokens": 1, "intermediate": 12288}),
        Case("tail-rows", "T not a multiple of the rows per program: masked tail rows", {"tokens": 37, "intermediate": 1024}),
        Case("odd-intermediate", "I not a power of two: masked tail columns, gate/up halves unaligned", {"tokens": 6, "intermediate": 1000 + 7}),
        Case("small-intermediate", "I smaller than a warp's vector width", {"tokens": 9, "intermediate": 24}),
        Case("odd-stride", "rows of x padded by 5 elements: non-contiguous, unaligned rows", {"tokens": 5, "intermediate": 12288}, {"row_pad": 5}),
        Case("near-limit", "gate of magnitude 1e3: sigmoid saturates to 0 and 1, exp overflows in the tail", {"tokens": 4, "intermediate": 4096}, {"scale": 1e3}),
        Case("tiny", "|x| ~ 1e-3: |y| ~ 1e-6, scales at their lower bound, e4m3 subnormals", {"tokens": 4, "intermediate": 4096}, {"scale": 1e-3}),
        Case("static", "a given per-tensor scale of 1/448: no scales written, |y| beyond 1 saturates", {"tokens": 37, "intermediate": 1024}, {"static": True}),
        Case("largest", "largest benchmark shape, T=16384", {"tokens": 16384, "intermediate": 12288}, large=True),
        Case("largest-static", "largest benchmark shape with a given per-tensor scale", {"tokens": 16384, "intermediate": 12288}, {"static": True}, large=True),
    ),
    bench_shapes=tuple({"tokens": t, **QWEN3_8B} for t in TOKENS),
    tolerances=TOLERANCES,
    bytes=lambda s, dt: s["tokens"] * s["intermediate"] * (2 * dt.itemsize + 1) + 4 * s["tokens"],
    flops=lambda s: 8 * s["tokens"] * s["intermediate"],
    catalog=(
        "moe/silu-and-mul-activation", "gemm/fp8-per-token-quantization", "hardware/fp8-formats",
        "triton-cuda/fp32-accumulation", "triton-cuda/int64-offsets", "triton-cuda/masks-on-tail-blocks",
        "triton-cuda/constexpr-block-sizes", "triton-cuda/autotune-keys", "triton-cuda/declared-fallbacks",
    ),
    fallbacks=("dtype not bf16/fp16/fp32", "not 2-D with a unit-stride last dimension",
               f"intermediate > {MAX_INTERMEDIATE}", "compute capability below 8.9", "no Triton backend for the device"),
    out_args=("out", "scale"),
    readout=readout,
    peers={"unfused": _unfused},
    other_peers={"mover": _mover},
    min_capability=MIN_CAPABILITY,
)
