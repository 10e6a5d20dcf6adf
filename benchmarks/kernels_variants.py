"""Candidate designs of the reference kernels, timed against the current kernels and their peers.

    python benchmarks/kernels_variants.py [--round 1|2|...|14] [--op NAME ...] [--tokens 16384,4096] [--rounds 3]

Round 1: persistent grids with the next row prefetched, register caps, streaming stores, RoPE
head groups, FP8 division variants. Round 2: TMA descriptors and cache hints for the norms, RoPE
group sizes, FP8 with the reciprocal and fma correction. Round 3: FP8 and RoPE follow-ups. Round 4:
the shapes where a final run put kcheck within noise of a peer, timed in more interleaved rounds. Round 5:
RoPE with the key heads of several tokens in one program. Round 6: the ties of the final run
(few-token SiLU-and-mul, RMSNorm at T=16384) in 15 interleaved rounds. Round 7: one-token
SiLU-and-mul with less index arithmetic before its loads. Round 8: the norms with a row spread over a
thread-block cluster (``num_ctas``). Round 9: the norms walking their row in chunks and reading it
back from L2 instead of holding it in registers. Round 10: fused add+RMSNorm and RoPE in place
against separate outputs. Round 11: RoPE with random, prefill-ordered and all-zero positions.
Round 12: the norms in CUDA C++ (kernels_cuda_norms.cu, built with nvcc): a row per CTA, per warp,
or over a thread-block cluster, and a copy of the same pattern. Round 13: RoPE reading whole heads.
Round 14: RoPE in CUDA C++ (kernels_cuda_rope.cu).

Each variant is checked against the op's torch reference (normwise error; for FP8 the number of
e4m3 values that differ from torch's) and timed with the harness's :class:`Timer` (median of
device events, L2 flushed by a read before each call); with ``--rounds N`` every variant is timed
N times, interleaved, and the median of the medians is kept. Under ``TRITON_INTERPRET=1`` on the
CPU it checks the variants on small shapes and times nothing.

The designs (issue 6): a persistent grid of ``k`` programs per multiprocessor that walks rows
(or column blocks) and issues the next row's loads before the current row's arithmetic; register
caps (``maxnreg``) for occupancy; a streaming store (``.cs``); for RoPE, one program per group of
heads instead of per token; for FP8, the division by the scale as a reciprocal plus one fma
correction instead of a correctly rounded division per element.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import pathlib
import statistics
import subprocess
import tempfile

import torch
import triton
import triton.language as tl

from kcheck.kernels import specs
from kcheck.kernels._launch import INTERPRET
from kcheck.kernels.harness import DATASHEET_GBPS, Timer, environment, peers
from kcheck.kernels.rotary_embedding import _rotate_heads

# --------------------------------------------------------------------------- kernels


@triton.jit
def _rms_persist(x_ptr, w_ptr, out_ptr, sx, so, M, N, eps, BLOCK_N: tl.constexpr, STORE_CS: tl.constexpr):
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    cm = cols < N
    w = tl.load(w_ptr + cols, mask=cm, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + pid.to(tl.int64) * sx + cols, mask=cm & (cols * 0 + pid < M), other=0.0)
    for row in range(pid, M, G):
        nxt = row + G
        xn = tl.load(x_ptr + nxt.to(tl.int64) * sx + cols, mask=cm & (cols * 0 + nxt < M), other=0.0)
        xf = x.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(xf * xf, axis=0) / N + eps)
        y = (xf * rstd * w).to(out_ptr.dtype.element_ty)
        if STORE_CS:
            tl.store(out_ptr + tl.cast(row, tl.int64) * so + cols, y, mask=cm, cache_modifier=".cs")
        else:
            tl.store(out_ptr + tl.cast(row, tl.int64) * so + cols, y, mask=cm)
        x = xn


@triton.jit
def _fused_persist(x_ptr, r_ptr, w_ptr, out_ptr, rout_ptr, sx, sr, so, sro, M, N, eps, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    cm = cols < N
    w = tl.load(w_ptr + cols, mask=cm, other=0.0).to(tl.float32)
    p64 = pid.to(tl.int64)
    x = tl.load(x_ptr + p64 * sx + cols, mask=cm & (cols * 0 + pid < M), other=0.0)
    r = tl.load(r_ptr + p64 * sr + cols, mask=cm & (cols * 0 + pid < M), other=0.0)
    for row in range(pid, M, G):
        nxt = row + G
        n64 = nxt.to(tl.int64)
        xn = tl.load(x_ptr + n64 * sx + cols, mask=cm & (cols * 0 + nxt < M), other=0.0)
        rn = tl.load(r_ptr + n64 * sr + cols, mask=cm & (cols * 0 + nxt < M), other=0.0)
        r64 = tl.cast(row, tl.int64)
        s = (x.to(tl.float32) + r.to(tl.float32)).to(rout_ptr.dtype.element_ty)
        tl.store(rout_ptr + r64 * sro + cols, s, mask=cm)
        sf = s.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(sf * sf, axis=0) / N + eps)
        tl.store(out_ptr + r64 * so + cols, (sf * rstd * w).to(out_ptr.dtype.element_ty), mask=cm)
        x = xn
        r = rn


@triton.jit
def _silu_persist(x_ptr, out_ptr, sx, so, M, I: tl.constexpr, BLOCK_I: tl.constexpr):
    BLOCKS: tl.constexpr = I // BLOCK_I  # the variant requires I % BLOCK_I == 0
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    total = M * BLOCKS
    offs = tl.arange(0, BLOCK_I)
    row = (pid // BLOCKS).to(tl.int64)
    cols = (pid % BLOCKS) * BLOCK_I + offs
    ok = offs * 0 + pid < total
    g = tl.load(x_ptr + row * sx + cols, mask=ok, other=0.0)
    u = tl.load(x_ptr + row * sx + I + cols, mask=ok, other=0.0)
    for b in range(pid, total, G):
        nb = b + G
        nrow = (nb // BLOCKS).to(tl.int64)
        ncols = (nb % BLOCKS) * BLOCK_I + offs
        nok = offs * 0 + nb < total
        gn = tl.load(x_ptr + nrow * sx + ncols, mask=nok, other=0.0)
        un = tl.load(x_ptr + nrow * sx + I + ncols, mask=nok, other=0.0)
        gf = g.to(tl.float32)
        y = (gf * tl.sigmoid(gf) * u.to(tl.float32)).to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + tl.cast(b // BLOCKS, tl.int64) * so + (b % BLOCKS) * BLOCK_I + offs, y)
        g = gn
        u = un


@triton.jit
def _silu_cs(x_ptr, out_ptr, sx, so, I: tl.constexpr, BLOCK_I: tl.constexpr):
    BLOCKS: tl.constexpr = I // BLOCK_I
    pid = tl.program_id(0)
    row = (pid // BLOCKS).to(tl.int64)
    cols = (pid % BLOCKS) * BLOCK_I + tl.arange(0, BLOCK_I)
    g = tl.load(x_ptr + row * sx + cols).to(tl.float32)
    u = tl.load(x_ptr + row * sx + I + cols).to(tl.float32)
    y = (g * tl.sigmoid(g) * u).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + row * so + cols, y, cache_modifier=".cs")


@triton.jit
def _rope_heads(pos_ptr, q_ptr, k_ptr, cache_ptr, sqt, sqh, skt, skh, sc, HQ, HK, QG,
                HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, HG: tl.constexpr, IS_NEOX: tl.constexpr):
    """Grid (head groups, tokens): program (g, t) rotates HG heads of q (g < QG) or of k."""
    g = tl.program_id(0)
    t = tl.program_id(1).to(tl.int64)
    if g < QG:
        base = q_ptr + t * sqt
        sh = sqh
        h0 = g * HG
        H = HQ
    else:
        base = k_ptr + t * skt
        sh = skh
        h0 = (g - QG) * HG
        H = HK
    heads = h0 + tl.arange(0, HG)[:, None]
    i = tl.arange(0, BLOCK_HALF)[None, :]
    m = (heads < H) & (i < HALF)
    if IS_NEOX:
        first = heads * sh + i
        second = first + HALF
    else:
        first = heads * sh + 2 * i
        second = first + 1
    a = tl.load(base + first, mask=m, other=0.0).to(tl.float32)
    b = tl.load(base + second, mask=m, other=0.0).to(tl.float32)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    cos = tl.load(cache_ptr + pos * sc + i, mask=i < HALF, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * sc + HALF + i, mask=i < HALF, other=0.0).to(tl.float32)
    ty = q_ptr.dtype.element_ty
    tl.store(base + first, (a * cos - b * sin).to(ty), mask=m)
    tl.store(base + second, (b * cos + a * sin).to(ty), mask=m)


@triton.jit
def _rope_tokens(pos_ptr, q_ptr, k_ptr, cache_ptr, sqt, sqh, skt, skh, sc, T, HQ, HK,
                 HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr):
    """Persistent over tokens (NeoX only): the next token's q and k loads go out before this token's math."""
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    i = tl.arange(0, BLOCK_HALF)[None, :]
    hq = tl.arange(0, BLOCK_HQ)[:, None]
    hk = tl.arange(0, BLOCK_HK)[:, None]
    qf = hq * sqh + i
    kf = hk * skh + i
    qm = (hq < HQ) & (i < HALF)
    km = (hk < HK) & (i < HALF)
    p64 = pid.to(tl.int64)
    ok = i * 0 + pid < T
    qa = tl.load(q_ptr + p64 * sqt + qf, mask=qm & ok, other=0.0)
    qb = tl.load(q_ptr + p64 * sqt + qf + HALF, mask=qm & ok, other=0.0)
    ka = tl.load(k_ptr + p64 * skt + kf, mask=km & ok, other=0.0)
    kb = tl.load(k_ptr + p64 * skt + kf + HALF, mask=km & ok, other=0.0)
    for t in range(pid, T, G):
        t64 = tl.cast(t, tl.int64)
        pos = tl.load(pos_ptr + t64).to(tl.int64)
        cos = tl.load(cache_ptr + pos * sc + i, mask=i < HALF, other=0.0)
        sin = tl.load(cache_ptr + pos * sc + HALF + i, mask=i < HALF, other=0.0)
        n64 = (t + G).to(tl.int64)
        nok = i * 0 + t + G < T
        qa_n = tl.load(q_ptr + n64 * sqt + qf, mask=qm & nok, other=0.0)
        qb_n = tl.load(q_ptr + n64 * sqt + qf + HALF, mask=qm & nok, other=0.0)
        ka_n = tl.load(k_ptr + n64 * skt + kf, mask=km & nok, other=0.0)
        kb_n = tl.load(k_ptr + n64 * skt + kf + HALF, mask=km & nok, other=0.0)
        ty = q_ptr.dtype.element_ty
        a, b = qa.to(tl.float32), qb.to(tl.float32)
        tl.store(q_ptr + t64 * sqt + qf, (a * cos - b * sin).to(ty), mask=qm)
        tl.store(q_ptr + t64 * sqt + qf + HALF, (b * cos + a * sin).to(ty), mask=qm)
        a, b = ka.to(tl.float32), kb.to(tl.float32)
        tl.store(k_ptr + t64 * skt + kf, (a * cos - b * sin).to(ty), mask=km)
        tl.store(k_ptr + t64 * skt + kf + HALF, (b * cos + a * sin).to(ty), mask=km)
        qa, qb, ka, kb = qa_n, qb_n, ka_n, kb_n


@triton.jit
def _fp8_persist(x_ptr, q_ptr, s_ptr, sx, sq, M, N, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr,
                 BLOCK_N: tl.constexpr, DIV: tl.constexpr):
    """DIV 0: div_rn per element; 1: reciprocal (div_rn, once per row) + one fma correction per
    element (Markstein: correctly rounded given a correctly rounded reciprocal); 2: x · (1/s), timing only."""
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    cm = cols < N
    x = tl.load(x_ptr + pid.to(tl.int64) * sx + cols, mask=cm & (cols * 0 + pid < M), other=0.0)
    for row in range(pid, M, G):
        nxt = row + G
        xn = tl.load(x_ptr + nxt.to(tl.int64) * sx + cols, mask=cm & (cols * 0 + nxt < M), other=0.0)
        xf = x.to(tl.float32)
        scale = tl.maximum(tl.max(tl.abs(xf), axis=0) / FP8_MAX, MIN_SCALE)
        if DIV == 0:
            v = tl.math.div_rn(xf, scale)
        else:
            rcp = tl.math.div_rn(1.0, scale)
            v = xf * rcp
            if DIV == 1:
                v = tl.fma(tl.fma(-v, scale, xf), rcp, v)
        v = tl.clamp(v, -FP8_MAX, FP8_MAX)
        r64 = tl.cast(row, tl.int64)
        tl.store(q_ptr + r64 * sq + cols, v.to(q_ptr.dtype.element_ty), mask=cm)
        tl.store(s_ptr + r64, scale)
        x = xn


# --------------------------------------------------------------------------- variants

H200_GBPS = DATASHEET_GBPS["NVIDIA H200"]  # the fraction column is of the H200's datasheet, whatever the GPU
NSM = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 4


def _fn(kernel):
    return kernel.fn  # the @triton.jit function under the autotuner: one fixed config, no tuning


_OPTION_NAMES = {"maxnreg": "reg", "num_ctas": "ctas"}


def _rows(inp, picks):
    """The norm's own row kernel (RMSNorm or fused add+RMSNorm, by the inputs) with each pick of
    ``picks``: (rows per program, warps, further launch options such as ``maxnreg``)."""
    from kcheck.kernels import fused_add_rms_norm, rms_norm
    x, w, eps, out = inp["x"], inp["weight"], inp["eps"], inp["out"]
    M, N = x.shape
    if "residual" in inp:
        r, rout = inp["residual"], inp["residual_out"]
        kernel, result = fused_add_rms_norm._fused_add_rms_norm_kernel, (out, rout)
        args = (x, r, w, out, rout, x.stride(0), r.stride(0), out.stride(0), rout.stride(0), M, N, eps, 0)
    else:
        kernel, result = rms_norm._rms_norm_kernel, out
        args = (x, w, out, x.stride(0), out.stride(0), M, N, eps, 0)
    v = {}
    for rows, nw, options in picks:
        options = {k: o for k, o in options.items() if o is not None}
        def f(rows=rows, nw=nw, options=options):
            _fn(kernel)[(triton.cdiv(M, rows),)](*args, BLOCK_N=triton.next_power_of_2(N), ROWS=rows, num_warps=nw, **options)
            return result
        v[f"rows{rows}-w{nw}" + "".join(f"-{_OPTION_NAMES[k]}{o}" for k, o in options.items())] = f
    return v


def rms_variants(inp):
    x, w, out, eps = inp["x"], inp["weight"], inp["out"], inp["eps"]
    M, N = x.shape
    BN = triton.next_power_of_2(N)
    v = _rows(inp, [(rows, nw, {"maxnreg": nreg}) for rows, nw, nreg in
                    ((1, 8, None), (1, 16, None), (1, 8, 32), (1, 16, 32), (2, 8, None), (1, 4, None))])
    for k, nw, cs in ((2, 8, 0), (4, 8, 0), (6, 8, 0), (8, 4, 0), (12, 4, 0), (2, 16, 0), (3, 16, 0), (4, 8, 1), (8, 4, 1)):
        def f(k=k, nw=nw, cs=cs):
            _rms_persist[(min(M, k * NSM),)](x, w, out, x.stride(0), out.stride(0), M, N, eps, BLOCK_N=BN, STORE_CS=cs, num_warps=nw)
            return out
        v[f"persist{k}-w{nw}" + ("-cs" if cs else "")] = f
    return v


def fused_variants(inp):
    x, r, w, eps = inp["x"], inp["residual"], inp["weight"], inp["eps"]
    out, rout = inp["out"], inp["residual_out"]
    M, N = x.shape
    BN = triton.next_power_of_2(N)
    v = _rows(inp, [(rows, nw, {"maxnreg": nreg}) for rows, nw, nreg in
                    ((1, 16, None), (1, 8, None), (2, 8, None), (1, 16, 40), (1, 16, 32))])
    for k, nw in ((2, 8), (3, 8), (4, 8), (2, 16), (3, 16), (6, 4), (8, 4)):
        def f(k=k, nw=nw):
            _fused_persist[(min(M, k * NSM),)](x, r, w, out, rout, x.stride(0), r.stride(0), out.stride(0), rout.stride(0),
                                               M, N, eps, BLOCK_N=BN, num_warps=nw)
            return out, rout
        v[f"persist{k}-w{nw}"] = f
    return v


def silu_variants(inp):
    from kcheck.kernels import silu_and_mul as m
    x, out = inp["x"], inp["out"]
    M, I = x.shape[0], x.shape[1] // 2
    v = {}
    for bi, nw in ((1024, 4), (512, 2), (2048, 4), (2048, 8), (4096, 8), (1024, 2), (512, 4)):
        if I % bi:
            continue
        def f(bi=bi, nw=nw):
            _fn(m._silu_and_mul_kernel)[(M * triton.cdiv(I, bi),)](x, out, x.stride(0), out.stride(0), 0, I=I, BLOCK_I=bi, num_warps=nw)
            return out
        v[f"block{bi}-w{nw}"] = f
    for bi, nw in ((1024, 4), (2048, 4), (512, 2)):
        if I % bi:
            continue
        def f(bi=bi, nw=nw):
            _silu_cs[(M * (I // bi),)](x, out, x.stride(0), out.stride(0), I=I, BLOCK_I=bi, num_warps=nw)
            return out
        v[f"block{bi}-w{nw}-cs"] = f
    for bi, nw, k in ((1024, 4, 8), (1024, 4, 16), (2048, 8, 4), (2048, 4, 8), (512, 2, 16), (4096, 8, 4)):
        if I % bi:
            continue
        def f(bi=bi, nw=nw, k=k):
            _silu_persist[(min(M * (I // bi), k * NSM),)](x, out, x.stride(0), out.stride(0), M, I=I, BLOCK_I=bi, num_warps=nw)
            return out
        v[f"persist{k}-block{bi}-w{nw}"] = f
    return v


def _rope_args(inp):
    """The RoPE module and a case's inputs, unpacked the way every RoPE variant launches them."""
    from kcheck.kernels import rotary_embedding as m
    pos, q, k, cache = inp["positions"], inp["query"], inp["key"], inp["cos_sin_cache"]
    T, HQ, D = q.shape
    return m, pos, q, k, cache, T, HQ, k.shape[1], D // 2, triton.next_power_of_2(D // 2)


