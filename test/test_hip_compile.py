"""csrc/hip compiles on its own (no torch, no ATen) with nvcc for sm_90, without spills: a compile-only check
that runs on CPU machines with nvcc (CI has one)."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "csrc" / "hip").glob("*.hip"))


def test_kernel_folders_have_no_aten():
    """csrc/hip and the launch layer it includes from csrc/common (compat.h, vt_layout.h) stay torch-free."""
    for path in sorted((ROOT / "csrc" / "hip").iterdir()) + sorted((ROOT / "csrc" / "common").iterdir()):
        text = path.read_text()
        assert not re.search(r"#include\s*[<\"](ATen|torch|c10)/", text), f"{path.name} includes torch headers"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_nvcc_sm90_compiles_without_spills(src, tmp_path):
    res = subprocess.run(["nvcc", "-std=c++17", "-O3", "-arch=sm_90", "-Xptxas", "-v", "-Werror", "all-warnings",
                          "-x", "cu", "-c", str(src), "-o", str(tmp_path / "k.o")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    report = res.stderr
    assert "Used" in report and re.findall(r"(\d+) bytes spill stores", report)
    assert all(n == "0" for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)), report
    assert all(n == "0" for n in re.findall(r"(\d+) bytes stack frame", report)), report


_V_QUANT_HOST_CHECK = r"""
#include <c10/util/Float8_e4m3fn.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#define __device__
#define __forceinline__ inline
namespace sage {
namespace compat {  // host versions of compat.h's correctly rounded operations (IEEE on the host)
template <typename To, typename From> To bit_cast(From x) { To t; std::memcpy(&t, &x, sizeof t); return t; }
inline float fmul_rn(float a, float b) { return a * b; }
inline float fadd_rn(float a, float b) { return a + b; }
inline float fma_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float frcp_rn(float a) { return 1.0f / a; }
inline float fdiv_rn(float a, float b) { return a / b; }
}  // namespace compat
}  // namespace sage
#include "quant_rules.h"
#include "quant_v_fp8_math.h"

// The CPU kernel's element (csrc/ops/cpu_prologue.cpp, quant_v_fp8_cpu).
static uint8_t reference(float x, float s) {
  if (!(s > 0.0f)) return 0;
  return c10::Float8_e4m3fn(std::min(448.0f, std::max(-448.0f, x / s))).x;
}

int main() {
  long checked = 0, bad = 0;
  for (uint64_t a = 0; a <= 0x43e00000u; a += 7) {  // |y| <= 448, both signs
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float y = sage::compat::bit_cast<float>((uint32_t)a | sign);
      ++checked;
      if (sage::vquant::e4m3_bits(y) != c10::Float8_e4m3fn(y).x && bad++ < 5) std::printf("e4m3 %a\n", y);
    }
  }
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  for (int t = 0; t < 100000; ++t) {
    // amax from 2^-140 (subnormal scales, the 2^100 prescale) to ~1e13, and channels with no scale.
    float amax = t % 7 ? std::fabs(nd(g)) * std::exp(3 * nd(g))
                       : std::ldexp(std::fabs(nd(g)) + 0.01f, -(int)(g() % 140));
    if (t % 1000 == 0) amax = 0.0f;
    const float s = amax / 448.0f;
    const sage::vquant::ChannelDiv div(s);
    for (int k = 0; k < 64; ++k) {
      float x = std::min(amax, std::max(-amax, nd(g) * amax / 3));
      if (k < 6) x = (float[]){amax, -amax, 0.0f, -0.0f, -std::ldexp(1.0f, -149), std::ldexp(nd(g), -30) * amax}[k];
      ++checked;
      if (div.quantize(x) != reference(x, s) && bad++ < 5) std::printf("quantize %a / %a\n", x, s);
    }
  }
  std::printf("checked %ld bad %ld\n", checked, bad);
  return bad != 0;
}
"""


def test_v_quant_element_math_matches_the_cpu_kernel(tmp_path):
    """csrc/hip/quant_v_fp8_math.h (with quant_rules.h) compiled as host code against host versions of compat.h's
    correctly rounded operations: e4m3 rounding over every 7th float up to 448 and the division by the channel scale
    (tiny, zero and normal scales; +-0, subnormal and extreme values) give c10::Float8_e4m3fn's bytes, as the CPU
    kernel does. The GPU test (test_gpu_prologue.py) compares the whole kernels."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    from torch.utils.cpp_extension import include_paths

    (tmp_path / "check.cpp").write_text(_V_QUANT_HOST_CHECK)
    exe = tmp_path / "check"
    res = subprocess.run([cxx, "-std=c++17", "-O2", "-ffp-contract=off", f"-I{ROOT / 'csrc' / 'hip'}"]
                         + [f"-I{p}" for p in include_paths()] + [str(tmp_path / "check.cpp"), "-o", str(exe)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("bad 0"), run.stdout
