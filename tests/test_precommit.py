"""The pre-commit hooks, run by the real pre-commit against temporary repositories.

pre-commit installs this repository into a virtual environment of its own with pip, as it does
for a user. The hook repository is a clean one-commit copy of the work tree; its dependencies are
fetched once into a wheelhouse that pip then installs from without an index. ``try-repo`` builds a
fresh environment at every call, so one test uses it for the whole story (finding, fix, no files)
and the others use ``pre-commit run`` with a shared store, as an installed hook does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import KERNEL, REPO

pytestmark = pytest.mark.slow

BAD = KERNEL
GOOD = BAD.replace("        torch.cuda.synchronize()\n", "")
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args], cwd=cwd,
                          env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory) -> tuple[Path, str, dict]:
    """A committed copy of this work tree, its commit, and an environment with a private PRE_COMMIT_HOME."""
    base = tmp_path_factory.mktemp("precommit")
    copy = base / "kcheck"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / rel)
    git(copy, "init", "-q")
    git(copy, "add", "-A")
    git(copy, "commit", "-q", "-m", "snapshot")
    sha = git(copy, "rev-parse", "HEAD").strip()
    wheels = base / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), str(copy), "setuptools",
                    "wheel"], check=True, capture_output=True, timeout=600)
    env = {**os.environ, **GIT_ENV, "PRE_COMMIT_HOME": str(base / "home"), "PRE_COMMIT_COLOR": "never",
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PRE_COMMIT", None)
    return copy, sha, env


def pre_commit(hook_repo, target: Path, *args: str) -> subprocess.CompletedProcess:
    env = hook_repo[2]
    return subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=target, env=env, capture_output=True,
                          text=True, timeout=600)


def try_repo(hook_repo, target: Path, hook: str) -> subprocess.CompletedProcess:
    copy, sha, _ = hook_repo
    return pre_commit(hook_repo, target, "try-repo", str(copy), hook, "--ref", sha, "--verbose")


def run_hook(hook_repo, target: Path, hook: str) -> subprocess.CompletedProcess:
    """``pre-commit run HOOK`` on the staged files, the hooks configured from the hook repository."""
    copy, sha, _ = hook_repo
    config = {"repos": [{"repo": str(copy), "rev": sha,
                         "hooks": [{"id": "kcheck"}, {"id": "kcheck-changed"}, {"id": "kcheck-catalog"}]}]}
    (target / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    git(target, "add", ".pre-commit-config.yaml")
    return pre_commit(hook_repo, target, "run", hook, "--verbose")


def new_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q")
    return path


def test_hooks_file_is_well_formed():
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    by_id = {h["id"]: h for h in hooks}
    assert set(by_id) == {"kcheck", "kcheck-changed", "kcheck-catalog"}
    for hook in hooks:
        assert hook["language"] == "python" and hook["entry"].startswith("kcheck ")
    assert "--diff-base HEAD --filter-mode new" in by_id["kcheck-changed"]["entry"]
    assert by_id["kcheck-catalog"]["pass_filenames"] is False


def new_project(path: Path) -> Path:
    """A repository whose configuration enables KC201 only, so rules added later cannot change the story."""
    repo = new_repo(path)
    (repo / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nselect = ["KC201"]\n')
    git(repo, "add", "pyproject.toml")
    return repo


def test_try_repo_fails_on_a_finding_passes_when_fixed_and_with_no_files(hook_repo, tmp_path):
    repo = new_project(tmp_path / "user")
    (repo / "bench.py").write_text(BAD)
    git(repo, "add", "bench.py")
    failed = try_repo(hook_repo, repo, "kcheck")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "bench.py:10:9: KC201" in failed.stdout

    (repo / "bench.py").write_text(GOOD)
    git(repo, "add", "bench.py")
    passed = try_repo(hook_repo, repo, "kcheck")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "kcheck" in passed.stdout and "Passed" in passed.stdout

    git(repo, "commit", "-q", "--no-verify", "-m", "fixed")
    (repo / "README.md").write_text("no Python here\n")
    git(repo, "add", "README.md")
    empty = try_repo(hook_repo, repo, "kcheck")
    assert empty.returncode == 0, empty.stdout + empty.stderr
    assert "no files to check" in empty.stdout


def test_every_hook_passes_with_no_files(hook_repo, tmp_path):
    repo = new_repo(tmp_path / "empty")
    (repo / "README.md").write_text("nothing to check\n")
    git(repo, "add", "README.md")
    for hook in ("kcheck", "kcheck-changed", "kcheck-catalog"):
        result = run_hook(hook_repo, repo, hook)
        assert result.returncode == 0, (hook, result.stdout + result.stderr)
        assert "no files to check" in result.stdout


def test_changed_hook_reports_only_added_lines(hook_repo, tmp_path):
    repo = new_project(tmp_path / "legacy")
    (repo / "bench.py").write_text(BAD)
    git(repo, "add", "bench.py")
    first = run_hook(hook_repo, repo, "kcheck-changed")  # first commit: every staged line is added
    assert first.returncode == 1 and "KC201" in first.stdout, first.stdout + first.stderr
    git(repo, "commit", "-q", "--no-verify", "-m", "legacy code with a finding")

    # a staged edit elsewhere in the file: the old finding is not this change's
    (repo / "bench.py").write_text(BAD.replace("iters=100", "iters=200"))
    git(repo, "add", "bench.py")
    assert run_hook(hook_repo, repo, "kcheck").returncode == 1
    changed = run_hook(hook_repo, repo, "kcheck-changed")
    assert changed.returncode == 0, changed.stdout + changed.stderr

    # a staged edit that adds a new sync inside the timed loop is reported
    (repo / "bench.py").write_text(BAD.replace("        fn(x)\n", "        fn(x)\n        total = x.sum().item()\n"))
    git(repo, "add", "bench.py")
    added = run_hook(hook_repo, repo, "kcheck-changed")
    assert added.returncode == 1, added.stdout + added.stderr
    assert "bench.py:10:" in added.stdout and ".item()" in added.stdout
    assert "synchronize" not in added.stdout


def test_changed_hook_reports_a_new_finding_on_an_unchanged_line(hook_repo, tmp_path):
    """Moving end.record() below a synchronize() times the sync: the finding sits on a line the
    commit does not touch, and it is still this commit's."""
    before = ("import torch\n\n\ndef bench(fn, x):\n    start = torch.cuda.Event(enable_timing=True)\n"
              "    end = torch.cuda.Event(enable_timing=True)\n    fn(x)\n    start.record()\n    fn(x)\n"
              "    end.record()\n    torch.cuda.synchronize()\n    return start.elapsed_time(end)\n")
    repo = new_project(tmp_path / "moved")
    (repo / "bench.py").write_text(before)
    git(repo, "add", "bench.py")
    git(repo, "commit", "-q", "--no-verify", "-m", "clean")
    (repo / "bench.py").write_text(before.replace("    end.record()\n    torch.cuda.synchronize()\n",
                                                  "    torch.cuda.synchronize()\n    end.record()\n"))
    git(repo, "add", "bench.py")
    moved = run_hook(hook_repo, repo, "kcheck-changed")
    assert moved.returncode == 1, moved.stdout + moved.stderr
    assert "bench.py:10:5: KC201" in moved.stdout


def test_catalog_hook_rejects_a_broken_entry(hook_repo, tmp_path):
    repo = new_repo(tmp_path / "catalog")
    (repo / "knowledge").mkdir()
    (repo / "knowledge" / "index.yaml").write_text("topics: [\n")
    git(repo, "add", "knowledge")
    result = run_hook(hook_repo, repo, "kcheck-catalog")
    assert result.returncode != 0, result.stdout + result.stderr
    assert "index.yaml" in result.stdout + result.stderr
