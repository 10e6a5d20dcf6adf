"""Issue 24: kcheck in everyday workflows. Each test here failed before its fix.

Preview rules, selections, newer grammar, diff mode (user git settings, shallow clones,
finding-level attribution), files not checked, outputs, quiet/colour/stdin/cache, discovery.
"""

from __future__ import annotations

import ast
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BENCH, KERNEL, REPO

from kcheck.config import Config, ConfigError, clear_caches, config_for


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args], cwd=cwd,
                          env=env, check=True, capture_output=True, text=True).stdout


# KC409's own INVALID example shape: the same inputs timed in a loop, L2 never flushed.
L2 = """import torch


def bench_norm(x, w):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(100):
        rms_norm(x, w)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)
"""


# -- preview rules ----------------------------------------------------------------------------


def test_preview_rules_are_off_by_default_and_on_when_asked(tmp_path, run_kcheck, monkeypatch):
    from kcheck.registry import find_rule

    monkeypatch.delenv("KCHECK_PREVIEW")  # the suite turns previews on; this test is about the default
    assert find_rule("KC409").PREVIEW and not find_rule("KC901").PREVIEW
    cfg = Config()
    assert not cfg.is_enabled("KC409", "timed-without-l2-flush", preview=True)
    assert Config(preview=True).is_enabled("KC409", "timed-without-l2-flush", preview=True)
    assert Config(select=("KC409",)).is_enabled("KC409", "timed-without-l2-flush", preview=True)
    assert Config(extend_select=("timed-without-l2-flush",)).is_enabled("KC409", "timed-without-l2-flush", preview=True)
    # a prefix or ALL does not turn a preview rule on, as in ruff
    assert not Config(select=("KC4",)).is_enabled("KC409", "timed-without-l2-flush", preview=True)
    assert not Config(select=("ALL",)).is_enabled("KC409", "timed-without-l2-flush", preview=True)
    assert not Config(preview=True, ignore=("KC409",)).is_enabled("KC409", "timed-without-l2-flush", preview=True)

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(L2)
    codes = lambda out: {i["code"] for i in json.loads(out)}  # noqa: E731
    assert "KC409" not in codes(run_kcheck("check", "--no-cache", "-o", "json", "bench.py")[1])
    assert "KC409" in codes(run_kcheck("check", "--no-cache", "--preview", "-o", "json", "bench.py")[1])
    assert "KC409" in codes(run_kcheck("check", "--no-cache", "--select", "KC409", "-o", "json", "bench.py")[1])
    assert "KC409" not in codes(run_kcheck("check", "--no-cache", "--select", "KC4", "-o", "json", "bench.py")[1])
    (tmp_path / "kcheck.toml").write_text("preview = true\n")
    clear_caches()
    assert "KC409" in codes(run_kcheck("check", "--no-cache", "-o", "json", "bench.py")[1])
    assert "KC409" not in codes(run_kcheck("check", "--no-cache", "--no-preview", "-o", "json", "bench.py")[1])


def test_rules_listing_and_docs_mark_preview_rules(run_kcheck):
    _, out, _ = run_kcheck("rules")
    line = next(l for l in out.splitlines() if l.startswith("KC409"))
    assert "preview" in line
    assert "preview" not in next(l for l in out.splitlines() if l.startswith("KC901"))
    records = {r["code"]: r for r in json.loads(run_kcheck("rules", "--output-format", "json")[1])}
    assert records["KC409"]["preview"] is True and records["KC901"]["preview"] is False
    assert "(Preview)" not in records["KC409"]["docs"]["summary"]
    assert "Preview" in run_kcheck("rule", "KC409")[1]
    sys.path.insert(0, str(REPO / "docs"))
    try:
        import gen_pages

        from kcheck.explain import rule_record
        from kcheck.registry import find_rule

        catalog = type("Cat", (), {"entries": {}})()
        page = gen_pages._rule_markdown(rule_record(find_rule("KC409")), catalog, {})
        assert '!!! warning "Preview"' in page and "--preview" in page
        assert "Preview" not in gen_pages._rule_markdown(rule_record(find_rule("KC901")), catalog, {})
    finally:
        sys.path.remove(str(REPO / "docs"))


def test_preview_key_is_in_the_schema(tmp_path):
    (tmp_path / "kcheck.toml").write_text("preview = true\nmax-file-size = 100\n")
    cfg = config_for(tmp_path)
    assert cfg.preview is True and cfg.max_file_size == 100


# -- Python 3.10 --------------------------------------------------------------------------------


