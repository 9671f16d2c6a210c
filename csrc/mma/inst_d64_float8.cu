// The mma kernels of head_dim 64 with V in kFloat8 (attention_kernel.cuh), for every CUDA arch of the build.
#include "attention_kernel.cuh"

namespace sage {
namespace mma {
SAGE_MMA_INSTANTIATE(64, VKind::kFloat8)
}  // namespace mma
}  // namespace sage
