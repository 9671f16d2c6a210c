// One source, two toolchains: the csrc/hip kernels compile with nvcc (CUDA) and
// with hipcc / clang -x hip (ROCm) through this header only. No ATen here.
//
// Numerics: the prologue is specified bit for bit (docs/SEMANTICS.md), so every
// float op that matters goes through a *_rn wrapper below. Never build these
// files with fast-math, -ftz, or -fno-hip-fp32-correctly-rounded-divide-sqrt.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#if defined(__HIP__) || defined(__HIPCC__)
#define SAGE_HIP 1
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#if __has_include(<hip/hip_bf16.h>)
#include <hip/hip_bf16.h>
typedef __hip_bfloat16 sage_bf16;
#else  // ROCm < 5.7 only has the class-style bfloat16
#include <hip/hip_bfloat16.h>
typedef hip_bfloat16 sage_bf16;
#endif
typedef __half sage_half;
typedef hipStream_t sage_stream_t;
typedef hipError_t sage_error_t;
#define SAGE_SUCCESS hipSuccess
#define SAGE_ERROR_INVALID_VALUE hipErrorInvalidValue
#define sage_get_last_error hipGetLastError
#if defined(__FAST_MATH__)
#error "csrc/hip must not be compiled with -ffast-math: the prologue is bit-exact"
#endif
#else  // CUDA
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef __half sage_half;
typedef __nv_bfloat16 sage_bf16;
typedef cudaStream_t sage_stream_t;
typedef cudaError_t sage_error_t;
#define SAGE_SUCCESS cudaSuccess
#define SAGE_ERROR_INVALID_VALUE cudaErrorInvalidValue
#define sage_get_last_error cudaGetLastError
#if defined(__USE_FAST_MATH__)
#error "csrc/hip must not be compiled with --use_fast_math: the prologue is bit-exact"
#endif
#endif

// Runs the lambda that follows with `constexpr bool NAME` equal to COND: the template dispatch of the
// kernels (input dtype x vector width) as one expression per flag instead of nested if/else.
#define SAGE_BOOL_SWITCH(COND, NAME, ...) \
  [&] {                                   \
    if (COND) {                           \
      constexpr bool NAME = true;         \
      return __VA_ARGS__();               \
    }                                     \
    constexpr bool NAME = false;          \
    return __VA_ARGS__();                 \
  }()

// Max threads per block plus, on NVIDIA, a minimum of resident blocks per SM (caps
// registers). HIP's second argument means something else (waves per EU), so it is dropped.
#if defined(SAGE_HIP)
#define SAGE_LAUNCH_BOUNDS(max_threads, min_blocks) __launch_bounds__(max_threads)
#else
#define SAGE_LAUNCH_BOUNDS(max_threads, min_blocks) __launch_bounds__(max_threads, min_blocks)
#endif

// Warp (wavefront) size. NVIDIA: 32. AMD: 64 on gfx9 (CDNA), 32 by default on
// gfx10-12 (RDNA), 64 there with -mwavefrontsize64, so it is never assumed. ROCm 7
// deprecates __AMDGCN_WAVEFRONT_SIZE__ and the constexpr warpSize, so we use the
// builtin, which the AMDGPU backend folds to the per-target constant. Device code
// may rely only on: a power of two in [32, 64].
#if defined(SAGE_HIP)
#if defined(__HIP_DEVICE_COMPILE__)
#define SAGE_WARP_SIZE ((int)__builtin_amdgcn_wavefrontsize())
#else
#define SAGE_WARP_SIZE 64  // host pass: never used for sizing, only to parse
#endif
#else
#define SAGE_WARP_SIZE 32
#endif
#define SAGE_MIN_WARP_SIZE 32  // for sizing per-warp shared arrays
#define SAGE_MAX_WARP_SIZE 64  // for fully unrolled butterflies

