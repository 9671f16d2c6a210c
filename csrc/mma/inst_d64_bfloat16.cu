// The mma kernels of head_dim 64 with V in kBFloat16 (attention_kernel.cuh), for every CUDA arch of the build.
#include "attention_kernel.cuh"

namespace sage {
namespace mma {
SAGE_MMA_INSTANTIATE(64, VKind::kBFloat16)
}  // namespace mma
}  // namespace sage
