"""torch_sage as the "SAGE" entry of torch's flash-attention impl registry: activation, the CUDA flash op's
contract (checked on CPU tensors too), the CPU flash op, and on the GPU SDPA's flash backend running torch_sage."""
import pytest
import torch
import torch.nn.functional as F

from torch_sage import sdpa
from conftest import as_computed, assert_accurate, exact_attention, gpu_device, make_qkv
from sdpa_common import _restore_flash_impl, attn, needs_registry, nhd_view, prologue  # noqa: F401  (fixtures)


# ---------------------------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------------------------

@needs_registry
def test_registered_on_import_not_activated():
    assert "SAGE" in attn.list_flash_attention_impls()
    assert attn.current_flash_attention_impl() != "SAGE"
    assert sdpa.register_flash_impl() is True  # idempotent


@needs_registry
def test_activate_and_restore_through_torch_api():
    q, k, v = make_qkv(1, 2, 2, 64, 64, 64)
    before = F.scaled_dot_product_attention(q, k, v)
    attn.activate_flash_attention_impl("SAGE")
    assert attn.current_flash_attention_impl() == "SAGE" and sdpa.flash_impl_active()
    # Registered for CUDA only (as FA3/FA4): SDPA on CPU keeps torch's own kernels.
    assert torch.equal(F.scaled_dot_product_attention(q, k, v), before)
    assert sdpa.flash_impl_stats.routed == 0
    attn.restore_flash_attention_impl()
    assert attn.current_flash_attention_impl() is None and not sdpa.flash_impl_active()


@needs_registry
def test_flash_impl_context_manager_restores():
    with sdpa.flash_impl(devices=("cpu",)):
        assert attn.current_flash_attention_impl() == "SAGE"
    assert attn.current_flash_attention_impl() is None


def test_activate_options_and_a_torch_without_registry(monkeypatch):
    q, k, v = make_qkv(1, 2, 2, 64, 64, 64)
    torch_out = F.scaled_dot_product_attention(q, k, v)
    sdpa.activate_flash_impl(devices=("cpu",), pv_mode="fp8", smooth_k=False)
    assert torch.equal(F.scaled_dot_product_attention(q, k, v),
                       torch.ops.sage.attention(q, k, v, "HND", False, None, False, "fp8"))
    sdpa.deactivate_flash_impl()
    assert torch.equal(F.scaled_dot_product_attention(q, k, v), torch_out)
    monkeypatch.setattr(sdpa.flash_registry, "impl_registry", lambda: None)  # torch without torch.nn.attention's registry
    sdpa.activate_flash_impl(devices=("cpu",))
    assert sdpa.flash_impl_active()
    assert torch.equal(F.scaled_dot_product_attention(q, k, v), torch.ops.sage.attention(q, k, v))
    sdpa.deactivate_flash_impl()
    assert not sdpa.flash_impl_active()
    assert torch.equal(F.scaled_dot_product_attention(q, k, v), torch_out)


def test_bad_device_rejected():
    with pytest.raises(ValueError, match="devices must be among"):
        sdpa.activate_flash_impl(devices=("mps",))


# ---------------------------------------------------------------------------------------------------------------
# The CUDA flash op's contract, checked on CPU tensors: direct calls and through the dispatcher
# ---------------------------------------------------------------------------------------------------------------

CONTRACT_CASES = [  # b, hq, hk, nq, nk, d, dtype, causal, scale, nhd
    (1, 2, 2, 100, 100, 64, torch.float16, False, None, False),
    (2, 4, 2, 130, 130, 128, torch.bfloat16, True, 0.1, True),
    (1, 4, 1, 70, 200, 80, torch.float16, False, None, True),
    (1, 2, 2, 1, 33, 256, torch.bfloat16, False, 0.05, False),
]


def meta_outputs(op, q, k, v, *args, **kwargs):
    return op(q.to("meta"), k.to("meta"), v.to("meta"), *args, **kwargs)


def assert_same_layout(real, meta):
    assert len(real) == len(meta)
    for r, m in zip(real, meta):
        if isinstance(m, torch.Tensor):
            assert isinstance(r, torch.Tensor)
            assert (r.shape, r.dtype, r.stride()) == (m.shape, m.dtype, m.stride())
        else:
            assert r == m


