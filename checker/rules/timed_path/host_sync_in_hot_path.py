from __future__ import annotations

import re

import libcst as cst

from kcheck.model import MEASUREMENT_PATH, walk
from kcheck.rule import Rule
from kcheck.rules.timed_path import (
    DEBUG_PATH, REFERENCE_PATH, SYNC_NAMES, SYNC_TEXT, hot_gate, off_the_step, region_calls,
)


class HostSyncInHotPath(Rule):
    """A host sync in a function that runs every serving step.

    ## What it does
    Finds calls that make the CPU wait for the GPU (`.item()`, `.cpu()`, `.tolist()`,
    `torch.cuda.synchronize()`, `torch.nonzero`, one-argument `torch.where`, ...) in per-step
    hot paths: model-layer `forward` methods, decode and step functions, metadata builds
    (the names are configurable with `hot-path-functions`), and in same-module helpers they
    call.

    Not reported:
    - `.item()` on a tensor the function built on the CPU, or on a tensor named for the host
      (`seq_lens_cpu.tolist()`);
    - a sync the code declares deliberate (inside `with gpu_sync_allowed():` or a similar
      `allow_sync` block), or takes only for a caller that passed a tensor where a list or an int
      would do (`x if isinstance(x, list) else x.tolist()`, `if isinstance(n, torch.Tensor): n =
      n.item()`);
    - a sync off the normal step: in an `except` handler, under a debug switch
      (`if envs.TRACE_X.get():`, `if self.debug:`, after `if not <switch>: return`), or in a
      branch that fills the cache its test reads (`if key not in cache: cache[key] = ...`);
    - a sync under a test for another backend (`if is_npu(): cu_seqlens = cu_seqlens.to("cpu")`):
      what that backend's op requires;
    - in the `forward` of a pipeline stage (a class named `*Stage`), which runs once per request,
      a sync outside its loops (the denoising steps);
    - anything in test and benchmark files (by path), debugging tools (`debug*/`, `debug*.py`)
      and reference implementations (`reference.py`, `ref.py`, `*_reference.py`), which are not
      serving code.

    ## Why is this bad?
    Every step pays a full GPU drain and a host round trip, the CPU can no longer run ahead to
    launch the next kernels, and the step cannot be captured in a CUDA graph. At decode batch
    sizes, where a step is a few hundred microseconds, one sync can cost more than the kernel
    it guards.

    ## Example
    ```python
    def forward(self, hidden_states, topk_ids):
        num_tokens = int(topk_ids.max().item()) + 1
        return self.experts(hidden_states, num_tokens)
    ```

    ## Use instead
    ```python
    def forward(self, hidden_states, topk_ids):
        # size buffers from static shapes, or compute the bound on the device
        return self.experts(hidden_states, self.max_num_tokens)
    ```

    ## Options
    - `hot-path-functions`: fnmatch patterns of the function names treated as per-step paths.
    """

    CODE = "KC203"
    NAME = "host-sync-in-hot-path"
    MESSAGE = "{what}{helper} in {region}: every step waits for the GPU"
    SEVERITY = "warning"
    KNOWLEDGE = ("measuring/host-syncs", "sampling/avoid-host-syncs", "triton-cuda/cuda-graph-capture")
    OPTIONS = ("hot-path-functions",)
    VALID = [
        """
import torch
class RMSNorm(torch.nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))
        self.eps = float(torch.tensor(eps).item())
    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight
""",
        """
import torch
class Layer(torch.nn.Module):
    def forward(self, x, lengths_list):
        lengths = torch.tensor(lengths_list)
        total = lengths.sum().item()
        return x[:total]
""",
    ]
    INVALID = [
        """
import torch
class MoE(torch.nn.Module):
    def forward(self, hidden_states, topk_ids):
        n = int(topk_ids.max().item()) + 1
        return self.experts(hidden_states, n)
""",
        """
import torch
def decode_step(model, tokens):
    logits = model(tokens)
    return logits.argmax(-1).tolist()
""",
    ]
    PREFILTER = (SYNC_TEXT,)

    @classmethod
    def gate(cls, summary, config) -> bool:
        return hot_gate(summary, config, SYNC_NAMES)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        if MEASUREMENT_PATH.search(model.path) or DEBUG_PATH.search(model.path) or REFERENCE_PATH.search(model.path):
            return  # a test's "decode step", a debugging tool's step(), a reference: not serving steps
        for region, call, via in region_calls(model, ("hot-path",)):
            where = via if via is not None else call
            if _allowed(model, call) or off_the_step(model, call) or _cpu_named(model, call) or (
                via is not None and (_allowed(model, via) or off_the_step(model, via))
            ) or (_per_request(model, region) and not _in_loop(model, where, region.function)):
                continue
            what = model.sync_kind(call, model.enclosing_function(call))
            if not what:
                continue
            helper = f" (inside {model.dotted(via.func)}())" if via is not None else ""
            self.report(where, what=what, helper=helper, region=region.label)


