"""Every rule's VALID and INVALID examples run as tests, with stable ids (KC201-valid-0)."""

from __future__ import annotations

import pytest

from kcheck.registry import all_rules

from conftest import findings_for


def _cases(kind: str):
    for rule in all_rules():
        for i, source in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, source, id=f"{rule.CODE}-{kind.lower()}-{i}")


@pytest.mark.parametrize("rule, source", list(_cases("VALID")))
def test_valid_example_is_clean(rule, source):
    hits = [f for f in findings_for(source) if f.code == rule.CODE]
    assert hits == [], f"{rule.CODE} fired on its own VALID example: {hits}"


@pytest.mark.parametrize("rule, source", list(_cases("INVALID")))
def test_invalid_example_is_reported(rule, source):
    hits = [f for f in findings_for(source) if f.code == rule.CODE]
    assert hits, f"{rule.CODE} did not fire on its own INVALID example"
    for f in hits:
        assert f.url.endswith(f"/rules/{rule.NAME}/")
        assert f.knowledge == tuple(rule.KNOWLEDGE)


@pytest.mark.parametrize("rule, source", list(_cases("INVALID")) + list(_cases("VALID")))
def test_shortcuts_do_not_change_findings(rule, source):
    fast = {(f.code, f.line, f.column) for f in findings_for(source)}
    slow = {(f.code, f.line, f.column) for f in findings_for(source, shortcuts=False)}
    assert fast == slow


def test_every_rule_is_documented():
    for rule in all_rules():
        docs = rule.docs()
        for section in ("What it does", "Why is this bad?", "Example", "Use instead"):
            assert docs.get(section), f"{rule.CODE} lacks the '{section}' section"
        assert rule.INVALID, f"{rule.CODE} has no INVALID example"
        assert rule.CODE[:3] in ("KC1", "KC2", "KC3", "KC4", "KC5", "KC9")
        assert rule.NAME == rule.NAME.lower() and " " not in rule.NAME
        assert rule.family() != "meta" or rule.CODE.startswith("KC9")
