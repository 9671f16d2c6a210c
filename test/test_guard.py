"""The accuracy guard (SAGEATTN_SK1_GUARD=on, csrc/ops/guard.cpp; docs/SEMANTICS.md "The accuracy guard"), on the
CPU: documented inputs keep every output bit, and inputs whose INT8 Q.K^T leaves the accuracy bound (large
sm_scale, a huge value in q, channel outliers, smooth_k=False with offset keys) are brought into it."""
import math

import pytest
import torch

import torch_sage
from conftest import accuracy, as_computed, assert_accurate, exact_attention, make_qkv, mode_bound


@pytest.fixture
def guard(monkeypatch):
    monkeypatch.setenv("SAGEATTN_SK1_GUARD", "on")


def blocks_done():
    return torch_sage.guard_counts()["blocks"]


def run(q, k, v, layout="HND", **kw):
    return torch_sage.attention_with_lse(q, k, v, tensor_layout=layout, **kw)


@pytest.mark.parametrize("seed", range(6))
def test_documented_inputs_keep_every_bit(monkeypatch, seed):
    g = torch.Generator().manual_seed(seed)
    pick = lambda *xs: xs[torch.randint(len(xs), (1,), generator=g).item()]  # noqa: E731
    d, layout, dtype = pick(64, 80, 128), pick("HND", "NHD"), pick(torch.float16, torch.bfloat16)
    hq, hk = pick((4, 4), (4, 2), (6, 1))
    nq, nk = pick((300, 300), (200, 700), (513, 129))
    kw = dict(is_causal=pick(False, True), pv_mode=pick("fp16", "fp8"), smooth_k=True)
    q, k, v = make_qkv(1, hq, hk, nq, nk, d, dtype=dtype, layout=layout, seed=seed)
    monkeypatch.setenv("SAGEATTN_SK1_GUARD", "off")
    out_off, lse_off = run(q, k, v, layout, **kw)
    monkeypatch.setenv("SAGEATTN_SK1_GUARD", "on")
    before = blocks_done()
    out_on, lse_on = run(q, k, v, layout, **kw)
    assert blocks_done() == before
    assert torch.equal(out_on, out_off) and torch.equal(lse_on, lse_off)


def out_of_bound_case(kind, g):
    """(q, k, v, sm_scale, smooth_k) of one of issue 45's four kinds, drawn with g (float16 unless said)."""
    uniform = lambda lo, hi: lo + (hi - lo) * torch.rand((), generator=g).item()  # noqa: E731
    n, d = 256 + int(uniform(0, 300)), 64 if uniform(0, 1) < 0.5 else 128
    q, k, v = (torch.randn(1, 2, n, d, generator=g) for _ in range(3))
    if kind == "sm_scale":
        return q.half(), k.half(), v.half(), uniform(3, 100) / math.sqrt(d), True
    if kind == "q outlier":  # float32: beyond 16 bits' range of exact integers, as the caller's own tensor
        q[0, int(uniform(0, 2)), int(uniform(0, n)), int(uniform(0, d))] = uniform(1e5, 1e6)
        return q, k, v, 1 / math.sqrt(d), True
    if kind == "channels":
        ch = torch.randperm(d, generator=g)[: int(uniform(4, 17))]
        q[..., ch] *= 20
        k[..., ch] *= 20
        return q.half(), k.half(), v.half(), 1 / math.sqrt(d), True
    k = k + uniform(4, 10) * torch.randn(d, generator=g)  # smooth_k=False, keys with a per-channel offset
    return q.bfloat16(), k.bfloat16(), v.bfloat16(), 1 / math.sqrt(d), False


def offset_values(v, g):
    """v + randn(D): values with a per-channel offset, on which the fast mode's bound is stated."""
    return v + torch.randn(v.shape[-1], generator=g).to(v.dtype)


