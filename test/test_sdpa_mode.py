"""torch_sage behind F.scaled_dot_product_attention through the TorchFunctionMode (sdpa_mode), in eager mode,
under torch.compile(fullgraph=True) and torch.export; on the GPU also CUDA graphs (through either route); the
README's snippets verbatim."""
import io
import math

import pytest
import torch
import torch.nn.functional as F

import torch_sage
from torch_sage import sdpa
from conftest import accuracy, as_computed, assert_accurate, exact_attention, gpu_device, make_qkv
from sdpa_common import HAS_REGISTRY, _restore_flash_impl, needs_registry, nhd_view, prologue  # noqa: F401  (fixtures)


# ---------------------------------------------------------------------------------------------------------------
# The TorchFunctionMode
# ---------------------------------------------------------------------------------------------------------------

MODE_CASES = [  # b, hq, hk, nq, nk, d, dtype, causal, scale, gqa, layout
    (1, 2, 2, 100, 100, 64, torch.float16, False, None, False, "HND"),
    (2, 4, 4, 130, 70, 128, torch.bfloat16, True, 0.1, False, "NHD"),
    (1, 4, 2, 64, 200, 80, torch.float16, False, None, True, "NHD"),
    (1, 2, 2, 50, 50, 40, torch.float32, True, 0.3, False, "HND"),
]


@pytest.mark.parametrize("case", MODE_CASES)
def test_mode_routes_eligible_calls(case):
    b, hq, hk, nq, nk, d, dtype, causal, scale, gqa, layout = case
    q, k, v = make_qkv(b, hq, hk, nq, nk, d, dtype=dtype, seed=nq)
    if layout == "NHD":
        q, k, v = nhd_view(q), nhd_view(k), nhd_view(v)
    with torch_sage.sdpa_mode(allow_fp32=dtype == torch.float32) as mode:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa)
    assert mode.stats.routed == 1 and not mode.stats.fallback
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.equal(out, torch.ops.sage.attention(q.contiguous(), k.contiguous(), v.contiguous(), "HND", causal,
                                                     scale))
    ref = exact_attention(*(as_computed(t) for t in (q, k, v)), is_causal=causal, sm_scale=scale)[0]
    assert_accurate(out, ref, "fp16")


def test_mode_passes_options_and_positional_arguments():
    q, k, v = make_qkv(1, 2, 2, 64, 64, 64)
    with torch_sage.sdpa_mode(smooth_k=False, pv_mode="fp8") as mode:
        out = F.scaled_dot_product_attention(q, k, v, None, 0.0, True, scale=0.2)
    assert mode.stats.routed == 1
    assert torch.equal(out, torch.ops.sage.attention(q, k, v, "HND", True, 0.2, False, "fp8"))
    with pytest.raises(ValueError, match="pv_mode"):
        torch_sage.sdpa_mode(pv_mode="int4")


@pytest.mark.parametrize("extra", [None, 1, 2])
def test_mode_extra_dimensions(extra):
    q, k, v = make_qkv(2, 3, 3, 40, 50, 32)
    if extra is None:  # 3-D [B, N, D]: one head
        q, k, v = q[:, 0], k[:, 0], v[:, 0]
    else:  # 4 + extra dimensions: flattened into the batch
        q, k, v = (t.reshape((1,) * extra + tuple(t.shape)) for t in (q, k, v))
    with torch_sage.sdpa_mode() as mode:
        out = F.scaled_dot_product_attention(q, k, v)
    assert mode.stats.routed == 1 and out.shape == q.shape
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert_accurate(out, ref, "fp16")


def fallback_cases():
    q, k, v = make_qkv(1, 4, 4, 32, 48, 64)
    yield "attn_mask", (q, k, v), dict(attn_mask=torch.zeros(32, 48, dtype=q.dtype))
    yield "dropout", (q, k, v), dict(dropout_p=0.5)
    yield "dtype", (q.double(), k.double(), v.double()), {}
    yield "dtype", (q, k.bfloat16(), v), {}
    q5, k5, v5 = make_qkv(1, 2, 2, 16, 16, 320)
    yield "head_dim", (q5, k5, v5), {}
    yield "value_head_dim", (q, k, v[..., :32]), {}
    qg, kg, vg = make_qkv(1, 4, 2, 16, 16, 64)
    yield "heads", (qg, kg, vg), {}  # SDPA itself rejects this (no enable_gqa)
    yield "shape", (q.expand(2, 4, 32, 64), k, v), {}  # broadcast batch
    yield "shape", (q[0, 0], k[0, 0], v[0, 0]), {}  # 2-D


