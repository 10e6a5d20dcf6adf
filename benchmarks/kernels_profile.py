"""Where the time goes: per-config timings of each reference kernel, and a profiling window for ncu.

    python benchmarks/kernels_profile.py sweep [--op NAME] [--tokens 1,256,16384] [--reps 100] [--rounds 1]
        Times every autotuning candidate of each op's kernel on its benchmark shapes (median of
        device events, L2 flushed, the harness's Timer), so the autotuner's pick can be checked;
        with --rounds N each candidate is timed N times, interleaved, and the median is kept.
    python benchmarks/kernels_profile.py host [--op NAME] [--tokens 1]
        Host time per call of each implementation (wall clock over 2000 calls, no flush): what a
        caller without CUDA graphs pays on the CPU. The device-event timings hide it.
    ncu --profile-from-start off ... python benchmarks/kernels_profile.py window --op NAME --tokens T [--peers liger]
        Warms up (autotuning included), then runs the kernel (and the named peers) once between
        cudaProfilerStart and cudaProfilerStop, so ncu sees exactly those launches.
    ncu --profile-from-start off ... python benchmarks/kernels_profile.py copy [--mib 1024]
        The same window around kernels that copy ``--mib`` MiB (default 2 GiB in all): torch's
        elementwise kernel (``torch.mul(src, 1, out=dst)``), then the Triton copies of 2,048
        elements on 8 warps and 8,192 on 16 (the fastest and a norm-sized mover of
        ``kernels_ceiling.py --movers``). The harness's ceiling, ``dst.copy_(src)``, runs on the
        copy engine, which ncu does not profile.
    python benchmarks/kernels_profile.py short RESULTS_JSON
        Prints OP:TOKENS:PEER for every shape where kcheck trails its best peer (kernels_profile.sh input).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import triton

from kcheck.kernels import OPS, specs
from kcheck.kernels.harness import Timer, peers


def _autotuner(spec):
    module = sys.modules[spec.impl.__module__]
    return next(obj for obj in vars(module).values() if isinstance(obj, triton.runtime.Autotuner))


def _inputs(spec, tokens):
    shape = next(s for s in spec.bench_shapes if s["tokens"] == tokens)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    return shape, spec.make_inputs(shape, torch.bfloat16, torch.device("cuda"), gen)


def sweep(names, tokens, reps=100, rounds=1):
    timer = Timer(torch.device("cuda"), reps=reps)
    for spec in specs(names):
        tuner = _autotuner(spec)
        candidates = list(tuner.configs)
        for t in tokens:
            shape, inputs = _inputs(spec, t)
            nbytes = spec.bytes(shape, torch.bfloat16)
            times = {i: [] for i in range(len(candidates))}
            for _ in range(rounds):
                for i, config in enumerate(candidates):
                    tuner.configs = [config]  # one candidate: the autotuner launches it without timing
                    tuner.cache.clear()
                    times[i].append(timer.median_us(lambda: spec.impl(**inputs)))
            results = [(statistics.median(times[i]), config) for i, config in enumerate(candidates)]
            tuner.configs = candidates
            tuner.cache.clear()
            best = min(results, key=lambda r: r[0])[0]
            for us, config in results:
                mark = "  <- best" if us == best else ""
                print(f"sweep {spec.name:20} T={t:6} {us:9.2f} us {nbytes / us / 1e3:7.0f} GB/s  {config}{mark}")


def host(names, tokens, calls=2000):
    for spec in specs(names):
        for t in tokens:
            _, inputs = _inputs(spec, t)
            for name, factory in peers(spec).items():
                fn = factory(dict(inputs))
                if fn is None:
                    continue
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
                start = time.perf_counter()
                for _ in range(calls):
                    fn()  # kcheck: ignore[KC409] the figure is host time per call; device time is measured elsewhere
                torch.cuda.synchronize()
                us = (time.perf_counter() - start) / calls * 1e6
                print(f"host {spec.name:20} T={t:6} {name:30} {us:8.2f} us per call (wall clock, back to back)")


def window(name, tokens, peer_names):
    (spec,) = specs([name])
    _, inputs = _inputs(spec, tokens)
    fns = [lambda: spec.impl(**inputs)]
    factories = peers(spec, peer_names)
    fns += [factories[p](inputs) for p in peer_names if p in factories]
    for fn in fns:
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def copy_window(mib=1024):
    from kernels_ceiling import _copy  # this folder is on sys.path when the script runs

    src = torch.empty(mib << 19, dtype=torch.bfloat16, device="cuda").uniform_()
    dst = torch.empty_like(src)
    fns = [lambda: torch.mul(src, 1, out=dst)]
    for block, warps in ((2048, 8), (8192, 16)):
        fns.append(lambda block=block, warps=warps: _copy[(triton.cdiv(src.numel(), block),)](
            src, dst, src.numel(), BLOCK=block, num_warps=warps))
    for fn in fns:
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def short(path):
    import json

    groups = {}
    for r in json.load(open(path))["rows"]:
        if r["dtype"] == "bfloat16":
            groups.setdefault((r["op"], r["tokens"]), []).append(r)
    for (op, tokens), rows in groups.items():
        ours = next(r for r in rows if r["impl"] == "kcheck")
        peer = min((r for r in rows if r["impl"] != "kcheck"), key=lambda r: r["median_us"])
        if peer["median_us"] < ours["median_us"]:
            print(f"{op}:{tokens}:{peer['impl']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("sweep", "window", "host", "copy", "short"))
    parser.add_argument("results", nargs="?", help="results JSON (short only)")
    parser.add_argument("--op", action="append", choices=OPS)
    parser.add_argument("--tokens", default="1,32,256,4096,16384")
    parser.add_argument("--peers", default="")
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--mib", type=int, default=1024, help="MiB each way (copy only)")
    args = parser.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    if args.mode == "sweep":
        sweep(args.op, tokens, args.reps, args.rounds)
    elif args.mode == "host":
        host(args.op, tokens)
    elif args.mode == "copy":
        copy_window(args.mib)
    elif args.mode == "short":
        short(args.results)
    else:
        window(args.op[0], tokens[0], [p for p in args.peers.split(",") if p])


if __name__ == "__main__":
    main()
