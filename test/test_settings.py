"""The SAGEATTN_SK1_* settings are read once per op call (csrc/ops/settings.h): sage::attention and the ops it
calls through the dispatcher share one reading, and each value is validated whatever the device."""
import pytest
import torch

import torch_sage

SETTINGS = ("SAGEATTN_SK1_PROLOGUE", "SAGEATTN_SK1_SM90", "SAGEATTN_SK1_MMA", "SAGEATTN_SK1_OVERLAP",
            "SAGEATTN_SK1_GFX1200", "SAGEATTN_SK1_GUARD")


def reads():
    return torch.ops.sage._settings_reads()


@pytest.fixture
def qkv():
    torch.manual_seed(0)
    return [torch.randn(1, 2, 130, 64, dtype=torch.bfloat16) for _ in range(3)]


@pytest.mark.parametrize("pv_mode", ["fp16", "fp8"])
def test_one_reading_per_attention_call(qkv, pv_mode):
    before = reads()
    out = torch_sage.attention(*qkv, pv_mode=pv_mode)
    # The composite runs quant_qk_int8, (fp8) quant_v_fp8 and qk_int8_attention: all inside its one reading.
    assert reads() - before == 1
    assert out.shape == qkv[0].shape and torch.isfinite(out).all()


def test_each_op_called_alone_reads_once(qkv):
    q, k, v = qkv
    before = reads()
    qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, True)
    assert reads() - before == 1
    torch.ops.sage.quant_v_fp8(v, "HND")
    assert reads() - before == 2
    torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, v, None, q.shape[2], "HND", False, q.dtype)
    assert reads() - before == 3


def test_a_failed_call_leaves_no_reading_behind(qkv, monkeypatch):
    """A call that raises after its reading closes its scope: the next call reads the environment again."""
    q, k, v = qkv
    with pytest.raises(RuntimeError, match="head_dim"):
        torch_sage.attention(q[..., :0], k[..., :0], v[..., :0])
    monkeypatch.setenv("SAGEATTN_SK1_MMA", "2")
    with pytest.raises(RuntimeError, match="SAGEATTN_SK1_MMA must be unset"):
        torch_sage.attention(q, k, v)
    monkeypatch.setenv("SAGEATTN_SK1_MMA", "0")
    before = reads()
    torch_sage.attention(q, k, v)
    assert reads() - before == 1


@pytest.mark.parametrize("name", SETTINGS)
@pytest.mark.parametrize("op", ["attention", "quant_qk_int8", "quant_v_fp8", "qk_int8_attention"])
def test_every_setting_is_validated_by_every_op_on_cpu(qkv, monkeypatch, name, op):
    q, k, v = qkv
    qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, True)
    monkeypatch.setenv(name, "bogus")
    calls = {
        "attention": lambda: torch_sage.attention(q, k, v),
        "quant_qk_int8": lambda: torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, True),
        "quant_v_fp8": lambda: torch.ops.sage.quant_v_fp8(v, "HND"),
        "qk_int8_attention": lambda: torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, v, None, q.shape[2], "HND",
                                                                      False, q.dtype),
    }
    with pytest.raises(RuntimeError, match=f'{name} must be .*got "bogus"'):
        calls[op]()