def rope_variants(inp):
    m, pos, q, k, cache, T, HQ, HK, HALF, BH = _rope_args(inp)
    v = {}
    for nw, nreg in ((4, None), (8, None), (4, 40), (4, 32), (8, 32)):
        def f(nw=nw, nreg=nreg):
            _fn(m._rotary_embedding_kernel)[(T,)](
                pos, q, k, q, k, cache, q.stride(0), q.stride(1), k.stride(0), k.stride(1), q.stride(0), q.stride(1),
                k.stride(0), k.stride(1), cache.stride(0), HQ, HK, 0, HALF=HALF, BLOCK_HALF=BH,
                BLOCK_HQ=triton.next_power_of_2(HQ), BLOCK_HK=triton.next_power_of_2(HK), IS_NEOX=inp["is_neox"],
                num_warps=nw, maxnreg=nreg)
            return q, k
        v[f"token-w{nw}" + (f"-reg{nreg}" if nreg else "")] = f
    for hg, nw in ((8, 4), (8, 2), (4, 2), (4, 1), (16, 4), (8, 8)):
        qg, kg = triton.cdiv(HQ, hg), triton.cdiv(HK, hg)
        def f(hg=hg, nw=nw, qg=qg, kg=kg):
            _rope_heads[(qg + kg, T)](pos, q, k, cache, q.stride(0), q.stride(1), k.stride(0), k.stride(1), cache.stride(0),
                                      HQ, HK, qg, HALF=HALF, BLOCK_HALF=BH, HG=hg, IS_NEOX=inp["is_neox"], num_warps=nw)
            return q, k
        v[f"heads{hg}-w{nw}"] = f
    if inp["is_neox"]:
        for kk, nw in ((2, 8), (4, 4), (3, 8), (6, 4)):
            def f(kk=kk, nw=nw):
                _rope_tokens[(min(T, kk * NSM),)](pos, q, k, cache, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                                                  cache.stride(0), T, HQ, HK, HALF=HALF, BLOCK_HALF=BH,
                                                  BLOCK_HQ=triton.next_power_of_2(HQ), BLOCK_HK=triton.next_power_of_2(HK),
                                                  num_warps=nw)
                return q, k
            v[f"persist{kk}-w{nw}"] = f
    return v


