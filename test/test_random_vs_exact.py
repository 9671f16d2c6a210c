"""Randomized comparison against float64 exact attention, over the input space as a class: batch, GQA head
counts, lengths 1-700 (Nq != Nk), head_dim 1-256, float16 / bfloat16 / float32, both layouts, strided views,
causal masks and softmax scales up to the default, in both P.V modes.

The cases come from a seeded generator (SAGE_RANDOM_CASES cases per device, default 300; SAGE_RANDOM_SEED,
default 0), so a failure names a case that reproduces. Bounds (docs/SEMANTICS.md, "Accuracy bounds"):
- accurate mode: the accurate bound, on keys with a per-channel offset and iid V;
- fast mode: on values with a per-channel offset, its bound or, where few keys or channels leave P's and V's
  e4m3 rounding nothing to average over, 1.15 times the e4m3 floor of the case (the error of exact attention
  with only P and V rounded to e4m3), whichever is larger;
- float32 inputs are computed as bfloat16, so they are compared with exact attention of their bfloat16 values.
"""
import math
import os
import random

import pytest
import torch

from conftest import BOUNDS, accuracy, as_computed, exact_attention, gpu_device, mode_bound

N_CASES = int(os.environ.get("SAGE_RANDOM_CASES", "300"))
SEED = int(os.environ.get("SAGE_RANDOM_SEED", "0"))


def _length(rng):
    return rng.choice([rng.randint(1, 8), rng.randint(1, 140), rng.randint(1, 700)])


def random_case(rng):
    hk = rng.choice([1, 1, 2, 3])
    nq = _length(rng)
    return dict(
        b=rng.choice([1, 1, 2]),
        hk=hk,
        hq=hk * rng.choice([1, 1, 2, 4]),
        nq=nq,
        nk=rng.choice([nq, _length(rng)]),
        d=rng.choice([rng.randint(1, 16), rng.randint(1, 256), rng.choice([64, 128, 80, 96, 256])]),
        dtype=rng.choice([torch.float16, torch.bfloat16, torch.float32]),
        layout=rng.choice(["HND", "NHD"]),
        view=rng.choice(["contiguous", "padded", "packed"]),
        causal=rng.random() < 0.4,
        scale_mult=rng.choice([None, round(rng.uniform(0.25, 1.0), 3)]),
        mode=rng.choice(["fp16", "fp8"]),
        seed=rng.randrange(2**31),
    )


def _cases():
    rng = random.Random(SEED)
    return [random_case(rng) for _ in range(N_CASES)]


def _case_id(c):
    return (f"{c['b']}x{c['hq']}/{c['hk']}x{c['nq']}x{c['nk']}x{c['d']}-{str(c['dtype'])[6:]}-{c['layout']}-"
            f"{c['view']}-{'causal' if c['causal'] else 'full'}-s{c['scale_mult']}-{c['mode']}")


def _strided(t, view, layout, gen):
    """t (contiguous, in its layout) as a view with other strides and the same values: rows padded with extra
    head_dim columns, or one slot of a packed tensor with a dimension of 3 (a fused qkv projection)."""
    if view == "padded":  # rows of D + 8 elements, t at columns 3 .. 3 + D
        wide = torch.randn(*t.shape[:-1], t.shape[-1] + 8, generator=gen).to(t.dtype)
        wide[..., 3:3 + t.shape[-1]] = t
        out = wide[..., 3:3 + t.shape[-1]]
    elif view == "packed":  # [B, N, 3, H, D] or [B, H, 3, N, D], t in slot 1
        dim = 2
        shape = list(t.shape)
        shape.insert(dim, 3)
        packed = torch.randn(*shape, generator=gen).to(t.dtype)
        packed.select(dim, 1).copy_(t)
        out = packed.select(dim, 1)
    else:
        return t
    assert out.stride(-1) == 1 and torch.equal(out, t)
    return out