# In the fast mode, on the values its bound is stated for (with a per-channel offset), a huge value in q and offset
# keys with smooth_k=False stay inside that bound: only the other two kinds leave it.
KINDS = [(kind, mode) for kind in ("sm_scale", "q outlier", "channels", "smooth_k") for mode in ("fp16", "fp8")
         if mode == "fp16" or kind in ("sm_scale", "channels")]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind,mode", KINDS)
def test_inputs_out_of_the_bound_are_brought_into_it(monkeypatch, kind, mode, seed):
    g = torch.Generator().manual_seed(1000 * seed + len(kind))
    q, k, v, scale, smooth_k = out_of_bound_case(kind, g)
    if mode == "fp8":
        v = offset_values(v, g)
    ref, ref_lse = exact_attention(q, k, v, sm_scale=scale)
    kw = dict(sm_scale=scale, smooth_k=smooth_k, pv_mode=mode)
    # The fast mode's bound, or its e4m3 floor on few keys: what the blocks the guard leaves alone keep.
    min_cos, max_l1 = mode_bound(mode, *(as_computed(t) for t in (q, k, v)), False, scale)
    monkeypatch.setenv("SAGEATTN_SK1_GUARD", "off")
    cos, l1 = accuracy(run(q, k, v, **kw)[0], ref)
    assert cos < min_cos or l1 > max_l1, "the case is inside the bound without the guard: it tests nothing"
    monkeypatch.setenv("SAGEATTN_SK1_GUARD", "on")
    before = blocks_done()
    out, lse = run(q, k, v, **kw)
    assert blocks_done() > before
    cos, l1 = accuracy(out, ref)
    assert cos >= min_cos and l1 <= max_l1, f"cosine {cos:.6f} (>= {min_cos:.6f}), rel L1 {l1:.5f} (<= {max_l1:.5f})"
    if q.dtype != torch.float32:  # float32 inputs' scores reach 1e5 nats: lse is exact to float32 there
        assert (lse.double() - ref_lse).abs().max().item() < 1e-2


@pytest.mark.parametrize("nq", [1, 7, 40])
def test_few_queries_are_flagged_like_many(guard, nq):
    """A block's rms is over its real rows: a call of a few queries (decoding) is not diluted by the padding."""
    q, k, v = make_qkv(1, 2, 2, nq, 300, 64, seed=nq)
    scale = 2 / 8  # twice the default: out of the bound at any length
    before = blocks_done()
    out, _ = run(q, k, v, sm_scale=scale)
    assert blocks_done() - before == 2
    assert_accurate(out, exact_attention(q, k, v, sm_scale=scale)[0], "fp16")


def test_an_infinite_query_value_leaves_the_other_rows_finite(guard):
    """Its block's estimate is not finite, so the block is flagged: only the row SDPA makes non-finite is, also
    when smoothing leaves the keys all zero (identical keys)."""
    for nk in (1, 5, 300):
        q, k, v = make_qkv(1, 1, 1, 200, nk, 64, seed=nk)
        if nk < 300:
            k = k[:, :, :1].expand_as(k).contiguous()
        q[0, 0, 3, 7] = float("inf")
        out = torch_sage.attention(q, k, v)
        assert (~torch.isfinite(out)).any(-1).sum().item() == 1


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_guarded_rows_keep_causal_gqa_and_layout(guard, layout):
    q, k, v = make_qkv(2, 6, 2, 300, 450, 80, dtype=torch.bfloat16, layout=layout, seed=3)
    scale = 8 / math.sqrt(80)  # every block flagged
    before = blocks_done()
    out, lse = run(q, k, v, layout, is_causal=True, sm_scale=scale)
    assert blocks_done() - before == 2 * 6 * 3
    ref, ref_lse = exact_attention(q, k, v, layout, is_causal=True, sm_scale=scale)
    assert_accurate(out, ref, "fp16")
    assert (lse.double() - ref_lse).abs().max().item() < 1e-2
    assert torch.equal(torch_sage.attention(q, k, v, layout, is_causal=True, sm_scale=scale), out)


