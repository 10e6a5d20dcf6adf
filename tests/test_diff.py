"""Changed lines from git and ``kcheck check --diff-base REF --filter-mode ...``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import KERNEL

from kcheck.diff import DiffError, load_diff, parse_unified

NEW_SYNC = KERNEL.replace("        fn(x)\n", "        fn(x)\n        total = x.sum().item()\n")  # line 10 added


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args], cwd=cwd,
                          env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository with a kcheck project in ``proj/`` and one committed file with one old finding."""
    git(tmp_path, "init", "-q")
    proj = tmp_path / "proj"
    (proj / "kernels").mkdir(parents=True)
    (proj / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nselect = ["KC201"]\n')
    (proj / "kernels" / "bench.py").write_text(KERNEL)
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "base")
    return tmp_path


def lines_of(result_json: str) -> list[tuple[str, int, str | None]]:
    return [(i["filename"], i["location"]["row"], i.get("hidden")) for i in json.loads(result_json)]


# -- parsing ---------------------------------------------------------------------------------


def test_parse_unified_counts_hunks_not_prefixes():
    text = (
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n"
        "@@ -1,3 +1,4 @@\n a\n-b\n+++ not a header\n+c\n d\n"
        "@@ -10 +11,0 @@\n-gone\n"
        "diff --git a/old.py b/new.py\nsimilarity index 100%\nrename from old.py\nrename to new.py\n"
        "diff --git a/dead.py b/dead.py\n--- a/dead.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    )
    files = parse_unified(text)
    assert set(files) == {"x.py", "new.py"}
    assert files["x.py"].added == {2, 3}
    assert files["x.py"].context == {1, 2, 3, 4}
    assert files["new.py"].added == set()


def test_parse_unified_unquotes_unusual_paths():
    text = 'diff --git "a/t\\303\\274.py" "b/t\\303\\274.py"\n--- "a/t\\303\\274.py"\n+++ "b/t\\303\\274.py"\n@@ -0,0 +1 @@\n+x\n'
    assert parse_unified(text)["tü.py"].added == {1}


# -- git -------------------------------------------------------------------------------------


def test_committed_staged_and_unstaged_changes_count(repo):
    bench = repo / "proj" / "kernels" / "bench.py"
    bench.write_text(NEW_SYNC)
    diff = load_diff("HEAD", repo / "proj")  # from a subfolder
    assert diff.files["proj/kernels/bench.py"].added == {10}
    git(repo, "add", ".")
    assert load_diff("HEAD", repo).files["proj/kernels/bench.py"].added == {10}
    git(repo, "commit", "-q", "-m", "change")
    git(repo, "checkout", "-q", "-b", "feature")
    assert load_diff("HEAD~1", repo).files["proj/kernels/bench.py"].added == {10}


def test_merge_base_leaves_out_what_the_base_branch_did_since(repo):
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "proj" / "kernels" / "bench.py").write_text(NEW_SYNC)
    git(repo, "commit", "-q", "-am", "feature change")
    git(repo, "checkout", "-q", "main")
    (repo / "other.py").write_text("x = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "main moves on")
    git(repo, "checkout", "-q", "feature")
    diff = load_diff("main", repo)
    assert set(diff.files) == {"proj/kernels/bench.py"}


def test_renames_are_followed(repo):
    git(repo, "mv", "proj/kernels/bench.py", "proj/kernels/timing.py")
    (repo / "proj" / "kernels" / "timing.py").write_text(NEW_SYNC)
    git(repo, "add", ".")
    diff = load_diff("HEAD", repo)
    assert diff.files["proj/kernels/timing.py"].added == {10}
    assert "proj/kernels/bench.py" not in diff.files


def test_untracked_files_are_entirely_added(repo):
    (repo / "proj" / "new.py").write_text("a = 1\nb = 2\n")
    assert load_diff("HEAD", repo).files["proj/new.py"].added == {1, 2}


def test_first_commit_diffs_against_the_empty_tree(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")
    assert load_diff("HEAD", tmp_path).files["a.py"].added == {1}
    with pytest.raises(DiffError, match="no commits yet"):
        load_diff("main", tmp_path)


def test_errors_are_clear(repo, tmp_path_factory):
    with pytest.raises(DiffError, match="unknown git revision 'nope'"):
        load_diff("nope", repo)
    with pytest.raises(DiffError, match="is not a git revision"):
        load_diff("--output=x", repo)
    outside = tmp_path_factory.mktemp("plain")
    with pytest.raises(DiffError, match="not inside a git repository"):
        load_diff("HEAD", outside)


# -- the filter through the command line -----------------------------------------------------


@pytest.mark.parametrize("mode, shown", [
    ("added", [10]),
    ("diff_context", [10, 11]),
    ("file", [10, 11]),
    ("nofilter", [10, 11]),
])
def test_filter_modes(repo, run_kcheck, monkeypatch, mode, shown):
    (repo / "proj" / "kernels" / "bench.py").write_text(NEW_SYNC)
    (repo / "proj" / "untouched.py").write_text(KERNEL)
    git(repo, "add", "proj/untouched.py")
    git(repo, "commit", "-q", "-m", "second file with a finding")
    monkeypatch.chdir(repo / "proj")
    code, out, err = run_kcheck("check", "--no-cache", "--no-group", "--diff-base", "HEAD", "--filter-mode", mode,
                                "-o", "json", ".")  # each place on its own: the filter decides per place
    assert code == 1, err
    items = lines_of(out)
    assert [line for path, line, hidden in items if hidden is None and path == "kernels/bench.py"] == shown
    others = [p for p, _, hidden in items if hidden is None and p != "kernels/bench.py"]
    assert others == (["untouched.py"] if mode == "nofilter" else [])


def test_hidden_findings_are_reported_as_outside_the_diff(repo, run_kcheck, monkeypatch):
    (repo / "proj" / "kernels" / "bench.py").write_text(NEW_SYNC)
    monkeypatch.chdir(repo / "proj" / "kernels")  # from a subfolder of the project
    code, out, _ = run_kcheck("check", "--no-cache", "--diff-base", "HEAD", "-o", "json", ".")
    assert code == 1
    assert lines_of(out) == [("kernels/bench.py", 10, None), ("kernels/bench.py", 11, "outside-diff")]


def test_a_change_without_new_findings_passes(repo, run_kcheck, monkeypatch):
    (repo / "proj" / "kernels" / "bench.py").write_text(KERNEL.replace("iters=100", "iters=200"))
    monkeypatch.chdir(repo / "proj")
    code, out, _ = run_kcheck("check", "--no-cache", "--diff-base", "HEAD", ".")
    assert code == 0, out
    code, _, _ = run_kcheck("check", "--no-cache", ".")
    assert code == 1


def test_filter_mode_needs_a_diff_base(run_kcheck):
    code, _, err = run_kcheck("check", "--filter-mode", "file", ".")
    assert code == 2 and "--filter-mode needs --diff-base" in err


def test_bad_ref_is_a_usage_error(repo, run_kcheck, monkeypatch):
    monkeypatch.chdir(repo)
    code, _, err = run_kcheck("check", "--diff-base", "no-such-branch", ".")
    assert code == 2 and "--diff-base no-such-branch: unknown git revision" in err
