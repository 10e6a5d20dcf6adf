"""What ``torch.compile`` runs for an op, next to kcheck's kernel, at a few token counts.

    TORCH_LOGS=output_code python benchmarks/kernels_peer_code.py --op silu_and_mul [--tokens 1,32] [--rounds 20]

Compiles the op's peer reference as the benchmark does (``torch.compile`` of the plain torch
function), so with ``TORCH_LOGS=output_code`` the Triton code Inductor generates for each token
count goes to stderr, then times kcheck's wrapper and the compiled peer alternately in
``--rounds`` rounds of the harness's :class:`Timer` (median of device events, L2 flushed by a
read) and prints the median of the rounds' medians; kcheck is also timed allocating its output
on each call, as the compiled peer does, rather than writing into a buffer made once. Where the results run shows the two within
an event-timer step, this tells whether the peer runs a different kernel or the same one.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from kcheck.kernels import OPS, specs
from kcheck.kernels.harness import Timer, peers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", required=True, choices=OPS)
    parser.add_argument("--tokens", default="1,32")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    (spec,) = specs([args.op])
    device = torch.device("cuda")
    timer = Timer(device)
    factories = peers(spec, ("kcheck", "torch.compile"))
    for tokens in (int(t) for t in args.tokens.split(",")):
        shape = dict(spec.bench_shapes[-1], tokens=tokens)
        gen = torch.Generator(device=device)
        gen.manual_seed(tokens)
        inputs = spec.make_inputs(shape, torch.bfloat16, device, gen)
        fns = {name: factory(dict(inputs)) for name, factory in factories.items()}
        if spec.out_args:  # kcheck allocating its output on each call, as the compiled peer does
            own = {k: v for k, v in inputs.items() if k not in spec.out_args}
            fns["kcheck, new output"] = lambda own=own: spec.impl(**own)
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                times[name].append(timer.median_us(fn))
        medians = {name: statistics.median(t) for name, t in times.items()}
        print(f"{spec.name} T={tokens}: " + ", ".join(f"{name} {us:.3f} us" for name, us in medians.items())
              + f"; torch.compile / kcheck = {medians['torch.compile'] / medians['kcheck']:.3f}", flush=True)


if __name__ == "__main__":
    main()
