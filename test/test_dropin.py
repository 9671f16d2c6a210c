"""``from sageattention import sageattn`` reaching torch_sage: the alias, and the exact calls that diffusers
(models/attention_dispatch.py) and ComfyUI (comfy/ldm/modules/attention.py) make, reproduced here without
installing either."""
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import logging
import os
import sys
import types

import pytest
import torch
import torch.nn.functional as F

import torch_sage
from torch_sage import sageattention_alias, sageattention_api
from conftest import accuracy, assert_accurate, exact_attention, make_qkv


@pytest.fixture
def alias():
    """The alias installed for one test, and the process left as it was afterwards."""
    saved = sys.modules.pop("sageattention", None)
    mod = torch_sage.install_sageattention_alias(force=True)
    yield mod
    torch_sage.uninstall_sageattention_alias()
    if saved is not None:
        sys.modules["sageattention"] = saved


def test_alias_is_importable_and_has_metadata(alias):
    import sageattention
    from sageattention import sageattn, sageattn_varlen  # noqa: F401

    assert sageattention is alias and sageattention_alias.is_sageattention_alias(sageattention)
    assert sageattn is sageattention_api.sageattn
    # What diffusers' _is_package_available("sageattention") and is_sageattention_version(">=", "2.1.1") read:
    assert importlib.util.find_spec("sageattention") is not None
    version = importlib.metadata.version("sageattention")
    assert version.startswith("2.2.0+torchsage.") and sageattention.__version__ == version
    dist = importlib.metadata.distribution("sageattention")
    assert dist.metadata["Name"] == "sageattention" and dist.read_text("top_level.txt").split() == ["sageattention"]
    assert any(d.metadata["Name"] == "sageattention" for d in importlib.metadata.distributions())
    # A purge of sys.modules re-imports the same alias.
    del sys.modules["sageattention"]
    assert importlib.import_module("sageattention") is alias
    assert torch_sage.install_sageattention_alias() is alias  # idempotent


def _installed_sageattention_version():
    """The version a real sageattention distribution reports (a peer wheel may be installed), else None."""
    try:
        return importlib.metadata.version("sageattention")
    except importlib.metadata.PackageNotFoundError:
        return None


def test_alias_stands_aside_for_a_real_sageattention(monkeypatch):
    monkeypatch.delenv("TORCH_SAGE_FORCE_ALIAS", raising=False)
    saved = sys.modules.pop("sageattention", None)
    before = _installed_sageattention_version()
    assert before is None or "torchsage" not in before  # no alias left over from another test
    real = types.ModuleType("sageattention")
    real.__spec__ = importlib.machinery.ModuleSpec("sageattention", None)
    sys.modules["sageattention"] = real
    try:
        assert torch_sage.install_sageattention_alias() is real  # not forced: the real one stays
        forced = torch_sage.install_sageattention_alias(force=True)
        assert forced is not real and sageattention_alias.is_sageattention_alias(sys.modules["sageattention"])
        torch_sage.uninstall_sageattention_alias()
        assert "sageattention" not in sys.modules
        assert _installed_sageattention_version() == before  # the alias's metadata left with it
    finally:
        torch_sage.uninstall_sageattention_alias()
        sys.modules.pop("sageattention", None)
        if saved is not None:
            sys.modules["sageattention"] = saved


def test_force_by_environment_and_too_late_warning(monkeypatch):
    saved = sys.modules.pop("sageattention", None)
    real = types.ModuleType("sageattention")
    real.__spec__ = importlib.machinery.ModuleSpec("sageattention", None)
    monkeypatch.setitem(sys.modules, "sageattention", real)
    monkeypatch.setenv("TORCH_SAGE_FORCE_ALIAS", "1")
    comfy_attention = types.ModuleType("comfy.ldm.modules.attention")
    comfy_attention.SAGE_ATTENTION_IS_AVAILABLE = False  # ComfyUI started before the alias existed
    monkeypatch.setitem(sys.modules, "comfy.ldm.modules.attention", comfy_attention)
    try:
        with pytest.warns(UserWarning, match="torch_sage.with_sageattention main.py"):
            mod = torch_sage.install_sageattention_alias()
        assert mod is not real and sageattention_alias.is_sageattention_alias(mod)
    finally:
        torch_sage.uninstall_sageattention_alias()
        if saved is not None:
            sys.modules["sageattention"] = saved


