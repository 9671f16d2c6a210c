// Host side of the mma kernel: which calls it takes, and the launch of the instantiation a call asks for.
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "../common/vt_transpose.cuh"
#include "instances.h"

namespace sage {
namespace mma {
namespace {

VKind v_kind(VType t) {
  return t == VType::kFloat8Vt ? VKind::kFloat8 : t == VType::kBFloat16 ? VKind::kBFloat16 : VKind::kFloat16;
}

// f<D, V>() of the head_dim and V type p asks for (head_dim_pad 64 or 128, checked by the caller).
template <typename F>
int for_types(const AttentionParams& p, F f) {
  const auto by_v = [&](auto d) {
    constexpr int D = decltype(d)::value;
    switch (v_kind(p.v_type)) {
      case VKind::kFloat8: return f.template operator()<D, VKind::kFloat8>();
      case VKind::kBFloat16: return f.template operator()<D, VKind::kBFloat16>();
      default: return f.template operator()<D, VKind::kFloat16>();
    }
  };
  return p.head_dim_pad == 128 ? by_v(std::integral_constant<int, 128>{}) : by_v(std::integral_constant<int, 64>{});
}

// image_arch<D, V>() for the current device, asked once per device and instantiation.
template <int D, VKind V>
int cached_image_arch() {
  static std::atomic<int> known[64];  // image_arch + 1; 0: not asked
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return image_arch<D, V>();
  int k = known[device].load(std::memory_order_relaxed);
  if (k == 0) {
    k = image_arch<D, V>() + 1;
    known[device].store(k, std::memory_order_relaxed);
  }
  return k - 1;
}

struct ImageArch {
  template <int D, VKind V>
  int operator()() const {
    return cached_image_arch<D, V>();
  }
};

struct Launch {
  const AttentionParams& p;
  cudaStream_t stream;
  template <int D, VKind V>
  int operator()() const {
    return launch_kernel<D, V>(p, stream);
  }
};

}  // namespace

const char* qk_attention_unsupported(const AttentionParams& p) {
  if (p.head_dim_pad != 64 && p.head_dim_pad != 128) return "padded head_dim is not 64 or 128";
  // A multiple of 8: V rows of whole 16-byte copies, out pairs.
  if (p.head_dim < 8 || p.head_dim > p.head_dim_pad || p.head_dim % 8 != 0) return "head_dim is not a multiple of 8";
  if (p.kv_len < 1 || p.qo_len < 1) return "no keys or no queries";
  if (p.heads_kv < 1 || p.heads_q % p.heads_kv != 0) return "heads";
  if (p.qo_len > INT32_MAX || p.kv_len > INT32_MAX || p.nq_pad > INT32_MAX || p.nk_pad > INT32_MAX) {
    return "sizes beyond int32";
  }
  if (p.heads_q > 65535 || p.batch > 65535) return "grid y / z hold heads and batch";
  const auto misaligned = [](const void* ptr, int64_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes != 0; };
  if (misaligned(p.q, 16) || misaligned(p.k, 16)) return "a base address is not 16-byte aligned";
  if (p.v_type == VType::kFloat8) {
    if (const char* why = vt::transpose_unsupported(p, p.workspace)) return why;
  } else if (p.v_type == VType::kFloat8Vt) {
    if (p.v_scale == nullptr || misaligned(p.v, 16)) return "fast mode buffers";
  } else {
    // 16-byte copies of V rows.
    if (misaligned(p.v, 16)) return "v is not 16-byte aligned";
    for (const int64_t s : {p.v_stride_b, p.v_stride_h, p.v_stride_n}) {
      if (s < 0 || s % 8 != 0) return "v's strides are not multiples of 8 elements";
    }
  }
  // The epilogue stores column pairs.
  const int64_t out_bytes = p.out_type == OutType::kFloat32 ? 4 : 2;
  if (misaligned(p.out, 2 * out_bytes)) return "out is not aligned for pair stores";
  for (const int64_t s : {p.o_stride_b, p.o_stride_h, p.o_stride_n}) {
    if (s % 2 != 0) return "out's strides are odd";
  }
  // What the device runs: an image of this build for its arch (an sm_80 image runs on sm_86 and sm_89, but has no
  // e4m3 tensor cores: the fast mode needs an sm_89 or newer image).
  const int arch = for_types(p, ImageArch{});
  if (arch == 0) return "no image of the kernel for this GPU in this build";
  if (v_kind(p.v_type) == VKind::kFloat8 && arch < 89) return "no e4m3 tensor cores in this GPU's image";
  return nullptr;
}

int64_t qk_attention_workspace_bytes(const AttentionParams& p) {
  return vt::transpose_workspace_bytes(p);
}

int launch_qk_int8_attention(const AttentionParams& p, void* stream_ptr) {
  if (qk_attention_unsupported(p) != nullptr) return static_cast<int>(cudaErrorInvalidValue);
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (p.v_type != VType::kFloat8) return for_types(p, Launch{p, stream});
  // A given v_fp8: its V^T into the workspace first, which the kernel then reads.
  if (const int err = vt::launch_transpose_v_fp8(p, p.workspace, stream); err != 0) return err;
  AttentionParams t = p;
  t.v = p.workspace;
  t.v_type = VType::kFloat8Vt;
  return for_types(t, Launch{t, stream});
}

}  // namespace mma
}  // namespace sage
