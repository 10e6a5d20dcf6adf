"""The shortcuts' building blocks: the gates turn files away where their rule is silent, and the
model's node index walks exactly what a fresh traversal walks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kcheck.config import Config
from kcheck.engine import check_source, parse_cst
from kcheck.gate import summarize
from kcheck.model import SCOPES, SCOPES_AND_LAMBDAS, _traverse, build_model, subtree
from kcheck.registry import find_rule

HOT_SYNC = '''
import torch

class {cls}(torch.nn.Module):
    def forward(self, x):
        n = int(x.sum().item())
        return x[:n]
'''


def _gate(code: str, source: str, path: str) -> bool:
    summary = summarize(ast.parse(source))
    summary.path, summary.source = path, source
    return find_rule(code).gate(summary, Config())


def _gate_and_rule(code: str, source: str, path: str) -> tuple[bool, bool]:
    """Whether the rule's gate lets the file through, and whether the rule (every shortcut off) reports."""
    found = [f for f in check_source(source, path, Config(), shortcuts=False).findings if f.code == code]
    return _gate(code, source, path), bool(found)


@pytest.mark.parametrize(("cls", "path", "passes"), [
    ("LlamaModel", "models/llama.py", True),  # a language model's step: the rule can fire
    ("SiglipVisionTransformer", "models/llama.py", False),  # a vision tower: once per image
    ("WhisperAudioEncoder", "models/llama.py", False),
    ("QwenImageEncodingStage", "pipelines/qwen.py", False),  # a pipeline's encoding stage
    ("PatchEmbed", "models/intern_vit.py", False),  # a module named for a vision encoder
    ("Granite4VisionLLMModel", "models/vision.py", True),  # the language model, named for vision
    ("TextModel", "pipelines/encoders/t5.py", False),  # a model zoo's encoders/ folder: once per request
])
def test_host_sync_gate_turns_away_what_runs_once_per_input(cls, path, passes):
    # the gate turns away exactly what the rule is silent on here
    assert _gate_and_rule("KC203", HOT_SYNC.format(cls=cls), path) == (passes, passes)


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


SUM_KERNEL = '''
import triton
import triton.language as tl

@triton.jit
def row_sum(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr, tl.sum(x, axis=0))

def launch(x, out):{note}
    row_sum[(1,)](x, out, N=x.shape[0])
'''


@pytest.mark.parametrize(("note", "passes"), [
    ("", False),  # nothing in the file says the loads are 16-bit: the rule leaves tl.sum alone
    ("\n    assert x.dtype == torch.bfloat16", True),  # bf16 data: a sum of loads in bf16 is reported
])
def test_low_precision_sum_gate_wants_a_16_bit_type_in_the_text(note, passes):
    assert _gate_and_rule("KC503", SUM_KERNEL.format(note=note), "ops/row_sum.py") == (passes, passes)


ROW_SUM = '''
import triton
import triton.language as tl

@triton.jit
def row_sum({params}, out_ptr, N: tl.constexpr):
    row = tl.program_id(0)
    {assign}
    x = tl.load(p + tl.arange(0, N))
    tl.store(out_ptr + row, tl.sum(x, axis=0))  # bf16 activations
'''


@pytest.mark.parametrize(("params", "assign", "passes"), [
    ("part_ptr, stride", "p = part_ptr + row * stride", False),  # a local pointer into fp32 partial sums
    ("part_ptr, stride", "base = part_ptr + row * stride\n    p = base", False),  # two names down
    ("x_ptr, stride", "p = x_ptr + row * stride", True),  # the activations: reported
    ("part_ptr: tl.constexpr, stride", "p = part_ptr + row * stride", True),  # a constexpr is no buffer
    ("x_ptr, sum_len", "p = x_ptr + row * sum_len", True),  # named for a size, not a buffer
    ("x_ptr, part_ptr", "p = x_ptr + tl.load(part_ptr + row)", True),  # through a load: an offset, not the buffer
])
def test_low_precision_sum_gate_follows_local_pointers(params, assign, passes):
    # the rule follows the pointer (kcheck.triton_values); the gate may let more through, never less
    gate, rule = _gate_and_rule("KC503", ROW_SUM.format(params=params, assign=assign), "ops/row_sum.py")
    assert rule == passes and (gate or not rule)


