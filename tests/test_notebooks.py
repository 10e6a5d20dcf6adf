"""Jupyter notebooks: checked cell by cell, findings at cell:line in every format (kcheck.notebook)."""

from __future__ import annotations

import json

from conftest import BENCH, REPO

from kcheck import notebook
from kcheck.config import Config, clear_caches


def nb(*cells, language: str = "python") -> str:
    """A notebook of ``cells``: a string is a code cell, ("markdown", text) another kind."""
    out = []
    for cell in cells:
        kind, text = cell if isinstance(cell, tuple) else ("code", cell)
        out.append({"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True),
                    **({"outputs": [], "execution_count": None} if kind == "code" else {})})
    return json.dumps({"cells": out, "metadata": {"kernelspec": {"language": language, "name": "k"}},
                       "nbformat": 4, "nbformat_minor": 5}, indent=1)


def check(text: str, **config):
    result = notebook.check(text, "exp.ipynb", Config(root=REPO, **{"preview": True, **config}))
    assert not result.errors, result.errors
    return result


def shown(result):
    return [(f.code, f.cell, f.line, f.column) for f in result.findings if f.suppressed is None]


# BENCH's KC201 is at 6:5 of its text; split over cells it lands in the cell that holds it
HEAD, BODY = BENCH.split("def bench")[0], "def bench" + BENCH.split("def bench")[1]


def test_a_finding_is_reported_at_its_cell_and_the_line_within_it():
    result = check(nb(("markdown", "# Timing\n"), HEAD, ("markdown", "notes\n"), BODY))
    assert shown(result) == [("KC201", 4, 5, 5)]  # cell 4 (markdown cells count), line 5 of it
    (f,) = result.findings
    assert f.path == "exp.ipynb" and f.source_line == "fn(x).item()" and f.end_line == 5


def test_magics_shell_escapes_and_help_are_skipped_line_for_line():
    body = BODY.replace("    fn(x)\n", "    fn(x)\n    %time fn(x)\n", 1)
    result = check(nb("%matplotlib inline\n!nvidia-smi \\\n  -L\nfiles = !ls\ntorch?\n" + HEAD, body))
    assert shown(result) == [("KC201", 2, 6, 5)]  # the magic inside the function kept the count
    source = notebook.load(nb("%load_ext autoreload\n" + HEAD, body)).source
    assert source.splitlines()[0] == "pass" and "    pass" in source.splitlines()


def test_a_percent_or_bang_inside_a_string_or_brackets_is_python():
    code = 's = """\n%s is not a magic\n!nor this\n"""\nx = (1\n% 2)\n'
    assert notebook.load(nb(code)).source == code


def test_cell_magics_skip_other_languages_and_keep_python_bodies():
    timed = "%%timeit\n" + BENCH
    loaded = notebook.load(nb("%%bash\nnvidia-smi\n", timed, "%%writefile k.cu\n__global__ void k() {}\n"))
    assert loaded.cells == [2] and loaded.source.startswith("pass\nimport torch")
    assert shown(check(nb("%%bash\nnvidia-smi\n", timed))) == [("KC201", 2, 7, 5)]


def test_suppression_comments_work_inside_cells():
    body = BODY.replace("fn(x).item()", "fn(x).item()  # kcheck: ignore[KC201] warm-up check, not timed")
    result = check(nb(HEAD, body))
    assert shown(result) == []
    assert [(f.code, f.cell, f.line) for f in result.findings] == [("KC201", 2, 5)]
    unused = check(nb(HEAD, "x = 1  # kcheck: ignore[KC201] nothing here\n"))
    assert shown(unused) == [("KC901", 2, 1, 8)]


def test_malformed_notebooks_are_a_kc900_finding_with_the_reason():
    cases = {
        '{"cells": [': "not valid JSON",
        "[1, 2]": "not an object",
        '{"worksheets": [], "nbformat": 3}': "nbformat 3",
        '{"cells": [{"cell_type": "code", "source": 3}]}': "cell 1",
        '{"cells": ["x"]}': "cell 1 is not an object",
    }
    for text, reason in cases.items():
        (f,) = check(text).findings
        assert f.code == "KC900" and reason in f.message and f.cell == 0, (text, f.message)
    (f,) = check('{\n  "cells": [,]\n}').findings
    assert (f.line, f.column) == (2, 13)  # where the JSON breaks


