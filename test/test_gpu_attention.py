"""sage attention on the GPU: against float64 exact attention (docs/SEMANTICS.md bounds), against the CPU
kernel, and on the edges (N = 1, odd N, causal with Nq != Nk, GQA, strided views, > 2^31 elements)."""
import math
import os

import pytest
import torch

from conftest import accuracy, assert_accurate, exact_attention, make_qkv, poison_allocator_cache

pytestmark = pytest.mark.gpu

SHAPES = [  # b, hq, hk, nq, nk, d
    (1, 8, 8, 2048, 2048, 128), (2, 4, 4, 1500, 1500, 64), (1, 8, 2, 1000, 3000, 128), (1, 4, 4, 777, 777, 80),
    (1, 2, 2, 512, 512, 256),
]


@pytest.fixture(params=["hip", "triton"])
def prologue(request):
    os.environ["SAGEATTN_SK1_PROLOGUE"] = request.param
    yield request.param
    del os.environ["SAGEATTN_SK1_PROLOGUE"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_accurate_mode_matches_exact(shape, dtype, is_causal, prologue):
    q, k, v = make_qkv(*shape, dtype=dtype, device="cuda", seed=sum(shape))
    out, lse = torch.ops.sage.attention_with_lse(q, k, v, "HND", is_causal, None, True, "fp16")
    ref, ref_lse = exact_attention(q, k, v, is_causal=is_causal)
    assert out.shape == q.shape and out.dtype == dtype and out.is_cuda
    assert_accurate(out, ref, "fp16")
    torch.testing.assert_close(lse.double().cpu(), ref_lse, atol=0.05, rtol=0.005)


def e4m3_floor_l1(q, k, v, is_causal):
    from test_attention_cpu import e4m3_floor  # noqa: PLC0415
    assert not is_causal
    return e4m3_floor(q.cpu(), k.cpu(), v.cpu())


@pytest.mark.parametrize("shape", SHAPES[:3])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fast_mode_at_the_e4m3_floor(shape, dtype):
    q, k, v = make_qkv(*shape, dtype=dtype, device="cuda", seed=sum(shape))
    out = torch.ops.sage.attention(q, k, v, pv_mode="fp8")
    cos, l1 = accuracy(out, exact_attention(q, k, v)[0])
    floor_cos, floor_l1 = e4m3_floor_l1(q, k, v, False)
    assert torch.isfinite(out).all()
    assert l1 <= 1.15 * floor_l1 and 1 - cos <= 1.3 * (1 - floor_cos), (cos, l1, floor_cos, floor_l1)


def test_fast_mode_meets_bounds_on_offset_values():
    q, k, v = make_qkv(1, 4, 4, 2048, 2048, 128, dtype=torch.bfloat16, seed=3)
    v = (v.float() + torch.randn(128, generator=torch.Generator().manual_seed(4))).bfloat16()
    out = torch.ops.sage.attention(q.cuda(), k.cuda(), v.cuda(), pv_mode="fp8")
    assert_accurate(out, exact_attention(q, k, v)[0], "fp8")


def assert_matches_cpu_kernel(out, lse, cpu_out, cpu_lse, mode, causal):
    """A GPU call's out and lse against the CPU kernel's on the same inputs, within the mode's rounding."""
    scale = cpu_out.float().abs().max().item()
    tol = 2e-2 if mode == "fp8" else 4e-3
    torch.testing.assert_close(out.cpu().float(), cpu_out.float(), atol=tol * scale, rtol=tol)
    # The Hopper kernel's fast mode without a mask sums e4m3(p * 448) into l, the CPU kernel p (SEMANTICS.md).
    torch.testing.assert_close(lse.cpu(), cpu_lse, atol=3e-2 if mode == "fp8" and not causal else 1e-3,
                               rtol=1e-4)


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("mode", ["fp16", "fp8"])
@pytest.mark.parametrize("nq,nk,causal", [(1, 1, False), (1, 300, True), (129, 65, True), (65, 129, True),
                                           (300, 1000, False), (333, 333, True)])
def test_matches_cpu_kernel(layout, mode, nq, nk, causal):
    q, k, v = make_qkv(2, 4, 2, nq, nk, 64, dtype=torch.bfloat16, layout=layout, seed=nq + nk)
    cpu_out, cpu_lse = torch.ops.sage.attention_with_lse(q, k, v, layout, causal, None, True, mode)
    out, lse = torch.ops.sage.attention_with_lse(q.cuda(), k.cuda(), v.cuda(), layout, causal, None, True, mode)
    assert_matches_cpu_kernel(out, lse, cpu_out, cpu_lse, mode, causal)


@pytest.mark.parametrize("n", [1, 63, 65, 127, 129, 1001])
def test_odd_lengths(n):
    q, k, v = make_qkv(1, 4, 4, n, n, 128, dtype=torch.float16, device="cuda", seed=n)
    assert_accurate(torch.ops.sage.attention(q, k, v), exact_attention(q, k, v)[0], "fp16")


def test_strided_fused_qkv_matches_contiguous():
    fused = torch.randn(2, 1000, 3, 8, 128, device="cuda", dtype=torch.bfloat16)
    fused[:, :, 1] += 4 * torch.randn(128, device="cuda").bfloat16()
    q, k, v = fused.unbind(2)
    out = torch.ops.sage.attention(q, k, v, "NHD", True)
    ref = torch.ops.sage.attention(q.contiguous(), k.contiguous(), v.contiguous(), "NHD", True)
    assert torch.equal(out, ref)
    assert_accurate(out, exact_attention(q, k, v, "NHD", is_causal=True)[0], "fp16")


def test_overlapped_launches_change_no_bit(monkeypatch):
    """On sm_90+ a call's kernels are programmatic dependent launches (csrc/common/compat.h launch()): each may start
    while the one before it finishes. Calls made back to back, each reading what the previous kernel wrote (and the
    caching allocator reusing freed buffers between them), give the same bytes as with SAGEATTN_SK1_OVERLAP=0."""
    inputs = [make_qkv(1, 8, 4, n, n, d, dtype=dt, device="cuda", seed=n)
              for n, d, dt in [(4096, 128, torch.bfloat16), (1000, 64, torch.float16), (777, 80, torch.bfloat16),
                               (256, 128, torch.float16)]]

    def calls():
        outs = []
        for mode in ("fp16", "fp8"):
            for causal in (False, True):
                for q, k, v in inputs:  # no synchronisation in between
                    outs += torch.ops.sage.attention_with_lse(q, k, v, "HND", causal, None, True, mode)
        return [o.cpu() for o in outs]

    overlapped = calls()
    monkeypatch.setenv("SAGEATTN_SK1_OVERLAP", "0")
    serial = calls()
    assert all(torch.equal(a, b) for a, b in zip(overlapped, serial))


def test_cuda_graph_replays_the_default_path_bit_for_bit():
    """The default path (the HIP prologue, on sm_90+ overlapped launches and the key mean's cluster up to 1024 keys)
    captured in a CUDA graph: each replay, on inputs rewritten in place, gives the bytes of an eager call."""
    shapes = [(1000, 128, torch.bfloat16), (1500, 64, torch.float16)]  # the cluster key mean, the column-sum pass
    for n, d, dt in shapes:
        for mode in ("fp16", "fp8"):
            q, k, v = make_qkv(1, 4, 2, n, n, d, dtype=dt, device="cuda", seed=n)
            call = lambda: torch.ops.sage.attention_with_lse(q, k, v, "HND", True, None, True, mode)  # noqa: E731
            call()  # warm-up outside the capture
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                call()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                captured = call()
            for seed in (1, 2):
                for t, u in zip((q, k, v), make_qkv(1, 4, 2, n, n, d, dtype=dt, device="cuda", seed=seed)):
                    t.copy_(u)
                graph.replay()
                torch.cuda.synchronize()
                for got, want in zip(captured, call()):
                    assert torch.equal(got, want), (n, d, mode, seed)


@pytest.mark.parametrize("mode", ["fp16", "fp8"])
@pytest.mark.parametrize("smooth_k", [False, True])
@pytest.mark.parametrize("b,hq,hk,nq,nk,d,layout,causal,dtype", [
    (2, 4, 2, 1000, 1300, 128, "HND", False, torch.bfloat16), (1, 6, 3, 300, 2000, 64, "NHD", True, torch.float16),
    (1, 2, 2, 65, 700, 80, "HND", True, torch.float32), (1, 4, 4, 1, 1, 128, "NHD", False, torch.bfloat16)])
def test_whole_call_gives_the_op_chains_bits(mode, smooth_k, b, hq, hk, nq, nk, d, layout, causal, dtype):
    """sage::attention on a GPU runs the prologue into one allocation for all its intermediates (not through
    sage::quant_qk_int8, whose outputs are allocated one by one): the same call through the ops, one after another,
    gives the same bits, lse included. The call's allocation lies over freed memory of 0xFF bytes (NaN in float32,
    int8 -1), so that a byte the prologue should write and does not shows."""
    q, k, v = make_qkv(b, hq, hk, nq, nk, d, dtype=torch.bfloat16, layout=layout, device="cuda", seed=nq + nk + d)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    poison_allocator_cache()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out, lse = torch.ops.sage.attention_with_lse(q, k, v, layout, causal, None, smooth_k, mode)
    ops = {e.name for e in prof.events() if e.name.startswith("sage::")}
    assert "sage::attention_with_lse" in ops and "sage::quant_qk_int8" not in ops, ops  # the new path ran
    as16 = (lambda t: t.bfloat16()) if dtype == torch.float32 else (lambda t: t)  # noqa: E731
    scale = 1 / math.sqrt(d)  # as run_attention forms it, in double
    qi, qs, ki, ks, k_mean = torch.ops.sage.quant_qk_int8(as16(q), as16(k), layout, scale, smooth_k)
    v_in, v_scale = torch.ops.sage.quant_v_fp8(as16(v), layout) if mode == "fp8" else (as16(v), None)
    ref_out, ref_lse = torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, v_in, v_scale, nq, layout, causal, dtype)
    if smooth_k:  # what sage::attention_with_lse adds back: sm_scale * q . k_mean, per query
        q_hnd = q if layout == "HND" else q.transpose(1, 2)
        mean = k_mean.repeat_interleave(hq // hk, 1)
        ref_lse.add_(torch.matmul(q_hnd.float(), mean.unsqueeze(-1)).squeeze(-1), alpha=scale)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref_out, atol=0, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=0, rtol=0)


def check_query_beyond_2_to_the_31_elements(run=lambda f: f()):
    """run(f) calls f (test_gpu_sm90.py passes one that also checks which kernel ran)."""
    b, h, n, d = 1, 40, 420000, 128
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(b, h, 512, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(b, h, 512, d, device="cuda", dtype=torch.bfloat16, generator=g)
    assert q.numel() > 2**31
    out = run(lambda: torch.ops.sage.attention(q, k, v))
    tail = slice(n - 300, n)
    ref = exact_attention(q[:, -2:, tail], k[:, -2:], v[:, -2:])[0]
    assert_accurate(out[:, -2:, tail], ref, "fp16")


def test_query_beyond_2_to_the_31_elements():
    check_query_beyond_2_to_the_31_elements()


def test_device_mismatch_is_named():
    q, k, v = make_qkv(1, 2, 2, 16, 16, 64)
    with pytest.raises(RuntimeError, match="same device"):
        torch.ops.sage.attention(q.cuda(), k, v.cuda())
