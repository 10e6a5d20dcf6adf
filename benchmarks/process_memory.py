"""Peak memory of a command per process: where a parallel scan's memory lives.

    python benchmarks/process_memory.py -- kcheck check --preview --exit-zero -q -j 2 --no-cache TREE

Runs the command and samples, every 0.25 s, the proportional set size (PSS: shared pages split
between the processes sharing them) of it and every process below it from ``/proc`` (Linux only).
Prints the wall time, the largest sum over all processes, each process's own peak, and the sums
over time. ``scan_speed.py`` gives the figure the goals are judged by; this says which process
holds it (the parent's project index, or a worker's own files).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(b")") + 2:].split()[1]), []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        stack.extend(children.get(p, []))
    return found


def _pss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main(argv: list[str]) -> int:
    command = argv[argv.index("--") + 1:] if "--" in argv else argv
    if not command:
        raise SystemExit(__doc__)
    start = time.time()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    peaks: dict[int, float] = {}
    timeline: list[tuple[float, float, list[float]]] = []
    while proc.poll() is None:
        now = {pid: _pss_mib(pid) for pid in _descendants(proc.pid)}
        for pid, mib in now.items():
            peaks[pid] = max(peaks.get(pid, 0.0), mib)
        timeline.append((time.time() - start, sum(now.values()), list(now.values())))
        time.sleep(0.25)
    print(f"command: {' '.join(command)}")
    print(f"wall {time.time() - start:.1f} s, exit {proc.returncode}, "
          f"peak over all processes {max((t[1] for t in timeline), default=0):.0f} MiB")
    print("per process peak (MiB, in start order): " + ", ".join(f"{peaks[p]:.0f}" for p in peaks))
    for t, total, each in timeline[::max(1, len(timeline) // 12)]:
        print(f"  {t:5.1f} s  {total:4.0f} MiB  [{', '.join(f'{m:.0f}' for m in each)}]")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
