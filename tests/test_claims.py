"""Kernel claims and launch sites (kcheck.claims), as the KC1xx and KC3xx rules see them."""

from __future__ import annotations

import inspect
import subprocess
import sys

import libcst as cst
import pytest

from kcheck.claims import is_reference_name, library_family
from kcheck.config import Config
from kcheck.model import build_model

from conftest import REPO, findings_for


def model_of(source: str, path: str = "example.py", **config):
    source = inspect.cleandoc(source) + "\n"
    return build_model(cst.parse_module(source), Config(root=REPO, **config), path)


def claims(source: str, **kw) -> dict[str, str]:
    return {c.label: c.kind for c in model_of(source, **kw).kernel_claims}


def launches(source: str) -> list[tuple[str, str, bool]]:
    return sorted((l.kind, l.name, l.side_job) for l in model_of(source).launch_sites.values())


KERNELBENCH = """
    import torch
    import torch.nn as nn
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)
        def forward(self, x):
            return self.proj(x)
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(8, 8))
        def forward(self, x):
            return x @ self.weight.t()
"""


def test_model_new_is_a_claim_and_model_is_its_baseline():
    model = model_of(KERNELBENCH)
    (claim,) = model.kernel_claims
    assert (claim.kind, claim.label) == ("model-new", "ModelNew.forward")
    assert claim.baseline is not None and claim.baseline.name.value == "forward"
    # the baseline's own attributes are read for the baseline: self.proj is an nn.Linear (gemm)
    assert claim.baseline_attrs["proj"] == ("library", "torch.nn.Linear", "gemm")
    assert claim.attrs["weight"] == ("neutral",)


def test_registered_custom_ops_are_claims_but_fake_and_meta_impls_are_not():
    found = claims("""
        import torch
        from torch.library import Library
        lib = Library("demo", "DEF")
        @torch.library.custom_op("demo::attn", mutates_args=())
        def attn(q: torch.Tensor) -> torch.Tensor:
            return q
        @attn.register_fake
        def attn_fake(q):
            return q
        @torch.library.register_fake("demo::other")
        def other(q):
            return q
        def gemm_cuda(x, w):
            return x
        def gemm_meta(x, w):
            return x
        def gemm_any(x, w):
            return x
        lib.impl("gemm", gemm_cuda, "CUDA")
        lib.impl("gemm", gemm_any, "Meta")
        def moe_impl(x):
            return x
        def moe_fake(x):
            return x
        direct_register_custom_op(op_name="moe", op_func=moe_impl, fake_impl=moe_fake)
    """)
    assert found == {"custom op attn": "custom-op", "custom op gemm_cuda": "custom-op",
                     "custom op moe_impl": "custom-op"}


def test_custom_op_class_claims_forward_cuda_with_forward_native_as_baseline():
    model = model_of("""
        class Norm(CustomOp):
            def forward_native(self, x):
                return x * 2
            def forward_cuda(self, x):
                return torch.ops._C.double(x)
        class Plain:
            def forward_cuda(self, x):
                return x
        class Honest(CustomOp):
            def forward_native(self, x):
                return x * 2
            def forward_cuda(self, x):
                return x * 2
    """)
    (claim,) = model.kernel_claims
    assert claim.label == "Norm.forward_cuda"
    assert claim.baseline.name.value == "forward_native"


def test_custom_kernel_is_a_claim_and_reference_functions_are_not():
    assert claims("""
        def ref_kernel(data):
            return data
        def custom_kernel(data):
            return data
    """) == {"custom_kernel": "custom-kernel"}


def test_kernel_paths_make_every_function_there_a_claim():
    source = """
        import torch
        def fused_gemm(a, b):
            return torch.mm(a, b)
        def fused_gemm_reference(a, b):
            return torch.mm(a, b)
        class Model:
            def forward(self, a, b):
                return torch.mm(a, b)
    """
    assert claims(source, path="ops/gemm.py") == {}
    assert claims(source, path="ops/gemm.py", kernel_paths=("ops",)) == {"fused_gemm": "kernel-path"}
    hits = [f.code for f in findings_for(source, path="ops/gemm.py", kernel_paths=("ops",))]
    assert hits == ["KC101"]
    assert findings_for(source, path="other/gemm.py", kernel_paths=("ops",)) == []


