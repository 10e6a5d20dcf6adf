"""How fast ``kcheck check`` is on a real tree: cold, warm and one-file, against a bare libcst parse.

    python benchmarks/scan_speed.py TREE --name vllm -j 2 -o benchmarks/results/speed_vllm.json

Measured in one run, on the same files:

* **cold**: ``kcheck check TREE -j N`` with an empty result cache (start-up included);
* **warm**: the same command again, every result now in the cache;
* **one file**: ``kcheck check FILE --no-cache``, the pre-commit case (start-up included);
* **libcst**: ``libcst.parse_module`` of every file kcheck scanned, on N processes, nothing else;
* **ast**: ``ast.parse`` of every file on one process, for scale.

Each kcheck run is a separate process. Its peak memory is the largest sum, over the process and
all its workers, of proportional set size (PSS, shared pages split between the processes that
share them), sampled every 20 ms from ``/proc``; where PSS cannot be read, RSS is used and the
report says so. CPU seconds (user + system, workers included) are reported beside wall time,
because wall time on a shared machine depends on what else runs.
"""

from __future__ import annotations

import argparse
import ast
import compileall
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

GOALS = {"cold_s": 30.0, "warm_s": 2.0, "one_file_s": 0.5, "peak_mib": 300.0}


def _children_of(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, ()))
    return out


def _memory_kib(pid: int) -> tuple[int, str]:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]), "pss"
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024, "rss"
    except OSError:
        return 0, "rss"


def timed_run(cmd: list[str], cwd: str | None = None) -> dict:
    """Run ``cmd``; wall seconds, CPU seconds of it and its workers, peak memory of the process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = [0]
    kinds: set[str] = set()

    def sample() -> None:
        while proc.poll() is None:
            total = 0
            for p in _children_of(proc.pid):
                kib, kind = _memory_kib(p)
                total += kib
                kinds.add(kind)
            peak[0] = max(peak[0], total)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_mib": round(peak[0] / 1024, 1),
            "memory_measure": "+".join(sorted(kinds)) or "none", "exit_code": proc.returncode,
            "stdout": out.decode("utf-8", "replace"), "stderr": err.decode("utf-8", "replace")}


def _libcst_parse(paths: list[str]) -> int:
    import libcst as cst

    ok = 0
    for p in paths:
        try:
            with open(p, "rb") as fh:
                cst.parse_module(fh.read().decode("utf-8-sig"))
            ok += 1
        except Exception:  # noqa: BLE001 - a file libcst cannot parse only counts as not parsed
            pass
    return ok


def libcst_parse_all(paths: list[str], n: int) -> tuple[float, int]:
    start = time.perf_counter()
    chunks = [paths[i::n * 8] for i in range(n * 8)]
    with ProcessPoolExecutor(max_workers=n) as pool:
        ok = sum(pool.map(_libcst_parse, chunks))
    return time.perf_counter() - start, ok


def ast_parse_all(paths: list[str]) -> float:
    start = time.perf_counter()
    for p in paths:
        try:
            with open(p, "rb") as fh:
                ast.parse(fh.read())
        except (SyntaxError, ValueError):
            pass
    return time.perf_counter() - start


def clear_caches(tree: Path) -> None:
    """Remove every result cache kcheck may have written in the tree (it writes one at the project
    root, which for a tree without a configuration or a git checkout is the first file's folder)."""
    from kcheck.engine import CACHE_DIR

    for folder in [tree, *tree.rglob(CACHE_DIR)]:
        shutil.rmtree(folder / CACHE_DIR if folder == tree else folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree")
    ap.add_argument("--name", required=True)
    ap.add_argument("--version", default="")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--one-file", help="the file for the one-file run, relative to TREE (default: the median-sized file)")
    ap.add_argument("--skip-libcst", action="store_true", help="do not measure the bare libcst parse")
    ap.add_argument("-o", "--output")
    args = ap.parse_args(argv)
    tree = Path(args.tree).resolve()
    # the kcheck installed with this interpreter (a `kcheck` found first on PATH may be another install)
    beside = Path(sys.executable).with_name("kcheck")
    kcheck = [str(beside)] if beside.exists() else [sys.executable, "-m", "kcheck.cli"]

    from kcheck.engine import discover
    from kcheck.paths import PACKAGE_DIR

    # kcheck's own modules byte-compiled, as an installed package is: with PYTHONDONTWRITEBYTECODE
    # set and an editable install, every run would otherwise compile them again (about 0.2 s)
    compileall.compile_dir(str(PACKAGE_DIR), quiet=1)

    jobs, _ = discover([str(tree)])
    paths = [j.path for j in jobs]
    lines = 0
    for p in paths:
        with open(p, "rb") as fh:
            lines += fh.read().count(b"\n")
    clear_caches(tree)

    load_before = os.getloadavg()
    base = [*kcheck, "check", "--exit-zero", "-q", "-o", "json", "-j", str(args.jobs)]
    cold = timed_run([*base, str(tree)])
    warm = timed_run([*base, str(tree)])
    same_cold_warm = cold["stdout"] == warm["stdout"]
    clear_caches(tree)
    if args.one_file:
        one = str(tree / args.one_file)
    else:
        one = sorted(paths, key=os.path.getsize)[len(paths) // 2]
    one_run = timed_run([*kcheck, "check", "--exit-zero", "-q", "--no-cache", one])
    clear_caches(tree)

    result = {
        "tree": args.name, "version": args.version, "files": len(paths), "lines": lines, "jobs": args.jobs,
        "cpu_count": os.cpu_count(),
        "cold": {k: v for k, v in cold.items() if k not in ("stdout", "stderr")},
        "warm": {k: v for k, v in warm.items() if k not in ("stdout", "stderr")},
        "one_file": {**{k: v for k, v in one_run.items() if k not in ("stdout", "stderr")},
                     "file": os.path.relpath(one, tree), "bytes": os.path.getsize(one)},
        "cold_and_warm_same_output": same_cold_warm,
        "findings": len(json.loads(cold["stdout"] or "[]")) if cold["stdout"].lstrip().startswith("[") else None,
        "files_per_s_cold": round(len(paths) / cold["wall_s"], 1),
        "ast_parse_one_core_s": round(ast_parse_all(paths), 3),
        # other work on the machine slows wall time (CPU seconds much less): say how busy it was
        "load_average_1min_before": round(load_before[0], 2), "load_average_1min_after": round(os.getloadavg()[0], 2),
    }
    if not args.skip_libcst:
        seconds, ok = libcst_parse_all(paths, args.jobs)
        result["libcst_parse_s"] = round(seconds, 3)
        result["libcst_parsed_files"] = ok
        result["cold_to_libcst_ratio"] = round(cold["wall_s"] / seconds, 3)
    result["goals"] = GOALS
    result["meets"] = {
        "cold_s": cold["wall_s"] < GOALS["cold_s"], "warm_s": warm["wall_s"] < GOALS["warm_s"],
        "one_file_s": one_run["wall_s"] < GOALS["one_file_s"],
        "peak_mib": max(cold["peak_mib"], warm["peak_mib"], one_run["peak_mib"]) < GOALS["peak_mib"],
    }
    crashed = [r for r in (cold, warm, one_run) if r["exit_code"] not in (0,)]
    for r in crashed:
        print(r["stderr"][-2000:], file=sys.stderr)
    if crashed:  # a run that failed measured nothing: write no figures
        print(f"kcheck failed ({' '.join(kcheck)}): no results written", file=sys.stderr)
        return 1
    text = json.dumps(result, indent=1) + "\n"
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)
    print(text)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