@pytest.mark.parametrize("reason,args,kwargs", list(fallback_cases()))
def test_mode_falls_back_with_reason(reason, args, kwargs):
    assert sdpa.sdpa_fallback_reason(*args, **kwargs) == reason
    try:
        expected = F.scaled_dot_product_attention(*args, **kwargs) if reason != "dropout" else None
    except RuntimeError:
        expected = RuntimeError
    with torch_sage.sdpa_mode() as mode:
        if expected is RuntimeError:
            with pytest.raises(RuntimeError):
                F.scaled_dot_product_attention(*args, **kwargs)
        else:
            out = F.scaled_dot_product_attention(*args, **kwargs)
            if expected is not None:
                assert torch.equal(out, expected)
    assert mode.stats.routed == 0 and mode.stats.fallback == {reason: 1}


def test_mode_leaves_arguments_of_a_later_torch_to_sdpa():
    q, k, v = make_qkv(1, 2, 2, 16, 16, 64)
    mode = torch_sage.sdpa_mode()
    out = mode.__torch_function__(F.scaled_dot_product_attention, (), (q, k, v), {"window_size": None})
    assert torch.equal(out, torch.ops.sage.attention(q, k, v))  # unset: torch_sage computes the call
    with pytest.raises(TypeError):  # set: SDPA gets the call (this torch does not know the argument)
        mode.__torch_function__(F.scaled_dot_product_attention, (), (q, k, v), {"window_size": 8})
    assert mode.stats.routed == 1 and mode.stats.fallback == {"argument:window_size": 1}


def test_mode_grad_rules():
    q, k, v = make_qkv(1, 2, 2, 32, 32, 64, dtype=torch.float32)
    q.requires_grad_()
    with torch_sage.sdpa_mode(allow_fp32=True) as mode:
        out = F.scaled_dot_product_attention(q, k, v)  # a gradient may be needed: SDPA, which has one
        out.sum().backward()
        assert q.grad is not None
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v)
        with torch.inference_mode():
            F.scaled_dot_product_attention(q, k, v)
    assert mode.stats.fallback == {"grad": 1} and mode.stats.routed == 2
    assert sdpa.sdpa_fallback_reason(q, k, v) == "grad"
    assert sdpa.sdpa_fallback_reason(q.float(), k, v, allow_fp32=False) == "grad"
    assert sdpa.sdpa_fallback_reason(q.detach(), k, v) == "dtype"
    assert sdpa.sdpa_fallback_reason(q.detach(), k, v, allow_fp32=True) is None


def test_mode_leaves_float32_to_sdpa_unless_asked():
    """An fp32 model keeps fp32 attention (SDPA) unless the caller opts in; SageAttention rejects float32 too."""
    q, k, v = make_qkv(1, 2, 2, 64, 64, 64, dtype=torch.float32)
    q[0, 0, 0, 0] = 1e5  # beyond float16's range
    with torch.no_grad(), torch_sage.sdpa_mode() as mode:
        out = F.scaled_dot_product_attention(q, k, v)
    assert mode.stats.routed == 0 and mode.stats.fallback == {"dtype": 1}
    assert torch.equal(out, F.scaled_dot_product_attention(q, k, v))
    with torch.no_grad(), torch_sage.sdpa_mode(allow_fp32=True) as mode:
        out = F.scaled_dot_product_attention(q, k, v)
    assert mode.stats.routed == 1 and out.dtype == torch.float32


def test_enable_disable_and_shared_stats():
    q, k, v = make_qkv(1, 2, 2, 32, 32, 64)
    stats = torch_sage.SDPAStats()
    mode = torch_sage.enable_sdpa(stats=stats)
    try:
        F.scaled_dot_product_attention(q, k, v)
        F.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(32, 32, dtype=q.dtype))
        assert mode.stats is stats
    finally:
        torch_sage.disable_sdpa()
    F.scaled_dot_product_attention(q, k, v)  # not counted: disabled
    with torch_sage.sdpa_mode(stats=stats):
        F.scaled_dot_product_attention(q, k, v)
    assert stats.as_dict() == {"routed": 2, "fallback": {"attn_mask": 1}, "compiled_routed": 0,
                               "compiled_fallback": {}, "errors": {}, "unseen": {}}
    assert "routed=2" in repr(stats)
    stats.reset()
    assert stats.routed == 0 and not stats.fallback


