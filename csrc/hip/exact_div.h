// Correctly rounded division of many values by one divisor, from compat::'s correctly rounded operations (include
// compat.h first). test/test_hip_compile.py also compiles it as host code against host versions of those operations.
#pragma once

namespace sage {
namespace compat {

// Correctly rounded x / s from y = frcp_rn(s) (Markstein): q1 is faithful, so q2 = RN(x/s) exactly. Five
// operations instead of a division, for kernels that divide many values by one s. Valid for s >= kDivRnMinScale
// (1/s a normal float, the residuals exact); when |x/s| is so small that a residual underflows, the result still
// rounds to 0 like the true quotient.
constexpr float kDivRnMinScale = 0x1p-60f;
__device__ __forceinline__ float div_rn(float x, float s, float y) {
  const float q0 = fmul_rn(x, y);
  const float r0 = fma_rn(-q0, s, x);
  const float q1 = fma_rn(r0, y, q0);
  const float r1 = fma_rn(-q1, s, x);
  return fma_rn(r1, y, q1);
}

}  // namespace compat
}  // namespace sage
