"""The launch helpers: token buckets and the pinned small-batch configurations."""

from __future__ import annotations

import pytest
import triton

from kcheck.kernels import _launch, rotary_embedding, silu_and_mul, silu_and_mul_fp8_quant
from kcheck.kernels._launch import SMALL_BUCKETS, pinned, token_bucket

CANDIDATES = (
    triton.Config({"BLOCK": 1024}, num_warps=4),
    triton.Config({"BLOCK": 1024}, num_warps=8),
    triton.Config({"BLOCK": 2048}, num_warps=8),
)


def test_token_buckets_are_the_pinned_ones_up_to_1024():
    assert [token_bucket(t) for t in (1, 2, 64, 65, 1024, 1025, 8192, 16384)] == [1, 64, 64, 1024, 1024, 8192, 8192, 65536]
    assert SMALL_BUCKETS == (1, 64, 1024)


def test_a_pinned_bucket_runs_its_one_candidate_and_the_others_tune():
    prune = pinned(CANDIDATES, {1: {"BLOCK": 1024, "num_warps": 8}})
    assert prune(list(CANDIDATES), {"token_bucket": 1}) == [CANDIDATES[1]]
    assert prune(list(CANDIDATES), {"token_bucket": 65536}) == list(CANDIDATES)
    assert prune(list(CANDIDATES[:1]), {"token_bucket": 1}) == [CANDIDATES[0]]  # the interpreter's one candidate


@pytest.mark.parametrize("pin, found", [({"BLOCK": 512, "num_warps": 8}, 0), ({"BLOCK": 1024}, 2)])
def test_a_pin_must_match_exactly_one_candidate(pin, found):
    # A pin that matched nothing once fell back, silently, to tuning over every candidate.
    with pytest.raises(ValueError, match=f"token bucket 64 matches {found} candidates, not one"):
        pinned(CANDIDATES, {64: pin})


@pytest.mark.parametrize("candidates, pins", [
    (_launch.ROW_CANDIDATES, _launch.ROWS_PINS),
    (_launch.ROW_CANDIDATES, _launch.FUSED_PINS),
    (silu_and_mul.CANDIDATES, silu_and_mul.PINS),
    (rotary_embedding.CANDIDATES, rotary_embedding.PINS),
    (silu_and_mul_fp8_quant.GATED_CANDIDATES, silu_and_mul_fp8_quant.GATED_PINS),
], ids=["rows", "fused", "silu_and_mul", "rotary_embedding", "silu_and_mul_fp8_quant"])
def test_every_kernel_pins_each_small_bucket_to_one_of_its_candidates(candidates, pins):
    assert set(pins) == set(SMALL_BUCKETS)
    prune = pinned(candidates, pins)
    for bucket, pin in pins.items():
        (kept,) = prune(list(candidates), {"token_bucket": bucket})
        assert {**kept.kwargs, "num_warps": kept.num_warps}.items() >= pin.items()
