"""SiLU-and-mul, the gated MLP activation: ``out = silu(x[:, :I]) * x[:, I:]`` for x of shape [T, 2I].

``silu(g) = g · sigmoid(g)``, evaluated in fp32 and rounded once on store
(triton-cuda/fp32-accumulation). bytes = 3·T·I·s (read gate and up, write out); FLOPs ≈ 5·T·I
plus one exponential per element: purely memory-bound (moe/silu-and-mul-activation).

Catalog: moe/silu-and-mul-activation, triton-cuda/int64-offsets, triton-cuda/masks-on-tail-blocks,
triton-cuda/constexpr-block-sizes, triton-cuda/autotune-keys, triton-cuda/declared-fallbacks.

Declared fallbacks (to :func:`reference`, announced once): dtypes other than bf16/fp16/fp32,
tensors that are not 2-D with a unit-stride last dimension, an odd last dimension, devices
without a Triton backend.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kcheck.kernels._launch import device_reason, fallback, token_bucket, tuning
from kcheck.kernels.harness import Case, KernelSpec
from kcheck.kernels.rms_norm import SUPPORTED_DTYPES, TOKENS, TOLERANCES


CANDIDATES = (
    triton.Config({"BLOCK_I": 2048}, num_warps=8),
    triton.Config({"BLOCK_I": 512}, num_warps=2),
    triton.Config({"BLOCK_I": 1024}, num_warps=4),
    triton.Config({"BLOCK_I": 1024}, num_warps=8),
    triton.Config({"BLOCK_I": 2048}, num_warps=4),
    triton.Config({"BLOCK_I": 4096}, num_warps=8),
    triton.Config({"BLOCK_I": 4096}, num_warps=16),
    triton.Config({"BLOCK_I": 8192}, num_warps=16),
)
"""Columns per program and warps; the first is the interpreter's."""

PINS = {1: {"BLOCK_I": 1024, "num_warps": 8}, 64: {"BLOCK_I": 1024, "num_warps": 8},
        1024: {"BLOCK_I": 2048, "num_warps": 4}}
"""Columns per program and warps by token bucket up to 1024 tokens, from sweeps on an H200: at T=1, 32
and 256 the candidates are within 0.07 us of each other (2026-12-02, three rounds of 200 timings), and
timings of a few microseconds differ by less than their noise, so the autotuner's pick there
depended on the call that tuned the bucket. Up to 64 tokens, 8 warps (four elements a thread)
were one event tick (0.03 us) ahead of 4 warps at T=1 and 32 in 15 interleaved rounds
(2026-12-03, ``benchmarks/kernels_variants.py --round 6``), level with torch.compile at T=1. (Until
this pin was checked against the candidates, 1024 columns on 8 warps was not among them, and the
results run of 3 Dec autotuned these two buckets instead: 2048 columns on 8 warps at T=1.)"""


