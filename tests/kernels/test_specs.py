"""Every reference kernel against its upcast reference on every small case, in both dtypes."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcheck.kernels import OPS, specs
from kcheck.kernels.harness import verify_case

SPECS = specs()
KNOWLEDGE = Path(__file__).resolve().parents[2] / "knowledge"
PARAMS = [
    pytest.param(spec, case, dtype, id=f"{spec.name}-{case.name}-{dtype}")
    for spec in SPECS
    for case in spec.cases
    if not case.large
    for dtype in spec.dtypes
]


@pytest.mark.parametrize(("spec", "case", "dtype"), PARAMS)
def test_kernel_matches_reference(spec, case, dtype):
    check = verify_case(spec, case, dtype, device="cpu")
    assert check.passed, f"{spec.name}/{case.name}/{dtype}: {check.detail}"
    assert check.graph_replay is None  # no CUDA graphs on the CPU; a GPU run fills this in


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_spec_is_complete(spec):
    assert spec.name in OPS
    assert spec.impl.__module__ == f"kcheck.kernels.{spec.name}"
    assert {c.name for c in spec.cases} and len({c.name for c in spec.cases}) == len(spec.cases)
    assert all(c.reason for c in spec.cases)
    assert any(c.large for c in spec.cases), "the largest shape must be among the cases"
    assert any(not c.large for c in spec.cases), "the CPU interpreter needs small cases"
    assert set(spec.dtypes) <= set(spec.tolerances)
    assert [s["tokens"] for s in spec.bench_shapes] == [1, 32, 256, 4096, 16384]
    assert spec.fallbacks and spec.catalog
    import torch

    sizes = [spec.bytes(s, torch.bfloat16) for s in spec.bench_shapes]
    assert all(b > 0 for b in sizes) and sizes == sorted(sizes)


@pytest.mark.parametrize("catalog_id", sorted({c for s in SPECS for c in s.catalog}))
def test_cited_catalog_entries_exist(catalog_id):
    assert (KNOWLEDGE / f"{catalog_id}.yaml").is_file(), f"kernels cite {catalog_id}, which the catalog lacks"
