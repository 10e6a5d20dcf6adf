"""Properties each op must have beyond matching its reference on random inputs."""

from __future__ import annotations

import torch

from kcheck.kernels.fused_add_rms_norm import fused_add_rms_norm
from kcheck.kernels.per_token_fp8_quant import FP8_MAX, per_token_fp8_quant
from kcheck.kernels.rms_norm import rms_norm
from kcheck.kernels.rotary_embedding import cos_sin_cache, rotary_embedding
from kcheck.kernels.silu_and_mul import silu_and_mul


def test_rms_norm_is_invariant_to_scaling_the_input(gen):
    x = torch.randn(6, 256, generator=gen).to(torch.float16)
    w = torch.randn(256, generator=gen).to(torch.float16)
    torch.testing.assert_close(rms_norm(x * 4, w), rms_norm(x, w), rtol=2e-3, atol=2e-3)


def test_fused_add_output_is_rms_norm_of_the_stored_residual(gen):
    x, r = (torch.randn(5, 512, generator=gen).to(torch.float16) for _ in range(2))
    w = torch.randn(512, generator=gen).to(torch.float16)
    out, res = fused_add_rms_norm(x.clone(), r.clone(), w)
    assert torch.equal(out, rms_norm(res, w))
    assert torch.equal(res, (x.float() + r.float()).to(torch.float16))


def test_fused_add_in_place_equals_out_of_place(gen):
    x, r = (torch.randn(7, 384, generator=gen).to(torch.float16) for _ in range(2))
    w = torch.ones(384, dtype=torch.float16)
    out, res = fused_add_rms_norm(x, r, w, out=torch.empty_like(x), residual_out=torch.empty_like(r))
    xi, ri = x.clone(), r.clone()
    out_i, res_i = fused_add_rms_norm(xi, ri, w)
    assert out_i.data_ptr() == xi.data_ptr() and res_i.data_ptr() == ri.data_ptr()
    assert torch.equal(out_i, out) and torch.equal(res_i, res)


def test_silu_and_mul_limits(gen):
    up = torch.randn(3, 128, generator=gen).to(torch.float16)
    zero_gate = torch.cat([torch.zeros(3, 128, dtype=torch.float16), up], dim=1)
    assert torch.equal(silu_and_mul(zero_gate), torch.zeros(3, 128, dtype=torch.float16))
    big_gate = torch.cat([torch.full((3, 128), 30.0, dtype=torch.float16), up], dim=1)
    torch.testing.assert_close(silu_and_mul(big_gate), (30 * up.float()).half(), rtol=1e-3, atol=1e-3)


def _rope(q, k, pos, cache, is_neox):
    q, k = q.clone(), k.clone()
    return rotary_embedding(pos, q, k, cache, is_neox)


def test_rope_position_zero_is_the_identity_and_norms_are_kept(gen):
    q = torch.randn(4, 6, 64, generator=gen, dtype=torch.float32)
    k = torch.randn(4, 2, 64, generator=gen, dtype=torch.float32)
    cache = cos_sin_cache(100, 64)
    rq, rk = _rope(q, k, torch.zeros(4, dtype=torch.long), cache, True)
    torch.testing.assert_close(rq, q)
    torch.testing.assert_close(rk, k)
    rq, _ = _rope(q, k, torch.tensor([3, 50, 99, 7]), cache, True)
    pair_norm = lambda t: t[..., :32] ** 2 + t[..., 32:] ** 2  # noqa: E731
    torch.testing.assert_close(pair_norm(rq), pair_norm(q), rtol=1e-5, atol=1e-5)


def test_rope_gptj_is_neox_on_interleaved_pairs(gen):
    """GPT-J on x equals NeoX on x with its pairs de-interleaved, re-interleaved afterwards."""
    q = torch.randn(5, 4, 32, generator=gen, dtype=torch.float32)
    k = torch.randn(5, 2, 32, generator=gen, dtype=torch.float32)
    pos, cache = torch.tensor([1, 2, 30, 4, 17]), cos_sin_cache(32, 32)
    to_halves = torch.cat([torch.arange(0, 32, 2), torch.arange(1, 32, 2)])
    to_pairs = torch.argsort(to_halves)
    gq, gk = _rope(q, k, pos, cache, False)
    nq, nk = _rope(q[..., to_halves], k[..., to_halves], pos, cache, True)
    torch.testing.assert_close(gq, nq[..., to_pairs])
    torch.testing.assert_close(gk, nk[..., to_pairs])


def test_fp8_quant_reconstructs_and_uses_the_full_range(gen):
    x = torch.randn(8, 1000, generator=gen).to(torch.bfloat16) * 3
    q, s = per_token_fp8_quant(x)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (8, 1)
    assert torch.equal(q.float().abs().amax(dim=1), torch.full((8,), FP8_MAX))
    err = (q.float() * s - x.float()).abs()
    assert (err <= x.float().abs() / 16 + s * 2.0**-9).all()  # half an e4m3 step, relative or subnormal


def test_rope_torch_peers_rotate_in_place_like_the_kernel(gen):
    from kcheck.kernels.rotary_embedding import SPEC, in_place_reference

    q = torch.randn(3, 4, 32, generator=gen, dtype=torch.float32)
    k = torch.randn(3, 2, 32, generator=gen, dtype=torch.float32)
    pos, cache = torch.tensor([5, 0, 17]), cos_sin_cache(32, 32)
    qi, ki = q.clone(), k.clone()
    rq, rk = in_place_reference(pos, qi, ki, cache)
    assert rq.data_ptr() == qi.data_ptr() and rk.data_ptr() == ki.data_ptr()
    eq, ek = _rope(q, k, pos, cache, True)
    torch.testing.assert_close(qi, eq)
    torch.testing.assert_close(ki, ek)
    assert SPEC.peer_reference is in_place_reference and "liger-pregathered" in SPEC.other_peers
