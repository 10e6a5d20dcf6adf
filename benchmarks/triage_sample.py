"""Draw the precision triage's sample from the scan reports, the way ``triage.md`` describes it.

    python benchmarks/triage_sample.py [--results benchmarks/results] [--rules KC203,KC402]

Per rule, its findings pooled over every tree's report, sorted by (tree, path, line), shuffled
with ``random.Random(2026)``, and up to five taken in that order: first at most one per tree,
then filling up from the same order. Prints one line per sampled finding; the verdicts are
judged by reading the code and kept in ``triage.md``.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path

SEED, PER_RULE = 2026, 5


def sample(results: Path) -> dict[str, list[tuple[str, str, int, str]]]:
    pools: dict[str, list[tuple[str, str, int, str]]] = defaultdict(list)
    for report in sorted(results.glob("*.json")):
        data = json.loads(report.read_text())
        if "findings" not in data or "kcheck_commit" not in data:
            continue  # not a tree scan (speed, fuzz)
        for f in data["findings"]:
            pools[f["code"]].append((data["tree"], f["path"], f["line"], f["message"]))
    picked_by_rule = {}
    for code, pool in sorted(pools.items()):
        pool.sort()
        random.Random(SEED).shuffle(pool)
        picked: list[tuple[str, str, int, str]] = []
        for item in pool:  # one per tree first
            if len(picked) < PER_RULE and item[0] not in {p[0] for p in picked}:
                picked.append(item)
        for item in pool:  # then fill up to five
            if len(picked) < PER_RULE and item not in picked:
                picked.append(item)
        picked_by_rule[code] = picked
    return picked_by_rule


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=Path(__file__).parent / "results")
    ap.add_argument("--rules", default="", help="comma-separated rule codes (default: every rule that fires)")
    args = ap.parse_args(argv)
    wanted = {c.strip() for c in args.rules.split(",") if c.strip()}
    for code, picked in sample(args.results).items():
        if wanted and code not in wanted:
            continue
        for tree, path, line, message in picked:
            print(f"{code}\t{tree}\t{path}:{line}\t{message}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
