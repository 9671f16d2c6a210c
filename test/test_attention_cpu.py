"""sage::attention on CPU against float64 exact attention (docs/SEMANTICS.md bounds) and edge cases."""
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import accuracy, assert_accurate, exact_attention, make_qkv, to_hnd

SHAPES = [
    # b, hq, hk, nq, nk, d
    (1, 2, 2, 512, 512, 64),
    (1, 2, 2, 384, 384, 128),
    (2, 4, 1, 200, 333, 128),
    (1, 2, 2, 300, 300, 80),
    (1, 1, 1, 256, 256, 256),
    (1, 2, 1, 190, 190, 40),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_accurate_mode_matches_exact(shape, dtype, is_causal):
    b, hq, hk, nq, nk, d = shape
    q, k, v = make_qkv(b, hq, hk, nq, nk, d, dtype=dtype, seed=sum(shape))
    out = torch.ops.sage.attention(q, k, v, "HND", is_causal, None, True, "fp16")
    ref, _ = exact_attention(q, k, v, is_causal=is_causal)
    assert out.shape == q.shape and out.dtype == dtype
    assert_accurate(out, ref, "fp16")


def test_default_call_is_accurate_mode():
    q, k, v = make_qkv(1, 2, 2, 256, 256, 128)
    out = torch.ops.sage.attention(q, k, v)
    assert torch.equal(out, torch.ops.sage.attention(q, k, v, pv_mode="fp16"))


def e4m3_floor(q, k, v, layout="HND"):
    """Error of exact attention with only P and V rounded to e4m3 (float64 otherwise): the fast mode's floor."""
    qh, kh, vh = (to_hnd(t, layout).double() for t in (q, k, v))
    group = qh.shape[1] // kh.shape[1]
    kh, vh = kh.repeat_interleave(group, 1), vh.repeat_interleave(group, 1)
    s = qh @ kh.transpose(-1, -2) / math.sqrt(qh.shape[-1])
    p = torch.exp(s - s.amax(-1, keepdim=True))
    vs = vh.abs().amax(2, keepdim=True) / 448
    e4 = lambda x: x.clamp(-448, 448).to(torch.float8_e4m3fn).double()  # noqa: E731
    approx = (e4(p * 448) / 448) @ (e4(vh / vs) * vs) / p.sum(-1, keepdim=True)
    return accuracy(approx, torch.softmax(s, -1) @ vh)


@pytest.mark.parametrize("shape", SHAPES[:3])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fast_mode_is_at_the_e4m3_floor(shape, dtype):
    # On iid Gaussian V, rounding P and V to e4m3 alone costs ~0.036 relative L1 (docs/FINDINGS.md F2),
    # more than SEMANTICS's fast-mode bound; int8 QK must add little on top of that floor.
    b, hq, hk, nq, nk, d = shape
    q, k, v = make_qkv(b, hq, hk, nq, nk, d, dtype=dtype, seed=sum(shape))
    out = torch.ops.sage.attention(q, k, v, pv_mode="fp8")
    ref, _ = exact_attention(q, k, v)
    cos, l1 = accuracy(out, ref)
    floor_cos, floor_l1 = e4m3_floor(q, k, v)
    assert torch.isfinite(out).all()
    assert l1 <= 1.15 * floor_l1 and 1 - cos <= 1.3 * (1 - floor_cos), (cos, l1, floor_cos, floor_l1)
    assert cos >= 0.999 and l1 <= 0.045


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fast_mode_meets_bounds_on_offset_values(dtype):
    # Real V carries per-channel offsets as real K does; there the fast mode meets SEMANTICS's bound.
    q, k, v = make_qkv(1, 2, 2, 512, 512, 128, dtype=dtype, seed=3)
    v = (v.float() + torch.randn(128, generator=torch.Generator().manual_seed(4))).to(dtype)
    out = torch.ops.sage.attention(q, k, v, pv_mode="fp8")
    assert_accurate(out, exact_attention(q, k, v)[0], "fp8")


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("smooth_k", [True, False])
def test_lse_matches_exact(layout, smooth_k):
    # Without smooth_k the key offset would cost int8 precision (the reason smooth_k exists): leave it out.
    q, k, v = make_qkv(2, 4, 2, 300, 200, 64, layout=layout, seed=11, key_bias=4.0 if smooth_k else 0.0)
    out, lse = torch.ops.sage.attention_with_lse(q, k, v, layout, False, None, smooth_k, "fp16")
    ref, ref_lse = exact_attention(q, k, v, layout)
    assert lse.shape == (2, 4, 300) and lse.dtype == torch.float32
    assert_accurate(out, ref, "fp16")
    torch.testing.assert_close(lse.double(), ref_lse, atol=0.05, rtol=0.005)


def test_lse_natural_log_exactly_without_quantization_error():
    # One key: softmax is 1 whatever the quantization, and lse is exactly that key's score.
    q, k, v = make_qkv(1, 1, 1, 3, 1, 64, seed=2)
    out, lse = torch.ops.sage.attention_with_lse(q, k, v)
    ref, ref_lse = exact_attention(q, k, v)
    torch.testing.assert_close(out.double(), ref, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(lse.double(), ref_lse, atol=0.02, rtol=0.002)


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("nq,nk", [(100, 300), (300, 100), (1, 64), (129, 1)])
def test_causal_upper_left_with_unequal_lengths(layout, nq, nk):
    q, k, v = make_qkv(1, 2, 2, nq, nk, 64, layout=layout, seed=nq * nk)
    out = torch.ops.sage.attention(q, k, v, layout, True)
    ref, _ = exact_attention(q, k, v, layout, is_causal=True)
    sdpa = F.scaled_dot_product_attention(*(to_hnd(t, layout).float() for t in (q, k, v)), is_causal=True)
    torch.testing.assert_close(to_hnd(ref, layout).float(), sdpa, atol=1e-4, rtol=1e-4)  # same mask as SDPA
    assert_accurate(out, ref, "fp16")


@pytest.mark.parametrize("n", [1, 63, 65, 127, 129, 1000])
def test_lengths_not_multiple_of_blocks(n):
    q, k, v = make_qkv(1, 2, 2, n, n, 64, seed=n)
    assert_accurate(torch.ops.sage.attention(q, k, v), exact_attention(q, k, v)[0], "fp16")


def test_strided_views_and_nhd_match_contiguous_hnd():
    b, n, h, d = 1, 200, 2, 64
    g = torch.Generator().manual_seed(5)
    fused = torch.randn(b, n, 3, h, d, generator=g).half()
    fused[:, :, 1] += 4 * torch.randn(d, generator=g).half()
    q, k, v = fused.unbind(2)
    out = torch.ops.sage.attention(q, k, v, "NHD")
    ref = torch.ops.sage.attention(*(t.transpose(1, 2).contiguous() for t in (q, k, v)), "HND")
    assert out.shape == (b, n, h, d)
    assert torch.equal(out.transpose(1, 2), ref)
    assert_accurate(out, exact_attention(q, k, v, "NHD")[0], "fp16")


def test_float32_is_computed_as_bfloat16():
    q, k, v = make_qkv(1, 2, 2, 256, 256, 64, dtype=torch.float32)
    out = torch.ops.sage.attention(q, k, v)
    assert out.dtype == torch.float32
    bf16 = torch.ops.sage.attention(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert torch.equal(out.bfloat16(), bf16)  # same computation, one rounding less at the end


@pytest.mark.parametrize("magnitude", [1e5, 1e6, 1e30])
def test_float32_beyond_float16_range_stays_finite(magnitude):
    """bfloat16 has float32's range: values past 65504 neither overflow nor turn a block NaN."""
    q, k, v = make_qkv(1, 2, 2, 200, 200, 64, dtype=torch.float32, key_bias=0.0)
    v = v * magnitude
    out = torch.ops.sage.attention(q, k, v)
    assert torch.isfinite(out).all()
    cos, l1 = accuracy(out, exact_attention(q, k, v)[0])
    assert cos >= 0.9998 and l1 <= 0.02, (cos, l1)
    q[0, 0, 5] *= magnitude  # a huge query value: its block is quantized against it, but stays finite
    assert torch.isfinite(torch.ops.sage.attention(q, k, v)).all()


def test_sm_scale_is_honoured():
    q, k, v = make_qkv(1, 2, 2, 256, 256, 64)
    out = torch.ops.sage.attention(q, k, v, sm_scale=0.1)
    assert_accurate(out, exact_attention(q, k, v, sm_scale=0.1)[0], "fp16")
    assert accuracy(out, exact_attention(q, k, v)[0])[0] < 0.999  # not the default 1/sqrt(64)


def test_all_zero_inputs_give_zero_not_nan():
    q = torch.zeros(1, 2, 200, 64, dtype=torch.float16)
    out = torch.ops.sage.attention(q, q, q)
    assert torch.equal(out, torch.zeros_like(out))
    k = torch.randn(1, 2, 200, 64).half()
    out = torch.ops.sage.attention(q, k, k)  # all-zero q blocks: uniform attention, no NaN
    assert_accurate(out, exact_attention(q, k, k)[0], "fp16")


@pytest.mark.parametrize("dtype,mag,v_mag", [(torch.float16, 2000.0, 5000.0), (torch.bfloat16, 1e15, 1e30)])
@pytest.mark.parametrize("mode", ["fp16", "fp8"])
def test_large_magnitudes(dtype, mag, v_mag, mode):
    # Inputs near the top of their dtype's range (float16: |k| up to ~4e4); scores kept at a normal size.
    q, k, v = make_qkv(1, 2, 2, 256, 256, 64, dtype=torch.float32, seed=9)
    q, k, v = (q * mag).to(dtype), (k * mag).to(dtype), (v * v_mag).to(dtype)
    sm_scale = 0.125 / mag**2
    out = torch.ops.sage.attention(q, k, v, sm_scale=sm_scale, pv_mode=mode)
    ref = exact_attention(q, k, v, sm_scale=sm_scale)[0]
    if mode == "fp16":
        assert_accurate(out, ref, mode)
    else:
        assert torch.isfinite(out).all() and accuracy(out, ref)[1] <= 0.045


def test_empty_lengths_behave_as_sdpa():
    q, k, v = make_qkv(1, 2, 2, 0, 10, 64)
    out, lse = torch.ops.sage.attention_with_lse(q, k, v)
    assert out.shape == (1, 2, 0, 64) and lse.shape == (1, 2, 0)
    q, k, v = make_qkv(1, 2, 2, 5, 0, 64)
    out, lse = torch.ops.sage.attention_with_lse(q, k, v)
    sdpa = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert torch.equal(out.float(), sdpa) and (lse == float("-inf")).all()
    q, k, v = make_qkv(0, 2, 2, 5, 5, 64)
    assert torch.ops.sage.attention(q, k, v).shape == (0, 2, 5, 64)


@pytest.mark.parametrize("mode", ["fp16", "fp8"])
@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_inputs_are_nan_wherever_sdpa_is(mode, where, bad):
    q, k, v = make_qkv(1, 2, 2, 300, 300, 64, seed=1)
    {"q": q, "k": k, "v": v}[where][0, 1, 150, 7] = bad
    out = torch.ops.sage.attention(q, k, v, pv_mode=mode)
    sdpa = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert not torch.isfinite(sdpa).all()
    assert (~torch.isfinite(out))[~torch.isfinite(sdpa)].all(), "non-finite in SDPA but finite in sage"
    if where == "q":  # only the poisoned query block (rows 128..255 of head 1) may differ from SDPA
        poisoned = torch.zeros_like(out, dtype=torch.bool)
        poisoned[0, 1, 128:256] = True
        assert torch.isfinite(out[~poisoned]).all()
    if where == "v":  # channel 7 of head 1 only, as in SDPA
        assert (~torch.isfinite(out[:, 1, :, 7])).all() and torch.isfinite(out[..., :7]).all()
