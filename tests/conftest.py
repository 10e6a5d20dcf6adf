"""Shared helpers for the checker's tests."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from kcheck.config import Config
from kcheck.engine import check_source

REPO = Path(__file__).resolve().parent.parent
EXPECT = re.compile(r"#\s*expect:\s*(KC\d{3}(?:\s*,\s*KC\d{3})*)")


def findings_for(source: str, path: str = "example.py", shortcuts: bool = True, **config):
    """Findings of every rule on ``source`` (unsuppressed only)."""
    cfg = Config(root=REPO, **config)
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
def _fresh_config_caches():
    """Each test sees the configuration files as they are now."""
    from kcheck.config import clear_caches

    clear_caches()
    yield
    clear_caches()
