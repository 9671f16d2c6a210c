"""The hand-written Hopper kernel (csrc/sm90, both modes) on an sm_90 GPU, forced with SAGEATTN_SK1_SM90=1 (its
serial schedule) and =ws (warp-specialized): each test checks, with the profiler, that the kernel of that schedule
ran (not the Triton one), then the numbers: against the CPU kernel on the same quantized inputs, against float64
exact attention, and on the edges (odd lengths, causal with Nq != Nk, GQA, NHD views, float32 out, > 2^31
elements). The two schedules run the same arithmetic in the same order: their results are compared bit for bit, but
in the accurate mode, where the warp-specialized one steps by 192 keys (within rounding)."""
import os

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from conftest import accuracy, assert_accurate, exact_attention, make_qkv, poison_allocator_cache
from test_gpu_attention import assert_matches_cpu_kernel, check_query_beyond_2_to_the_31_elements, e4m3_floor_l1

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def sm90(monkeypatch):
    if not torch.cuda.is_available() or torch.version.hip or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (H100 / H200)")
    monkeypatch.setenv("SAGEATTN_SK1_SM90", "1")
    monkeypatch.delenv("SAGEATTN_SK1_MMA", raising=False)  # forced, it would run instead (kernel_choice.h)


SM90_KERNELS = ("qk_int8_attention_kernel", "qk_int8_attention_ws_kernel")  # serial, warp-specialized


@pytest.fixture(params=["1", "ws"])
def schedule(request, monkeypatch):
    """Forces the sm90 kernel with each schedule."""
    monkeypatch.setenv("SAGEATTN_SK1_SM90", request.param)
    return request.param


def sm90_ran(names):
    """Which of SM90_KERNELS are among the profiled kernel names."""
    return {k for k in SM90_KERNELS for n in names if "sm90" in n and n.split("<")[0].endswith(k)}


def kernels(fn):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


@pytest.mark.parametrize("setting,mode,n,expect_sm90", [
    (None, "fp16", 256, True), (None, "fp8", 512, True), (None, "fp8", 256, False),  # unset: where it is faster
    ("1", "fp8", 256, True), ("ws", "fp8", 256, True), ("0", "fp16", 4096, False), ("0", "fp8", 4096, False)])
def test_which_kernel_each_setting_runs(monkeypatch, setting, mode, n, expect_sm90):
    if setting is None:
        monkeypatch.delenv("SAGEATTN_SK1_SM90")
    else:
        monkeypatch.setenv("SAGEATTN_SK1_SM90", setting)
    q, k, v = make_qkv(1, 2, 2, n, n, 128, dtype=torch.bfloat16, device="cuda", seed=n)
    names = kernels(lambda: torch.ops.sage.attention(q, k, v, pv_mode=mode))
    assert bool(sm90_ran(names)) == expect_sm90, sorted(names)
    assert any("attn" in name or "attention" in name for name in names), sorted(names)


@pytest.mark.parametrize("mode,n,d,causal,expect", [
    ("fp16", 4096, 128, False, 1), ("fp16", 4096, 80, False, 1),  # accurate, head_dim 128 (padded), long: ws
    ("fp16", 4096, 128, True, 1), ("fp8", 4096, 128, False, 0), ("fp16", 4096, 64, False, 0),
    ("fp16", 2048, 128, False, 0)])
def test_auto_picks_the_faster_schedule(monkeypatch, mode, n, d, causal, expect):
    monkeypatch.delenv("SAGEATTN_SK1_SM90")
    q, k, v = make_qkv(1, 2, 2, n, n, d, dtype=torch.float16, device="cuda", seed=n + d)
    names = kernels(lambda: torch.ops.sage.attention(q, k, v, "HND", causal, None, True, mode))
    assert sm90_ran(names) == {SM90_KERNELS[expect]}, sorted(names)


