"""The public API's boolean and enum arguments are checked (a bool or 0 / 1, one of the named values), inputs without
heads give an empty result as B = 0 does, and sdpa_mode's stats count a raising call as an error and name the
attention it cannot see (nn.MultiheadAttention)."""
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_sage
from torch_sage import dropin, sdpa
from conftest import make_qkv
from sdpa_common import _restore_flash_impl  # noqa: F401  (fixture: flash impl and enable_sdpa undone)

BAD_BOOLS = ["False", None, 2, 1.5]


def qkv(b=1, hq=2, hk=2, nq=40, nk=40, d=32, **kw):
    return make_qkv(b, hq, hk, nq, nk, d, **kw)


def varlen(fn_kwargs):
    q, k, v = qkv(nq=48, nk=48)
    cu = torch.tensor([0, 20, 48], dtype=torch.int32)
    return dropin.sageattn_varlen(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1), cu, cu, 28, 28,
                                  **fn_kwargs)


def routed_once(value_kwargs, dtype=torch.float16):
    """F.scaled_dot_product_attention under sdpa_mode(**value_kwargs): (output, stats)."""
    q, k, v = qkv(dtype=dtype)
    with torch_sage.sdpa_mode(**value_kwargs) as mode:
        out = F.scaled_dot_product_attention(q, k, v)
    return out, mode.stats.as_dict()


def flash_cpu(value_kwargs):
    q, k, v = qkv()
    with sdpa.flash_impl(devices=("cpu",), **value_kwargs):
        return F.scaled_dot_product_attention(q, k, v)


def alias_module(force):
    saved = sys.modules.pop("sageattention", None)
    try:
        mod = torch_sage.install_sageattention_alias(force=force)
        return dropin.is_sageattention_alias(mod)
    finally:
        torch_sage.uninstall_sageattention_alias()
        if saved is not None:
            sys.modules["sageattention"] = saved


def call(fn, **fixed):
    """A function of one argument's value (name given) that calls fn on small HND inputs."""
    def run(name, value):
        q, k, v = qkv()
        return fn(q, k, v, **fixed, **{name: value})
    return run


def with_name(fn):
    return lambda name, value: fn({name: value})


