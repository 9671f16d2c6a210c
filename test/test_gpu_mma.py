"""The hand-written mma.sync kernel (csrc/mma, both modes) on an NVIDIA GPU, forced with SAGEATTN_SK1_MMA=1 (so
that it runs on the H100 too, whose sm_90 executes the Ampere / Ada instructions): each test checks, with the
profiler, that the mma kernel ran (not the Triton or sm90 one), then the numbers: against the CPU kernel on the same
quantized inputs, against float64 exact attention, and on the edges (odd lengths, causal with Nq != Nk, GQA, NHD
views, float32 out, a given v_fp8, > 2^31 elements, CUDA graphs)."""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from conftest import accuracy, assert_accurate, exact_attention, make_qkv
from test_gpu_attention import assert_matches_cpu_kernel, check_query_beyond_2_to_the_31_elements, e4m3_floor_l1

pytestmark = pytest.mark.gpu

MMA_KERNEL = "qk_int8_attention_mma_kernel"


@pytest.fixture(autouse=True)
def mma(monkeypatch):
    if not torch.cuda.is_available() or torch.version.hip or torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("needs an NVIDIA GPU of sm_80 or newer")
    monkeypatch.setenv("SAGEATTN_SK1_MMA", "1")
    monkeypatch.delenv("SAGEATTN_SK1_SM90", raising=False)


def fp8_cores():
    return torch.cuda.get_device_capability() >= (8, 9)


