"""The Triton quantization kernels against the C++ CPU kernels, bit for bit (Triton's interpreter on CPU). On a
machine with a GPU, conftest.py runs this file in a child process that sees no GPU."""
import math

import pytest
import torch

from conftest import make_qkv, triton_interpreter_unusable

if torch.cuda.is_available():
    pytest.skip("run by conftest.py in a process without a GPU", allow_module_level=True)
if triton_interpreter_unusable():
    pytest.skip(triton_interpreter_unusable(), allow_module_level=True)
from torch_sage.triton_quant import quant_qk_int8_triton, quant_v_fp8_triton  # noqa: E402


def assert_identical(got, want):
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("case", [
    (1, 2, 1, 130, 70, 64, "HND"),
    (2, 2, 2, 1, 129, 128, "NHD"),
    (1, 1, 1, 200, 65, 40, "NHD"),
    (1, 1, 1, 5, 3, 256, "HND"),
])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("smooth_k", [False, True])
def test_triton_prologue_is_bit_identical_to_cpu(case, dtype, smooth_k):
    b, hq, hk, nq, nk, d, layout = case
    q, k, _ = make_qkv(b, hq, hk, nq, nk, d, dtype=dtype, layout=layout, seed=nq + d)
    args = (q, k, layout, 1 / math.sqrt(d), smooth_k)
    assert_identical(quant_qk_int8_triton(*args), torch.ops.sage.quant_qk_int8(*args))


def test_triton_prologue_strided_non_finite_and_empty():
    fused = torch.randn(1, 150, 3, 2, 64).half()
    q, k = fused[:, :, 0], fused[:, :, 1]
    q[0, 3, 1, 5] = float("nan")
    k[0, 100, 0, 0] = float("-inf")
    assert_identical(quant_qk_int8_triton(q, k, "NHD", 0.125, False),
                     torch.ops.sage.quant_qk_int8(q, k, "NHD", 0.125, False))
    q, k, _ = make_qkv(1, 2, 2, 0, 0, 64)
    assert_identical(quant_qk_int8_triton(q, k, "HND", 0.125, True),
                     torch.ops.sage.quant_qk_int8(q, k, "HND", 0.125, True))


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_triton_quant_v_is_bit_identical_to_cpu(layout):
    _, _, v = make_qkv(2, 1, 2, 1, 150, 80, dtype=torch.bfloat16, layout=layout)
    v[1, 0, 0, 3] = float("nan") if layout == "HND" else v[1, 0, 0, 3]
    got, want = quant_v_fp8_triton(v, layout), torch.ops.sage.quant_v_fp8(v, layout)
    assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8))
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0, equal_nan=True)
