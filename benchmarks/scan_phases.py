"""Where a cold scan's time goes: each phase of ``check_source`` timed over a whole tree, one process.

    python benchmarks/scan_phases.py TREE [--every N]

Reads every file kcheck would scan (``--every N``: each N-th), then checks them one after the
other in this process, with the engine's phases wrapped in timers: the ``ast`` parse, the gates'
summary, the libcst parse, the model, the rules' walk, the positions of what they report and the cycle
collector's pass after each file.
What is left of the total is the prefilters, the gates themselves, the suppression comments and
the engine's own bookkeeping. One process, no cache: the figures add up to the CPU time a cold scan
spends on checking, without the process pool's start-up and hand-overs.
"""

from __future__ import annotations

import argparse
import ast
import gc
import time
from collections import defaultdict
from pathlib import Path

import kcheck.engine as engine
import kcheck.gate as gate
import kcheck.model as model
import kcheck.positions as positions

PHASES = (  # (module, function, phase)
    (ast, "parse", "ast parse"),
    (gate, "summarize", "summary for the gates"),
    (engine, "parse_cst", "libcst parse"),
    (model, "build_model", "model"),
    (engine, "_dispatch", "rules"),
    (positions, "resolve", "positions"),
    (gc, "collect", "cycle collector"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree")
    parser.add_argument("--every", type=int, default=1)
    args = parser.parse_args()
    seconds: dict[str, float] = defaultdict(float)
    for owner, name, phase in PHASES:
        def timed(*a, _fn=getattr(owner, name), _phase=phase, **k):
            start = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                seconds[_phase] += time.perf_counter() - start
        setattr(owner, name, timed)
    jobs, _ = engine.discover([args.tree])
    sources = []
    for job in jobs[::args.every]:
        try:
            sources.append((job, Path(job.path).read_text("utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    start = time.perf_counter()
    findings = parsed = 0
    for job, source in sources:
        with engine.collector_paused():  # as ``check_job`` runs it in a scan
            result = engine.check_source(source, job.rel, job.config, config_rel=job.config_rel)
        findings += len(result.findings)
        parsed += result.parsed
    total = time.perf_counter() - start
    print(f"{len(sources)} files, {parsed} parsed with libcst, {findings} findings, {total:.1f} s in one process")
    for _, _, phase in PHASES:
        print(f"  {phase:24s} {seconds[phase]:6.1f} s")
    print(f"  {'everything else':24s} {total - sum(seconds.values()):6.1f} s")


if __name__ == "__main__":
    main()