namespace sage {
namespace compat {

// The bits of a value as another type of the same size (float <-> uint32_t); nvcc and clang both have the builtin.
template <typename To, typename From>
__device__ __forceinline__ To bit_cast(From x) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast keeps the size");
  return __builtin_bit_cast(To, x);
}

// Correctly rounded (IEEE round-to-nearest-even) float ops, never contracted into FMA.
// HIP: plain operators are IEEE by default (its __frcp_rn is an approximation, avoid it);
// the .hip files also turn FP contraction off for clang.
__device__ __forceinline__ float fdiv_rn(float a, float b) {
#if defined(SAGE_HIP)
  return a / b;
#else
  return __fdiv_rn(a, b);
#endif
}

__device__ __forceinline__ float frcp_rn(float a) {
#if defined(SAGE_HIP)
  return 1.0f / a;
#else
  return __frcp_rn(a);
#endif
}

__device__ __forceinline__ float fadd_rn(float a, float b) {
#if defined(SAGE_HIP)
  return a + b;
#else
  return __fadd_rn(a, b);
#endif
}

__device__ __forceinline__ float fmul_rn(float a, float b) {
#if defined(SAGE_HIP)
  return a * b;
#else
  return __fmul_rn(a, b);
#endif
}

__device__ __forceinline__ float fma_rn(float a, float b, float c) {
#if defined(SAGE_HIP)
  return __builtin_fmaf(a, b, c);
#else
  return __fmaf_rn(a, b, c);
#endif
}

// Round to nearest, ties to even.
__device__ __forceinline__ int float2int_rn(float a) {
#if defined(SAGE_HIP)
  return (int)__builtin_rintf(a);
#else
  return __float2int_rn(a);
#endif
}

// Raw storage bits -> float (exact). Two fp16/bf16 values packed in one 32-bit word.
__device__ __forceinline__ void half2_bits_to_float2(uint32_t w, float& lo, float& hi) {
#if defined(SAGE_HIP)
  lo = (float)__builtin_bit_cast(_Float16, (uint16_t)(w & 0xffffu));
  hi = (float)__builtin_bit_cast(_Float16, (uint16_t)(w >> 16));
#else
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w));
  lo = f.x;
  hi = f.y;
#endif
}

__device__ __forceinline__ void bf162_bits_to_float2(uint32_t w, float& lo, float& hi) {
  // bfloat16 is the top half of a float32: the conversion is a shift, NaN payload kept.
  lo = bit_cast<float>(w << 16);
  hi = bit_cast<float>(w & 0xffff0000u);
}

__device__ __forceinline__ float half_bits_to_float(uint16_t b) {
#if defined(SAGE_HIP)
  return (float)__builtin_bit_cast(_Float16, b);
#else
  return __half2float(__ushort_as_half(b));
#endif
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return bit_cast<float>((uint32_t)b << 16); }

// The one warp shuffle: butterfly exchange with lane ^ lane_mask (lane_mask < SAGE_WARP_SIZE).
// Every lane of the warp must call it. On AMD it is ds_bpermute (no lane-mask argument,
// which sidesteps ROCm 7's 64-bit-mask requirement for *_sync shuffles).
__device__ __forceinline__ uint32_t shfl_xor(uint32_t v, int lane_mask) {
#if defined(SAGE_HIP)
  const int lane = (int)__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
  return (uint32_t)__builtin_amdgcn_ds_bpermute((lane ^ lane_mask) << 2, (int)v);
#else
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#endif
}

__device__ __forceinline__ float shfl_xor(float v, int lane_mask) {
  return bit_cast<float>(shfl_xor(bit_cast<uint32_t>(v), lane_mask));
}

__device__ __forceinline__ double shfl_xor(double v, int lane_mask) {
#if defined(SAGE_HIP)
  const uint64_t u = __builtin_bit_cast(uint64_t, v);
#else
  const uint64_t u = (uint64_t)__double_as_longlong(v);
#endif
  const uint32_t lo = shfl_xor((uint32_t)u, lane_mask);
  const uint32_t hi = shfl_xor((uint32_t)(u >> 32), lane_mask);
  const uint64_t r = ((uint64_t)hi << 32) | lo;
#if defined(SAGE_HIP)
  return __builtin_bit_cast(double, r);
#else
  return __longlong_as_double((long long)r);
#endif
}

// ---- Launches ----------------------------------------------------------------------------------------------
// Every csrc/hip and csrc/sm90 kernel is launched by launch() and calls wait_for_previous_grid() before it touches
// global memory. With `overlap` (the host side sets it on NVIDIA sm_90 and newer, SAGEATTN_SK1_OVERLAP) the launch
// is a programmatic dependent one: the kernel's blocks may become resident while the previous kernel of the stream
// finishes and wait there until its writes are visible, so the launch latency between the prologue's kernels and
// the attention kernel hides behind each one's tail. Otherwise (and on ROCm) it is a plain launch, and the wait
// returns at once.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  // The next kernel may launch now: it waits in turn for this one to finish.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// ---- Thread block clusters (NVIDIA sm_90+ device code only) -------------------------------------------------
#if !defined(SAGE_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SAGE_HAS_CLUSTERS 1
// Split cluster barrier: arrive publishes this thread's earlier writes (release), wait blocks until every thread of
// the cluster has arrived (acquire). Every thread of every block of the cluster must call both, in turn.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The address of *p's twin in the shared memory of block `rank` of this cluster (a generic address).
template <typename T>
__device__ __forceinline__ const T* cluster_peer(const T* p, unsigned rank) {
  uint64_t out;
  asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(out) : "l"(p), "r"(rank));
  return reinterpret_cast<const T*>(out);
}
#else
#define SAGE_HAS_CLUSTERS 0
#endif

