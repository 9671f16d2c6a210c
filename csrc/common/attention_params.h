// The arguments of one attention launch, shared by the hand-written kernels' launchers (csrc/sm90, csrc/mma) and
// filled once from tensors by csrc/ops (gpu_attention_params.cpp). No ATen, no CUDA: raw pointers, int64 sizes and
// element strides. Numeric contract: docs/SEMANTICS.md "Attention kernel".
#pragma once
#include <cstdint>

namespace sage {

enum class OutType : int { kFloat16 = 0, kBFloat16 = 1, kFloat32 = 2 };
// kFloat8: float8_e4m3fn in V's layout; kFloat8Vt: float8_e4m3fn already in the V^T layout of csrc/common/vt_layout.h,
// as the V quantization writes it for sage::attention's fast mode.
enum class VType : int { kFloat16 = 0, kBFloat16 = 1, kFloat8 = 2, kFloat8Vt = 3 };

struct AttentionParams {
  // Prologue outputs, contiguous: q_int8 [batch, heads_q, nq_pad, head_dim_pad], q_scale [batch, heads_q,
  // nq_pad / kBlockQ], k_int8 [batch, heads_kv, nk_pad, head_dim_pad], k_scale [batch, heads_kv, nk_pad / kBlockK].
  const int8_t* q;
  const float* q_scale;
  const int8_t* k;
  const float* k_scale;
  // V [batch, heads_kv, kv_len, head_dim] in element strides (last dim contiguous); fast mode: v_scale
  // [batch, heads_kv, head_dim] float32 (sage::quant_v_fp8's outputs) and, for kFloat8, a workspace the kernel's
  // launcher asks for (16-byte aligned). kFloat8Vt: v is that V^T, 16-byte aligned (the strides are not read).
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
  bool causal;           // upper-left aligned: key j is seen by query i when j <= i
  bool overlap_launch;   // programmatic dependent launches (csrc/common/compat.h launch())
};

}  // namespace sage
