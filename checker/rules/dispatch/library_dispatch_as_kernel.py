from __future__ import annotations

import libcst as cst

from kcheck.claims import HEAVY_FAMILIES, unlaunched_builds
from kcheck.native import line_of
from kcheck.rules.dispatch import ClaimRule, analyse, discarded_launches, main_use, naive_exports, other_work_sites


class LibraryDispatchAsKernel(ClaimRule):
    """Code presented as a kernel whose compute is a library call the baseline already makes.

    ## What it does
    Reports code presented as a kernel whose primary compute is a library op and nothing of its
    own: a `ModelNew`, a solution's `Model` (one kept where answers are: `runs/`, `samples/`,
    `generated/`, or a folder named for them such as `kernel_solutions/`), a leaderboard `custom_kernel`, a registered op named as
    a kernel or a configured kernel path that hands its work to cuBLAS, cuDNN, SDPA, flash-attn or
    any torch op that does the work. Layout plumbing around the call (allocations, views, casts)
    does not make it a kernel, and a binding that exposes a real third-party kernel to
    `torch.compile` is not a claim.

    In detail, it finds kernel claims — a `ModelNew` beside a `Model`, a registered custom op
    (`torch.library.custom_op`, `Library.impl`, `direct_register_custom_op`), a leaderboard
    `custom_kernel`, a function under a configured `kernel-paths` folder — whose work goes only
    to library ops: `torch.matmul`/`mm`/`bmm`/`@`, `F.linear`, `F.scaled_dot_product_attention`,
    convolutions, softmax, `torch.ops.aten.*`, flash-attn, flashinfer, xformers attention, a
    third-party kernel library's op (AITER, DeepGEMM, FlashMLA), an `nn.Linear`/`nn.Conv2d`
    module or `torch.compile` around these, with no kernel launch of its own. A registered op
    around a third-party kernel (FlashAttention, FlashInfer, AITER, ...) binds that kernel for
    `torch.compile`: an integration point, not a claim, and not reported. When the baseline
    (`Model.forward`) is in the same file, only library ops the baseline also calls count. An
    inline extension function that launches no kernel (its own body and the host functions of the
    source it calls) and whose C++ calls cuBLAS, cuDNN or ATen is reported at the C++ line of that
    call, with the line that enters it, even where the source holds a `__global__` kernel that
    nothing launches. Such a library-only extension function is reported even where the claim
    launches other kernels (AlexNet's convolutions as `cudnnConvolutionBiasActivationForward`
    beside an authored classifier kernel), when its op is a GEMM, attention or a convolution.

    The compute path is followed where the work is: same-module helpers, layers (`self.layer(x)`,
    `nn.Sequential`/`nn.ModuleList` built inline, from a local list or by a factory such as
    `conv_bn(...)` or `self._make_layer(...)`, however deep they nest), a layer class given as a
    parameter default (`norm_layer=nn.LayerNorm`), `Fn.apply(...)` of a same-module
    `torch.autograd.Function`, and an inline extension with no `__global__` kernel whose source
    calls `cublasSgemm`, cuDNN or ATen's `at::matmul` (the library op under another name).
    Extensions are found where agents build them: at module level, in a lazy builder that fills
    a `global` and returns it, in a method (`self.ext = load_inline(...)`, its sources local
    strings) or on a class (`Fn.kernel = load_inline(...)`). A helper defined once per branch of a
    guarded build (the extension path and its fallback) is read in every definition. A layer
    re-bound to a layout (`self.conv = self.conv.to(memory_format=...)`) stays the library layer,
    and an in-place op (`torch.relu_`, `.relu_()`) is the op. A call of a name bound to
    `torch.compile(fn)` (at the top, or lazily in a `global` filled by a factory that returns
    `torch.compile(fn)`) runs `fn`'s torch ops and is followed into `fn`. A solution (a `ModelNew`,
    a solution's `Model`, a `custom_kernel`) whose only work is arithmetic on its input tensors
    (`A * s` in an autograd Function presented as a custom operator) hands it to ATen's
    elementwise kernels and is reported too. Calls made in a branch test (`if _is_device("cpu",
    x):`) pick a path and do not make the claim opaque. The finding names the library call
    on the claim's main path: one in its own body before one in a warm-up helper, and neither one
    under a CPU guard (`if not x.is_cuda:`) nor in an `except` handler. It also points at the
    other heavy library calls on the path (up to six): where the work is done. A claim whose
    only kernels are kept from running by default (an opt-in flag, inputs that would have to
    require grad) is KC102's case, not this rule's.

    A claim that launches its own kernel is reported too when nothing the kernel writes reaches
    what it returns, and what it returns comes from a library op: the claim's statements are read
    in order, a launch may write every buffer it is passed and every tensor sharing their storage
    (a view, `from_dlpack(out)`, `self.hidden`), and a value computed after it from such a buffer
    carries the kernel's output. `output = F.linear(x, w)` rebinding the name whose storage the
    kernel was given, or `_ = ext.fused_linear(out, w)` beside `return state[1]` of an `nn.LSTM`,
    leave the result the library's. Launches inside helpers are not followed for this.

    What a library says about itself also makes claims: a public function of a kernel package's
    module (a `kernel`/`kernels`/`*_kernel` folder, such as `sgl_kernel/`) named as a faster kernel
    (`fast_topk`) or whose comment admits its kernel is still to be written (`# TODO: ... kernel`),
    when it launches nothing and calls no third-party kernel library; a `CustomOp`-style layer's
    `forward_cuda` whose comment admits the same and that runs `forward_native`'s torch formula;
    and an ops package's `__init__` that exports a function from its `naive`/`reference` module
    under a kernel op's name (`from .naive import chunk_titans_linear`), reported at the import.

    Not claims: a file kept where solutions are (`runs/`, `samples/`, `generated/`, ...) whose code
    repeats a task file of the project statement for statement (a run that recorded the task's
    reference as its answer: the project index's `copy_of`); a registered op in a library's own code (not a solution, submission, `ModelNew` file
    or configured kernel path) whose name does not present it as a kernel (`fused_*`, `fast_*`,
    `*kernel*`, `optimized`): libraries register ops to bind a vendor kernel (PyTorch's flash
    attention, cuBLAS's scaled GEMM), to attach sharding rules or fake tensors, or to keep a torch
    computation whole under `torch.compile`; the `forward_cuda` of a `CustomOp`-style layer (the layer's CUDA slot, where a
    library op such as cuDNN's convolution is often the deliberate choice), a registered op whose
    library call goes to FlashInfer or flash-attn (it exposes a real kernel to `torch.compile`),
    a reference solution by its file name (`ref.py`, `reference.py`, `*_ref.py`) or by its
    docstring ("Reference kernel for ..."), and a leaderboard problem's harness files
    (`problems/.../template*.py` and the cases under `problems/.../solutions/correct|wrong/`).
    A `submission*.py` is a submission whatever its docstring says: a problem's shipped sample
    that calls the reference's library op is reported like a contestant's.

    ## Why is this bad?
    The "kernel" is the baseline. It passes every correctness check because it computes the same
    thing the same way, and any speed-up it reports comes from the harness (warm caches, a
    different launch order, timing noise), not from the code. Reviewed as a kernel, it earns
    credit for work cuBLAS, cuDNN or FlashAttention did.

    ## Example
    ```python
    class ModelNew(nn.Module):
        def forward(self, a, b):
            return torch.matmul(a, b)
    ```

    ## Use instead
    ```python
    class ModelNew(nn.Module):
        def forward(self, a, b):
            c = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
            _matmul_kernel[grid](a, b, c, *a.shape, b.shape[1])
            return c
    ```

    ## Options
    `library-ops`: more qualified names or patterns (`mylib.gemm`, `mylib.attn.*`) to treat as
    library ops. `kernel-paths`: folders whose functions are all presented as kernels.
    """

    CODE = "KC101"
    NEEDS = ("claim reaches library",)
    NAME = "library-dispatch-as-kernel"
    MESSAGE = "{claim} hands its work to {op}{helper}, {whose}: this is not a kernel"
    DISCARDED = ("{claim} launches {kernel} but returns what {op} computes: nothing the kernel writes reaches "
                 "the result, so the work is the library's")
    NAIVE = ("this ops package exports {name} from its {module} module: the op it presents beside its kernels "
             "is the pure-torch implementation, not a kernel")
    SEVERITY = "error"
    PREVIEW = False  # at the bar on the test split of 2026-12-07 (17 of 19): benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("verification/library-dispatch-is-not-a-kernel", "verification/ways-kernels-cheat-benchmarks")
    VALID = [
        """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
""",
        """
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, a, b):
        c = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        _matmul_kernel[(a.shape[0] // 64,)](a, b, c)
        return c
""",
        """
import torch
from vllm import _custom_ops as ops
class RMSNorm(CustomOp):
    def forward_native(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
    def forward_cuda(self, x):
        out = torch.empty_like(x)
        ops.rms_norm(out, x, self.weight, self.eps)
        return out
""",
        """
import torch
from .fused import fused_matmul_gelu
def custom_kernel(data):
    a, b = data
    return fused_matmul_gelu(a, b)
""",
    ]
    INVALID = [
        """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a.contiguous(), b.contiguous())
""",
        """
import torch
@torch.library.custom_op("mylib::fused_attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
""",
        """
import torch
def custom_kernel(data):
    a, b = data
    return a @ b
""",
    ]
    OPTIONS = ("library-ops", "kernel-paths")

    def leave_Module(self, original_node: cst.Module) -> None:
        unlaunched = tuple((stmt, f"the extension {name} is built here and never launched")
                           for stmt, name in unlaunched_builds(self.model))
        for stmt, name, module in naive_exports(self.model):
            self.report(stmt, message=self.NAIVE.format(name=name, module=module))
        for found in analyse(self.model):
            if not found.library or found.unknown or found.dormant:
                continue  # (a kernel kept from running by default is KC102's case)
            library = found.library
            if found.launches and all(u.via is None for u in found.launches):
                dropped = discarded_launches(self.model, found.claim.function, found.launches, library)
                if dropped is not None:
                    self.report(dropped.node, message=self.DISCARDED.format(
                        claim=found.claim.label, kernel=found.launches[0].name, op=_shown(dropped.name)),
                        related=tuple((u.node, f"{u.name} is launched here") for u in found.launches[:3]))
                    continue
            if found.launches:
                # an extension function presented as a kernel that launches none and only calls a
                # heavy library op (``fused_conv_relu`` = cudnnConvolutionBiasActivationForward) is
                # library dispatch whatever other kernels the claim launches
                library = [u for u in library if u.family in HEAVY_FAMILIES and self._library_only(u)]
                if not library:
                    continue
            use = main_use(library, self.model)
            where = use.via if use.via is not None else use.node
            helper = f" (inside {self.model.dotted(use.via.func)}())" if use.via is not None else ""
            whose = "a library op the baseline in this file also uses" if found.claim.baseline is not None \
                else "a library op"
            launch = self.model.launch_sites.get(id(use.node))
            line = line_of(self.context.source, launch.library_in or launch.name.split(".")[-1], launch.library + "(") \
                if launch is not None and launch.library else None  # the C++ line that calls the library
            related = ((use.node, f"{_shown(use.name)} does the work here"),) if use.via is not None else ()
            related += self._replayed(use.node) + unlaunched + other_work_sites(library, use, self.model)
            self.report(where, claim=found.claim.label, op=_shown(use.name), helper=helper, whose=whose, line=line,
                        related=related)


    def _replayed(self, node: cst.CSTNode) -> tuple:
        """Where the library op is wrapped so that it looks faster but stays the library's: captured
        in a CUDA graph (``with torch.cuda.graph(g):``) or compiled (``@torch.compile``)."""
        for anc in self.model.ancestors(node):
            if type(anc) is cst.With and any(
                    type(i.item) is cst.Call and (self.model.call_name(i.item) or "") == "torch.cuda.graph"
                    for i in anc.items):
                return ((anc, "captured in a CUDA graph here: each replay runs the same library op"),)
            if type(anc) is cst.FunctionDef:
                for dec in anc.decorators:
                    target = dec.decorator.func if type(dec.decorator) is cst.Call else dec.decorator
                    if (self.model.qualname(target) or "") == "torch.compile":
                        return ((dec, "compiled with torch.compile here: the compiled graph still runs library ops"),)
                return ()
        return ()

    def _library_only(self, use) -> bool:
        launch = self.model.launch_sites.get(id(use.node))
        return launch is not None and bool(launch.library)


def _shown(name: str) -> str:
    return name if name.startswith(("@", ".", "the ")) else f"{name}()"
