"""The fused FP8 ops (issue 26) on a GPU: every autotuning candidate timed, and how exact they are.

    python benchmarks/kernels_fused_fp8.py [--tokens 1,32,256,4096,16384] [--rounds 5] [--out FILE.json]

Two parts, both for ``rms_norm_fp8_quant``, ``fused_add_rms_norm_fp8_quant`` and
``silu_and_mul_fp8_quant`` at Qwen3-8B's sizes in bf16:

- **candidates**: each kernel's every configuration launched directly (no autotuner), next to its
  same-pattern mover's every configuration and our unfused pair (``torch.compile`` is timed by the
  benchmark, not here), interleaved over ``--rounds`` rounds with the harness's timer (median of device events,
  L2 flushed by a read): what the small token buckets are pinned to, and how far the best
  configuration is from the best mover at each size.
- **exactness** (T=4096 and 16384, bf16 and fp16): the fused op against our unfused pair (our norm or
  activation kernel, then ``per_token_fp8_quant``) and against the upcast torch reference: e4m3
  values that differ and by how many steps, scales that differ and by how much, the residual.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import triton

from kcheck.kernels import _movers, fused_add_rms_norm, per_token_fp8_quant, rms_norm, silu_and_mul
from kcheck.kernels import fused_add_rms_norm_fp8_quant as fa8
from kcheck.kernels import rms_norm_fp8_quant as rn8
from kcheck.kernels import silu_and_mul_fp8_quant as sm8
from kcheck.kernels._launch import ROW_CANDIDATES, token_bucket
from kcheck.kernels.harness import Timer, environment, interleaved, seeded_inputs
from kcheck.kernels.per_token_fp8_quant import FP8_MAX, MIN_SCALE


def _cfg(c: triton.Config) -> str:
    return "-".join(f"{k}{v}" for k, v in c.kwargs.items()) + f"-w{c.num_warps}"


def candidates(op: str, inputs: dict) -> dict[str, callable]:
    """Each configuration of the op's kernel and of its mover, launched directly."""
    found = {}
    common = dict(FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE, STATIC=False, ROUND_IN_FP32=False)
    if op == "rms_norm_fp8_quant":
        x, w, q, s = inputs["x"], inputs["weight"], inputs["out"], inputs["scale"]
        M, N = x.shape
        for c in ROW_CANDIDATES:
            grid = (triton.cdiv(M, c.kwargs["ROWS"]),)
            found[f"kernel {_cfg(c)}"] = lambda c=c, grid=grid: rn8._rms_norm_fp8_quant_kernel.fn[grid](
                x, w, q, s, x.stride(0), q.stride(0), M, N, 1e-6, token_bucket(M), **common,
                BLOCK_N=triton.next_power_of_2(N), EVEN=N == triton.next_power_of_2(N), num_warps=c.num_warps, **c.kwargs)
            found[f"mover {_cfg(c)}"] = lambda c=c, grid=grid: _movers._row_mover_kernel.fn[grid](
                x, w, q, s, x.stride(0), q.stride(0), M, N, token_bucket(M), SCALES=True,
                BLOCK_N=triton.next_power_of_2(N), num_warps=c.num_warps, **c.kwargs)
    elif op == "fused_add_rms_norm_fp8_quant":
        x, r, w, q, s = inputs["x"], inputs["residual"], inputs["weight"], inputs["out"], inputs["scale"]
        M, N = x.shape
        for c in ROW_CANDIDATES:
            grid = (triton.cdiv(M, c.kwargs["ROWS"]),)
            found[f"kernel {_cfg(c)}"] = lambda c=c, grid=grid: fa8._fused_add_rms_norm_fp8_quant_kernel.fn[grid](
                x, r, w, r, q, s, x.stride(0), r.stride(0), r.stride(0), q.stride(0), M, N, 1e-6, token_bucket(M),
                **common, BLOCK_N=triton.next_power_of_2(N), num_warps=c.num_warps, **c.kwargs)
            found[f"mover {_cfg(c)}"] = lambda c=c, grid=grid: _movers._pair_mover_kernel.fn[grid](
                x, r, w, q, s, x.stride(0), r.stride(0), q.stride(0), M, N, token_bucket(M), SCALES=True,
                BLOCK_N=triton.next_power_of_2(N), num_warps=c.num_warps, **c.kwargs)
    else:
        x, q, s = inputs["x"], inputs["out"], inputs["scale"]
        M, I = q.shape
        for c in sm8.GATED_CANDIDATES:
            grid = (triton.cdiv(M, c.kwargs["ROWS"]),)
            found[f"kernel {_cfg(c)}"] = lambda c=c, grid=grid: sm8._silu_and_mul_fp8_quant_kernel.fn[grid](
                x, q, s, x.stride(0), q.stride(0), M, I, token_bucket(M), **common,
                BLOCK_A=sm8.split(I)[0], BLOCK_B=sm8.split(I)[1], num_warps=c.num_warps, **c.kwargs)
            found[f"mover {_cfg(c)}"] = lambda c=c, grid=grid: _movers._gated_mover_kernel.fn[grid](
                x, q, s, x.stride(0), q.stride(0), M, I, token_bucket(M), SCALES=True,
                BLOCK_I=triton.next_power_of_2(I), num_warps=c.num_warps, **c.kwargs)
    return found


