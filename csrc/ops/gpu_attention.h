// What sage::attention (attention.cpp) asks of the GPU attention kernels (gpu_attention.cpp).
#pragma once
#include <c10/core/Device.h>

namespace sage {

// Whether the GPU of device runs the fast mode (float8_e4m3fn V): AMD RDNA4 and NVIDIA sm_89 and newer; on Ampere
// (sm_80 / sm_86) sage::attention runs its accurate mode instead, and sage::qk_int8_attention and
// sage::_qk_int8_attention_fast refuse the fast mode.
bool gpu_has_e4m3(const c10::Device& device);

}  // namespace sage