def fp8_variants(inp):
    from kcheck.kernels import per_token_fp8_quant as m
    x, q, s = inp["x"], inp["out"], inp["scale"]
    M, N = x.shape
    BN = triton.next_power_of_2(N)
    v = {}
    for rows, nw, nreg in ((1, 4, None), (1, 8, None), (1, 8, 32), (2, 8, None)):
        def f(rows=rows, nw=nw, nreg=nreg):
            _fn(m._per_token_fp8_quant_kernel)[(triton.cdiv(M, rows),)](
                x, q, s, x.stride(0), q.stride(0), M, N, 0, FP8_MAX=m.FP8_MAX, MIN_SCALE=m.MIN_SCALE,
                ROUND_IN_FP32=INTERPRET, BLOCK_N=BN, ROWS=rows, num_warps=nw, maxnreg=nreg)
            return q, s
        v[f"rows{rows}-w{nw}" + (f"-reg{nreg}" if nreg else "")] = f
    if INTERPRET:
        return v  # the variants below skip the interpreter's e4m3 rounding; check them on a GPU
    for k, nw, div in ((0, 4, 0), (0, 4, 1), (0, 8, 1), (0, 4, 2), (4, 4, 0), (4, 4, 1), (8, 4, 1), (6, 4, 1),
                       (3, 8, 1), (4, 8, 1), (2, 16, 1)):
        def f(k=k, nw=nw, div=div):
            grid = M if k == 0 else min(M, k * NSM)
            _fp8_persist[(grid,)](x, q, s, x.stride(0), q.stride(0), M, N, FP8_MAX=m.FP8_MAX, MIN_SCALE=m.MIN_SCALE,
                                  BLOCK_N=BN, DIV=div, num_warps=nw)
            return q, s
        v[(f"persist{k}" if k else "row") + f"-w{nw}-div{div}"] = f
    return v


VARIANTS = {
    "rms_norm": (rms_variants, ("kcheck", "liger", "torch.compile")),
    "fused_add_rms_norm": (fused_variants, ("kcheck", "liger")),
    "silu_and_mul": (silu_variants, ("kcheck", "torch.compile", "liger")),
    "rotary_embedding": (rope_variants, ("kcheck", "liger")),
    "per_token_fp8_quant": (fp8_variants, ("kcheck", "torch.compile")),
}


# --------------------------------------------------------------------------- round 2 kernels


@triton.jit
def _rms_tma(x_desc, w_ptr, o_desc, N, eps, R: tl.constexpr, C: tl.constexpr):
    """One row viewed as an [R, C] tile of a [M·R, C] view, loaded and stored through TMA descriptors."""
    row = tl.program_id(0)
    x = x_desc.load([row * R, 0]).to(tl.float32)
    w = tl.load(w_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(tl.sum(x * x, axis=1), axis=0) / N + eps)
    o_desc.store([row * R, 0], (x * rstd * w).to(o_desc.dtype))


@triton.jit
def _fused_tma(x_desc, r_desc, w_ptr, o_desc, ro_desc, N, eps, R: tl.constexpr, C: tl.constexpr):
    row = tl.program_id(0)
    x = x_desc.load([row * R, 0]).to(tl.float32)
    r = r_desc.load([row * R, 0]).to(tl.float32)
    w = tl.load(w_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]).to(tl.float32)
    s = (x + r).to(ro_desc.dtype)
    ro_desc.store([row * R, 0], s)
    sf = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(tl.sum(sf * sf, axis=1), axis=0) / N + eps)
    o_desc.store([row * R, 0], (sf * rstd * w).to(o_desc.dtype))


