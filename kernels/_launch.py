"""What every kernel wrapper needs to decide between launching Triton and its declared fallback.

A wrapper launches its Triton kernel only on a CUDA tensor, or on a CPU tensor while
``TRITON_INTERPRET=1`` (the CPU test mode). Everything else it does not support goes to
the op's torch reference through :func:`fallback`, which says so once per (op, reason)
through :mod:`logging` and never again, so the hot path stays quiet.

Catalog: triton-cuda/declared-fallbacks, triton-cuda/autotune-keys.
"""

from __future__ import annotations

import functools
import logging
import os

import torch
import triton

log = logging.getLogger("kcheck.kernels")

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
"""Triton's interpreter runs the kernels on CPU tensors; read once, as Triton does."""

_announced: set[tuple[str, str]] = set()


def fallback(op: str, reason: str) -> None:
    """Announce, once per (op, reason), that ``op`` runs its torch reference instead of Triton."""
    if (op, reason) not in _announced:
        _announced.add((op, reason))
        log.warning("kcheck.kernels.%s: falling back to the torch reference (%s)", op, reason)


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def device_reason(t: torch.Tensor, min_capability: tuple[int, int]) -> str | None:
    """Why ``t``'s device cannot run the Triton kernel, or None when it can."""
    if t.device.type == "cuda":
        cap = _capability(t.device.index if t.device.index is not None else torch.cuda.current_device())
        if cap < min_capability:
            return f"compute capability {cap[0]}.{cap[1]} < {min_capability[0]}.{min_capability[1]}"
        return None
    if t.device.type == "cpu" and INTERPRET:
        return None
    return f"no Triton backend for device {t.device.type!r}"


def configs(*candidates: triton.Config) -> list[triton.Config]:
    """Autotuning candidates; the interpreter cannot time them, so it gets the first alone."""
    return list(candidates[:1]) if INTERPRET else list(candidates)


def row_configs() -> list[triton.Config]:
    """The candidates of the row-wise kernels (RMSNorm, fused add+RMSNorm, per-token FP8): rows per
    program and warps. The first is the interpreter's and the small-batch default."""
    return configs(
        triton.Config({"ROWS": 1}, num_warps=8),
        triton.Config({"ROWS": 1}, num_warps=4),
        triton.Config({"ROWS": 1}, num_warps=16),
        triton.Config({"ROWS": 2}, num_warps=4),
        triton.Config({"ROWS": 2}, num_warps=8),
        triton.Config({"ROWS": 4}, num_warps=8),
        triton.Config({"ROWS": 4}, num_warps=16),
    )


def prune_for_small_batches(configs: list[triton.Config], named_args: dict, **_: object) -> list[triton.Config]:
    """Up to 1024 tokens, keep one row per program and 8 or more warps for the row-wise kernels.

    A bucket is tuned on the first token count that reaches it, and at a few microseconds the
    timings the autotuner compares differ by less than their noise. On an H200 it once picked
    4 rows per program for the 64-token bucket from a 37-token call, and fused add+RMSNorm took
    6.11 us at T=32, against 4.86 us with this pruning. A sweep over all candidates found one row
    per program and 8 or 16 warps best at T=1, 32 and 256.
    """
    if named_args.get("token_bucket", 65536) > 1024:
        return configs
    kept = [c for c in configs if c.kwargs.get("ROWS", 1) == 1 and c.num_warps >= 8]
    return kept or configs


def token_bucket(tokens: int) -> int:
    """Coarse token-count regime used as an autotune key: decode, small, medium, large batches.

    Keying on the exact count would retune for every new batch size in a serving loop.
    """
    for bound in (1, 64, 1024, 8192):
        if tokens <= bound:
            return bound
    return 65536
