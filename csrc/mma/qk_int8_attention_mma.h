// Launcher interface of the hand-written mma.sync attention kernel of sage::qk_int8_attention (csrc/mma), for every
// NVIDIA GPU from sm_80 on: INT8 Q.K^T (m16n8k32 s8), online softmax in base 2 with float32 statistics, P.V with
// float32 accumulators in V's 16-bit type (accurate mode, m16n8k16) or in e4m3 with a per-channel V scale (fast
// mode, m16n8k32 e4m3, sm_89 and newer; each key block's P.V summed in a fresh accumulator), cp.async loads.
// No ATen, no torch. csrc/ops/gpu_mma_attention.cpp fills the params from tensors.
#pragma once
#include <cstdint>

#include "../common/attention_params.h"

namespace sage {
namespace mma {

// Why the kernel cannot take these params (nullptr when it can): head_dim, alignment, grid limits, the fast mode on a
// GPU without e4m3 tensor cores, or no image of the kernel for the current device in this build. The caller then
// uses another kernel.
const char* qk_attention_unsupported(const AttentionParams& p);

// Bytes of workspace the call needs: a given fp8 V (VType::kFloat8) is transposed into V^T there (csrc/hip/
// vt_transpose.cuh), the one fp8 layout the kernel reads; 0 otherwise.
int64_t qk_attention_workspace_bytes(const AttentionParams& p);

// 0 on success or the CUDA runtime's error code.
int launch_qk_int8_attention(const AttentionParams& p, void* stream);

}  // namespace mma
}  // namespace sage
