"""Declared fallbacks: what each kernel does not support goes to its reference, announced once."""

from __future__ import annotations

import logging
import re

import pytest
import torch

from kcheck.kernels import _launch, specs
from kcheck.kernels.fused_add_rms_norm import fused_add_rms_norm
from kcheck.kernels.harness import verify
from kcheck.kernels.per_token_fp8_quant import per_token_fp8_quant
from kcheck.kernels.rms_norm import reference as rms_reference
from kcheck.kernels.rms_norm import rms_norm
from kcheck.kernels.rotary_embedding import cos_sin_cache, rotary_embedding
from kcheck.kernels.silu_and_mul import silu_and_mul

SPECS = specs()


def fallback_records(caplog):
    return [r for r in caplog.records if r.name == "kcheck.kernels" and "falling back" in r.getMessage()]


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_every_op_is_correct_through_its_fallback(spec, monkeypatch, caplog):
    """With no Triton backend (the interpreter switched off), the harness still passes every case."""
    monkeypatch.setattr(_launch, "INTERPRET", False)
    with caplog.at_level(logging.WARNING, logger="kcheck.kernels"):
        checks = verify(spec, dtypes=["float16"], device="cpu")
    assert checks and all(c.passed for c in checks), [c.detail for c in checks if not c.passed]
    records = fallback_records(caplog)
    assert len(records) == 1, "announced once, not once per call"
    assert "no Triton backend for device 'cpu'" in records[0].getMessage()


def test_unsupported_dtype_falls_back_and_says_why(caplog, gen):
    x = torch.randn(4, 64, generator=gen, dtype=torch.float64)
    w = torch.ones(64, dtype=torch.float64)
    with caplog.at_level(logging.WARNING, logger="kcheck.kernels"):
        out = rms_norm(x, w)
        rms_norm(x, w)
    torch.testing.assert_close(out, rms_reference(x, w))
    (record,) = fallback_records(caplog)
    assert "rms_norm" in record.getMessage() and "torch.float64" in record.getMessage()


def test_non_unit_stride_falls_back(caplog, gen):
    x = torch.randn(64, 4, generator=gen, dtype=torch.float16).t()  # last dimension strided
    w = torch.ones(64, dtype=torch.float16)
    with caplog.at_level(logging.WARNING, logger="kcheck.kernels"):
        out = rms_norm(x, w)
    torch.testing.assert_close(out, rms_reference(x, w))
    assert "unit-stride" in fallback_records(caplog)[0].getMessage()


def test_partial_rotary_falls_back(caplog, gen):
    q = torch.randn(3, 4, 64, generator=gen, dtype=torch.float16)
    k = torch.randn(3, 2, 64, generator=gen, dtype=torch.float16)
    q0, k0 = q.clone(), k.clone()
    cache = cos_sin_cache(16, 32)  # rotates 32 of 64 dimensions
    pos = torch.tensor([0, 5, 15])
    with caplog.at_level(logging.WARNING, logger="kcheck.kernels"):
        rotary_embedding(pos, q, k, cache)
    assert "partial rotary" in fallback_records(caplog)[0].getMessage()
    assert torch.equal(q[..., 32:], q0[..., 32:]) and torch.equal(k[..., 32:], k0[..., 32:])
    assert not torch.equal(q[1:, :, :32], q0[1:, :, :32])


def test_supported_inputs_do_not_announce_anything(caplog, gen):
    x = torch.randn(4, 64, generator=gen, dtype=torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger="kcheck.kernels"):
        rms_norm(x, torch.ones(64, dtype=torch.bfloat16))
        silu_and_mul(torch.randn(4, 64, generator=gen, dtype=torch.bfloat16))
    assert fallback_records(caplog) == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rms_norm(torch.ones(2, 8), torch.ones(4)), "rms_norm: weight"),
        (lambda: rms_norm(torch.ones(2, 8), torch.ones(8), out=torch.ones(2, 4)), "rms_norm: out"),
        (lambda: fused_add_rms_norm(torch.ones(2, 8), torch.ones(2, 4), torch.ones(8)), "fused_add_rms_norm: residual"),
        (lambda: silu_and_mul(torch.ones(2, 7)), "silu_and_mul: last dimension 7"),
        (lambda: per_token_fp8_quant(torch.ones(8)), "per_token_fp8_quant: x must be [T, H]"),
        (lambda: rotary_embedding(torch.zeros(2, dtype=torch.long), torch.ones(2, 4, 8), torch.ones(3, 2, 8),
                                  cos_sin_cache(4, 8)), "rotary_embedding: query"),
    ],
    ids=["weight", "out", "residual", "odd-width", "rank", "tokens"],
)
def test_bad_inputs_raise_a_clear_error(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
