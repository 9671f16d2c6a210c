"""The Triton attention kernel (torch_sage/triton_attention.py) against the C++ CPU kernel, in Triton's
interpreter on CPU tensors. On a machine with a GPU, conftest.py runs this file in a child process that sees no
GPU (TRITON_INTERPRET would switch every Triton kernel of the main process to the interpreter).

The kernel sums in another order (tile-wise dots, key blocks of BLOCK_N for the online softmax), so the
outputs agree within rounding, not bit for bit.
"""
import importlib.util
import math
import os
import pathlib

import pytest
import torch

from conftest import make_qkv, triton_interpreter_unusable

if torch.cuda.is_available():
    pytest.skip("run by conftest.py in a process without a GPU", allow_module_level=True)
if triton_interpreter_unusable():
    pytest.skip(triton_interpreter_unusable(), allow_module_level=True)

# @triton.jit reads TRITON_INTERPRET when it decorates a function (conftest.py sets it in a process without a
# GPU): load a private copy of the kernel module with it set, so that the copy is interpreted whatever an
# earlier import of torch_sage.triton_attention holds. The tests set it again while they run (the interpreter
# consults it during launches).
_saved_interpret = os.environ.get("TRITON_INTERPRET")
os.environ["TRITON_INTERPRET"] = "1"
try:
    _path = pathlib.Path(__file__).resolve().parents[1] / "torch_sage" / "triton_attention.py"
    _spec = importlib.util.spec_from_file_location("torch_sage._triton_attention_interp", _path)  # package-relative imports resolve
    ta = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(ta)
finally:
    if _saved_interpret is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = _saved_interpret


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _inputs(b, hq, hk, nq, nk, d, layout, vdtype, sm_scale=None, seed=0, smooth_k=True):
    """(q_int8, q_scale, k_int8, k_scale, v, v_scale) from the CPU prologue ops."""
    v16 = torch.bfloat16 if vdtype == torch.bfloat16 else torch.float16
    q, k, v = make_qkv(b, hq, hk, nq, nk, d, dtype=v16, layout=layout, seed=seed)
    scale = 1 / math.sqrt(d) if sm_scale is None else sm_scale
    q_int8, q_scale, k_int8, k_scale, _ = torch.ops.sage.quant_qk_int8(q, k, layout, scale, smooth_k)
    v_scale = None
    if vdtype == torch.float8_e4m3fn:
        v, v_scale = torch.ops.sage.quant_v_fp8(v, layout)
    return q_int8, q_scale, k_int8, k_scale, v, v_scale


def _check(args, qo_len, layout, causal, out_dtype, fp8=None):
    got_out, got_lse = ta.qk_int8_attention_triton(*args, qo_len, layout, causal, out_dtype)
    want_out, want_lse = torch.ops.sage.qk_int8_attention(*args, qo_len, layout, causal, out_dtype)
    assert got_out.shape == want_out.shape and got_out.dtype == want_out.dtype and got_out.is_contiguous()
    assert got_lse.shape == want_lse.shape and got_lse.dtype == torch.float32
    fp8 = args[4].dtype == torch.float8_e4m3fn if fp8 is None else fp8
    big = want_out.float().abs().max().item() if want_out.numel() else 0.0
    # fp8: key blocks other than 64 change the running max, so e4m3(p * 448) rounds differently
    tol = 2e-2 if fp8 else 2e-3
    torch.testing.assert_close(got_out.float(), want_out.float(), atol=tol * big + 1e-6, rtol=tol * 5)
    torch.testing.assert_close(got_lse, want_lse, atol=1e-3, rtol=0)
    return got_out, got_lse


def test_kernel_is_interpreted():
    assert type(ta._qk_int8_attn_fwd).__name__ == "InterpretedFunction"


# (batch, heads_q, heads_kv, qo_len, kv_len, head_dim, layout, causal, v dtype, out dtype)
CASES = [
    (1, 2, 2, 100, 100, 64, "HND", False, torch.float16, torch.float16),
    (1, 2, 2, 100, 100, 64, "NHD", False, torch.float16, torch.float16),
    (1, 2, 1, 70, 200, 128, "HND", True, torch.bfloat16, torch.bfloat16),  # causal, qo_len < kv_len, GQA
    (1, 2, 1, 200, 70, 128, "NHD", True, torch.float16, torch.float32),  # causal, qo_len > kv_len
    (2, 4, 2, 130, 129, 80, "NHD", False, torch.bfloat16, torch.float16),  # Dp padding, GQA
    (1, 1, 1, 33, 150, 256, "HND", True, torch.float16, torch.float16),
    (1, 3, 3, 1, 1, 32, "HND", False, torch.float16, torch.float16),
    (1, 2, 1, 150, 190, 80, "HND", False, torch.float8_e4m3fn, torch.float16),
    (1, 2, 2, 140, 100, 64, "NHD", True, torch.float8_e4m3fn, torch.bfloat16),
    (1, 4, 1, 64, 300, 128, "HND", True, torch.float8_e4m3fn, torch.float32),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(x).replace("torch.", "") for x in c))
