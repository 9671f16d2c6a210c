"""Unsupported input gets an error that names the problem and the accepted range."""
import pytest
import torch

from conftest import make_qkv


def call(q, k, v, **kw):
    return torch.ops.sage.attention(q, k, v, **kw)


def qkv(**kw):
    args = dict(b=1, hq=2, hk=2, nq=16, nk=16, d=64)
    args.update(kw)
    return make_qkv(**args)


@pytest.mark.parametrize("make,match", [
    (lambda: [t.double() for t in qkv()], "float16 or bfloat16"),
    (lambda: [t.to(torch.int8) for t in qkv()], "float16 or bfloat16"),
    (lambda: qkv(d=320), "head_dim must be between 1 and 256, got 320"),
    (lambda: [t[0] for t in qkv()], "must be 4-D"),
    (lambda: [t.transpose(-1, -2) for t in qkv(nq=64, nk=64)], "last dimension .* must be contiguous"),
    (lambda: qkv(hq=3, hk=2), r"number of query heads \(3\) must be a multiple of the number of key/value heads \(2\)"),
    (lambda: (lambda q, k, v: (q, k[:, :, :, :32].contiguous(), v[:, :, :, :32].contiguous()))(*qkv()),
     "same head_dim"),
    (lambda: (lambda q, k, v: (q, k.repeat(2, 1, 1, 1), v.repeat(2, 1, 1, 1)))(*qkv()), "same batch size"),
    (lambda: (lambda q, k, v: (q, k, v[:, :, :8].contiguous()))(*qkv()), "k and v must have the same shape"),
    (lambda: (lambda q, k, v: (q, k.bfloat16(), v))(*qkv()), "same dtype"),
])
def test_bad_inputs_are_named(make, match):
    q, k, v = make()
    with pytest.raises(RuntimeError, match=match):
        call(q, k, v)


def test_bad_options_are_named():
    q, k, v = qkv()
    with pytest.raises(RuntimeError, match='tensor_layout must be "HND"'):
        call(q, k, v, tensor_layout="BHSD")
    with pytest.raises(RuntimeError, match='pv_mode must be "auto", "fp16"'):
        call(q, k, v, pv_mode="int4")
    with pytest.raises(RuntimeError, match="sm_scale must be finite"):
        call(q, k, v, sm_scale=float("inf"))


def test_kernel_op_checks_its_quantized_inputs():
    q, k, v = qkv()
    qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, False)
    with pytest.raises(RuntimeError, match="qo_len 200 / kv_len 16 do not match"):
        torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, v, None, 200, "HND", False, torch.float16)
    with pytest.raises(RuntimeError, match="v_scale must be given exactly when v is float8_e4m3fn"):
        torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, v.to(torch.float8_e4m3fn), None, 16, "HND", False,
                                         torch.float16)
    with pytest.raises(RuntimeError, match="out_dtype must be float16, bfloat16 or float32"):
        torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, v, None, 16, "HND", False, torch.int32)


@pytest.mark.parametrize("which", [0, 1, 2])
@pytest.mark.parametrize("op", [torch.ops.sage.attention, torch.ops.sage.attention_with_lse])
def test_a_meta_tensor_among_cpu_inputs_raises_naming_the_devices(op, which):
    # The Meta dispatch key wins over CPU, so such a call reaches the fake kernel, which used to return
    # uninitialised CPU memory.
    args = qkv()
    args[which] = args[which].to("meta")
    names = ("q", "k", "v")
    with pytest.raises(RuntimeError, match=f"same device, got .*{names[which]} on meta"):
        op(*args)


def test_meta_inputs_of_the_other_ops_are_checked_too():
    q, k, v = qkv()
    with pytest.raises(RuntimeError, match="same device, got q on cpu, k on meta"):
        torch.ops.sage.quant_qk_int8(q, k.to("meta"), "HND", 0.125, True)
    qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, False)
    with pytest.raises(RuntimeError, match="same device, got .*v on meta"):
        torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, v.to("meta"), None, 16, "HND", False, torch.float16)


def test_all_meta_inputs_still_give_meta_outputs():
    q, k, v = (t.to("meta") for t in qkv(nq=200, nk=70))
    out = torch.ops.sage.attention(q, k, v)
    out2, lse = torch.ops.sage.attention_with_lse(q, k, v, "HND", True)
    assert out.device.type == "meta" and out.shape == q.shape and out2.shape == q.shape
    assert lse.device.type == "meta" and lse.shape == (1, 2, 200)
    qi, qs, ki, ks, km = torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, True)
    assert qi.shape == (1, 2, 256, 64) and ki.shape == (1, 2, 128, 64) and km.device.type == "meta"
