"""The prologue on the GPU (sage::quant_qk_int8 and the fast mode's sage::quant_v_fp8): the HIP kernels, the Triton
kernels and the CPU kernels agree bit for bit; no length ceiling; the setting SAGEATTN_SK1_PROLOGUE; the default path
compiles nothing."""
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import make_qkv
from reference_quant import quantize_blocks

pytestmark = pytest.mark.gpu

LENGTHS = [1, 2, 63, 64, 65, 127, 128, 129, 255, 1000, 4097, 32767, 100000]


def identical(a, b, what=None):
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0, equal_nan=True, msg=what)


def with_prologue(impl, op, *args):
    """op(*args) with SAGEATTN_SK1_PROLOGUE=impl for the call."""
    os.environ["SAGEATTN_SK1_PROLOGUE"] = impl
    try:
        return op(*args)
    finally:
        del os.environ["SAGEATTN_SK1_PROLOGUE"]


def prologue(impl, *args):
    return with_prologue(impl, torch.ops.sage.quant_qk_int8, *args)


def quant_v(impl, v, layout):
    """(v_fp8, v_scale) as their bits (uint8, int32): compared exactly, sign of zero and NaN payload included.
    impl "cpu" is the CPU kernel (v on the CPU)."""
    op = torch.ops.sage.quant_v_fp8
    v8, vs = op(v, layout) if impl == "cpu" else with_prologue(impl, op, v, layout)
    return v8.view(torch.uint8), vs.view(torch.int32)


def v_with_hard_channels(b, h, n, d, dtype, seed):
    """[b, h, n, d] with channels of very different magnitudes, and in head 0 a NaN channel, an inf channel, an
    all-zero channel and one of values so small that its scale is subnormal or 0."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(b, h, n, d, generator=g) * torch.exp(2 * torch.randn(d, generator=g))  # finite in fp16
    v = v.to(dtype)
    v[:, 0, n // 2, 0] = float("nan")
    if d > 3:
        v[:, 0, n - 1, 1] = float("-inf")
        v[:, 0, :, 2] = 0
        v[:, 0, :, 3] = (torch.randn(n, generator=g) * 1e-38).to(dtype)
    return v


@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 1000, 4097, 100000])
@pytest.mark.parametrize("d", [64, 128, 33, 200])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_v_quant_hip_triton_cpu_bit_identical(n, d, dtype, layout):
    v = v_with_hard_channels(2, 3, n, d, dtype, seed=n + d)
    if layout == "NHD":
        v = v.transpose(1, 2).contiguous()
    cpu = quant_v("cpu", v, layout)
    for impl in ("hip", "triton"):
        for got, want, name in zip(quant_v(impl, v.cuda(), layout), cpu, ("v_fp8", "v_scale")):
            identical(got, want, f"{impl} {name} differs from the CPU kernel's")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_v_quant_rounds_every_e4m3_tie_like_the_cpu_kernel(dtype):
    """Every channel holds 448, so its scale is 1 and the quotients are V's own values: every finite e4m3 value, every
    tie between two neighbours (subnormal ones included) and the 16-bit values just either side of each tie, with
    both signs. The HIP kernel (on sm_89+ the hardware conversion) must give the CPU kernel's bytes."""
    vals = torch.arange(0, 0x7f, dtype=torch.uint8).view(torch.float8_e4m3fn).float()  # 0 .. 448
    ties = ((vals[:-1] + vals[1:]) / 2).to(dtype)  # exact in both 16-bit types (4 significant bits)
    bits = ties.view(torch.int16)
    around = torch.cat([(bits - 1).view(dtype), (bits + 1).view(dtype)])
    col = torch.cat([torch.tensor([448.0], dtype=dtype), vals.to(dtype), ties, around])
    col = torch.cat([col, -col])
    v = torch.stack([col.roll(c) for c in range(128)], dim=-1)[None, None]  # [1, 1, n, 128], every channel
    assert v.shape[2] > 900
    cpu = quant_v("cpu", v, "HND")
    assert (cpu[1] == torch.tensor(1.0).view(torch.int32)).all()  # scale 1 in every channel
    for got, want, name in zip(quant_v("hip", v.cuda(), "HND"), cpu, ("v_fp8", "v_scale")):
        identical(got, want, f"hip {name} differs from the CPU kernel's")
    if dtype == torch.bfloat16:
        # A scale near 1e19 (bfloat16 reaches that far): quotients of 1e-20 and less are float32 subnormals or
        # underflow to 0, and must still round to e4m3 zero of the value's sign.
        col = torch.cat([torch.tensor([4.48e21]), torch.logspace(-20, -38, 128)]).double()
        v = (col[:, None] * torch.tensor([1.0, -1.0]).repeat(32)).to(dtype)[None, None].contiguous()  # [1, 1, 129, 64]
        cpu = quant_v("cpu", v, "HND")
        assert ((cpu[0][0, 0, 1:] & 0x7f) == 0).all() and (cpu[0][0, 0, 1:] == 0x80).any()
        for got, want in zip(quant_v("hip", v.cuda(), "HND"), cpu):
            identical(got, want, "hip differs from the CPU kernel on quotients below float32's normal range")