LOOSE = '''
import torch
from mylib import ops
def test_norm():
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    {setup}torch.testing.assert_close(ops.norm(x), ref(x), atol=1.0, rtol=1.0){comment}
'''


@pytest.mark.parametrize(("setup", "comment", "passes"), [
    ("", "", True),  # the rule reports it
    ("", "  # bf16 accumulation error", False),  # a reason on the comparison's line: the rule is silent
    ("", "  # see below", True),
    ("x = ops.per_token_quant(x)\n    ", "", False),  # a quantised path in the test's own body
    ("x = ops.scale(x)\n    ", "", True),
    ("y = x.to(torch.float8_e4m3fn)\n    ", "", False),  # a quantised type named in the test
    ("y = x.to(dtype=FP8)\n    ", "", False),  # under a name the rule also reads
    ("y = x.to(dtype=DT)\n    ", "", True),
    ("def fp8_ref(t):\n        return t\n    ", "", True),  # a nested def's name is not read
])
def test_loose_tolerance_gate_reads_the_reason_and_the_quantised_path(setup, comment, passes):
    assert _gate_and_rule("KC402", LOOSE.format(setup=setup, comment=comment), "tests/test_norm.py") == (passes, passes)


NO_KERNEL = '''
import torch
{imports}
{helpers}
def test_op():
    x = torch.ones(16, 64, dtype=torch.bfloat16)
    {setup}out = {call}
    torch.testing.assert_close(out, reference(x), atol=1.0, rtol=1.0)
'''


@pytest.mark.parametrize(("imports", "helpers", "setup", "call", "passes"), [
    ("", "", "", "torch.nn.functional.silu(x)", False),  # torch only: no kernel under test
    ("", "", "", "apply_rope(x)", False),  # a plain function: no kernel by its name
    ("from mylib import ops", "", "", "ops.silu(x)", True),  # a kernel module
    ("import mylib.ops as K", "", "", "K.silu(x)", True),  # the same under another name
    ("", "", "", "silu_kernel[(16,)](x)", True),  # a Triton launch
    ("", "", "", "torch.ops.mylib.silu(x)", True),  # a custom op
    ("", "def run(x):\n    return step(x)\ndef step(x):\n    return fused_silu(x)", "", "run(x)", True),  # two helpers down
    ("", "def run(x):\n    return x.float()", "", "run(x)", False),  # a helper that launches nothing
    # a kernel looked up in a registry, or a function of an extension built here: plain names launch
    ("", "ACTS = {'silu': torch.ops.mylib.silu}", "act = ACTS.get('silu')\n    ", "act(x)", True),
    ("from torch.utils.cpp_extension import load_inline", "ext = load_inline('e', '')", "", "ext.silu(x)", True),
])
@pytest.mark.parametrize("code", ["KC401", "KC402"])
def test_verification_gates_want_a_kernel_under_test(code, imports, helpers, setup, call, passes):
    source = NO_KERNEL.format(imports=imports, helpers=helpers, setup=setup, call=call)
    assert _gate_and_rule(code, source, "tests/test_op.py") == (passes, passes)


CONSTANTS = '''
import torch
from mylib import ops
def test_op(x):
    {setup}
    out = ops.scale(x, w)
    torch.testing.assert_close({compared}, reference(x, w))
'''


