"""Every sage op passes torch.library.opcheck; torch.compile and torch.export keep the op whole and exact."""
import pytest
import torch

from conftest import make_qkv

OPCHECK_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def attention_samples():
    for b, hq, hk, nq, nk, d, layout, causal, mode in [
        (1, 2, 2, 130, 70, 64, "HND", False, "fp16"),
        (2, 4, 2, 64, 200, 128, "NHD", True, "fp8"),
        (1, 2, 1, 1, 1, 40, "HND", True, "auto"),
    ]:
        q, k, v = make_qkv(b, hq, hk, nq, nk, d, layout=layout, dtype=torch.bfloat16, seed=nq)
        yield (q, k, v), dict(tensor_layout=layout, is_causal=causal, sm_scale=None, smooth_k=True, pv_mode=mode)


@pytest.mark.parametrize("op", ["attention", "attention_with_lse"])
def test_opcheck_attention(op):
    for args, kwargs in attention_samples():
        torch.library.opcheck(getattr(torch.ops.sage, op).default, args, kwargs, test_utils=OPCHECK_TESTS)


def test_opcheck_quant_ops_and_kernel():
    for (q, k, v), kw in attention_samples():
        layout = kw["tensor_layout"]
        for smooth_k in (False, True):
            torch.library.opcheck(torch.ops.sage.quant_qk_int8.default, (q, k, layout, 0.125, smooth_k),
                                  test_utils=OPCHECK_TESTS)
        torch.library.opcheck(torch.ops.sage.quant_v_fp8.default, (v, layout), test_utils=OPCHECK_TESTS)
        qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, k, layout, 0.125, True)
        nq = q.shape[2] if layout == "HND" else q.shape[1]
        v8, vs = torch.ops.sage.quant_v_fp8(v, layout)
        for vv, sc in ((v, None), (v8, vs)):
            # test_schema compares inputs with arithmetic that float8 lacks; the float16 run covers the schema.
            tests = OPCHECK_TESTS if sc is None else OPCHECK_TESTS[1:]
            torch.library.opcheck(torch.ops.sage.qk_int8_attention.default,
                                  (qi, qs, ki, ks, vv, sc, nq, layout, kw["is_causal"], torch.bfloat16),
                                  test_utils=tests)
        fast_args = (qi, qs, ki, ks, v, nq, layout, kw["is_causal"], torch.bfloat16)
        torch.library.opcheck(torch.ops.sage._qk_int8_attention_fast.default, fast_args, test_utils=OPCHECK_TESTS)
        # the fast mode's one op is the pair it stands for, bit for bit
        pair = torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, v8, vs, nq, layout, kw["is_causal"], torch.bfloat16)
        for got, want in zip(torch.ops.sage._qk_int8_attention_fast(*fast_args), pair):
            torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_backward_raises_clearly():
    q, k, v = make_qkv(1, 2, 2, 64, 64, 64, dtype=torch.float32)
    q.requires_grad_()
    out = torch.ops.sage.attention(q, k, v)  # forward works, for inference under autograd
    with pytest.raises(RuntimeError, match="not implemented"):
        out.sum().backward()


class Block(torch.nn.Module):
    def __init__(self, d=64, heads=2):
        super().__init__()
        self.qkv = torch.nn.Linear(d * heads, 3 * d * heads)
        self.heads, self.d = heads, d

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.d).unbind(2)
        out = torch.ops.sage.attention(q, k, v, "NHD", True)
        return out.reshape(b, n, -1) * 2


def test_torch_compile_fullgraph_matches_eager():
    torch._dynamo.reset()
    model = Block().eval()
    x = torch.randn(2, 150, 128)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True, backend="inductor")
        assert torch.equal(compiled(x), eager)
        x2 = torch.randn(2, 77, 128)  # another length: recompiles or runs dynamic, still exact
        assert torch.equal(compiled(x2), model(x2))


def test_torch_export_round_trip(tmp_path):
    model = Block().eval()
    x = torch.randn(1, 100, 128)
    with torch.no_grad():
        ep = torch.export.export(model, (x,))
        assert any(n.target == torch.ops.sage.attention.default for n in ep.graph.nodes)
        path = tmp_path / "block.pt2"
        torch.export.save(ep, path)
        loaded = torch.export.load(path)
        assert torch.equal(loaded.module()(x), model(x))