def check_case(c, device):
    gen = torch.Generator().manual_seed(c["seed"])
    d = c["d"]
    q = torch.randn(c["b"], c["hq"], c["nq"], d, generator=gen)
    k = torch.randn(c["b"], c["hk"], c["nk"], d, generator=gen) + 4 * torch.randn(d, generator=gen)
    v = torch.randn(c["b"], c["hk"], c["nk"], d, generator=gen)
    if c["mode"] == "fp8":
        v = v + torch.randn(d, generator=gen)  # values with a per-channel offset (the fast mode's bound)
    dtype = c["dtype"]
    q, k, v = (t.to(dtype) for t in (q, k, v))
    qc, kc, vc = (as_computed(t) for t in (q, k, v))  # float32 is computed as bfloat16
    scale = None if c["scale_mult"] is None else c["scale_mult"] / math.sqrt(d)
    ref, _ = exact_attention(qc, kc, vc, "HND", c["causal"], scale)

    args = [t if c["layout"] == "HND" else t.transpose(1, 2).contiguous() for t in (q, k, v)]
    args = [_strided(t, c["view"], c["layout"], gen).to(device) for t in args]
    out = torch.ops.sage.attention(*args, c["layout"], c["causal"], scale, True, c["mode"])
    assert out.dtype == dtype and out.device.type == torch.device(device).type
    assert out.shape == args[0].shape
    out = out.cpu() if c["layout"] == "HND" else out.cpu().transpose(1, 2)
    assert torch.isfinite(out).all()

    cos, l1 = accuracy(out, ref)
    min_cos, max_l1 = mode_bound(c["mode"], qc, kc, vc, c["causal"], scale or 1 / math.sqrt(d))
    assert cos >= min_cos and l1 <= max_l1, f"{_case_id(c)}: cosine {cos:.6f} (>= {min_cos:.6f}), rel L1 {l1:.5f} " \
                                            f"(<= {max_l1:.5f})"


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_cpu_matches_exact_attention(case):
    check_case(case, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_gpu_matches_exact_attention(case):
    check_case(case, gpu_device())


# ---------------------------------------------------------------------------------------------------------------
# float32 values beyond float16's range (65504): computed as bfloat16, they stay finite
# ---------------------------------------------------------------------------------------------------------------

def _fp32_inputs(nq=300, nk=200, d=64):
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(1, 2, nq, d, generator=gen)
    k = torch.randn(1, 2, nk, d, generator=gen) + 4 * torch.randn(d, generator=gen)
    v = torch.randn(1, 2, nk, d, generator=gen)
    return q, k, v


def _bf16_exact(q, k, v):
    return exact_attention(*(as_computed(t) for t in (q, k, v)))[0]


@pytest.mark.parametrize("big", [1e5, 1e6])
def test_float32_values_beyond_float16_range_in_v(big):
    q, k, v = _fp32_inputs()
    v = v * big
    for mode in ("fp16", "fp8"):
        out = torch.ops.sage.attention(q, k, v, pv_mode=mode)
        assert out.dtype == torch.float32 and torch.isfinite(out).all(), mode
    cos, l1 = accuracy(torch.ops.sage.attention(q, k, v, pv_mode="fp16"), _bf16_exact(q, k, v))
    assert cos >= BOUNDS["fp16"][0] and l1 <= BOUNDS["fp16"][1], (cos, l1)


@pytest.mark.parametrize("big", [1e5, 1e6])
def test_float32_values_beyond_float16_range_in_q_and_k(big):
    q, k, v = _fp32_inputs()
    q[0, 1, 5, 7] = big  # query block 0 of head 1 (rows 0-127) is quantized with this value's scale
    k[0, 0, 30, 3] = -big
    out = torch.ops.sage.attention(q, k, v)
    assert torch.isfinite(out).all()
    ref = _bf16_exact(q, k, v)
    # the other query blocks of head 1 keep the accurate mode's bound
    cos, l1 = accuracy(out[:, 1, 128:], ref[:, 1, 128:])
    assert cos >= BOUNDS["fp16"][0] and l1 <= BOUNDS["fp16"][1], (cos, l1)
