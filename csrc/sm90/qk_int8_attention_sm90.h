// Launcher interface of the hand-written Hopper (sm_90a) kernel of sage::qk_int8_attention: INT8 Q.K^T on wgmma
// (s32.s8.s8), online softmax in base 2 with float32 statistics, P.V on wgmma with float32 accumulators, in V's
// 16-bit type (accurate mode) or in e4m3 with a per-channel V scale and a fresh accumulator per key block (fast
// mode), TMA loads. No ATen, no torch: raw pointers, int64 sizes and strides, a stream.
// csrc/ops/gpu_sm90_attention.cpp fills the params from tensors. Numeric contract: docs/SEMANTICS.md "Attention
// kernel" (the same as the CPU and Triton kernels, up to the order of float32 sums).
#pragma once
#include <cstdint>

#include "../common/attention_params.h"

namespace sage {
namespace sm90 {

using sage::OutType;
using sage::VType;

// How the kernel runs. kSerial: one warpgroup a CTA of 64 query rows loads and computes in turn, three or four
// CTAs an SM. kWarpSpecialized: a CTA of 128 query rows, one warpgroup issuing the loads and two computing, which
// take turns on the tensor cores (one's softmax beside the other's products) and each issue the next block's Q.K^T
// before their softmax. The same results bit for bit, but in the accurate mode, where the warp-specialized
// schedule steps its softmax by 192 keys, not 128 (the same within rounding).
enum class Schedule : int { kSerial = 0, kWarpSpecialized = 1 };

// The launch's arguments (csrc/common/attention_params.h; kFloat8 needs a workspace of
// qk_attention_workspace_bytes for V^T) and the schedule.
struct QKAttentionParams : AttentionParams {
  Schedule schedule;
};

// Bytes of workspace the call needs (0 in the accurate mode and for kFloat8Vt).
int64_t qk_attention_workspace_bytes(const QKAttentionParams& p);

// Why the kernel cannot take these params (nullptr when it can): head_dim, alignment, sizes the TMA cannot
// address. The caller then uses another kernel.
const char* qk_attention_unsupported(const QKAttentionParams& p);

// The kernel's three TMA descriptors for one call (each a CUtensorMap: 128 bytes, 128-byte aligned), opaque here so
// that this header needs no CUDA header (on ROCm, torch's hipify reads it through csrc/ops and would rewrite it).
struct alignas(128) TensorMaps {
  unsigned char q[128], k[128], v[128];
};

// Encodes the tensor maps of params the kernel takes, launching nothing: a map records addresses, so the buffers may
// be written later (the V^T of the fused fast mode, the transpose of a given v_fp8). False when the driver cannot
// encode them (too old): the caller then uses another kernel.
bool encode_tensor_maps(const QKAttentionParams& p, TensorMaps* maps);

// Launches the kernel on p with its maps (for a given fp8 V, its transpose into the workspace first): 0 or the CUDA
// runtime's error code.
int launch_qk_int8_attention(const QKAttentionParams& p, const TensorMaps& maps, void* stream);

}  // namespace sm90
}  // namespace sage
