from __future__ import annotations

import libcst as cst

from kcheck.claims import BUILTINS, _walk
from kcheck.rule import Rule
from kcheck.rules.fallback import (
    BROAD_EXCEPTIONS, DISPATCH_TEXT, broad_except_gate, dispatchers, is_announcer, statements,
)


class BroadExceptFallback(Rule):
    """A fallback reached by a bare or broad `except` around a kernel launch.

    ## What it does
    Finds `try` blocks whose body launches a specialised kernel (directly or through a
    same-module helper) with a handler that catches everything — a bare `except:`,
    `except Exception` or `except BaseException` — and computes a replacement result instead of
    re-raising.

    ## Why is this bad?
    The handler cannot tell "this input is not supported" from a bug: a wrong argument, an
    out-of-memory error, a Triton compile failure, an illegal memory access that leaves the CUDA
    context unusable. All of them quietly become the fallback, so a broken kernel looks like a
    slow one and benchmarks of "the kernel" measure the reference. Decide support with an explicit
    check before the launch, and let real errors propagate.

    ## Example
    ```python
    try:
        out = torch.ops.my_ext.fused_moe(x, w1, w2, topk_ids)
    except Exception:
        out = fused_moe_reference(x, w1, w2, topk_ids)
    ```

    ## Use instead
    ```python
    if _fused_moe_supported(x, w1):
        out = torch.ops.my_ext.fused_moe(x, w1, w2, topk_ids)
    else:
        _warn_once("fused_moe: using the reference for this input")
        out = fused_moe_reference(x, w1, w2, topk_ids)
    ```
    """

    CODE = "KC303"
    NAME = "broad-except-fallback"
    MESSAGE = "{handler} around {kernel} swallows every error, bugs and CUDA faults included, into the fallback"
    SEVERITY = "warning"
    KNOWLEDGE = ("triton-cuda/declared-fallbacks",)
    VALID = [
        """
import torch
try:
    from sgl_kernel import silu_and_mul as _silu_and_mul
except ImportError:
    _silu_and_mul = None
""",
        """
import torch
def moe(x, w):
    try:
        return torch.ops.my_ext.fused_moe(x, w)
    except Exception:
        log_failure(x)
        raise
""",
        """
import torch
def dispatch_stack_active():
    try:
        return int(torch._C._len_torch_dispatch_stack()) > 0
    except Exception:
        return True
""",
        """
import torch
def publish(ready, words):
    error = None
    try:
        torch.ops.symm_mem.memset32_(ready, 0, 0, words)
    except Exception as exc:
        error = str(exc)
    return error
""",
    ]
    INVALID = [
        """
import torch
def moe(x, w):
    try:
        return torch.ops.my_ext.fused_moe(x, w)
    except Exception:
        return moe_reference(x, w)
""",
        """
import torch
def moe(x, w):
    try:
        out = torch.ops.my_ext.fused_moe(x, w)
    except:
        out = moe_reference(x, w)
    return out
""",
    ]
    PREFILTER = (DISPATCH_TEXT, r"\bexcept\b")

    @classmethod
    def gate(cls, summary, config) -> bool:
        """A broad handler around a dispatch site in a dispatching function (:func:`broad_except_gate`)."""
        return broad_except_gate(summary)

    def leave_Module(self, original_node: cst.Module) -> None:
        model = self.model
        for disp in dispatchers(model, claimed=False):
            for node in _walk(disp.function.body):
                if type(node) is not cst.Try or not disp.dispatches(statements(node.body)):
                    continue
                for handler in node.handlers:
                    caught = _broad(model, handler)
                    body = statements(handler.body)
                    if caught and not any(type(n) is cst.Raise for s in body for n in _walk(s)) and _falls_back(
                        model, body
                    ):
                        self.report(handler, handler=caught, kernel=disp.label)


def _falls_back(model, body) -> bool:
    """Whether the handler computes a replacement result (calls something other than a logger or a
    builtin such as ``str(exc)``)."""
    return any(type(n) is cst.Call and not is_announcer(model, n) and not (
        type(n.func) is cst.Name and n.func.value in BUILTINS) for s in body for n in _walk(s))


def _broad(model, handler: cst.ExceptHandler) -> str | None:
    if handler.type is None:
        return "a bare `except:`"
    types = [e.value for e in handler.type.elements] if type(handler.type) is cst.Tuple else [handler.type]
    for t in types:
        name = model.dotted(t) or ""
        if name.split(".")[-1] in BROAD_EXCEPTIONS:
            return f"`except {name}`"
    return None
