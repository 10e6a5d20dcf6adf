"""Issue 26, third pass: what is left between RMSNorm / SiLU-and-mul to FP8 and their movers at T >= 4096.

    python benchmarks/kernels_fused_fp8_gap.py [--tokens 1,32,256,4096,16384] [--rounds 7] [--out FILE.json]

Times, interleaved in rounds with the harness's timer (median of device events, L2 flushed by a
read), the shipped kernels (autotuned), the kernels as they were before this pass (``before``:
their bodies are copied here), the shipped kernels launched directly at each number of warps, one
other RMSNorm design, the movers (autotuned, and launched directly at each number of warps) and our
unfused pair. What changed in the shipped kernels, each keeping every e4m3 value and scale:

- bf16 widened to fp32 two at a time with ``shl`` and ``and`` (``per_token_fp8_quant.widen``):
  Triton 3.6 widens the high half of each register with a ``prmt`` and a shift, so 1.5
  instructions an element become 1, for x and the weight (RMSNorm) and for gate and up (SiLU).
- SiLU-and-mul reads the tail of its row (4096 of 12288 columns) before reducing the head's
  maximum. Before, the head's reduction, with its two barriers, came first in the program and held
  the tail's loads back: each program waited on memory twice.
- SiLU-and-mul's loads and stores unmasked when one row a program fills both tiles (I = 8192 + 4096).


``--explore`` adds two RMSNorm designs that were tried and not shipped: ``twotile``, the row as two
tiles of N/2 columns added into one another element by element before the one reduction (each
thread's serial chains of FFMA and FMNMX half as long), and a register cap on 4 warps (it spills).

``--tiles`` (issue 26, fourth pass; RMSNorm at T >= 4096) times ``fourtile``, the row read as four
tiles of N/4 columns added into one another before the one reduction (chains a quarter as long;
four separate loads, since Triton lays a [4, N/4] tile across the warps), on 8 and 4 warps, beside
the shipped kernel at 4 and 8 warps and autotuned, the movers and our unfused pair. With
``benchmarks/kernels_fused_fp8_tiles.patch`` applied (``git apply``: the same four tiles as a
``TILES`` 4 path of the kernel, autotuned on 8 and 4 warps) it also times that path, and
``tiles4_w8`` / ``tiles4_w4`` launch it wherever it applies, for ``python -m kcheck.kernels verify
--op rms_norm_fp8_quant --impl kernels_fused_fp8_gap:tiles4_w8`` (``benchmarks/`` on
``PYTHONPATH``): the harness's cases, bf16 and fp16, graph replay.

``packed`` (RMSNorm) keeps x as loaded (bf16, half the registers) across the reduction and forms
x·w again after it, the weight read again from L1: fewer registers, more instructions.

Each variant is first compared with the shipped kernel on the same inputs (e4m3 values and scales
bit for bit), and the shipped kernel with our unfused pair.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import triton
import triton.language as tl

from kcheck.kernels import _movers
from kcheck.kernels import rms_norm_fp8_quant as rn8
from kcheck.kernels import silu_and_mul_fp8_quant as sm8
from kcheck.kernels._launch import token_bucket
from kcheck.kernels.harness import Timer, environment, interleaved, seeded_inputs
from kcheck.kernels.per_token_fp8_quant import FP8_MAX, MIN_SCALE, round_like, row_scales, sum_and_absmax, to_e4m3, widen
from kcheck.kernels.silu_and_mul_fp8_quant import sigmoid


@triton.jit
def _widen2(v):
    """``widen`` with its two instructions swapped: another asm string, so LLVM does not merge it
    with the first widening of the same registers (which would keep the fp32 values alive)."""
    return tl.inline_asm_elementwise("{ and.b32 $1, $2, 0xffff0000; shl.b32 $0, $2, 16; }",
                                     "=r,=r,r", [v], dtype=tl.float32, is_pure=True, pack=2)


@triton.jit
def rms_before(x_ptr, w_ptr, q_ptr, s_ptr, stride_xm, stride_qm, M, N, eps,
               FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr, BLOCK_N: tl.constexpr):
    """The shipped kernel before this pass, one whole row a program, N = BLOCK_N (its path at H=4096)."""
    rows = tl.program_id(0).to(tl.int64) + tl.zeros([1, 1], tl.int64)
    cols = tl.arange(0, BLOCK_N)[None, :]
    x = tl.load(x_ptr + rows * stride_xm + cols).to(tl.float32)
    w = tl.load(w_ptr + cols).to(tl.float32)
    vw = x * w
    ss, amax_vw = tl.reduce((x * x, tl.abs(vw)), 1, sum_and_absmax)
    rstd = tl.rsqrt(ss / N + eps)
    y = round_like(vw * rstd[:, None], x_ptr, False)
    amax = (amax_vw * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    scale, r = row_scales(amax, s_ptr, rows, M, FP8_MAX, MIN_SCALE, False)
    tl.store(q_ptr + rows * stride_qm + cols, to_e4m3(y, scale, r, FP8_MAX, False).to(q_ptr.dtype.element_ty))


@triton.jit
def rms_packed(x_ptr, w_ptr, q_ptr, s_ptr, stride_xm, stride_qm, M, N, eps,
               FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr, BLOCK_N: tl.constexpr):
    """x kept as loaded (bf16) across the reduction; x·w formed again after it, the weight read again."""
    rows = tl.program_id(0).to(tl.int64) + tl.zeros([1, 1], tl.int64)
    cols = tl.arange(0, BLOCK_N)[None, :]
    xb = tl.load(x_ptr + rows * stride_xm + cols)
    x = widen(xb, False)
    w = widen(tl.load(w_ptr + cols), False)
    ss, amax_vw = tl.reduce((x * x, tl.abs(x * w)), 1, sum_and_absmax)
    rstd = tl.rsqrt(ss / N + eps)
    amax = (amax_vw * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    scale, r = row_scales(amax, s_ptr, rows, M, FP8_MAX, MIN_SCALE, False)
    w2 = _widen2(tl.load(w_ptr + cols, cache_modifier=".ca"))
    y = round_like(_widen2(xb) * w2 * rstd[:, None], x_ptr, False)
    tl.store(q_ptr + rows * stride_qm + cols, to_e4m3(y, scale, r, FP8_MAX, False).to(q_ptr.dtype.element_ty))


@triton.jit
def rms_twotile(x_ptr, w_ptr, q_ptr, s_ptr, stride_xm, stride_qm, M, N, eps,
                FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr, HALF: tl.constexpr):
    """The row as two tiles of N/2 columns, combined element by element before the one reduction:
    each thread's serial chains of FFMA and FMNMX half as long, the same barriers."""
    rows = tl.program_id(0).to(tl.int64) + tl.zeros([1, 1], tl.int64)
    ca = tl.arange(0, HALF)[None, :]
    cb = HALF + ca
    xa = widen(tl.load(x_ptr + rows * stride_xm + ca), False)
    xb = widen(tl.load(x_ptr + rows * stride_xm + cb), False)
    wa = widen(tl.load(w_ptr + ca), False)
    wb = widen(tl.load(w_ptr + cb), False)
    va = xa * wa
    vb = xb * wb
    ss, amax_vw = tl.reduce((tl.fma(xa, xa, xb * xb), tl.maximum(tl.abs(va), tl.abs(vb))), 1, sum_and_absmax)
    rstd = tl.rsqrt(ss / N + eps)
    amax = (amax_vw * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    scale, r = row_scales(amax, s_ptr, rows, M, FP8_MAX, MIN_SCALE, False)
    ya = round_like(va * rstd[:, None], x_ptr, False)
    yb = round_like(vb * rstd[:, None], x_ptr, False)
    tl.store(q_ptr + rows * stride_qm + ca, to_e4m3(ya, scale, r, FP8_MAX, False).to(q_ptr.dtype.element_ty))
    tl.store(q_ptr + rows * stride_qm + cb, to_e4m3(yb, scale, r, FP8_MAX, False).to(q_ptr.dtype.element_ty))


@triton.jit
def rms_fourtile(x_ptr, w_ptr, q_ptr, s_ptr, stride_xm, stride_qm, M, N, eps,
                 FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr, QUARTER: tl.constexpr):
    """``rms_twotile`` with four tiles of N/4 columns: each thread's chains a quarter as long."""
    rows = tl.program_id(0).to(tl.int64) + tl.zeros([1, 1], tl.int64)
    c0 = tl.arange(0, QUARTER)[None, :]
    xr = x_ptr + rows * stride_xm
    x0 = widen(tl.load(xr + c0), False)
    x1 = widen(tl.load(xr + QUARTER + c0), False)
    x2 = widen(tl.load(xr + 2 * QUARTER + c0), False)
    x3 = widen(tl.load(xr + 3 * QUARTER + c0), False)
    v0 = x0 * widen(tl.load(w_ptr + c0), False)
    v1 = x1 * widen(tl.load(w_ptr + QUARTER + c0), False)
    v2 = x2 * widen(tl.load(w_ptr + 2 * QUARTER + c0), False)
    v3 = x3 * widen(tl.load(w_ptr + 3 * QUARTER + c0), False)
    sq = tl.fma(x0, x0, x1 * x1) + tl.fma(x2, x2, x3 * x3)
    mx = tl.maximum(tl.maximum(tl.abs(v0), tl.abs(v1)), tl.maximum(tl.abs(v2), tl.abs(v3)))
    ss, amax_vw = tl.reduce((sq, mx), 1, sum_and_absmax)
    rstd = tl.rsqrt(ss / N + eps)
    amax = (amax_vw * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    scale, r = row_scales(amax, s_ptr, rows, M, FP8_MAX, MIN_SCALE, False)
    qr = q_ptr + rows * stride_qm
    tl.store(qr + c0, to_e4m3(round_like(v0 * rstd[:, None], x_ptr, False), scale, r, FP8_MAX, False).to(q_ptr.dtype.element_ty))
    tl.store(qr + QUARTER + c0, to_e4m3(round_like(v1 * rstd[:, None], x_ptr, False), scale, r, FP8_MAX, False).to(q_ptr.dtype.element_ty))
    tl.store(qr + 2 * QUARTER + c0, to_e4m3(round_like(v2 * rstd[:, None], x_ptr, False), scale, r, FP8_MAX, False).to(q_ptr.dtype.element_ty))
    tl.store(qr + 3 * QUARTER + c0, to_e4m3(round_like(v3 * rstd[:, None], x_ptr, False), scale, r, FP8_MAX, False).to(q_ptr.dtype.element_ty))


@triton.jit
def _silu_mul_before(x_row, cols, mask, I):
    g = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_row + I + cols, mask=mask, other=0.0).to(tl.float32)
    return round_like(g * sigmoid(g, False) * u, x_row, False)


@triton.jit
def silu_before(x_ptr, q_ptr, s_ptr, stride_xm, stride_qm, M, I,
                FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr):
    """The shipped kernel before this pass (one row a program; the head's maximum reduced before
    the tail is read)."""
    rows = tl.program_id(0).to(tl.int64) + tl.arange(0, 1)[:, None]
    x_row = x_ptr + rows * stride_xm
    q_row = q_ptr + rows * stride_qm
    cols_a = tl.arange(0, BLOCK_A)[None, :]
    mask_a = (rows < M) & (cols_a < I)
    y_a = _silu_mul_before(x_row, cols_a, mask_a, I)
    amax = tl.max(tl.abs(y_a), axis=1)
    cols_b = BLOCK_A + tl.arange(0, BLOCK_B)[None, :]
    mask_b = (rows < M) & (cols_b < I)
    y_b = _silu_mul_before(x_row, cols_b, mask_b, I)
    amax = tl.maximum(amax, tl.max(tl.abs(y_b), axis=1))
    scale, r = row_scales(amax, s_ptr, rows, M, FP8_MAX, MIN_SCALE, False)
    tl.store(q_row + cols_a, to_e4m3(y_a, scale, r, FP8_MAX, False).to(q_ptr.dtype.element_ty), mask=mask_a)
    tl.store(q_row + cols_b, to_e4m3(y_b, scale, r, FP8_MAX, False).to(q_ptr.dtype.element_ty), mask=mask_b)


COMMON = dict(FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE)
EXPLORE = False  # --explore: the RMSNorm designs of the second run (two tiles, a register cap)
TILE_SWEEP = False  # --tiles: the four-tile RMSNorm
TILED = "TILES" in rn8._rms_norm_fp8_quant_kernel.fn.arg_names  # the kernel has the patch's tiled path
ONE_TILE = {"TILES": 1} if TILED else {}
QUANT = dict(FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE, STATIC=False, ROUND_IN_FP32=False)


def forced(tiles: int, warps: int):
    """``rms_norm_fp8_quant`` launching its kernel as ``tiles`` tiles on ``warps`` warps wherever the
    tiled path applies (one row a program, N a power of two); elsewhere the shipped wrapper."""

    def impl(x, weight, eps=1e-6, out=None, scale=None, static_scale=None):
        if not TILED:
            raise RuntimeError("the kernel has no TILES path: apply benchmarks/kernels_fused_fp8_tiles.patch")
        M, N = x.shape
        if not (x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and N == triton.next_power_of_2(N)
                and x.stride(-1) == 1 and N >= 256 * tiles):
            return rn8.rms_norm_fp8_quant(x, weight, eps, out, scale, static_scale)
        out, scale = rn8.outputs("rms_norm_fp8_quant", x, N, out, scale, static_scale)
        rn8._rms_norm_fp8_quant_kernel.fn[(M,)](
            x, weight, out, scale, x.stride(0), out.stride(0), M, N, eps, token_bucket(M),
            **rn8.quant_meta(static_scale), BLOCK_N=N, EVEN=True, ROWS=1, TILES=tiles, num_warps=warps)
        return out, scale

    impl.__name__ = f"tiles{tiles}_w{warps}"
    return impl


tiles4_w8, tiles4_w4 = forced(4, 8), forced(4, 4)


def rms_variants(inputs: dict, large: bool) -> dict:
    x, w, q, s = inputs["x"], inputs["weight"], inputs["out"], inputs["scale"]
    M, N = x.shape
    B = triton.next_power_of_2(N)
    args = (x, w, q, s, x.stride(0), q.stride(0), M, N, 1e-6)
    out = {}
    if TILE_SWEEP:
        for nw, tiles in ((4, 1), (8, 1), *(((8, 4), (4, 4)) if TILED else ())):
            out[f"shipped w{nw}" + (f" tiles {tiles}" if tiles > 1 else "")] = (
                lambda nw=nw, tiles=tiles: rn8._rms_norm_fp8_quant_kernel.fn[(M,)](
                    *args, token_bucket(M), **QUANT, BLOCK_N=B, EVEN=True, ROWS=1,
                    **({"TILES": tiles} if TILED else {}), num_warps=nw))
        for nw in (8, 4):
            out[f"fourtile w{nw}"] = lambda nw=nw: rms_fourtile[(M,)](*args, **COMMON, QUARTER=B // 4, num_warps=nw)
        return out
    for nw in ((4, 8) if large else (8,)):  # the old picks: 4 warps at T >= 4096, 8 (pinned) below
        out[f"before w{nw}"] = lambda nw=nw: rms_before[(M,)](*args, **COMMON, BLOCK_N=B, num_warps=nw)
    if large:
        for nw in (1, 2, 4, 8):
            out[f"shipped w{nw}"] = lambda nw=nw: rn8._rms_norm_fp8_quant_kernel.fn[(M,)](
                *args, token_bucket(M), **QUANT, BLOCK_N=B, EVEN=True, ROWS=1, **ONE_TILE, num_warps=nw)
        for nw in (1, 2):
            out[f"packed w{nw}"] = lambda nw=nw: rms_packed[(M,)](*args, **COMMON, BLOCK_N=B, num_warps=nw)
        if EXPLORE:
            for nw in (2, 4, 8):
                out[f"twotile w{nw}"] = lambda nw=nw: rms_twotile[(M,)](*args, **COMMON, HALF=B // 2, num_warps=nw)
            for reg in (32, 40):
                out[f"shipped w4 maxnreg {reg}"] = lambda reg=reg: rn8._rms_norm_fp8_quant_kernel.fn[(M,)](
                    *args, token_bucket(M), **QUANT, BLOCK_N=B, EVEN=True, ROWS=1, **ONE_TILE, num_warps=4, maxnreg=reg)
    return out


def silu_variants(inputs: dict, large: bool) -> dict:
    x, q, s = inputs["x"], inputs["out"], inputs["scale"]
    M, I = q.shape
    a, b = sm8.split(I)
    args = (x, q, s, x.stride(0), q.stride(0), M, I)
    out = {}
    for nw in ((8,) if large else (32,)):  # the old picks: 8 warps at T >= 4096, 32 (pinned) below
        out[f"before w{nw}"] = lambda nw=nw: silu_before[(M,)](*args, **COMMON, BLOCK_A=a, BLOCK_B=b, num_warps=nw)
    if large:
        for nw in (4, 8, 16):
            out[f"shipped w{nw}"] = lambda nw=nw: sm8._silu_and_mul_fp8_quant_kernel.fn[(M,)](
                *args, token_bucket(M), **QUANT, BLOCK_A=a, BLOCK_B=b, EVEN=a + b == I, ROWS=1, num_warps=nw)
    return out


def movers(op: str, inputs: dict, large: bool) -> dict:
    """The mover as the results run times it (autotuned over the op's candidates), and launched directly."""
    spec = rn8.SPEC if op == rn8.SPEC.name else sm8.SPEC
    out = {"mover (autotuned)": spec.other_peers["mover"](inputs)}
    if not large:
        return out
    if op == rn8.SPEC.name:
        x, w, q, s = inputs["x"], inputs["weight"], inputs["out"], inputs["scale"]
        M, N = x.shape
        for nw in (1, 2, 4, 8):
            out[f"mover w{nw}"] = lambda nw=nw: _movers._row_mover_kernel.fn[(M,)](
                x, w, q, s, x.stride(0), q.stride(0), M, N, token_bucket(M), SCALES=True,
                BLOCK_N=triton.next_power_of_2(N), ROWS=1, num_warps=nw)
        return out
    x, q, s = inputs["x"], inputs["out"], inputs["scale"]
    M, I = q.shape
    for nw in (8, 16, 32):
        out[f"mover w{nw}"] = lambda nw=nw: _movers._gated_mover_kernel.fn[(M,)](
            x, q, s, x.stride(0), q.stride(0), M, I, token_bucket(M), SCALES=True,
            BLOCK_I=triton.next_power_of_2(I), ROWS=1, num_warps=nw)
    return out


def same(q, s, q0, s0) -> dict:
    dq = (rn8.e4m3_steps(q) - rn8.e4m3_steps(q0)).abs()
    return {"values_differing": int((dq > 0).sum()), "max_steps": float(dq.max()),
            "scales_differing": int((s != s0).sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", default="1,32,256,4096,16384")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", default="rms_norm_fp8_quant,silu_and_mul_fp8_quant")
    parser.add_argument("--explore", action="store_true", help="also the two-tile RMSNorm and a register cap")
    parser.add_argument("--tiles", action="store_true", help="RMSNorm: the four-tile form (and the patch's TILES path)")
    parser.add_argument("--out")
    args = parser.parse_args()
    global EXPLORE, TILE_SWEEP
    EXPLORE, TILE_SWEEP = args.explore, args.tiles
    dev = torch.device("cuda")
    timer = Timer(dev)
    tokens = [int(t) for t in args.tokens.split(",")]
    rows, checks = [], []
    began = time.time()
    for spec in (sp for sp in (rn8.SPEC, sm8.SPEC) if sp.name in args.ops.split(",")):
        for shape, inputs in seeded_inputs(spec, tokens, dev):
            T = shape["tokens"]
            large = T >= 4096
            q, s = inputs["out"], inputs["scale"]
            shipped = (lambda spec=spec, inputs=inputs: spec.impl(**inputs))
            shipped()
            torch.cuda.synchronize()
            q0, s0 = q.clone(), s.clone()
            unfused = spec.peers["unfused"](inputs)
            unfused()
            torch.cuda.synchronize()
            c = {"op": spec.name, "tokens": T, "variant": "unfused pair against shipped", **same(q, s, q0, s0)}
            checks.append(c)
            print(json.dumps(c))  # kcheck: ignore[KC404] an exploratory variant's exactness, recorded beside its timing; shipped kernels are verified by kcheck.kernels verify
            fns = {"shipped (autotuned)": shipped}
            var = (rms_variants if spec is rn8.SPEC else silu_variants)(inputs, large)
            for name, fn in var.items():
                q.fill_(0), s.fill_(float("nan"))
                try:
                    fn()
                    torch.cuda.synchronize()
                except Exception as exc:  # a variant that fails to build is reported, not timed
                    checks.append({"op": spec.name, "tokens": T, "variant": name, "error": repr(exc)[:400]})
                    print("FAILED", name, repr(exc)[:400])
                    continue
                c = {"op": spec.name, "tokens": T, "variant": name, **same(q, s, q0, s0)}
                checks.append(c)
                print(json.dumps(c))
                fns[name] = fn
            fns.update(movers(spec.name, inputs, large))
            fns["unfused"] = unfused
            times = interleaved(fns, args.rounds if large else max(3, args.rounds - 2), timer)
            mover = statistics.median(times["mover (autotuned)"])
            for name, v in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
                us = statistics.median(v)
                rows.append({"op": spec.name, "tokens": T, "impl": name, "median_us": round(us, 3),
                             "spread_us": round(max(v) - min(v), 3), "rounds_us": [round(t, 3) for t in v]})
                print(f"{spec.name:24s} T={T:6d} {name:22s} {us:9.2f} us  spread {max(v) - min(v):5.2f}"
                      f"  behind the autotuned mover {100 * (us / mover - 1):6.1f}%")
            if torch.cuda.is_available():
                for tuner, label in ((spec_tuner(spec), "shipped"), (mover_tuner(spec), "mover")):
                    key = next((k for k in tuner.cache if token_bucket(T) in k), None)
                    if key is not None:
                        print(f"  autotuner pick, {label}, T={T}: {tuner.cache[key]}")
                        checks.append({"op": spec.name, "tokens": T, "autotuned": label, "config": str(tuner.cache[key])})
    print(f"took {time.time() - began:.0f} s")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({**environment(), "rounds": args.rounds, "rows": rows, "checks": checks}, fh, indent=1)
            fh.write("\n")


def spec_tuner(spec):
    return rn8._rms_norm_fp8_quant_kernel if spec is rn8.SPEC else sm8._silu_and_mul_fp8_quant_kernel


def mover_tuner(spec):
    return _movers._row_mover_kernel if spec is rn8.SPEC else _movers._gated_mover_kernel


if __name__ == "__main__":
    main()
