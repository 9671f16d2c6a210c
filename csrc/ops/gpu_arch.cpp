// device_arch of gpu_arch.h: the one place where the C++ GPU ops read which GPU a device is.
#include "gpu_arch.h"

#if !defined(USE_ROCM)
#include <cuda_runtime_api.h>
#endif

namespace sage {

std::string device_arch(const c10::Device& device) {
#if defined(USE_ROCM)
  check_amd_arch(device);
  const std::string name = gcn_arch_name(device.index());
  return name.substr(0, name.find(':'));
#else
  static std::mutex mutex;
  static std::vector<std::string> archs;  // per device index, read once
  const std::lock_guard<std::mutex> lock(mutex);
  TORCH_CHECK(device.index() >= 0, "sage: expected a GPU device index, got ", static_cast<int>(device.index()));
  const auto index = static_cast<size_t>(device.index());
  if (index >= archs.size()) archs.resize(index + 1);
  if (archs[index].empty()) {
    int major = 0, minor = 0;
    TORCH_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index()) == cudaSuccess &&
                    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device.index()) == cudaSuccess,
                "sage: cannot read the compute capability of ", device);
    const std::string refusal = nvidia_arch_refusal(major, minor);
    TORCH_CHECK(refusal.empty(), refusal);
    archs[index] = "sm_" + std::to_string(major) + std::to_string(minor);
  }
  return archs[index];
#endif
}

}  // namespace sage
