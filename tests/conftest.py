"""Shared helpers for the checker's tests."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from kcheck.config import Config
from kcheck.engine import check_source

REPO = Path(__file__).resolve().parent.parent
# Two small benchmarks with one KC201 finding each, shared by the tests that need "a file with a finding".
# BENCH (7 lines, finding at 6:5) warms up first, so no KC4xx rule fires on it.
BENCH = """import torch
def bench(fn, x):
    start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
    fn(x)
    start.record()
    fn(x).item()
    end.record()
"""
# KERNEL (13 lines, finding at 10:9: a sync inside the loop of an event window).
KERNEL = """\
import torch


def bench(fn, x, iters=100):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn(x)
        torch.cuda.synchronize()
    end.record()
    return start.elapsed_time(end) / iters
"""

EXPECT = re.compile(r"#\s*expect:\s*(KC\d{3}(?:\s*,\s*KC\d{3})*)")


def findings_for(source: str, path: str = "example.py", shortcuts: bool = True, **config):
    """Findings of every rule on ``source``, preview rules included (unsuppressed only)."""
    cfg = Config(root=REPO, **{"preview": True, **config})
    result = check_source(inspect.cleandoc(source) + "\n" if source.startswith("\n") else source, path, cfg, shortcuts)
    assert not result.errors, result.errors
    return [f for f in result.findings if f.suppressed is None]


def expected_markers(text: str) -> set[tuple[int, str]]:
    """``# expect: KC201`` comments: the findings a fixture line must produce."""
    out = set()
    for n, line in enumerate(text.splitlines(), 1):
        m = EXPECT.search(line)
        if m:
            out |= {(n, c.strip()) for c in m.group(1).split(",")}
    return out


@pytest.fixture
def run_kcheck():
    """Run the CLI in-process and return (exit code, stdout, stderr)."""
    from click.testing import CliRunner

    from kcheck.cli import main

    def run(*args, input=None):
        result = CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr

    return run


@pytest.fixture(autouse=True)
def _preview_rules_on(monkeypatch):
    """Every rule is a preview until the yardstick says otherwise (benchmarks/README.md), and the
    suite tests what the rules do: previews run unless a test removes ``KCHECK_PREVIEW`` to test
    the default selection."""
    monkeypatch.setenv("KCHECK_PREVIEW", "1")


@pytest.fixture(autouse=True)
def _fresh_config_caches():
    """Each test sees the configuration files as they are now."""
    from kcheck.config import clear_caches

    clear_caches()
    yield
    clear_caches()