@pytest.mark.parametrize("name, expected", [
    ("ref_kernel", True), ("rms_norm_reference", True), ("torch_rms_norm", True), ("forward_native", True),
    ("_attn_fake", True), ("naive_attention", True), ("reference", True),
    ("rms_norm", False), ("custom_kernel", False), ("forward_cuda", False), ("refine", False),
])
def test_reference_names(name, expected):
    assert is_reference_name(name) is expected


def test_triton_launches_know_side_jobs_from_real_work():
    found = launches("""
        import triton
        import triton.language as tl
        @triton.jit
        def _scale(x_ptr, s, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs) * s)
        @triton.jit
        def _row_sum(x_ptr, out_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(out_ptr, tl.sum(tl.load(x_ptr + offs), axis=0))
        @triton.jit
        def _loop(x_ptr, n, BLOCK: tl.constexpr):
            for i in range(0, n, BLOCK):
                tl.store(x_ptr + i, 0.0)
        def run(x, out, table):
            _scale[(1,)](x, 2.0, BLOCK=64)
            _row_sum[(1,)](x, out, BLOCK=64)
            _loop[(1,)](x, x.numel(), BLOCK=64)
            _imported_kernel[(1,)](x)
            table[0](x)
    """)
    assert found == [("triton", "_imported_kernel", False), ("triton", "_loop", False),
                     ("triton", "_row_sum", False), ("triton", "_scale", True)]


def test_torch_ops_kernel_modules_extensions_and_registries():
    found = launches('''
        import torch
        from torch.utils.cpp_extension import load_inline
        from vllm import _custom_ops as ops
        SRC = """
        __global__ void add_one(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] += 1.f; }
        """
        ext = load_inline(name="e", cpp_sources="", cuda_sources=SRC, functions=["add_one"])
        _KERNELS = {torch.float16: torch.ops._C.fp16_op, torch.bfloat16: torch.ops._C.bf16_op}
        def run(x, out):
            torch.ops._C.rms_norm(out, x)
            torch.ops.aten.mm(x, x)
            ops.rotary_embedding(x)
            ext.add_one(x)
            kernel = _KERNELS.get(x.dtype)
            kernel(x)
    ''')
    assert found == [("extension", "ext.add_one", True), ("kernel-module", "vllm._custom_ops.rotary_embedding", False),
                     ("registry", "a kernel from _KERNELS", False), ("torch-ops", "torch.ops._C.rms_norm", False)]


def test_inline_cuda_with_a_loop_is_not_a_side_job():
    found = launches('''
        from torch.utils.cpp_extension import load_inline
        SRC = "__global__ void k(float* x, int n) { for (int i = 0; i < n; ++i) x[i] *= 2.f; }"
        ext = load_inline(name="e", cpp_sources="", cuda_sources=SRC, functions=["k"])
        def run(x):
            ext.k(x)
    ''')
    assert found == [("extension", "ext.k", False)]


def test_library_table_and_configured_library_ops():
    assert library_family("torch.nn.functional.conv2d") == "conv"
    # an ATen op under its own name has the family of the torch op it is; an unknown one is "aten"
    assert library_family("torch.ops.aten.mm.default") == "gemm"
    assert library_family("torch.ops.aten.some_unlisted_op.default") == "aten"
    assert library_family("flash_attn.flash_attn_func") == "attention"
    # the primary compute of a submission counts whatever op does it (issue 23); plumbing never does
    assert library_family("torch.nn.functional.relu") == "activation"
    assert library_family("torch.linalg.qr") == "linalg"
    assert library_family("torch.empty") is None
    assert library_family("torch.cat") is None
    assert library_family("mylib.gemm", Config(library_ops=("mylib.*",))) == "configured"
    source = """
        import mylib
        def custom_kernel(data):
            return mylib.gemm(*data)
    """
    assert findings_for(source) == []
    assert [f.code for f in findings_for(source, library_ops=("mylib.gemm",))] == ["KC101"]