def run_sm90(fn):
    """fn()'s result, asserting that the sm90 kernel of the forced schedule was among the kernels it launched."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        res = fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernel = SM90_KERNELS[1] if os.environ.get("SAGEATTN_SK1_SM90") == "ws" else SM90_KERNELS[0]
    assert kernel in sm90_ran(names), sorted(set(names))
    return res


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("d", [40, 64, 80, 128])  # 40 and 80: padded to 64 and 128
@pytest.mark.parametrize("mode", ["fp16", "fp8"])
@pytest.mark.parametrize("nq,nk,causal", [(1, 1, False), (1, 300, True), (129, 65, True), (65, 129, True),
                                           (300, 1000, False), (333, 333, True), (1000, 300, True)])
def test_matches_cpu_kernel(schedule, layout, d, mode, nq, nk, causal):
    q, k, v = make_qkv(2, 4, 2, nq, nk, d, dtype=torch.bfloat16, layout=layout, seed=nq + nk + d)
    cpu_out, cpu_lse = torch.ops.sage.attention_with_lse(q, k, v, layout, causal, None, True, mode)
    out, lse = run_sm90(lambda: torch.ops.sage.attention_with_lse(q.cuda(), k.cuda(), v.cuda(), layout, causal,
                                                                  None, True, mode))
    assert_matches_cpu_kernel(out, lse, cpu_out, cpu_lse, mode, causal)


@pytest.mark.parametrize("shape", [(1, 8, 8, 2048, 2048, 128), (2, 4, 4, 1500, 1500, 64)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fast_mode_at_the_e4m3_floor(schedule, shape, dtype):
    q, k, v = make_qkv(*shape, dtype=dtype, device="cuda", seed=sum(shape))
    out = run_sm90(lambda: torch.ops.sage.attention(q, k, v, pv_mode="fp8"))
    cos, l1 = accuracy(out, exact_attention(q, k, v)[0])
    floor_cos, floor_l1 = e4m3_floor_l1(q, k, v, False)
    assert torch.isfinite(out).all()
    assert l1 <= 1.15 * floor_l1 and 1 - cos <= 1.3 * (1 - floor_cos), (cos, l1, floor_cos, floor_l1)


@pytest.mark.parametrize("shape", [(1, 8, 8, 2048, 2048, 128), (2, 4, 4, 1500, 1500, 64), (1, 8, 2, 1000, 3000, 128)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_matches_exact(schedule, shape, dtype, is_causal):
    q, k, v = make_qkv(*shape, dtype=dtype, device="cuda", seed=sum(shape))
    out, lse = run_sm90(lambda: torch.ops.sage.attention_with_lse(q, k, v, "HND", is_causal, None, True, "fp16"))
    ref, ref_lse = exact_attention(q, k, v, is_causal=is_causal)
    assert out.dtype == dtype
    assert_accurate(out, ref, "fp16")
    torch.testing.assert_close(lse.double().cpu(), ref_lse, atol=0.05, rtol=0.005)


@pytest.mark.parametrize("n", [1, 63, 65, 127, 129, 1001])
def test_odd_lengths(schedule, n):
    q, k, v = make_qkv(1, 4, 4, n, n, 128, dtype=torch.float16, device="cuda", seed=n)
    assert_accurate(run_sm90(lambda: torch.ops.sage.attention(q, k, v)), exact_attention(q, k, v)[0], "fp16")


def test_float32_inputs_give_float32_out(schedule):
    q, k, v = make_qkv(1, 4, 2, 300, 500, 64, dtype=torch.float32, device="cuda", seed=5)
    out = run_sm90(lambda: torch.ops.sage.attention(q, k, v, "HND", True))
    ref = torch.ops.sage.attention(q.cpu(), k.cpu(), v.cpu(), "HND", True)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), ref, atol=4e-3 * ref.abs().max().item(), rtol=4e-3)


def test_strided_fused_qkv_matches_contiguous(schedule):
    fused = torch.randn(2, 1000, 3, 8, 128, device="cuda", dtype=torch.bfloat16)
    fused[:, :, 1] += 4 * torch.randn(128, device="cuda").bfloat16()
    q, k, v = fused.unbind(2)
    out = run_sm90(lambda: torch.ops.sage.attention(q, k, v, "NHD", True))
    ref = torch.ops.sage.attention(q.contiguous(), k.contiguous(), v.contiguous(), "NHD", True)
    torch.testing.assert_close(out, ref, atol=0, rtol=0)  # same kernel, same values: the strides change nothing
    assert_accurate(out, exact_attention(q, k, v, "NHD", is_causal=True)[0], "fp16")


def test_query_beyond_2_to_the_31_elements(schedule):
    check_query_beyond_2_to_the_31_elements(run_sm90)


@pytest.mark.parametrize("d,stride_pad", [(256, 0), (42, 0), (128, 4)])
def test_unsupported_calls_run_the_other_kernels(schedule, d, stride_pad):
    # Padded to 256, a head_dim that is not a multiple of 8, a V token stride that is not 16 bytes: the
    # precompiled Triton kernel takes them, also when the sm90 kernel is forced.
    q, k, v = make_qkv(1, 4, 4, 300, 300, d, dtype=torch.float16, device="cuda", seed=2)
    if stride_pad:
        v = torch.nn.functional.pad(v, (0, stride_pad))[..., :d]
    names = kernels(lambda: torch.ops.sage.attention(q, k, v))
    assert not sm90_ran(names), sorted(names)
    assert_accurate(torch.ops.sage.attention(q, k, v), exact_attention(q, k, v)[0], "fp16")


@pytest.mark.parametrize("mode", ["fp16", "fp8"])
@pytest.mark.parametrize("b,hq,hk,nq,nk,d,layout,causal,out_dtype", [
    (2, 4, 2, 1000, 777, 128, "HND", False, torch.bfloat16), (1, 6, 3, 777, 1000, 64, "NHD", True, torch.float16),
    (1, 4, 4, 1, 300, 80, "HND", True, torch.bfloat16), (2, 2, 1, 2049, 2049, 128, "NHD", True, torch.float32),
    (1, 2, 2, 130, 5000, 40, "HND", False, torch.float16), (1, 2, 2, 300, 760, 128, "NHD", False, torch.bfloat16),
    (1, 2, 1, 1000, 300, 128, "HND", True, torch.bfloat16),
    (1, 2, 1, 200, 768, 128, "HND", False, torch.float16)])
def test_schedules_give_the_same_results(monkeypatch, mode, b, hq, hk, nq, nk, d, layout, causal, out_dtype):
    q, k, v = make_qkv(b, hq, hk, nq, nk, d, dtype=torch.bfloat16, layout=layout, device="cuda", seed=nq * d)
    if out_dtype == torch.float32:
        q, k, v = q.float(), k.float(), v.float()
    elif out_dtype == torch.float16:
        q, k, v = q.half(), k.half(), v.half()
    results = {}
    for setting in ("1", "ws"):
        monkeypatch.setenv("SAGEATTN_SK1_SM90", setting)
        results[setting] = run_sm90(lambda: torch.ops.sage.attention_with_lse(q, k, v, layout, causal, None, True,
                                                                              mode))
    (out_s, lse_s), (out_w, lse_w) = results["1"], results["ws"]
    assert out_w.dtype == out_dtype and torch.isfinite(out_w).all()
    # The ws accurate mode takes 192 keys a softmax step: P is rounded to 16 bits against other running maxima, so
    # the two agree within a few of out's ulps, and lse within float32 sums' rounding.
    stepped = mode == "fp16"
    torch.testing.assert_close(out_w, out_s, atol=2e-3 if stepped else 0, rtol=1e-2 if stepped else 0)
    torch.testing.assert_close(lse_w, lse_s, atol=1e-5 if stepped else 0, rtol=1e-5 if stepped else 0)


@pytest.mark.parametrize("b,hq,hk,nq,nk,d,layout,causal,dtype,offset", [
    (2, 4, 2, 1000, 777, 128, "HND", False, torch.bfloat16, 0), (1, 6, 3, 777, 1000, 64, "NHD", True, torch.float16, 0),
    (1, 4, 4, 1, 300, 80, "HND", True, torch.bfloat16, 0), (1, 2, 2, 130, 5000, 40, "NHD", False, torch.float16, 0),
    (1, 2, 2, 64, 63, 128, "HND", False, torch.bfloat16, 0), (2, 2, 1, 200, 129, 96, "NHD", True, torch.float32, 0),
    (1, 4, 2, 300, 700, 128, "NHD", False, torch.bfloat16, 1), (1, 2, 2, 100, 200, 64, "HND", True, torch.float16, 1)])
def test_fast_mode_in_one_step_gives_the_op_pairs_bits(schedule, b, hq, hk, nq, nk, d, layout, causal, dtype, offset):
    """sage::attention's fast mode quantizes V straight into the kernel's V^T (no v_fp8, no transpose launch); the
    same call through sage::quant_v_fp8 and sage::qk_int8_attention, whose launch transposes v_fp8, gives the same
    bits. offset 1: v one element off 8-byte alignment (the quantization's element-wise loads). The V^T is allocated
    over freed memory of e4m3 NaN bytes, so that a key column past kv_len left unwritten makes the rows NaN."""
    q, k, v = make_qkv(b, hq, hk, nq, nk, d, dtype=torch.bfloat16, layout=layout, device="cuda", seed=nk * d)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if offset:  # the same values in storage one element off
        shifted = torch.empty(v.numel() + offset, dtype=v.dtype, device=v.device)[offset:].view(v.shape)
        v = shifted.copy_(v)
    call = lambda: torch.ops.sage.attention_with_lse(q, k, v, layout, causal, None, False, "fp8")  # noqa: E731
    names = kernels(call)
    want = SM90_KERNELS[1] if schedule == "ws" else SM90_KERNELS[0]
    assert want in sm90_ran(names) and not any("transpose_v_fp8" in n for n in names), sorted(names)
    poison_allocator_cache()
    out, lse = call()
    as16 = (lambda t: t.bfloat16()) if dtype == torch.float32 else (lambda t: t)  # noqa: E731
    qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(as16(q), as16(k), layout, d ** -0.5, False)
    v8, vs = torch.ops.sage.quant_v_fp8(as16(v), layout)
    ref_out, ref_lse = run_sm90(lambda: torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, v8, vs, nq, layout, causal,
                                                                         dtype))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref_out, atol=0, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=0, rtol=0)


def test_fast_mode_with_the_triton_prologue_keeps_the_op_pair(monkeypatch):
    # SAGEATTN_SK1_PROLOGUE=triton quantizes V with Triton into v_fp8, which the launch transposes, as before.
    monkeypatch.setenv("SAGEATTN_SK1_PROLOGUE", "triton")
    q, k, v = make_qkv(1, 2, 2, 300, 600, 128, dtype=torch.bfloat16, device="cuda", seed=11)
    names = kernels(lambda: torch.ops.sage.attention(q, k, v, pv_mode="fp8"))
    assert sm90_ran(names) and any("transpose_v_fp8" in n for n in names), sorted(names)
