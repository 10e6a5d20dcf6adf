"""Every output format: shape (against the official schemas where there is one) and behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from conftest import KERNEL as BASE_KERNEL
from conftest import REPO
from kcheck.finding import Finding
from kcheck.reporters import BASELINED, FORMATS, OUTSIDE_DIFF, ReportContext, parse_spec, render

SCHEMAS = REPO / "tests" / "external_schemas"

# the shared KERNEL with a second, suppressed sync in its loop
KERNEL = BASE_KERNEL.replace(
    "        torch.cuda.synchronize()\n",
    "        torch.cuda.synchronize()\n        y = x.sum().item()  # kcheck: ignore[KC201] measuring the sync on purpose\n")


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def scan_project(root: Path, files: dict[str, str]) -> tuple[list[Finding], ReportContext]:
    from kcheck.engine import discover, scan

    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    jobs, problems = discover([str(root)])
    assert not problems
    result = scan(jobs, 1, cache=False)
    assert not result.errors, result.errors
    return result.findings, ReportContext(root=Path(jobs[0].root), cwd=root, files=result.files)


@pytest.fixture
def project(tmp_path):
    """A git repository whose kcheck project is the subfolder ``proj/`` (report paths differ from repo paths)."""
    _git(tmp_path, "init", "-q")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nselect = ["KC201", "KC9"]\n')
    findings, ctx = scan_project(proj, {"kernels/bench.py": KERNEL})
    return findings, ctx


def validator(path: Path) -> jsonschema.Draft4Validator:
    schema = json.loads(path.read_text())
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())


def test_every_format_is_registered_and_renders(project):
    findings, ctx = project
    assert set(FORMATS) == {"concise", "full", "json", "json-lines", "sarif", "github", "rdjson", "rdjsonl",
                            "markdown", "junit"}
    for name in FORMATS:
        assert render(name, findings, ctx).strip(), name


def test_parse_spec_splits_on_the_first_colon():
    assert parse_spec("sarif:out/kcheck.sarif") == ("sarif", "out/kcheck.sarif")
    assert parse_spec("github") == ("github", None)


# -- SARIF -----------------------------------------------------------------------------------


def test_sarif_is_valid_against_the_official_schema(project):
    findings, ctx = project
    doc = json.loads(render("sarif", findings, ctx))
    errors = sorted(validator(SCHEMAS / "sarif-schema-2.1.0.json").iter_errors(doc), key=str)
    assert not errors, errors[0]
    assert doc["version"] == "2.1.0"


def test_sarif_rules_carry_docs_help_and_links(project):
    from kcheck.registry import find_rule

    findings, ctx = project
    run = json.loads(render("sarif", findings, ctx))["runs"][0]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    kc201 = rules["KC201"]
    rule = find_rule("KC201")
    assert kc201["name"] == rule.NAME
    assert kc201["helpUri"] == f"https://kcheck.github.io/kcheck/rules/{rule.NAME}/"
    assert kc201["shortDescription"]["text"] == rule.docs()["summary"].splitlines()[0]
    assert "## Why is this bad?" in kc201["help"]["markdown"]
    for entry in rule.KNOWLEDGE:
        assert f"/catalog/{entry}/" in kc201["help"]["markdown"]
    assert kc201["defaultConfiguration"]["level"] == "error"
    for result in run["results"]:
        assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == result["ruleId"]


def test_sarif_results_levels_paths_fingerprints_and_suppressions(project):
    findings, ctx = project
    run = json.loads(render("sarif", findings, ctx))["runs"][0]
    by_line = {r["locations"][0]["physicalLocation"]["region"]["startLine"]: r for r in run["results"]}
    active = by_line[10]
    assert active["level"] == "error"
    assert active["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "proj/kernels/bench.py"
    assert active["partialFingerprints"]["kcheck/v2"] == next(f.fingerprint for f in findings if f.line == 10) + ":1"
    assert "suppressions" not in active
    suppressed = by_line[11]
    assert suppressed["suppressions"] == [{"kind": "inSource", "justification": "measuring the sync on purpose"}]
    info = replace(findings[0], severity="info")
    assert json.loads(render("sarif", [info], ctx))["runs"][0]["results"][0]["level"] == "note"


def test_sarif_fingerprints_survive_moved_code(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nselect = ["KC201"]\n')
    before, _ = scan_project(tmp_path, {"bench.py": KERNEL})
    after, _ = scan_project(tmp_path, {"bench.py": "import os\n\n\n" + KERNEL})
    assert [f.line + 3 for f in before] == [f.line for f in after]
    assert [f.fingerprint for f in before] == [f.fingerprint for f in after]


# -- rdjson / rdjsonl ------------------------------------------------------------------------


def test_rdjson_is_valid_and_links_rules(project):
    findings, ctx = project
    doc = json.loads(render("rdjson", findings, ctx))
    errors = list(validator(SCHEMAS / "rdf" / "DiagnosticResult.json").iter_errors(doc))
    assert not errors, errors[0]
    (diag,) = doc["diagnostics"]  # the suppressed finding is not a review comment
    assert diag["code"] == {"value": "KC201", "url": "https://kcheck.github.io/kcheck/rules/host-sync-in-timed-region/"}
    assert diag["severity"] == "ERROR"
    assert diag["location"]["path"] == "proj/kernels/bench.py"
    assert diag["location"]["range"]["start"] == {"line": 10, "column": 9}
    assert "/catalog/measuring/host-syncs/" in diag["message"]


def test_rdjsonl_lines_are_valid_diagnostics(project):
    findings, ctx = project
    lines = render("rdjsonl", findings, ctx).splitlines()
    check = validator(SCHEMAS / "rdf" / "Diagnostic.json")
    assert len(lines) == 1
    for line in lines:
        assert not list(check.iter_errors(json.loads(line)))


def test_rdjson_columns_are_utf8_bytes(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nselect = ["KC201"]\n')
    source = KERNEL.replace("        torch.cuda.synchronize()", "        ü = 1; torch.cuda.synchronize()")
    findings, ctx = scan_project(tmp_path, {"bench.py": source})
    f = next(f for f in findings if f.line == 10)
    assert f.column == 16  # code points
    diag = json.loads(render("rdjson", [f], ctx))["diagnostics"][0]
    assert diag["location"]["range"]["start"]["column"] == 17  # "ü" is two bytes


# -- github ----------------------------------------------------------------------------------


def _finding(severity: str, line: int, message: str = "m", path: str = "a.py") -> Finding:
    return Finding(code="KC201", name="host-sync-in-timed-region", message=message, severity=severity, path=path,
                   line=line, column=1, end_line=line, end_column=5, url="https://kcheck.github.io/kcheck/rules/x/")


def test_github_orders_by_severity_and_escapes(tmp_path):
    ctx = ReportContext(root=tmp_path, cwd=tmp_path)
    findings = [_finding("info", 1), _finding("error", 3, "100% sure,\nreally"), _finding("warning", 2, path="b,c:d.py")]
    lines = render("github", findings, ctx).splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["::error", "::warning", "::notice"]
    assert "::a.py:3:1: KC201 100%25 sure,%0Areally%0ADocs: " in lines[0]
    assert "file=b%2Cc%3Ad.py," in lines[1]
    assert "title=kcheck KC201 (host-sync-in-timed-region)" in lines[0]
    assert "line=3,col=1,endLine=3,endColumn=5" in lines[0]


def test_github_counts_what_the_annotation_cap_drops(tmp_path):
    ctx = ReportContext(root=tmp_path, cwd=tmp_path)
    findings = ([_finding("error", n) for n in range(1, 13)] + [_finding("warning", n) for n in range(1, 4)]
                + [_finding("info", n) for n in range(1, 12)])
    lines = render("github", findings, ctx).splitlines()
    assert lines[0].startswith("::notice title=kcheck::26 findings") and "so 4 are not annotated" in lines[0]
    assert len(lines) == 27
    under = render("github", findings[:10], ctx).splitlines()
    assert len(under) == 10 and not any("not annotated" in line for line in under)


# -- json, json-lines, markdown, junit -------------------------------------------------------


def test_json_and_json_lines_round_trip_with_hidden_findings(project):
    from kcheck.reporters.json import load

    findings, ctx = project
    active = [f for f in findings if f.suppressed is None]
    extra = replace(active[0], line=4, source_line="def bench(fn, x, iters=100):", fingerprint="")
    ctx.hidden = [(extra, OUTSIDE_DIFF)]
    items = json.loads(render("json", findings, ctx))
    assert [i.get("hidden") for i in items] == [None, OUTSIDE_DIFF]
    lines = render("json-lines", findings, ctx).splitlines()
    assert [json.loads(line) for line in lines] == items
    for text in (render("json", findings, ctx), "\n".join(lines)):
        shown, hidden = load(text)
        assert shown == active and hidden == [(extra, OUTSIDE_DIFF)]


def test_json_results_errors_name_file_and_line():
    from kcheck.reporters.json import load

    with pytest.raises(ValueError, match=r"results.jsonl:2: not valid JSON"):
        load('{"code": "KC201"}\n{oops\n', "results.jsonl")
    with pytest.raises(ValueError, match=r"results.json:1: not a kcheck finding"):
        load('[{"code": "KC201"}]', "results.json")


def test_markdown_summary_counts_links_and_folds(project):
    findings, ctx = project
    active = [f for f in findings if f.suppressed is None]
    old = replace(active[0], line=4, message="old <b>finding</b>", fingerprint="")
    ctx.hidden = [(old, OUTSIDE_DIFF), (replace(old, line=5), BASELINED)]
    text = render("markdown", findings, ctx)
    assert text.startswith("<!-- kcheck:summary -->\n### kcheck: 1 new finding\n")
    assert "| KC2xx Logging and host syncs in timed and per-step paths | 1 | 0 | 0 |" in text
    assert "[KC201 host-sync-in-timed-region](https://kcheck.github.io/kcheck/rules/host-sync-in-timed-region/)" in text
    assert "(https://kcheck.github.io/kcheck/catalog/measuring/host-syncs/)" in text
    from kcheck.catalog import load_catalog

    assert load_catalog().get("measuring/host-syncs")["title"] in text  # catalog titles, not bare ids
    assert "<details><summary>1 finding outside the changed lines</summary>" in text
    assert "<details><summary>1 finding in the baseline</summary>" in text
    assert "old &lt;b&gt;finding&lt;/b&gt;" in text and "<b>finding" not in text
    assert "bench.py:11`" not in text  # suppressed findings stay out, as in the json it is rebuilt from


def test_markdown_without_findings_says_so(tmp_path):
    text = render("markdown", [], ReportContext(root=tmp_path, cwd=tmp_path))
    assert "### kcheck: no new findings" in text and "<details>" not in text


def test_markdown_degrades_without_a_catalog_title(tmp_path):
    f = replace(_finding("warning", 1), knowledge=("nowhere/missing-entry",))
    text = render("markdown", [f], ReportContext(root=tmp_path, cwd=tmp_path))
    assert "[nowhere/missing-entry](https://kcheck.github.io/kcheck/catalog/nowhere/missing-entry/)" in text


def test_junit_has_one_failure_per_finding(project):
    findings, ctx = project
    root = ET.fromstring(render("junit", findings, ctx))
    assert root.get("failures") == "1"
    (case,) = root.iter("testcase")
    assert case.get("name") == "kcheck.KC201.host-sync-in-timed-region" and case.get("line") == "10"
    clean = ET.fromstring(render("junit", [], ctx))
    assert clean.get("failures") == "0" and len(list(clean.iter("testcase"))) == 1


# -- the command line ------------------------------------------------------------------------


def test_several_formats_in_one_run(tmp_path, run_kcheck, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nselect = ["KC201"]\n')
    (tmp_path / "bench.py").write_text(KERNEL)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_kcheck("check", "--no-cache", "-o", "sarif:out/kcheck.sarif", "-o", "github",
                              "--output-format", "json:results.json", ".")
    assert code == 1
    assert out.startswith("::error file=bench.py,line=10,")
    assert json.loads((tmp_path / "out" / "kcheck.sarif").read_text())["runs"][0]["results"]
    assert len(json.loads((tmp_path / "results.json").read_text())) == 1

    code, out, _ = run_kcheck("comment", "results.json")
    assert code == 0
    code2, markdown, _ = run_kcheck("check", "--no-cache", "-o", "markdown", ".")
    assert out == markdown


def test_statistics_counts_per_rule(tmp_path, run_kcheck, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nselect = ["KC201"]\n')
    (tmp_path / "bench.py").write_text(KERNEL.replace("  # kcheck: ignore[KC201] measuring the sync on purpose", ""))
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_kcheck("check", "--no-cache", "--statistics", ".")
    assert code == 1
    assert out.split() == ["2", "KC201", "host-sync-in-timed-region"]


def test_unknown_format_is_a_usage_error(run_kcheck):
    code, _, err = run_kcheck("check", "-o", "xml", ".")
    assert code == 2 and "unknown output format 'xml'" in err


def test_comment_rejects_a_bad_results_file(tmp_path, run_kcheck):
    (tmp_path / "r.json").write_text("[{]")
    code, _, err = run_kcheck("comment", str(tmp_path / "r.json"))
    assert code == 2 and "r.json:1: not valid JSON" in err


CLAIM_THROUGH_A_FUNCTION = '''import torch
import torch.nn as nn


class MatMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return torch.matmul(a, b)


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return MatMul.apply(a, b)
'''


def test_related_locations_point_at_the_work_in_every_format(tmp_path):
    """KC101 through an autograd Function: reported at the claim's call, with the library op inside
    the Function as a related location in JSON (round trip), SARIF (schema-valid) and the full text."""
    from kcheck.reporters.json import load

    (tmp_path / "pyproject.toml").write_text('[tool.kcheck]\nselect = ["KC101"]\n')
    findings, ctx = scan_project(tmp_path, {"solution.py": CLAIM_THROUGH_A_FUNCTION})
    [f] = findings
    assert (f.code, f.line) == ("KC101", 18)
    [r] = f.related
    assert (r.line, r.column) == (8, 16) and "torch.matmul()" in r.message
    items = json.loads(render("json", findings, ctx))
    assert items[0]["related"] == [{"location": {"row": 8, "column": 16}, "end_location": {"row": 8, "column": 34},
                                    "message": r.message}]
    assert load(render("json", findings, ctx))[0] == findings
    doc = json.loads(render("sarif", findings, ctx))
    assert not list(validator(SCHEMAS / "sarif-schema-2.1.0.json").iter_errors(doc))
    [loc] = doc["runs"][0]["results"][0]["relatedLocations"]
    assert loc["physicalLocation"]["region"]["startLine"] == 8
    ctx.format = "full"
    assert "note: line 8: torch.matmul() does the work here" in render("full", findings, ctx)
