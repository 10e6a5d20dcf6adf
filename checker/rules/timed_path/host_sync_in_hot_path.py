from __future__ import annotations

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.timed_path import SYNC_NAMES, SYNC_TEXT, hot_gate, report_calls


class HostSyncInHotPath(Rule):
    """A host sync in a function that runs every serving step.

    ## What it does
    Finds calls that make the CPU wait for the GPU (`.item()`, `.cpu()`, `.tolist()`,
    `torch.cuda.synchronize()`, `torch.nonzero`, one-argument `torch.where`, ...) in per-step
    hot paths: model-layer `forward` methods, decode and step functions, metadata builds
    (the names are configurable with `hot-path-functions`), and in same-module helpers they
    call. `.item()` on a tensor the function built on the CPU is not reported.

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
        report_calls(self, ("hot-path",), lambda c: model.sync_kind(c, model.enclosing_function(c)), self.MESSAGE)
