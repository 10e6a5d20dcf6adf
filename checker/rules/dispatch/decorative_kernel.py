from __future__ import annotations

import libcst as cst

from kcheck.claims import HEAVY_FAMILIES
from kcheck.native import line_of
from kcheck.rules.dispatch import WORKLOAD_CLAIMS, ClaimRule, _fallback_branch, analyse, main_use, other_work_sites


class DecorativeKernel(ClaimRule):
    """A real kernel that does a side job while the main op still goes to the library.

    ## What it does
    Reports a kernel claim whose own kernel does not do the primary op: it only does a side job (a
    copy, a scale, an activation, a softmax or reduction tail) while the primary op (a GEMM,
    attention, a convolution) still goes to the library, or it runs only under a condition the
    workload does not meet by default, while a library op does the work.

    In detail, it finds kernel claims (see KC101) that do launch a kernel of their own — a `@triton.jit`
    function, a `load_inline` extension, or a kernel in another Python DSL (`@cute.kernel`/`@cute.jit`
    for CuTe DSL, `@T.prim_func`/`@tilelang.jit` for TileLang, Numba's `@cuda.jit`, `@helion.kernel`)
    in the same file, called directly or through what compiles or caches it (`compiled =
    cute.compile(host, ...)`, a factory returning `tilelang.compile(main)`, a `self._get_kernel(m, n)`
    cache) — but where no launched kernel multiplies and accumulates (no `tl.dot`, `T.gemm` or
    `cute.gemm`, no `acc += x * w` or `tl.sum(x * w)`; for inline CUDA, no MMA and no `acc += a[i] *
    w[j]`), while the heavy op the baseline also runs — a GEMM,
    attention, a convolution, an `nn.Linear` or the baseline `Model` itself — is still a library
    call on the GPU path (one only under a CPU guard or in an `except` handler does not count). A
    kernel that loops or reduces without a product (the min and softmax over channels after a
    cuDNN `Conv3d`, a logsumexp tail, a residual add and ReLU between cuBLAS GEMMs) is such a side
    job. The library call may sit in the extension's own C++: an entry function that calls
    `torch::conv3d` or `cublasSgemm` (itself or through a host helper) and then launches its
    kernels is reported at the C++ line of the library call; only the kernels that function
    launches are judged. The finding also points at the other heavy library calls on the claim's
    path (up to six), where the work it presents as its own is done.

    It also reports a claim whose only kernels wait on a test that fails by default, while the
    path that runs hands its work to a library op: an opt-in environment flag
    (`FLAG = bool(int(os.getenv("X", 0)))`, `os.environ.get("X") == "1"`) in front of the
    launch, or, in a solution, an early `if not x.requires_grad: return torch.relu(x)` that a
    benchmark's plain input tensors always take. Besides solutions, this part judges the public
    functions of a kernel package's modules (a `kernel`/`kernels`/`*_kernel` folder, such as
    `torchao/kernel/`), whose default path must hand a GEMM, attention or convolution to the
    library. It is reported at the test that keeps the kernel from running.

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
    DORMANT = "{claim} hands its work to {op}: its own kernel {kernel} {how} ({why})"
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
            if found.dormant and not found.launches:
                self._dormant(found)
                continue
            heavy = [u for u in found.library if u.family in HEAVY_FAMILIES]
            if not heavy or not found.launches or found.unknown:
                continue
            heavy = [u for u in heavy if not _fallback_branch(self.model, u.via or u.node)]
            if not heavy:
                continue  # the heavy library op runs only off the GPU or after a failure: a fallback
            if not all(u.launch.side_job or not u.launch.accumulates for u in found.launches):
                continue  # one of its kernels multiplies and accumulates: it does the main op's kind of work
            use = main_use(heavy, self.model)
            where = use.via if use.via is not None else use.node
            op = use.name if use.name.startswith(("@", ".", "the ", "cu", "at::", "torch::")) else f"{use.name}()"
            launch = self.model.launch_sites.get(id(use.node))
            line = line_of(self.context.source, launch.library_in or launch.name.split(".")[-1], launch.alongside + "(") \
                if launch is not None and launch.alongside else None  # the C++ line that calls the library
            what = "no loop, dot or reduction" if all(u.launch.side_job for u in found.launches) else \
                "no multiply-accumulate of its own: a norm, softmax, pool or activation"
            related = ((use.node, f"{op} does the work here"),) if use.via is not None else ()
            self.report(where, claim=found.claim.label, op=op, kernel=found.launches[0].name, what=what, line=line,
                        related=related + other_work_sites(heavy, use, self.model))

    def _dormant(self, found) -> None:
        """A claim whose only kernels wait on a test that fails by default, while library ops on the
        path that runs do the work: reported at that test."""
        if found.unknown:
            return
        library = [u for u in found.library if not any(u.node is d.node for d, _ in found.dormant)]
        if found.claim.kind not in WORKLOAD_CLAIMS:
            library = [u for u in library if u.family in HEAVY_FAMILIES]  # a package's op: its main op
        library = [u for u in library if not _fallback_branch(self.model, u.node)
                   and not (u.via is not None and _fallback_branch(self.model, u.via))] or library
        if not library:
            return
        use, test = found.dormant[0]
        cond = " ".join(cst.Module([]).code_for_node(test.test).split())
        if len(cond) > 80:
            cond = cond[:77] + "..."
        why = "a benchmark's input tensors do not require grad" if "requires_grad" in cond else \
            "the environment variable is unset"
        inside = any(a is test for node in (use.node, use.via) if node is not None for a in self.model.ancestors(node))
        how = f"runs only when `{cond}`, which is false by default" if inside else \
            f"is skipped by the early return under `if {cond}:`, which holds by default"
        main = main_use(library, self.model)
        op = main.name if main.name.startswith(("@", ".", "the ")) else f"{main.name}()"
        self.report(test, message=self.DORMANT.format(claim=found.claim.label, kernel=use.name, op=op, how=how, why=why),
                    related=((use.node, f"{use.name} is launched only here"), (main.node, f"{op} does the work by default")))