def _per_request(model, region) -> bool:
    """A pipeline stage's ``forward`` (a class named ``*Stage``) runs once per request; only its
    loops (the denoising steps) run per step."""
    owner = model.context_of(region.function).split(".")
    return len(owner) >= 2 and owner[-2].endswith("Stage")


def _in_loop(model, node: cst.CSTNode, function) -> bool:
    for anc in model.ancestors(node):
        if anc is function:
            return False
        if isinstance(anc, (cst.For, cst.While, cst.ListComp, cst.GeneratorExp, cst.DictComp, cst.SetComp)):
            return True
    return False


# ``with gpu_sync_allowed():``, ``with allow_sync():``: the code declares the sync deliberate.
ALLOW_SYNC = re.compile(r"sync_allowed|allow_?(gpu_?)?syncs?$", re.I)


def _allowed(model, node: cst.CSTNode) -> bool:
    """Whether a sync is declared deliberate (inside a ``with ...sync_allowed()`` block), or taken
    only when the caller passed a tensor where a list would do (the other side of
    ``x if isinstance(x, list) else x.tolist()``)."""
    child = node
    for anc in model.ancestors(node):
        if isinstance(anc, cst.With) and any(
            isinstance(item.item, cst.Call) and ALLOW_SYNC.search((model.dotted(item.item.func) or "").split(".")[-1])
            for item in anc.items
        ):
            return True
        if isinstance(anc, (cst.If, cst.IfExp)) and child is not anc.test and _isinstance_list(anc.test):
            return True
        if isinstance(anc, cst.If) and child is anc.body and _other_backend(model, anc.test):
            return True  # ``if is_npu(): x = x.to("cpu")``: what that backend's op requires
        if isinstance(anc, cst.FunctionDef):
            return False
        child = anc
    return False


def _other_backend(model, test: cst.CSTNode) -> bool:
    """A test that asks for a backend other than CUDA (``is_npu()``, ``current_platform.is_xpu()``,
    ``not current_platform.is_cuda_alike()``)."""
    def last(call) -> str:
        return (model.dotted(call.func) or "").split(".")[-1] if isinstance(call, cst.Call) else ""

    return any(isinstance(n, cst.Call) and OTHER_BACKEND.match(last(n)) or isinstance(n, cst.UnaryOperation)
               and isinstance(n.operator, cst.Not) and re.match(r"^_?is_cuda", last(n.expression)) for n in walk(test))


def _cpu_named(model, call: cst.Call) -> bool:
    """A sync whose tensor is named for the host (``seq_lens_cpu.tolist()``,
    ``(ids_cpu == tag).nonzero()``): by the serving engines' naming rule it already lives there."""
    receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
    if receiver is None:
        return False
    return any(isinstance(n, cst.Name) and CPU_NAME.search(n.value) or isinstance(n, cst.Attribute)
               and CPU_NAME.search(n.attr.value) for n in walk(receiver))


CPU_NAME = re.compile(r"(^|_)cpu$|^cpu_|_np$")


OTHER_BACKEND = re.compile(r"^_?is_(npu|xpu|cpu|hpu|mps|musa|mlu|tpu)$")


def _isinstance_list(test: cst.CSTNode) -> bool:
    for node in walk(test):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "isinstance" and any(
            isinstance(n, cst.Name) and n.value in ("list", "tuple", "List", "Sequence", "Tensor")
            or isinstance(n, cst.Attribute) and n.attr.value == "Tensor" for n in walk(node)
        ):
            return True
    return False
