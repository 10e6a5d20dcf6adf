"""``kcheck baseline`` and ``kcheck check --baseline FILE``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import KERNEL

from kcheck.baseline import BaselineError, apply, dumps, entries_for, load
from kcheck.finding import Finding



def finding(line: int, source: str = "torch.cuda.synchronize()", context: str = "bench", path: str = "a.py") -> Finding:
    return Finding(code="KC201", name="host-sync-in-timed-region", message="m", severity="error", path=path,
                   line=line, column=9, end_line=line, end_column=20, context=context, source_line=source)


def test_key_ignores_line_numbers_and_whitespace_but_not_the_line_or_function():
    entries = load_entries([finding(10, "y = x.sum().item()")])
    kept, hidden, stale = apply([finding(42, "y = x.sum().item()")], entries)  # moved
    assert kept == [] and len(hidden) == 1 and stale == []
    assert apply([finding(10, "y  =  x.sum().item()")], entries)[0] == []  # re-spaced
    assert apply([finding(10, "y = x.mean().item()")], entries)[0] != []  # the line changed
    assert apply([finding(10, "y = x.sum().item()", context="other")], entries)[0] != []
    assert apply([finding(10, "y = x.sum().item()", path="b.py")], entries)[0] != []


def load_entries(findings):
    data = json.loads(dumps(findings))
    from kcheck.baseline import Entry

    return [Entry(**e) for e in data["entries"]]


def test_repeated_findings_are_counted():
    entries = load_entries([finding(10), finding(20)])
    assert [e.count for e in entries] == [2]
    kept, hidden, _ = apply([finding(1), finding(2), finding(3)], entries)
    assert len(hidden) == 2 and len(kept) == 1  # a third copy is new


def test_suppressed_findings_are_neither_recorded_nor_hidden():
    suppressed = replace(finding(10), suppressed="on purpose")
    assert entries_for([suppressed]) == []
    entries = load_entries([finding(10)])
    kept, hidden, stale = apply([suppressed], entries)
    assert kept == [suppressed] and hidden == [] and len(stale) == 1


def test_stale_entries_only_for_scanned_files():
    entries = load_entries([finding(10, path="a.py"), finding(10, path="b.py")])
    _, _, stale = apply([], entries, scanned={"a.py"})
    assert [e.path for e in stale] == ["a.py"]


def test_file_is_sorted_and_stable():
    a = dumps([finding(20, path="b.py"), finding(10, path="a.py")])
    b = dumps([finding(10, path="a.py"), finding(20, path="b.py")])
    assert a == b
    assert [e["path"] for e in json.loads(a)["entries"]] == ["a.py", "b.py"]


@pytest.mark.parametrize("text, message", [
    ("{", r"base.json:1: baseline is not valid JSON"),
    ('{"entries": []}', r"base.json:1: not a kcheck baseline"),
    ('{"kcheck-baseline": 1, "entries": {}}', r'base.json:1: "entries" must be a list'),
    ('{"kcheck-baseline": 1,\n "entries": [\n  {"path": "a.py", "code": "KC201", "context": "", "source_line": "x",'
     ' "fingerprint": "f", "count": 1},\n  {"path": "a.py"}\n]}', r"base.json:4: entry 1 needs"),
    ('{"kcheck-baseline": 1, "entries": [{"path": "a.py", "code": "KC201", "context": "", "source_line": "x",'
     ' "fingerprint": "f", "count": 0}]}', r"base.json:1: entry 0"),
])
def test_bad_files_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "base.json"
    path.write_text(text)
    with pytest.raises(BaselineError, match=message):
        load(path)


def test_missing_file(tmp_path):
    with pytest.raises(BaselineError, match="cannot read baseline"):
        load(tmp_path / "nope.json")


# -- the command line ------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    (tmp_path / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nselect = ["KC201"]\n')
    (tmp_path / "bench.py").write_text(KERNEL)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_baseline_then_check_shows_only_new_findings(project, run_kcheck):
    code, _, err = run_kcheck("baseline", ".")
    assert code == 0 and "wrote 1 entry for 1 finding in 1 file to kcheck-baseline.json" in err
    data = json.loads((project / "kcheck-baseline.json").read_text())
    assert data["entries"][0]["source_line"] == "torch.cuda.synchronize()"
    assert data["entries"][0]["context"] == "bench"

    code, out, _ = run_kcheck("check", "--no-cache", "--baseline", "kcheck-baseline.json", ".")
    assert code == 0, out

    # moved code stays baselined
    (project / "bench.py").write_text('"""Timing helpers."""\n\n' + KERNEL)
    code, out, err = run_kcheck("check", "--no-cache", "--baseline", "kcheck-baseline.json", ".")
    assert code == 0, out
    assert "stale" not in err

    # a new finding is reported; the old one is hidden and listed as baselined in json
    (project / "bench.py").write_text(KERNEL.replace("        fn(x)\n", "        fn(x)\n        x.sum().item()\n"))
    code, out, _ = run_kcheck("check", "--no-cache", "--baseline", "kcheck-baseline.json", "-o", "json", ".")
    assert code == 1
    items = json.loads(out)
    assert [(i["location"]["row"], i.get("hidden")) for i in items] == [(10, None), (11, "baselined")]


def test_fixed_finding_makes_a_stale_entry(project, run_kcheck):
    run_kcheck("baseline", "-o", "base.json", ".")
    (project / "bench.py").write_text(KERNEL.replace("        torch.cuda.synchronize()\n", ""))
    code, _, err = run_kcheck("check", "--no-cache", "--baseline", "base.json", ".")
    assert code == 0
    assert "base.json: 1 stale entry" in err and "bench.py: KC201 in bench: torch.cuda.synchronize()" in err


def test_bad_baseline_is_a_usage_error(project, run_kcheck):
    (project / "base.json").write_text("[]")
    code, _, err = run_kcheck("check", "--baseline", "base.json", ".")
    assert code == 2 and "base.json:1: not a kcheck baseline" in err
