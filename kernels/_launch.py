"""What every kernel wrapper needs to decide between launching Triton and its declared fallback.

A wrapper launches its Triton kernel only on a CUDA tensor, or on a CPU tensor while
``TRITON_INTERPRET=1`` (the CPU test mode). Everything else it does not support goes to
the op's torch reference through :func:`fallback`, which says so once per (op, reason)
through :mod:`logging` and never again, so the hot path stays quiet.

Catalog: triton-cuda/declared-fallbacks, triton-cuda/autotune-keys.
"""

from __future__ import annotations

import functools
import inspect
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


ROW_CANDIDATES = (
    triton.Config({"ROWS": 1}, num_warps=8),
    triton.Config({"ROWS": 1}, num_warps=4),
    triton.Config({"ROWS": 1}, num_warps=16),
    triton.Config({"ROWS": 2}, num_warps=4),
    triton.Config({"ROWS": 2}, num_warps=8),
    triton.Config({"ROWS": 4}, num_warps=8),
    triton.Config({"ROWS": 4}, num_warps=16),
    triton.Config({"ROWS": 1}, num_warps=2),
)
"""The candidates of the row-wise kernels (RMSNorm, fused add+RMSNorm, per-token FP8): rows per
program and warps; the first is the interpreter's.

Loads with ``eviction_policy="evict_first"`` were slower in every kernel at T=4096 and 16384 on
an H200 (RMSNorm 69.6 against 65.5 us, SiLU-and-mul 287.6 against 274.4 us), so no candidate uses it."""


def _matches(config: triton.Config, pin: dict[str, int]) -> bool:
    return all((config.num_warps if k == "num_warps" else config.kwargs.get(k)) == v for k, v in pin.items())


def pinned(candidates: tuple[triton.Config, ...], pins: dict[int, dict[str, int]]):
    """An ``early_config_prune`` that runs, for each token bucket in ``pins``, the one candidate
    that matches its pin (meta-parameters and ``num_warps``), and lets the autotuner choose elsewhere.

    A bucket is tuned on the first token count that reaches it, and at a few microseconds the
    timings the autotuner compares differ by less than their noise: on an H200 it once picked
    4 rows per program for the 64-token bucket from a 37-token call, and fused add+RMSNorm took
    6.11 us at T=32, against 4.86 us with one row per program. So the small buckets run what
    sweeps chose. A pin that matches no candidate, or several, is an error here, at import: a
    pin that quietly fell back to tuning over every candidate once left two of SiLU-and-mul's
    buckets to the autotuner for a whole results run.
    """
    for bucket, pin in pins.items():
        found = sum(_matches(c, pin) for c in candidates)
        if found != 1:
            raise ValueError(f"pin {pin} of token bucket {bucket} matches {found} candidates, not one")

    def prune(configs: list[triton.Config], named_args: dict, **_: object) -> list[triton.Config]:
        pin = pins.get(named_args.get("token_bucket"))
        if pin is None or len(configs) == 1:  # a large bucket, or the interpreter's one candidate
            return configs
        return [c for c in configs if _matches(c, pin)]

    return prune


SMALL_BUCKETS = (1, 64, 1024)
"""The token buckets whose configuration is pinned from sweeps rather than autotuned."""

ROWS_PINS = {bucket: {"ROWS": 1, "num_warps": 8} for bucket in SMALL_BUCKETS}
"""RMSNorm's and per-token FP8's: one row per program and 8 warps up to 1024 tokens. A sweep over all
candidates (2026-12-02, 3 rounds of 200 timings each) found one row per program and 8 warps best or
within 0.07 us of the best at T=1, 32 and 256, for RMSNorm and fused add+RMSNorm alike. Per-token
FP8 took 16 warps while it divided each element with a correctly rounded division (with 8, Nsight
Compute timed 2.85 us at T=1 against 2.69 us for ``torch.compile``'s 16-warp kernel); since it
multiplies by a reciprocal and corrects with an fma, a sweep (3 rounds of 100 timings) found
8 warps best at T=1, 32 and 256 (4.48, 4.74 and 5.52 us; 16 warps 4.58, 4.77 and 5.54)."""

FUSED_PINS = {**ROWS_PINS, 1024: {"ROWS": 1, "num_warps": 2}}
"""Fused add+RMSNorm's: one row per program, 8 warps up to 64 tokens and 2 from 65 to 1024. At T=256
on an H200 (2026-12-02, 9 interleaved rounds of 100 timings) one row at 2 warps took 6.24 us, at 4
warps 6.45, at 8 warps 6.50 and at 16 warps 6.59, against 6.34 for ``torch.compile`` and 6.53 for
Liger; at T=32 and T=1, 2 warps were slower than 8 (5.25 against 5.02 us, 5.07 against 4.99)."""


_flush: dict[torch.device, torch.Tensor] = {}


def bench_clean_l2(kernel_call, quantiles=None, reps: int = 40, **_: object):
    """The autotuner's timer: device-event timings with the L2 flushed by a read before each call.

    Triton's default flushes with a memset, which leaves the L2 full of dirty lines whose
    write-back lands in the next timed call; the harness's :class:`~kcheck.kernels.harness.Timer`
    flushes by a read for that reason, and the autotuner now ranks candidates the same way.
    Pre- and post-hooks (``restore_value``) run inside ``kernel_call`` and so inside the timing,
    as with Triton's own timer. Returns the median, or the requested quantiles.
    """
    device = torch.device("cuda", torch.cuda.current_device())
    if device not in _flush:
        _flush[device] = torch.ones(64 << 20, dtype=torch.int32, device=device)  # 256 MiB, four L2s
    flush = _flush[device]
    kernel_call()
    torch.cuda.synchronize(device)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        flush.sum()
        start.record()
        kernel_call()
        end.record()
    torch.cuda.synchronize(device)
    times = sorted(start.elapsed_time(end) for start, end in events)
    pick = lambda q: times[min(len(times) - 1, int(q * len(times)))]  # noqa: E731
    return pick(0.5) if quantiles is None else [pick(q) for q in quantiles]


_BENCH = {"do_bench": bench_clean_l2} if "do_bench" in inspect.signature(triton.autotune).parameters else {}
"""``triton.autotune`` keyword for :func:`bench_clean_l2`, where this Triton takes one (3.2 and later)."""


def tuning(candidates: tuple[triton.Config, ...], pins: dict[int, dict[str, int]]) -> dict:
    """The ``triton.autotune`` keywords every reference kernel shares: its candidates (the first alone
    under the interpreter), the small token buckets pinned to one of them (:func:`pinned`), and the
    read-flush timer (:func:`bench_clean_l2`)."""
    return {"configs": configs(*candidates), "prune_configs_by": {"early_config_prune": pinned(candidates, pins)}, **_BENCH}


def row_grid(M: int):
    """The launch grid of a row-wise kernel: one program for each ``ROWS`` rows of ``M``."""
    return lambda meta: (triton.cdiv(M, meta["ROWS"]),)


def token_bucket(tokens: int) -> int:
    """Coarse token-count regime used as an autotune key: decode, small, medium, large batches.

    Keying on the exact count would retune for every new batch size in a serving loop.
    """
    for bound in (1, 64, 1024, 8192):
        if tokens <= bound:
            return bound
    return 65536
