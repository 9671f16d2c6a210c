// Launcher interface of the hand-written Hopper (sm_90a) kernel of sage::qk_int8_attention: INT8 Q.K^T on wgmma
// (s32.s8.s8), online softmax in base 2 with float32 statistics, P.V on wgmma with float32 accumulators, in V's
// 16-bit type (accurate mode) or in e4m3 with a per-channel V scale and a fresh accumulator per key block (fast
// mode), TMA loads. No ATen, no torch: raw pointers, int64 sizes and strides, a stream.
// csrc/ops/gpu_sm90_attention.cpp fills the params from tensors. Numeric contract: docs/SEMANTICS.md "Attention
// kernel" (the same as the CPU and Triton kernels, up to the order of float32 sums).
#pragma once
#include <cstdint>

namespace sage {
namespace sm90 {

enum class OutType : int { kFloat16 = 0, kBFloat16 = 1, kFloat32 = 2 };
// kFloat8: float8_e4m3fn in V's layout, transposed by the launch; kFloat8Vt: float8_e4m3fn already in the kernel's
// V^T layout (csrc/hip/vt_layout.h), as the V quantization writes it for sage::attention.
enum class VType : int { kFloat16 = 0, kBFloat16 = 1, kFloat8 = 2, kFloat8Vt = 3 };

// How the kernel runs. kSerial: one warpgroup a CTA of 64 query rows loads and computes in turn, three or four
// CTAs an SM. kWarpSpecialized: a CTA of 128 query rows, one warpgroup issuing the loads and two computing, which
// take turns on the tensor cores (one's softmax beside the other's products) and each issue the next block's Q.K^T
// before their softmax. The same results bit for bit, but in the accurate mode, where the warp-specialized
// schedule steps its softmax by 192 keys, not 128 (the same within rounding).
enum class Schedule : int { kSerial = 0, kWarpSpecialized = 1 };

struct QKAttentionParams {
  // Prologue outputs, contiguous: q_int8 [batch, heads_q, nq_pad, head_dim_pad], q_scale [batch, heads_q,
  // nq_pad / kBlockQ], k_int8 [batch, heads_kv, nk_pad, head_dim_pad], k_scale [batch, heads_kv, nk_pad / kBlockK].
  const int8_t* q;
  const float* q_scale;
  const int8_t* k;
  const float* k_scale;
  // V [batch, heads_kv, kv_len, head_dim] in element strides (last dim contiguous); fast mode: v_scale
  // [batch, heads_kv, head_dim] float32 (sage::quant_v_fp8's outputs) and a workspace of
  // qk_attention_workspace_bytes bytes (16-byte aligned) for V^T. kFloat8Vt: v is that V^T, 16-byte aligned (the
  // strides are not read), and no workspace is needed.
  const void* v;
  VType v_type;
  int64_t v_stride_b, v_stride_h, v_stride_n;
  const float* v_scale;
  void* workspace;
  // out [batch, heads_q, qo_len, head_dim] in element strides (last dim contiguous); lse [batch, heads_q, qo_len].
  void* out;
  OutType out_type;
  int64_t o_stride_b, o_stride_h, o_stride_n;
  float* lse;
  int64_t batch, heads_q, heads_kv, qo_len, kv_len, nq_pad, nk_pad;
  int64_t head_dim;      // of V and out: a multiple of 8, at most head_dim_pad
  int64_t head_dim_pad;  // of q_int8 and k_int8 (the prologue's padding): 64 or 128
  bool causal;       // upper-left aligned: key j is seen by query i when j <= i
  Schedule schedule;
  bool overlap_launch;  // programmatic dependent launches (csrc/hip/compat.h launch())
};

// Bytes of workspace the call needs (0 in the accurate mode and for kFloat8Vt).
int64_t qk_attention_workspace_bytes(const QKAttentionParams& p);

// Bytes of the fast mode's V^T for these sizes (kFloat8Vt's v; kFloat8's workspace).
int64_t vt_bytes(const QKAttentionParams& p);

// Why the kernel cannot take these params (nullptr when it can): head_dim, alignment, sizes the TMA cannot
// address. The caller then uses another kernel.
const char* qk_attention_unsupported(const QKAttentionParams& p);

// launch_qk_int8_attention's result when a TMA tensor map could not be encoded (nothing was launched).
constexpr int kNoTensorMap = -1;

// 0 on success, kNoTensorMap, or the CUDA runtime's error code.
int launch_qk_int8_attention(const QKAttentionParams& p, void* stream);

}  // namespace sm90
}  // namespace sage