@pytest.mark.parametrize("case", CONTRACT_CASES)
def test_cuda_contract_called_directly(case):
    b, hq, hk, nq, nk, d, dtype, causal, scale, nhd = case
    q, k, v = make_qkv(b, hq, hk, nq, nk, d, dtype=dtype, seed=nq)
    if nhd:
        q, k, v = nhd_view(q), nhd_view(k), nhd_view(v)
    res = sdpa.sage_scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
    meta = meta_outputs(torch.ops.aten._scaled_dot_product_flash_attention.default, q, k, v, 0.0, causal, False,
                        scale=scale)
    assert_same_layout(res, meta)
    out, lse, cum_q, cum_k, max_q, max_k = res[:6]
    assert cum_q is None and cum_k is None and (max_q, max_k) == (nq, nk)
    ref, ref_lse = exact_attention(q, k, v, is_causal=causal, sm_scale=scale)
    assert_accurate(out, ref, "fp16")
    torch.testing.assert_close(lse.double(), ref_lse, atol=0.05, rtol=0.005)  # lse of the true scores


def test_cuda_contract_rejects_what_it_cannot_compute():
    q, k, v = make_qkv(1, 2, 2, 64, 80, 64)
    for kwargs, reason in [(dict(dropout_p=0.1), "dropout"), (dict(return_debug_mask=True), "debug_mask"),
                           (dict(is_causal=True), "causal_lower_right")]:
        assert sdpa.flash_fallback_reason(q, k, v, **kwargs) == reason
        with pytest.raises(ValueError, match=reason):
            sdpa.sage_scaled_dot_product_flash_attention(q, k, v, **kwargs)
    assert sdpa.flash_fallback_reason(q.float(), k.float(), v.float()) == "dtype"
    assert sdpa.flash_fallback_reason(q.float(), k.float(), v.float(), cpu_op=True) is None
    assert sdpa.flash_fallback_reason(q.double(), k.double(), v.double(), cpu_op=True) == "dtype"
    assert sdpa.flash_fallback_reason(q, k, v[..., :32]) == "value_head_dim"
    q3, k3, v3 = make_qkv(1, 3, 2, 8, 8, 64)
    assert sdpa.flash_fallback_reason(q3, k3, v3) == "heads"
    q5, k5, v5 = make_qkv(1, 2, 2, 8, 8, 320)
    assert sdpa.flash_fallback_reason(q5, k5, v5) == "head_dim"
    assert sdpa.flash_fallback_reason(q, k, v, attn_mask=torch.zeros(64, 80), cpu_op=True) == "attn_mask"


@pytest.fixture
def cuda_contract_on_cpu():
    """The SAGE kernels of the CUDA op, registered for CPU tensors, so the dispatcher path (schema, autograd,
    torch.compile's meta/fake handling) runs on this machine as it does on a GPU."""
    lib = sdpa.flash_registry._register_kernels([("cuda", "CPU", "both")])
    yield
    lib._destroy()


def test_cuda_contract_through_dispatcher(cuda_contract_on_cpu):
    q, k, v = make_qkv(2, 4, 2, 100, 90, 64, dtype=torch.bfloat16)
    q = nhd_view(q)
    res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, scale=0.2)
    direct = sdpa.sage_scaled_dot_product_flash_attention(q, k, v, scale=0.2)
    assert torch.equal(res[0], direct[0]) and torch.equal(res[1], direct[1])
    assert_same_layout(res, meta_outputs(torch.ops.aten._scaled_dot_product_flash_attention.default, q, k, v,
                                         scale=0.2))
    assert sdpa.flash_impl_stats.routed == 1
    # Dropout is torch's kernel's job; with none for CPU the call says so instead of computing something else.
    with pytest.raises(RuntimeError, match="dropout"):
        torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, dropout_p=0.5)
    assert sdpa.flash_impl_stats.fallback["dropout"] == 1
    # A backward never runs torch's flash backward on torch_sage's forward.
    qg = q.detach().requires_grad_()
    out = torch.ops.aten._scaled_dot_product_flash_attention(qg, k, v)[0]
    with pytest.raises(RuntimeError, match="inference-only"):
        out.sum().backward()


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_cuda_contract_under_compile(cuda_contract_on_cpu, backend):
    q, k, v = make_qkv(1, 2, 2, 64, 64, 64, dtype=torch.float16)

    def f(q, k, v):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, is_causal=True)[:2]
        return out * 2, lse

    eager = f(q, k, v)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend=backend, fullgraph=True)(q, k, v)
    assert torch.equal(compiled[0], eager[0]) and torch.equal(compiled[1], eager[1])


# ---------------------------------------------------------------------------------------------------------------
# The CPU flash op, taken over by activate_flash_impl(devices=("cpu",)): real SDPA dispatch on this machine
# ---------------------------------------------------------------------------------------------------------------