@triton.jit
def _rms_hint(x_ptr, w_ptr, out_ptr, sx, so, M, N, eps, BLOCK_N: tl.constexpr, MODE: tl.constexpr):
    """MODE 1: .cg loads; 2: evict_first stores; 3: evict_last weight; 4: .cg loads and evict_first stores."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    m = cols < N
    if MODE == 1 or MODE == 4:
        x = tl.load(x_ptr + row * sx + cols, mask=m, other=0.0, cache_modifier=".cg").to(tl.float32)
    else:
        x = tl.load(x_ptr + row * sx + cols, mask=m, other=0.0).to(tl.float32)
    if MODE == 3:
        w = tl.load(w_ptr + cols, mask=m, other=0.0, eviction_policy="evict_last").to(tl.float32)
    else:
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    y = (x * rstd * w).to(out_ptr.dtype.element_ty)
    if MODE == 2 or MODE == 4:
        tl.store(out_ptr + row * so + cols, y, mask=m, eviction_policy="evict_first")
    else:
        tl.store(out_ptr + row * so + cols, y, mask=m)


@triton.jit
def _rope_group(base, sh, h0, H, cos, sin, i, HALF: tl.constexpr, HG: tl.constexpr, IS_NEOX: tl.constexpr):
    heads = h0 + tl.arange(0, HG)[:, None]
    m = (heads < H) & (i < HALF)
    if IS_NEOX:
        first = heads * sh + i
        second = first + HALF
    else:
        first = heads * sh + 2 * i
        second = first + 1
    a = tl.load(base + first, mask=m, other=0.0).to(tl.float32)
    b = tl.load(base + second, mask=m, other=0.0).to(tl.float32)
    ty = base.dtype.element_ty
    tl.store(base + first, (a * cos - b * sin).to(ty), mask=m)
    tl.store(base + second, (b * cos + a * sin).to(ty), mask=m)


@triton.jit
def _rope_groups(pos_ptr, q_ptr, k_ptr, cache_ptr, sqt, sqh, skt, skh, sc, HQ, HK, QG,
                 HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, QHG: tl.constexpr, KHG: tl.constexpr,
                 IS_NEOX: tl.constexpr):
    """Grid (QG + KG, T): program g < QG rotates QHG query heads, the others KHG key heads."""
    g = tl.program_id(0)
    t = tl.program_id(1).to(tl.int64)
    i = tl.arange(0, BLOCK_HALF)[None, :]
    pos = tl.load(pos_ptr + t).to(tl.int64)
    cos = tl.load(cache_ptr + pos * sc + i, mask=i < HALF, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * sc + HALF + i, mask=i < HALF, other=0.0).to(tl.float32)
    if g < QG:
        _rope_group(q_ptr + t * sqt, sqh, g * QHG, HQ, cos, sin, i, HALF, QHG, IS_NEOX)
    else:
        _rope_group(k_ptr + t * skt, skh, (g - QG) * KHG, HK, cos, sin, i, HALF, KHG, IS_NEOX)


@triton.jit
def _fp8_persist2(x_ptr, q_ptr, s_ptr, sx, sq, M, N, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr,
                  BLOCK_N: tl.constexpr, BF16MAX: tl.constexpr):
    """_fp8_persist with DIV 1; BF16MAX takes max |x| in the input dtype (exact) before any upcast."""
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    cm = cols < N
    x = tl.load(x_ptr + pid.to(tl.int64) * sx + cols, mask=cm & (cols * 0 + pid < M), other=0.0)
    for row in range(pid, M, G):
        nxt = row + G
        xn = tl.load(x_ptr + nxt.to(tl.int64) * sx + cols, mask=cm & (cols * 0 + nxt < M), other=0.0)
        if BF16MAX:
            amax = tl.max(tl.abs(x), axis=0).to(tl.float32)
        else:
            amax = tl.max(tl.abs(x.to(tl.float32)), axis=0)
        scale = tl.maximum(amax / FP8_MAX, MIN_SCALE)
        xf = x.to(tl.float32)
        rcp = tl.math.div_rn(1.0, scale)
        v = xf * rcp
        v = tl.fma(tl.fma(-v, scale, xf), rcp, v)
        v = tl.clamp(v, -FP8_MAX, FP8_MAX)
        r64 = tl.cast(row, tl.int64)
        tl.store(q_ptr + r64 * sq + cols, v.to(q_ptr.dtype.element_ty), mask=cm)
        tl.store(s_ptr + r64, scale)
        x = xn


@triton.jit
def _fp8_rows(x_ptr, q_ptr, s_ptr, sx, sq, M, N, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr,
              BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """One program per ROWS rows (no loop), the division as reciprocal + fma correction."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    xf = tl.load(x_ptr + rows * sx + cols, mask=mask, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(xf), axis=1) / FP8_MAX, MIN_SCALE)[:, None]
    rcp = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)
    v = xf * rcp
    v = tl.clamp(tl.fma(tl.fma(-v, scale, xf), rcp, v), -FP8_MAX, FP8_MAX)
    tl.store(q_ptr + rows * sq + cols, v.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + rows, scale, mask=rows < M)


# --------------------------------------------------------------------------- round 2 variants


def _desc(t, R, C):
    from triton.tools.tensor_descriptor import TensorDescriptor
    return TensorDescriptor.from_tensor(t.view(-1, C), [R, C])


def rms_variants2(inp):
    from kcheck.kernels import rms_norm as m
    x, w, out, eps = inp["x"], inp["weight"], inp["out"], inp["eps"]
    M, N = x.shape
    BN = triton.next_power_of_2(N)
    v = {}
    def base():
        _fn(m._rms_norm_kernel)[(M,)](x, w, out, x.stride(0), out.stride(0), M, N, eps, 0, BLOCK_N=BN, ROWS=1, num_warps=8)
        return out
    v["rows1-w8"] = base
    for mode in (1, 2, 3, 4):
        def f(mode=mode):
            _rms_hint[(M,)](x, w, out, x.stride(0), out.stride(0), M, N, eps, BLOCK_N=BN, MODE=mode, num_warps=8)
            return out
        v[f"hint{mode}-w8"] = f
    for C, nw in ((64, 8), (64, 4), (128, 8), (256, 8), (64, 16)):
        R = N // C
        def f(C=C, R=R, nw=nw):
            _rms_tma[(M,)](_desc(x, R, C), w, _desc(out, R, C), N, eps, R=R, C=C, num_warps=nw)
            return out
        v[f"tma{R}x{C}-w{nw}"] = f
    return v


def fused_variants2(inp):
    from kcheck.kernels import fused_add_rms_norm as m
    x, r, w, eps = inp["x"], inp["residual"], inp["weight"], inp["eps"]
    out, rout = inp["out"], inp["residual_out"]
    M, N = x.shape
    BN = triton.next_power_of_2(N)
    v = {}
    def base():
        _fn(m._fused_add_rms_norm_kernel)[(M,)](x, r, w, out, rout, x.stride(0), r.stride(0), out.stride(0), rout.stride(0),
                                                M, N, eps, 0, BLOCK_N=BN, ROWS=1, num_warps=16)
        return out, rout
    v["rows1-w16"] = base
    for C, nw in ((64, 8), (64, 16), (128, 8), (64, 4)):
        R = N // C
        def f(C=C, R=R, nw=nw):
            _fused_tma[(M,)](_desc(x, R, C), _desc(r, R, C), w, _desc(out, R, C), _desc(rout, R, C), N, eps, R=R, C=C, num_warps=nw)
            return out, rout
        v[f"tma{R}x{C}-w{nw}"] = f
    return v


def rope_variants2(inp):
    m, pos, q, k, cache, T, HQ, HK, HALF, BH = _rope_args(inp)
    v = {}
    def base():
        _fn(m._rotary_embedding_kernel)[(T,)](
            pos, q, k, q, k, cache, q.stride(0), q.stride(1), k.stride(0), k.stride(1), q.stride(0), q.stride(1),
            k.stride(0), k.stride(1), cache.stride(0), HQ, HK, 0, HALF=HALF, BLOCK_HALF=BH,
            BLOCK_HQ=triton.next_power_of_2(HQ), BLOCK_HK=triton.next_power_of_2(HK), IS_NEOX=inp["is_neox"], num_warps=4)
        return q, k
    v["token-w4"] = base
    for qhg, khg, nw in ((16, 16, 4), (16, 8, 4), (16, 8, 2), (32, 8, 4), (32, 8, 8), (16, 16, 2), (16, 16, 8), (8, 8, 1),
                         (32, 16, 4)):
        qg, kg = triton.cdiv(HQ, qhg), triton.cdiv(HK, khg)
        def f(qhg=qhg, khg=khg, nw=nw, qg=qg, kg=kg):
            _rope_groups[(qg + kg, T)](pos, q, k, cache, q.stride(0), q.stride(1), k.stride(0), k.stride(1), cache.stride(0),
                                       HQ, HK, qg, HALF=HALF, BLOCK_HALF=BH, QHG=qhg, KHG=khg, IS_NEOX=inp["is_neox"],
                                       num_warps=nw)
            return q, k
        v[f"groups{qhg}-{khg}-w{nw}"] = f
    return v


def fp8_variants2(inp):
    from kcheck.kernels import per_token_fp8_quant as m
    x, q, s = inp["x"], inp["out"], inp["scale"]
    M, N = x.shape
    BN = triton.next_power_of_2(N)
    v = {}
    def base():
        _fn(m._per_token_fp8_quant_kernel)[(M,)](
            x, q, s, x.stride(0), q.stride(0), M, N, 0, FP8_MAX=m.FP8_MAX, MIN_SCALE=m.MIN_SCALE,
            ROUND_IN_FP32=INTERPRET, BLOCK_N=BN, ROWS=1, num_warps=4)
        return q, s
    v["rows1-w4"] = base
    for k, nw, bm in ((6, 4, 0), (5, 4, 0), (7, 4, 0), (9, 4, 0), (12, 4, 0), (6, 4, 1), (8, 4, 1), (4, 8, 1), (5, 8, 0),
                      (3, 8, 0)):
        def f(k=k, nw=nw, bm=bm):
            _fp8_persist2[(min(M, k * NSM),)](x, q, s, x.stride(0), q.stride(0), M, N, FP8_MAX=m.FP8_MAX,
                                              MIN_SCALE=m.MIN_SCALE, BLOCK_N=BN, BF16MAX=bm, num_warps=nw)
            return q, s
        v[f"persist{k}-w{nw}" + ("-bf16max" if bm else "")] = f
    for rows, nw in ((1, 4), (1, 2), (2, 4), (1, 8)):
        def f(rows=rows, nw=nw):
            _fp8_rows[(triton.cdiv(M, rows),)](x, q, s, x.stride(0), q.stride(0), M, N, FP8_MAX=m.FP8_MAX,
                                               MIN_SCALE=m.MIN_SCALE, BLOCK_N=BN, ROWS=rows, num_warps=nw)
            return q, s
        v[f"rows{rows}-w{nw}-rcp"] = f
    return v