def test_signatures_match_sageattention_2_2_0(alias):
    def names(fn):
        return [p for p in inspect.signature(fn).parameters]

    assert names(alias.sageattn) == ["q", "k", "v", "tensor_layout", "is_causal", "sm_scale", "return_lse", "kwargs"]
    assert names(alias.sageattn_qk_int8_pv_fp16_triton)[:9] == [
        "q", "k", "v", "tensor_layout", "quantization_backend", "is_causal", "sm_scale", "smooth_k", "return_lse"]
    for fn in (alias.sageattn_qk_int8_pv_fp16_cuda, alias.sageattn_qk_int8_pv_fp8_cuda):
        assert names(fn)[:11] == ["q", "k", "v", "tensor_layout", "is_causal", "qk_quant_gran", "sm_scale",
                                  "pv_accum_dtype", "smooth_k", "smooth_v", "return_lse"]
    assert names(alias.sageattn_varlen)[:10] == ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                                                 "max_seqlen_k", "is_causal", "sm_scale", "smooth_k"]
    # ComfyUI: SAGE_ATTENTION_SUPPORTS_MASK = "attn_mask" in inspect.signature(sageattn).parameters
    assert "attn_mask" not in inspect.signature(alias.sageattn).parameters


def test_modes_of_the_variants(alias):
    q, k, v = make_qkv(1, 2, 2, 128, 128, 64)
    fp16 = torch.ops.sage.attention(q, k, v, pv_mode="fp16")
    fp8 = torch.ops.sage.attention(q, k, v, pv_mode="fp8")
    assert torch.equal(alias.sageattn(q, k, v), fp16)
    assert torch.equal(alias.sageattn(q, k, v, pv_accum_dtype="fp32+fp32"), fp8)
    assert torch.equal(alias.sageattn_qk_int8_pv_fp16_triton(q, k, v), fp16)
    assert torch.equal(alias.sageattn_qk_int8_pv_fp16_cuda(q, k, v, pv_accum_dtype="fp16+fp32"), fp16)
    assert torch.equal(alias.sageattn_qk_int8_pv_fp8_cuda(q, k, v, pv_accum_dtype="fp32"), fp8)
    assert torch.equal(alias.sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v), fp8)
    assert torch.equal(alias.sageattn_qk_int8_pv_fp16_triton(q, k, v, smooth_k=False),
                       torch.ops.sage.attention(q, k, v, smooth_k=False, pv_mode="fp16"))
    with pytest.raises(ValueError, match="pv_accum_dtype"):
        alias.sageattn_qk_int8_pv_fp8_cuda(q, k, v, pv_accum_dtype="fp16")
    with pytest.raises(ValueError, match="attn_mask"):
        alias.sageattn(q, k, v, attn_mask=torch.zeros(128, 128))
    assert torch.equal(alias.sageattn(q, k, v, attn_mask=None), fp16)



def _alias_calls(alias):
    """Each public function of the alias as f(q, k, v, **kwargs) on HND inputs."""
    def varlen(q, k, v, **kwargs):
        cu_q = torch.tensor([0, q.shape[2]], dtype=torch.int32)
        cu_k = torch.tensor([0, k.shape[2]], dtype=torch.int32)
        return alias.sageattn_varlen(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1), cu_q, cu_k,
                                     q.shape[2], k.shape[2], **kwargs)
    return [alias.sageattn, alias.sageattn_qk_int8_pv_fp16_triton, alias.sageattn_qk_int8_pv_fp16_cuda,
            alias.sageattn_qk_int8_pv_fp8_cuda, alias.sageattn_qk_int8_pv_fp8_cuda_sm90, varlen]


def test_float32_raises_so_that_the_callers_fallback_runs(alias):
    """SageAttention asserts float16/bfloat16; callers (ComfyUI nodes) catch the error and compute the call
    exactly, which an fp32 model needs (values beyond the 16-bit range)."""
    q, k, v = make_qkv(1, 2, 2, 64, 64, 64, dtype=torch.float32)
    for fn in _alias_calls(alias):
        with pytest.raises(TypeError, match="float32; SageAttention takes float16 or bfloat16 only"):
            fn(q, k, v)
        with pytest.raises(TypeError, match="k is torch.float32"):
            fn(q.half(), k, v.half())
        assert fn(q.bfloat16(), k.bfloat16(), v.bfloat16()).dtype == torch.bfloat16
    assert torch_sage.sageattn(q, k, v).dtype == torch.float32  # the library's own sageattn accepts float32


