"""The yardstick: the corpus manifest, the labels, the evaluator's arithmetic, and the rules'
preview flags against the committed test-split measurement."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import corpus  # noqa: E402
import evaluate  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "evaluation-test.json"
LABEL_KEYS = {"tree", "path", "lines", "family", "rule", "verdict", "reason", "evidence", "found_by"}
FIX_KEYS = {"id", "repo", "commit", "path", "family", "rule", "pre_lines", "post_lines", "reason", "evidence"}


# -- the manifest --------------------------------------------------------------------------------


def test_manifest_split_follows_its_written_rule():
    trees = corpus.load_manifest()
    new = [t for t in trees if t.get("split_rule", "hash") == "hash"]
    assert len(new) >= 16
    test = [t for t in new if t["split"] == "test"]
    assert len(test) >= 8  # a test split large enough to measure on, of every kind
    assert {t["kind"] for t in test} == {"serving-engine", "kernel-library", "training-stack", "agent-solutions"}
    for t in new:
        assert t["split"] == corpus.hash_split(t["name"], "kcheck-corpus-v1:")
        assert t["added"], t["name"]
        src = t["source"]
        assert ("pypi" in src and re.fullmatch(r"[0-9a-f]{64}", src["sha256"])) or re.fullmatch(r"[0-9a-f]{40}", src["commit"])
    for t in trees:
        if t.get("split_rule") == "fitted-before-split":
            assert t["split"] == "dev", f"{t['name']}: rules were fitted to it, so it cannot be test"
        if t.get("split_rule") == "moved-to-dev":  # a worn-out test tree (benchmarks/README.md, step 5)
            assert t["split"] == "dev" and t["moved"] and corpus.hash_split(t["name"], "kcheck-corpus-v1:") == "test"


def test_manifest_refuses_a_split_that_disagrees_with_the_rule(tmp_path):
    text = (REPO / "benchmarks" / "corpus.yaml").read_text()
    name = next(t["name"] for t in corpus.load_manifest() if t["split"] == "test")
    flipped = re.sub(rf"(\{{name: {re.escape(name)}, [^}}]*?split: )test", r"\1dev", text, count=1)
    assert flipped != text
    path = tmp_path / "corpus.yaml"
    path.write_text(flipped)
    with pytest.raises(corpus.ManifestError, match=name):
        corpus.load_manifest(path)


def test_fetch_refuses_a_destination_inside_the_repository():
    with pytest.raises(corpus.ManifestError, match="outside the repository"):
        corpus.fetch(REPO / "benchmarks" / "trees")


def test_no_script_reads_a_registry_url():
    for path in (REPO / "benchmarks").glob("*"):
        if path.suffix in (".py", ".sh", ".yaml"):
            assert "pypi.org" not in path.read_text(), path.name


# -- the labels ----------------------------------------------------------------------------------


def _recall_labels(split: str | None = "test") -> list[dict]:
    """The recall labels of one split (``*-dev.yaml`` hold the dev trees' labels), or all of them."""
    out = []
    for f in sorted((REPO / "benchmarks" / "labels" / "recall").glob("*.yaml")):
        if split is None or (f.stem.endswith("-dev")) == (split == "dev"):
            out += [dict(lab, _file=f.name) for lab in yaml.safe_load(f.read_text())["labels"]]
    return out


def test_labels_are_well_formed():
    split = {t["name"]: t["split"] for t in corpus.load_manifest()}
    labels = _recall_labels(None)
    for f in sorted((REPO / "benchmarks" / "labels" / "precision").glob("*.yaml")):
        labels += [dict(lab, found_by="kcheck", _file=f.name) for lab in yaml.safe_load(f.read_text())["labels"]]
    for lab in labels:
        where = f"{lab.get('tree')}:{lab.get('path')}:{lab.get('lines')}"
        made_on = "dev" if lab.pop("_file").removesuffix(".yaml").endswith("-dev") else "test"
        assert set(lab) <= LABEL_KEYS | {"message"}, where
        assert split.get(lab["tree"]) == made_on, f"{where}: a label sits on a tree of its file's split"
        assert not lab["path"].startswith("/") and ".." not in lab["path"].split("/"), where
        lo, hi = lab["lines"]
        assert 1 <= lo <= hi, where
        assert re.fullmatch(r"KC[1-5]", lab["family"]), where
        assert lab.get("rule") is None or lab["rule"].startswith(lab["family"]), where
        assert isinstance(lab["verdict"], bool) and lab["reason"].strip(), where
    for fix in corpus.load_fixes():
        assert set(fix) <= FIX_KEYS and re.fullmatch(r"[0-9a-f]{40}", fix["commit"]), fix["id"]
        assert fix["evidence"].startswith("https://github.com/"), fix["id"]
    ids = [fix["id"] for fix in corpus.load_fixes()]
    assert len(ids) == len(set(ids))


def test_recall_labels_meet_the_yardsticks_bar():
    """At least 150 real instances found by reading the test trees (25 per family with the fixes)
    and 40 more mined from fixes."""
    positives = [lab for lab in _recall_labels() if lab["verdict"]]
    fixes = corpus.load_fixes()
    assert len(positives) >= 150
    assert len(fixes) >= 40
    per_family = Counter(lab["family"] for lab in positives) + Counter(fix["family"] for fix in fixes)
    for family in ("KC1", "KC2", "KC3", "KC4", "KC5"):
        assert per_family[family] >= 25, family


# -- the arithmetic ------------------------------------------------------------------------------


def test_wilson_interval():
    lo, hi = evaluate.wilson(10, 10)
    assert hi == 1.0 and 0.72 < lo < 0.73
    lo, hi = evaluate.wilson(8, 10)
    assert 0.49 < lo < 0.50 and 0.94 < hi < 0.95
    assert evaluate.wilson(0, 0) == (0.0, 1.0)


def _finding(code, path, line):
    return {"code": code, "path": path, "line": line, "end_line": line, "message": "m"}


def test_measure_counts_recall_false_alarms_and_precision():
    found = {"t": [_finding("KC203", "a.py", 10), _finding("KC502", "k.py", 5), _finding("KC203", "b.py", 3)]}
    recall = [
        {"tree": "t", "path": "a.py", "lines": [9, 11], "family": "KC2", "rule": "KC201", "verdict": True},
        {"tree": "t", "path": "a.py", "lines": [20, 22], "family": "KC2", "verdict": True},
        {"tree": "t", "path": "k.py", "lines": [5, 5], "family": "KC5", "rule": "KC502", "verdict": True},
        {"tree": "t", "path": "b.py", "lines": [1, 4], "family": "KC2", "verdict": False},
        {"tree": "other", "path": "a.py", "lines": [9, 11], "family": "KC2", "verdict": True},  # not in the split
    ]
    precision = [
        {"tree": "t", "path": "a.py", "lines": [10, 10], "rule": "KC203", "family": "KC2", "verdict": True},
        {"tree": "t", "path": "b.py", "lines": [3, 3], "rule": "KC203", "family": "KC2", "verdict": False},
        {"tree": "t", "path": "gone.py", "lines": [1, 1], "rule": "KC203", "family": "KC2", "verdict": True},
    ]
    m = evaluate.measure(found, recall, precision, {"t"})
    assert (m["families"]["KC2"]["recall"]["k"], m["families"]["KC2"]["recall"]["n"]) == (1, 2)
    assert m["rules"]["KC201"]["recall"]["n"] == 1 and m["rules"]["KC201"]["recall"]["k"] == 0  # KC203 is no KC201
    assert (m["families"]["KC5"]["recall"]["k"], m["families"]["KC5"]["recall"]["n"]) == (1, 1)
    assert (m["families"]["KC2"]["false_alarms"]["k"], m["families"]["KC2"]["false_alarms"]["n"]) == (1, 1)
    assert (m["rules"]["KC203"]["precision"]["k"], m["rules"]["KC203"]["precision"]["n"]) == (1, 2)
    assert [lab["path"] for lab in m["missed"]] == ["a.py"]
    assert [lab["path"] for lab in m["stale"]] == ["gone.py"]
    assert m["rules"]["KC203"]["status"] == "preview"  # 50 %


def test_a_finding_spanning_the_labelled_line_counts():
    """A handler reported from its ``except`` line to the end of its body meets a label on its body."""
    found = {"t": [dict(_finding("KC303", "a.py", 10), end_line=14)]}
    label = {"tree": "t", "path": "a.py", "lines": [12, 12], "family": "KC3", "verdict": True}
    assert evaluate.measure(found, [label], [], {"t"})["families"]["KC3"]["recall"]["k"] == 1
    assert evaluate.measure(found, [dict(label, lines=[15, 16])], [], {"t"})["families"]["KC3"]["recall"]["k"] == 0


def test_status_needs_precision_and_a_narrow_interval():
    found = {"t": [_finding("KC501", "k.py", n) for n in range(1, 40)]}
    judged = [{"tree": "t", "path": "k.py", "lines": [n, n], "rule": "KC501", "family": "KC5", "verdict": True}
              for n in range(1, 9)]
    assert evaluate.measure(found, [], judged, {"t"})["rules"]["KC501"]["status"] == "preview"  # 8/8: too wide
    judged += [dict(judged[0], lines=[n, n]) for n in range(10, 15)]
    assert evaluate.measure(found, [], judged, {"t"})["rules"]["KC501"]["status"] == "stable"  # 14/14


def test_sample_takes_every_finding_of_a_small_rule_and_ten_of_a_large_one():
    found = {"t": [_finding("KC203", "a.py", n) for n in range(1, 31)] + [_finding("KC501", "k.py", 1)]}
    first = evaluate.draw_sample(found, [])
    again = evaluate.draw_sample(found, [])
    assert first == again
    assert Counter(lab["rule"] for lab in first) == {"KC203": 10, "KC501": 1}
    judged = [dict(first[0], verdict=True)]
    assert len(evaluate.draw_sample(found, judged)) == 10


# -- preview follows the measurement ---------------------------------------------------------------


def test_preview_flags_follow_the_committed_test_measurement():
    """A rule below the bar on the test split is preview; one above it is not (benchmarks/README.md)."""
    from kcheck.registry import all_rules

    measured = json.loads(RESULTS.read_text())["rules"]
    for rule in all_rules():
        if rule.CODE.startswith("KC9"):
            continue  # meta rules judge suppressions, not code
        status = measured.get(rule.CODE, {}).get("status", "preview")  # never measured: preview
        assert rule.PREVIEW == (status == "preview"), f"{rule.CODE}: measured {status}, PREVIEW={rule.PREVIEW}"


def test_a_related_location_on_the_labelled_line_counts():
    """A claim reported at its call, whose related location is the library op inside the helper the
    label names, meets the label; a label elsewhere does not."""
    found = {"t": [dict(_finding("KC101", "a.py", 40), related=[(11, 11)])]}
    label = {"tree": "t", "path": "a.py", "lines": [11, 11], "family": "KC1", "verdict": True}
    assert evaluate.measure(found, [label], [], {"t"})["families"]["KC1"]["recall"]["k"] == 1
    assert evaluate.measure(found, [dict(label, lines=[20, 21])], [], {"t"})["families"]["KC1"]["recall"]["k"] == 0


def test_kept_findings_are_measured_again_without_running_kcheck(tmp_path, monkeypatch):
    """``--findings``: the first run keeps what kcheck found; a second run reads it back (kcheck is
    not run again) and refuses a file kept for another split, selection or set of trees."""
    calls = []

    def fake_scan(dest, split, jobs, only=None, select="ALL"):
        calls.append(split)
        return {"t": [_finding("KC203", "a.py", 10)]}

    monkeypatch.setattr(evaluate, "scan_split", fake_scan)
    monkeypatch.setattr(evaluate, "load_manifest", lambda: [{"name": "t", "split": "dev"}])
    monkeypatch.setattr(evaluate, "load_labels", lambda split_of: ([], []))
    (tmp_path / "t").mkdir()
    kept = tmp_path / "kept.json"
    args = [str(tmp_path), "--split", "dev", "--select", "KC2", "--tree", "t", "--findings", str(kept)]
    assert evaluate.main(args) == 0 and calls == ["dev"]
    assert json.loads(kept.read_text())["found"]["t"][0]["code"] == "KC203"
    assert evaluate.main(args) == 0 and calls == ["dev"]  # read back, not scanned again
    with pytest.raises(SystemExit):
        evaluate.main([str(tmp_path), "--split", "dev", "--findings", str(kept)])  # kept for --select KC2