VARIANTS2 = {
    "rms_norm": (rms_variants2, ("kcheck", "liger")),
    "fused_add_rms_norm": (fused_variants2, ("kcheck", "liger")),
    "rotary_embedding": (rope_variants2, ("kcheck", "liger")),
    "per_token_fp8_quant": (fp8_variants2, ("kcheck", "torch.compile")),
}


# --------------------------------------------------------------------------- round 3


@triton.jit
def _fp8_rows3(x_ptr, q_ptr, s_ptr, sx, sq, M, N, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr,
               BLOCK_N: tl.constexpr, MODE: tl.constexpr):
    """_fp8_rows with ROWS=1; MODE 1: max |x| in the input dtype; 2: .cg load; 3: evict_first load."""
    rows = tl.program_id(0).to(tl.int64) + tl.arange(0, 1)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    if MODE == 2:
        xr = tl.load(x_ptr + rows * sx + cols, mask=mask, other=0.0, cache_modifier=".cg")
    elif MODE == 3:
        xr = tl.load(x_ptr + rows * sx + cols, mask=mask, other=0.0, eviction_policy="evict_first")
    else:
        xr = tl.load(x_ptr + rows * sx + cols, mask=mask, other=0.0)
    if MODE == 1:
        amax = tl.max(tl.abs(xr), axis=1).to(tl.float32)
    else:
        amax = tl.max(tl.abs(xr.to(tl.float32)), axis=1)
    xf = xr.to(tl.float32)
    scale = tl.maximum(amax / FP8_MAX, MIN_SCALE)[:, None]
    rcp = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)
    v = xf * rcp
    v = tl.clamp(tl.fma(tl.fma(-v, scale, xf), rcp, v), -FP8_MAX, FP8_MAX)
    tl.store(q_ptr + rows * sq + cols, v.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + rows, scale, mask=rows < M)


def fp8_variants3(inp):
    from kcheck.kernels import per_token_fp8_quant as m
    x, q, s = inp["x"], inp["out"], inp["scale"]
    M, N = x.shape
    BN = triton.next_power_of_2(N)
    v = {}
    for nw, nreg in ((4, None), (8, None), (4, 40), (4, 32)):
        def f(nw=nw, nreg=nreg):
            _fn(m._per_token_fp8_quant_kernel)[(M,)](
                x, q, s, x.stride(0), q.stride(0), M, N, 0, FP8_MAX=m.FP8_MAX, MIN_SCALE=m.MIN_SCALE,
                ROUND_IN_FP32=INTERPRET, BLOCK_N=BN, ROWS=1, num_warps=nw, maxnreg=nreg)
            return q, s
        v[f"kernel-w{nw}" + (f"-reg{nreg}" if nreg else "")] = f
    for mode, nw in ((1, 4), (1, 8), (2, 4), (3, 4)):
        def f(mode=mode, nw=nw):
            _fp8_rows3[(M,)](x, q, s, x.stride(0), q.stride(0), M, N, FP8_MAX=m.FP8_MAX, MIN_SCALE=m.MIN_SCALE,
                             BLOCK_N=BN, MODE=mode, num_warps=nw)
            return q, s
        v[f"mode{mode}-w{nw}"] = f
    return v


def rope_variants3(inp):
    m, pos, q, k, cache, T, HQ, HK, HALF, BH = _rope_args(inp)
    v = {}
    for heads, nw in ((16, 4), (32, 4), (32, 8), (16, 8)):
        g = triton.cdiv(HQ, heads) + triton.cdiv(HK, heads)
        def f(heads=heads, nw=nw, g=g):
            _fn(m._rotary_embedding_kernel)[(T * g,)](
                pos, q, k, q, k, cache, q.stride(0), q.stride(1), k.stride(0), k.stride(1), q.stride(0), q.stride(1),
                k.stride(0), k.stride(1), cache.stride(0), 0, HQ=HQ, HK=HK, HALF=HALF, BLOCK_HALF=BH,
                IS_NEOX=inp["is_neox"], HEADS=heads, num_warps=nw)
            return q, k
        v[f"kernel-heads{heads}-w{nw}"] = f
    return v


VARIANTS3 = {
    "rotary_embedding": (rope_variants3, ("kcheck", "liger")),
    "per_token_fp8_quant": (fp8_variants3, ("kcheck", "torch.compile")),
}


# --------------------------------------------------------------------------- round 4: the close calls


def fused_variants4(inp):
    return _rows(inp, [(rows, nw, {}) for rows, nw in ((1, 8), (1, 16), (1, 4), (2, 8), (1, 2))])


def _silu_blocks(inp, picks):
    """SiLU-and-mul's kernel with each (BLOCK_I, num_warps) of ``picks``."""
    from kcheck.kernels import silu_and_mul as m
    x, out = inp["x"], inp["out"]
    M, I = x.shape[0], x.shape[1] // 2
    v = {}
    for bi, nw in picks:
        def f(bi=bi, nw=nw):
            _fn(m._silu_and_mul_kernel)[(M * triton.cdiv(I, bi),)](x, out, x.stride(0), out.stride(0), 0, I=I, BLOCK_I=bi, num_warps=nw)
            return out
        v[f"block{bi}-w{nw}"] = f
    return v


def silu_variants4(inp):
    return _silu_blocks(inp, ((1024, 4), (2048, 4), (512, 2), (4096, 8), (4096, 4)))


VARIANTS4 = {
    "rms_norm": (lambda inp: {}, ("kcheck", "liger")),
    "fused_add_rms_norm": (fused_variants4, ("kcheck", "liger", "torch.compile")),
    "silu_and_mul": (silu_variants4, ("kcheck", "liger", "torch.compile")),
}


# --------------------------------------------------------------------------- round 6: the ties, again

# The final run of 2 Dec put SiLU-and-mul at T=1 and 32 at 0.99 of torch.compile and RMSNorm at
# T=16384 at 65.49 us against Liger's 65.47: timed again in 15 interleaved rounds, with smaller
# programs for the few-token SiLU (more of them in flight on the 132 multiprocessors).


def silu_variants6(inp):
    return _silu_blocks(inp, ((256, 1), (256, 2), (512, 1), (512, 2), (512, 4), (1024, 2), (1024, 4), (1024, 8)))


VARIANTS6 = {
    "rms_norm": (lambda inp: {}, ("kcheck", "liger", "torch.compile")),
    "silu_and_mul": (silu_variants6, ("kcheck", "liger", "torch.compile")),
}


# --------------------------------------------------------------------------- round 5: RoPE key blocks

# With 32 heads a program, a token's key program holds 8 key heads in a 32-head tile: half the
# programs move a fifth of the bytes, and Nsight Compute has RoPE waiting on its loads at 56%
# occupancy. Here the key heads of KT tokens share one program ([KT*HK, D/2] rows, each with its
# own position), placed after the query programs of those KT tokens.


