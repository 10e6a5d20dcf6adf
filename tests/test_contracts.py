"""Contracts: what a function's own checks demand of its parameters, carried across modules to the
guards that pick it (KC302)."""

from __future__ import annotations

import ast
import textwrap

from kcheck.contracts import demands
from kcheck.engine import discover, scan


def _demands(src: str) -> set[tuple[str, str]]:
    fn = ast.parse(textwrap.dedent(src)).body[0]
    return {(param, prop) for param, prop, _line in demands(fn, set())}


def test_checks_against_constants_are_demands_and_name_their_property():
    assert _demands("""
        def gemm(x, qweight, scales, group_size, w):
            K = qweight.shape[0]
            assert group_size in (32, 64, 128)
            assert x.dtype == torch.bfloat16, "bf16 only"
            if K % 64 != 0:
                raise ValueError("K must divide by 64")
            if not w.is_contiguous():
                raise RuntimeError("contiguous weights only")
    """) == {("group_size", "value"), ("x", "dtype"), ("qweight", "shape"), ("w", "layout")}


def test_consistency_emptiness_none_and_type_checks_are_not_demands():
    assert _demands("""
        def gemm(a, b, bias=None):
            assert a.shape[1] == b.shape[0]
            assert a.numel() > 0
            assert bias is None or isinstance(bias, torch.Tensor)
            assert a.dim() == 1 or a.dim() == 2
            n = a.shape[0]
            assert n >= 0
    """) == set()


def test_a_rebound_parameter_is_no_longer_the_callers():
    assert _demands("""
        def f(x):
            x = x.to(torch.float16)
            assert x.dtype == torch.float16
    """) == set()


PROJECT = {
    "pyproject.toml": "[tool.kcheck]\nroot = true\npreview = true\nselect = [\"KC302\"]\n",
    "pkg/__init__.py": "",
    "pkg/kernels/__init__.py": "",
    "pkg/kernels/gemm.py": """
        import torch
        import triton
        import triton.language as tl

        SUPPORTED_GROUP_SIZES = (32, 64, 128)


        @triton.jit
        def _gemm_kernel(a, b, c, n, BLOCK: tl.constexpr):
            pass


        def _check(qweight, scales):
            group_size = qweight.shape[0] // scales.shape[0]
            assert group_size in SUPPORTED_GROUP_SIZES


        def gemm_triton(x, qweight, scales):
            _check(qweight, scales)
            out = torch.empty(x.shape[0], qweight.shape[1], device=x.device, dtype=x.dtype)
            _gemm_kernel[(1,)](x, qweight, out, x.shape[0], BLOCK=64)
            return out
    """,
    "pkg/linear.py": """
        import torch
        from pkg.kernels.gemm import gemm_triton

        try:
            import triton
            HAS_TRITON = True
        except ImportError:
            HAS_TRITON = False


        def naive(x, qweight, scales):
            return x @ (qweight.float() * scales.float()).half()


        def linear(x, qweight, scales):
            if HAS_TRITON and x.dtype == torch.float16:
                return gemm_triton(x.reshape(-1, x.shape[-1]), qweight, scales)
            return naive(x, qweight, scales)


        def linear_guarded(x, qweight, scales):
            if x.dtype == torch.float16 and qweight.shape[0] // scales.shape[0] in (32, 64, 128):
                return gemm_triton(x, qweight, scales)
            return naive(x, qweight, scales)


        def linear_no_fallback(x, qweight, scales):
            return gemm_triton(x, qweight, scales)


        def linear_chosen(x, qweight, scales, backend="triton"):
            if backend == "triton":  # the caller's choice, not a capability guard
                return gemm_triton(x, qweight, scales)
            return naive(x, qweight, scales)
    """,
}


def test_a_guard_that_skips_what_the_wrapper_in_another_module_demands_is_reported(tmp_path):
    for rel, src in PROJECT.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(src))
    jobs, _ = discover([str(tmp_path)])
    found = [f for f in scan(jobs, 1, cache=False).findings if f.code == "KC302"]
    # the demand is two calls deep (gemm_triton passes qweight on to _check), in another module;
    # the guard that checks the sizes, the function with no fallback and the caller's choice of
    # backend are not reported
    assert [(f.path, f.line) for f in found] == [("pkg/linear.py", 17)]
    assert "sizes of what it passes as `qweight`" in found[0].message
    assert "pkg/kernels/gemm.py:16" in found[0].message


def test_demands_read_in_chunks_keep_their_lines():
    from kcheck import chunks
    from kcheck.project import facts_in_chunks, file_facts

    text = "import torch\n\n" + "".join(
        f"\n\ndef op_{i}(x, group_size):\n    assert group_size in (32, 64, 128)\n    return x * {i}\n" for i in range(60))
    assert len(chunks.cuts(text, 300)) > 10
    whole = file_facts(ast.parse(text), "pkg/ops.py")
    part = facts_in_chunks(text.encode(), "pkg/ops.py", 300)
    assert part.demands == whole.demands
    assert whole.demands["op_59"] == (("group_size", "value", text.splitlines().index("def op_59(x, group_size):") + 2),)