def sweep(tokens: list[int], rounds: int, timer, device: torch.device) -> list[dict]:
    rows = []
    for spec in (rn8.SPEC, fa8.SPEC, sm8.SPEC):
        for shape, inputs in seeded_inputs(spec, tokens, device):
            fns = candidates(spec.name, inputs)
            fns["autotuned kernel"] = lambda spec=spec, inputs=inputs: spec.impl(**inputs)
            fns["unfused"] = spec.peers["unfused"](inputs)
            # The same kernel with a given per-tensor scale: no row maximum, no scale stored. What it
            # saves is what the dynamic scale costs.
            static = {k: v for k, v in inputs.items() if k != "scale"}
            static["static_scale"] = torch.full((1,), 1.0 / FP8_MAX, dtype=torch.float32, device=device)
            fns["autotuned kernel, static scale"] = lambda spec=spec, static=static: spec.impl(**static)
            times = interleaved(fns, rounds, timer)
            nbytes = spec.bytes(shape, torch.bfloat16)
            best = {kind: min((statistics.median(v), k) for k, v in times.items() if k.startswith(kind))
                    for kind in ("kernel ", "mover ")}
            for name, v in times.items():
                us = statistics.median(v)
                rows.append({"op": spec.name, "tokens": shape["tokens"], "impl": name, "median_us": round(us, 3),
                             "spread_us": round(max(v) - min(v), 3), "gbps": round(nbytes / max(us * 1e3, 1e-9), 1)})
                print(f"{spec.name:30s} T={shape['tokens']:6d} {name:28s} {us:9.2f} us  spread {max(v) - min(v):5.2f}")
            print(f"{spec.name:30s} T={shape['tokens']:6d} best kernel {best['kernel '][1]} {best['kernel '][0]:.2f} us, "
                  f"best mover {best['mover '][1]} {best['mover '][0]:.2f} us: kernel at {best['mover '][0] / max(best['kernel '][0], 1e-9):.3f} of the mover's speed")
    return rows


def _steps(q: torch.Tensor) -> torch.Tensor:
    return rn8.e4m3_steps(q)


def _diff(name: str, q, s, q_ref, s_ref, extra: dict) -> dict:
    dq = (_steps(q) - _steps(q_ref)).abs()
    ds = ((s.float() - s_ref.float()).abs() / s_ref.float().abs()).max().item()
    return {"against": name, "values": q.numel(), "values_differing": int((dq > 0).sum()),
            "max_steps": float(dq.max()), "scales": s.numel(), "scales_differing": int((s.float() != s_ref.float()).sum()),
            "max_scale_rel_diff": ds, **extra}


def exactness(tokens: list[int], dev: torch.device) -> list[dict]:
    out = []
    for dtype in (torch.bfloat16, torch.float16):
        for T in tokens:
            gen = torch.Generator(device=dev)
            gen.manual_seed(T)
            # RMSNorm
            inp = rn8.make_inputs({"tokens": T, "hidden": 4096}, dtype, dev, gen)
            q, s = rn8.rms_norm_fp8_quant(**{k: v.clone() if torch.is_tensor(v) else v for k, v in inp.items()})
            y = rms_norm.rms_norm(inp["x"], inp["weight"], 1e-6)
            pq, ps = per_token_fp8_quant.per_token_fp8_quant(y)
            rq, rs = rn8.reference(**inp)
            for name, (a, b) in (("our unfused pair", (pq, ps)), ("torch reference", (rq, rs))):
                out.append({"op": "rms_norm_fp8_quant", "dtype": str(dtype)[6:], "tokens": T, **_diff(name, q, s, a, b, {})})
            # fused add + RMSNorm
            inp = fa8.make_inputs({"tokens": T, "hidden": 4096}, dtype, dev, gen)
            x, r, w = inp["x"], inp["residual"], inp["weight"]
            rq, rs, rres = fa8.reference(x, r, w)
            r1 = r.clone()
            q, s, res = fa8.fused_add_rms_norm_fp8_quant(x, r1, w)
            tmp = torch.empty_like(x)
            r2 = r.clone()
            fused_add_rms_norm.fused_add_rms_norm(x, r2, w, out=tmp)
            pq, ps = per_token_fp8_quant.per_token_fp8_quant(tmp)
            for name, (a, b, c) in (("our unfused pair", (pq, ps, r2)), ("torch reference", (rq, rs, rres))):
                out.append({"op": "fused_add_rms_norm_fp8_quant", "dtype": str(dtype)[6:], "tokens": T,
                            **_diff(name, q, s, a, b, {"residual_differing": int((res != c).sum())})})
            # SiLU-and-mul
            inp = sm8.make_inputs({"tokens": T, "intermediate": 12288}, dtype, dev, gen)
            q, s = sm8.silu_and_mul_fp8_quant(inp["x"])
            pq, ps = per_token_fp8_quant.per_token_fp8_quant(silu_and_mul.silu_and_mul(inp["x"]))
            rq, rs = sm8.reference(inp["x"])
            for name, (a, b) in (("our unfused pair", (pq, ps)), ("torch reference", (rq, rs))):
                out.append({"op": "silu_and_mul_fp8_quant", "dtype": str(dtype)[6:], "tokens": T, **_diff(name, q, s, a, b, {})})
    for row in out:
        print(json.dumps(row))
    return out


class _NoTimer:
    """For the CPU dry run only: each callable runs once and nothing is timed (0 us)."""

    def median_us(self, fn) -> float:
        fn()
        return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", default="1,32,256,4096,16384")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--exact-tokens", default="4096,16384")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the script under TRITON_INTERPRET=1")
    parser.add_argument("--out")
    args = parser.parse_args()
    device = torch.device(args.device)
    timer = Timer(device) if device.type == "cuda" else _NoTimer()
    exact = exactness([int(t) for t in args.exact_tokens.split(",")], device)
    rows = sweep([int(t) for t in args.tokens.split(",")], args.rounds, timer, device)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({**environment(), "rounds": args.rounds, "rows": rows, "exactness": exact}, fh, indent=1)
            fh.write("\n")


if __name__ == "__main__":
    main()
