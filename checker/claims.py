"""Kernel claims and launch sites: the part of the module model the KC1xx and KC3xx rules read.

A *kernel claim* is code presented as a kernel: a ``@triton.jit`` function, a ``ModelNew``
beside a ``Model``, a registered custom op, a ``CustomOp``-style class, a function under a
configured kernel path, a leaderboard-style ``custom_kernel``.
"""

from __future__ import annotations

import libcst as cst

TRITON_DECORATORS = {"triton.jit", "triton.autotune", "triton.heuristics"}


def decorator_names(model, fn: cst.FunctionDef) -> list[str]:
    out = []
    for dec in fn.decorators:
        target = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
        out.append(model.qualname(target) or "")
    return out


def find_claims(model, module: cst.Module) -> None:
    for defs in model.functions.values():
        for fn in defs:
            if any(name in TRITON_DECORATORS for name in decorator_names(model, fn)):
                model.triton_kernels.append(fn)
