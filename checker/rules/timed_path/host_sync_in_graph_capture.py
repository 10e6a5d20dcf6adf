from __future__ import annotations

import libcst as cst

from kcheck.rule import Rule
from kcheck.rules.timed_path import SYNC_TEXT, report_calls


class HostSyncInGraphCapture(Rule):
    """A host sync inside a CUDA-graph capture.

    ## What it does
    Finds calls that make the CPU wait for the GPU (`torch.cuda.synchronize()`, `.item()`,
    `.cpu()`, `.tolist()`, `torch.nonzero`, ...) inside a `with torch.cuda.graph(g):` block,
    including same-module helpers the block calls.

    ## Why is this bad?
    Synchronizing is not allowed while a stream is being captured: the capture fails with
    "operation not permitted when stream is capturing", or, for ops whose output size depends
    on data, the graph bakes in the size seen at capture time and replays it for every later
    input. Either way the decode step that was supposed to run as one graph does not.

    ## Example
    ```python
    with torch.cuda.graph(graph):
        logits = model(input_ids)
        n = (logits > 0).sum().item()
    ```

    ## Use instead
    ```python
    with torch.cuda.graph(graph):
        logits = model(input_ids)
        n = (logits > 0).sum()  # stays on the device; read it after replay
    ```
    """

    CODE = "KC202"
    NAME = "host-sync-in-graph-capture"
    MESSAGE = "{what}{helper} in {region}: a sync cannot be captured and breaks graph replay"
    SEVERITY = "error"
    PREVIEW = True  # below the bar on the test split: benchmarks/results/evaluation-test.md
    KNOWLEDGE = ("triton-cuda/cuda-graph-capture", "measuring/host-syncs")
    VALID = [
        """
import torch
def capture(graph, model, x):
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        y = model(x)
    torch.cuda.synchronize()
    return y
""",
        """
import torch
def capture_all(graphs, model, xs):
    for g, x in zip(graphs, xs):
        with torch.cuda.graph(g):
            model(x)
        torch.cuda.synchronize()
""",
    ]
    INVALID = [
        """
import torch
def capture(graph, model, x):
    with torch.cuda.graph(graph):
        y = model(x)
        torch.cuda.synchronize()
""",
        """
import torch
def pick(logits):
    return torch.nonzero(logits > 0)
def capture(graph, logits):
    with torch.cuda.graph(graph):
        idx = pick(logits)
""",
    ]
    PREFILTER = (SYNC_TEXT, r"graph")
    NEEDS = ("capture reaches sync",)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        report_calls(self, ("graph-capture",), lambda c: model.sync_kind(c, model.enclosing_function(c)), self.MESSAGE)