def test_unknown_keywords_raise_in_every_function(alias):
    q, k, v = make_qkv(1, 2, 2, 64, 64, 64)
    for fn in _alias_calls(alias):
        with pytest.raises(TypeError, match="unexpected keyword argument 'is_casual'.*'is_causal'"):
            fn(q, k, v, is_casual=True)
        with pytest.raises(ValueError, match="dropout_p"):
            fn(q, k, v, dropout_p=0.5)
        fn(q, k, v, attn_mask=None, dropout_p=0.0, smooth_v=False)  # SageAttention 2.x keywords: accepted
    with pytest.raises(TypeError, match="'pv_mode'"):  # the kernel functions choose the mode by their name
        alias.sageattn_qk_int8_pv_fp8_cuda(q, k, v, pv_mode="fp16")
    assert torch.equal(alias.sageattn(q, k, v, pv_mode="fp8"), torch.ops.sage.attention(q, k, v, pv_mode="fp8"))

# ---------------------------------------------------------------------------------------------------------------
# diffusers: the calls of src/diffusers/models/attention_dispatch.py (tensors [B, N, H, D], layout "NHD")
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("is_causal,scale", [(False, None), (True, 0.1)])
def test_diffusers_sage_backend_calls(alias, is_causal, scale):
    from sageattention import sageattn

    query, key, value = make_qkv(2, 4, 4, 200, 200, 128, dtype=torch.bfloat16, layout="NHD")
    ref, ref_lse = exact_attention(query, key, value, "NHD", is_causal, scale)
    # _sage_attention, return_lse=False
    out = sageattn(q=query, k=key, v=value, tensor_layout="NHD", is_causal=is_causal, sm_scale=scale,
                   return_lse=False)
    assert out.shape == query.shape
    assert_accurate(out, ref, "fp16")
    # _sage_attention / _sage_attention_forward_op, return_lse=True
    out = sageattn(q=query, k=key, v=value, tensor_layout="NHD", is_causal=is_causal, sm_scale=scale,
                   return_lse=True)
    out, lse, *_ = out
    lse = lse.permute(0, 2, 1)  # the forward op's [B, N, H] for context-parallel merging
    assert lse.shape == (2, 200, 4) and lse.dtype == torch.float32
    torch.testing.assert_close(lse.double(), ref_lse.permute(0, 2, 1), atol=0.05, rtol=0.005)
    assert_accurate(out, ref, "fp16")


@pytest.mark.parametrize("name,mode", [("sageattn_qk_int8_pv_fp8_cuda", "fp8"),
                                       ("sageattn_qk_int8_pv_fp8_cuda_sm90", "fp8"),
                                       ("sageattn_qk_int8_pv_fp16_cuda", "fp16"),
                                       ("sageattn_qk_int8_pv_fp16_triton", "fp16")])
def test_diffusers_explicit_kernel_backends(alias, name, mode):
    fn = getattr(importlib.import_module("sageattention"), name)
    query, key, value = make_qkv(1, 2, 2, 300, 300, 64, dtype=torch.float16, layout="NHD")
    for return_lse in (False, True):
        res = fn(q=query, k=key, v=value, tensor_layout="NHD", is_causal=False, sm_scale=None,
                 return_lse=return_lse)
        out = res[0] if return_lse else res
        assert out.shape == query.shape
        cos, _ = accuracy(out, exact_attention(query, key, value, "NHD")[0])
        assert cos >= (0.9999 if mode == "fp16" else 0.999)


