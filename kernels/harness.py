"""Verify and benchmark any kernel described by a :class:`KernelSpec`.

``verify`` checks an implementation against its upcast torch reference on every case:
fresh random inputs per check (catalog: verification/fresh-random-inputs), outputs
poisoned with NaN before the run and checked fully written (verification/poisoned-outputs),
NaN never passes (verification/nan-never-passes), the error as ``‖out − ref‖ / ‖ref‖`` and as
an elementwise ``|out − ref| ≤ atol + rtol·|ref|`` against a per-dtype table
(verification/tolerances-by-dtype, verification/upcast-reference), and on a GPU a
CUDA-graph capture whose replay on new inputs must match too (verification/graph-replay,
triton-cuda/cuda-graph-capture).

``bench`` times the implementation and its peers in one process: the median of device-event
timings (measuring/median-of-device-events), the L2 flushed before every run
(measuring/l2-flushing), warm-up, compilation and autotuning done before the first timed run
(measuring/warmup-and-compilation), nothing else inside the timed region
(measuring/keep-timed-path-clean). Achieved GB/s is reported against a device-to-device copy
measured in the same run and against the datasheet (measuring/achievable-bandwidth).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import os
import platform
import secrets
import statistics
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from kcheck.kernels import rounded_down

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DATASHEET_GBPS = {"NVIDIA H200": 4800.0, "NVIDIA H100 80GB HBM3": 3350.0}
"""Datasheet HBM bandwidth by device name (H200 and H100 SXM product briefs, see knowledge/hardware)."""


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """How far an output may be from the reference: normwise ``rel``, elementwise ``atol + rtol·|ref|``."""

    rel: float
    atol: float
    rtol: float


@dataclasses.dataclass(frozen=True)
class Case:
    """One input configuration at a regime boundary, with the reason it is there."""

    name: str
    reason: str
    shape: Mapping[str, int]
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    large: bool = False
    """Too large for the CPU interpreter: verified on a GPU only."""


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """Everything the harness needs to verify and measure one op.

    ``impl`` and ``reference`` take the keyword arguments that ``make_inputs`` returns and
    return the op's outputs (a tensor or a tuple). ``tolerances`` gives, by dtype, one
    :class:`Tolerance` for all outputs or a tuple of one per output (after ``readout``). ``out_args`` names the arguments the
    implementation writes into; they are poisoned with NaN before each run. ``readout``
    turns outputs into float tensors to compare (identity by default). ``peers`` maps a
    name to a factory that takes the inputs and returns a zero-argument callable (or None
    when the peer cannot run), so that setup stays out of the timed region; a peer must do the
    whole op, as the implementation's caller would have to call it. ``peer_reference`` is what
    the ``torch`` and ``torch.compile`` peers run (``reference`` by default): an op that writes
    in place gives one that writes in place too. ``other_peers`` are timed and reported beside
    the peers but never taken as the best peer, because they do less than the op (for example
    Liger's RoPE given cos and sin already gathered by position).
    """

    name: str
    impl: Callable[..., Any]
    reference: Callable[..., Any]
    make_inputs: Callable[..., dict[str, Any]]
    cases: tuple[Case, ...]
    bench_shapes: tuple[Mapping[str, int], ...]
    tolerances: Mapping[str, Tolerance | tuple[Tolerance, ...]]
    bytes: Callable[[Mapping[str, int], torch.dtype], int]
    flops: Callable[[Mapping[str, int]], int]
    catalog: tuple[str, ...]
    fallbacks: tuple[str, ...]
    out_args: tuple[str, ...] = ()
    readout: Callable[[tuple[torch.Tensor, ...]], tuple[torch.Tensor, ...]] | None = None
    peers: Mapping[str, Callable[[dict[str, Any]], Callable[[], Any] | None]] = dataclasses.field(
        default_factory=dict
    )
    peer_reference: Callable[..., Any] | None = None
    other_peers: Mapping[str, Callable[[dict[str, Any]], Callable[[], Any] | None]] = dataclasses.field(
        default_factory=dict
    )
    min_capability: tuple[int, int] = (8, 0)
    dtypes: tuple[str, ...] = ("bfloat16", "float16")


@dataclasses.dataclass
class Check:
    """The outcome of one verification; ``detail`` says why it failed."""

    op: str
    dtype: str
    case: str
    reason: str
    passed: bool
    rel_err: float | None
    max_abs_err: float | None
    graph_replay: bool | None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)
        row.pop("detail")
        return row


# --------------------------------------------------------------------------- verification


def _as_tuple(x: Any) -> tuple[torch.Tensor, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _clone(inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def poison(t: torch.Tensor) -> None:
    """Fill ``t`` with NaN (or, for integer tensors, the largest value) so unwritten elements show."""
    if t.dtype.is_floating_point:
        t.fill_(float("nan"))
    else:
        t.fill_(torch.iinfo(t.dtype).max)


def compare(
    got: tuple[torch.Tensor, ...], ref: tuple[torch.Tensor, ...], tol: Tolerance | tuple[Tolerance, ...]
) -> tuple[bool, float, float, str]:
    """Return (passed, rel_err, max_abs_err, detail) over all outputs, computed in float64.

    ``tol`` is one tolerance for every output, or a tuple with one per output (an op whose outputs
    are of different kinds, such as e4m3 values counted in steps beside fp32 scales)."""
    if len(got) != len(ref):
        return False, float("nan"), float("nan"), f"{len(got)} outputs, reference has {len(ref)}"
    tols = tol if isinstance(tol, tuple) else (tol,) * len(got)
    if len(tols) != len(got):
        return False, float("nan"), float("nan"), f"{len(tols)} tolerances for {len(got)} outputs"
    rel_err = max_abs = 0.0
    for i, (o, r, tol) in enumerate(zip(got, ref, tols)):
        if o.shape != r.shape:
            return False, float("nan"), float("nan"), f"output {i}: shape {tuple(o.shape)} != {tuple(r.shape)}"
        o, r = o.double(), r.double()
        if torch.isnan(o).any():
            return False, float("nan"), float("nan"), f"output {i}: {int(torch.isnan(o).sum())} NaN"
        finite = torch.isfinite(r)
        if not torch.equal(o[~finite], r[~finite]):
            return False, float("nan"), float("nan"), f"output {i}: non-finite values differ from the reference"
        diff = (o - r)[finite]
        if diff.numel() and not torch.isfinite(diff).all():
            return False, float("inf"), float("inf"), f"output {i}: infinite where the reference is finite"
        norm = torch.linalg.vector_norm(r[finite])
        dnorm = torch.linalg.vector_norm(diff)
        rel = float(dnorm / norm) if norm > 0 else float(dnorm)
        mabs = float(diff.abs().max()) if diff.numel() else 0.0
        rel_err, max_abs = max(rel_err, rel), max(max_abs, mabs)
        bad = diff.abs() > tol.atol + tol.rtol * r[finite].abs()
        if rel > tol.rel:
            return False, rel_err, max_abs, f"output {i}: rel_err {rel:.3g} > {tol.rel:.3g}"
        if bad.any():
            return False, rel_err, max_abs, (
                f"output {i}: {int(bad.sum())} elements beyond atol {tol.atol:g} + rtol {tol.rtol:g}·|ref|"
            )
    return True, rel_err, max_abs, ""


def _check_once(
    spec: KernelSpec, dtype: torch.dtype, device: torch.device, inputs: dict[str, Any], run: Callable
) -> tuple[bool, float, float, str]:
    """Poison the outputs, run, and compare with the reference on the same inputs."""
    ref = _as_tuple(spec.reference(**_clone(inputs)))
    buffers = [inputs[name] for name in spec.out_args if isinstance(inputs.get(name), torch.Tensor)]
    for b in buffers:
        poison(b)
    got = _as_tuple(run())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    for name, b in zip(spec.out_args, buffers):
        if b.dtype.is_floating_point and torch.isnan(b.float()).any():
            return False, float("nan"), float("nan"), f"'{name}' not fully written ({int(torch.isnan(b.float()).sum())} NaN left)"
    readout = spec.readout or (lambda outs: tuple(t.float() for t in outs))
    return compare(readout(got), readout(ref), spec.tolerances[str(dtype).removeprefix("torch.")])


def _fresh_inputs(spec: KernelSpec, case: Case, dtype: torch.dtype, device: torch.device) -> dict[str, Any]:
    gen = torch.Generator(device=device)
    gen.manual_seed(secrets.randbits(63))
    return spec.make_inputs(case.shape, dtype, device, gen, **case.options)


def verify_case(
    spec: KernelSpec, case: Case, dtype: str, device: torch.device | str | None = None, graph: bool | None = None
) -> Check:
    """Verify ``spec.impl`` on one case; on CUDA also capture it in a graph and replay on new inputs."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    graph = device.type == "cuda" if graph is None else graph
    tdtype = DTYPES[dtype]
    inputs = _fresh_inputs(spec, case, tdtype, device)
    passed, rel, mabs, detail = _check_once(spec, tdtype, device, inputs, functools.partial(spec.impl, **inputs))
    replayed: bool | None = None
    if passed and graph:
        replayed, detail = _graph_replay(spec, case, tdtype, device, inputs)
        passed = replayed
    del inputs

    def known(x: float) -> float | None:  # NaN (not computed) is not valid JSON: record it as null
        return None if x != x else x

    return Check(spec.name, dtype, case.name, case.reason, passed, known(rel), known(mabs), replayed, detail)


def _graph_replay(
    spec: KernelSpec, case: Case, dtype: torch.dtype, device: torch.device, static: dict[str, Any]
) -> tuple[bool, str]:
    """Capture the implementation on ``static``, refill it with fresh inputs, replay, compare."""
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            captured = spec.impl(**static)
    except Exception as exc:  # capture failures are verification failures, reported with their cause
        return False, f"graph capture failed: {type(exc).__name__}: {exc}"
    fresh = _fresh_inputs(spec, case, dtype, device)
    for k, v in fresh.items():
        if isinstance(v, torch.Tensor) and k not in spec.out_args:
            static[k].copy_(v)

    def replay() -> Any:
        g.replay()
        return captured

    ok, _, _, detail = _check_once(spec, dtype, device, static, replay)
    return ok, ("graph replay: " + detail) if detail else ""


def verify(
    spec: KernelSpec,
    dtypes: Sequence[str] | None = None,
    device: torch.device | str | None = None,
    include_large: bool | None = None,
    graph: bool | None = None,
) -> list[Check]:
    """Verify every case of ``spec`` for each dtype; large cases only on a GPU unless asked."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    include_large = device.type == "cuda" if include_large is None else include_large
    checks = []
    for dtype in dtypes or spec.dtypes:
        for case in spec.cases:
            if case.large and not include_large:
                continue
            checks.append(verify_case(spec, case, dtype, device, graph))
    return checks


# --------------------------------------------------------------------------- benchmarking


class Timer:
    """Median of device-event timings with the L2 flushed before each run.

    The flush reads a buffer several times the L2 (a sum), so the cache is left holding clean
    lines: a memset would leave it full of dirty ones, whose write-back then lands inside the
    next timed region (about 7 us of a 62 us RMSNorm on an H200, measured against ncu).
    """

    def __init__(self, device: torch.device, flush_bytes: int = 512 << 20, reps: int = 100, warmup: int = 10):
        self.device = device
        self.flush = torch.ones(flush_bytes // 4, dtype=torch.int32, device=device)
        self.reps, self.warmup = reps, warmup

    def median_us(self, fn: Callable[[], Any]) -> float:
        for _ in range(self.warmup):  # compilation, autotuning and allocator warm-up happen here
            fn()
        torch.cuda.synchronize(self.device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for start, end in zip(starts, ends):
            self.flush.sum()  # evicts the previous run's data; its duration also hides the launch latency
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(self.device)
        return 1e3 * statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def interleaved(fns: Mapping[str, Callable[[], Any]], rounds: int, timer: Timer) -> dict[str, list[float]]:
    """Each callable's median time (``timer.median_us``) in each of ``rounds`` rounds, the callables
    taken in turn within a round, so that drift in clocks or temperature falls on all of them."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(timer.median_us(fn))
    return times


def seeded_inputs(spec: KernelSpec, tokens: Sequence[int], device: torch.device, dtype: torch.dtype = torch.bfloat16):
    """``(shape, inputs)`` for each of ``spec.bench_shapes`` whose token count is in ``tokens``, the
    inputs drawn from a generator seeded with that count: the benchmark scripts' inputs, the same
    from run to run (the harness's own :func:`bench` draws a fresh seed instead)."""
    for shape in spec.bench_shapes:
        if shape["tokens"] not in tokens:
            continue
        gen = torch.Generator(device=device)
        gen.manual_seed(shape["tokens"])
        yield shape, spec.make_inputs(shape, dtype, device, gen)


def copy_ceiling_gbps(timer: Timer, nbytes: int = 2 << 30) -> float:
    """Bandwidth of a large device-to-device copy, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=timer.device).uniform_()
    dst = torch.empty_like(src)
    us = timer.median_us(lambda: dst.copy_(src))
    return 2 * nbytes / (us * 1e3)


def _compiled(fn: Callable[..., Any]) -> Callable[[dict[str, Any]], Callable[[], Any]]:
    compiled = torch.compile(fn)
    return lambda inputs: (lambda: compiled(**inputs))


def peers(spec: KernelSpec, names: Sequence[str] | None = None) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """The implementation, its peers and its other peers, each a factory from inputs to a zero-argument callable."""
    op = spec.peer_reference or spec.reference
    impls: dict[str, Callable[[dict[str, Any]], Any]] = {
        "kcheck": lambda inputs: (lambda: spec.impl(**inputs)),
        "torch": lambda inputs: (lambda: op(**inputs)),
        "torch.compile": _compiled(op),
        **spec.peers,
        **spec.other_peers,
    }
    if names is not None:
        impls = {k: v for k, v in impls.items() if k in names}
    return impls


def bench(
    spec: KernelSpec,
    dtype: str = "bfloat16",
    tokens: Sequence[int] | None = None,
    impls: Sequence[str] | None = None,
    timer: Timer | None = None,
    copy_gbps: float | None = None,
    datasheet_gbps: float | None = None,
) -> list[dict[str, Any]]:
    """Time the implementation and its peers on ``spec.bench_shapes`` (optionally only ``tokens``).

    Rows of ``spec.other_peers`` carry ``"same_op": False``; results files keep them apart, under
    ``other_rows``, so that no reader takes them for a peer.
    """
    device = torch.device("cuda")
    timer = timer or Timer(device)
    copy_gbps = copy_gbps or copy_ceiling_gbps(timer)
    datasheet_gbps = datasheet_gbps or DATASHEET_GBPS.get(torch.cuda.get_device_name(device))
    tdtype = DTYPES[dtype]
    rows = []
    factories = peers(spec, impls)
    for shape in spec.bench_shapes:
        if tokens is not None and shape["tokens"] not in tokens:
            continue
        gen = torch.Generator(device=device)
        gen.manual_seed(secrets.randbits(63))
        inputs = spec.make_inputs(shape, tdtype, device, gen)
        nbytes = spec.bytes(shape, tdtype)
        for name, factory in factories.items():
            fn = factory(_clone(inputs))
            if fn is None:
                continue
            us = timer.median_us(fn)
            gbps = nbytes / (us * 1e3)
            rows.append({
                "op": spec.name, "dtype": dtype, "tokens": shape["tokens"], "shape": dict(shape), "impl": name,
                "median_us": round(us, 3), "gbps": round(gbps, 1),
                "frac_copy": round(gbps / copy_gbps, 4),
                "frac_datasheet": round(gbps / datasheet_gbps, 4) if datasheet_gbps else None,
                **({"same_op": False} if name in spec.other_peers else {}),
            })
            del fn
    return rows


# --------------------------------------------------------------------------- provenance


def environment(commit: str | None = None) -> dict[str, Any]:
    """GPU, driver, library versions, kcheck commit and date for a results file."""
    import triton

    gpu = driver = None
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
        try:
            driver = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, check=True, timeout=30,
            ).stdout.split()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            driver = None
    if commit is None:
        commit = os.environ.get("KCHECK_COMMIT")
    if commit is None:
        try:
            commit = subprocess.run(
                ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=30,
                cwd=os.path.dirname(os.path.abspath(__file__)),
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            commit = None
    return {
        "kcheck_commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": gpu or f"none ({platform.processor() or platform.machine()})",
        "driver": driver,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
    }


def summary_table(result: Mapping[str, Any], dtype: str = "bfloat16") -> str:
    """A Markdown table of a results file: kcheck against the fastest peer at each (op, tokens).

    Ratios and fractions are rounded down, so that no figure reads as meeting a goal it misses.
    Peers that do less than the op (``other_rows``) follow in a second table and are never the best peer.
    """
    lines = [
        "| op | T | kcheck µs | best peer | peer µs | speed-up | kcheck GB/s | of copy | of datasheet |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in result["rows"]:
        if row["dtype"] == dtype and row.get("same_op", True):
            groups.setdefault((row["op"], row["tokens"]), []).append(row)
    for (op, tokens), rows in groups.items():
        ours = next((r for r in rows if r["impl"] == "kcheck"), None)
        others = [r for r in rows if r["impl"] != "kcheck"]
        if ours is None or not others:
            continue
        peer = min(others, key=lambda r: r["median_us"])
        sheet = f"{rounded_down(100 * ours['frac_datasheet'], 1)}%" if ours["frac_datasheet"] is not None else "–"
        lines.append(
            f"| {op} | {tokens} | {ours['median_us']:.2f} | {peer['impl']} | {peer['median_us']:.2f} | "
            f"{rounded_down(peer['median_us'] / ours['median_us'], 2)} | {ours['gbps']:.0f} | "
            f"{rounded_down(100 * ours['frac_copy'], 1)}% | {sheet} |"
        )
    other = [r for r in result.get("other_rows", []) if r["dtype"] == dtype]
    if other:
        lines += [
            "",
            "| op | T | not the same op | its µs | kcheck µs | its µs ÷ kcheck µs |",
            "|---|---:|---|---:|---:|---:|",
        ]
        for r in other:
            ours = groups.get((r["op"], r["tokens"]), [])
            own = next((o for o in ours if o["impl"] == "kcheck"), None)
            if own is not None:
                lines.append(f"| {r['op']} | {r['tokens']} | {r['impl']} | {r['median_us']:.2f} | "
                             f"{own['median_us']:.2f} | {rounded_down(r['median_us'] / own['median_us'], 2)} |")
    return "\n".join(lines)
