"""Rotary position embedding applied in place to query and key, NeoX and GPT-J layouts.

For token t at position p = positions[t], with ``cos, sin = cos_sin_cache[p, :D/2], cos_sin_cache[p, D/2:]``,
each pair (a, b) of a head becomes ``(a·cos_i − b·sin_i, b·cos_i + a·sin_i)``. The pairs are
(i, i + D/2) in the NeoX layout and (2i, 2i + 1) in the GPT-J layout
(norm-rope/rotary-embedding-layouts). Query and key may have different head counts (grouped
queries), any token and head strides (for example views into a fused QKV projection), and are
rotated in place unless ``query_out``/``key_out`` are given. Products and sums in fp32.

bytes = 2·T·(Hq + Hk)·D·s + T·D·c + 8·T (q and k read and written, one cache row of D
elements of size c per token, int64 positions); FLOPs ≈ 3·T·(Hq + Hk)·D.

Catalog: norm-rope/rotary-embedding-layouts, triton-cuda/fp32-accumulation, triton-cuda/int64-offsets,
triton-cuda/masks-on-tail-blocks, triton-cuda/constexpr-block-sizes, triton-cuda/autotune-keys,
triton-cuda/declared-fallbacks.

Declared fallbacks (to :func:`reference`, announced once): dtypes other than bf16/fp16/fp32,
a head dimension that is not unit-stride, a rotary dimension smaller than the head size
(partial rotary), devices without a Triton backend.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kcheck.kernels._launch import SMALL_BUCKETS, device_reason, fallback, token_bucket, tuning
from kcheck.kernels.harness import Case, KernelSpec
from kcheck.kernels.rms_norm import SUPPORTED_DTYPES, TOKENS, TOLERANCES


@triton.jit
def _rotate_heads(x_ptr, o_ptr, stride_h, stride_oh, h0, H, pos_ptr, cache_ptr, stride_cache,
                  HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, HEADS: tl.constexpr, IS_NEOX: tl.constexpr):
    """Rotate heads h0 .. h0 + HEADS - 1 (those below H) of one token: x_ptr and o_ptr point at its row,
    pos_ptr at its position."""
    h = h0 + tl.arange(0, HEADS)[:, None]
    i = tl.arange(0, BLOCK_HALF)[None, :]
    mask = (h < H) & (i < HALF)
    # NeoX pairs element i with i + D/2; GPT-J pairs 2i with 2i + 1.
    first = h * stride_h + (i if IS_NEOX else i * 2)
    second = first + (HALF if IS_NEOX else 1)
    # The q/k loads go out before the cache loads, whose address waits on the position. With the
    # cache loads first, 16 heads at 4 warps took 92.4 us at T=16384 on an H200 (the one-token
    # kernel 86.9 in that run); in this order 84.6 (one-token kernel 87.0), in another run 87.7.
    a = tl.load(x_ptr + first, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_ptr + second, mask=mask, other=0.0).to(tl.float32)
    pos = tl.load(pos_ptr).to(tl.int64)
    cos = tl.load(cache_ptr + pos * stride_cache + i, mask=i < HALF, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * stride_cache + HALF + i, mask=i < HALF, other=0.0).to(tl.float32)
    ofirst = h * stride_oh + (i if IS_NEOX else i * 2)
    osecond = ofirst + (HALF if IS_NEOX else 1)
    ty = o_ptr.dtype.element_ty
    tl.store(o_ptr + ofirst, (a * cos - b * sin).to(ty), mask=mask)
    tl.store(o_ptr + osecond, (b * cos + a * sin).to(ty), mask=mask)


CANDIDATES = (
    # Heads per program and warps. Swept on an H200 at T=16384 (2026-12-02, median of 3 rounds):
    # 32 heads at 4 warps 85.7 us, 16 at 4 warps 87.7, 16 at 2 warps 92.1, 8 at 1 warp 92.3;
    # one program per token (32 + 8 heads at 4 warps, 56 registers a thread) ran 86.9 to 87.0
    # in other runs. For the 8 key heads of Qwen3-8B, 32 heads a program leaves 24 masked.
    triton.Config({"HEADS": 16}, num_warps=4),
    triton.Config({"HEADS": 32}, num_warps=4),
    triton.Config({"HEADS": 16}, num_warps=2),
)
"""Heads per program and warps; the first is the interpreter's."""