def test_a_syntax_error_in_a_cell_is_reported_at_that_cell():
    (f,) = check(nb("import torch\n", "x = 1\ndef f(:\n")).findings
    assert (f.code, f.cell, f.line) == ("KC900", 2, 2)


def test_an_empty_notebook_and_a_non_python_one():
    assert check(nb()).findings == [] and check('{"cells": []}').findings == []
    assert check(nb(("markdown", "only prose\n"), "")).findings == []
    result = check(nb("x <- 1\n", language="R"))
    assert result.findings == [] and "r notebook" in result.skipped


def test_every_output_format_places_the_finding_in_its_cell(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.ipynb").write_text(nb(("markdown", "# t\n"), HEAD, BODY))
    code, out, _ = run_kcheck("check", "--no-cache", "exp.ipynb")
    assert code == 1 and "exp.ipynb:cell 3:5:5: KC201" in out
    _, out, _ = run_kcheck("check", "--no-cache", "-o", "full", "exp.ipynb")
    assert ">     5 |     fn(x).item()" in out  # the cell's own line, not the JSON's
    (item,) = json.loads(run_kcheck("check", "--no-cache", "-o", "json", "exp.ipynb")[1])
    assert item["filename"] == "exp.ipynb" and item["cell"] == 3 and item["location"] == {"row": 5, "column": 5}
    sarif = json.loads(run_kcheck("check", "--no-cache", "-o", "sarif", "exp.ipynb")[1])
    (res,) = sarif["runs"][0]["results"]
    assert res["properties"]["cell"] == 3 and res["properties"]["cellRegion"]["startLine"] == 5
    assert "region" not in res["locations"][0]["physicalLocation"] and "cell 3, line 5" in res["message"]["text"]
    _, out, _ = run_kcheck("check", "--no-cache", "-o", "github", "exp.ipynb")
    assert "file=exp.ipynb," in out and "line=" not in out and "exp.ipynb:cell 3:5:5" in out
    (diag,) = [json.loads(x) for x in run_kcheck("check", "--no-cache", "-o", "rdjsonl", "exp.ipynb")[1].splitlines()]
    assert "range" not in diag["location"] and diag["message"].startswith("cell 3, line 5:")
    for fmt in ("junit", "markdown"):
        assert "cell 3:5" in run_kcheck("check", "--no-cache", "-o", fmt, "exp.ipynb")[1], fmt
    (tmp_path / "bench.py").write_text(BENCH)
    (item,) = json.loads(run_kcheck("check", "--no-cache", "-o", "json", "bench.py")[1])
    assert item["cell"] is None and item["location"] == {"row": 6, "column": 5}


def test_notebooks_are_found_in_folders_and_can_be_excluded(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.ipynb").write_text(nb(HEAD, BODY))
    (tmp_path / "ok.py").write_text("x = 1\n")
    code, out, _ = run_kcheck("check", "--no-cache", ".")
    assert code == 1 and "exp.ipynb:cell 2:5:5" in out
    (tmp_path / "kcheck.toml").write_text('extend-exclude = ["*.ipynb"]\n')
    clear_caches()
    code, out, _ = run_kcheck("check", "--no-cache", ".")
    assert code == 0 and "All checks passed (1 file)" in out


def test_cached_notebook_findings_keep_their_cell(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.ipynb").write_text(nb(HEAD, BODY))
    first = run_kcheck("check", ".")[1]
    assert "exp.ipynb:cell 2:5:5" in first and run_kcheck("check", ".")[1] == first


def test_stdin_notebook(run_kcheck):
    code, out, _ = run_kcheck("check", "--stdin-filename", "exp.ipynb", input=nb(HEAD, BODY))
    assert code == 1 and "exp.ipynb:cell 2:5:5" in out