# (entry point, argument, run(name, value), whether True and False give different results)
BOOL_ARGUMENTS = [
    ("attention", "is_causal", call(torch_sage.attention), True),
    ("attention", "smooth_k", call(torch_sage.attention), True),
    ("attention_with_lse", "is_causal", call(torch_sage.attention_with_lse), True),
    ("attention_with_lse", "smooth_k", call(torch_sage.attention_with_lse), True),
    ("sageattn", "is_causal", call(torch_sage.sageattn), True),
    ("sageattn", "return_lse", call(torch_sage.sageattn), True),
    ("sageattn", "smooth_k", call(torch_sage.sageattn), True),
    ("sageattn", "smooth_v", call(torch_sage.sageattn), False),  # accepted and ignored, as documented
    ("alias sageattn", "smooth_k", call(dropin.sageattn), True),
    ("alias sageattn", "return_lse", call(dropin.sageattn), True),
    ("sageattn_qk_int8_pv_fp16_triton", "is_causal", call(dropin.sageattn_qk_int8_pv_fp16_triton), True),
    ("sageattn_qk_int8_pv_fp16_triton", "smooth_k", call(dropin.sageattn_qk_int8_pv_fp16_triton), True),
    ("sageattn_qk_int8_pv_fp16_triton", "return_lse", call(dropin.sageattn_qk_int8_pv_fp16_triton), True),
    ("sageattn_qk_int8_pv_fp16_cuda", "is_causal", call(dropin.sageattn_qk_int8_pv_fp16_cuda), True),
    ("sageattn_qk_int8_pv_fp16_cuda", "smooth_k", call(dropin.sageattn_qk_int8_pv_fp16_cuda), True),
    ("sageattn_qk_int8_pv_fp16_cuda", "smooth_v", call(dropin.sageattn_qk_int8_pv_fp16_cuda), False),
    ("sageattn_qk_int8_pv_fp16_cuda", "return_lse", call(dropin.sageattn_qk_int8_pv_fp16_cuda), True),
    ("sageattn_qk_int8_pv_fp8_cuda", "is_causal", call(dropin.sageattn_qk_int8_pv_fp8_cuda), True),
    ("sageattn_qk_int8_pv_fp8_cuda", "smooth_v", call(dropin.sageattn_qk_int8_pv_fp8_cuda), False),
    ("sageattn_qk_int8_pv_fp8_cuda", "return_lse", call(dropin.sageattn_qk_int8_pv_fp8_cuda), True),
    ("sageattn_qk_int8_pv_fp8_cuda_sm90", "smooth_k", call(dropin.sageattn_qk_int8_pv_fp8_cuda_sm90), True),
    ("sageattn_qk_int8_pv_fp8_cuda_sm90", "smooth_v", call(dropin.sageattn_qk_int8_pv_fp8_cuda_sm90), False),
    ("sageattn_varlen", "is_causal", with_name(varlen), True),
    ("sageattn_varlen", "smooth_k", with_name(varlen), True),
    ("sdpa_mode", "smooth_k", with_name(routed_once), True),
    # float32 is routed only with allow_fp32: the stats differ
    ("sdpa_mode", "allow_fp32", lambda name, value: routed_once({name: value}, torch.float32)[1], True),
    ("sdpa_fallback_reason", "enable_gqa", lambda name, value: sdpa.sdpa_fallback_reason(*qkv(hq=4, hk=2),
                                                                                         **{name: value}), True),
    ("sdpa_fallback_reason", "allow_fp32", lambda name, value: sdpa.sdpa_fallback_reason(
        *qkv(dtype=torch.float32), **{name: value}), True),
    ("sdpa_fallback_reason", "is_causal", lambda name, value: sdpa.sdpa_fallback_reason(*qkv(), **{name: value}),
     False),
    ("flash_fallback_reason", "is_causal", lambda name, value: sdpa.flash_fallback_reason(*qkv(nq=40, nk=50),
                                                                                          **{name: value}), True),
    ("flash_fallback_reason", "return_debug_mask", lambda name, value: sdpa.flash_fallback_reason(
        *qkv(), **{name: value}), True),
    ("flash_fallback_reason", "cpu_op", lambda name, value: sdpa.flash_fallback_reason(*qkv(dtype=torch.float32),
                                                                                       **{name: value}), True),
    ("sage_scaled_dot_product_flash_attention", "smooth_k",
     lambda name, value: sdpa.sage_scaled_dot_product_flash_attention(*qkv(), **{name: value})[0], True),
    ("sage_scaled_dot_product_flash_attention_for_cpu", "smooth_k",
     lambda name, value: sdpa.sage_scaled_dot_product_flash_attention_for_cpu(*qkv(), **{name: value})[0], True),
    ("activate_flash_impl", "smooth_k", with_name(flash_cpu), True),
    # force=False gives the alias too unless a real SageAttention is installed
    ("install_sageattention_alias", "force", lambda name, value: alias_module(value),
     dropin._real_sageattention_available()),
]


def same(a, b):
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and torch.equal(a, b)
    return a == b


@pytest.mark.parametrize("entry,name,run,matters", BOOL_ARGUMENTS, ids=[f"{e}-{n}" for e, n, _, _ in BOOL_ARGUMENTS])
def test_bool_arguments_take_a_bool_or_0_1(entry, name, run, matters):
    on, off = run(name, True), run(name, False)
    assert same(run(name, 1), on) and same(run(name, 0), off)
    assert same(on, off) is not matters  # the flag is honoured (or, where documented, ignored)


@pytest.mark.parametrize("bad", BAD_BOOLS, ids=repr)
@pytest.mark.parametrize("entry,name,run,matters", BOOL_ARGUMENTS, ids=[f"{e}-{n}" for e, n, _, _ in BOOL_ARGUMENTS])
def test_bool_arguments_refuse_anything_else(entry, name, run, matters, bad):
    with pytest.raises(TypeError, match=rf"\b{name} must be a bool .*got {bad!r}"):
        run(name, bad)


