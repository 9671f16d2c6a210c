"""The CPU prologue against the independent reference of the quantization rules, bit for bit."""
import math

import pytest
import torch

from conftest import make_qkv, to_hnd
from reference_quant import quant_qk_reference, quant_v_reference


def assert_same_quant(got, want):
    for name, g, w in zip(["q_int8", "q_scale", "k_int8", "k_scale", "k_mean"], got, want):
        torch.testing.assert_close(g, w.to(g.dtype), rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{name}: {m}")


CASES = [
    # b, hq, hk, nq, nk, d
    (1, 1, 1, 1, 1, 64),
    (2, 4, 2, 300, 129, 128),
    (1, 3, 1, 128, 64, 64),
    (1, 2, 2, 257, 700, 80),
    (1, 2, 1, 70, 65, 33),
    (1, 1, 1, 200, 100, 256),
    (1, 2, 2, 5, 3, 160),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("smooth_k", [False, True])
def test_quant_qk_matches_reference(case, dtype, layout, smooth_k):
    b, hq, hk, nq, nk, d = case
    q, k, _ = make_qkv(b, hq, hk, nq, nk, d, dtype=dtype, layout=layout, seed=nq + nk + d)
    sm_scale = 1.0 / math.sqrt(d)
    got = torch.ops.sage.quant_qk_int8(q, k, layout, sm_scale, smooth_k)
    want = quant_qk_reference(to_hnd(q, layout), to_hnd(k, layout), sm_scale, smooth_k)
    assert_same_quant(got, want)
    assert got[0].abs().max() == 127  # the block maximum maps to +-127


def test_quant_qk_strided_views_of_fused_qkv():
    # q, k, v as views into one fused [B, N, 3, H, D] projection output: token stride != H * D.
    b, n, h, d = 2, 190, 3, 64
    fused = torch.randn(b, n, 3, h, d, dtype=torch.bfloat16)
    q, k = fused[:, :, 0], fused[:, :, 1]
    assert not q.is_contiguous()
    got = torch.ops.sage.quant_qk_int8(q, k, "NHD", 0.125, True)
    want = quant_qk_reference(q.transpose(1, 2), k.transpose(1, 2), 0.125, True)
    assert_same_quant(got, want)
    contiguous = torch.ops.sage.quant_qk_int8(q.contiguous(), k.contiguous(), "NHD", 0.125, True)
    assert_same_quant(got, contiguous)


def test_quant_qk_padding_zero_blocks_and_rounding():
    q = torch.zeros(1, 1, 130, 40, dtype=torch.float16)
    k = torch.zeros(1, 1, 70, 40, dtype=torch.float16)
    q[0, 0, 128:] = torch.randn(2, 40).half()  # block 0 all zero, block 1 has 2 real rows
    qi, qs, ki, ks, km = torch.ops.sage.quant_qk_int8(q, k, "HND", 1.0, False)
    assert qs[0, 0, 0] == 0 and torch.isfinite(qs).all() and (qi[0, 0, :128] == 0).all()
    assert (qi[0, 0, 130:] == 0).all() and (qi[..., 40:] == 0).all()  # padding rows and columns
    assert (ks == 0).all() and (ki == 0).all() and km.shape == (0,)
    # x / scale == 0.5 and 2.5 exactly: round half to even gives 0 and 2.
    q = torch.zeros(1, 1, 1, 64, dtype=torch.float16)
    q[0, 0, 0, :3] = torch.tensor([127.0, 0.5, 2.5])
    qi = torch.ops.sage.quant_qk_int8(q, q, "HND", 1.0 / 1.4426950408889634, False)[0]
    assert qi[0, 0, 0, :3].tolist() == [127, 0, 2]


def test_quant_qk_non_finite_block_has_nan_scale():
    q, k, _ = make_qkv(1, 1, 1, 256, 128, 64)
    q[0, 0, 5, 3] = float("nan")
    k[0, 0, 70, 0] = float("inf")
    qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, False)
    assert qs[0, 0, 0].isnan() and torch.isfinite(qs[0, 0, 1]) and (qi[0, 0, :128] == 0).all()
    assert ks[0, 0, 1].isnan() and torch.isfinite(ks[0, 0, 0])


def test_quant_qk_empty_sequences():
    q = torch.randn(1, 2, 0, 64, dtype=torch.float16)
    k = torch.randn(1, 2, 0, 64, dtype=torch.float16)
    qi, qs, ki, ks, km = torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, True)
    assert qi.shape == (1, 2, 0, 64) and qs.shape == (1, 2, 0) and ki.shape == (1, 2, 0, 64)
    assert km.shape == (1, 2, 64) and (km == 0).all()


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_quant_v_fp8_matches_reference(layout):
    _, _, v = make_qkv(2, 2, 2, 1, 150, 96, dtype=torch.bfloat16, layout=layout)
    v[0, 0, 0, 0] = 0  # stays exact
    v8, vs = torch.ops.sage.quant_v_fp8(v, layout)
    w8, ws = quant_v_reference(to_hnd(v, layout))
    assert v8.dtype == torch.float8_e4m3fn and v8.shape == v.shape
    assert torch.equal(to_hnd(v8, layout).view(torch.uint8), w8.view(torch.uint8))
    assert torch.equal(vs, ws)
