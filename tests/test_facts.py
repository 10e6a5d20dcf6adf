"""The shortcuts' building blocks: every rule declares the facts it needs (``kcheck.facts``) and no
rule decides anything in a gate of its own; each fact holds where its rule can fire and not where
nothing it asks about is written; the model's node index walks exactly what a fresh traversal
walks."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from kcheck import facts
from kcheck.config import Config
from kcheck.engine import check_source, parse_cst
from kcheck.gate import summarize
from kcheck.model import SCOPES, SCOPES_AND_LAMBDAS, _traverse, build_model, subtree
from kcheck.registry import all_rules
from kcheck.rule import Rule


def _holds(name: str, source: str, path: str = "example.py") -> bool:
    summary = summarize(ast.parse(source))
    summary.path, summary.source = path, source
    return facts.FACTS[name](summary, Config())


def test_every_rule_declares_known_facts_and_none_overrides_the_gate():
    rules = [r for r in all_rules() if r.family() != "meta"]
    for rule in rules:
        assert "gate" not in rule.__dict__, f"{rule.CODE} decides in a gate of its own"
        assert rule.NEEDS, f"{rule.CODE} declares no facts: it would parse every file with libcst"
        assert not facts.unknown(rule.NEEDS), (rule.CODE, facts.unknown(rule.NEEDS))
    assert Rule.gate.__func__ is rules[0].gate.__func__
    used = {n for r in rules for e in r.NEEDS for n in (e if type(e) is tuple else (e,))}
    assert used == set(facts.FACTS), set(facts.FACTS) - used  # no fact is left unused


def test_a_fact_registered_twice_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        facts.fact("timing")(lambda s, c: True)


TIMED = """
import torch

def bench(fn, x):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn(x){extra}
    end.record()
"""
HOT = """
import torch

class Decoder(torch.nn.Module):
    def forward(self, x):
        return x{extra}
"""
KERNEL = """
import triton
import triton.language as tl
{decorator}
@triton.jit
def k(x_ptr, N: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, N), 0.0)
"""
CHECK = """
import torch

def {name}(x):
    out = run(x)
    torch.testing.assert_close(out, x)
"""


@pytest.mark.parametrize(("name", "source", "path", "holds"), [
    ("timed reaches sync", TIMED.format(extra="\n    x.item()"), "bench.py", True),
    ("timed reaches sync", TIMED.format(extra=""), "bench.py", False),
    ("timed reaches log", TIMED.format(extra="\n    print(x)"), "bench.py", True),
    ("hot-path reaches sync", HOT.format(extra=".tolist()"), "model.py", True),
    ("hot-path reaches sync", HOT.format(extra=" + 1"), "model.py", False),
    ("triton kernel", KERNEL.format(decorator=""), "k.py", True),
    ("triton kernel", "import triton\n\ndef jit(x):\n    return x\n", "k.py", False),
    ("autotuned kernel", KERNEL.format(decorator="@triton.autotune(configs=[], key=['N'])"), "k.py", True),
    ("autotuned kernel", KERNEL.format(decorator=""), "k.py", False),
    ("output check", CHECK.format(name="test_run"), "k.py", True),
    ("output check", "def run_once(x, y):\n    return (x - y).abs()\n", "lib/k.py", False),  # not measurement code
    ("timing", "import time\nt = time.perf_counter()\n", "k.py", True),
    ("timing", "import torch\nx = torch.ones(3)\n", "k.py", False),
    ("reference reduction", "def ref_norm(x):\n    return x.sum(-1)\n", "k.py", True),
    ("reference reduction", "def test_norm(x):\n    return x.sum(-1)\n", "k.py", False),
])
def test_each_fact_holds_where_written_and_not_elsewhere(name, source, path, holds):
    assert _holds(name, source, path) is holds


def test_a_rule_runs_only_where_one_of_its_facts_holds():
    """KC201 needs a timed region that reaches a sync: without one, libcst never sees the file, and
    the rule with every shortcut off finds nothing there either."""
    from kcheck.registry import find_rule

    rule = find_rule("KC201")
    for extra, expected in (("\n    x.item()", True), ("", False)):
        source = TIMED.format(extra=extra)
        summary = summarize(ast.parse(source))
        summary.path, summary.source = "bench.py", source
        found = [f for f in check_source(source, "bench.py", Config(select=("KC201",)), shortcuts=False).findings
                 if f.code == "KC201"]
        assert rule.gate(summary, Config()) is expected and bool(found) is expected


def _modules():
    checker = Path(__file__).resolve().parent.parent / "checker"
    return [checker / "engine.py", checker / "rules" / "triton" / "unmasked_tail_access.py"]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_node_index_walks_what_a_traversal_walks(path):
    module = parse_cst(path.read_text())
    model = build_model(module, Config(), path.name)
    index = model.index
    assert index.order[0] is module and len(index.order) == index.end[0]
    for skip in ((), SCOPES, SCOPES_AND_LAMBDAS):
        for node in index.order[::7]:  # a sample of subtrees, leaves and whole defs among them
            assert [id(n) for n in subtree(node, skip)] == [id(n) for n in _traverse(node, skip)]



def test_ast_children_is_iter_child_nodes_without_contexts_and_operators():
    """The gates' shared child walk yields what ``ast.iter_child_nodes`` yields, in the same order,
    less the Load/Store/Del contexts and the operators (which hold no code), over every node of
    this repository's own source and tests and of a snippet with every kind of statement; and
    ``ast_nodes`` reaches the same nodes as such a walk, entering nested scopes or not."""
    from kcheck.gate import NESTED_SCOPES, ast_children, ast_nodes

    snippet = """
import a.b as c
from .m import (x as y, z)
global g
async def f(p, /, q: int = 1, *r, s=2, **t) -> None:
    async with u as v, w:
        async for i in j:
            await k[i:2, ...]
    try:
        pass
    except{star} ValueError as e:
        raise
    match m:
        case {"k": 1, **rest}: pass
        case Point(x=0, y=[1, *others]) | None as q: pass
        case True: pass
    del d[0]
    lam = lambda a=1, *, b=None: (a if b else -a) @ b
    s = f"{x!r:>{width}}" + b"raw"
    return {**d, 1: 2}, {k: v for k, v in zip(a, b) if k}, [*a], (yield)
class C(B, metaclass=M):
    x: int = 0
    def m(self):
        nonlocal_free = [i for i in range(3)]
"""
    # ``except*`` (a TryStar node) parses from 3.11 on; older Pythons walk the same snippet without it
    snippet = snippet.replace("{star}", "*" if sys.version_info >= (3, 11) else "")
    skipped = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)

    def reference(roots, into_scopes):
        out, stack = [], list(roots)
        while stack:
            node = stack.pop()
            out.append(id(node))
            if into_scopes or type(node) not in NESTED_SCOPES:
                stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, skipped))
        return sorted(out)

    sources = [snippet] + [p.read_text() for root in ("checker", "tests") for p in sorted(Path(root).rglob("*.py"))]
    visited = 0
    for source in sources:
        tree = ast.parse(source)
        for node in ast.walk(tree):
            expected = [c for c in ast.iter_child_nodes(node) if not isinstance(c, skipped)]
            got = ast_children(node)
            assert len(got) == len(expected) and all(a is b for a, b in zip(got, expected)), ast.dump(node)[:200]
            visited += 1
        for into_scopes in (True, False):
            assert sorted(id(n) for n in ast_nodes(tree.body, into_scopes)) == reference(tree.body, into_scopes)
    assert visited > 100_000