def test_cpu_flash_impl_routes_sdpa():
    q, k, v = make_qkv(2, 4, 4, 100, 80, 64, dtype=torch.float16)
    q, k, v = nhd_view(q), nhd_view(k), nhd_view(v)
    mask = torch.zeros(100, 80, dtype=torch.float16)
    before = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    sdpa.activate_flash_impl(devices=("cpu",))
    assert sdpa.flash_impl_active()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.1)
    assert sdpa.flash_impl_stats.routed == 1
    assert torch.equal(out, torch.ops.sage.attention(q, k, v, "HND", True, 0.1))
    assert_accurate(out, exact_attention(q, k, v, is_causal=True, sm_scale=0.1)[0], "fp16")
    assert out.stride() == q.stride()  # as torch's flash kernels return it
    # A mask is torch's kernel's job: the original CPU flash kernel runs, bit for bit.
    assert torch.equal(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), before)
    assert sdpa.flash_impl_stats.fallback == {"attn_mask": 1}
    # float32 goes to the CPU flash op too, and torch_sage takes it (computed as bfloat16).
    q32, k32, v32 = q.float(), k.float(), v.float()
    out32 = F.scaled_dot_product_attention(q32, k32, v32)
    assert out32.dtype == torch.float32 and sdpa.flash_impl_stats.routed == 2
    assert_accurate(out32, exact_attention(*(as_computed(t) for t in (q32, k32, v32)))[0], "fp16")
    with pytest.raises(RuntimeError, match="inference-only"):
        F.scaled_dot_product_attention(q32.requires_grad_(), k32, v32).sum().backward()
    lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)[1]
    assert_same_layout((lse,), meta_outputs(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
                                            q, k, v)[1:])
    torch.testing.assert_close(lse.double(), exact_attention(q, k, v)[1], atol=0.05, rtol=0.005)
    sdpa.deactivate_flash_impl()
    assert not torch.equal(F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.1), out)


def test_cpu_flash_impl_under_inductor():
    q, k, v = make_qkv(1, 2, 2, 64, 64, 64, dtype=torch.bfloat16)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v) + 1

    with sdpa.flash_impl(devices=("cpu",)):
        eager = f(q, k, v)
        torch._dynamo.reset()
        compiled = torch.compile(f, backend="inductor", fullgraph=True)(q, k, v)
        assert sdpa.flash_impl_stats.routed == 2  # the kernel runs below the compiled graph: counted at each run
    assert torch.equal(compiled, eager)


# ---------------------------------------------------------------------------------------------------------------
# GPU: the lead runs these on the H200 (and a ROCm card), each with both prologues
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@needs_registry
def test_gpu_flash_impl_routes_sdpa(prologue):
    dev = gpu_device()
    q, k, v = make_qkv(2, 8, 8, 1000, 1000, 128, dtype=torch.bfloat16, device=dev)
    q, k, v = nhd_view(q), nhd_view(k), nhd_view(v)
    ref = exact_attention(q, k, v, is_causal=True)[0]
    attn.activate_flash_attention_impl("SAGE")
    try:
        with attn.sdpa_kernel(attn.SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert sdpa.flash_impl_stats.routed == 1, sdpa.flash_impl_stats
        # q, k, v are [B, N, H, D] tensors seen as [B, H, N, D]: the impl runs the op in layout NHD on them
        nhd = [t.transpose(1, 2) for t in (q, k, v)]
        assert torch.equal(out, torch.ops.sage.attention(*nhd, "NHD", True).transpose(1, 2))
        assert out.stride() == q.stride()
        assert_accurate(out, ref.to(dev), "fp16")
        # GQA (SDPA picks its backend; accurate whichever it is)
        qg, kg, vg = make_qkv(1, 8, 2, 256, 256, 64, dtype=torch.float16, device=dev)
        og = F.scaled_dot_product_attention(qg, kg, vg, enable_gqa=True)
        assert_accurate(og, exact_attention(qg, kg, vg)[0].to(dev), "fp16")
        # dropout: torch's own flash kernel runs
        with attn.sdpa_kernel(attn.SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
        assert sdpa.flash_impl_stats.fallback["dropout"] == 1
        # backward raises instead of running FA2's backward on torch_sage's forward
        qr = q.detach().requires_grad_()
        with attn.sdpa_kernel(attn.SDPBackend.FLASH_ATTENTION):
            o = F.scaled_dot_product_attention(qr, k, v)
        with pytest.raises(RuntimeError, match="inference-only"):
            o.sum().backward()
    finally:
        attn.restore_flash_attention_impl()
    with attn.sdpa_kernel(attn.SDPBackend.FLASH_ATTENTION):
        fa2 = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not torch.equal(fa2, out)
