from __future__ import annotations

import libcst as cst

from kcheck.claims import _walk
from kcheck.rule import Rule
from kcheck.rules.fallback import (
    DISPATCH_TEXT, claims_only, computes, device_only, dispatchers, mentioned_props, sibling_statements, statements,
)


class IncompleteGuard(Rule):
    """A guard that checks only the device before a kernel that assumes more.

    ## What it does
    Reports a guard that sends inputs to a specialised kernel after checking only their device,
    where the kernel was written for narrower dtypes, shapes or layouts. Inputs that pass the
    guard but not the kernel's assumptions get a wrong result or a crash instead of the fallback.

    In detail, it finds an `if` on the compute path of a kernel claim that replaces a library path (the
    `forward_cuda` of a `CustomOp`-style class beside its `forward_native`, a function under a
    configured `kernel-paths` entry, and the same-module helpers they call) that launches a
    specialised kernel, where the test that picks the kernel over the fallback checks only the
    device (`x.is_cuda`, `x.device.type == "cuda"`, `torch.cuda.is_available()`), and nothing
    else in the function checks the dtype, shape, rank, contiguity or strides the kernel was
    written for. Low-level op wrappers outside such a claim are not checked: a device branch
    there picks the platform, and the native op behind it checks its own inputs.

    ## Why is this bad?
    Being on the GPU is the least a kernel needs. A Triton or CUDA kernel is written for some
    dtypes, a contiguous last dimension, a maximum block size or head size; a CUDA tensor outside
    those still takes the kernel path, where it fails to compile, raises deep inside the launch,
    or silently reads the wrong elements. The guard should state everything the kernel assumes,
    so that everything else reaches the fallback.

    ## Example
    ```python
    class Gelu(CustomOp):
        def forward_native(self, x):
            return torch.nn.functional.gelu(x)

        def forward_cuda(self, x):
            if x.is_cuda:
                return _gelu_triton(x)
            return torch.nn.functional.gelu(x)
    ```

    ## Use instead
    ```python
    class Gelu(CustomOp):
        def forward_native(self, x):
            return torch.nn.functional.gelu(x)

        def forward_cuda(self, x):
            if x.is_cuda and x.dtype in SUPPORTED_DTYPES and x.is_contiguous():
                return _gelu_triton(x)
            _warn_once("gelu: using torch for this input")
            return torch.nn.functional.gelu(x)
    ```
    """

    CODE = "KC302"
    NAME = "incomplete-guard"
    MESSAGE = ("the only check before {kernel} is the device; the dtype, shape and layout the kernel "
               "assumes reach it unchecked")
    SEVERITY = "warning"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("triton-cuda/declared-fallbacks",)
    VALID = [
        """
import torch
class RMSNorm(CustomOp):
    def forward_native(self, x):
        return rms_norm_reference(x, self.w, self.eps)
    def forward_cuda(self, x):
        if x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) and x.is_contiguous():
            return torch.ops._C.rms_norm(x, self.w, self.eps)
        return rms_norm_reference(x, self.w, self.eps)
""",
        """
import torch
class RMSNorm(CustomOp):
    def forward_native(self, x):
        return rms_norm_reference(x, self.w, self.eps)
    def forward_cuda(self, x):
        assert x.stride(-1) == 1
        if not x.is_cuda:
            return rms_norm_reference(x, self.w, self.eps)
        return torch.ops._C.rms_norm(x, self.w, self.eps)
""",
        """
import torch
def rms_norm(x, w, eps):
    if x.is_cuda:
        return torch.ops._C.rms_norm(x, w, eps)
    return rms_norm_reference(x, w, eps)
""",
    ]
    INVALID = [
        """
import torch
class RMSNorm(CustomOp):
    def forward_native(self, x):
        return rms_norm_reference(x, self.w, self.eps)
    def forward_cuda(self, x):
        if x.is_cuda:
            return torch.ops._C.rms_norm(x, self.w, self.eps)
        return rms_norm_reference(x, self.w, self.eps)
""",
    ]
    PREFILTER = (DISPATCH_TEXT, r"is_cuda|device|is_available")
    NEEDS = ("claimed dispatcher",)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        for disp in dispatchers(model):
            guards, other_checks = [], False
            for node in _walk(disp.function.body):
                test = getattr(node, "test", None) if type(node) in (cst.If, cst.Assert, cst.IfExp, cst.While) else None
                if test is not None:
                    if type(node) is cst.If and device_only(model, test):
                        guards.append(node)
                    elif mentioned_props(model, test) - {"device"}:
                        other_checks = True
                elif type(node) is cst.Call and type(node.func) is cst.Attribute and (
                    node.func.attr.value in ("contiguous", "view", "reshape", "flatten", "to", "float", "half")
                ):
                    other_checks = True  # the wrapper normalises layout or dtype itself
            if other_checks or not claims_only(model, disp.function):
                continue  # at a module's forward a device test is dispatch by device
            for node in guards:
                if _picks_kernel(model, disp, node):
                    self.report(node.test, kernel=disp.label)


def _picks_kernel(model, disp, node: cst.If) -> bool:
    """Whether the guard chooses between the kernel and a fallback that computes the result."""
    if not _about_cuda(model, node.test):
        return False  # a choice between device backends (npu, xpu, cpu), not a kernel's guard
    body = statements(node.body)
    if type(node.orelse) is cst.Else:
        other = statements(node.orelse.body)
        if disp.dispatches(body) == disp.dispatches(other):
            return False
        return computes(model, other if disp.dispatches(body) else body)
    if node.orelse is not None:
        return False
    siblings = sibling_statements(model, node)
    index = next((i for i, s in enumerate(siblings) if s is node), None)
    later = siblings[index + 1:] if index is not None else []
    if disp.dispatches(body):
        return computes(model, later)  # the kernel under the guard, the fallback after it
    return disp.dispatches(later) and computes(model, body)


def _about_cuda(model, test: cst.CSTNode) -> bool:
    for n in _walk(test):
        if type(n) is cst.SimpleString and "cuda" in str(n.evaluated_value):
            return True
        if type(n) is cst.Attribute and n.attr.value == "is_cuda":
            return True
        if type(n) is cst.Call and (model.call_name(n) or "") == "torch.cuda.is_available":
            return True
    return False
