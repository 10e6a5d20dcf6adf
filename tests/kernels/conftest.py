"""The kernel tests run every Triton kernel on the CPU through Triton's interpreter.

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a kernel, and
``kcheck.kernels._launch`` when it is imported, so it is set here, before any test module
imports the kernels. Without torch and triton (the ``kcheck[kernels]`` extra) the
directory is skipped and pytest reports it as skipped.
"""

from __future__ import annotations

import os
import sys

import pytest

if "kcheck.kernels._launch" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
    raise RuntimeError("kcheck.kernels was imported before tests/kernels/conftest.py could set TRITON_INTERPRET=1")
os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture(autouse=True)
def _fresh_announcements():
    """Each test sees the once-only fallback warnings afresh."""
    from kcheck.kernels import _launch

    _launch._announced.clear()
    yield
    _launch._announced.clear()


@pytest.fixture
def gen():
    """A seeded generator for the property tests (the harness draws its own fresh seeds)."""
    g = torch.Generator()
    g.manual_seed(1234)
    return g