def test_diffusers_sage_varlen_call(alias):
    from sageattention import sageattn_varlen

    batch_size, seq_len_q, seq_len_kv, heads, dim = 3, 70, 90, 2, 64
    query, key, value = make_qkv(batch_size, heads, heads, seq_len_q, seq_len_kv, dim, layout="NHD")
    valid = [90, 40, 1]  # keys kept per batch element (diffusers' mask handling)
    cu_seqlens_q = torch.arange(0, batch_size + 1, dtype=torch.int32) * seq_len_q
    cu_seqlens_k = torch.zeros(batch_size + 1, dtype=torch.int32)
    cu_seqlens_k[1:] = torch.cumsum(torch.tensor(valid, dtype=torch.int32), 0)
    key_packed = torch.cat([key[b, :valid[b]] for b in range(batch_size)])
    value_packed = torch.cat([value[b, :valid[b]] for b in range(batch_size)])
    out = sageattn_varlen(q=query.flatten(0, 1), k=key_packed, v=value_packed, cu_seqlens_q=cu_seqlens_q,
                          cu_seqlens_k=cu_seqlens_k, max_seqlen_q=seq_len_q, max_seqlen_k=max(valid),
                          is_causal=False, sm_scale=None)
    out = out.unflatten(0, (batch_size, -1))
    for b in range(batch_size):
        ref = exact_attention(query[b:b + 1], key[b:b + 1, :valid[b]], value[b:b + 1, :valid[b]], "NHD")[0]
        assert_accurate(out[b:b + 1], ref, "fp16")


# ---------------------------------------------------------------------------------------------------------------
# ComfyUI: attention_sage of comfy/ldm/modules/attention.py, current and older releases, reproduced
# ---------------------------------------------------------------------------------------------------------------

def comfy_attention_pytorch(q, k, v, heads, mask=None, skip_reshape=False, skip_output_reshape=False, **kwargs):
    if skip_reshape:
        b, _, _, dim_head = q.shape
    else:
        b, _, dim_head = q.shape
        dim_head //= heads
        q, k, v = (t.view(b, -1, heads, dim_head).transpose(1, 2) for t in (q, k, v))
    if mask is not None:
        if mask.ndim == 2:
            mask = mask.unsqueeze(0)
        if mask.ndim == 3:
            mask = mask.unsqueeze(1)
    sdpa_extra = {key: val for key, val in kwargs.items() if key in ("scale", "enable_gqa")}
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False, **sdpa_extra)
    if not skip_output_reshape:
        out = out.transpose(1, 2).reshape(b, -1, heads * dim_head)
    return out


def comfy_attention_sage(sageattn, q, k, v, heads, mask=None, skip_reshape=False, skip_output_reshape=False,
                         current=True, **kwargs):
    """current=True: ComfyUI with SAGE_ATTENTION_SUPPORTS_MASK, smooth_k=False and sm_scale from kwargs;
    current=False: older releases that pass attn_mask=mask always and rely on try/except."""
    supports_mask = "attn_mask" in inspect.signature(sageattn).parameters
    if current and mask is not None and not supports_mask:
        return comfy_attention_pytorch(q, k, v, heads, mask=mask, skip_reshape=skip_reshape,
                                       skip_output_reshape=skip_output_reshape, **kwargs)
    if skip_reshape:
        b, _, _, dim_head = q.shape
        tensor_layout = "HND"
    else:
        b, _, dim_head = q.shape
        dim_head //= heads
        q, k, v = (t.view(b, -1, heads, dim_head) for t in (q, k, v))
        tensor_layout = "NHD"
    if mask is not None:
        if mask.ndim == 2:
            mask = mask.unsqueeze(0)
        if mask.ndim == 3:
            mask = mask.unsqueeze(1)
    if current:
        sage_kwargs = {"is_causal": False, "tensor_layout": tensor_layout, "sm_scale": kwargs.get("scale", None),
                       "smooth_k": False}
        if mask is not None:
            sage_kwargs["attn_mask"] = mask
    else:
        sage_kwargs = {"attn_mask": mask, "is_causal": False, "tensor_layout": tensor_layout}
    try:
        out = sageattn(q, k, v, **sage_kwargs)
    except Exception as e:  # noqa: BLE001 - as ComfyUI does
        logging.error("Error running sage attention: %s, using pytorch attention instead.", e)
        if tensor_layout == "NHD":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        return comfy_attention_pytorch(q, k, v, heads, mask=mask, skip_reshape=True,
                                       skip_output_reshape=skip_output_reshape, **kwargs)
    if tensor_layout == "HND":
        if not skip_output_reshape:
            out = out.transpose(1, 2).reshape(b, -1, heads * dim_head)
    else:
        if skip_output_reshape:
            out = out.transpose(1, 2)
        else:
            out = out.reshape(b, -1, heads * dim_head)
    return out