def test_v_quant_of_strided_views():
    """V as a slice of a fused QKV tensor, at an even and at an odd element offset (the element-wise path)."""
    for offset in (0, 1):
        flat = torch.randn(2 * 300 * 3 * 4 * 128 + offset, dtype=torch.float16)
        v = flat[offset:].view(2, 300, 3, 4, 128)[:, :, 2]  # NHD view
        cpu = quant_v("cpu", v, "NHD")
        vg = flat.cuda()[offset:].view(2, 300, 3, 4, 128)[:, :, 2]
        for impl in ("hip", "triton"):
            for got, want in zip(quant_v(impl, vg, "NHD"), cpu):
                identical(got, want, f"{impl} differs from the CPU kernel")


@pytest.mark.parametrize("n,d,dtype,offset", [(0, 64, torch.float16, 0), (0, 128, torch.bfloat16, 1),
                                              (5, 1, torch.float16, 0), (70, 3, torch.bfloat16, 0),
                                              (300, 100, torch.bfloat16, 1), (300, 117, torch.float16, 0)])
def test_v_quant_edge_shapes(n, d, dtype, offset):
    """No tokens (v_scale all 0), head_dims 1-3 and odd ones up to 128, and an odd element offset (the
    element-by-element path) in both dtypes: the HIP kernels give the CPU kernel's bits."""
    v = v_with_hard_channels(1, 2, max(n, 1), d, dtype, seed=n + d)[:, :, :n]
    flat = torch.zeros(v.numel() + offset, dtype=dtype)
    flat[offset:] = v.flatten()
    cpu = quant_v("cpu", flat[offset:].view(v.shape), "HND")
    flat_gpu = flat.cuda()
    for got, want in zip(quant_v("hip", flat_gpu[offset:].view(v.shape), "HND"), cpu):
        identical(got, want, "hip differs from the CPU kernel")


def test_v_quant_beyond_2_to_the_31_elements():
    # 1 x 40 x 420000 x 128 = 2.15e9 elements: 64-bit offsets everywhere. The last head, recomputed on the CPU.
    b, h, n, d = 1, 40, 420000, 128
    g = torch.Generator(device="cuda").manual_seed(1)
    v = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v8, vs = quant_v("hip", v, "HND")
    want8, want_s = quant_v("cpu", v[:, -1:].cpu(), "HND")
    identical(vs[:, -1:], want_s)
    identical(v8[:, -1:, -1000:], want8[:, :, -1000:])
    del v8, v
    torch.cuda.empty_cache()


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("smooth_k", [False, True])
def test_hip_triton_cpu_bit_identical(n, d, dtype, layout, smooth_k):
    heads = 2 if n > 10000 else 3
    q, k, _ = make_qkv(1, heads, 1 if n % 2 else heads, n, n + 17, d, dtype=dtype, layout=layout, seed=n)
    args = (layout, 1 / math.sqrt(d), smooth_k)
    cpu = torch.ops.sage.quant_qk_int8(q, k, *args)
    qc, kc = q.cuda(), k.cuda()
    hip = prologue("hip", qc, kc, *args)
    tri = prologue("triton", qc, kc, *args)
    # With smooth_k the key mean may differ in rare extreme inputs (docs/SEMANTICS.md); on these it does not.
    for a, b, c in zip(hip, tri, cpu):
        identical(a, c)
        identical(b, c)


def test_key_mean_from_a_cluster_up_to_1024_keys():
    """On sm_90+ (a build with sm_90 code) with smooth_k, a head of at most 1024 keys (8 K blocks of 128 rows) adds its
    key mean inside one thread block cluster, and no column-sum pass runs; from 1025 keys the column-sum pass runs.
    Both give the CPU kernel's bytes."""
    if torch.version.hip or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("thread block clusters: NVIDIA sm_90 and newer")
    for n, colsum in ((1024, False), (1025, True)):
        q, k, _ = make_qkv(1, 4, 4, 300, n, 128, seed=n)
        args = ("HND", 1 / math.sqrt(128), True)
        cpu = torch.ops.sage.quant_qk_int8(q, k, *args)
        qc, kc = q.cuda(), k.cuda()
        names = kernel_names(lambda: prologue("hip", qc, kc, *args))
        assert any("k_colsum_kernel" in x for x in names) == colsum, (n, names)
        for a, c in zip(prologue("hip", qc, kc, *args), cpu):
            identical(a, c)


@pytest.mark.parametrize("d", [33, 80, 200])
def test_odd_head_dims_and_strided_fused_qkv(d):
    fused = torch.randn(2, 777, 3, 4, d, dtype=torch.bfloat16)
    fused[:, :, 1] += 4 * torch.randn(d).bfloat16()
    for offset in (0, 1):  # offset 1: element-aligned only, the scalar path
        flat = torch.randn(fused.numel() + offset, dtype=torch.bfloat16)
        view = flat[offset:].view_as(fused)
        view.copy_(fused)
        q, k = view[:, :, 0], view[:, :, 1]
        cpu = torch.ops.sage.quant_qk_int8(q, k, "NHD", 0.1, True)
        flat_gpu = flat.cuda()
        vg = flat_gpu[offset:].view_as(fused)
        for impl in ("hip", "triton"):
            for a, c in zip(prologue(impl, vg[:, :, 0], vg[:, :, 1], "NHD", 0.1, True), cpu):
                identical(a, c)


