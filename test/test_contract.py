"""The numeric contract is defined once per language: torch_sage/contract.py and csrc/contract.h. This compiles a
small program against the C++ header and checks every rule against the Python module."""
import json
import pathlib
import shutil
import subprocess

import pytest

from torch_sage import contract

ROOT = pathlib.Path(__file__).resolve().parents[1]

_PROGRAM = r"""
#include <cstdio>
#include "contract.h"
int main() {
  std::printf("{\"BLOCK_Q\": %lld, \"BLOCK_K\": %lld, \"MAX_HEAD_DIM\": %lld, \"FP8_MAX\": %.17g, \"LOG2E\": %.17g, ",
              (long long)sage::kBlockQ, (long long)sage::kBlockK, (long long)sage::kMaxHeadDim,
              (double)sage::kFp8Max, sage::kLog2e);
  std::printf("\"LOG2_FP8_MAX\": %.17g, \"MAX_SM_SCALE\": %.17g, ", sage::kLog2Fp8Max, sage::kMaxSmScale);
  std::printf("\"padded\": [");
  for (int d = 1; d <= sage::kMaxHeadDim; ++d) {
    std::printf("%s%lld", d > 1 ? ", " : "", (long long)sage::padded_head_dim(d));
  }
  std::printf("], \"round_up\": [");
  for (int n = 0; n <= 300; ++n) std::printf("%s%lld", n ? ", " : "", (long long)sage::round_up(n, sage::kBlockK));
  std::printf("]}\n");
}
"""


@pytest.fixture(scope="module")
def cpp_contract(tmp_path_factory):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    d = tmp_path_factory.mktemp("contract")
    (d / "main.cpp").write_text(_PROGRAM)
    subprocess.run([cxx, "-std=c++17", f"-I{ROOT / 'csrc'}", str(d / "main.cpp"), "-o", str(d / "main")], check=True)
    return json.loads(subprocess.run([str(d / "main")], capture_output=True, text=True, check=True).stdout)


def test_cpp_and_python_contract_agree(cpp_contract):
    for name in ("BLOCK_Q", "BLOCK_K", "MAX_HEAD_DIM", "FP8_MAX", "LOG2E", "LOG2_FP8_MAX", "MAX_SM_SCALE"):
        assert cpp_contract[name] == getattr(contract, name), name
    assert cpp_contract["padded"] == [contract.padded_head_dim(d) for d in range(1, contract.MAX_HEAD_DIM + 1)]
    assert cpp_contract["round_up"] == [contract.round_up(n, contract.BLOCK_K) for n in range(301)]
    assert sorted(set(cpp_contract["padded"])) == list(contract.HEAD_DIMS_PAD)


def test_python_contract_is_the_documented_one():
    # docs/SEMANTICS.md: 128-token q blocks, 64-token k blocks, e4m3 max 448, base-2 scores.
    import math
    assert (contract.BLOCK_Q, contract.BLOCK_K, contract.FP8_MAX) == (128, 64, 448.0)
    assert contract.LOG2E == 1 / math.log(2)
    assert math.isclose(2 ** contract.LOG2_FP8_MAX, contract.FP8_MAX, rel_tol=1e-15)
    assert contract.bhnd((2, 3, 5, 7), "NHD") == (2, 5, 3, 7)
    assert contract.layout_shape(2, 5, 3, 7, "NHD") == (2, 3, 5, 7)
    with pytest.raises(ValueError, match="tensor_layout"):
        contract.bhnd((2, 3, 5, 7), "BHND")


@pytest.mark.parametrize("sm_scale", [1e6, -1e6, 1e6 * (1 + 2 ** -40), -1e7, float("inf"), float("nan"), 0.125])
def test_sm_scale_limit_is_the_same_in_python_and_in_the_ops(sm_scale):
    # The Triton prologue's entry checks it in Python (a build without GPU code calls it with no C++ op before it);
    # the C++ ops check it themselves. Both accept and refuse the same values.
    import math

    import torch

    import torch_sage  # noqa: F401
    from torch_sage.triton_jit_ops import _quant_qk_int8_triton
    q = k = torch.randn(1, 1, 4, 64, dtype=torch.float16)
    accepted = math.isfinite(sm_scale) and abs(sm_scale) <= 1e6
    if accepted:
        torch.ops.sage.quant_qk_int8(q, k, "HND", sm_scale, False)
        contract.check_sm_scale(sm_scale)  # what the Triton entry calls first
    else:
        for call in (lambda: torch.ops.sage.quant_qk_int8(q, k, "HND", sm_scale, False),
                     lambda: contract.check_sm_scale(sm_scale),
                     lambda: _quant_qk_int8_triton(q, k, "HND", sm_scale, False)):
            with pytest.raises(RuntimeError, match="sm_scale must be finite with"):
                call()
