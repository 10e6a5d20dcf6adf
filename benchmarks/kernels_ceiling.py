"""How close each reference kernel is to the memory traffic it has to move, at its own size.

    python benchmarks/kernels_ceiling.py [--tokens 4096,16384] [--rounds 5] [--movers] [--out kernels/results/ceilings/h200.json]

The results table compares every kernel with the datasheet bandwidth and with one large (2 GiB)
device-to-device copy. Neither is the ceiling of a given op: HBM turns around between reads and
writes, so the achievable rate depends on the read:write mix, and a shorter transfer pays its
ramp-up and its last partial wave over fewer bytes. This script times, for each op and token
count, the op itself and a plain torch op that moves the same bytes in the same mix, in the same
process and interleaved over ``--rounds`` rounds (median of the rounds' medians):

- read:write 1:1 (RMSNorm, fused add+RMSNorm, RoPE in place): ``dst.copy_(src)`` of half the bytes;
- read:write 2:1 (SiLU-and-mul, FP8 quantization): ``torch.add(a, b, out=c)`` with ``c`` a third
  of the bytes.

With ``--movers``, each 1:1 op is also timed against other kernels that move its bytes: torch's
elementwise kernel (``torch.mul(src, 1, out=dst)``, where ``copy_`` is a driver copy), a Triton
copy in blocks of 2,048 to 16,384 elements on 4, 8 or 16 warps, a Triton copy of two arrays into
two others and a Triton swap of two arrays in place (two reads, then two writes over the lines
just read), both in blocks of 1,024 to 4,096 elements of each: the streams of fused add+RMSNorm
out of place and in place. So the ceiling is the best mover found rather than one
implementation's.

Each is timed like the benchmark (harness ``Timer``: device events, L2 flushed by a read before
each call). It also times copies of 64 MiB to 4 GiB, to show how the copy rate depends on size.
The same-traffic op's rate is the figure to compare a kernel with; the datasheet share it
reaches bounds what any kernel of that size and mix reaches with this timing.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import triton
import triton.language as tl

from kcheck.kernels import specs
from kcheck.kernels.harness import DATASHEET_GBPS, Timer, environment, interleaved, seeded_inputs

# bytes read per byte written, by op (the weight, cos/sin rows and scales are under 1% and ignored)
READS_PER_WRITE = {"rms_norm": 1, "fused_add_rms_norm": 1, "rotary_embedding": 1, "silu_and_mul": 2,
                   "per_token_fp8_quant": 2}
COPY_SIZES_MIB = (64, 256, 512, 1024, 2048, 4096)


def same_traffic(nbytes: int, reads_per_write: int, device: torch.device):
    """A torch op that reads ``reads_per_write`` bytes for every byte it writes, ``nbytes`` in all."""
    unit = nbytes // (reads_per_write + 1) // 2  # bf16 elements written
    if reads_per_write == 1:
        src = torch.empty(unit, dtype=torch.bfloat16, device=device).uniform_()
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    a, b = (torch.empty(unit, dtype=torch.bfloat16, device=device).uniform_() for _ in range(2))
    c = torch.empty_like(a)
    return lambda: torch.add(a, b, out=c)


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _copy_pair(a, b, c, d, n, BLOCK: tl.constexpr):
    """Copy two arrays into two others: the streams of fused add+RMSNorm out of place."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    va = tl.load(a + offs, mask=offs < n)
    vb = tl.load(b + offs, mask=offs < n)
    tl.store(c + offs, va, mask=offs < n)
    tl.store(d + offs, vb, mask=offs < n)