def kernel_names(fn):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        res = fn()
        torch.cuda.synchronize()
    return res, {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


def run_mma(fn, mode="fp16"):
    """fn()'s result, asserting that the mma kernel was among the kernels it launched (the fast mode without e4m3
    tensor cores: that it was not)."""
    res, names = kernel_names(fn)
    ran = any(MMA_KERNEL in n for n in names)
    assert ran == (mode != "fp8" or fp8_cores()), sorted(names)
    return res


@pytest.mark.parametrize("setting,expect", [("1", True), ("0", False), (None, None)])
def test_which_kernel_each_setting_runs(monkeypatch, setting, expect):
    if setting is None:
        monkeypatch.delenv("SAGEATTN_SK1_MMA")
        cc = torch.cuda.get_device_capability()
        # the accurate mode's default (kernel_choice.h mma_default): the mma kernel on no GPU today
        expect = torch.ops.sage._attention_kernel_choice(cc[0] * 10 + cc[1], False, 128, 1000, 1000, True,
                                                         True) == "mma"
    else:
        monkeypatch.setenv("SAGEATTN_SK1_MMA", setting)
    q, k, v = make_qkv(1, 2, 2, 1000, 1000, 128, dtype=torch.bfloat16, device="cuda", seed=1)
    _, names = kernel_names(lambda: torch.ops.sage.attention(q, k, v))
    assert any(MMA_KERNEL in n for n in names) == expect, sorted(names)


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("d", [40, 64, 80, 128])  # 40 and 80: padded to 64 and 128
@pytest.mark.parametrize("mode", ["fp16", "fp8"])
@pytest.mark.parametrize("nq,nk,causal", [(1, 1, False), (1, 300, True), (129, 65, True), (65, 129, True),
                                           (300, 1000, False), (333, 333, True), (1000, 300, True)])
def test_matches_cpu_kernel(layout, d, mode, nq, nk, causal):
    q, k, v = make_qkv(2, 4, 2, nq, nk, d, dtype=torch.bfloat16, layout=layout, seed=nq + nk + d)
    cpu_out, cpu_lse = torch.ops.sage.attention_with_lse(q, k, v, layout, causal, None, True, mode)
    out, lse = run_mma(lambda: torch.ops.sage.attention_with_lse(q.cuda(), k.cuda(), v.cuda(), layout, causal, None,
                                                                 True, mode), mode)
    assert_matches_cpu_kernel(out, lse, cpu_out, cpu_lse, mode, causal)


@pytest.mark.parametrize("shape", [(1, 8, 8, 2048, 2048, 128), (2, 4, 4, 1500, 1500, 64), (1, 8, 2, 1000, 3000, 128)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_matches_exact(shape, dtype, is_causal):
    q, k, v = make_qkv(*shape, dtype=dtype, device="cuda", seed=sum(shape))
    out, lse = run_mma(lambda: torch.ops.sage.attention_with_lse(q, k, v, "HND", is_causal, None, True, "fp16"))
    ref, ref_lse = exact_attention(q, k, v, is_causal=is_causal)
    assert out.dtype == dtype
    assert_accurate(out, ref, "fp16")
    torch.testing.assert_close(lse.double().cpu(), ref_lse, atol=0.05, rtol=0.005)


@pytest.mark.parametrize("shape", [(1, 8, 8, 2048, 2048, 128), (2, 4, 4, 1500, 1500, 64)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fast_mode_at_the_e4m3_floor(shape, dtype):
    q, k, v = make_qkv(*shape, dtype=dtype, device="cuda", seed=sum(shape))
    out = run_mma(lambda: torch.ops.sage.attention(q, k, v, pv_mode="fp8"), "fp8")
    cos, l1 = accuracy(out, exact_attention(q, k, v)[0])
    floor_cos, floor_l1 = e4m3_floor_l1(q, k, v, False)
    assert torch.isfinite(out).all()
    assert l1 <= 1.15 * floor_l1 and 1 - cos <= 1.3 * (1 - floor_cos), (cos, l1, floor_cos, floor_l1)


@pytest.mark.parametrize("n", [1, 63, 65, 127, 129, 1001])
def test_odd_lengths(n):
    q, k, v = make_qkv(1, 4, 4, n, n, 128, dtype=torch.float16, device="cuda", seed=n)
    assert_accurate(run_mma(lambda: torch.ops.sage.attention(q, k, v)), exact_attention(q, k, v)[0], "fp16")


def test_float32_inputs_give_float32_out():
    q, k, v = make_qkv(1, 4, 2, 300, 500, 64, dtype=torch.float32, device="cuda", seed=5)
    out = run_mma(lambda: torch.ops.sage.attention(q, k, v, "HND", True))
    ref = torch.ops.sage.attention(q.cpu(), k.cpu(), v.cpu(), "HND", True)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), ref, atol=4e-3 * ref.abs().max().item(), rtol=4e-3)


def test_strided_fused_qkv_matches_contiguous():
    fused = torch.randn(2, 1000, 3, 8, 128, device="cuda", dtype=torch.bfloat16)
    fused[:, :, 1] += 4 * torch.randn(128, device="cuda").bfloat16()
    q, k, v = fused.unbind(2)
    out = run_mma(lambda: torch.ops.sage.attention(q, k, v, "NHD", True))
    ref = torch.ops.sage.attention(q.contiguous(), k.contiguous(), v.contiguous(), "NHD", True)
    torch.testing.assert_close(out, ref, atol=0, rtol=0)  # same kernel, same values: the strides change nothing
    assert_accurate(out, exact_attention(q, k, v, "NHD", is_causal=True)[0], "fp16")


def test_query_beyond_2_to_the_31_elements():
    check_query_beyond_2_to_the_31_elements(run_mma)


@pytest.mark.parametrize("b,hq,hk,nq,nk,d,layout,causal,dtype", [
    (2, 4, 2, 1000, 777, 128, "HND", False, torch.bfloat16), (1, 6, 3, 777, 1000, 64, "NHD", True, torch.float16),
    (1, 4, 4, 1, 300, 80, "HND", True, torch.bfloat16), (1, 2, 2, 130, 5000, 40, "NHD", False, torch.float16),
    (2, 2, 1, 200, 129, 96, "NHD", True, torch.float32)])
def test_fast_mode_in_one_step_gives_the_op_pairs_bits(b, hq, hk, nq, nk, d, layout, causal, dtype):
    """sage::attention's fast mode quantizes V straight into the kernel's V^T; the same call through
    sage::quant_v_fp8 and sage::qk_int8_attention, whose launch transposes v_fp8 into V^T, gives the same bits."""
    if not fp8_cores():
        pytest.skip("no e4m3 tensor cores: the fast mode is the Triton kernel's")
    q, k, v = make_qkv(b, hq, hk, nq, nk, d, dtype=torch.bfloat16, layout=layout, device="cuda", seed=nk * d)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    _, names = kernel_names(lambda: torch.ops.sage.attention_with_lse(q, k, v, layout, causal, None, False, "fp8"))
    assert any(MMA_KERNEL in n for n in names) and not any("transpose_v_fp8" in n for n in names), sorted(names)
    out, lse = torch.ops.sage.attention_with_lse(q, k, v, layout, causal, None, False, "fp8")
    as16 = (lambda t: t.bfloat16()) if dtype == torch.float32 else (lambda t: t)  # noqa: E731
    qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(as16(q), as16(k), layout, d ** -0.5, False)
    v8, vs = torch.ops.sage.quant_v_fp8(as16(v), layout)
    (ref_out, ref_lse), names = kernel_names(
        lambda: torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, v8, vs, nq, layout, causal, dtype))
    assert any(MMA_KERNEL in n for n in names) and any("transpose_v_fp8" in n for n in names), sorted(names)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref_out, atol=0, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=0, rtol=0)


@pytest.mark.parametrize("d,stride_pad", [(256, 0), (42, 0), (128, 4)])
def test_unsupported_calls_run_the_other_kernels(d, stride_pad):
    # Padded to 256, a head_dim that is not a multiple of 8, a V token stride that is not 16 bytes: the
    # precompiled Triton kernel takes them, also when the mma kernel is forced.
    q, k, v = make_qkv(1, 4, 4, 300, 300, d, dtype=torch.float16, device="cuda", seed=2)
    if stride_pad:
        v = torch.nn.functional.pad(v, (0, stride_pad))[..., :d]
    out, names = kernel_names(lambda: torch.ops.sage.attention(q, k, v))
    assert not any(MMA_KERNEL in n for n in names), sorted(names)
    assert_accurate(out, exact_attention(q, k, v)[0], "fp16")


@pytest.mark.parametrize("mode", ["fp16", "fp8"])
def test_cuda_graph_replays_bit_for_bit(mode):
    q, k, v = make_qkv(1, 4, 2, 1000, 1000, 128, dtype=torch.bfloat16, device="cuda", seed=3)
    call = lambda: torch.ops.sage.attention_with_lse(q, k, v, "HND", True, None, True, mode)  # noqa: E731
    run_mma(call, mode)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = call()
    for seed in (1, 2):
        for t, u in zip((q, k, v), make_qkv(1, 4, 2, 1000, 1000, 128, dtype=torch.bfloat16, device="cuda", seed=seed)):
            t.copy_(u)
        graph.replay()
        torch.cuda.synchronize()
        for got, want in zip(captured, call()):
            assert torch.equal(got, want), (mode, seed)
