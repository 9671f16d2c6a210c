// The kernel instantiations the launcher (launch.cu) calls, one pair per head_dim and V type, each defined in its
// own inst_*.cu file so that they compile in parallel.
#pragma once
#include <cuda_runtime.h>

#include "qk_int8_attention_mma.h"
#include "traits.h"

namespace sage {
namespace mma {

// Launches the kernel of p (causal or not); 0 or the CUDA runtime's error.
template <int D, VKind V>
int launch_kernel(const AttentionParams& p, cudaStream_t stream);

// The arch the current device runs these kernels from (their image's binaryVersion, e.g. 89), 0 when this build
// has no image the device can run.
template <int D, VKind V>
int image_arch();

}  // namespace mma
}  // namespace sage
