// The V transpose of a v_fp8 given to sage::qk_int8_attention into the V^T of vt_layout.h, for the hand-written
// kernels that read V^T (csrc/sm90, csrc/mma). NVIDIA only. Each including file gets its own copy (an unnamed
// namespace): the kernel is compiled for that file's archs, and launched from it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention_params.h"
#include "compat.h"
#include "vt_layout.h"

namespace sage {
namespace vt {
namespace {

// Given a v_fp8 [B, Hkv, N, head_dim] (element strides): its V^T. A block moves 64 tokens: 4-byte loads along the
// tokens' rows into shared memory, then store_tile. V's base and strides are multiples of 4 bytes
// (transpose_unsupported).
template <int D>
__global__ void __launch_bounds__(kThreads) transpose_v_fp8_kernel(const uint8_t* __restrict__ v,
                                                                   uint8_t* __restrict__ vt, int64_t sb, int64_t sh,
                                                                   int64_t sn, int heads, int kv_len, int head_dim,
                                                                   int64_t nt) {
  constexpr int kTokens = kTileTokens, kRowBytes = kRow<D>;
  __shared__ __align__(16) uint8_t tile[kTokens * kRowBytes];
  compat::wait_for_previous_grid();  // V's quantization
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  const int bhk = blockIdx.y, b = bhk / heads, h = bhk % heads;
  const uint8_t* src = v + b * sb + h * sh;
  for (int idx = threadIdx.x; idx < kTokens * (D / 4); idx += blockDim.x) {
    const int t = idx / (D / 4), c = 4 * (idx % (D / 4));
    const int64_t key = n0 + t;
    uint32_t x = 0;
    if (key < kv_len && c < head_dim) x = *reinterpret_cast<const uint32_t*>(src + key * sn + c);
    *reinterpret_cast<uint32_t*>(tile + t * kRowBytes + c) = x;
  }
  __syncthreads();
  store_tile<D>(tile, vt + static_cast<int64_t>(bhk) * D * nt + n0, nt);
}

// Why the transpose cannot take p's kFloat8 V into workspace (nullptr when it can).
inline const char* transpose_unsupported(const AttentionParams& p, const void* workspace) {
  const auto misaligned = [](const void* ptr, int64_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes != 0; };
  if (p.v_scale == nullptr || workspace == nullptr || misaligned(workspace, 16)) return "fast mode buffers";
  if (misaligned(p.v, 4) || p.v_stride_b % 4 != 0 || p.v_stride_h % 4 != 0 || p.v_stride_n % 4 != 0) {
    return "fp8 v is not in 4-byte words";  // the transpose's loads
  }
  if (p.batch * p.heads_kv > 65535) return "grid y of the V transpose";
  if (p.head_dim_pad != 64 && p.head_dim_pad != 128) return "padded head_dim is not 64 or 128";
  return nullptr;
}

// Bytes of workspace a launch of p needs for the transpose: its V^T when V is a given kFloat8, else 0.
inline int64_t transpose_workspace_bytes(const AttentionParams& p) {
  return p.v_type == VType::kFloat8 ? vt_bytes(p.batch * p.heads_kv, p.head_dim_pad, p.kv_len) : 0;
}

// Enqueues the transpose of p's kFloat8 V into workspace (transpose_workspace_bytes); 0 or the CUDA runtime's error.
inline int launch_transpose_v_fp8(const AttentionParams& p, void* workspace, cudaStream_t stream) {
  const int64_t nt = vt_tokens(p.kv_len);
  const dim3 grid(static_cast<unsigned>(nt / kTileTokens), static_cast<unsigned>(p.batch * p.heads_kv));
  const auto* v = static_cast<const uint8_t*>(p.v);
  auto* out = static_cast<uint8_t*>(workspace);
  const int heads = static_cast<int>(p.heads_kv), kv = static_cast<int>(p.kv_len), hd = static_cast<int>(p.head_dim);
  if (p.head_dim_pad == 128) {
    compat::launch<transpose_v_fp8_kernel<128>>(grid, dim3(kThreads), 0, stream, p.overlap_launch, v, out,
                                                p.v_stride_b, p.v_stride_h, p.v_stride_n, heads, kv, hd, nt);
  } else {
    compat::launch<transpose_v_fp8_kernel<64>>(grid, dim3(kThreads), 0, stream, p.overlap_launch, v, out,
                                               p.v_stride_b, p.v_stride_h, p.v_stride_n, heads, kv, hd, nt);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace
}  // namespace vt
}  // namespace sage
