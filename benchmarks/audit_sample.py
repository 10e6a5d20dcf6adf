"""Draw a catalog audit's sample, the way ``knowledge/AUDIT.md`` describes it.

    python benchmarks/audit_sample.py SEED [--count 30] [--knowledge knowledge]

Facts are numbered from 0 over the entry files in sorted path order (``<topic>/<slug>.yaml``)
and each entry's facts in file order; ``random.Random(SEED).sample`` picks ``count`` of those
numbers, printed in ascending order with the fact's name (``<entry-id>#<n>``, n 1-based in its
entry) and its evidence kind. The verdicts are judged by opening the evidence and recorded in
AUDIT.md.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def numbered_facts(knowledge: Path) -> list[tuple[str, int, dict]]:
    """Every fact as (entry id, 1-based position in its entry, fact), in the audit's fixed order."""
    return [
        (entry["id"], i, fact)
        for path in sorted(knowledge.glob("*/*.yaml"))
        for entry in [yaml.safe_load(path.read_text(encoding="utf-8"))]
        for i, fact in enumerate(entry["facts"], 1)
    ]


def draw(seed: int, knowledge: Path, count: int = 30) -> list[tuple[int, str, int, dict]]:
    """The sample: (global number, entry id, position, fact), ascending by number."""
    facts = numbered_facts(knowledge)
    picked = sorted(random.Random(seed).sample(range(len(facts)), count))
    return [(n, *facts[n]) for n in picked]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seed", type=int)
    parser.add_argument("--count", type=int, default=30)
    parser.add_argument("--knowledge", type=Path, default=ROOT / "knowledge")
    args = parser.parse_args(argv)
    facts = numbered_facts(args.knowledge)
    entries = len({entry_id for entry_id, _, _ in facts})
    print(f"# seed {args.seed}: {args.count} of {len(facts)} facts in {entries} entries")
    for n, entry_id, i, fact in draw(args.seed, args.knowledge, args.count):
        print(f"{n}\t{entry_id}#{i}\t{fact.get('evidence', '?')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
