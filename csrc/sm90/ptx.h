// The PTX the sm90 attention kernel uses besides wgmma's multiply (wgmma.h): mbarriers, TMA loads, wgmma
// ordering, shared-memory matrix descriptors. sm_90a; no torch. Semantics: PTX ISA 8.x, sections "mbarrier",
// "cp.async.bulk.tensor", "Asynchronous Warpgroup Level Matrix Multiply-Accumulate".
#pragma once
#include <cstdint>

namespace sage {
namespace sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier -------------------------------------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}

// Makes the initialised barriers visible to the async proxy (the TMA unit) before the first copy names them.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also announces `bytes` of TMA traffic the phase must wait for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// Blocks until the barrier's phase `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// One plain arrival (a consumer releasing a stage).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// ---- named barriers and register reallocation (warp specialization) -------------------------------------------

// Barrier `id` (1..15; 0 is __syncthreads) completes once `threads` threads have reached it: those that sync wait
// for it, those that arrive go on.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Every thread of a warpgroup gives registers back to the SM or takes them (sm_90a), up to N a thread. Takes
// effect only in a kernel with a register cap at entry (__launch_bounds__(threads, 1)).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- TMA --------------------------------------------------------------------------------------------------------

// Tile copy global -> shared of a 3-D / 4-D tensor map; completion counted on `bar` (complete_tx bytes).
// Out-of-bounds elements of the box are written as zeros.
__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, uint64_t* bar, int32_t c0, int32_t c1,
                                            int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
      ::"r"(smem_addr(dst)), "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

__device__ __forceinline__ void tma_load_4d(void* dst, const void* map, uint64_t* bar, int32_t c0, int32_t c1,
                                            int32_t c2, int32_t c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(smem_addr(dst)),
      "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// ---- wgmma ordering ---------------------------------------------------------------------------------------------

// Before the first wgmma of a group: orders the registers written before it (accumulators, A fragments).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// Waits until at most N committed groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// An 8-byte store of one word twice to a shared-memory address, then its fence: the async proxy (wgmma's operand
// reads) sees it once a CTA barrier follows.
__device__ __forceinline__ void st_shared_twice_for_async(uint32_t addr, uint32_t word) {
  asm volatile("st.shared.v2.u32 [%0], {%1, %1};\n" ::"r"(addr), "r"(word) : "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keeps the compiler from moving reads or writes of an accumulator register across wgmma_fence / wgmma_wait.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(int32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

// ---- shared-memory matrix descriptors ---------------------------------------------------------------------------

enum class Swizzle : uint64_t { k128B = 1, k64B = 2, k32B = 3 };

// The 64-bit descriptor of a wgmma operand in shared memory: start address, leading and stride byte offsets (all
// in 16-byte units), swizzle mode. The tile's base must be aligned to the swizzle pattern's repeat (1024 bytes for
// 128B, 512 for 64B) so that the TMA's swizzle and wgmma's agree; stepping the start address inside a swizzled
// row (along K of a K-major operand) is how successive k-slices are addressed.
// (Host code too: test/test_sm90_compile.py checks desc_advance against it on the CPU.)
__host__ __device__ __forceinline__ uint64_t make_smem_desc(uint32_t addr, uint32_t leading_bytes,
                                                            uint32_t stride_bytes, Swizzle swizzle) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr >> 4) & 0x3FFF);
  d |= static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32;
  d |= static_cast<uint64_t>(swizzle) << 62;
  return d;
}

// make_smem_desc(addr + bytes, ...) from make_smem_desc(addr, ...), bytes a multiple of 16: one 32-bit add to the
// address field, which holds addr >> 4 of a shared-memory address (below 256 KiB: it never carries out of its 14
// bits). A tile's k-slices step from one descriptor made per tile, instead of each rebuilding its own (four
// uniform-datapath instructions and a dependent chain before every wgmma).
__host__ __device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4), hi = static_cast<uint32_t>(desc >> 32);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

}  // namespace sm90
}  // namespace sage