// How launch() starts a kernel: overlapped (see above), and in clusters of `cluster` blocks along x (NVIDIA sm_90+;
// grid.x must be a multiple of it; 1: no clusters).
struct LaunchMode {
  LaunchMode(bool overlap_, unsigned cluster_ = 1) : overlap(overlap_), cluster(cluster_) {}  // NOLINT: from a bool
  bool overlap;
  unsigned cluster;
};

#if !defined(SAGE_HIP)
// The launch attribute that groups blocks along x in clusters of n.
inline cudaLaunchAttribute cluster_dimension(unsigned n) {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = n;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  return attr;
}

// lookup()'s answer for the current device, asked once per device: `known` holds 0 (not asked), 1 (yes) or 2 (no).
template <typename Lookup>
bool once_per_device(std::atomic<int> (&known)[64], Lookup lookup) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return false;
  int k = known[device].load(std::memory_order_relaxed);
  if (k == 0) {
    k = lookup() ? 1 : 2;
    known[device].store(k, std::memory_order_relaxed);
  }
  return k == 1;
}

// Whether kernel's image on the current device was compiled for sm_90 or newer: false on older GPUs, and also on a
// Hopper GPU that runs an older arch's PTX (a build whose arch list lacks 9.0), which lacks the griddepcontrol and
// cluster instructions. Only then may its launches overlap or use clusters.
template <auto kernel>
bool compiled_for_sm90() {
  static std::atomic<int> known[64];
  return once_per_device(known, [] {
    cudaFuncAttributes attr;
    const void* fn = reinterpret_cast<const void*>(kernel);
    if (cudaFuncGetAttributes(&attr, fn) == cudaSuccess) return attr.ptxVersion >= 90;
    (void)cudaGetLastError();  // e.g. no image for this GPU: the launch reports that itself, not a stale error
    return false;
  });
}

// Whether one cluster of `cluster` blocks of kernel (`threads` a block, `smem` bytes of dynamic shared memory) can be
// resident on the current device: an MPS or green-context partition may hold none, and the launch would fail. Call
// it with the same shape every time: the answer is looked up once per kernel and device.
template <auto kernel>
bool cluster_fits(unsigned cluster, unsigned threads, size_t smem) {
  static std::atomic<int> known[64];
  return once_per_device(known, [&] {
    cudaLaunchAttribute attr = cluster_dimension(cluster);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(cluster);
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem;
    config.attrs = &attr;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess) return clusters > 0;
    (void)cudaGetLastError();  // not left pending for a later launch check
    return false;
  });
}
#endif

#if !defined(SAGE_HIP)
// Above 48 KiB of dynamic shared memory needs the attribute, which is set once per device and kernel (the statics
// belong to one instantiation, that is one kernel).
template <auto kernel>
inline cudaError_t allow_dynamic_smem(int bytes) {
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  static std::mutex mutex;
  static std::vector<bool> configured;
  const std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<size_t>(device) >= configured.size()) configured.resize(device + 1, false);
  if (!configured[device]) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err != cudaSuccess) return err;
    configured[device] = true;
  }
  return cudaSuccess;
}

#endif

// Enqueues kernel(args...) on stream; the caller reads the launch's error with sage_get_last_error(). mode.overlap
// falls back to a plain launch where the image lacks the wait (compiled_for_sm90); mode.cluster > 1 needs an
// image that has it (the caller checks compiled_for_sm90 before laying out the grid for clusters).
template <auto kernel, typename... Args>
void launch(dim3 grid, dim3 block, size_t smem, sage_stream_t stream, LaunchMode mode, const Args&... args) {
#if !defined(SAGE_HIP)
  const bool overlap = mode.overlap && compiled_for_sm90<kernel>();
  if (overlap || mode.cluster > 1) {
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (overlap) {
      attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (mode.cluster > 1) attr[n++] = cluster_dimension(mode.cluster);
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = n;
    (void)cudaLaunchKernelEx(&config, kernel, args...);  // an error stays readable by sage_get_last_error()
    return;
  }
#else
  (void)mode;
#endif
  kernel<<<grid, block, smem, stream>>>(args...);
}

}  // namespace compat
}  // namespace sage