def test_counts_are_calls_and_blocks(guard):
    q, k, v = make_qkv(1, 2, 2, 200, 200, 64, seed=1)  # 2 heads x 2 query blocks
    before = torch_sage.guard_counts()
    torch_sage.attention(q, k, v, sm_scale=1.0)
    after = torch_sage.guard_counts()
    assert after["calls"] - before["calls"] == 1 and after["blocks"] - before["blocks"] == 4


def test_bad_value_is_named(monkeypatch):
    monkeypatch.setenv("SAGEATTN_SK1_GUARD", "1")
    q = torch.randn(1, 1, 4, 64)
    with pytest.raises(RuntimeError, match='SAGEATTN_SK1_GUARD must be .*got "1"'):
        torch_sage.attention(q, q, q)


@pytest.mark.gpu
def test_gpu_refuses_until_its_kernels_exist(guard):
    q = torch.randn(1, 1, 4, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="SAGEATTN_SK1_GUARD=on runs on the CPU only"):
        torch_sage.attention(q, q, q)


def test_compiled_calls_are_guarded_too(guard):
    """The op is opaque to torch.compile (traced through its fake): the guard runs inside it when the graph runs."""
    q, k, v = make_qkv(1, 2, 2, 200, 200, 64, seed=2)
    fn = torch.compile(lambda q, k, v: torch_sage.attention(q, k, v, sm_scale=1.0), fullgraph=True, backend="eager")
    before = blocks_done()
    out = fn(q, k, v)
    assert blocks_done() - before == 4
    assert torch.equal(out, torch_sage.attention(q, k, v, sm_scale=1.0))


def reference_estimates(q, k, sm_scale, smooth_k, block_q=128, block_k=64):
    """docs/SEMANTICS.md's estimate, written out in float64 over HND 16-bit inputs: [B, Hq, query blocks]."""
    q, k = q.double() * sm_scale, k.double()
    if smooth_k:
        k = k - k.mean(2, keepdim=True)

    def stats(t, size):  # absmax / 127 and rms over the real rows, per block of size tokens
        blocks = t.split(size, dim=2)
        return (torch.stack([b.abs().amax((-1, -2)) / 127 for b in blocks], -1),
                torch.stack([b.pow(2).mean((-1, -2)).sqrt() for b in blocks], -1))

    (s_q, rms_q), (s_k, rms_k) = stats(q, block_q), stats(k, block_k)
    group = q.shape[1] // k.shape[1]
    ms_k, mr_k = (x.pow(2).mean(-1, keepdim=True).sqrt().repeat_interleave(group, 1) for x in (s_k, rms_k))
    return (q.shape[-1] / 12 * ((rms_q * ms_k) ** 2 + (mr_k * s_q) ** 2)).sqrt()


@pytest.mark.parametrize("seed", range(5))
def test_the_estimate_is_the_documented_one(seed):
    g = torch.Generator().manual_seed(seed)
    pick = lambda *xs: xs[torch.randint(len(xs), (1,), generator=g).item()]  # noqa: E731
    d, (hq, hk), (nq, nk) = pick(1, 64, 80, 256), pick((2, 2), (6, 2)), pick((1, 1), (129, 65), (300, 700))
    smooth_k, layout = pick(True, False), pick("HND", "NHD")
    q, k, _ = make_qkv(1, hq, hk, nq, nk, d, dtype=pick(torch.float16, torch.bfloat16), layout=layout, seed=seed)
    scale = pick(0.125, 1.0, -0.3)
    sigma, flagged = torch.ops.sage._guard_block_estimates(q, k, layout, scale, smooth_k)
    to_hnd = (lambda t: t) if layout == "HND" else (lambda t: t.transpose(1, 2))  # noqa: E731
    want = reference_estimates(to_hnd(q), to_hnd(k), scale, smooth_k)
    torch.testing.assert_close(sigma, want, rtol=1e-9, atol=0)
    assert torch.equal(flagged, ~(want <= 0.017))