def test_non_finite_and_zero_blocks_on_gpu():
    q, k, _ = make_qkv(1, 2, 2, 300, 300, 128, seed=3)
    q[0, 0, 5, 3] = float("nan")
    k[0, 1, 70, 0] = float("inf")
    q[0, 1, :128] = 0
    for smooth_k in (False, True):
        cpu = torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, smooth_k)
        for impl in ("hip", "triton"):
            for a, c in zip(prologue(impl, q.cuda(), k.cuda(), "HND", 0.125, smooth_k), cpu):
                identical(a, c)


def test_beyond_2_to_the_31_elements():
    # q and k of 1 x 40 x 420000 x 128 = 2.15e9 elements each: 64-bit offsets everywhere.
    b, h, n, d = 1, 40, 420000, 128
    assert b * h * n * d > 2**31
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
    for impl in ("hip", "triton"):
        qi, qs, ki, ks, km = prologue(impl, q, k, "HND", 0.125, True)
        # The last blocks of the last head, recomputed independently from slices on the CPU.
        q0, k0 = (n - 1) // 128 * 128, (n - 1) // 64 * 64
        mult = torch.tensor(0.125 * 1.4426950408889634, dtype=torch.float32)
        want_q, want_qs = quantize_blocks(q[:, -1:, q0:].float().cpu() * mult, 128)
        mean = (k[0, -1].double().sum(0) / n).float().cpu()
        assert torch.equal(km[0, -1].cpu(), mean)
        want_k, want_ks = quantize_blocks(k[:, -1:, k0:].float().cpu() - mean, 64)
        identical(qi[:, -1:, q0:], want_q)
        identical(qs[:, -1:, -1:], want_qs)
        identical(ki[:, -1:, k0:], want_k)
        identical(ks[:, -1:, -1:], want_ks)
        del qi, ki
    torch.cuda.empty_cache()


def test_unknown_setting_is_a_clear_error():
    q, k, _ = make_qkv(1, 1, 1, 10, 10, 64, device="cuda")
    with pytest.raises(RuntimeError, match='SAGEATTN_SK1_PROLOGUE must be "hip"'):
        prologue("cutlass", q, k, "HND", 0.125, False)


@pytest.mark.parametrize("impl", ["hip", "triton"])
@pytest.mark.parametrize("sm_scale", [math.inf, math.nan, 1e30])
def test_sm_scale_out_of_range_is_an_error_with_either_prologue(impl, sm_scale):
    q, k, _ = make_qkv(1, 1, 1, 10, 10, 64, device="cuda")
    with pytest.raises(RuntimeError, match="sm_scale must be finite"):
        prologue(impl, q, k, "HND", sm_scale, False)


def kernel_names(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


def test_setting_is_read_at_each_call_also_in_a_compiled_graph():
    q, k, v = make_qkv(1, 2, 2, 256, 256, 64, device="cuda")
    f = torch.compile(lambda q, k: torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, False), fullgraph=True)
    hip = kernel_names(lambda: f(q, k))  # setting unset: the default, the HIP kernel
    assert any("quant_qk_int8" in n for n in hip) and not any("_quant_blocks_kernel" in n for n in hip)
    os.environ["SAGEATTN_SK1_PROLOGUE"] = "triton"
    try:
        tri = kernel_names(lambda: f(q, k))
    finally:
        del os.environ["SAGEATTN_SK1_PROLOGUE"]
    assert any("_quant_blocks_kernel" in n for n in tri)


def test_cuda_graph_fixes_the_choice_at_capture():
    q, k, _ = make_qkv(1, 2, 2, 256, 256, 64, device="cuda")
    want = torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, True)
    os.environ["SAGEATTN_SK1_PROLOGUE"] = "triton"
    try:
        torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, True)  # compile the Triton kernels before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, True)
    finally:
        del os.environ["SAGEATTN_SK1_PROLOGUE"]
    for t in out:
        t.fill_(0) if t.dtype != torch.int8 else t.fill_(1)
    names = kernel_names(graph.replay)  # the setting is unset now; replay still runs the captured Triton kernels
    assert any("_quant_blocks_kernel" in n for n in names)
    for a, b in zip(out, want):
        identical(a, b)


def test_default_prologue_invokes_no_triton_compiler(tmp_path):
    cache = tmp_path / "triton_cache"
    cache.mkdir()
    script = textwrap.dedent("""
        import torch, torch_sage
        q = torch.randn(1, 4, 1000, 128, device="cuda", dtype=torch.bfloat16)
        out = torch.ops.sage.quant_qk_int8(q, q, "HND", 0.125, True)
        torch.cuda.synchronize()
        import sys
        print("triton imported:", "triton" in sys.modules)
    """)
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache))
    env.pop("SAGEATTN_SK1_PROLOGUE", None)
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert list(cache.iterdir()) == [], "the default prologue wrote to the Triton cache"
