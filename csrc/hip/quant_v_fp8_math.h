// The element math of the fast mode's V quantization (quant_v_fp8.hip): e4m3(clamp(x / s, -448, 448)), rounded
// to nearest even, bit for bit what the CPU kernel (c10::Float8_e4m3fn) gives. Device code over compat::'s
// correctly rounded operations: quant_v_fp8.hip includes it after compat.h and quant_rules.h; test/test_hip_compile.py
// compiles it as host code against host versions of compat's operations and checks it against c10 on the CPU.
#pragma once
#include <cmath>
#include <cstdint>

#include "../contract.h"  // kFp8Max

namespace sage {
namespace vquant {

// float8_e4m3fn bits of y, |y| <= 448, rounded to nearest even (c10::Float8_e4m3fn's conversion on that range).
// Both cases are computed and one is selected, so that a warp never diverges here.
__device__ __forceinline__ uint32_t e4m3_bits(float y) {
  const uint32_t u = compat::bit_cast<uint32_t>(y);
  const uint32_t a = u & quant::kAbsMask;
  // Normal e4m3 (|y| >= 2^-6): 3 mantissa bits, ties to even, the carry running into the exponent; rebias 127 -> 7.
  const uint32_t normal = ((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - ((127u - 7u) << 3);
  // Below 2^-6: multiples of 2^-9, rint(|y| * 512) (8 of them round up to the smallest normal, 0x08), as the low
  // bits of |y| * 512 + 1.5 * 2^23.
  const float scaled = compat::fmul_rn(compat::bit_cast<float>(a), 512.0f);
  const uint32_t small = compat::bit_cast<uint32_t>(compat::fadd_rn(scaled, quant::kRneMagic)) & 0xfu;
  return ((u >> 24) & 0x80u) | (a < 0x3c800000u ? small : normal);
}

// How a thread divides by its channel's scale s: quant::div_rn of (x * pm) by s' = s * pm with y = frcp_rn(s'),
// pm = quant::kDivRnPrescale for the scales below quant::kDivRnMinScale, else 1, so that every channel takes the same
// operations.
struct ChannelDiv {
  float s, pm, y;
  bool keep;  // s > 0: 0 is stored for an all-zero or non-finite channel
  __device__ __forceinline__ explicit ChannelDiv(float scale) : s(scale), pm(1.0f), keep(scale > 0.0f) {
    if (keep && s < quant::kDivRnMinScale) {
      pm = quant::kDivRnPrescale;
      s = compat::fmul_rn(s, pm);
    }
    y = compat::frcp_rn(s);
  }
  // clamp(x / scale, -448, 448), or +0 (stored as byte 0) where the channel is not kept.
  __device__ __forceinline__ float quotient(float x) const {
    // div_rn gives +0 for x = -0: the quotient's sign is x's (s > 0), as in IEEE division.
    const uint32_t q = compat::bit_cast<uint32_t>(quant::div_rn(compat::fmul_rn(x, pm), s, y)) |
                       (compat::bit_cast<uint32_t>(x) & 0x80000000u);
    return keep ? fminf(fmaxf(compat::bit_cast<float>(q), -kFp8Max), kFp8Max) : 0.0f;
  }
  // The e4m3 bits of x / scale.
  __device__ __forceinline__ uint32_t quantize(float x) const { return e4m3_bits(quotient(x)); }
};

// Four quotients (|y| <= 448) as e4m3 bytes of one word, y0 in the low byte. NVIDIA sm_89+ converts two at a time
// in hardware (cvt.rn.satfinite.e4m3x2.f32: nearest even, e4m3 subnormals, the same bits as e4m3_bits on this
// range; test_gpu_prologue.py checks every tie); elsewhere, and in the host build of the tests, e4m3_bits.
__device__ __forceinline__ uint32_t e4m3x4(float y0, float y1, float y2, float y3) {
#if !defined(SAGE_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(y1), "f"(y0));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(y3), "f"(y2));
  return uint32_t(lo) | (uint32_t(hi) << 16);
#else
  return e4m3_bits(y0) | (e4m3_bits(y1) << 8) | (e4m3_bits(y2) << 16) | (e4m3_bits(y3) << 24);
#endif
}

}  // namespace vquant
}  // namespace sage
