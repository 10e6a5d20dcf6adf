"""Reference serving kernels (Triton) with the harness that verifies and measures them.

Importing this package loads neither torch nor triton; :func:`specs` imports the op modules.
Each op module follows one shape: a docstring with the formula, bytes/FLOPs and catalog ids,
private ``@triton.jit`` kernels, a public wrapper that checks its inputs and takes a declared,
announced fallback to the torch reference, then ``SPEC``.
"""

from __future__ import annotations

import importlib
import math

OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding", "per_token_fp8_quant",
       "rms_norm_fp8_quant", "fused_add_rms_norm_fp8_quant", "silu_and_mul_fp8_quant")
"""The reference kernels, one module each."""

FUSED_FP8_OPS = OPS[5:]
"""The fused quantizing ops (issue 26): a norm or activation straight to e4m3, one pass."""


def specs(names=None):
    """The ``KernelSpec`` of each op in ``names`` (all of :data:`OPS` by default), in that order."""
    names = OPS if names is None else names
    unknown = [n for n in names if n not in OPS]
    if unknown:
        raise KeyError(f"unknown op(s) {unknown}; known: {', '.join(OPS)}")
    return [importlib.import_module(f"{__name__}.{n}").SPEC for n in names]


def rounded_down(x: float, digits: int) -> str:
    """``x`` rounded down to ``digits`` decimals, for results tables: a figure never reads as
    meeting a goal it misses (a speed-up of 0.997 reads 0.99, not 1.00)."""
    scale = 10**digits
    return f"{math.floor(x * scale + 1e-9) / scale:.{digits}f}"
