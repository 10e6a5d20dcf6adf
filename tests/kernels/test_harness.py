"""The harness must reject broken kernels: a skipped tail block, NaN, an error just past tolerance."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import triton

from kcheck.kernels import rms_norm as rms_mod
from kcheck.kernels import silu_and_mul as silu_mod
from kcheck.kernels._launch import token_bucket
from kcheck.kernels.harness import Case, Tolerance, compare, poison, verify, verify_case

TAIL = next(c for c in rms_mod.SPEC.cases if c.name == "tail-rows")


def skips_last_block(x, weight, eps=1e-6, out=None):
    """The real kernel launched with one program too few: the last row is never written."""
    M, N = x.shape
    rms_mod._rms_norm_kernel[(M - 1,)](
        x, weight, out, x.stride(0), out.stride(0), M, N, eps, token_bucket(M), BLOCK_N=triton.next_power_of_2(N)
    )
    return out


def writes_one_nan(x, weight, eps=1e-6, out=None):
    rms_mod.rms_norm(x, weight, eps, out=out)
    out[-1, -1] = float("nan")
    return out


def off_by(factor):
    def impl(x, weight, eps=1e-6, out=None):
        return out.copy_(rms_mod.reference(x, weight, eps).float() * factor)

    return impl


def ignores_out(x, weight, eps=1e-6, out=None):
    """Right values, but in a new tensor: the caller's buffer is never written."""
    return rms_mod.reference(x, weight, eps)


def broken(impl):
    return dataclasses.replace(rms_mod.SPEC, impl=impl)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_rejects_skipped_tail_block(dtype):
    check = verify_case(broken(skips_last_block), TAIL, dtype, device="cpu")
    assert not check.passed
    assert "not fully written" in check.detail


def test_rejects_single_nan():
    check = verify_case(broken(writes_one_nan), TAIL, "float16", device="cpu")
    assert not check.passed
    assert "NaN" in check.detail


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_rejects_error_just_past_tolerance(dtype):
    tol = rms_mod.SPEC.tolerances[dtype]
    check = verify_case(broken(off_by(1 + 3 * tol.rel)), TAIL, dtype, device="cpu")
    assert not check.passed
    assert check.rel_err > tol.rel


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_accepts_error_well_inside_tolerance(dtype):
    """The same harness passes a result that differs from the reference by rounding alone."""
    check = verify_case(broken(off_by(1.0)), TAIL, dtype, device="cpu")
    assert check.passed, check.detail


def test_rejects_kernel_that_ignores_its_output_buffer():
    check = verify_case(broken(ignores_out), TAIL, "float16", device="cpu")
    assert not check.passed
    assert "'out' not fully written" in check.detail


def test_rejects_silu_that_skips_the_tail_column_block():
    def skips_tail(x, out=None):
        I = x.shape[-1] // 2
        silu_mod.silu_and_mul(x[:, : 2 * (I - 1)].contiguous(), out=out[:, : I - 1])
        return out

    case = next(c for c in silu_mod.SPEC.cases if c.name == "odd-intermediate")
    check = verify_case(dataclasses.replace(silu_mod.SPEC, impl=skips_tail), case, "float16", device="cpu")
    assert not check.passed


def test_inputs_are_fresh_for_every_check():
    seen = []

    def recording(x, weight, eps=1e-6, out=None):
        seen.append(x.clone())
        return rms_mod.rms_norm(x, weight, eps, out=out)

    verify_case(broken(recording), TAIL, "float16", device="cpu")
    verify_case(broken(recording), TAIL, "float16", device="cpu")
    assert len(seen) == 2 and not torch.equal(seen[0], seen[1])


def test_reference_sees_inputs_before_an_in_place_kernel_mutates_them():
    from kcheck.kernels import fused_add_rms_norm as fused

    case = next(c for c in fused.SPEC.cases if c.name == "in-place")
    assert verify_case(fused.SPEC, case, "float16", device="cpu").passed


def test_large_cases_only_on_request():
    spec = dataclasses.replace(rms_mod.SPEC, cases=(Case("big", "r", {"tokens": 2, "hidden": 8}, large=True),))
    assert verify(spec, device="cpu") == []
    assert len(verify(spec, dtypes=["float16"], device="cpu", include_large=True)) == 1


# --------------------------------------------------------------------------- compare and poison

TOL = Tolerance(rel=1e-3, atol=1e-3, rtol=1e-3)


def test_nan_never_passes_even_where_the_reference_is_nan():
    nan = torch.tensor([1.0, float("nan")])
    passed, _, _, detail = compare((nan,), (nan.clone(),), TOL)
    assert not passed and "NaN" in detail


def test_infinities_must_match_the_reference():
    ref = torch.tensor([1.0, float("inf"), -float("inf")])
    assert compare((ref.clone(),), (ref,), TOL)[0]
    assert not compare((torch.tensor([1.0, float("inf"), float("inf")]),), (ref,), TOL)[0]
    assert not compare((torch.tensor([float("inf"), 1.0, 1.0]),), (torch.ones(3),), TOL)[0]


def test_relative_and_elementwise_bounds_both_apply():
    ref = torch.ones(1000)
    one_outlier = ref.clone()
    one_outlier[0] = 1.5  # normwise error 0.016 but elementwise 0.5
    passed, rel, mabs, detail = compare((one_outlier,), (ref,), Tolerance(rel=0.1, atol=0.0, rtol=0.1))
    assert not passed and mabs == pytest.approx(0.5) and "beyond" in detail
    passed, rel, _, _ = compare((ref * 1.05,), (ref,), Tolerance(rel=0.01, atol=1.0, rtol=1.0))
    assert not passed and rel == pytest.approx(0.05)


def test_shape_mismatch_fails():
    assert not compare((torch.ones(3),), (torch.ones(4),), TOL)[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn])
def test_poison_fills_floats_with_nan(dtype):
    t = torch.zeros(5, dtype=dtype)
    poison(t)
    assert torch.isnan(t.float()).all()


def test_poison_fills_integers_with_their_maximum():
    t = torch.zeros(5, dtype=torch.int32)
    poison(t)
    assert (t == torch.iinfo(torch.int32).max).all()


def test_tolerance_tables_are_tighter_for_fp16_than_bf16():
    for spec in (rms_mod.SPEC, silu_mod.SPEC):
        bf, fp = spec.tolerances["bfloat16"], spec.tolerances["float16"]
        assert fp.rel < bf.rel and fp.rtol < bf.rtol
