// Launcher interface of the hand-written prologue (no ATen, no torch).
// Host code in csrc/ops fills QuantQKParams from tensors and calls launch_quant_qk_int8.
// The numeric contract is docs/SEMANTICS.md "Prologue"; every offset is 64-bit.
#pragma once
#include <cstdint>

#include "../contract.h"  // kBlockQ, kBlockK

namespace sage {

enum class InDtype : int { kFloat16 = 0, kBFloat16 = 1 };

struct QuantQKParams {
  // Inputs, element strides; logical shape [batch, heads, tokens, head_dim], last dim contiguous.
  const void* q;
  const void* k;
  InDtype dtype;
  int64_t batch, heads_q, heads_k, q_len, k_len, head_dim;
  int64_t q_stride_b, q_stride_h, q_stride_n;
  int64_t k_stride_b, k_stride_h, k_stride_n;
  // Outputs, all contiguous:
  //   q_int8 [batch, heads_q, q_len_pad, head_dim_pad], q_scale [batch, heads_q, q_len_pad / kBlockQ]
  //   k_int8 [batch, heads_k, k_len_pad, head_dim_pad], k_scale [batch, heads_k, k_len_pad / kBlockK]
  //   k_mean [batch, heads_k, head_dim] (written only when smooth_k)
  int8_t* q_int8;
  float* q_scale;
  int8_t* k_int8;
  float* k_scale;
  float* k_mean;
  int64_t q_len_pad, k_len_pad, head_dim_pad;
  float q_mult;  // sm_scale * log2(e), rounded to float32 by the caller
  bool smooth_k;
  // Scratch for smooth_k: at least quant_qk_int8_workspace_bytes(*this) bytes, no initialisation needed.
  void* workspace;
  bool overlap_launch;  // programmatic dependent launches where the GPU has them (NVIDIA sm_90+; compat.h launch())
};

// Bytes of scratch the launch needs (0 when smooth_k is off or each head's cluster takes the key mean).
int64_t quant_qk_int8_workspace_bytes(const QuantQKParams& p);

// Enqueues the prologue on `stream` (a cudaStream_t / hipStream_t). Returns 0 or the runtime's error code.
int launch_quant_qk_int8(const QuantQKParams& p, void* stream);

}  // namespace sage
