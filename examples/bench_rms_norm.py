"""A benchmark script written the way many kernel PRs write them, with the usual mistakes.

`kcheck check examples/` reports them; each finding links to the catalog entry that explains it.
"""

import time

import torch


def rms_norm(x, weight, eps=1e-6):
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(variance + eps)).to(x.dtype) * weight


def bench(fn, x, weight, iters=100):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        out = fn(x, weight)
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def bench_host(fn, x, weight):
    t0 = time.perf_counter()
    for _ in range(10):
        fn(x, weight)
    return (time.perf_counter() - t0) / 10


if __name__ == "__main__":
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    print(f"rms_norm: {bench(rms_norm, x, w):.3f} ms, host: {bench_host(rms_norm, x, w) * 1e3:.3f} ms")