def test_tomli_is_a_dependency_before_311():
    try:
        import tomllib
    except ImportError:  # Python 3.10: the dependency under test
        import tomli as tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.replace(" ", "").startswith("tomli") and "python_version<'3.11'" in d.replace(" ", "") for d in deps)
    assert any(d.startswith("pathspec") for d in deps) and any(d.startswith("platformdirs") for d in deps)


def test_ci_runs_the_checker_tests_on_four_pythons():
    script = (REPO / ".ci" / "run").read_text()
    assert "for version in 3.10 3.12 3.13" in script and '/versions/"$version".*/bin/python' in script
    assert "tests/kernels" in script  # the kernels' tests stay on the main interpreter


# -- newer grammar -----------------------------------------------------------------------------

PEP695 = '''import torch
type Shape = tuple[int, ...]


def bench[T](fn, x: T):
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    fn(x)
    start.record()
    fn(x).item()
    end.record()
    print(f"{'done' + "!"}")
'''


def test_newer_grammar_is_checked_not_reported_as_unparsable():
    from kcheck.engine import check_source

    result = check_source(PEP695, "bench.py", Config())
    codes = [f.code for f in result.findings]
    assert "KC900" not in codes and "KC201" in codes, result.findings


def test_a_file_that_truly_does_not_parse_names_the_grammars_tried():
    from kcheck.engine import check_source

    (finding,) = check_source("def f(:\n    pass\n", "bad.py", Config()).findings
    assert finding.code == "KC900"
    assert f"Python {sys.version_info.major}.{sys.version_info.minor} grammar" in finding.message
    assert "libcst" in finding.message


# -- selections --------------------------------------------------------------------------------


