"""Positions read off the ast tree agree with libcst's PositionProvider for every mapped node kind."""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import pytest

from kcheck import positions
from kcheck.model import walk

REPO = Path(__file__).resolve().parent.parent
FILES = sorted((REPO / "tests" / "fixtures").rglob("*.py")) + sorted((REPO / "checker").rglob("*.py"))[:20]

TRICKY = '''
@decorator(arg)
@other
def f(a, b=g(1)):
    """doc"""
    x = a.b.c(d)(e)[f(1)]
    y = [h(i) for i in k(j) if m(i)]
    z = p(q) if r(s) else t(u)
    w = "é" + v("ü")(é)
    try:
        pass
    except E(1) as exc:
        raise X(exc) from None
    async def inner():
        async with a(b) as c, d(e):
            await c.f(g)
    return lambda q: q.r(s)


class C(Base(1), metaclass=M):
    @property
    def p(self): return self.q(1)
'''


def _compare(source: str) -> int:
    module = cst.parse_module(source)
    tree = ast.parse(source)
    in_imports = {id(n) for imp in walk(module) if isinstance(imp, (cst.Import, cst.ImportFrom))
                  for n in walk(imp) if n is not imp}
    nodes = [n for n in walk(module) if type(n) in positions.KINDS and id(n) not in in_imports]
    fast = positions.resolve(module, tree, source, nodes)
    assert fast is not None, "trees did not line up"
    slow = positions.resolve_with_libcst(module, nodes)
    for n in nodes:
        f, s = fast[id(n)], slow[id(n)]
        assert (f.line, f.column) == (s.line, s.column), (type(n).__name__, f, s)
    return len(nodes)


def test_tricky_source_lines_up():
    assert _compare(TRICKY) > 40


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_real_files_line_up(path):
    _compare(path.read_text())