@triton.jit
def _rope_blocks(pos_ptr, q_ptr, k_ptr, cache_ptr, sqt, sqh, skt, skh, sc, T,
                 HQ: tl.constexpr, HK: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr,
                 HEADS: tl.constexpr, KT: tl.constexpr, IS_NEOX: tl.constexpr):
    QG: tl.constexpr = (HQ + HEADS - 1) // HEADS
    PER: tl.constexpr = KT * QG + 1
    pid = tl.program_id(0)
    blk = pid // PER
    r = pid % PER
    # (no name is assigned in both branches: Triton wants such a name to keep one type)
    if r < KT * QG:
        tq = (blk * KT + r // QG).to(tl.int64)
        if tq < T:
            _rotate_heads(q_ptr + tq * sqt, q_ptr + tq * sqt, sqh, sqh, (r % QG) * HEADS, HQ, pos_ptr + tq,
                          cache_ptr, sc, HALF, BLOCK_HALF, HEADS, IS_NEOX)
    else:
        i = tl.arange(0, BLOCK_HALF)[None, :]
        j = tl.arange(0, KT * HK)[:, None]
        tk = blk.to(tl.int64) * KT + j // HK
        rows = tk < T
        m = rows & (i < HALF)
        first = tk * skt + (j % HK) * skh + (i if IS_NEOX else i * 2)
        second = first + (HALF if IS_NEOX else 1)
        a = tl.load(k_ptr + first, mask=m, other=0.0).to(tl.float32)
        b = tl.load(k_ptr + second, mask=m, other=0.0).to(tl.float32)
        pos = tl.load(pos_ptr + tk, mask=rows, other=0).to(tl.int64)
        cos = tl.load(cache_ptr + pos * sc + i, mask=m, other=0.0).to(tl.float32)
        sin = tl.load(cache_ptr + pos * sc + HALF + i, mask=m, other=0.0).to(tl.float32)
        ty = k_ptr.dtype.element_ty
        tl.store(k_ptr + first, (a * cos - b * sin).to(ty), mask=m)
        tl.store(k_ptr + second, (b * cos + a * sin).to(ty), mask=m)


def rope_variants5(inp):
    _, pos, q, k, cache, T, HQ, HK, HALF, BH = _rope_args(inp)
    v = {"kernel-heads32-w4": rope_variants3(inp)["kernel-heads32-w4"]}  # the kernel's pick, as it is
    for heads, kt, nw in ((32, 4, 4), (32, 2, 4), (32, 8, 4), (16, 4, 4), (16, 2, 4), (32, 4, 8), (16, 2, 2), (16, 2, 8),
                          (8, 1, 2), (8, 1, 1), (32, 4, 2)):
        per = kt * triton.cdiv(HQ, heads) + 1
        def f(heads=heads, kt=kt, nw=nw, per=per):
            _rope_blocks[(triton.cdiv(T, kt) * per,)](
                pos, q, k, cache, q.stride(0), q.stride(1), k.stride(0), k.stride(1), cache.stride(0), T,
                HQ=HQ, HK=HK, HALF=HALF, BLOCK_HALF=BH, HEADS=heads, KT=kt, IS_NEOX=inp["is_neox"], num_warps=nw)
            return q, k
        v[f"blocks-heads{heads}-kt{kt}-w{nw}"] = f
    return v


VARIANTS5 = {"rotary_embedding": (rope_variants5, ("kcheck", "liger"))}


# --------------------------------------------------------------------------- round 7: one-token SiLU-and-mul

# At T=1 SiLU-and-mul ties torch.compile's kernel to within one event tick (0.03 us): both are a
# launch and one round trip to memory. What is left in ours before the first load is index
# arithmetic: a division by the block count, an int64 row offset and a runtime row stride.
# ONE_ROW drops all three (the one-token bucket holds T=1 alone); WIDE=False keeps int32 offsets.


@triton.jit
def _silu_lean(x_ptr, out_ptr, sx, so, I: tl.constexpr, BLOCK_I: tl.constexpr, ONE_ROW: tl.constexpr,
               WIDE: tl.constexpr):
    BLOCKS: tl.constexpr = (I + BLOCK_I - 1) // BLOCK_I
    pid = tl.program_id(0)
    if ONE_ROW:
        cols = pid * BLOCK_I + tl.arange(0, BLOCK_I)
        xo = cols
        oo = cols
    elif WIDE:
        cols = (pid % BLOCKS) * BLOCK_I + tl.arange(0, BLOCK_I)
        xo = (pid // BLOCKS).to(tl.int64) * sx + cols
        oo = (pid // BLOCKS).to(tl.int64) * so + cols
    else:
        cols = (pid % BLOCKS) * BLOCK_I + tl.arange(0, BLOCK_I)
        xo = (pid // BLOCKS) * sx + cols
        oo = (pid // BLOCKS) * so + cols
    g = tl.load(x_ptr + xo).to(tl.float32)
    u = tl.load(x_ptr + I + xo).to(tl.float32)
    tl.store(out_ptr + oo, (g * tl.sigmoid(g) * u).to(out_ptr.dtype.element_ty))


def silu_variants7(inp):
    x, out = inp["x"], inp["out"]
    M, I = x.shape[0], x.shape[1] // 2
    v = _silu_blocks(inp, ((1024, 8), (1024, 4)))
    for bi, nw, one, wide in ((1024, 8, True, False), (1024, 4, True, False), (2048, 8, True, False),
                              (512, 4, True, False), (1024, 8, False, False), (1024, 4, False, False),
                              (1024, 8, False, True)):
        if one and M != 1:
            continue
        def f(bi=bi, nw=nw, one=one, wide=wide):
            _silu_lean[(M * triton.cdiv(I, bi),)](x, out, x.stride(0), out.stride(0), I=I, BLOCK_I=bi,
                                                  ONE_ROW=one, WIDE=wide, num_warps=nw)
            return out
        v[f"lean{bi}-w{nw}-{'one' if one else 'wide' if wide else 'int32'}"] = f
    return v


VARIANTS7 = {"silu_and_mul": (silu_variants7, ("kcheck", "liger", "torch.compile"))}


# --------------------------------------------------------------------------- round 8: a row across a cluster

# At T=16384 the best 1:1 movers of the norms' bytes are small programs (2,048 elements on 8 warps,
# 16 bytes a thread; kernels_ceiling.py --movers), and a norm's program must hold a whole row for
# its sum. With num_ctas > 1, Triton on Hopper spreads one program's tile over a thread-block
# cluster and reduces across it through distributed shared memory: a row in 2 or 4 smaller CTAs.


def norm_variants8(inp):
    return _rows(inp, [(rows, nw, {"num_ctas": ctas}) for rows, nw, ctas in
                       ((1, 8, 1), (1, 2, 1), (1, 4, 2), (1, 2, 2), (1, 8, 2), (1, 4, 4), (1, 2, 4), (2, 4, 2))])


VARIANTS8 = {
    "rms_norm": (norm_variants8, ("kcheck", "liger")),
    "fused_add_rms_norm": (norm_variants8, ("kcheck", "liger")),
}


# --------------------------------------------------------------------------- round 9: rows read back from L2

# Nsight Compute (kernels/results/h200_ncu_tail.txt) puts fused add+RMSNorm's gap to the fastest
# copy in the cycles when every SM is busy, with 2-warp programs at 25% occupancy (128 registers
# a thread: the row stays in registers across the sum). Here the row is walked in CHUNK-wide
# pieces and not held: the first pass stores the residual sum and accumulates its squares, the
# second reads that sum back (it was just written, so from L2) and writes the normalised row.
# RMSNorm likewise reads its input row twice, the second time from L2. DRAM traffic is unchanged.
# (The read-back of the residual is safe because every element is read by the thread that wrote
# it, and the sum's cross-warp reduction is a barrier between the passes.)


@triton.jit
def _scale_row(src, w_ptr, dst, N, rstd, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr):
    """The second pass: read the row back (from L2), scale it by rstd and the weight, store it."""
    for c in tl.static_range(0, BLOCK_N, CHUNK):
        cols = c + tl.arange(0, CHUNK)
        m = cols < N
        v = tl.load(src + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(dst + cols, (v * rstd * w).to(dst.dtype.element_ty), mask=m)


@triton.jit
def _fused_reload(x_ptr, r_ptr, w_ptr, out_ptr, rout_ptr, sx, sr, so, sro, N, eps,
                  BLOCK_N: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for c in tl.static_range(0, BLOCK_N, CHUNK):
        cols = c + tl.arange(0, CHUNK)
        m = cols < N
        s = (tl.load(x_ptr + row * sx + cols, mask=m, other=0.0).to(tl.float32)
             + tl.load(r_ptr + row * sr + cols, mask=m, other=0.0).to(tl.float32)).to(rout_ptr.dtype.element_ty)
        tl.store(rout_ptr + row * sro + cols, s, mask=m)
        acc += s.to(tl.float32) * s.to(tl.float32)
    _scale_row(rout_ptr + row * sro, w_ptr, out_ptr + row * so, N, tl.rsqrt(tl.sum(acc, axis=0) / N + eps), BLOCK_N, CHUNK)


@triton.jit
def _rms_reload(x_ptr, w_ptr, out_ptr, sx, so, N, eps, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for c in tl.static_range(0, BLOCK_N, CHUNK):
        cols = c + tl.arange(0, CHUNK)
        x = tl.load(x_ptr + row * sx + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    _scale_row(x_ptr + row * sx, w_ptr, out_ptr + row * so, N, tl.rsqrt(tl.sum(acc, axis=0) / N + eps), BLOCK_N, CHUNK)


def norm_variants9(inp):
    x, w, eps, out = inp["x"], inp["weight"], inp["eps"], inp["out"]
    M, N = x.shape
    BN = triton.next_power_of_2(N)
    fused = "residual" in inp
    v = _rows(inp, [(1, 2, {}), (1, 4, {}), (1, 8, {})])
    for chunk, nw in ((BN, 2), (BN, 4), (BN, 8), (2048, 2), (2048, 4), (2048, 8), (1024, 4), (1024, 8)):
        if fused:
            r, rout = inp["residual"], inp["residual_out"]
            def f(chunk=chunk, nw=nw):
                _fused_reload[(M,)](x, r, w, out, rout, x.stride(0), r.stride(0), out.stride(0), rout.stride(0), N, eps,
                                    BLOCK_N=BN, CHUNK=min(chunk, BN), num_warps=nw)
                return out, rout
        else:
            def f(chunk=chunk, nw=nw):
                _rms_reload[(M,)](x, w, out, x.stride(0), out.stride(0), N, eps, BLOCK_N=BN, CHUNK=min(chunk, BN), num_warps=nw)
                return out
        v[f"reload{chunk}-w{nw}"] = f
    return v


VARIANTS9 = {
    "rms_norm": (norm_variants9, ("kcheck", "liger")),
    "fused_add_rms_norm": (norm_variants9, ("kcheck", "liger")),
}


# --------------------------------------------------------------------------- round 10: in place or not

# The movers (kernels_ceiling.py --movers) put in-place swaps 2 to 3 points of the datasheet below
# copies of two arrays into two others at the same bytes. Here the kernels themselves: fused
# add+RMSNorm and RoPE writing over their inputs (the engines' mode) against separate outputs.


def placement_variants10(inp):
    from kcheck.kernels.fused_add_rms_norm import fused_add_rms_norm
    from kcheck.kernels.rotary_embedding import rotary_embedding
    if "residual" in inp:
        own = {k: v for k, v in inp.items() if k not in ("out", "residual_out")}
        return {"in-place": lambda: fused_add_rms_norm(**own), "separate-outputs": lambda: fused_add_rms_norm(**inp)}
    outs = {"query_out": torch.empty_like(inp["query"]), "key_out": torch.empty_like(inp["key"])}
    return {"in-place": lambda: rotary_embedding(**inp), "separate-outputs": lambda: rotary_embedding(**inp, **outs)}


VARIANTS10 = {
    "fused_add_rms_norm": (placement_variants10, ()),
    "rotary_embedding": (placement_variants10, ()),
}


# --------------------------------------------------------------------------- round 11: RoPE's positions

# The benchmark draws positions uniformly from [0, 40960), so each token's cos/sin row is a random
# 512-byte read from a 21 MB cache that the L2 flush has evicted. A prefill of T tokens reads rows
# 0..T-1 in order instead. Same kernel, same q and k, three position patterns; the check column
# compares every row with the random-position reference, so it applies to the first row only.


def positions_variants11(inp):
    from kcheck.kernels.rotary_embedding import rotary_embedding
    pos = inp["positions"]
    prefill = torch.arange(pos.numel(), device=pos.device, dtype=pos.dtype)
    return {"positions-random": lambda: rotary_embedding(**inp),
            "positions-prefill": lambda: rotary_embedding(**{**inp, "positions": prefill}),
            "positions-all-zero": lambda: rotary_embedding(**{**inp, "positions": torch.zeros_like(pos)})}


VARIANTS11 = {"rotary_embedding": (positions_variants11, ("liger",))}


# --------------------------------------------------------------------------- round 12: CUDA C++ norms

# Rounds 1-11 found no Triton design of RMSNorm or fused add+RMSNorm faster than the kernels, and
# one design Triton 3.6 cannot build: a row split over a thread-block cluster (round 8). Here
# kernels_cuda_norms.cu writes it, and the plain designs beside it, in CUDA C++: one row per CTA
# of 64-512 threads, one row over a cluster of 2-8 CTAs meeting in distributed shared memory, one
# row per warp, and the same loads and stores without arithmetic (cuda-copy*: a mover of the
# op's pattern, whose check column is not a norm's and reads about 1).


@functools.cache
def _cuda_library(source: str) -> ctypes.CDLL:
    """Build ``benchmarks/<source>`` for sm_90 with nvcc (registers and spills printed) and load it."""
    lib_path = pathlib.Path(tempfile.mkdtemp()) / pathlib.Path(source).with_suffix(".so").name
    cmd = ["nvcc", "-O3", "-std=c++17", "-arch=sm_90", "-Xptxas", "-v", "--shared", "-Xcompiler", "-fPIC",
           "-o", str(lib_path), str(pathlib.Path(__file__).with_name(source))]
    built = subprocess.run(cmd, check=False, capture_output=True, text=True)
    for line in built.stderr.splitlines():
        if "registers" in line or "spill" in line or "error" in line:
            print("nvcc:", line.strip(), flush=True)
    built.check_returncode()
    return ctypes.CDLL(str(lib_path))


def _cuda_norms() -> ctypes.CDLL:
    lib = _cuda_library("kernels_cuda_norms.cu")
    p, i, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    lib.kc_norm_rows.argtypes = [p, p, p, p, p, i, f, i, i, i, p]
    lib.kc_norm_warp_rows.argtypes = [p, p, p, p, p, i, f, i, i, p]
    lib.kc_copy_rows.argtypes = [p, p, p, p, i, i, i, p]
    return lib


def _cuda_call(entry, result, *args, keep=()):
    """A zero-argument callable launching ``entry(*args, stream)`` on the current stream. The
    arguments are raw pointers: ``keep`` holds tensors that only they refer to, so that their
    memory is not freed and reused while the callable lives."""
    def f(keep=keep):
        err = entry(*args, torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"{entry.__name__}{args[-3:]}: error {err}")
        return result
    return f


def cuda_norm_variants12(inp):
    x, w, eps, out = inp["x"], inp["weight"], inp["eps"], inp["out"]
    M, N = x.shape
    v = _rows(inp, [(1, 8, {}), (1, 2, {})])  # the Triton kernel's candidates, for the same-run comparison
    if INTERPRET or N != 4096 or x.dtype != torch.bfloat16:
        return v  # the CUDA source needs a GPU and is built for Qwen3-8B's hidden size in bf16 only
    lib = _cuda_norms()
    fused = "residual" in inp
    r, rout = (inp["residual"], inp["residual_out"]) if fused else (None, None)
    result = (out, rout) if fused else out
    ptrs = [t.data_ptr() if t is not None else None for t in (x, r, w, out, rout)]
    for threads, cluster in ((64, 1), (128, 1), (256, 1), (512, 1), (64, 2), (128, 2), (256, 2), (64, 4), (128, 4), (64, 8)):
        v[f"cuda-cta{threads}" + (f"-cluster{cluster}" if cluster > 1 else "")] = _cuda_call(
            lib.kc_norm_rows, result, *ptrs, M, eps, threads, cluster, int(fused))
    for warps in (2, 4, 8):
        v[f"cuda-warp-rows-w{warps}"] = _cuda_call(lib.kc_norm_warp_rows, result, *ptrs, M, eps, warps, int(fused))
    for threads in (128, 256, 512):
        v[f"cuda-copy{threads}"] = _cuda_call(lib.kc_copy_rows, result, ptrs[0], ptrs[1], ptrs[3], ptrs[4], M, threads, int(fused))
    return v


VARIANTS12 = {
    "rms_norm": (cuda_norm_variants12, ("kcheck", "liger")),
    "fused_add_rms_norm": (cuda_norm_variants12, ("kcheck", "liger")),
}


# --------------------------------------------------------------------------- round 13: RoPE reading whole heads

# The kernel reads each head as two half-rows (NeoX) or even and odd elements (GPT-J) and writes
# them back the same way. Here a program reads its heads as one contiguous [HEADS, D] tile, pairs
# the elements in registers (reshape, and for NeoX a permute, then split) and writes one tile.


@triton.jit
def _rotate_tile(x_ptr, sh, h0, H, pos_ptr, cache_ptr, sc, HALF: tl.constexpr, HEADS: tl.constexpr, IS_NEOX: tl.constexpr):
    h = h0 + tl.arange(0, HEADS)[:, None]
    d = tl.arange(0, 2 * HALF)[None, :]
    m = (h < H) & (d < 2 * HALF)
    x = tl.load(x_ptr + h * sh + d, mask=m, other=0.0).to(tl.float32)
    pos = tl.load(pos_ptr).to(tl.int64)
    i = tl.arange(0, HALF)
    cos = tl.load(cache_ptr + pos * sc + i).to(tl.float32)[None, :]
    sin = tl.load(cache_ptr + pos * sc + HALF + i).to(tl.float32)[None, :]
    if IS_NEOX:
        a, b = tl.split(tl.permute(tl.reshape(x, [HEADS, 2, HALF]), [0, 2, 1]))
        y = tl.reshape(tl.permute(tl.join(a * cos - b * sin, b * cos + a * sin), [0, 2, 1]), [HEADS, 2 * HALF])
    else:
        a, b = tl.split(tl.reshape(x, [HEADS, HALF, 2]))
        y = tl.reshape(tl.join(a * cos - b * sin, b * cos + a * sin), [HEADS, 2 * HALF])
    tl.store(x_ptr + h * sh + d, y.to(x_ptr.dtype.element_ty), mask=m)


@triton.jit
def _rope_tiles(pos_ptr, q_ptr, k_ptr, cache_ptr, sqt, sqh, skt, skh, sc,
                HQ: tl.constexpr, HK: tl.constexpr, HALF: tl.constexpr, HEADS: tl.constexpr, IS_NEOX: tl.constexpr):
    QG: tl.constexpr = (HQ + HEADS - 1) // HEADS
    KG: tl.constexpr = (HK + HEADS - 1) // HEADS
    pid = tl.program_id(0)
    t = (pid // (QG + KG)).to(tl.int64)
    g = pid % (QG + KG)
    if g < QG:
        _rotate_tile(q_ptr + t * sqt, sqh, g * HEADS, HQ, pos_ptr + t, cache_ptr, sc, HALF, HEADS, IS_NEOX)
    else:
        _rotate_tile(k_ptr + t * skt, skh, (g - QG) * HEADS, HK, pos_ptr + t, cache_ptr, sc, HALF, HEADS, IS_NEOX)


def rope_variants13(inp):
    _, pos, q, k, cache, T, HQ, HK, HALF, _ = _rope_args(inp)
    v = {}
    for heads, nw in ((32, 4), (16, 4), (16, 2), (8, 2), (8, 1), (32, 8)):
        groups = triton.cdiv(HQ, heads) + triton.cdiv(HK, heads)
        def f(heads=heads, nw=nw, groups=groups):
            _rope_tiles[(T * groups,)](pos, q, k, cache, q.stride(0), q.stride(1), k.stride(0), k.stride(1), cache.stride(0),
                                       HQ=HQ, HK=HK, HALF=HALF, HEADS=heads, IS_NEOX=inp["is_neox"], num_warps=nw)
            return q, k
        v[f"tiles-heads{heads}-w{nw}"] = f
    return v


VARIANTS13 = {"rotary_embedding": (rope_variants13, ("kcheck", "liger"))}


# --------------------------------------------------------------------------- round 14: CUDA C++ RoPE

# RoPE runs 3 points of the datasheet below copies of its bytes, waiting on loads at 56% occupancy
# (54 registers a thread). kernels_cuda_rope.cu writes the same design in CUDA C++, one CTA per
# group of 4 to 32 heads of a token, or per token, each thread rotating 8 pairs with 16-byte accesses;
# the "-gathered" rows read cos/sin rows gathered beforehand (row t for token t), the same kernel
# without the load that waits on the position.


def cuda_rope_variants14(inp):
    _, pos, q, k, cache, T, HQ, HK, HALF, _ = _rope_args(inp)
    if (INTERPRET or not inp["is_neox"] or HALF != 64 or q.dtype != torch.bfloat16 or cache.dtype != torch.float32
            or pos.dtype != torch.int64 or not all(t.is_contiguous() for t in (q, k, cache))):
        return {}  # built for contiguous bf16 heads of 128 in the NeoX layout with an fp32 cache
    lib = _cuda_library("kernels_cuda_rope.cu")
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.kc_rope.argtypes = [p, p, p, p, i, i, i, i, i, p]
    rows = cache[pos].contiguous()  # gathered once, outside the timing, for the "-gathered" rows
    v = {}
    for h in (8, 16, 32, 0):
        name = f"cuda-heads{h}" if h else "cuda-token"
        v[name] = _cuda_call(lib.kc_rope, (q, k), pos.data_ptr(), q.data_ptr(), k.data_ptr(), cache.data_ptr(),
                             T, HQ, HK, h, 0)
        v[name + "-gathered"] = _cuda_call(lib.kc_rope, (q, k), pos.data_ptr(), q.data_ptr(), k.data_ptr(),
                                           rows.data_ptr(), T, HQ, HK, h, 1, keep=(rows,))
    return v


VARIANTS14 = {"rotary_embedding": (cuda_rope_variants14, ("kcheck", "liger"))}


# --------------------------------------------------------------------------- driver


def _err(spec, outs, ref):
    outs = outs if isinstance(outs, tuple) else (outs,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    if spec.name == "per_token_fp8_quant":
        (q, s), (rq, rs) = outs, ref
        return f"fp8 diff {int((q.float() != rq.float()).sum())} scale diff {int((s != rs).sum())}"
    worst = 0.0
    for o, r in zip(outs, ref):
        d = (o.float() - r.float()).norm() / r.float().norm().clamp_min(1e-30)
        worst = max(worst, float(d))
    return f"rel {worst:.1e}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--op", action="append", choices=("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding", "per_token_fp8_quant"))
    parser.add_argument("--tokens", default="16384,4096")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--round", type=int, default=1, choices=tuple(range(1, 15)))
    parser.add_argument("--out", help="also write the rows, with the environment, to this JSON file")
    args = parser.parse_args()
    variants = {1: VARIANTS, 2: VARIANTS2, 3: VARIANTS3, 4: VARIANTS4, 5: VARIANTS5, 6: VARIANTS6, 7: VARIANTS7, 8: VARIANTS8, 9: VARIANTS9, 10: VARIANTS10, 11: VARIANTS11,
                12: VARIANTS12, 13: VARIANTS13, 14: VARIANTS14}[args.round]
    device = torch.device("cpu" if INTERPRET else "cuda")
    tokens = [int(t) for t in args.tokens.split(",")]
    timer = None if INTERPRET else Timer(device, reps=args.reps)
    table, rows = [], []
    for spec in specs(args.op or tuple(variants)):
        make_variants, peer_names = variants[spec.name]
        for t in tokens:
            shape = dict(spec.bench_shapes[-1], tokens=t)
            gen = torch.Generator(device=device)
            gen.manual_seed(t)
            base = spec.make_inputs(shape, torch.bfloat16, device, gen)
            if spec.name == "fused_add_rms_norm":  # separate outputs, so the check sees one application
                base["out"], base["residual_out"] = torch.empty_like(base["x"]), torch.empty_like(base["x"])
            ref = spec.reference(**{k: (v.clone() if torch.is_tensor(v) else v) for k, v in base.items()})
            ref = ref if isinstance(ref, tuple) or spec.name != "per_token_fp8_quant" else ref
            nbytes = spec.bytes(shape, torch.bfloat16)
            fns = {}
            for name, fn in make_variants(dict(base)).items():
                fns[name] = fn
            if timer is not None:
                for p, factory in peers(spec, peer_names).items():
                    fn = factory(dict(base))
                    if fn is not None:
                        fns["=" + p] = fn
            # correctness first, each on fresh copies of the inputs
            errs = {}
            for name, fn in fns.items():
                if name.startswith("="):
                    continue
                snapshot = {k: v.clone() for k, v in base.items() if torch.is_tensor(v)}
                try:
                    errs[name] = _err(spec, fn(), ref)
                except Exception as e:  # noqa: BLE001 -- report the failing variant and go on
                    errs[name] = f"FAILED {type(e).__name__}: {str(e)[:160]}"
                for k, v in snapshot.items():
                    base[k].copy_(v)
            if timer is None:
                for name, e in errs.items():
                    print(f"check {spec.name:20} T={t:6} {name:28} {e}")
                continue
            times = {n: [] for n in fns if not errs.get(n, "").startswith("FAILED")}
            for _ in range(args.rounds):
                for name in times:
                    times[name].append(timer.median_us(fns[name]))
            for name in times:
                us = statistics.median(times[name])
                gbps, spread = nbytes / us / 1e3, max(times[name]) - min(times[name])
                rows.append({"case": f"{spec.name} T={t} {name}", "bytes": nbytes, "median_us": round(us, 2),
                             "gbps": round(gbps, 1), "frac_datasheet": round(gbps / H200_GBPS, 4),
                             "spread_us": round(spread, 2), "check": errs.get(name)})
                line = (f"{spec.name:20} T={t:6} {name:28} {us:9.2f} us {gbps:6.0f} GB/s "
                        f"{gbps / H200_GBPS:6.1%}  spread {spread:5.2f}  {errs.get(name, '')}")
                print(line, flush=True)
                table.append(line)
            for name, e in errs.items():
                if e.startswith("FAILED"):
                    print(f"{spec.name:20} T={t:6} {name:28} {e}", flush=True)
    print("\n".join(table))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({**environment(), "round": args.round, "rounds": args.rounds, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
