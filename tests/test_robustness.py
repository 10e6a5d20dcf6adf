"""kcheck on code nobody here wrote: generated programs and broken files never crash a scan.

The fuzz test is the bounded version of ``benchmarks/fuzz.py`` (10,000 programs). The file tests
build the awkward cases real trees hold and check that each gets a clear message naming the file,
that the scan goes on to the other files, and that the exit code is the documented one
(0 clean, 1 findings, 2 usage or internal error).
"""

from __future__ import annotations

import os
import sys

import hypothesmith
import pytest

from conftest import BENCH
from hypothesis import HealthCheck, given, settings

from kcheck.config import Config
from kcheck.engine import MAX_FILE_BYTES, check_source

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from fuzz import check_program  # noqa: E402 - the very check the full fuzz run makes



@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(hypothesmith.from_grammar())
def test_generated_programs_never_crash_and_shortcuts_change_nothing(source):
    assert check_program(source) is None


@pytest.mark.parametrize("source", [
    "",
    "\n\n\n",
    "\ufeffx = 1\n",  # a byte-order mark
    "x = 1\r\ny = 2\r\n",  # Windows line ends
    "def forward(self, x):\n\treturn x\n",  # tabs
    "def forward(self, x):\n    return x  # no newline at the end",
    "async def forward(self, x):\n    async with a as b:\n        await x.item()\n",
    "def forward(self, x):\n    return (" * 1 + "[" * 90 + "]" * 90 + ")\n",
    "match x:\n    case [a, *rest]:\n        print(a)\n",
    "def forward(self, x):\n    y = lambda: (yield)\n    return x.item()\n",
    "class A:\n    def forward(self, x):\n        def forward(y):\n            return y.cpu()\n        return forward(x)\n",
    # a line continuation into the end of the file: CPython accepts it after CRLF, libcst does not
    # (found by the fuzz run): the same findings with and without shortcuts
    "\n \\\r\n",
    "# a comment\r\n\t\t \\\r\n",
    "def forward(self, x):\r\n    return x.item() \\\r\n",
])
def test_unusual_but_valid_sources(source):
    fast = check_source(source, "odd.py", Config())
    slow = check_source(source, "odd.py", Config(), shortcuts=False)
    assert not fast.errors and not slow.errors
    assert {(f.line, f.code) for f in fast.findings} == {(f.line, f.code) for f in slow.findings}


@pytest.mark.parametrize("source, reason", [
    ("def forward(self, x)\n    return x\n", "cannot parse"),
    ("x = 1\x00\n", "null bytes"),
    ("def f():\n  x = 1\n    y = 2\n", "cannot parse"),  # bad indentation
    ("def f():\n    return " + "+".join(["x"] * 30000) + "\n", "cannot parse"),  # too deep for CPython
    ("(" * 300 + ")" * 300 + "\n", "cannot parse"),  # too many nested parentheses
])
def test_sources_python_refuses_are_one_kc900_finding(source, reason):
    result = check_source(source, "bad.py", Config())
    assert not result.errors
    assert [f.code for f in result.findings] == ["KC900"]
    assert reason in result.findings[0].message


def test_a_long_generated_file_is_checked_without_crashing():
    body = "".join(f"    y{i} = x[{i}] * {i}\n" for i in range(20000))
    source = "import torch\ndef forward(self, x):\n" + body + "    torch.cuda.synchronize()\n    return x\n"
    result = check_source(source, "generated.py", Config())
    assert not result.errors
    assert any(f.line == 20003 for f in result.findings), [(f.line, f.code) for f in result.findings]


@pytest.fixture
def bad_tree(tmp_path, monkeypatch):
    """A folder with one good finding and every kind of file a scan must survive."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text(BENCH)
    (tmp_path / "latin.py").write_bytes(b"x = 1\ny = '\xe9'\n")
    (tmp_path / "broken.py").write_text("x = 1\ndef forward(self, x)\n    return x\n")
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\n")
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "huge.py").write_text("X = [\n" + "    1,\n" * (MAX_FILE_BYTES // 6 + 10) + "]\n")
    os.symlink("loop_b.py", tmp_path / "loop_a.py")
    os.symlink("loop_a.py", tmp_path / "loop_b.py")
    os.symlink("nowhere.py", tmp_path / "dangling.py")
    (tmp_path / "sub").mkdir()
    os.symlink("..", tmp_path / "sub" / "up")  # a folder loop: never followed
    os.mkfifo(tmp_path / "pipe.py")  # reading it would block forever
    return tmp_path


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if ": KC" in line]


def test_bad_files_each_get_a_message_and_the_scan_goes_on(bad_tree, run_kcheck):
    code, out, err = run_kcheck("check", "--no-cache", ".")
    found = _lines(out)
    assert code == 1, err
    assert any(l.startswith("bench.py:6:5: KC201") for l in found), out  # the scan went on
    assert any(l.startswith("latin.py:2:") and "not UTF-8" in l for l in found), out
    assert any(l.startswith("broken.py:2:") and "KC900" in l for l in found), out
    assert any(l.startswith("nul.py:1:") and "null bytes" in l for l in found), out
    assert any(l.startswith("pipe.py:1:") and "not a regular file" in l for l in found), out
    assert not any(l.startswith(("empty.py", "sub/")) for l in found), out
    assert "huge.py: skipped: larger than" in err
    assert "loop_a.py: cannot resolve" in err and "loop_b.py: cannot resolve" in err
    assert "dangling.py: broken symlink" in err
    assert "internal error" not in err


def test_bad_files_are_the_same_in_a_process_pool(bad_tree, run_kcheck):
    for i in range(40):  # enough files for the engine to use worker processes
        (bad_tree / f"clean_{i}.py").write_text(f"x = {i}\n")
    _, serial, _ = run_kcheck("check", "--no-cache", "-j", "1", ".")
    code, pooled, err = run_kcheck("check", "--no-cache", "-j", "2", ".")
    assert code == 1 and "internal error" not in err
    assert _lines(serial) == _lines(pooled)


def test_an_unreadable_file_is_a_finding(tmp_path, run_kcheck, monkeypatch):
    """A file that cannot be opened (mode 000 for a normal user; simulated, since root reads anything)."""
    import builtins

    monkeypatch.chdir(tmp_path)
    secret = tmp_path / "secret.py"
    secret.write_text("x = 1\n")
    real_open = builtins.open

    def guarded_open(file, *args, **kwargs):
        if str(file).endswith("secret.py"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    code, out, err = run_kcheck("check", "--no-cache", "-j", "1", ".")
    monkeypatch.undo()
    assert code == 1 and any(l.startswith("secret.py:1:1: KC900") and "cannot read" in l for l in _lines(out))


def test_exit_codes(tmp_path, run_kcheck, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clean.py").write_text("x = 1\n")
    (tmp_path / "huge.py").write_text("X = [\n" + "    1,\n" * (MAX_FILE_BYTES // 6 + 10) + "]\n")
    assert run_kcheck("check", "--no-cache", ".")[0] == 0  # a skipped file is a notice, not a finding
    (tmp_path / "broken.py").write_text("def f(:\n")
    assert run_kcheck("check", "--no-cache", ".")[0] == 1  # a file that does not parse is a finding
    assert run_kcheck("check", "--no-cache", "--ignore", "KC900", ".")[0] == 0
    assert run_kcheck("check", "--no-cache", "no-such-folder")[0] == 2
