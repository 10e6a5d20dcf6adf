"""Configuration: discovery, inheritance, selection, validation errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import BENCH
from kcheck.config import Config, ConfigError, clear_caches, config_for, load_file, project_root



def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_selection_by_code_prefix_name_and_all():
    cfg = Config(select=("KC2",), ignore=("host-sync-in-hot-path",))
    assert cfg.is_enabled("KC201", "host-sync-in-timed-region")
    assert not cfg.is_enabled("KC203", "host-sync-in-hot-path")
    assert not cfg.is_enabled("KC101", "library-dispatch-as-kernel")
    assert Config(select=("KC1",), extend_select=("KC201",)).is_enabled("KC201", "x")


def test_per_file_ignores_match_globs():
    cfg = Config(per_file_ignores=(("tests/*", ("KC2",)),))
    assert not cfg.is_enabled("KC201", "n", "tests/test_x.py")
    assert cfg.is_enabled("KC201", "n", "src/x.py")


def test_nearest_config_wins_and_extend_inherits(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.kcheck]\nroot = true\nignore = ["KC203"]\nfail-level = "error"\n')
    write(tmp_path / "sub" / "kcheck.toml", 'extend = "../pyproject.toml"\nextend-select = ["KC1"]\n')
    (tmp_path / "sub" / "deep").mkdir()
    top = config_for(tmp_path)
    sub = config_for(tmp_path / "sub" / "deep")
    assert top.ignore == ("KC203",) and top.fail_level == "error"
    assert sub.ignore == ("KC203",) and sub.extend_select == ("KC1",) and sub.fail_level == "error"
    assert sub.root == (tmp_path / "sub").resolve()


def test_project_root_is_the_nearest_root_config_else_the_git_top_level(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path / "svc" / "pyproject.toml", '[tool.kcheck]\nroot = true\n')
    write(tmp_path / "svc" / "not_root" / "kcheck.toml", 'ignore = ["KC2"]\n')
    for deep in ("a/b/c", "svc/x/y", "svc/not_root/z"):
        (tmp_path / deep).mkdir(parents=True)
    top = tmp_path.resolve()
    # asked deepest first, then a sibling and a parent: answers cached for one folder never leak to another
    assert project_root(tmp_path / "a" / "b" / "c") == top
    assert project_root(tmp_path / "svc" / "x" / "y") == top / "svc"
    assert project_root(tmp_path / "svc" / "not_root" / "z") == top / "svc"
    assert project_root(tmp_path / "a") == top and project_root(tmp_path / "svc") == top / "svc"
    assert config_for(tmp_path / "svc" / "not_root" / "z").ignore == ("KC2",)
    assert config_for(tmp_path / "svc" / "x" / "y").ignore == ()
    assert config_for(tmp_path / "a" / "b").root == top


def test_pyproject_without_table_is_skipped(tmp_path):
    write(tmp_path / "kcheck.toml", 'ignore = ["KC2"]\n')
    write(tmp_path / "pkg" / "pyproject.toml", "[project]\nname = 'x'\n")
    assert config_for(tmp_path / "pkg").ignore == ("KC2",)


@pytest.mark.parametrize(
    "body, words",
    [
        ('selct = ["KC2"]\n', ["unknown key 'selct'", "allowed keys", "select"]),
        ('fail-level = "fatal"\n', ["'fail-level'", "'fatal' is not one of"]),
        ('select = ["KC2x"]\n', ["'select.0'", "does not match"]),
        ('severity = { KC201 = "loud" }\n', ["'severity.KC201'", "'loud' is not one of"]),
        ('extend = "missing.toml"\n', ["'extend'", "not found"]),
        ("select = [\n", ["not valid TOML"]),
    ],
)
def test_bad_config_is_a_clear_error_naming_file_and_key(tmp_path, body, words):
    path = write(tmp_path / "kcheck.toml", body)
    with pytest.raises(ConfigError) as err:
        load_file(path)
    message = str(err.value)
    assert str(path) in message
    for word in words:
        assert word in message


def test_extend_cycle_is_reported(tmp_path):
    write(tmp_path / "a.toml", 'extend = "b.toml"\n')
    write(tmp_path / "b.toml", 'extend = "a.toml"\n')
    with pytest.raises(ConfigError, match="cycle"):
        load_file(tmp_path / "a.toml")


def test_without_a_root_marker_paths_stay_relative_to_the_current_folder(tmp_path, run_kcheck, monkeypatch):
    # no .git, no root config: the folders between the current folder and a file named on the
    # command line are part of its path, so a solution dump's ``runs/`` still marks a solution
    (tmp_path / "runs" / "a").mkdir(parents=True)
    write(tmp_path / "runs" / "a" / "solution.py",
          "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
          "    def forward(self, a, b):\n        return torch.matmul(a, b)\n")
    monkeypatch.chdir(tmp_path)
    clear_caches()
    assert project_root(tmp_path / "runs" / "a") == tmp_path.resolve()
    code, out, _ = run_kcheck("check", "--no-cache", "--preview", "--select", "KC101", "runs/a/solution.py")
    assert code == 1 and "runs/a/solution.py:7:" in out, out
    monkeypatch.chdir(tmp_path / "runs")  # from inside the dump the path no longer says so
    clear_caches()
    assert project_root(tmp_path / "runs" / "a") == (tmp_path / "runs").resolve()
    # a folder outside the current one is its own root
    monkeypatch.chdir(tmp_path / "runs" / "a")
    assert project_root(tmp_path / "elsewhere") == (tmp_path / "elsewhere").resolve()


def test_cli_bad_config_exits_2_with_message(tmp_path, run_kcheck, monkeypatch):
    write(tmp_path / "kcheck.toml", 'ignor = ["KC2"]\n')
    write(tmp_path / "bench.py", BENCH)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_kcheck("check", "bench.py")
    assert code == 2
    assert "kcheck.toml" in err and "unknown key 'ignor'" in err


def test_cli_config_changes_findings_and_severity(tmp_path, run_kcheck, monkeypatch):
    write(tmp_path / "bench.py", BENCH)
    monkeypatch.chdir(tmp_path)
    assert run_kcheck("check", "--no-cache", "bench.py")[0] == 1
    write(tmp_path / "kcheck.toml", 'severity = { KC201 = "info" }\nfail-level = "warning"\n')
    clear_caches()
    code, out, _ = run_kcheck("check", "--no-cache", "bench.py")
    assert code == 0 and "KC201" in out
    write(tmp_path / "kcheck.toml", 'per-file-ignores = { "bench.py" = ["KC201"] }\n')
    clear_caches()
    code, out, _ = run_kcheck("check", "--no-cache", "bench.py")
    assert code == 0 and "KC201" not in out
