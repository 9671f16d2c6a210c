import math
import os

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    # Without a GPU the Triton kernels run in Triton's interpreter on CPU tensors. The variable is read when
    # a kernel is defined, so it is set before anything imports torch_sage's Triton modules.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch_sage  # noqa: E402,F401  (registers torch.ops.sage.*)

# Accuracy bounds of docs/SEMANTICS.md against float64 exact attention.
BOUNDS = {"fp16": (0.9999, 0.015), "fp8": (0.9995, 0.03)}


def gpu_device():
    return "cuda" if torch.cuda.is_available() else None


def pytest_collection_modifyitems(config, items):
    if gpu_device() is None:
        skip = pytest.mark.skip(reason="needs a CUDA or ROCm GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


def make_qkv(b, hq, hk, nq, nk, d, dtype=torch.float16, layout="HND", device="cpu", seed=0, key_bias=4.0,
             scale=1.0):
    """Random q, k, v; keys carry a per-channel offset shared by all tokens (key_bias * randn(D))."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, nq, d, generator=g) * scale
    k = torch.randn(b, hk, nk, d, generator=g) * scale + key_bias * torch.randn(d, generator=g)
    v = torch.randn(b, hk, nk, d, generator=g)
    out = []
    for t in (q, k, v):
        t = t.to(dtype=dtype, device=device)
        out.append(t if layout == "HND" else t.transpose(1, 2).contiguous())
    return out


def to_hnd(t, layout):
    return t if layout == "HND" else t.transpose(1, 2)


def exact_attention(q, k, v, layout="HND", is_causal=False, sm_scale=None):
    """float64 attention (SDPA math) with GQA; returns (out in layout, lse [B, Hq, Nq])."""
    q, k, v = (to_hnd(t, layout).double().cpu() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = q @ k.transpose(-1, -2) * scale
    if is_causal:
        nq, nk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(nq, nk, dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(s, -1)
    out = torch.softmax(s, -1) @ v if s.shape[-1] > 0 else torch.zeros_like(q[..., : v.shape[-1]])
    return (out if layout == "HND" else out.transpose(1, 2)), lse


def accuracy(out, ref):
    """(cosine similarity, relative L1) of out against the reference, over all elements, in float64."""
    o, r = out.double().cpu().flatten(), ref.double().cpu().flatten()
    cos = F.cosine_similarity(o, r, dim=0).item()
    rel_l1 = ((o - r).abs().sum() / r.abs().sum()).item()
    return cos, rel_l1


def assert_accurate(out, ref, mode):
    cos, l1 = accuracy(out, ref)
    min_cos, max_l1 = BOUNDS[mode]
    assert torch.isfinite(out).all()
    assert cos >= min_cos and l1 <= max_l1, f"{mode}: cosine {cos:.6f} (>= {min_cos}), rel L1 {l1:.5f} (<= {max_l1})"