@triton.autotune(
    **tuning(CANDIDATES, PINS),
    key=["I", "token_bucket"],
)
@triton.jit
def _silu_and_mul_kernel(
    x_ptr,  # [M, 2I]: gate in the first half of each row, up in the second
    out_ptr,  # [M, I]
    stride_xm,  # elements between rows of x
    stride_om,  # elements between rows of out
    token_bucket,  # autotune key only: the token-count regime
    I: tl.constexpr,  # intermediate size: a constant, so the block count divides by a constant
    BLOCK_I: tl.constexpr,  # columns per program
):
    # A 1-D grid walking each row's column blocks in order: programs that run together read
    # neighbouring addresses. A 2-D grid with rows fastest strides across rows: Nsight Compute
    # timed it at 283.6 us against 272.7 us at T=16384 on an H200.
    BLOCKS: tl.constexpr = (I + BLOCK_I - 1) // BLOCK_I
    pid = tl.program_id(0)
    row = (pid // BLOCKS).to(tl.int64)  # int64: row * stride exceeds 2^31 at T=87382 for I=12288
    cols = (pid % BLOCKS) * BLOCK_I + tl.arange(0, BLOCK_I)
    x_row = x_ptr + row * stride_xm
    o_row = out_ptr + row * stride_om
    if I % BLOCK_I == 0:  # no tail block: no masks
        g = tl.load(x_row + cols).to(tl.float32)
        u = tl.load(x_row + I + cols).to(tl.float32)
    else:
        g = tl.load(x_row + cols, mask=cols < I, other=0.0).to(tl.float32)
        u = tl.load(x_row + I + cols, mask=cols < I, other=0.0).to(tl.float32)
    # fp32 sigmoid: exp of a bf16 argument would lose the gate's low bits.
    y = (g * tl.sigmoid(g) * u).to(out_ptr.dtype.element_ty)
    if I % BLOCK_I == 0:
        tl.store(o_row + cols, y)
    else:
        tl.store(o_row + cols, y, mask=cols < I)


def reference(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Plain torch, upcast to fp32; returns a new tensor."""
    g, u = x.float().chunk(2, dim=-1)
    return (torch.nn.functional.silu(g) * u).to(x.dtype)


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``silu(x[:, :I]) * x[:, I:]`` for x of shape [T, 2I] (any row stride), into ``out`` [T, I]."""
    if x.shape[-1] % 2:
        raise ValueError(f"silu_and_mul: last dimension {x.shape[-1]} of x is odd; expected [T, 2I]")
    I = x.shape[-1] // 2
    if out is None:
        out = torch.empty(*x.shape[:-1], I, dtype=x.dtype, device=x.device)
    elif out.shape != (*x.shape[:-1], I) or out.dtype != x.dtype:
        raise ValueError(f"silu_and_mul: out {tuple(out.shape)} {out.dtype} does not match x {tuple(x.shape)} {x.dtype}")
    reason = (
        f"dtype {x.dtype}" if x.dtype not in SUPPORTED_DTYPES
        else "not 2-D with a unit-stride last dimension" if x.dim() != 2 or x.stride(-1) != 1 or out.stride(-1) != 1
        else device_reason(x, (8, 0))
    )
    if reason is not None:
        fallback("silu_and_mul", reason)
        return out.copy_(reference(x))
    M = x.shape[0]
    grid = lambda meta: (M * triton.cdiv(I, meta["BLOCK_I"]),)  # noqa: E731
    _silu_and_mul_kernel[grid](x, out, x.stride(0), out.stride(0), token_bucket(M), I=I)
    return out


# --------------------------------------------------------------------------- specification


def make_inputs(shape, dtype, device, gen, row_pad: int = 0, scale: float = 1.0) -> dict:
    """x ~ N(0, 1) with the gate half scaled by ``scale``; rows padded by ``row_pad``."""
    T, I = shape["tokens"], shape["intermediate"]
    x = torch.randn(T, 2 * I + row_pad, generator=gen, device=device)
    x[:, :I] *= scale
    x = x.clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max).to(dtype)[:, : 2 * I]
    return {"x": x, "out": torch.empty(T, I, dtype=dtype, device=device)}


def _liger(inputs: dict):
    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except ImportError:
        return None
    # Liger takes gate and up as two tensors (the Hugging Face layout); split them outside the timing.
    g, u = (t.contiguous() for t in inputs["x"].chunk(2, dim=-1))
    return lambda: LigerSiLUMulFunction.apply(g, u)


SPEC = KernelSpec(
    name="silu_and_mul",
    impl=silu_and_mul,
    reference=reference,
    make_inputs=make_inputs,
    cases=(
        Case("one-token", "decode step: one row, T=1", {"tokens": 1, "intermediate": 12288}),
        Case("odd-intermediate", "I not a multiple of any block: masked tail block, gate/up halves unaligned", {"tokens": 6, "intermediate": 1000 + 7}),
        Case("small-intermediate", "I smaller than one block", {"tokens": 9, "intermediate": 24}),
        Case("odd-stride", "rows of x padded by 5 elements: non-contiguous, unaligned rows", {"tokens": 5, "intermediate": 12288}, {"row_pad": 5}),
        Case("near-limit", "gate of magnitude 1e4: sigmoid saturates to 0 and 1, exp overflows in the tail", {"tokens": 4, "intermediate": 4096}, {"scale": 1e4}),
        Case("largest", "largest benchmark shape, T=16384", {"tokens": 16384, "intermediate": 12288}, large=True),
    ),
    bench_shapes=tuple({"tokens": t, "intermediate": 12288} for t in TOKENS),
    tolerances=TOLERANCES,
    bytes=lambda s, dt: 3 * s["tokens"] * s["intermediate"] * dt.itemsize,
    flops=lambda s: 5 * s["tokens"] * s["intermediate"],
    catalog=(
        "moe/silu-and-mul-activation", "triton-cuda/fp32-accumulation", "triton-cuda/int64-offsets",
        "triton-cuda/masks-on-tail-blocks", "triton-cuda/constexpr-block-sizes", "triton-cuda/autotune-keys",
        "triton-cuda/declared-fallbacks",
    ),
    fallbacks=("dtype not bf16/fp16/fp32", "not 2-D with a unit-stride last dimension", "no Triton backend for the device"),
    out_args=("out",),
    peers={"liger": _liger},
)
