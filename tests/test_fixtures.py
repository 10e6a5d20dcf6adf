"""Realistic fixture files: every ``# expect: KCxxx`` marker must be reported, and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import expected_markers, findings_for

FIXTURES = Path(__file__).parent / "fixtures"
FILES = sorted(FIXTURES.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(FIXTURES).as_posix() for p in FILES])
def test_fixture_findings_match_markers(path):
    text = path.read_text()
    rel = path.relative_to(FIXTURES).as_posix()
    got = {(f.line, f.code) for f in findings_for(text, path=rel) if not f.code.startswith("KC9")}
    want = expected_markers(text)
    assert got == want, f"missing: {sorted(want - got)}  unexpected: {sorted(got - want)}"


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(FIXTURES).as_posix() for p in FILES])
def test_fixture_same_findings_without_shortcuts(path):
    text = path.read_text()
    rel = path.relative_to(FIXTURES).as_posix()
    fast = {(f.line, f.code) for f in findings_for(text, path=rel)}
    slow = {(f.line, f.code) for f in findings_for(text, path=rel, shortcuts=False)}
    assert fast == slow