PINS = {bucket: {"HEADS": 16, "num_warps": 4} for bucket in SMALL_BUCKETS}
"""Up to 1024 tokens, 16 heads on 4 warps: 4.61, 4.86 and 5.76 us at T=1, 32 and 256 (32 heads: 4.67,
4.90 and 5.70), a few hundredths of a microsecond apart, which the autotuner cannot tell apart."""


@triton.autotune(
    **tuning(CANDIDATES, PINS),
    key=["HQ", "HK", "HALF", "token_bucket"],
    restore_value=["q_ptr", "k_ptr"],  # tuning runs must not rotate in-place inputs repeatedly
)
@triton.jit
def _rotary_embedding_kernel(
    pos_ptr,  # [T] int positions
    q_ptr,  # [T, HQ, D] query
    k_ptr,  # [T, HK, D] key
    qo_ptr,  # [T, HQ, D] rotated query (may alias q)
    ko_ptr,  # [T, HK, D] rotated key (may alias k)
    cache_ptr,  # [max_position, D]: cos in the first half of each row, sin in the second
    stride_qt, stride_qh,  # query strides (token, head), in elements
    stride_kt, stride_kh,
    stride_qot, stride_qoh,
    stride_kot, stride_koh,
    stride_cache,  # elements between cache rows
    token_bucket,  # autotune key only: the token-count regime
    HQ: tl.constexpr,  # query heads (constants: the group count below divides by a constant)
    HK: tl.constexpr,  # key heads
    HALF: tl.constexpr,  # D / 2
    BLOCK_HALF: tl.constexpr,  # next power of two >= D / 2
    IS_NEOX: tl.constexpr,  # pair layout
    HEADS: tl.constexpr,  # heads per program
):
    # A 1-D grid of T x (query groups + key groups), the groups of one token next to each other;
    # the token count is not limited to a grid dimension's 65535.
    QG: tl.constexpr = (HQ + HEADS - 1) // HEADS
    KG: tl.constexpr = (HK + HEADS - 1) // HEADS
    pid = tl.program_id(0)
    t = (pid // (QG + KG)).to(tl.int64)  # int64: t * stride exceeds 2^31 for long prefills of wide QKV
    g = pid % (QG + KG)
    if g < QG:
        _rotate_heads(q_ptr + t * stride_qt, qo_ptr + t * stride_qot, stride_qh, stride_qoh, g * HEADS, HQ, pos_ptr + t,
                      cache_ptr, stride_cache, HALF, BLOCK_HALF, HEADS, IS_NEOX)
    else:
        _rotate_heads(k_ptr + t * stride_kt, ko_ptr + t * stride_kot, stride_kh, stride_koh, (g - QG) * HEADS, HK, pos_ptr + t,
                      cache_ptr, stride_cache, HALF, BLOCK_HALF, HEADS, IS_NEOX)


def _rotate_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    xf = x.float()
    half = cos.shape[-1]
    a, b = (xf[..., :half], xf[..., half:]) if is_neox else (xf[..., 0::2], xf[..., 1::2])
    c, s = cos[:, None, :], sin[:, None, :]
    o1, o2 = a * c - b * s, b * c + a * s
    out = torch.cat([o1, o2], dim=-1) if is_neox else torch.stack([o1, o2], dim=-1).flatten(-2)
    return out.to(x.dtype)


def reference(positions, query, key, cos_sin_cache, is_neox=True, query_out=None, key_out=None):
    """Plain torch, upcast to fp32; returns new tensors (never rotates its arguments)."""
    rot = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache[positions].float().split(rot // 2, dim=-1)
    rq = _rotate_reference(query[..., :rot], cos, sin, is_neox)
    rk = _rotate_reference(key[..., :rot], cos, sin, is_neox)
    if rot < query.shape[-1]:  # partial rotary: the remaining dimensions pass through
        rq = torch.cat([rq, query[..., rot:]], dim=-1)
        rk = torch.cat([rk, key[..., rot:]], dim=-1)
    return rq, rk


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool = True,
    query_out: torch.Tensor | None = None,
    key_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``query`` [T, Hq, D] and ``key`` [T, Hk, D] by ``positions`` [T]; in place unless outputs are given."""
    query_out = query if query_out is None else query_out
    key_out = key if key_out is None else key_out
    if query.dim() != 3 or key.dim() != 3 or query.shape[0] != key.shape[0] or query.shape[2] != key.shape[2]:
        raise ValueError(f"rotary_embedding: query {tuple(query.shape)} and key {tuple(key.shape)} must be [T, H, D] with equal T and D")
    if positions.shape != query.shape[:1] or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"rotary_embedding: positions {tuple(positions.shape)} {positions.dtype} must be int [T={query.shape[0]}]")
    if query_out.shape != query.shape or key_out.shape != key.shape or key.dtype != query.dtype:
        raise ValueError("rotary_embedding: outputs must match the query and key shapes, and key the query dtype")
    T, HQ, D = query.shape
    HK = key.shape[1]
    rot = cos_sin_cache.shape[-1]
    if cos_sin_cache.dim() != 2 or rot % 2 or rot > D:
        raise ValueError(f"rotary_embedding: cos_sin_cache {tuple(cos_sin_cache.shape)} must be [max_position, rot ≤ {D}], rot even")
    reason = (
        f"dtype {query.dtype}" if query.dtype not in SUPPORTED_DTYPES
        else "head dimension not unit-stride" if any(t.stride(-1) != 1 for t in (query, key, query_out, key_out, cos_sin_cache))
        else f"partial rotary ({rot} of {D})" if rot != D
        else device_reason(query, (8, 0))
    )
    if reason is not None:
        fallback("rotary_embedding", reason)
        rq, rk = reference(positions, query, key, cos_sin_cache, is_neox)
        return query_out.copy_(rq), key_out.copy_(rk)
    if T == 0:
        return query_out, key_out
    groups = lambda meta: triton.cdiv(HQ, meta["HEADS"]) + triton.cdiv(HK, meta["HEADS"])  # noqa: E731
    _rotary_embedding_kernel[lambda meta: (T * groups(meta),)](
        positions, query, key, query_out, key_out, cos_sin_cache,
        query.stride(0), query.stride(1), key.stride(0), key.stride(1),
        query_out.stride(0), query_out.stride(1), key_out.stride(0), key_out.stride(1),
        cos_sin_cache.stride(0), token_bucket(T),
        HQ=HQ, HK=HK, HALF=D // 2, BLOCK_HALF=triton.next_power_of_2(D // 2), IS_NEOX=is_neox,
    )
    return query_out, key_out


# --------------------------------------------------------------------------- specification


def cos_sin_cache(max_position: int, rot: int, base: float = 1e6, dtype=torch.float32, device=None) -> torch.Tensor:
    """[max_position, rot] cache: cos of each position's angles, then sin (angles in float64)."""
    inv_freq = base ** (-torch.arange(0, rot, 2, dtype=torch.float64, device=device) / rot)
    angles = torch.arange(max_position, dtype=torch.float64, device=device)[:, None] * inv_freq
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(dtype)


def make_inputs(shape, dtype, device, gen, is_neox=True, qkv_view=False, out_of_place=False, scale=1.0,
                max_position=40960, cache_dtype=torch.float32) -> dict:
    """Random q, k (optionally views of one fused QKV buffer), positions uniform in [0, max_position)."""
    T, HQ, HK, D = shape["tokens"], shape["q_heads"], shape["kv_heads"], shape["head_size"]
    lim = torch.finfo(dtype).max / 2  # a rotation can grow one component by up to √2

    def rand(*size):
        return (torch.randn(*size, generator=gen, device=device) * scale).clamp(-lim, lim).to(dtype)

    if qkv_view:  # q and k as strided views into a [T, (HQ + 2·HK)·D] projection output
        qkv = rand(T, (HQ + 2 * HK) * D)
        q, k = qkv[:, : HQ * D].view(T, HQ, D), qkv[:, HQ * D : (HQ + HK) * D].view(T, HK, D)
    else:
        q, k = rand(T, HQ, D), rand(T, HK, D)
    positions = torch.randint(0, max_position, (T,), generator=gen, device=device)
    cache = cos_sin_cache(max_position, D, dtype=cache_dtype, device=device)
    inputs = {"positions": positions, "query": q, "key": k, "cos_sin_cache": cache, "is_neox": is_neox}
    if out_of_place:
        inputs["query_out"], inputs["key_out"] = torch.empty_like(q), torch.empty_like(k)
    return inputs


def in_place_reference(positions, query, key, cos_sin_cache, is_neox=True, query_out=None, key_out=None):
    """The op the ``torch`` and ``torch.compile`` peers run: :func:`reference`, written into the outputs
    (in place over query and key by default), as :func:`rotary_embedding` does."""
    rq, rk = reference(positions, query, key, cos_sin_cache, is_neox)
    query_out = query if query_out is None else query_out
    key_out = key if key_out is None else key_out
    return query_out.copy_(rq), key_out.copy_(rk)


def _liger_inputs(inputs: dict):
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
    except ImportError:
        return None
    if not inputs["is_neox"] or "query_out" in inputs:
        return None
    q, k = inputs["query"], inputs["key"]
    # Liger takes q, k as [batch, heads, seq, D] views of [batch, seq, heads, D] storage.
    return LigerRopeFunction, q.unsqueeze(0).transpose(1, 2), k.unsqueeze(0).transpose(1, 2)


def _gather_rows(cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor):
    return cos[positions], sin[positions]


@functools.cache
def _compiled_gather():
    return torch.compile(_gather_rows, dynamic=True)


def _liger(inputs: dict):
    """Liger's RoPE doing the whole op: positions -> cos/sin rows -> q and k rotated in place.

    Liger takes per-token cos and sin rows, not positions. Once, outside the timing (as a model
    does at load time), the cache is split into [max_position, D/2] cos and sin tables in the
    model dtype; per call, both rows are gathered by position in one kernel that
    ``torch.compile`` generates, and Liger reads the half-width rows with ``rotary_dim=D``.
    Of three gathers timed on an H200 (2026-12-02) this was the fastest from T=32 up (93.9 us
    in all at T=16384, against 99.4 for one ``index_select`` over a [2, max_position, D/2] table
    and 111.5 for two ``index_select`` calls); at T=1 the single ``index_select`` was faster
    (7.7 us against 9.5), so it is timed too, as the peer ``liger-index_select``. Liger rotates in
    place, like ours.
    """
    parts = _liger_inputs(inputs)
    if parts is None:
        return None
    fn, q4, k4 = parts
    D = inputs["query"].shape[-1]
    cos_t, sin_t = (c.to(inputs["query"].dtype).contiguous() for c in inputs["cos_sin_cache"].split(D // 2, dim=-1))
    positions, gather = inputs["positions"], _compiled_gather()

    def run():
        cos, sin = gather(cos_t, sin_t, positions)
        return fn.apply(q4, k4, cos, sin, None, 1, D)

    return run


def _liger_index_select(inputs: dict):
    """Liger's RoPE doing the whole op, its cos and sin rows gathered by one ``index_select`` over a
    [2, max_position, D/2] table (built once, outside the timing) whose halves are contiguous."""
    parts = _liger_inputs(inputs)
    if parts is None:
        return None
    fn, q4, k4 = parts
    D = inputs["query"].shape[-1]
    table = torch.stack(inputs["cos_sin_cache"].split(D // 2, dim=-1)).to(inputs["query"].dtype).contiguous()
    positions = inputs["positions"]
    return lambda: fn.apply(q4, k4, *table.index_select(1, positions), None, 1, D)


def _liger_pregathered(inputs: dict):
    """Liger's RoPE alone, given cos and sin rows gathered by position outside the timing (not the whole op)."""
    parts = _liger_inputs(inputs)
    if parts is None:
        return None
    fn, q4, k4 = parts
    D = inputs["query"].shape[-1]
    cos, sin = inputs["cos_sin_cache"][inputs["positions"]].split(D // 2, dim=-1)
    cos, sin = (torch.cat([c, c], dim=-1)[None].to(inputs["query"].dtype).contiguous() for c in (cos, sin))
    return lambda: fn.apply(q4, k4, cos, sin)


QWEN3_8B = {"q_heads": 32, "kv_heads": 8, "head_size": 128}

SPEC = KernelSpec(
    name="rotary_embedding",
    impl=rotary_embedding,
    reference=reference,
    make_inputs=make_inputs,
    cases=(
        Case("one-token", "decode step: one program, T=1", {"tokens": 1, **QWEN3_8B}),
        Case("gptj", "GPT-J layout: interleaved pairs (2i, 2i+1)", {"tokens": 17, **QWEN3_8B}, {"is_neox": False}),
        Case("out-of-place", "separate outputs, poisoned before the run", {"tokens": 9, **QWEN3_8B}, {"out_of_place": True}),
        Case("qkv-view", "q and k strided views into one fused QKV buffer", {"tokens": 11, **QWEN3_8B}, {"qkv_view": True}),
        Case("odd-heads", "non-power-of-two head counts and head size 80: masked heads and pairs", {"tokens": 6, "q_heads": 12, "kv_heads": 3, "head_size": 80}),
        Case("gptj-odd", "GPT-J layout with masked heads and pairs", {"tokens": 5, "q_heads": 12, "kv_heads": 3, "head_size": 80}, {"is_neox": False}),
        Case("bf16-cache", "cos/sin cache stored in the model dtype, as some engines keep it", {"tokens": 8, **QWEN3_8B}, {"cache_dtype": torch.bfloat16}),
        Case("near-limit", "|q|, |k| up to a quarter of the dtype maximum; far positions (up to 131071)", {"tokens": 4, **QWEN3_8B}, {"scale": 1e4, "max_position": 131072}),
        Case("largest", "largest benchmark shape, T=16384", {"tokens": 16384, **QWEN3_8B}, large=True),
    ),
    bench_shapes=tuple({"tokens": t, **QWEN3_8B} for t in TOKENS),
    tolerances=TOLERANCES,
    bytes=lambda s, dt: (2 * s["tokens"] * (s["q_heads"] + s["kv_heads"]) * s["head_size"] * dt.itemsize
                         + s["tokens"] * s["head_size"] * 4 + 8 * s["tokens"]),
    flops=lambda s: 3 * s["tokens"] * (s["q_heads"] + s["kv_heads"]) * s["head_size"],
    catalog=(
        "norm-rope/rotary-embedding-layouts", "triton-cuda/fp32-accumulation", "triton-cuda/int64-offsets",
        "triton-cuda/masks-on-tail-blocks", "triton-cuda/constexpr-block-sizes", "triton-cuda/autotune-keys",
        "triton-cuda/declared-fallbacks",
    ),
    fallbacks=("dtype not bf16/fp16/fp32", "head dimension not unit-stride", "partial rotary (rot < head size)",
               "no Triton backend for the device"),
    out_args=("query_out", "key_out"),
    peers={"liger": _liger, "liger-index_select": _liger_index_select},
    peer_reference=in_place_reference,
    other_peers={"liger-pregathered": _liger_pregathered},
)
