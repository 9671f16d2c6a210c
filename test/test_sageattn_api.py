"""torch_sage.sageattn keeps SageAttention 2.2.0's call shape."""
import inspect

import pytest
import torch

import torch_sage
from conftest import as_computed, assert_accurate, exact_attention, make_qkv


def test_signature_matches_sageattention_2_2_0():
    params = inspect.signature(torch_sage.sageattn).parameters
    assert list(params)[:7] == ["q", "k", "v", "tensor_layout", "is_causal", "sm_scale", "return_lse"]
    assert params["tensor_layout"].default == "HND" and params["is_causal"].default is False
    assert params["sm_scale"].default is None and params["return_lse"].default is False
    assert params["kwargs"].kind is inspect.Parameter.VAR_KEYWORD


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_positional_and_keyword_calls(layout):
    q, k, v = make_qkv(1, 4, 2, 200, 150, 128, layout=layout, dtype=torch.bfloat16)
    ref, ref_lse = exact_attention(q, k, v, layout, is_causal=True, sm_scale=0.1)
    out = torch_sage.sageattn(q, k, v, layout, True, 0.1)
    assert_accurate(out, ref, "fp16")
    out2, lse = torch_sage.sageattn(q, k, v, tensor_layout=layout, is_causal=True, sm_scale=0.1, return_lse=True)
    assert torch.equal(out2, out)
    torch.testing.assert_close(lse.double(), ref_lse, atol=0.05, rtol=0.005)


def test_known_kwargs_are_honoured_or_ignored():
    q, k, v = make_qkv(1, 2, 2, 128, 128, 64)
    base = torch_sage.sageattn(q, k, v)
    tuning = dict(qk_quant_gran="per_warp", smooth_v=False, quantization_backend="cuda", attn_mask=None,
                  dropout_p=0.0)
    assert torch.equal(base, torch_sage.sageattn(q, k, v, **tuning))
    assert torch.equal(torch_sage.sageattn(q, k, v, smooth_k=False),
                       torch.ops.sage.attention(q, k, v, smooth_k=False))
    assert torch.equal(torch_sage.sageattn(q, k, v, pv_accum_dtype="fp32+fp32"),
                       torch.ops.sage.attention(q, k, v, pv_mode="fp8"))
    assert torch.equal(torch_sage.sageattn(q, k, v, pv_accum_dtype="fp32"), base)
    assert torch.equal(torch_sage.sageattn(q, k, v, pv_mode="fp8"), torch.ops.sage.attention(q, k, v, pv_mode="fp8"))
    with pytest.raises(ValueError, match="pv_accum_dtype must be one of"):
        torch_sage.sageattn(q, k, v, pv_accum_dtype="fp64")


@pytest.mark.parametrize("kwargs,match", [
    (dict(is_casual=True), r"unexpected keyword argument 'is_casual' .*did you mean 'is_causal'\?"),
    (dict(scale=0.1), r"unexpected keyword argument 'scale' .*did you mean 'sm_scale'\?"),
    (dict(smoothk=False), r"'smoothk' .*did you mean 'smooth_k'\?"),
    (dict(layout="NHD"), r"'layout' .*did you mean 'tensor_layout'\?"),
    (dict(foo=1), r"unexpected keyword argument 'foo' \(no SageAttention 2.x version knows it\)$"),
    (dict(cu_seqlens_q=torch.tensor([0, 128])), "keyword argument 'cu_seqlens_q' of sageattn_varlen"),
])
def test_unknown_keywords_raise_type_error(kwargs, match):
    q, k, v = make_qkv(1, 2, 2, 16, 16, 64)
    with pytest.raises(TypeError, match=match):
        torch_sage.sageattn(q, k, v, **kwargs)


def test_dropout_raises_instead_of_being_ignored():
    q, k, v = make_qkv(1, 2, 2, 16, 16, 64)
    with pytest.raises(ValueError, match="dropout_p=0.1 is not supported"):
        torch_sage.sageattn(q, k, v, dropout_p=0.1)


def test_float32_is_accepted():
    q, k, v = make_qkv(1, 2, 1, 100, 90, 64, dtype=torch.float32)
    out = torch_sage.sageattn(q, k, v, is_causal=True)
    assert out.dtype == torch.float32
    assert_accurate(out, exact_attention(*(as_computed(t) for t in (q, k, v)), is_causal=True)[0], "fp16")


def test_attn_mask_raises_instead_of_being_ignored():
    q, k, v = make_qkv(1, 2, 2, 16, 16, 64)
    with pytest.raises(ValueError, match="attn_mask is not supported"):
        torch_sage.sageattn(q, k, v, attn_mask=torch.ones(16, 16, dtype=torch.bool))
    torch_sage.sageattn(q, k, v, attn_mask=None)
