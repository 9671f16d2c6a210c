// Which arch a GPU device is, and whether torch_sage runs on it (the rules of arch_rules.h): the one place of the
// C++ GPU ops that reads it, through the HIP or CUDA runtime (test/test_amd_compile.py syntax-checks the ROCm
// branch against HIP headers).
#pragma once

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <string>
#include <vector>
#if defined(USE_ROCM)
#include <hip/hip_runtime_api.h>
#endif

#include "arch_rules.h"
#include "settings.h"

namespace sage {

#if defined(USE_ROCM)
// The gcnArchName of GPU `index` ("gfx1201:sramecc-:xnack-"), read once per device.
inline std::string gcn_arch_name(c10::DeviceIndex index) {
  static std::mutex mutex;
  static std::vector<std::string> names;
  const std::lock_guard<std::mutex> lock(mutex);
  TORCH_CHECK(index >= 0, "sage: expected a GPU device index, got ", static_cast<int>(index));
  if (static_cast<size_t>(index) >= names.size()) names.resize(static_cast<size_t>(index) + 1);
  if (names[index].empty()) {
    hipDeviceProp_t prop;
    const hipError_t err = hipGetDeviceProperties(&prop, index);
    TORCH_CHECK(err == hipSuccess, "sage: hipGetDeviceProperties failed: ", hipGetErrorString(err));
    names[index] = prop.gcnArchName;
  }
  return names[index];
}

// Raises the error of amd_arch_refusal for the GPU of `device`, with the call's SAGEATTN_SK1_GFX1200.
inline void check_amd_arch(const c10::Device& device) {
  const std::string refusal = amd_arch_refusal(gcn_arch_name(device.index()), call_settings().gfx1200);
  TORCH_CHECK(refusal.empty(), refusal);
}
#endif

// The arch of `device` as the precompiled-image table names it: "sm_90" (compute capability) or "gfx1201"
// (gcnArchName before ':'), read once per device. Raises for a GPU torch_sage does not run on, with the messages of
// arch_rules.h. Defined in gpu_arch.cpp (it reads the CUDA runtime, which hipify rewrites there, not in this header).
std::string device_arch(const c10::Device& device);

}  // namespace sage