@triton.jit
def _swap(a, b, n, BLOCK: tl.constexpr):
    """Exchange two arrays in place: two reads and two writes to the lines just read, the access
    pattern of fused add+RMSNorm in place (x and residual read, both overwritten)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    va = tl.load(a + offs, mask=offs < n)
    vb = tl.load(b + offs, mask=offs < n)
    tl.store(a + offs, vb, mask=offs < n)
    tl.store(b + offs, va, mask=offs < n)


def movers(nbytes: int, device: torch.device) -> dict[str, callable]:
    """Other kernels that read and write ``nbytes / 2`` bytes each: torch's elementwise kernel, Triton copies, pair copies and swaps."""
    src = torch.empty(nbytes // 4, dtype=torch.bfloat16, device=device).uniform_()
    dst = torch.empty_like(src)
    found = {"mul": lambda: torch.mul(src, 1, out=dst)}
    for block in (2048, 4096, 8192, 16384):
        for warps in (4, 8, 16):
            grid = (triton.cdiv(src.numel(), block),)
            found[f"triton{block}-w{warps}"] = lambda grid=grid, block=block, warps=warps: _copy[grid](
                src, dst, src.numel(), BLOCK=block, num_warps=warps)
    half = src.numel() // 2
    a, b, c, d = src[:half], src[half:], dst[:half], dst[half:]  # the bytes as two arrays read, two written
    for block in (1024, 2048, 4096):
        for warps in (2, 4, 8):
            grid = (triton.cdiv(half, block),)
            found[f"pair{block}-w{warps}"] = lambda grid=grid, block=block, warps=warps: _copy_pair[grid](
                a, b, c, d, half, BLOCK=block, num_warps=warps)
            found[f"swap{block}-w{warps}"] = lambda grid=grid, block=block, warps=warps: _swap[grid](
                a, c, half, BLOCK=block, num_warps=warps)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", default="4096,16384")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--movers", action="store_true", help="also time other 1:1 movers of each 1:1 op's bytes")
    parser.add_argument("--out")
    args = parser.parse_args()
    device = torch.device("cuda")
    timer = Timer(device)
    sheet = DATASHEET_GBPS.get(torch.cuda.get_device_name(device))
    tokens = [int(t) for t in args.tokens.split(",")]
    cases: dict[str, tuple[int, callable]] = {}
    for spec in specs():
        if spec.name not in READS_PER_WRITE:
            continue  # the fused FP8 ops mix bf16 reads and fp8 writes: their movers are in kernels_fused_fp8.py
        for shape, inputs in seeded_inputs(spec, tokens, device):
            nbytes = spec.bytes(shape, torch.bfloat16)
            ratio = READS_PER_WRITE[spec.name]
            cases[f"{spec.name} T={shape['tokens']}"] = (nbytes, lambda spec=spec, inputs=inputs: spec.impl(**inputs))
            cases[f"{spec.name} T={shape['tokens']} same-traffic {ratio}:1"] = (nbytes, same_traffic(nbytes, ratio, device))
            if args.movers and ratio == 1:
                for name, fn in movers(nbytes, device).items():
                    cases[f"{spec.name} T={shape['tokens']} same-traffic 1:1 {name}"] = (nbytes, fn)
    for mib in COPY_SIZES_MIB:
        nbytes = 2 * (mib << 20)  # read plus written
        cases[f"copy {mib} MiB"] = (nbytes, same_traffic(nbytes, 1, device))
    times = interleaved({name: fn for name, (_, fn) in cases.items()}, args.rounds, timer)
    rows = []
    for name, (nbytes, _) in cases.items():
        us = statistics.median(times[name])
        gbps = nbytes / (us * 1e3)
        rows.append({"case": name, "bytes": nbytes, "median_us": round(us, 2), "gbps": round(gbps, 1),
                     "frac_datasheet": round(gbps / sheet, 4) if sheet else None,
                     "spread_us": round(max(times[name]) - min(times[name]), 2)})
        share = f"{gbps / sheet:6.1%}" if sheet else ""
        print(f"{name:60s} {nbytes / 1e6:9.1f} MB {us:9.2f} us {gbps:7.0f} GB/s {share}  spread {rows[-1]['spread_us']:.2f}")
    for row in rows:
        if "same-traffic" in row["case"]:
            op = next(r for r in rows if r["case"] == row["case"].split(" same-traffic")[0])
            print(f"{op['case']:32s} at {row['median_us'] / op['median_us']:.3f} of the speed of {row['case'][len(op['case']) + 1:]}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({**environment(), "rounds": args.rounds, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
