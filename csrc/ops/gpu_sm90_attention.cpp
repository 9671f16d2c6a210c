// AttentionParams -> sm90::QKAttentionParams -> the launcher in csrc/sm90 (see gpu_sm90_attention.h).
#if defined(SAGE_WITH_SM90)
#include "gpu_sm90_attention.h"

#include <c10/cuda/CUDAStream.h>

#include "../sm90/qk_int8_attention_sm90.h"
#include "gpu_attention_params.h"

namespace sage {

std::optional<std::function<void()>> prepare_sm90_attention(const AttentionParams& p, bool warp_specialized,
                                                            const at::Tensor& like) {
  sm90::QKAttentionParams s{};
  static_cast<AttentionParams&>(s) = p;
  s.schedule = warp_specialized ? sm90::Schedule::kWarpSpecialized : sm90::Schedule::kSerial;
  // Before the check, which asks for it.
  at::Tensor workspace = attach_workspace(s, sm90::qk_attention_workspace_bytes(s), like);
  if (sm90::qk_attention_unsupported(s) != nullptr) return std::nullopt;
  sm90::TensorMaps maps;
  if (!sm90::encode_tensor_maps(s, &maps)) {
    TORCH_WARN_ONCE("sage: the sm90 kernel could not encode its TMA tensor maps (driver too old?); using the "
                    "default kernels");
    return std::nullopt;
  }
  return [s, maps, workspace = std::move(workspace)] {
    const int err = sm90::launch_qk_int8_attention(s, maps, c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == 0, "sage::qk_int8_attention: the sm90 kernel failed to launch (CUDA error ", err, ")");
  };
}

}  // namespace sage
#endif  // SAGE_WITH_SM90