def comfy_inputs(skip_reshape, b=2, heads=5, n=333, nk=77, dim_head=64, dtype=torch.float16):
    """ComfyUI's tensors: [b, N, heads * dim_head] (skip_reshape=False) or [b, heads, N, dim_head]."""
    q, k, v = make_qkv(b, heads, heads, n, nk, dim_head, dtype=dtype, key_bias=0.5)
    if not skip_reshape:
        q, k, v = (t.transpose(1, 2).reshape(b, t.shape[2], heads * dim_head) for t in (q, k, v))
    return q, k, v


@pytest.mark.parametrize("skip_reshape", [False, True])
@pytest.mark.parametrize("skip_output_reshape", [False, True])
@pytest.mark.parametrize("current", [True, False])
def test_comfyui_attention_sage(alias, skip_reshape, skip_output_reshape, current):
    from sageattention import sageattn

    q, k, v = comfy_inputs(skip_reshape)
    kwargs = {"scale": 0.1} if current else {}
    out = comfy_attention_sage(sageattn, q, k, v, 5, skip_reshape=skip_reshape,
                               skip_output_reshape=skip_output_reshape, current=current, **kwargs)
    ref = comfy_attention_pytorch(q.double(), k.double(), v.double(), 5, skip_reshape=skip_reshape,
                                  skip_output_reshape=skip_output_reshape, **kwargs)
    assert out.shape == ref.shape and out.dtype == q.dtype
    assert_accurate(out, ref, "fp16")


@pytest.mark.parametrize("current", [True, False])
def test_comfyui_masked_calls_get_exact_attention(alias, current, caplog):
    """A mask never reaches a kernel that would ignore it: current ComfyUI sees no attn_mask parameter and calls
    PyTorch; older ComfyUI passes it, gets an error and falls back to PyTorch."""
    from sageattention import sageattn

    q, k, v = comfy_inputs(False, b=1, n=64, nk=64)
    mask = torch.zeros(64, 64, dtype=q.dtype)
    mask[:, 32:] = float("-inf")
    out = comfy_attention_sage(sageattn, q, k, v, 5, mask=mask, current=current)
    assert torch.equal(out, comfy_attention_pytorch(q, k, v, 5, mask=mask))
    assert ("Error running sage attention" in caplog.text) is (not current)
    # and an unmasked call in the same process is torch_sage's
    out = comfy_attention_sage(sageattn, q, k, v, 5, current=current)
    assert not torch.equal(out, comfy_attention_pytorch(q, k, v, 5))
    assert_accurate(out, comfy_attention_pytorch(q.double(), k.double(), v.double(), 5), "fp16")


def test_comfyui_gqa_skip_reshape(alias):
    """ComfyUI expands k/v heads itself (repeat_kv_for_gqa) before HND calls; torch_sage also takes GQA as is."""
    from sageattention import sageattn

    q, k, v = make_qkv(1, 8, 2, 100, 100, 128, dtype=torch.bfloat16)
    ke, ve = k.repeat_interleave(4, 1), v.repeat_interleave(4, 1)
    out = comfy_attention_sage(sageattn, q, ke, ve, 8, skip_reshape=True, skip_output_reshape=True)
    assert torch.equal(out, sageattn(q, k, v, tensor_layout="HND", smooth_k=False))


