"""``python -m kcheck.kernels``, the committed results file and the README table drawn from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kcheck.kernels import FUSED_FP8_OPS, OPS
from kcheck.kernels.__main__ import main
from kcheck.kernels.harness import summary_table

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "kernels" / "results" / "h200.json"
FUSED_RESULTS = REPO / "kernels" / "results" / "h200_fused_fp8.json"
COMMITTED = {RESULTS: tuple(op for op in OPS if op not in FUSED_FP8_OPS), FUSED_RESULTS: FUSED_FP8_OPS}
"""Each committed results file and the ops it covers: the fused FP8 ops were added (issue 26) and
run after the results of the first five, in a run of their own."""
KEYS = {"kcheck_commit", "date", "gpu", "driver", "torch", "triton", "cuda", "ceilings", "rows", "other_rows", "verify"}


def test_verify_writes_a_results_file(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["verify", "--op", "silu_and_mul", "--dtype", "float16", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result) == KEYS
    assert result["verify"] and all(c["passed"] and c["op"] == "silu_and_mul" for c in result["verify"])
    assert set(result["verify"][0]) == {"op", "dtype", "case", "reason", "passed", "rel_err", "max_abs_err", "graph_replay"}
    assert "odd-intermediate" in capsys.readouterr().out


def test_verify_of_a_broken_user_kernel_exits_1(tmp_path):
    mod = tmp_path / "user_kernels.py"
    mod.write_text("def wrong(x, weight, eps=1e-6, out=None):\n    return out.copy_(x)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert main(["verify", "--op", "rms_norm", "--dtype", "float16", "--impl", "user_kernels:wrong"]) == 1
    finally:
        sys.path.remove(str(tmp_path))


def test_bad_impl_reference_is_a_usage_error():
    with pytest.raises(SystemExit, match="MODULE:ATTRIBUTE"):
        main(["verify", "--op", "rms_norm", "--impl", "no_colon"])


def test_bench_without_a_gpu_exits_2():
    assert main(["bench", "--op", "rms_norm"]) == 2


def test_package_import_loads_neither_torch_nor_triton():
    code = "import sys, kcheck, kcheck.kernels; print('torch' in sys.modules, 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_every_op_has_committed_results():
    assert sorted(op for ops in COMMITTED.values() for op in ops) == sorted(OPS)


@pytest.mark.parametrize("path", list(COMMITTED), ids=[p.name for p in COMMITTED])
def test_committed_results_cover_every_op_shape_and_peer(path):
    ops = COMMITTED[path]
    result = json.loads(path.read_text())
    assert set(result) == KEYS and result["gpu"] == "NVIDIA H200"
    assert result["ceilings"]["copy_gbps"] > 0 and result["ceilings"]["datasheet_gbps"] == 4800
    verified = {(c["op"], c["dtype"]) for c in result["verify"]}
    assert verified == {(op, dt) for op in ops for dt in ("bfloat16", "float16")}
    assert all(c["passed"] and c["graph_replay"] for c in result["verify"])
    timed = {(r["op"], r["tokens"], r["impl"]) for r in result["rows"]}
    peers = {"kcheck", "torch", "torch.compile"} | ({"unfused"} if path == FUSED_RESULTS else set())
    for op in ops:
        for tokens in (1, 32, 256, 4096, 16384):
            assert {(op, tokens, impl) for impl in peers} <= timed
    if path == FUSED_RESULTS:  # the same-pattern mover, the ceiling, beside every shape
        movers = {(r["op"], r["tokens"]) for r in result["other_rows"] if r["impl"] == "mover"}
        assert movers == {(op, t) for op in ops for t in (1, 32, 256, 4096, 16384)}
    for r in result["rows"]:
        assert r["gbps"] == pytest.approx(r["frac_copy"] * result["ceilings"]["copy_gbps"], rel=1e-2, abs=0.5)


@pytest.mark.parametrize("path", list(COMMITTED), ids=[p.name for p in COMMITTED])
def test_readme_table_is_drawn_from_the_committed_results(path):
    table = summary_table(json.loads(path.read_text()))
    assert table in (REPO / "kernels" / "README.md").read_text()


def test_the_summary_never_rounds_a_miss_up_to_the_goal():
    row = {"op": "silu_and_mul", "dtype": "bfloat16", "tokens": 32, "gbps": 4222.0}
    result = {"rows": [{**row, "impl": "kcheck", "median_us": 4.82, "frac_copy": 0.9924, "frac_datasheet": 0.8797},
                       {**row, "impl": "torch.compile", "median_us": 4.80, "frac_copy": 0.99, "frac_datasheet": 0.88}]}
    assert "| silu_and_mul | 32 | 4.82 | torch.compile | 4.80 | 0.99 | 4222 | 99.2% | 87.9% |" in summary_table(result)


def test_a_peer_that_does_less_than_the_op_is_never_the_best_peer():
    row = {"op": "rotary_embedding", "dtype": "bfloat16", "tokens": 1, "gbps": 4.0, "frac_copy": 0.001, "frac_datasheet": 0.001}
    result = {"rows": [{**row, "impl": "kcheck", "median_us": 5.0}, {**row, "impl": "liger", "median_us": 8.0}],
              "other_rows": [{**row, "impl": "liger-pregathered", "median_us": 4.0, "same_op": False}]}
    table = summary_table(result)
    assert "| rotary_embedding | 1 | 5.00 | liger | 8.00 | 1.60 |" in table
    assert "| rotary_embedding | 1 | liger-pregathered | 4.00 | 5.00 | 0.80 |" in table
