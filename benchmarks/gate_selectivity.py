"""Which files each rule's prefilter and gate send to libcst, against where the rule reports.

    python benchmarks/gate_selectivity.py TREE [--report benchmarks/results/vllm.json]

libcst parsing is most of a cold scan's CPU time, and a file is parsed when any enabled rule's
prefilter and gate let it through. For each rule this prints the files and lines its gate lets
through, the lines no other rule's gate lets through (what tightening this gate alone would
save), and, from a ``scan_corpus.py`` report of the same tree, the files where the rule reported
something and how many of those its prefilter or gate turned away ("missed": a gate that is not a
necessary condition of its rule; it must be 0). A file is counted once however many rules want it.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import warnings
from collections import Counter, defaultdict

from kcheck.engine import discover
from kcheck.gate import summarize
from kcheck.registry import all_rules


def selectivity(tree: str) -> tuple[dict, dict]:
    rules = [r for r in all_rules() if r.family() != "meta"]
    files: Counter = Counter()
    lines: Counter = Counter()
    alone: Counter = Counter()
    wants: dict[str, set[str]] = {}  # file -> the rules whose prefilter and gate let it through
    totals = {"files": 0, "lines": 0, "ast_files": 0, "libcst_files": 0, "libcst_lines": 0}
    jobs, _ = discover([tree])
    for job in jobs:
        try:
            text = open(job.path, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        n = text.count("\n") + 1
        totals["files"] += 1
        totals["lines"] += n
        seen: dict[str, bool] = {}
        wanted = [r for r in rules if job.config.is_enabled(r.CODE, r.NAME, job.config_rel or job.rel) and r.prefilter(text, job.config, seen)]
        wants[job.rel] = set()
        if not wanted:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                summary = summarize(ast.parse(text))
        except (SyntaxError, ValueError, RecursionError):
            continue
        totals["ast_files"] += 1
        summary.path, summary.source = job.rel, text
        gated = [r.CODE for r in wanted if r.gate(summary, job.config)]
        wants[job.rel] = set(gated)
        if gated:
            totals["libcst_files"] += 1
            totals["libcst_lines"] += n
        for code in gated:
            files[code] += 1
            lines[code] += n
        if len(gated) == 1:
            alone[gated[0]] += n
    per_rule = {r.CODE: {"files": files[r.CODE], "lines": lines[r.CODE], "lines_alone": alone[r.CODE]}
                for r in rules}
    return per_rule, totals, wants


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tree")
    ap.add_argument("--report", help="a scan_corpus.py report (or kcheck's JSON output) of the same tree, "
                    "for the files with findings")
    args = ap.parse_args(argv)
    per_rule, totals, wants = selectivity(args.tree)
    reported: dict[str, set] = defaultdict(set)
    if args.report:
        data = json.load(open(args.report))
        for f in data["findings"] if isinstance(data, dict) else data:  # scan_corpus.py or `kcheck -o json`
            reported[f["code"]].add(f.get("path") or f.get("filename"))
    t = totals
    print(f"{t['files']:,} files, {t['lines']:,} lines; parsed with ast: {t['ast_files']:,} files; "
          f"with libcst: {t['libcst_files']:,} files ({t['libcst_files'] / max(t['files'], 1):.0%}), "
          f"{t['libcst_lines']:,} lines ({t['libcst_lines'] / max(t['lines'], 1):.0%})\n")
    print("| rule | gate passes (files) | lines | lines no other gate wants | files with findings | missed |")
    print("|---|---:|---:|---:|---:|---:|")
    missed_any = False
    for code, row in per_rule.items():
        found = len(reported[code]) if args.report else "-"
        missed = sorted(p for p in reported[code] if p in wants and code not in wants[p])
        missed_any |= bool(missed)
        print(f"| {code} | {row['files']:,} | {row['lines']:,} | {row['lines_alone']:,} | {found} | "
              f"{len(missed) if args.report else '-'} |")
        for path in missed:
            print(f"    missed by {code}: {path}", file=sys.stderr)
    return 1 if missed_any else 0


if __name__ == "__main__":
    raise SystemExit(main())