def test_string_false_no_longer_means_true():
    """The case of the issue: smooth_k="False" ran with smoothing, smooth_k=None without."""
    q, k, v = qkv()
    with pytest.raises(TypeError, match="sageattn: smooth_k must be a bool"):
        torch_sage.sageattn(q, k, v, smooth_k="False")
    with pytest.raises(TypeError, match="sageattn_qk_int8_pv_fp16_cuda: smooth_k must be a bool"):
        dropin.sageattn_qk_int8_pv_fp16_cuda(q, k, v, smooth_k=None)  # named after the function called
    with pytest.raises(TypeError, match="sageattn: return_lse must be a bool"):
        torch_sage.sageattn(q, k, v, return_lse="False")  # returned a tuple


# (call with one bad value, exception type, what the message must say)
BAD_ENUMS = [
    (lambda q, k, v: torch_sage.attention(q, k, v, "hnd"), RuntimeError, 'tensor_layout must be "HND" .* or "NHD"'),
    (lambda q, k, v: torch_sage.attention(q, k, v, None), RuntimeError, "argument 'tensor_layout'"),
    (lambda q, k, v: torch_sage.attention(q, k, v, pv_mode="FP8"), RuntimeError, 'pv_mode must be "auto", "fp16"'),
    (lambda q, k, v: torch_sage.attention_with_lse(q, k, v, pv_mode=None), RuntimeError, "argument 'pv_mode'"),
    (lambda q, k, v: torch_sage.sageattn(q, k, v, tensor_layout="BHSD"), RuntimeError, 'tensor_layout must be "HND"'),
    (lambda q, k, v: torch_sage.sageattn(q, k, v, pv_mode="int4"), RuntimeError, 'pv_mode must be "auto"'),
    (lambda q, k, v: torch_sage.sageattn(q, k, v, pv_accum_dtype="fp64"), ValueError,
     "sageattn: pv_accum_dtype must be one of 'fp32', 'fp16', 'fp16\\+fp32', 'fp32\\+fp32', 'fp32\\+fp16', got 'fp64'"),
    (lambda q, k, v: torch_sage.sageattn(q, k, v, pv_mode="fp8", pv_accum_dtype="fp64"), ValueError,
     "pv_accum_dtype must be one of"),  # checked even where pv_mode decides
    (lambda q, k, v: torch_sage.sageattn(q, k, v, qk_quant_gran="per_block"), ValueError,
     "sageattn: qk_quant_gran must be one of 'per_warp', 'per_thread', got 'per_block'"),
    (lambda q, k, v: torch_sage.sageattn(q, k, v, quantization_backend=None), ValueError,
     "sageattn: quantization_backend must be one of 'triton', 'cuda', got None"),
    (lambda q, k, v: dropin.sageattn_qk_int8_pv_fp16_triton(q, k, v, quantization_backend="hip"), ValueError,
     "sageattn_qk_int8_pv_fp16_triton: quantization_backend must be one of 'triton', 'cuda'"),
    (lambda q, k, v: dropin.sageattn_qk_int8_pv_fp16_cuda(q, k, v, qk_quant_gran="per_tensor"), ValueError,
     "sageattn_qk_int8_pv_fp16_cuda: qk_quant_gran must be one of"),
    (lambda q, k, v: dropin.sageattn_qk_int8_pv_fp16_cuda(q, k, v, pv_accum_dtype="fp32+fp32"), ValueError,
     "sageattn_qk_int8_pv_fp16_cuda: pv_accum_dtype must be one of 'fp16', 'fp16\\+fp32', 'fp32', got 'fp32\\+fp32'"),
    (lambda q, k, v: dropin.sageattn_qk_int8_pv_fp8_cuda(q, k, v, pv_accum_dtype="fp16"), ValueError,
     "sageattn_qk_int8_pv_fp8_cuda: pv_accum_dtype must be one of 'fp32', 'fp32\\+fp32', 'fp32\\+fp16'"),
    (lambda q, k, v: dropin.sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v, pv_accum_dtype="fp16"), ValueError,
     "sageattn_qk_int8_pv_fp8_cuda_sm90: pv_accum_dtype must be one of"),
    (lambda q, k, v: dropin.sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v, qk_quant_gran=1), ValueError,
     "qk_quant_gran must be one of 'per_warp', 'per_thread', got 1"),
    (lambda q, k, v: torch_sage.sdpa_mode(pv_mode="FP16"), ValueError,
     "sdpa_mode: pv_mode must be one of 'auto', 'fp16', 'fp8', got 'FP16'"),
    (lambda q, k, v: torch_sage.enable_sdpa(pv_mode=None), ValueError, "pv_mode must be one of"),
    (lambda q, k, v: sdpa.activate_flash_impl(devices=("cpu",), pv_mode="fast"), ValueError,
     "activate_flash_impl: pv_mode must be one of"),
]