def test_disable_refuses_to_pop_another_mode():
    class Other(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    mode = torch_sage.enable_sdpa()
    other = Other().__enter__()
    try:
        with pytest.raises(RuntimeError, match="leave it first"):
            torch_sage.disable_sdpa()
    finally:
        other.__exit__(None, None, None)
    torch_sage.disable_sdpa()
    q, k, v = make_qkv(1, 2, 2, 16, 16, 64)
    F.scaled_dot_product_attention(q, k, v)
    assert mode.stats.routed == 0  # really left


class TinyAttention(torch.nn.Module):
    """A typical model block: fused qkv projection, [B, N, H, D] views transposed for SDPA."""

    def __init__(self, heads=2, d=64):
        super().__init__()
        self.heads, self.d = heads, d
        self.qkv = torch.nn.Linear(heads * d, 3 * heads * d)

    def forward(self, x, mask=None):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.d).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=mask is None)
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask) if mask is not None else y
        return (y + z).transpose(1, 2).reshape(b, n, -1)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_mode_under_compile_fullgraph(backend):
    torch.manual_seed(0)
    model = TinyAttention().to(torch.bfloat16).eval()
    x = torch.randn(2, 96, 128, dtype=torch.bfloat16)
    mask = torch.zeros(96, 96, dtype=torch.bfloat16)
    with torch.no_grad(), torch_sage.sdpa_mode() as mode:
        eager = model(x, mask)
        assert mode.stats.routed == 1 and mode.stats.fallback == {"attn_mask": 1}
        mode.stats.reset()
        torch._dynamo.reset()
        compiled_model = torch.compile(model, backend=backend, fullgraph=True)
        out = compiled_model(x, mask)
        out2 = compiled_model(x, mask)
    assert torch.equal(out, eager) and torch.equal(out2, eager)
    # Decisions taken while tracing are counted once (per traced call site), not at every run.
    assert mode.stats.compiled_routed == 1 and mode.stats.compiled_fallback == {"attn_mask": 1}
    assert mode.stats.routed == 0


def test_mode_no_graph_break_and_op_in_graph():
    model = TinyAttention().to(torch.bfloat16).eval()
    x = torch.randn(1, 64, 128, dtype=torch.bfloat16)
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    with torch.no_grad(), torch_sage.sdpa_mode():
        torch._dynamo.reset()
        explanation = torch._dynamo.explain(model)(x)
        torch._dynamo.reset()
        torch.compile(model, backend=capture, fullgraph=True)(x)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert torch.ops.sage.attention.default in targets or torch.ops.sage.attention in targets
    assert F.scaled_dot_product_attention not in targets


def test_mode_export_round_trip():
    model = TinyAttention().to(torch.bfloat16).eval()
    x = torch.randn(1, 64, 128, dtype=torch.bfloat16)
    with torch.no_grad(), torch_sage.sdpa_mode():
        ep = torch.export.export(model, (x,))
        eager = model(x)
    assert any(n.target == torch.ops.sage.attention.default for n in ep.graph.nodes)
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    loaded = torch.export.load(buf)
    with torch.no_grad():
        assert torch.equal(loaded.module()(x), eager)


# ---------------------------------------------------------------------------------------------------------------
# GPU: the lead runs these on the H200 (and a ROCm card), each with both prologues
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("via", ["mode", "flash_impl"])
def test_gpu_compile_cuda_graphs(prologue, via):
    if via == "flash_impl" and not HAS_REGISTRY:
        pytest.skip("torch without the flash impl registry")
    dev = gpu_device()
    torch.manual_seed(0)
    model = TinyAttention(heads=4, d=128).to(dev, torch.bfloat16).eval()
    x = torch.randn(2, 512, 512, device=dev, dtype=torch.bfloat16)
    ctx = torch_sage.sdpa_mode() if via == "mode" else sdpa.flash_impl()
    with torch.no_grad(), ctx:
        eager = model(x)
        torch._dynamo.reset()
        compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
        outs = [compiled(x).clone() for _ in range(4)]  # warm-up, capture, replays
    for o in outs:
        cos, _ = accuracy(o, eager)
        assert cos > 0.99999
    assert torch.equal(outs[-1], outs[-2])


@pytest.mark.gpu
def test_gpu_export_round_trip(prologue):
    dev = gpu_device()
    model = TinyAttention(heads=4, d=128).to(dev, torch.float16).eval()
    x = torch.randn(1, 300, 512, device=dev, dtype=torch.float16)
    with torch.no_grad(), torch_sage.sdpa_mode():
        ep = torch.export.export(model, (x,))
        eager = model(x)
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    with torch.no_grad():
        out = torch.export.load(buf).module()(x)
    assert torch.equal(out, eager)
    # and compiled through inductor from the exported program
    with torch.no_grad():
        out2 = torch.compile(ep.module(), fullgraph=True)(x)
    assert accuracy(out2, eager)[0] > 0.99999


