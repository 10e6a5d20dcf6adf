"""benchmarks/audit_sample.py draws the sample that knowledge/AUDIT.md describes."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import audit_sample  # noqa: E402


def _write(root: Path, rel: str, entry_id: str, n_facts: int) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    facts = [{"statement": f"{entry_id} fact {i}", "evidence": "derived"} for i in range(n_facts)]
    path.write_text(yaml.safe_dump({"id": entry_id, "facts": facts}), encoding="utf-8")


def test_numbering_follows_sorted_paths_then_file_order(tmp_path):
    _write(tmp_path, "b/two.yaml", "b/two", 2)
    _write(tmp_path, "a/zeta.yaml", "a/zeta", 1)
    _write(tmp_path, "a/alpha.yaml", "a/alpha", 3)
    (tmp_path / "sources.yaml").write_text("sources: []\n")  # top-level files are not entries
    names = [f"{e}#{i}" for e, i, _ in audit_sample.numbered_facts(tmp_path)]
    assert names == ["a/alpha#1", "a/alpha#2", "a/alpha#3", "a/zeta#1", "b/two#1", "b/two#2"]


def test_draw_is_the_documented_snippet(tmp_path):
    _write(tmp_path, "t/one.yaml", "t/one", 40)
    _write(tmp_path, "t/two.yaml", "t/two", 25)
    picked = sorted(random.Random(20261209).sample(range(65), 30))
    sample = audit_sample.draw(20261209, tmp_path)
    assert [n for n, *_ in sample] == picked
    assert sample == audit_sample.draw(20261209, tmp_path)  # same seed, same sample


def test_shipped_catalog_draws_thirty_distinct_facts():
    sample = audit_sample.draw(20261209, REPO / "knowledge")
    assert len({n for n, *_ in sample}) == 30
    assert all(isinstance(fact.get("statement"), str) for *_, fact in sample)
