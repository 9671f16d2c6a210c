// AttentionParams -> the launcher in csrc/mma (see gpu_mma_attention.h).
#if defined(SAGE_WITH_MMA)
#include "gpu_mma_attention.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include "../mma/qk_int8_attention_mma.h"
#include "gpu_attention_params.h"

namespace sage {

std::optional<std::function<void()>> prepare_mma_attention(const AttentionParams& p_in, const at::Tensor& like) {
  AttentionParams p = p_in;
  // Before the check, which asks for it.
  at::Tensor workspace = attach_workspace(p, mma::qk_attention_workspace_bytes(p), like);
  if (mma::qk_attention_unsupported(p) != nullptr) return std::nullopt;
  return [p, workspace = std::move(workspace)] {
    const int err = mma::launch_qk_int8_attention(p, c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == 0, "sage::qk_int8_attention: the mma kernel failed to launch (CUDA error ", err, ")");
  };
}

}  // namespace sage
#endif  // SAGE_WITH_MMA
