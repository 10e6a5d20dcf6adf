"""``python -m kcheck.kernels verify|bench|all``: verify and benchmark the reference kernels or your own.

    python -m kcheck.kernels verify --op rms_norm --out results.json
    python -m kcheck.kernels bench --tokens 1,4096 --out results.json
    python -m kcheck.kernels all --out kernels/results/h200.json        # both, one file
    python -m kcheck.kernels verify --op rms_norm --impl mypkg.norm:my_rms_norm   # your kernel, our cases
    python -m kcheck.kernels verify --spec mypkg.norm:SPEC                          # your own KernelSpec
    python -m kcheck.kernels table kernels/results/h200.json                       # Markdown summary

Exit status: 0 when every check passed, 1 when one failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from collections import defaultdict

from kcheck.kernels import OPS, specs


def _load(ref: str, flag: str):
    module, _, attr = ref.partition(":")
    if not attr:
        raise SystemExit(f"{flag} {ref!r}: expected MODULE:ATTRIBUTE")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"{flag} {ref!r}: {exc}") from exc


def _specs(args):
    chosen = [_load(ref, "--spec") for ref in args.spec] if args.spec else specs(args.op or None)
    if args.impl:
        if len(chosen) != 1:
            raise SystemExit("--impl replaces one op's implementation: name exactly one --op")
        chosen = [dataclasses.replace(chosen[0], impl=_load(args.impl, "--impl"))]
    return chosen


def _print_checks(checks) -> None:
    print(f"{'op':22} {'dtype':9} {'case':18} {'ok':4} {'rel_err':>9} {'max_abs':>9} graph  detail")
    for c in checks:
        rel = f"{c.rel_err:9.2e}" if c.rel_err is not None else " " * 9
        mabs = f"{c.max_abs_err:9.2e}" if c.max_abs_err is not None else " " * 9
        print(f"{c.op:22} {c.dtype:9} {c.case:18} {'yes' if c.passed else 'NO':4} {rel} {mabs} "
              f"{str(c.graph_replay):6} {c.detail}")


def _print_rows(rows) -> None:
    best_peer: dict[tuple, float] = defaultdict(lambda: float("inf"))
    for r in rows:
        if r["impl"] != "kcheck" and r.get("same_op", True):  # a peer that does less is never the best peer
            key = (r["op"], r["dtype"], r["tokens"])
            best_peer[key] = min(best_peer[key], r["median_us"])
    print(f"{'op':22} {'dtype':9} {'T':>6} {'impl':14} {'us':>9} {'GB/s':>8} {'copy':>6} {'sheet':>6} {'best peer/us':>12}")
    for r in rows:
        key = (r["op"], r["dtype"], r["tokens"])
        ratio = f"{best_peer[key] / r['median_us']:12.2f}" if r["impl"] == "kcheck" and key in best_peer else ""
        sheet = f"{r['frac_datasheet']:6.2f}" if r["frac_datasheet"] is not None else ""
        print(f"{r['op']:22} {r['dtype']:9} {r['tokens']:6} {r['impl']:14} {r['median_us']:9.2f} {r['gbps']:8.0f} "
              f"{r['frac_copy']:6.2f} {sheet} {ratio}{'' if r.get('same_op', True) else '  (not the same op)'}")


def _print_autotune(chosen) -> None:
    """The configuration the autotuner picked for each key, so results can be explained."""
    import triton

    for spec in chosen:
        module = sys.modules.get(spec.impl.__module__)
        for name, obj in vars(module or object()).items():
            if isinstance(obj, triton.runtime.Autotuner):
                for key, config in obj.cache.items():
                    print(f"autotune {spec.name}.{name} key={key}: {config}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kcheck.kernels", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("verify", "bench", "all", "table"))
    parser.add_argument("results", nargs="?", help="results JSON (table only)")
    parser.add_argument("--op", action="append", choices=OPS, help="op to run (repeatable; default all)")
    parser.add_argument("--spec", action="append", help="MODULE:ATTR of your own KernelSpec (repeatable)")
    parser.add_argument("--impl", help="MODULE:FUNCTION replacing the implementation of the one --op")
    parser.add_argument("--dtype", action="append", help="dtype(s) to verify/bench (default: the spec's; bench: bfloat16)")
    parser.add_argument("--tokens", help="comma-separated token counts to bench (default: the spec's shapes)")
    parser.add_argument("--impls", help="comma-separated implementations to bench: kcheck,torch,torch.compile,liger")
    parser.add_argument("--no-large", action="store_true", help="skip the cases marked large")
    parser.add_argument("--commit", help="kcheck commit to record (default: $KCHECK_COMMIT or git rev-parse HEAD)")
    parser.add_argument("--out", help="write the results JSON here")
    args = parser.parse_args(argv)

    if args.command == "table":
        if not args.results:
            parser.error("table needs a results JSON file")
        from kcheck.kernels.harness import summary_table

        with open(args.results) as f:
            print(summary_table(json.load(f)))
        return 0

    import torch

    from kcheck.kernels import harness

    chosen = _specs(args)
    result = {**harness.environment(args.commit), "ceilings": {"copy_gbps": None, "datasheet_gbps": None},
              "rows": [], "other_rows": [], "verify": []}
    failed = False
    if args.command in ("verify", "all"):
        checks = []
        for spec in chosen:
            checks += harness.verify(spec, dtypes=args.dtype, include_large=False if args.no_large else None)
            _print_checks(checks[-len(spec.cases) * len(args.dtype or spec.dtypes):])
        result["verify"] = [c.to_json() for c in checks]
        failed = not all(c.passed for c in checks)
    if args.command in ("bench", "all"):
        if not torch.cuda.is_available():
            print("bench needs a CUDA GPU", file=sys.stderr)
            return 2
        timer = harness.Timer(torch.device("cuda"))
        copy = harness.copy_ceiling_gbps(timer)
        sheet = harness.DATASHEET_GBPS.get(torch.cuda.get_device_name())
        result["ceilings"] = {"copy_gbps": round(copy, 1), "datasheet_gbps": sheet}
        print(f"ceilings: device-to-device copy {copy:.0f} GB/s, datasheet {sheet} GB/s")
        tokens = [int(t) for t in args.tokens.split(",")] if args.tokens else None
        impls = args.impls.split(",") if args.impls else None
        for spec in chosen:
            for dtype in args.dtype or ["bfloat16"]:
                rows = harness.bench(spec, dtype, tokens, impls, timer, copy, sheet)
                _print_rows(rows)
                result["rows"] += [r for r in rows if r.get("same_op", True)]
                result["other_rows"] += [r for r in rows if not r.get("same_op", True)]
        _print_autotune(chosen)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