def test_launcher_runs_a_program_with_the_alias(tmp_path):
    """python -m torch_sage.with_sageattention main.py ARGS: what ComfyUI users run (the alias exists before
    ComfyUI's startup imports sageattention)."""
    import subprocess

    script = tmp_path / "main.py"
    script.write_text(
        "import sys, inspect, importlib.metadata\n"
        "from sageattention import sageattn\n"
        "import torch\n"
        "q = torch.randn(1, 64, 2, 64, dtype=torch.float16)\n"
        "out = sageattn(q, q, q, tensor_layout='NHD', is_causal=False, smooth_k=False)\n"
        "print(__name__, sys.argv[1:], importlib.metadata.version('sageattention')[:6], tuple(out.shape),\n"
        "      'attn_mask' in inspect.signature(sageattn).parameters)\n")
    env = dict(os.environ, TORCH_SAGE_FORCE_ALIAS="1")
    res = subprocess.run([sys.executable, "-m", "torch_sage.with_sageattention", str(script), "--use-sage-attention"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[0] == "__main__ ['--use-sage-attention'] 2.2.0+ (1, 64, 2, 64) False"


def test_dropin_module_keeps_its_names():
    """torch_sage.dropin, the former home of both halves, still gives what it gave."""
    from torch_sage import dropin

    for name in sageattention_api.FUNCTIONS:
        assert getattr(dropin, name) is getattr(sageattention_api, name)
    assert dropin.install_sageattention_alias is torch_sage.install_sageattention_alias
    assert dropin.is_sageattention_alias is sageattention_alias.is_sageattention_alias


# ---------------------------------------------------------------------------------------------------------------
# diffusers imported before the alias: it has recorded "no sageattention" already
# ---------------------------------------------------------------------------------------------------------------

LATE_ALIAS = '''
import sys, warnings
import torch, diffusers
import diffusers.utils.import_utils as iu
if {dispatcher_first}:
    from diffusers import FluxTransformer2DModel  # imports the dispatcher: it decides with iu's record
    import diffusers.models.attention_dispatch as ad
    assert ad._CAN_USE_SAGE_ATTN is False
import torch_sage
assert iu._sageattention_available is False
with warnings.catch_warnings():
    warnings.simplefilter("error")  # nothing to warn about: the records are updated
    alias = torch_sage.install_sageattention_alias()
from diffusers import FluxTransformer2DModel
import diffusers.models.attention_dispatch as ad
model = FluxTransformer2DModel(num_layers=1, num_single_layers=1, attention_head_dim=64, num_attention_heads=2,
                               joint_attention_dim=32, pooled_projection_dim=32, in_channels=16,
                               axes_dims_rope=(8, 28, 28)).to(torch.bfloat16)
model.set_attention_backend("sage")
calls = []
ad.sageattn = lambda *a, **k: calls.append(1) or alias.sageattn(*a, **k)
g = torch.Generator().manual_seed(0)
ids = torch.stack([torch.zeros(64), torch.arange(64) // 8, torch.arange(64) % 8], 1)
with torch.inference_mode():
    out = model(hidden_states=torch.randn(1, 64, 16, generator=g).bfloat16(),
                encoder_hidden_states=torch.randn(1, 8, 32, generator=g).bfloat16(),
                pooled_projections=torch.randn(1, 32, generator=g).bfloat16(), timestep=torch.tensor([0.5]).bfloat16(),
                img_ids=ids, txt_ids=torch.zeros(8, 3), return_dict=False)[0]
torch_sage.uninstall_sageattention_alias()
print(len(calls), tuple(out.shape), bool(torch.isfinite(out).all()), iu._sageattention_available,
      ad._CAN_USE_SAGE_ATTN is not {dispatcher_first})
'''


@pytest.mark.parametrize("dispatcher_first", [False, True])
def test_alias_installed_after_diffusers_import(tmp_path, dispatcher_first):
    """``import diffusers`` (and, with dispatcher_first, a model class, which imports the attention dispatcher) and
    only then the alias: diffusers' 'sage' backend runs torch_sage all the same, and uninstalling puts diffusers'
    records back."""
    if importlib.util.find_spec("diffusers") is None:
        pytest.skip("pip install diffusers")
    import subprocess

    script = tmp_path / "late.py"
    script.write_text(LATE_ALIAS.format(dispatcher_first=dispatcher_first))
    env = dict(os.environ, TORCH_SAGE_FORCE_ALIAS="1")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    # 2 attention calls (one double-stream, one single-stream block); after uninstalling, diffusers' import-time
    # record is "missing" again, and a dispatcher flag the alias set is reset.
    assert res.stdout.strip().splitlines()[-1] == "2 (1, 64, 16) True False True"


def test_unknown_diffusers_warns_naming_the_fix(alias, monkeypatch):
    """A diffusers that keeps its sageattention check elsewhere cannot be updated: the warning says what to do."""
    alias_mod = alias
    torch_sage.uninstall_sageattention_alias()
    fake = types.ModuleType("diffusers")
    fake.__version__ = "0.0.1"
    monkeypatch.setitem(sys.modules, "diffusers", fake)
    monkeypatch.setitem(sys.modules, "diffusers.utils.import_utils", types.ModuleType("diffusers.utils.import_utils"))
    with pytest.warns(UserWarning, match=r"diffusers 0\.0\.1 was imported before .*install the alias before "
                                         "importing diffusers"):
        mod = torch_sage.install_sageattention_alias(force=True)
    assert sageattention_alias.is_sageattention_alias(mod) and mod is not alias_mod
