"""Scan one source tree with kcheck and write a JSON report.

    python benchmarks/scan_corpus.py TREE --name vllm --version 0.33.0 -o benchmarks/results/vllm.json
    python benchmarks/scan_corpus.py TREE --name vllm --compare      # also run with every shortcut off

The report holds: the tree's name and version, the kcheck version and commit, the files found
and scanned, their lines and bytes, how many were parsed with libcst, findings per rule, every
finding (path relative to TREE, line, code, message, context, source line), the scan's notices
(unreadable, undecodable, oversized files), crashes (internal errors: the goal is none) and
timings. With ``--compare`` the tree is scanned a second time with the prefilters, gates and
cache off, and the report says whether the two runs found exactly the same things.

Paths in the report are relative to TREE; the tree's own location is never written.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path


def _commit() -> str:
    here = Path(__file__).resolve().parent
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _count(paths: list[str]) -> tuple[int, int]:
    lines = size = 0
    for p in paths:
        try:
            with open(p, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        size += len(data)
        lines += data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return lines, size


def _key(f) -> tuple:
    return (f.path, f.line, f.column, f.code, f.message)


def run_scan(tree: str, jobs_n: int, shortcuts: bool, cache: bool) -> dict:
    from kcheck.engine import discover, scan

    t0 = time.perf_counter()
    jobs, problems = discover([tree])
    t1 = time.perf_counter()
    result = scan(jobs, jobs_n, shortcuts=shortcuts, cache=cache)
    t2 = time.perf_counter()
    return {"jobs": jobs, "problems": problems, "result": result, "discover_s": t1 - t0, "scan_s": t2 - t1}


def report(tree: str, name: str, version: str, jobs_n: int, compare: bool, cache: bool) -> dict:
    from kcheck import __version__

    tree = str(Path(tree))
    run = run_scan(tree, jobs_n, shortcuts=True, cache=cache)
    jobs, result = run["jobs"], run["result"]
    lines, size = _count([j.path for j in jobs])
    on_disk = sum(1 for _ in Path(tree).rglob("*.py"))
    findings = result.findings
    active = [f for f in findings if f.suppressed is None]
    crashes = [e for e in result.errors if e.startswith("internal error")]
    notices = [e for e in result.errors if not e.startswith("internal error")]
    out = {
        "tree": name,
        "version": version,
        "kcheck": __version__,
        "kcheck_commit": _commit(),
        "cpu_count": os.cpu_count(),
        "jobs": jobs_n,
        "python_files_on_disk": on_disk,
        "files": result.files,
        "lines": lines,
        "bytes": size,
        "parsed_with_libcst": result.parsed,
        "cache_hits": result.cached,
        "findings_total": len(active),
        "suppressed_total": len(findings) - len(active),
        "findings_per_rule": dict(sorted(Counter(f.code for f in active).items())),
        "crashes": crashes,
        "notices": notices + [f"path problem: {p}" for p in run["problems"]],
        "seconds": {"discover": round(run["discover_s"], 3), "scan": round(run["scan_s"], 3)},
        "findings": [
            {"path": f.path, "line": f.line, "column": f.column, "code": f.code, "message": f.message,
             "context": f.context, "source_line": f.source_line}
            for f in active
        ],
    }
    if compare:
        slow = run_scan(tree, jobs_n, shortcuts=False, cache=False)
        fast_keys = {_key(f) for f in findings}
        slow_keys = {_key(f) for f in slow["result"].findings}
        out["seconds"]["scan_no_shortcuts"] = round(slow["scan_s"], 3)
        out["no_shortcuts"] = {
            "parsed_with_libcst": slow["result"].parsed,
            "crashes": [e for e in slow["result"].errors if e.startswith("internal error")],
            "same_findings": fast_keys == slow_keys,
            "only_with_shortcuts": sorted(map(list, fast_keys - slow_keys)),
            "only_without_shortcuts": sorted(map(list, slow_keys - fast_keys)),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree", help="the folder to scan")
    ap.add_argument("--name", required=True, help="the tree's name in the report")
    ap.add_argument("--version", default="", help="release or commit of the tree")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-o", "--output", help="write the JSON report here (default: stdout)")
    ap.add_argument("--compare", action="store_true", help="also scan with every shortcut off and compare")
    ap.add_argument("--cache", action="store_true", help="use the result cache (default: off, a cold scan)")
    args = ap.parse_args(argv)
    if not Path(args.tree).is_dir():
        ap.error(f"{args.tree}: not a folder")
    out = report(args.tree, args.name, args.version, args.jobs, args.compare, args.cache)
    text = json.dumps(out, indent=1) + "\n"
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    summary = {k: out[k] for k in ("tree", "files", "lines", "parsed_with_libcst", "findings_total",
                                     "findings_per_rule", "seconds")}
    summary["crashes"] = len(out["crashes"])
    if "no_shortcuts" in out:
        summary["same_findings"] = out["no_shortcuts"]["same_findings"]
    print(json.dumps(summary), file=sys.stderr)
    return 1 if out["crashes"] or ("no_shortcuts" in out and not out["no_shortcuts"]["same_findings"]) else 0


if __name__ == "__main__":
    sys.exit(main())