@pytest.mark.parametrize("bad_call,exc,match", BAD_ENUMS)
def test_enum_arguments_refuse_other_values(bad_call, exc, match):
    q, k, v = qkv()
    with pytest.raises(exc, match=match):
        bad_call(q, k, v)
    assert not sdpa.flash_impl_active()


def test_enum_arguments_accept_their_values():
    q, k, v = qkv()
    base = torch_sage.sageattn(q, k, v)
    for gran in ("per_warp", "per_thread"):
        for backend in ("triton", "cuda"):
            assert torch.equal(torch_sage.sageattn(q, k, v, qk_quant_gran=gran, quantization_backend=backend), base)
    assert torch.equal(torch_sage.sageattn(q, k, v, pv_accum_dtype=None), base)  # None: unset, as before
    assert torch.equal(torch_sage.sageattn(q, k, v, pv_accum_dtype="fp32+fp32"),
                       torch_sage.attention(q, k, v, pv_mode="fp8"))


# ---------------------------------------------------------------------------------------------------------------
# H = 0: an empty result, as B = 0 and N = 0 give
# ---------------------------------------------------------------------------------------------------------------

def heads_first(t, layout):
    return t if layout == "HND" else t.transpose(1, 2).contiguous()


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_no_heads_give_an_empty_result_like_no_batch(layout, dtype):
    for b, h in ((0, 2), (2, 0)):  # B = 0 (the op's own rule) and H = 0 (answered before the op)
        q, k, v = (heads_first(t, layout) for t in make_qkv(b, h, h, 24, 40, 48, dtype=dtype))
        out = torch_sage.attention(q, k, v, layout)
        assert out.shape == q.shape and out.dtype == dtype and out.device == q.device
        out2, lse = torch_sage.attention_with_lse(q, k, v, layout, True, 0.2)
        assert out2.shape == q.shape and out2.dtype == dtype
        assert lse.shape == (b, h, 24) and lse.dtype == torch.float32
        res, res_lse = torch_sage.sageattn(q, k, v, layout, return_lse=True)
        assert res.shape == q.shape and res_lse.shape == (b, h, 24)
        # SDPA gives the same shape; it is not called here: torch 2.11's dies (SIGFPE) on empty inputs (F49).


def test_no_heads_still_check_everything_else():
    q, k, v = qkv(hq=0, hk=0)
    for bad, match in [
        (dict(q=q.double(), k=k.double(), v=v.double()), "float16 or bfloat16"),
        (dict(k=k[..., :16].contiguous(), v=v[..., :16].contiguous()), "same head_dim"),
        (dict(v=v[:, :, :8]), "k and v must have the same shape"),
        (dict(k=k.repeat(2, 1, 1, 1), v=v.repeat(2, 1, 1, 1)), "same batch size"),
        (dict(pv_mode="int4"), 'pv_mode must be "auto"'),
        (dict(tensor_layout="BHSD"), 'tensor_layout must be "HND"'),
        (dict(sm_scale=1e9), "sm_scale must be finite"),
    ]:
        args = dict(q=q, k=k, v=v)
        args.update(bad)
        with pytest.raises(RuntimeError, match=match):
            torch_sage.attention(**args)
    # no query heads with key/value heads was already a multiple (0 of 2): empty, from the op itself
    assert torch_sage.attention(q, *qkv()[1:]).shape == q.shape
    # query heads with no key/value heads is still not a multiple
    with pytest.raises(RuntimeError, match=r"query heads \(2\) must be a multiple of the number of key/value heads "
                                           r"\(0\)"):
        torch_sage.attention(qkv()[0], k, v)


def test_no_heads_under_sdpa_mode_and_compile():
    q, k, v = qkv(hq=0, hk=0)
    # Routed, these calls never reach torch's own SDPA, which in torch 2.11 dies (SIGFPE) on empty inputs (F49).
    with torch_sage.sdpa_mode() as mode:
        out = F.scaled_dot_product_attention(q, k, v)
        compiled = torch.compile(F.scaled_dot_product_attention, fullgraph=True, backend="eager")(q, k, v)
    assert out.shape == compiled.shape == (1, 0, 40, 32)
    assert mode.stats.routed == 1 and mode.stats.compiled_routed == 1 and not mode.stats.errors


