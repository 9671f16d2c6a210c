// The part of the mma attention kernel (attention_kernel.cuh) that belongs to one instruction set: NVIDIA's
// warp-level mma.sync (sm_80 and newer: Ampere, Ada, Hopper, Blackwell consumer), its fragment loads (ldmatrix) and
// the asynchronous copies into shared memory (cp.async). Everything here is per warp of 32 lanes.
//
// Register layouts (PTX ISA, "Matrix fragments for mma.m16n8k*"), with g = lane / 4 and t = lane % 4:
// - accumulator of an m16n8 tile (4 values, int32 or float32): value 2 i + c holds row g + 8 i, column 2 t + c;
// - A of m16n8k32 8-bit (4 registers of 4 bytes): register 2 h + i holds row g + 8 i, k = 16 h + 4 t .. + 3;
// - B of m16n8k32 8-bit (2 registers): register h holds column g, k = 16 h + 4 t .. + 3;
// - A of m16n8k16 16-bit (4 registers of 2 values): register 2 h + i holds row g + 8 i, k = 8 h + 2 t, + 1;
// - B of m16n8k16 16-bit (2 registers): register h holds column g, k = 8 h + 2 t, + 1.
// So an accumulator pair of S (keys 2 t, 2 t + 1 of an 8-key tile) is directly a register of P's 16-bit A fragment,
// and four such values are a register of P's e4m3 A fragment when V^T's keys are permuted in groups of 16
// (csrc/common/vt_layout.h: column 4 t + c holds key 2 t + (c & 1) + 8 (c >> 1)).
//
// A second instantiation for AMD RDNA4 (gfx12, wave32 WMMA: v_wmma_i32_16x16x16_iu8, v_wmma_f32_16x16x16_f16,
// v_wmma_f32_16x16x16_fp8_fp8) would replace this header and keep the kernel's tiles, pipeline and softmax. It
// would need: 16x16 output tiles instead of 16x8 (the kernel's n-tile loops in steps of 16 columns); fragments read
// with plain ds_read (no ldmatrix: A lane l holds row l % 16, k = 8 (l / 16) .. + 7; B column l % 16 with the same
// k); an accumulator layout of column l % 16, rows 8 (l / 16) + i, which is B's layout, not A's, so P would feed
// P.V as the B operand of O^T = V^T P^T (V^T as A) or be moved through shared memory; global_load_lds or plain
// loads in place of cp.async; and the mapping acc_row / acc_col below rewritten for that layout.
#pragma once
#include <cstdint>

namespace sage {
namespace mma {

// Row (0..15) and column (0..7) of accumulator value r (0..3) of an m16n8 tile in lane `lane`.
__device__ __forceinline__ int acc_row(int lane, int r) { return lane / 4 + 8 * (r / 2); }
__device__ __forceinline__ int acc_col(int lane, int r) { return 2 * (lane % 4) + r % 2; }

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; zero-filled when !valid (src is then not read, but must be a valid
// address all the same).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 matrices of 16-bit values (8 rows of 16 bytes each); lane l gives the address of row l % 8 of matrix
// l / 8 and receives, of each matrix m in r[m], row l / 4, values 2 (l % 4), + 1 (as bytes: 4 (l % 4) .. + 3).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// The same, transposed: of each matrix, column l / 4, rows 2 (l % 4), + 1.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a . b, int8 m16n8k32, int32 accumulators.
__device__ __forceinline__ void mma_s8(int32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a . b, float16 or bfloat16 m16n8k16, float32 accumulators.
template <bool BF16>
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Whether this compilation target has e4m3 mma.sync (sm_89 and newer).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define SAGE_MMA_HAS_FP8 1
#else
#define SAGE_MMA_HAS_FP8 0
#endif

// d = a . b + c, e4m3 m16n8k32, float32 accumulators (sm_89+; the kernels that call it are not launched on older
// GPUs, and their bodies are empty there).
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                         const float (&c)[4]) {
#if SAGE_MMA_HAS_FP8
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
  (void)a, (void)b0, (void)b1;
  for (int r = 0; r < 4; ++r) d[r] = c[r];
#endif
}

// Two float32 values as float16 / bfloat16 (round to nearest even), lo in the lower half.
template <bool BF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (BF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace mma
}  // namespace sage
