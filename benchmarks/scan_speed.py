"""How fast ``kcheck check`` is on a real tree: cold, warm and one-file, against a bare libcst parse.

    python benchmarks/scan_speed.py TREE --name vllm -j 2 -o benchmarks/results/speed_vllm.json

Measured in one run, on the same files:

* **cold**: ``kcheck check TREE -j N`` with an empty result cache (start-up included);
* **warm**: the same command again, every result now in the cache;
* **one file**: ``kcheck check FILE --no-cache``, the pre-commit case (start-up included);
* **one file, index cached**: ``kcheck check FILE`` right after the warm run, the file just changed
  (a comment appended, then restored): the project index of the rest comes from the cache;
* **a 10-file change**: ``kcheck check --diff-base HEAD`` in a git copy of the tree whose cache a
  warm run filled, after ten files (the median-sized ones) gained a line: what the pre-commit
  ``kcheck-changed`` hook and the PR bot run;
* **libcst**: ``libcst.parse_module`` of every file kcheck scanned, on N processes, nothing else;
* **ast**: ``ast.parse`` of every file on one process, for scale.

Every rule runs, preview rules included (``--preview``). Each kcheck run is a separate process. Cold and warm are timed ``--rounds`` times (median
reported, every round listed), one file as often. CPU seconds (user + system, workers included)
are reported beside wall time, because wall time on a shared machine depends on what else runs.

Peak memory is measured in separate runs (one cold, one warm, one file), never in a timed one: it
is the largest sum, over the process and all its workers, of proportional set size (PSS, shared
pages split between the processes that share them), sampled every 20 ms from ``/proc`` (RSS where
PSS cannot be read, and the report says so). The sampler's reads of ``/proc`` take CPU from a
two-core scan: on vLLM, cold runs with it took 30.2 and 38.2 s against 26.0 and 30.2 s without,
alternated (3 Dec 2026).
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

GOALS = {"cold_s": 60.0, "warm_s": 1.0, "one_file_s": 0.5, "one_file_indexed_s": 0.5, "diff_10_files_s": 3.0,
         "peak_mib": 400.0}  # issue 22


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


def timed_run(cmd: list[str], cwd: str | None = None, sample: bool = False) -> dict:
    """Run ``cmd``; wall seconds, CPU seconds of it and its workers, and with ``sample`` the peak
    memory of the process tree (whose sampling slows the run: time runs without it)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = [0]
    kinds: set[str] = set()

    def sample_memory() -> None:
        while proc.poll() is None:
            total = 0
            for p in _children_of(proc.pid):
                kib, kind = _memory_kib(p)
                total += kib
                kinds.add(kind)
            peak[0] = max(peak[0], total)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample_memory, daemon=True) if sample else None
    if sampler is not None:
        sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    if sampler is not None:
        sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "exit_code": proc.returncode,
              "stdout": out.decode("utf-8", "replace"), "stderr": err.decode("utf-8", "replace")}
    if sample:
        result.update(peak_mib=round(peak[0] / 1024, 1), memory_measure="+".join(sorted(kinds)) or "none")
    return result


