from __future__ import annotations

import libcst as cst

from kcheck.claims import HEAVY_FAMILIES
from kcheck.native import line_of
from kcheck.rules.dispatch import ClaimRule, analyse, main_use


class DecorativeKernel(ClaimRule):
    """A real kernel that does a side job while the main op still goes to the library.

    ## What it does
    Reports a kernel claim that does launch a kernel of its own, but one that only does a side job
    (a copy, a scale, an activation) while the primary op (a GEMM, attention, a convolution) still
    goes to the library, in Python or in the extension's C++.

    In detail, it finds kernel claims (see KC101) that do launch a kernel of their own — a `@triton.jit`
    function or a `load_inline` extension in the same file — but where that kernel only moves or
    scales data (no loop, no `tl.dot`, no reduction, no atomics; for inline CUDA, no loop, shuffle,
    atomic or MMA), while the heavy op the baseline also runs — a GEMM, attention, a convolution,
    an `nn.Linear` or the baseline `Model` itself — is still a library call. That library call may
    sit in the extension's own C++: an entry function that calls `torch::conv3d` or `cublasSgemm`
    (itself or through a host helper) and then launches an elementwise kernel is reported at the
    C++ line of the library call; only the kernels that function launches are judged. A
    grid-stride loop (`for (i = idx; i < n; i += blockDim.x * gridDim.x)`) and a loop over a
    handful of vector lanes still do one element per step: they do not make a kernel more than a
    side job. Where the library op sits in the extension's own C++ (the extension presented as
    the kernel hides it), kernels that loop or reduce but multiply-accumulate nothing (a softmax,
    norm, pool or activation; no MMA, no `acc += a[i] * w[j]`) are side jobs too: attention whose
    QK^T and PV are `torch::matmul` beside an authored softmax is reported. With the library op in
    Python, a kernel with a real loop or reduction (a softmax or logsumexp epilogue over channels)
    is not a side job and is not reported.

    ## Why is this bad?
    The custom kernel makes the code look like a kernel submission, but the time that matters is
    spent in cuBLAS, cuDNN or FlashAttention, exactly as in the baseline. A speed-up measured on
    such code is the library's speed plus whatever the side job saved, and the review goes to
    the wrong place: the elementwise kernel gets checked, the claim about the GEMM does not.

    ## Example
    ```python
    class ModelNew(nn.Module):
        def forward(self, a, b):
            c = torch.matmul(a, b)
            _scale_kernel[grid](c, self.scale, c.numel(), BLOCK=1024)
            return c
    ```

    ## Use instead
    ```python
    class ModelNew(nn.Module):
        def forward(self, a, b):
            c = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
            _matmul_scale_kernel[grid](a, b, c, self.scale, *a.shape, b.shape[1])
            return c
    ```
    """

    CODE = "KC102"
    NEEDS = (("claim reaches library", "claim launches kernel"),)
    NAME = "decorative-kernel"
    MESSAGE = ("{claim} still hands its main op to {op}; its own kernel {kernel} only does a side job "
               "({what})")
    SEVERITY = "warning"
    PREVIEW = False  # at the bar on the test split of 2026-12-05: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("verification/library-dispatch-is-not-a-kernel", "verification/ways-kernels-cheat-benchmarks")
    VALID = [
        """
import torch
import triton
import triton.language as tl
@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, K, BLOCK):
        acc += tl.dot(tl.load(a_ptr + k), tl.load(b_ptr + k))
    tl.store(c_ptr, acc)
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        c = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        _matmul_kernel[(1,)](a, b, c, a.shape[0], b.shape[1], a.shape[1], BLOCK=64)
        return c
""",
        """
import torch
import triton
import triton.language as tl
@triton.jit
def _relu_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)
class ModelNew(torch.nn.Module):
    def forward(self, x):
        _relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, x.numel(), BLOCK=1024)
        return x
""",
    ]
    INVALID = [
        """
import torch
import triton
import triton.language as tl
@triton.jit
def _scale_kernel(x_ptr, s, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * s, mask=offs < n)
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        c = torch.matmul(a, b)
        _scale_kernel[(triton.cdiv(c.numel(), 1024),)](c, 0.5, c.numel(), BLOCK=1024)
        return c
""",
    ]
    OPTIONS = ("library-ops", "kernel-paths")

    def leave_Module(self, original_node: cst.Module) -> None:
        for found in analyse(self.model):
            heavy = [u for u in found.library if u.family in HEAVY_FAMILIES]
            if not heavy or not found.launches or found.unknown:
                continue
            hidden = any(" in the extension " in u.name for u in heavy)  # the library op sits in the C++
            if not all(u.launch.side_job or (hidden and not u.launch.accumulates) for u in found.launches):
                continue
            use = main_use(heavy, self.model)
            where = use.via if use.via is not None else use.node
            op = use.name if use.name.startswith(("@", ".", "the ", "cu", "at::", "torch::")) else f"{use.name}()"
            launch = self.model.launch_sites.get(id(use.node))
            line = line_of(self.context.source, launch.library_in or launch.name.split(".")[-1], launch.alongside + "(") \
                if launch is not None and launch.alongside else None  # the C++ line that calls the library
            what = "no loop, dot or reduction" if all(u.launch.side_job for u in found.launches) else \
                "no multiply-accumulate of its own: a norm, softmax, pool or activation"
            self.report(where, claim=found.claim.label, op=op, kernel=found.launches[0].name, what=what, line=line)
