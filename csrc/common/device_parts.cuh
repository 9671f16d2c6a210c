// Device helpers both hand-written attention kernels (csrc/sm90, csrc/mma) use the same way: the e4m3 packing of P
// and the epilogue's paired stores. NVIDIA only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace sage {

// Four float32 values as e4m3 (round to nearest even, saturating), a0 in the lowest byte (sm_89+; 0 on older
// targets, whose kernels never pack e4m3). In PTX, so that ptxas writes the second pair into the upper half of the
// first's register (F2FP ... MERGE_C) instead of a PRMT.
__device__ __forceinline__ uint32_t pack4_e4m3(float a0, float a1, float a2, float a3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"  // the first source goes to the upper byte
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(a0), "f"(a1), "f"(a2), "f"(a3));
  return r;
#else
  (void)a0, (void)a1, (void)a2, (void)a3;
  return 0;
#endif
}

// Two adjacent output values in out's type (round to nearest even).
template <typename T>
__device__ __forceinline__ void store_pair(T* dst, float x, float y);
template <>
__device__ __forceinline__ void store_pair<__half>(__half* dst, float x, float y) {
  *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(x, y);
}
template <>
__device__ __forceinline__ void store_pair<__nv_bfloat16>(__nv_bfloat16* dst, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(x, y);
}
template <>
__device__ __forceinline__ void store_pair<float>(float* dst, float x, float y) {
  *reinterpret_cast<float2*>(dst) = make_float2(x, y);
}

}  // namespace sage