def _median(runs: list[dict]) -> dict:
    """The run with the median wall time, with every run's wall and CPU seconds beside it."""
    median = sorted(runs, key=lambda r: r["wall_s"])[(len(runs) - 1) // 2]
    return {**median, "rounds_wall_s": [r["wall_s"] for r in runs], "rounds_cpu_s": [r["cpu_s"] for r in runs]}


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


def diff_change(tree: Path, paths: list[str], kcheck: list[str], args) -> list[dict]:
    """Timed ``--diff-base HEAD`` runs over a ten-file change, in a git copy of the tree (see above)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "tree"
        shutil.copytree(tree, repo, ignore=shutil.ignore_patterns(".kcheck_cache"))
        git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "-C", str(repo)]
        for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "tree"]):
            subprocess.run([*git, *step], check=True, capture_output=True)
        warm = [*kcheck, "check", "--preview", "--exit-zero", "-q", "-j", str(args.jobs), str(repo)]
        subprocess.run(warm, capture_output=True, cwd=repo)
        by_size = sorted((Path(p).relative_to(tree) for p in paths), key=lambda p: os.path.getsize(tree / p))
        middle = len(by_size) // 2
        changed = by_size[middle - 5:middle + 5]
        runs = []
        for n in range(args.rounds):
            for rel in changed:
                with open(repo / rel, "a") as fh:
                    fh.write(f"\n# kcheck speed probe {n}\n")
            runs.append(timed_run([*kcheck, "check", "--preview", "--exit-zero", "-q", "--diff-base", "HEAD",
                                   "-j", str(args.jobs)], cwd=repo))
        return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree")
    ap.add_argument("--name", required=True)
    ap.add_argument("--version", default="")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--one-file", help="the file for the one-file run, relative to TREE (default: the median-sized file)")
    ap.add_argument("--skip-libcst", action="store_true", help="do not measure the bare libcst parse")
    ap.add_argument("--rounds", type=int, default=3, help="timed runs of cold, warm and one file (median reported)")
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
    base = [*kcheck, "check", "--preview", "--exit-zero", "-q", "-o", "json", "-j", str(args.jobs), str(tree)]
    colds, warms = [], []
    for _ in range(args.rounds):  # cold then warm, each round from an empty cache
        clear_caches(tree)
        colds.append(timed_run(base))
        warms.append(timed_run(base))
    cold, warm = _median(colds), _median(warms)
    same_cold_warm = all(r["stdout"] == colds[0]["stdout"] for r in colds + warms)
    if args.one_file:
        one = str(tree / args.one_file)
    else:
        one = sorted(paths, key=os.path.getsize)[len(paths) // 2]
    one_cmd = [*kcheck, "check", "--preview", "--exit-zero", "-q", "--no-cache", one]
    one_run = _median([timed_run(one_cmd) for _ in range(args.rounds)])
    # the pre-commit case with the project index cached by the warm run: the file has just changed
    original, stat_before = Path(one).read_bytes(), os.stat(one)
    indexed_runs = []
    try:
        for n in range(args.rounds):
            Path(one).write_bytes(original + f"\n# kcheck speed probe {n}\n".encode())
            indexed_runs.append(timed_run([*kcheck, "check", "--preview", "--exit-zero", "-q", one]))
    finally:
        Path(one).write_bytes(original)
        os.utime(one, ns=(stat_before.st_atime_ns, stat_before.st_mtime_ns))
    indexed = _median(indexed_runs)
    diff_runs = diff_change(tree, paths, kcheck, args)
    diff = _median(diff_runs)
    clear_caches(tree)
    memory = {"cold": timed_run(base, sample=True), "warm": timed_run(base, sample=True),
              "one_file": timed_run(one_cmd, sample=True)}
    clear_caches(tree)

    shown = lambda r: {k: v for k, v in r.items() if k not in ("stdout", "stderr")}  # noqa: E731
    result = {
        "tree": args.name, "version": args.version, "files": len(paths), "lines": lines, "jobs": args.jobs,
        "cpu_count": os.cpu_count(), "rounds": args.rounds,
        "cold": shown(cold), "warm": shown(warm),
        "one_file": {**shown(one_run), "file": os.path.relpath(one, tree), "bytes": os.path.getsize(one)},
        "one_file_indexed": shown(indexed),
        "diff_10_files": shown(diff),
        "memory_runs": {k: shown(r) for k, r in memory.items()},
        "peak_mib": max(r["peak_mib"] for r in memory.values()),
        "memory_measure": "+".join(sorted({k for r in memory.values() for k in r["memory_measure"].split("+")})),
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
        "one_file_indexed_s": indexed["wall_s"] < GOALS["one_file_indexed_s"],
        "diff_10_files_s": diff["wall_s"] < GOALS["diff_10_files_s"],
        "peak_mib": result["peak_mib"] < GOALS["peak_mib"],
    }
    crashed = [r for r in (*colds, *warms, one_run, *indexed_runs, *diff_runs, *memory.values())
               if r["exit_code"] not in (0,)]
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
