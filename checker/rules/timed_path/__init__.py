"""KC2xx: logging and host syncs in timed and per-step paths.

The rules of this family share one question, "which calls run inside this region, directly or
through a same-module helper", answered here over the module model's timed regions.
"""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

TIMED = ("event-window", "bench-callable", "host-timer")
SYNC_NAMES = {"synchronize", "item", "cpu", "tolist", "numpy", "nonzero", "where", "unique",
              "masked_select", "repeat_interleave"}
TIMER_NAMES = {"record", "perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
               "default_timer", "do_bench", "do_bench_cudagraph", "bench_gpu_time", "benchmark_fn"}
LOG_NAMES = {"print", "logger", "log", "logging", "LOGGER", "_logger", "_LOGGER", "LOG", "warn", "warnings", "write"}
COMPILE_NAMES = {"compile", "optimize", "load_inline", "load"}
SYNC_TEXT = r"synchronize|\.item\(|\.cpu\(|\.tolist\(|\.numpy\(|nonzero|where\(|unique|masked_select|repeat_interleave|['\"]cpu['\"]"
TIMER_TEXT = r"\.record\(|perf_counter|time\(|monotonic|default_timer|do_bench|bench_gpu_time|benchmark_fn"


def timed_gate(summary, wanted: set[str]) -> bool:
    """A scope that starts a timer and reaches one of ``wanted``; event windows and host timers
    count only in measurement code (see :meth:`kcheck.model.ModuleModel.in_measurement_code`)."""
    from kcheck.model import BENCH_TIMERS, MEASUREMENT_FUNCTION, MEASUREMENT_PATH

    measuring = bool(MEASUREMENT_PATH.search(summary.path))
    return any(
        (s.names & BENCH_TIMERS or (s.names & TIMER_NAMES and (measuring or MEASUREMENT_FUNCTION.match(s.name))))
        and summary.reaches(s, wanted)
        for s in summary.scopes())


def graph_gate(summary, wanted: set[str]) -> bool:
    return any("graph" in s.names and summary.reaches(s, wanted) for s in summary.scopes())


def hot_gate(summary, config, wanted: set[str]) -> bool:
    return any(config.is_hot_path(f.name) and summary.reaches(f, wanted) for f in summary.functions)


def region_calls(model, kinds: tuple[str, ...]) -> Iterator[tuple[object, cst.Call, cst.Call | None]]:
    """(region, call, via) for every call inside a region of one of ``kinds``, each call once."""
    seen: set[int] = set()
    for region in model.timed_regions:
        if region.kind not in kinds:
            continue
        roots = [n for n in region.nodes if id(n) not in region.exempt]
        for call, via in model.calls_in(roots):
            if id(call) not in seen:
                seen.add(id(call))
                yield region, call, via


def report_calls(rule, kinds: tuple[str, ...], classify: Callable, template: str) -> None:
    """Report each call in ``kinds`` regions that ``classify(call)`` names, at the call or at the helper call."""
    model = rule.model
    for region, call, via in region_calls(model, kinds):
        what = classify(call)
        if not what:
            continue
        where = via if via is not None else call
        helper = f" (inside {model.dotted(via.func)}())" if via is not None else ""
        rule.report(where, template.format(what=what, helper=helper, region=region.label))