@pytest.mark.parametrize(("setup", "compared", "passes"), [
    ("w = torch.ones(64)", "out", True),  # a constant input: reported
    ("w = x[0]\n    acc = torch.zeros(16, 64)", "acc", False),  # the compared buffer
    ("w = x[0]\n    acc = torch.zeros(16, 64)", "acc.float()", False),  # compared as it is
    ("w = x[0]\n    acc = torch.zeros(16, 64)\n    acc[0] = 1", "out", False),  # written into
    ("w = x[0]\n    acc = torch.zeros(16, 64)\n    acc.add_(x)", "out", False),
    ("w = x[0]", "torch.zeros(16, 64) + out", False),  # part of the expected value
    ("w = torch.ones(64)\n    acc = torch.zeros(16, 64)\n    acc.add_(x)", "out", True),  # w is still an input
])
def test_constant_inputs_gate_passes_over_outputs_and_expected_values(setup, compared, passes):
    source = CONSTANTS.format(setup=setup, compared=compared)
    assert _gate_and_rule("KC401", source, "tests/test_op.py") == (passes, passes)


NAN_EQUAL = '''
import torch
{imports}
def test_norm(x, w):
    out = {out}
    ref = {ref}
    ops.rms_norm(out, x, w)
    ops.rms_norm_reference(ref, x, w)
    torch.testing.assert_close(out, ref, equal_nan=True)
'''


@pytest.mark.parametrize(("imports", "out", "ref", "passes"), [
    ("", "torch.empty_like(x)", "torch.empty_like(x)", True),  # both unset: an unwritten element matches
    ("", "torch.empty_like(x)", "reference(x, w)", False),  # an independent reference: a NaN still fails
    ("", "x.new_empty(x.shape)", "torch.full_like(x, float('nan'))", True),
    ("from torch import empty_like as alloc", "alloc(x)", "alloc(x)", True),  # under another name
    ("", "torch.zeros_like(x)", "torch.zeros_like(x)", False),  # filled with values
])
def test_nan_equal_gate_wants_both_sides_unset(imports, out, ref, passes):
    source = NAN_EQUAL.format(imports=imports, out=out, ref=ref)
    assert _gate_and_rule("KC403", source, "tests/test_norm.py") == (passes, passes)


UNPOISONED = '''
import torch
def test_sum({params}):
    expert_map = torch.tensor([0, -1, 1, -1], device="cuda")
    out = torch.empty(x.shape[0], x.shape[-1], device=x.device)
    {setup}moe_sum(x, out, ids, expert_map)
    torch.testing.assert_close(out, ref_sum(x, ids, expert_map))
'''


@pytest.mark.parametrize(("params", "setup", "passes"), [
    ("x, ids", "", True),  # the rule reports it
    ("x, ids", "out.fill_(float('nan'))\n    ", False),  # poisoned before the kernel: the rule is silent
    ("x, ids", "out.normal_()\n    ", False),
    ("x, ids", "out[0] = float('nan')\n    ", False),  # written by assignment
    ("x, ids", "out.fill_(0)\n    ", True),  # a zero fill poisons nothing
    ("x, ids", "out.fill_(value=0.0)\n    ", True),
    ("x, ids", "ref = torch.empty(4)\n    ref.fill_(1.0)\n    ", True),  # another buffer's fill
    ("x, ids, mocker", "", False),  # a test on stand-ins
    ("x, ids", "moe_sum(x, out, ids, expert_map)\n    ", False),  # written twice: a fill guards the first only
    ("x, ids", "ops.moe_sum(x, out, ids, expert_map)\n    ", False),  # a kernel called through a module
    ("x, ids", "torch.add(x, 1, out=out)\n    ", True),  # a torch op: the rule counts no second write
    ("x, ids", "torch.testing.assert_close(out, out)\n    ", True),  # a comparison is no write
    ("x, ids", "def again():\n        moe_sum(x, out, ids, expert_map)\n    ", True),  # a nested def is not run here
])
def test_unpoisoned_output_gate_reads_fills_and_stand_ins(params, setup, passes):
    assert _gate_and_rule("KC405", UNPOISONED.format(params=params, setup=setup), "tests/test_sum.py") == (passes, passes)


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
    except* ValueError as e:
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