# ---------------------------------------------------------------------------------------------------------------
# sdpa_mode's stats: errors, and attention it cannot see
# ---------------------------------------------------------------------------------------------------------------

def test_sdpa_mode_counts_a_raising_call_as_an_error(monkeypatch):
    q, k, v = qkv()
    with torch_sage.sdpa_mode() as mode:
        with pytest.raises(RuntimeError, match="sm_scale must be finite"):
            F.scaled_dot_product_attention(q, k, v, scale=1e9)
        assert mode.stats.routed == 0 and mode.stats.errors == {"RuntimeError": 1}
        monkeypatch.setenv("SAGEATTN_SK1_PROLOGUE", "foo")  # a bad setting: read at every call
        with pytest.raises(RuntimeError, match="SAGEATTN_SK1_PROLOGUE"):
            F.scaled_dot_product_attention(q, k, v)
        monkeypatch.delenv("SAGEATTN_SK1_PROLOGUE")
        F.scaled_dot_product_attention(q, k, v)
        F.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(40, 40, dtype=q.dtype))
    assert mode.stats.as_dict() == {"routed": 1, "fallback": {"attn_mask": 1}, "compiled_routed": 0,
                                    "compiled_fallback": {}, "errors": {"RuntimeError": 2}, "unseen": {}}
    assert "errors={'RuntimeError': 2}" in repr(mode.stats)


def test_flash_impl_counts_a_raising_call_as_an_error():
    q, k, v = qkv()
    with sdpa.flash_impl(devices=("cpu",)):
        with pytest.raises(RuntimeError, match="sm_scale must be finite"):
            F.scaled_dot_product_attention(q, k, v, scale=1e9)
        F.scaled_dot_product_attention(q, k, v)
    assert sdpa.flash_impl_stats.routed == 1 and sdpa.flash_impl_stats.errors == {"RuntimeError": 1}


class Mixed(nn.Module):
    """An nn.MultiheadAttention, an nn.TransformerEncoderLayer and an attention that calls SDPA."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, heads, batch_first=True)
        self.layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=128, batch_first=True)
        self.qkv = nn.Linear(d, 3 * d)
        self.heads = heads

    def forward(self, x):
        x = x + self.mha(x, x, x, need_weights=False)[0]
        x = self.layer(x)
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).transpose(1, 3).unbind(2)
        return x + F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)


def test_sdpa_mode_names_the_attention_it_cannot_see():
    torch.manual_seed(0)
    model = Mixed().eval().to(torch.bfloat16)
    x = torch.randn(2, 32, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        with torch_sage.sdpa_mode() as mode:
            out = model(x)
        only_mha = nn.MultiheadAttention(64, 4, batch_first=True).eval().to(torch.bfloat16)
        plain = only_mha(x, x, x)[0]
        with torch_sage.sdpa_mode() as mha_mode:
            assert torch.equal(only_mha(x, x, x)[0], plain)  # computed by torch, as without the mode
    # the SDPA call is routed; the two attentions computed inside F.multi_head_attention_forward are named
    assert mode.stats.routed == 1 and not mode.stats.fallback
    assert mode.stats.unseen == {"multi_head_attention_forward": 2}
    assert mha_mode.stats.routed == 0 and mha_mode.stats.unseen == {"multi_head_attention_forward": 1}
    assert "unseen={'multi_head_attention_forward': 1}" in repr(mha_mode.stats)
    assert out.shape == x.shape and torch.isfinite(out).all()


def test_sdpa_mode_names_unseen_attention_while_tracing():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(64, 4, batch_first=True).eval()
    x = torch.randn(2, 16, 64)
    with torch.no_grad(), torch_sage.sdpa_mode() as mode:
        f = torch.compile(lambda t: mha(t, t, t, need_weights=False)[0], fullgraph=True, backend="aot_eager")
        f(x)
        f(x)  # the compiled graph: no second trace, no second count
    assert mode.stats.unseen == {"multi_head_attention_forward": 1} and mode.stats.compiled_routed == 0
