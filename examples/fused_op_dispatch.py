"""SGLang-style fused-op wrappers: one presents cuBLAS as its kernel, the others fail or fall back badly.

`kcheck check` reports: KC101 (the registered "fused" GEMM op is F.linear), KC301 (an assert on
the dtype where the unsupported dtype should take the reference path), KC303 (a kernel failure
of any kind silently becomes the fallback) and KC304 (a fallback nobody hears about).
"""

import logging

import torch
import torch.nn.functional as F

from sgl_kernel import fused_add_rmsnorm, gelu_and_mul, silu_and_mul

from .utils import direct_register_custom_op

logger = logging.getLogger(__name__)


def gemm_a16w16(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Registered below as the "fused" unquantised GEMM."""
    out = F.linear(x, weight, bias)
    return out


def gemm_a16w16_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return x.new_empty(x.shape[:-1] + (weight.shape[0],))


direct_register_custom_op(op_name="gemm_a16w16", op_func=gemm_a16w16, mutates_args=[], fake_impl=gemm_a16w16_fake)


def rmsnorm_residual(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    assert x.dtype in (torch.float16, torch.bfloat16), "fused_add_rmsnorm needs half precision"
    fused_add_rmsnorm(x, residual, weight, eps)
    return x, residual


def silu_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    if x.shape[-1] % 16 != 0:
        return F.silu(x[..., :d]) * x[..., d:]
    out = torch.empty(x.shape[:-1] + (d,), dtype=x.dtype, device=x.device)
    silu_and_mul(x, out)
    return out


def gelu_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    out = torch.empty(x.shape[:-1] + (d,), dtype=x.dtype, device=x.device)
    try:
        gelu_and_mul(x, out)
    except Exception:
        out = F.gelu(x[..., :d], approximate="tanh") * x[..., d:]
    return out