def test_matches_cpu_kernel(case):
    b, hq, hk, nq, nk, d, layout, causal, vdtype, out_dtype = case
    args = _inputs(b, hq, hk, nq, nk, d, layout, vdtype, seed=nq + nk + d)
    _check(args, nq, layout, causal, out_dtype)


# Tile shapes the table gives GPUs: BLOCK_N = 128 (two k scales per tile, a tail tile past the padded keys),
# BLOCK_M = 128 (the diagonal spans two key blocks of 64) and BLOCK_N < 64.
@pytest.mark.parametrize("cfg", [(128, 128, 8, 3), (128, 64, 8, 3), (64, 64, 4, 2), (64, 32, 4, 2)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("vdtype", [torch.float16, torch.float8_e4m3fn])
def test_tile_configs(monkeypatch, cfg, causal, vdtype):
    monkeypatch.setattr(ta, "attention_config", lambda *a: cfg)
    args = _inputs(1, 1, 1, 260, 130, 64, "HND", vdtype, seed=cfg[1])
    _check(args, 260, "HND", causal, torch.float16)
    args = _inputs(1, 1, 1, 100, 260, 64, "NHD", vdtype, seed=cfg[0])
    _check(args, 100, "NHD", causal, torch.float16)


@pytest.mark.parametrize("vdtype", [torch.float16, torch.float8_e4m3fn])
@pytest.mark.parametrize("causal", [False, True])
def test_no_keys_gives_zero_and_minus_inf(vdtype, causal):
    args = _inputs(1, 2, 1, 5, 0, 64, "HND", vdtype)
    out, lse = _check(args, 5, "HND", causal, torch.float16)
    assert (out == 0).all() and torch.isneginf(lse).all()


def test_no_queries_gives_empty_outputs():
    args = _inputs(2, 2, 2, 0, 40, 64, "NHD", torch.float16)
    out, lse = ta.qk_int8_attention_triton(*args, 0, "NHD", False, torch.float16)
    assert out.shape == (2, 0, 2, 64) and lse.shape == (2, 2, 0)


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("fp8", [False, True])
def test_strided_v(layout, fp8):
    b, hq, hk, nq, nk, d = 1, 2, 2, 90, 110, 80
    q_int8, q_scale, k_int8, k_scale, v, v_scale = _inputs(b, hq, hk, nq, nk, d, layout, torch.float16, seed=3)
    if fp8:
        v, v_scale = torch.ops.sage.quant_v_fp8(v, layout)
    if layout == "NHD":  # v of a packed [B, N, 2, H, D] kv tensor
        packed = torch.zeros(b, nk, 2, hk, d, dtype=v.dtype)
        packed[:, :, 1] = v
        v = packed[:, :, 1]
    else:  # rows of D + 16 elements, v starting at element 8 of each
        wide = torch.zeros(b, hk, nk, d + 16, dtype=v.dtype)
        wide[..., 8:8 + d] = v
        v = wide[..., 8:8 + d]
    assert not v.is_contiguous() and v.stride(-1) == 1
    _check((q_int8, q_scale, k_int8, k_scale, v, v_scale), nq, layout, True, torch.float16, fp8=fp8)


@pytest.mark.parametrize("fp8", [False, True])
def test_negative_sm_scale(fp8):
    vdtype = torch.float8_e4m3fn if fp8 else torch.float16
    args = _inputs(1, 2, 1, 130, 100, 64, "HND", vdtype, sm_scale=-0.2, seed=7)  # the sign goes into q_int8
    _check(args, 130, "HND", False, torch.float16)


def test_rejects_bad_arguments():
    q_int8, q_scale, k_int8, k_scale, v, _ = _inputs(1, 2, 2, 10, 10, 64, "HND", torch.float16)
    with pytest.raises(RuntimeError, match="v_scale"):
        ta.qk_int8_attention_triton(q_int8, q_scale, k_int8, k_scale, v, q_scale, 10, "HND", False, torch.float16)
    with pytest.raises(RuntimeError, match="padded"):
        ta.qk_int8_attention_triton(q_int8, q_scale, k_int8, k_scale, v, None, 200, "HND", False, torch.float16)
    with pytest.raises(RuntimeError, match="tensor_layout"):
        ta.qk_int8_attention_triton(q_int8, q_scale, k_int8, k_scale, v, None, 10, "BHSD", False, torch.float16)