def test_an_opaque_call_in_the_claim_keeps_kc101_quiet():
    source = """
        import torch
        from .fused import fused_epilogue
        def custom_kernel(data):
            a, b = data
            return fused_epilogue(torch.matmul(a, b))
    """
    assert findings_for(source) == []


def test_importing_kcheck_claims_imports_no_torch_or_triton():
    code = "import sys, kcheck.claims, kcheck.rules.dispatch, kcheck.rules.fallback; " \
           "print(any(m.split('.')[0] in ('torch', 'triton') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_kernel_built_and_never_launched_is_a_related_location():
    """KC101 on a claim whose file builds an inline extension it never launches points at the build."""
    text = (REPO / "tests" / "fixtures" / "dispatch" / "inline_kernel_unused.py").read_text()
    [f] = [f for f in findings_for(text, "solution.py") if f.code == "KC101"]
    build = next(n for n, line in enumerate(text.splitlines(), 1) if line.startswith("ext = load_inline("))
    assert [(r.line, r.message) for r in f.related] == [(build, "the extension ext is built here and never launched")]


def test_per_element_loops_and_multiply_accumulate_in_device_code():
    from kcheck.claims import CUDA_COMPUTE, _kernels_accumulate, _per_element_loops

    grid_stride = "int stride = blockDim.x * gridDim.x; for (int i = idx; i < n; i += stride) { y[i] = x[i]; }"
    lanes = "for (int j = 0; j < 4; ++j) { y[j] = fmaxf(x[j], 0.0f); }"
    real = "for (int k = 0; k < K; ++k) { acc += a[k] * b[k]; }"
    assert not CUDA_COMPUTE.search(_per_element_loops(grid_stride))
    assert not CUDA_COMPUTE.search(_per_element_loops(lanes))
    assert CUDA_COMPUTE.search(_per_element_loops(real))
    softmax = "__global__ void sm(float* s, int n) { float t = 0; for (int i = 0; i < n; ++i) t += expf(s[i * n + 1]); }"
    gemm = "__global__ void mm(const float* a, const float* b, float* c, int k) {" \
           " float acc = 0; for (int i = 0; i < k; ++i) acc += a[i] * b[i * k]; c[0] = acc; }"
    assert not _kernels_accumulate(softmax)  # index arithmetic (i * n) is no product of values
    assert _kernels_accumulate(gemm)
    assert _kernels_accumulate(None)  # a source this file does not show may do anything


def test_extensions_built_in_methods_builders_and_classes_are_launches():
    src = '''
        import torch
        from torch.utils.cpp_extension import load_inline
        _ext = None
        def _get():
            global _ext
            code = "torch::Tensor f(torch::Tensor x) { return torch::matmul(x, x); }"
            _ext = load_inline(name="a", cpp_sources=code, functions=["f"])
            return _ext
        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                Fn.kernel = load_inline(name="b", cpp_sources="", cuda_sources="__global__ void k(float* x) { x[0] = 1; }", functions=["k"])
                return Fn.kernel.k(x)
        class ModelNew(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.ext = _get()
                self.own = load_inline(name="c", cpp_sources="", cuda_sources="__global__ void g(float* x) { x[0] = 2; }", functions=["g"])
            def forward(self, x):
                return self.own.g(self.ext.f(Fn.apply(x)))
    '''
    model = model_of(src)
    found = {l.name: (l.kind, l.library, l.side_job) for l in model.launch_sites.values()}
    assert found["self.ext.f"] == ("extension", "torch::matmul", False)  # the builder's source, read from its locals
    assert found["Fn.kernel.k"][0] == "extension" and found["Fn.kernel.k"][2]
    assert found["self.own.g"][0] == "extension" and found["self.own.g"][2]
