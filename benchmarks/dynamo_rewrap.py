"""What a per-step ``torch.compile(fn)`` costs, for KC205's hot-path message.

    python benchmarks/dynamo_rewrap.py [-o benchmarks/results/dynamo_rewrap.json]

Five "steps" each wrap something in a new ``torch.compile`` and call it once, counting how often
Dynamo hands a graph to the backend (a counting backend): a fresh closure over the same values, a
fresh closure over a float that changes every step, a fresh closure over a new tensor of the same
shape, a builtin (``F.scaled_dot_product_attention``) and an ``nn.Module``. Then the time of
``torch.compile(fn)`` alone (building the wrapper, no call), median of 200. CPU only.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import date

import torch
import torch.nn.functional as F


def compiles(make_callable, steps: int = 5) -> int:
    graphs: list[int] = []

    def counting(gm, example_inputs):
        graphs.append(1)
        return gm.forward

    torch._dynamo.reset()
    for step in range(steps):
        fn, args = make_callable(step)
        torch.compile(fn, backend=counting)(*args)
    return len(graphs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out")
    out = ap.parse_args().out
    x = torch.randn(8)
    q = torch.randn(1, 2, 8, 16)
    linear = torch.nn.Linear(16, 16)

    def closure(scale):
        def loss(v):
            return (v * scale).sum()
        return loss

    cases = {
        "fresh closure, same captured values": lambda s: (closure(2.0), (x,)),
        "fresh closure, captured float changes": lambda s: (closure(float(s)), (x,)),
        "fresh closure, new captured tensor": lambda s: (closure(torch.randn(8)), (x,)),
        "builtin scaled_dot_product_attention": lambda s: (F.scaled_dot_product_attention, (q, q, q)),
        "nn.Module": lambda s: (linear, (q,)),
    }
    result = {"script": "benchmarks/dynamo_rewrap.py", "date": date.today().isoformat(),
              "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
              "torch_threads": torch.get_num_threads(), "steps": 5,
              "graphs_compiled": {name: compiles(make) for name, make in cases.items()}}
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        torch.compile(closure(2.0), backend="eager")  # kcheck: ignore[KC205] building the wrapper is what this times
        times.append(time.perf_counter() - t0)
    result["wrapper_us_median"] = round(statistics.median(times) * 1e6, 1)
    print(json.dumps(result, indent=1))
    if out:
        with open(out, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
