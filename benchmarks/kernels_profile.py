"""Where the time goes: per-config timings of each reference kernel, and a profiling window for ncu.

    python benchmarks/kernels_profile.py sweep [--op NAME] [--tokens 1,256,16384]
        Times every autotuning candidate of each op's kernel on its benchmark shapes (median of
        device events, L2 flushed, the harness's Timer), so the autotuner's pick can be checked.
    ncu --profile-from-start off ... python benchmarks/kernels_profile.py window --op NAME --tokens T [--peers liger]
        Warms up (autotuning included), then runs the kernel (and the named peers) once between
        cudaProfilerStart and cudaProfilerStop, so ncu sees exactly those launches.
"""

from __future__ import annotations

import argparse
import sys

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


def sweep(names, tokens):
    timer = Timer(torch.device("cuda"))
    for spec in specs(names):
        tuner = _autotuner(spec)
        candidates = list(tuner.configs)
        for t in tokens:
            shape, inputs = _inputs(spec, t)
            nbytes = spec.bytes(shape, torch.bfloat16)
            results = []
            for config in candidates:
                tuner.configs = [config]  # one candidate: the autotuner launches it without timing
                tuner.cache.clear()
                us = timer.median_us(lambda: spec.impl(**inputs))
                results.append((us, config))
            tuner.configs = candidates
            tuner.cache.clear()
            best = min(results, key=lambda r: r[0])[0]
            for us, config in results:
                mark = "  <- best" if us == best else ""
                print(f"sweep {spec.name:20} T={t:6} {us:9.2f} us {nbytes / us / 1e3:7.0f} GB/s  {config}{mark}")


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("sweep", "window"))
    parser.add_argument("--op", action="append", choices=OPS)
    parser.add_argument("--tokens", default="1,32,256,4096,16384")
    parser.add_argument("--peers", default="")
    args = parser.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    if args.mode == "sweep":
        sweep(args.op, tokens)
    else:
        window(args.op[0], tokens[0], [p for p in args.peers.split(",") if p])


if __name__ == "__main__":
    main()
