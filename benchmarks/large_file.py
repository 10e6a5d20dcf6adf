"""How kcheck's time and memory grow with the size of one file.

    python benchmarks/large_file.py [--mb 4] [--kind tuning|bench] [--keep FILE]

Generates one Python file of about ``--mb`` megabytes, then, each in a fresh process, times and
measures the peak resident memory of

- ``kcheck check --no-cache`` on the file, and
- a bare ``libcst.parse_module`` of the same text (the floor: kcheck parses each file once),

and prints both and their ratio. Two kinds of file:

- ``tuning`` (the default): generated autotuning code, thousands of small CUDA-event timing helpers
  each followed by a table row, correct as written. With the default rules no rule's text
  prefilter keeps it (with ``--preview`` some do, and a gate sends it through libcst), so kcheck
  reads it for the project index and the syntax check only, and should cost a fraction of the
  bare parse. The target (issue 24):
  at most 10 s and 500 MiB at 4 MB, growing linearly (run ``--mb 1`` and ``--mb 4`` to see the
  slope). Before the fix, KC408's gate compared every timing window with every call of the file.
- ``bench``: benchmark functions that several rules report on, so every chunk goes through
  libcst (above 1 MiB the rules read a file a chunk at a time, ``kcheck.chunks``); the libcst parse
  (0.5 to 0.7 GB per MB of source when whole) then bounds the time, and the ratio shows kcheck's
  own share.

``--preview`` runs the preview rules too.

Measured on a 2-core machine, Python 3.11, ``--mb 4`` (tuning, 4.19 MB, 145,831 lines), with the
project index's facts and the syntax check read in chunks of top-level statements
(``kcheck.chunks``): kcheck 4.5 to 4.9 s and 68 MiB peak (1 MB: 1.3 s, 57 MiB; 2 MB: 2.6 s,
60 MiB), the bare libcst parse 25.7 s and 2,143 MiB. Before the chunks: 4.9 to 5.9 s and 688 to
696 MiB, one whole-file ``ast.parse`` for the facts and one ``compile()``. Before KC408's gate was
made linear (same file at 1 MB, in-process): 68 s and 703 MiB. With ``--preview`` and the rules
reading the file in chunks (5 Dec 2026): tuning 25.2 s and 278 MiB, bench 32.1 s and 326 MiB (whole,
the tuning file took 32.8 s and 2.7 GB). The full table, KC409's fix, where the memory went and what
still reads a file whole: ``benchmarks/results/large_file.md``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

TEMPLATE = '''

def bench_{n}(fn, x, iters=100, warmup=25, reps=20):
    """Time fn on x ({n})."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for _ in range(warmup):
        fn(x)
    times_{n} = []
    for _ in range(reps):
        start.record()
        for _ in range(iters):
            fn(x)
        end.record()
        torch.cuda.synchronize()
        times_{n}.append(start.elapsed_time(end) / iters)
    t0 = time.perf_counter()
    out = fn(x)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    ref = x.float().sum()
    assert torch.allclose(out.float().sum(), ref, atol=1e-2)
    logger.info("bench %d: %.3f ms", {n}, sum(times_{n}) / len(times_{n}))
    return statistics.mean(times_{n}), elapsed
'''

TUNING = '''

def time_config_{n}(kernel, args, warmup=25, reps=100):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for _ in range(warmup):
        kernel(*args)
    start.record()
    for _ in range(reps):
        kernel(*args)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


CONFIG_{n} = {{"BLOCK_M": {bm}, "BLOCK_N": {bn}, "BLOCK_K": 64, "num_warps": 4, "num_stages": {st}, "ms": {ms}}}
'''

HEADER = "import statistics\nimport time\nimport logging\n\nimport torch\n\nlogger = logging.getLogger(__name__)\n"


def generate(megabytes: float, kind: str = "tuning") -> str:
    parts, size, n = [HEADER], len(HEADER), 0
    while size < megabytes * 1024 * 1024:
        if kind == "bench":
            chunk = TEMPLATE.format(n=n)
        else:
            chunk = TUNING.format(n=n, bm=16 << (n % 4), bn=32 << (n % 3), st=2 + n % 3, ms=round(0.01 * (n % 97), 3))
        parts.append(chunk)
        size += len(chunk)
        n += 1
    return "".join(parts)


# Runs CODE in a fresh interpreter and, at exit, writes that process's own peak resident memory
# (KiB, ``ru_maxrss`` on Linux) to the file named by the first argument.
WRAPPER = """
import atexit, resource, sys
report = sys.argv.pop(1)
atexit.register(lambda: open(report, "w").write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))
exec(compile(sys.argv.pop(1), "<measured>", "exec"))
"""


def measure(code: str, args: list[str], folder: str) -> tuple[float, float, list[str]]:
    """(seconds, peak MiB, last output line) of ``code`` run with ``args`` in a fresh process."""
    report = os.path.join(folder, "peak.txt")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", WRAPPER, report, code, *args], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    with open(report, encoding="utf-8") as fh:
        peak_kib = int(fh.read())
    return seconds, peak_kib / 1024, (proc.stdout + proc.stderr).strip().splitlines()[-1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=4.0, help="size of the generated file in MB (default 4)")
    parser.add_argument("--kind", choices=("tuning", "bench"), default="tuning", help="what the file holds")
    parser.add_argument("--preview", action="store_true", help="run the preview rules too")
    parser.add_argument("--select", help="only these rules (kcheck's --select), e.g. KC409")
    parser.add_argument("--keep", help="write the generated file here and keep it")
    args = parser.parse_args()
    text = generate(args.mb, args.kind)
    folder = tempfile.mkdtemp(prefix="kcheck-large-")
    path = args.keep or os.path.join(folder, "large_bench.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    size = len(text.encode())
    parse = measure("import sys, libcst; libcst.parse_module(open(sys.argv[1], encoding='utf-8').read())", [path], folder)
    check = measure("import sys; from kcheck.cli import main; sys.argv[0] = 'kcheck'; main()",
                    ["check", "--no-cache", "--max-file-size", str(size + 1), "--exit-zero", "-q",
                     *(["--preview"] if args.preview else []), *(["--select", args.select] if args.select else []),
                     "-o", "json:" + os.path.join(folder, "out.json"), path], folder)
    print(f"file: {size / 1e6:.2f} MB ({args.kind}), {text.count(chr(10))} lines, python {sys.version.split()[0]}")
    print(f"libcst parse : {parse[0]:7.2f} s  peak {parse[1]:7.1f} MiB")
    print(f"kcheck check : {check[0]:7.2f} s  peak {check[1]:7.1f} MiB   {' '.join(check[2])}".rstrip())
    print(f"ratio        : {check[0] / parse[0]:7.2f} x time  {check[1] / parse[1]:7.2f} x memory")
    if args.kind == "tuning":
        print("target       : <= 10 s and <= 500 MiB at 4 MB")


if __name__ == "__main__":
    main()
