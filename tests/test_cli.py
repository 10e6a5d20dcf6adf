"""The kcheck command: exit codes, output formats, stdin, rule docs, parse errors."""

from __future__ import annotations

import json

from conftest import BENCH, REPO



def test_exit_codes_follow_ruff(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clean.py").write_text("import torch\nx = torch.ones(3)\n")
    (tmp_path / "bench.py").write_text(BENCH)
    assert run_kcheck("check", "clean.py")[0] == 0
    assert run_kcheck("check", "bench.py")[0] == 1
    assert run_kcheck("check", "--exit-zero", "bench.py")[0] == 0
    assert run_kcheck("check", "--fail-level", "error", "bench.py")[0] == 1
    assert run_kcheck("check", "--ignore", "KC201", "bench.py")[0] == 0
    assert run_kcheck("check", "-o", "nonsense", "bench.py")[0] == 2
    code, _, err = run_kcheck("check", "missing.py")
    assert code == 2 and "missing.py: no such file" in err


def test_concise_line_format(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(BENCH)
    _, out, _ = run_kcheck("check", "bench.py")
    assert out.splitlines()[0].startswith("bench.py:6:5: KC201 [host-sync-in-timed-region] .item() in a CUDA-event window")


def test_full_format_shows_source_and_links(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(BENCH)
    _, out, _ = run_kcheck("check", "-o", "full", "bench.py")
    assert ">     6 |     fn(x).item()" in out
    assert "rules/host-sync-in-timed-region/" in out
    assert "catalog/measuring/host-syncs/" in out


def test_json_has_ruff_fields(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(BENCH)
    _, out, _ = run_kcheck("check", "-o", "json", "bench.py")
    (item,) = json.loads(out)
    assert item["code"] == "KC201" and item["name"] == "host-sync-in-timed-region"
    assert item["filename"] == "bench.py"
    assert item["location"] == {"row": 6, "column": 5}
    assert item["end_location"]["row"] == 6
    assert item["url"].endswith("/rules/host-sync-in-timed-region/")
    assert item["severity"] == "error" and len(item["fingerprint"]) == 16


def test_several_formats_in_one_run(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(BENCH)
    code, out, _ = run_kcheck("check", "-o", "json:out/report.json", "-o", "concise", "bench.py")
    assert code == 1 and "KC201" in out
    assert json.loads((tmp_path / "out" / "report.json").read_text())[0]["code"] == "KC201"


def test_stdin_with_filename(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_kcheck("check", "-", "--stdin-filename", "pkg/bench.py", input=BENCH)
    assert code == 1 and out.startswith("pkg/bench.py:6:5: KC201")


def test_parse_error_and_bad_encoding_are_findings_not_crashes(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("def forward(self, x)\n    return x\n")
    (tmp_path / "latin.py").write_bytes(b"x = '\xe9'\n")
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "bench.py").write_text(BENCH)
    code, out, err = run_kcheck("check", "--no-cache", ".")
    assert code == 1, err
    lines = out.splitlines()
    assert any(l.startswith("broken.py:1:") and "KC900" in l for l in lines)
    assert any(l.startswith("latin.py:1:") and "KC900" in l and "not UTF-8" in l for l in lines)
    assert any(l.startswith("bench.py:6:5: KC201") for l in lines)
    assert not any(l.startswith("empty.py") for l in lines)


def test_statistics_counts_per_rule(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text(BENCH)
    (tmp_path / "b.py").write_text(BENCH)
    _, out, _ = run_kcheck("check", "--statistics", "--select", "KC2", ".")
    assert out.split() == ["2", "KC201", "host-sync-in-timed-region"]


def test_rule_and_rules_commands(run_kcheck):
    code, out, _ = run_kcheck("rule", "KC201")
    assert code == 0 and "## What it does" in out and "measuring/host-syncs" in out
    code, out, _ = run_kcheck("rule", "host-sync-in-timed-region", "--format", "json")
    assert json.loads(out)["code"] == "KC201"
    assert run_kcheck("rule", "KC777")[0] == 2
    code, out, _ = run_kcheck("rules", "--format", "json")
    codes = [r["code"] for r in json.loads(out)]
    assert codes == sorted(codes) and "KC201" in codes and "KC900" in codes


def test_repository_is_clean_under_its_own_checker(run_kcheck, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out, err = run_kcheck("check", "--no-cache", ".")
    assert code == 0, out + err


def test_example_tree_has_findings_in_every_family(run_kcheck, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out, _ = run_kcheck("check", "--no-cache", "--exit-zero", "-o", "json", "examples")
    families = {item["code"][:3] for item in json.loads(out)}
    assert {"KC1", "KC2", "KC3", "KC4", "KC5"} <= families, families


def test_paths_from_different_folders_all_resolve(tmp_path, run_kcheck, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "one.py").write_text(BENCH)
    (tmp_path / "b" / "two.py").write_text(BENCH)
    monkeypatch.chdir(tmp_path)
    _, out, _ = run_kcheck("check", "--no-cache", "a/one.py", "b/two.py")
    shown = {line.split(":")[0] for line in out.splitlines() if ": KC201" in line}
    assert shown == {"a/one.py", "b/two.py"}
    assert all((tmp_path / p).is_file() for p in shown)


def test_stdin_honours_rule_selection(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_kcheck("check", "-", "--stdin-filename", "bench.py", "--ignore", "KC201", input=BENCH)
    assert code == 0 and "KC201" not in out


def test_a_clean_run_says_which_preview_rules_did_not_run(tmp_path, run_kcheck, monkeypatch):
    """With previews off, "All checks passed" must not read as "every rule looked" (issue 21)."""
    from kcheck.registry import all_rules

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KCHECK_PREVIEW")
    (tmp_path / "pyproject.toml").write_text("[tool.kcheck]\nroot = true\n")
    (tmp_path / "m.py").write_text("x = 1\n")
    previews = sum(1 for r in all_rules() if r.PREVIEW)
    code, out, _ = run_kcheck("check", "m.py", "--no-cache")
    assert code == 0 and f"{previews} preview rules did not run" in out
    code, out, _ = run_kcheck("check", "m.py", "--no-cache", "--preview")
    assert code == 0 and "preview rule" not in out
    from kcheck.config import clear_caches

    monkeypatch.setenv("KCHECK_PREVIEW", "1")  # the environment turns previews on, as --preview does
    clear_caches()
    code, out, _ = run_kcheck("check", "m.py", "--no-cache")
    assert code == 0 and "preview rule" not in out


TWO_SYNCS = """import torch
def bench(fn, x):
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    fn(x)
    start.record()
    fn(x).item()
    fn(x).tolist()
    end.record()
def other(fn, x):
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    fn(x)
    start.record()
    fn(x).item()  # kcheck: ignore[KC201] -- the sync is what this window measures
    fn(x).item()
    end.record()
"""


def test_one_finding_per_rule_and_function(tmp_path, run_kcheck, monkeypatch):
    """Two syncs in one window are one finding with the second as a related place; another
    function's stays apart (its other place is suppressed); --no-group reports every place."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(TWO_SYNCS)
    _, out, _ = run_kcheck("check", "-o", "json", "--select", "KC201", "bench.py")
    items = json.loads(out)
    assert [(i["location"]["row"], i["message"].endswith("(1 more in bench: line 7)")) for i in items] == [
        (6, True), (14, False)]
    assert [r["location"]["row"] for r in items[0]["related"]] == [7]
    assert ".tolist()" in items[0]["related"][0]["message"]
    _, out, _ = run_kcheck("check", "-o", "json", "--select", "KC201", "--no-group", "bench.py")
    assert [i["location"]["row"] for i in json.loads(out)] == [6, 7, 14]
    _, out, _ = run_kcheck("check", "--statistics", "--select", "KC201", "bench.py")
    assert out.split()[:2] == ["3", "KC201"]  # the statistics count places, grouped or not