def test_unknown_selectors_are_errors_with_the_closest_names(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(BENCH)
    code, _, err = run_kcheck("check", "--select", "KC2O1", "bench.py")
    assert code == 2 and "'KC2O1'" in err and "KC201" in err
    code, _, err = run_kcheck("check", "--ignore", "host-sync-in-timed-regions", "bench.py")
    assert code == 2 and "host-sync-in-timed-region" in err
    code, _, err = run_kcheck("check", "--extend-select", "KC7", "bench.py")
    assert code == 2 and "'KC7'" in err
    (tmp_path / "kcheck.toml").write_text('select = ["KC2"]\n[severity]\nKC299 = "error"\n')
    clear_caches()
    code, _, err = run_kcheck("check", "bench.py")
    assert code == 2 and "kcheck.toml" in err and "'KC299'" in err and "severity" in err


def test_a_file_that_does_not_parse_is_reported_whatever_is_selected(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("def f(:\n")
    code, out, _ = run_kcheck("check", "--no-cache", "--select", "KC201", "broken.py")
    assert code == 1 and "KC900" in out


def test_globs_are_gitignore_style(tmp_path):
    cfg = Config(extend_exclude=("src/*.py",), per_file_ignores=(("tests/*.py", ("KC201",)),))
    assert cfg.is_excluded("src/a.py") and not cfg.is_excluded("src/sub/a.py")  # * stays in one folder
    assert not cfg.is_enabled("KC201", "host-sync-in-timed-region", "tests/test_a.py")
    assert cfg.is_enabled("KC201", "host-sync-in-timed-region", "tests/sub/test_a.py")
    assert Config(extend_exclude=("gen/**/*.py",)).is_excluded("gen/a/b/c.py")


# -- diff mode ----------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path) -> Path:
    git(tmp_path, "init", "-q")
    (tmp_path / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nselect = ["KC201"]\n')
    (tmp_path / "bench.py").write_text(KERNEL)
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "base")
    return tmp_path


NEW_SYNC = KERNEL.replace("        fn(x)\n", "        fn(x)\n        total = x.sum().item()\n")


@pytest.mark.parametrize("setting", ["diff.mnemonicPrefix=true", "diff.noprefix=true", "diff.suppressBlankEmpty=true",
                                     "diff.relative=true"])
def test_user_diff_settings_do_not_hide_the_change(repo, run_kcheck, monkeypatch, setting):
    key, value = setting.split("=")
    git(repo, "config", key, value)
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "bench.py").write_text("\n\n" + NEW_SYNC)  # blank lines above: context lines that are empty
    monkeypatch.chdir(repo)
    for mode in ("new", "added"):
        code, out, _ = run_kcheck("check", "--no-cache", "--diff-base", "main", "--filter-mode", mode, "-o", "json", ".")
        shown = [i for i in json.loads(out) if not i.get("hidden")]
        assert code == 1 and [(i["filename"], i["location"]["row"]) for i in shown] == [("bench.py", 12)], (mode, out)


def test_shallow_clone_without_the_merge_base_is_deepened_or_an_error(repo, tmp_path_factory, run_kcheck, monkeypatch):
    git(repo, "checkout", "-q", "-b", "feature")
    for n in range(3):
        (repo / f"f{n}.py").write_text(f"x = {n}\n")
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", f"feature {n}")
    git(repo, "checkout", "-q", "main")
    (repo / "main_only.py").write_text("y = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "main moves on")
    clone = tmp_path_factory.mktemp("shallow")
    git(clone, "clone", "-q", "--depth", "1", "--no-single-branch", f"file://{repo}", "c")
    work = clone / "c"
    git(work, "checkout", "-q", "feature")
    monkeypatch.chdir(work)
    # the origin is there: history is fetched deeper until the merge base appears
    code, out, err = run_kcheck("check", "--no-cache", "--diff-base", "origin/main", "-o", "json", ".")
    assert code == 0, err
    assert git(work, "rev-parse", "--is-shallow-repository").strip() in ("true", "false")
    # without the origin it cannot be: a clear error, not a diff against the base tip
    clone2 = tmp_path_factory.mktemp("shallow2")
    git(clone2, "clone", "-q", "--depth", "1", "--no-single-branch", f"file://{repo}", "c")
    work2 = clone2 / "c"
    git(work2, "checkout", "-q", "feature")
    git(work2, "remote", "set-url", "origin", str(clone2 / "gone"))
    monkeypatch.chdir(work2)
    code, out, err = run_kcheck("check", "--no-cache", "--diff-base", "origin/main", ".")
    assert code == 2 and "shallow" in err and "merge base" in err


MOVED_BEFORE = """import torch


def bench(fn, x):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    fn(x)
    start.record()
    fn(x)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)
"""
MOVED_AFTER = MOVED_BEFORE.replace("    end.record()\n    torch.cuda.synchronize()\n",
                                   "    torch.cuda.synchronize()\n    end.record()\n")


def test_a_finding_the_change_creates_on_an_unchanged_line_is_the_changes(tmp_path, run_kcheck, monkeypatch):
    git(tmp_path, "init", "-q")
    (tmp_path / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nselect = ["KC201"]\n')
    (tmp_path / "bench.py").write_text(MOVED_BEFORE)
    (tmp_path / "old.py").write_text(NEW_SYNC)  # an old finding in a file the change also touches
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "base")
    git(tmp_path, "checkout", "-q", "-b", "feature")
    (tmp_path / "bench.py").write_text(MOVED_AFTER)  # the synchronize() line itself is unchanged
    (tmp_path / "old.py").write_text("# touched\n" + NEW_SYNC)
    git(tmp_path, "mv", "old.py", "renamed.py")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_kcheck("check", "--no-cache", "--diff-base", "main", "--filter-mode", "added", "-o", "json", ".")
    assert [i for i in json.loads(out) if not i.get("hidden")] == []  # line modes miss it
    code, out, _ = run_kcheck("check", "--no-cache", "--diff-base", "main", "-o", "json", ".")
    shown = [(i["filename"], i["location"]["row"]) for i in json.loads(out) if not i.get("hidden")]
    assert code == 1 and shown == [("bench.py", 10)], out
    hidden = [(i["filename"], i["hidden"]) for i in json.loads(out) if i.get("hidden")]
    assert hidden and set(hidden) == {("renamed.py", "outside-diff")}  # old findings, followed through the rename


# -- files not checked ---------------------------------------------------------------------------


def test_a_file_over_the_size_limit_is_reported_in_every_format(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kcheck.toml").write_text("max-file-size = 1000\n")
    (tmp_path / "big.py").write_text("x = 1\n" * 400)
    (tmp_path / "small.py").write_text("x = 1\n")
    code, out, err = run_kcheck("check", "--no-cache", ".")
    assert "All checks passed" not in out and "1 file not checked" in out and "big.py" in err
    for fmt in ("json", "json-lines", "sarif", "github", "rdjson", "rdjsonl", "markdown", "junit", "full"):
        _, out, _ = run_kcheck("check", "--no-cache", "-q", "-o", fmt, ".")
        assert "big.py" in out, fmt
    items = json.loads(run_kcheck("check", "--no-cache", "-o", "json", ".")[1])
    assert [(i["filename"], i["hidden"]) for i in items] == [("big.py", "not-checked")]
    sarif = json.loads(run_kcheck("check", "--no-cache", "-o", "sarif", ".")[1])
    (note,) = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert "big.py" in note["message"]["text"]
    _, out, err = run_kcheck("check", "--no-cache", "--max-file-size", "100000", ".")
    assert "All checks passed (2 files)" in out and "big.py" not in err


def test_notebooks_are_checked_and_a_non_python_one_is_named_never_passed(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    nb = {"cells": [{"cell_type": "code", "source": ["import torch\n", "torch.cuda.synchronize()\n"]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "exp.ipynb").write_text(json.dumps(nb))
    code, out, err = run_kcheck("check", "--no-cache", "exp.ipynb")
    assert code == 0 and "All checks passed (1 file)" in out  # checked cell by cell (tests/test_notebooks.py)
    nb["metadata"] = {"kernelspec": {"language": "julia"}}
    (tmp_path / "exp.ipynb").write_text(json.dumps(nb))
    code, out, err = run_kcheck("check", "--no-cache", ".")  # found in folders too
    assert "All checks passed" not in out and "exp.ipynb" in err and "julia notebook" in err and "1 file not checked" in out


def test_kc408_gate_is_linear_in_the_number_of_windows():
    """Before: every timing window looked at every call of the file (minutes for 4 MB)."""
    from kcheck.gate import summarize
    from kcheck.registry import find_rule

    def source(n: int) -> str:
        block = ("def time_{i}(k, a, reps=100):\n    start = torch.cuda.Event(enable_timing=True)\n"
                 "    end = torch.cuda.Event(enable_timing=True)\n    start.record()\n"
                 "    for _ in range(reps):\n        k(*a)\n    end.record()\n    end.synchronize()\n"
                 "    return start.elapsed_time(end) / reps\n\n")
        return "import torch\n\n" + "".join(block.format(i=i) for i in range(n))

    class Counting(list):
        walks = 0

        def __iter__(self):
            Counting.walks += 1
            return super().__iter__()

    walks = {}
    for n in (20, 80):
        text = source(n)
        summary = summarize(ast.parse(text))
        summary.path, summary.source = "tune.py", text
        summary.calls = Counting(summary.calls)
        Counting.walks = 0
        find_rule("KC408").gate(summary, Config())
        walks[n] = Counting.walks
    assert walks[80] == walks[20], walks  # a fixed number of passes over the calls, whatever the windows


def test_large_file_benchmark_exists_and_names_its_target():
    text = (REPO / "benchmarks" / "large_file.py").read_text()
    assert "libcst" in text and "500 MiB" in text and "10 s" in text


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="reads /proc (Linux)")
def test_process_memory_benchmark_reports_the_child_and_its_own_children():
    child = "import subprocess, sys, time; subprocess.run([sys.executable, '-c', 'x = bytearray(60 << 20); import time; time.sleep(1)'])"
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "process_memory.py"), "--", sys.executable, "-c", child],
                         capture_output=True, text=True, check=True).stdout
    peaks = [float(v) for v in out.split("per process peak (MiB, in start order): ")[1].splitlines()[0].split(", ")]
    assert len(peaks) == 2 and max(peaks) >= 55  # the grandchild's 60 MiB buffer is seen and attributed to it
    assert float(out.split("peak over all processes ")[1].split(" MiB")[0]) >= max(peaks)


# -- outputs ------------------------------------------------------------------------------------


def test_output_files_keep_the_umask_and_existing_modes(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(BENCH)
    old = os.umask(0o022)
    try:
        run_kcheck("check", "--no-cache", "-o", "json:new.json", "bench.py")
        assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o644
        (tmp_path / "old.json").write_text("")
        os.chmod(tmp_path / "old.json", 0o640)
        run_kcheck("check", "--no-cache", "-o", "json:old.json", "bench.py")
        assert stat.S_IMODE((tmp_path / "old.json").stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_a_failed_write_is_exit_2_with_the_path(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(BENCH)
    (tmp_path / "afile").write_text("")
    code, _, err = run_kcheck("check", "--no-cache", "-o", "json:afile/out.json", "bench.py")
    assert code == 2 and "afile/out.json" in err and "Traceback" not in err


def test_dash_is_stdout_and_statistics_work_with_other_outputs(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(BENCH)
    _, out, _ = run_kcheck("check", "--no-cache", "-o", "json:-", "bench.py")
    assert json.loads(out)[0]["code"] == "KC201" and not (tmp_path / "-").exists()
    _, out, _ = run_kcheck("check", "--no-cache", "--statistics", "-o", "json", "-o", "sarif:out.sarif", "bench.py")
    assert json.loads(out) == [{"code": "KC201", "name": "host-sync-in-timed-region", "count": 1}]
    assert json.loads((tmp_path / "out.sarif").read_text())["runs"][0]["results"]
    _, out, _ = run_kcheck("check", "--no-cache", "--statistics", "-o", "sarif:out2.sarif", "bench.py")
    assert "KC201" in out and (tmp_path / "out2.sarif").exists()


def test_sarif_uris_fingerprints_and_fired_rules(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    twice = BENCH + "    start.record()\n    fn(x).item()\n    end.record()\n"
    (tmp_path / "my bench#1.py").write_text(twice)
    run = json.loads(run_kcheck("check", "--no-cache", "--no-group", "-o", "sarif", "my bench#1.py")[1])["runs"][0]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
    assert uris == {"my%20bench%231.py"}
    prints = [next(iter(r["partialFingerprints"].values())) for r in run["results"]]
    assert len(prints) == 2 and len(set(prints)) == 2
    assert len(run["tool"]["driver"]["rules"]) > 10
    run = json.loads(run_kcheck("check", "--no-cache", "--sarif-rules", "fired", "-o", "sarif", "my bench#1.py")[1])["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["KC201"]
    assert all(r["ruleIndex"] == 0 for r in run["results"])


# -- quiet, colour, stdin, cache ----------------------------------------------------------------------


def test_quiet_hides_the_summary(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clean.py").write_text("x = 1\n")
    assert run_kcheck("check", "--no-cache", "-q", "clean.py")[1] == ""
    assert "All checks passed" in run_kcheck("check", "--no-cache", "clean.py")[1]


def test_colour_follows_force_color_and_no_color(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(BENCH)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert "\x1b[" in run_kcheck("check", "--no-cache", "bench.py")[1]
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in run_kcheck("check", "--no-cache", "bench.py")[1]
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.delenv("FORCE_COLOR")
    assert "\x1b[" not in run_kcheck("check", "--no-cache", "bench.py")[1]  # not a terminal


def test_stdin_filename_alone_reads_stdin_and_force_exclude_applies(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kcheck.toml").write_text('extend-exclude = ["generated"]\n')
    code, out, _ = run_kcheck("check", "--stdin-filename", "bench.py", input=BENCH)
    assert code == 1 and "bench.py:6:5: KC201" in out
    code, out, _ = run_kcheck("check", "--stdin-filename", "generated/bench.py", "--force-exclude", input=BENCH)
    assert code == 0 and "KC201" not in out
    code, out, _ = run_kcheck("check", "--stdin-filename", "generated/bench.py", input=BENCH)
    assert code == 1  # named explicitly without --force-exclude: checked


def test_cache_dir_option_and_environment(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.kcheck]\nroot = true\n")
    (tmp_path / "bench.py").write_text(BENCH)
    run_kcheck("check", "--cache-dir", str(tmp_path / "c1"), "bench.py")
    assert (tmp_path / "c1").is_dir() and not (tmp_path / ".kcheck_cache").exists()
    monkeypatch.setenv("KCHECK_CACHE_DIR", str(tmp_path / "c2"))
    run_kcheck("check", "bench.py")
    assert (tmp_path / "c2").is_dir() and not (tmp_path / ".kcheck_cache").exists()


def test_no_cache_writes_nothing_anywhere(tmp_path, run_kcheck, monkeypatch):
    from kcheck import config as config_module

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.delenv("KCHECK_CACHE_DIR", raising=False)
    monkeypatch.setattr(config_module, "USE_USER_CACHE", True)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nignore = ["KC903"]\n')
    (proj / "bench.py").write_text(BENCH)
    monkeypatch.chdir(proj)
    run_kcheck("check", "--no-cache", "bench.py")
    assert not home.exists() and not (proj / ".kcheck_cache").exists()


# -- discovery -----------------------------------------------------------------------------------


def test_gitignore_is_honoured_outside_git(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.kcheck]\nroot = true\n")
    (tmp_path / ".gitignore").write_text("scratch/\n*_gen.py\n!keep_gen.py\n")
    for name in ("scratch/bench.py", "sub/a_gen.py", "sub/keep_gen.py", "sub/x/.gitignore", "sub/x/bench.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("bench.py\n" if name.endswith(".gitignore") else BENCH)
    _, out, _ = run_kcheck("check", "--no-cache", "-o", "json", ".")
    assert sorted({i["filename"] for i in json.loads(out)}) == ["sub/keep_gen.py"]
    _, out, _ = run_kcheck("check", "--no-cache", "-o", "json", "sub")
    assert sorted({i["filename"] for i in json.loads(out)}) == ["sub/keep_gen.py"]
