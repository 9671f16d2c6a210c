// The arithmetic rules both quantizers of csrc/hip share (quant_qk_int8.hip, quant_v_fp8.hip), on compat::'s
// correctly rounded operations (include compat.h first). test/test_hip_compile.py also compiles it as host code
// against host versions of those operations.
#pragma once
#include <cstdint>

namespace sage {
namespace quant {

// The amax as the max of |x|'s bit pattern: unsigned order of non-negative floats is numeric order and NaN sorts
// above +inf, so "amax >= kInfBits" means a non-finite value was seen (fmaxf would drop NaN).
constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kInfBits = 0x7f800000u;

__device__ __forceinline__ uint32_t umax(uint32_t a, uint32_t b) { return a > b ? a : b; }

__device__ __forceinline__ uint32_t abs_bits(float x) { return compat::bit_cast<uint32_t>(x) & kAbsMask; }

// The scale of a block or channel from its amax bits: NaN when a value was non-finite, else RN(amax / qmax).
__device__ __forceinline__ float bits_to_scale(uint32_t amax_bits, float qmax) {
  if (amax_bits >= kInfBits) return compat::bit_cast<float>(0x7fc00000u);
  return compat::fdiv_rn(compat::bit_cast<float>(amax_bits), qmax);
}

// q + kRneMagic (1.5 * 2^23) rounds q to an integer, ties to even, for |q| < 2^22; the integer is the low bits of
// the sum's bit pattern (two's complement).
constexpr float kRneMagic = 12582912.0f;

// Correctly rounded x / s from y = frcp_rn(s) (Markstein): q1 is faithful, so q2 = RN(x/s) exactly. Five
// operations instead of a division, for kernels that divide many values by one s. Valid for s >= kDivRnMinScale
// (1/s a normal float, the residuals exact); when |x/s| is so small that a residual underflows, the result still
// rounds to 0 like the true quotient (but as +0 for x = -0: the residual sums drop the sign of a zero).
// Smaller scales (only tiny bf16 values) first multiply x and s by kDivRnPrescale, exact both ways (|x| <= amax <
// 2^-51 then), which keeps x/s unchanged.
constexpr float kDivRnMinScale = 0x1p-60f;
constexpr float kDivRnPrescale = 0x1p100f;
__device__ __forceinline__ float div_rn(float x, float s, float y) {
  const float q0 = compat::fmul_rn(x, y);
  const float r0 = compat::fma_rn(-q0, s, x);
  const float q1 = compat::fma_rn(r0, y, q0);
  const float r1 = compat::fma_rn(-q1, s, x);
  return compat::fma_rn(r1, y, q1);
}

}  // namespace quant
}  // namespace sage