@pytest.mark.gpu
def test_gpu_mode_eager_matches_op(prologue):
    dev = gpu_device()
    q, k, v = make_qkv(1, 8, 2, 777, 1500, 64, dtype=torch.float16, device=dev)
    with torch_sage.sdpa_mode() as mode:
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, scale=1 / math.sqrt(64))
    assert mode.stats.routed == 1
    assert_accurate(out, exact_attention(q, k, v)[0].to(dev), "fp16")


# ---------------------------------------------------------------------------------------------------------------
# The README snippets, run verbatim
# ---------------------------------------------------------------------------------------------------------------

README_SDPA = '''
import torch, torch.nn.functional as F, torch_sage

q, k, v = (torch.randn(1, 8, 256, 128, dtype=torch.bfloat16) for _ in range(3))

with torch_sage.sdpa_mode() as mode:        # any torch 2.11+, any device; inference (no grad needed)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(256, 256, dtype=torch.bool))
print(mode.stats)                           # SDPAStats(routed=1, fallback={'attn_mask': 1})

# CUDA: SDPA's flash backend itself runs torch_sage, through torch's flash-attention impl registry
torch.nn.attention.activate_flash_attention_impl("SAGE")
torch.nn.attention.restore_flash_attention_impl()
'''

README_COMPILE = '''
import torch, torch.nn.functional as F, torch_sage

def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)

q, k, v = (torch.randn(1, 8, 256, 128, dtype=torch.bfloat16) for _ in range(3))
with torch.no_grad(), torch_sage.sdpa_mode() as mode:
    out = torch.compile(attention, fullgraph=True)(q, k, v)   # torch.ops.sage.attention in the graph
print(mode.stats.compiled_routed)                               # 1
'''


def expected_prints(snippet):
    return [line.split("# ")[-1].strip() for line in snippet.splitlines() if line.startswith("print(")]


@needs_registry
@pytest.mark.parametrize("snippet", [README_SDPA, README_COMPILE], ids=["sdpa", "compile"])
def test_readme_snippets(snippet, capsys):
    torch._dynamo.reset()
    exec(compile(snippet, "README.md", "exec"), {})
    assert capsys.readouterr().out.splitlines() == expected_prints(snippet)


# ---------------------------------------------------------------------------------------------------------------
# The routes' eligibility against what the op takes
# ---------------------------------------------------------------------------------------------------------------

def test_both_routes_take_exactly_what_the_op_takes():
    """sdpa_fallback_reason and flash_fallback_reason restate, in traceable Python, which q, k and v the sage op
    takes (csrc/ops/input_checks.cpp check_qkv; a C++ call inside them would break torch.compile(fullgraph=True)).
    Drawn at random around each edge: a route gives no reason exactly when torch_sage.ops.attention computes the
    call, and a reason exactly when the op refuses it."""
    import random

    from torch_sage import ops

    rng = random.Random(0)
    dtypes = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    seen = {True: 0, False: 0}
    for _ in range(300):
        b, nq, nk = rng.choice((1, 2)), rng.choice((1, 5)), rng.choice((1, 7))
        hq, hk = rng.choice(((2, 2), (4, 2), (3, 2), (2, 4), (0, 0), (2, 0))) if rng.random() < 0.5 else (2, 2)
        d = rng.choice((64, 64, 0, 8, 256, 257, 300))
        dk = d if rng.random() < 0.8 else rng.choice((16, 64))
        dv = dk if rng.random() < 0.8 else rng.choice((16, 64))
        bk = b if rng.random() < 0.9 else b + 1
        nv = nk if rng.random() < 0.9 else nk + 1
        dq_t = rng.choice(dtypes) if rng.random() < 0.3 else torch.float16
        dk_t = dq_t if rng.random() < 0.85 else rng.choice(dtypes)
        q = torch.randn(b, hq, nq, d).to(dq_t)
        k = torch.randn(bk, hk, nk, dk).to(dk_t)
        v = torch.randn(bk, hk, nv, dv).to(dk_t)
        try:
            ops.attention(q, k, v, "HND")
            taken = True
        except RuntimeError:
            taken = False
        seen[taken] += 1
        sdpa_reason = sdpa.sdpa_fallback_reason(q, k, v, enable_gqa=True, allow_fp32=True)
        flash_reason = sdpa.flash_fallback_reason(q, k, v, cpu_op=True)
        case = (q.shape, q.dtype, k.shape, k.dtype, v.shape)
        assert (sdpa_reason is None) == taken, (case, sdpa_reason)
        assert (flash_reason is None) == taken, (case, flash_reason)
    assert min(seen.values()) > 30, seen
