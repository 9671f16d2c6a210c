// Which GPUs run torch_sage's kernels, and which arch a device is: the one place of the C++ GPU ops that reads it.
// The rules (amd_arch_refusal, nvidia_arch_refusal) are those of torch_sage/arch.py, word for word, in plain C++:
// test/test_arch_dispatch.py compiles them alone (SAGE_ARCH_RULES_ONLY) with g++ and checks them against the
// Python twins. The rest reads the device through the HIP or CUDA runtime (test/test_amd_compile.py
// syntax-checks the ROCm branch against HIP headers).
#pragma once

#include <string>

#if !defined(SAGE_ARCH_RULES_ONLY)
#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <mutex>
#include <vector>
#if defined(USE_ROCM)
#include <hip/hip_runtime_api.h>
#endif
#endif

namespace sage {

// Empty when torch_sage runs on an AMD GPU whose gcnArchName ("gfx1201", "gfx1201:sramecc-:xnack-") is
// gcn_arch_name, else the error message. opt_in: the value of SAGEATTN_SK1_GFX1200, nullptr when unset.
// gfx1201 runs the default kernels; gfx1200 the same ones, only with SAGEATTN_SK1_GFX1200=1; others are refused.
inline std::string amd_arch_refusal(const std::string& gcn_arch_name, const char* opt_in) {
  std::string arch = gcn_arch_name.substr(0, gcn_arch_name.find(':'));
  const auto first = arch.find_first_not_of(" \t");
  arch = first == std::string::npos ? std::string() : arch.substr(first, arch.find_last_not_of(" \t") - first + 1);
  if (arch == "gfx1201") return "";
  if (arch == "gfx1200") {
    const std::string v = opt_in == nullptr ? "" : opt_in;
    if (v.empty() || v == "0") {
      return "sage: this GPU is gfx1200 (Radeon RX 9060 / 9060 XT), which torch_sage supports only as an opt-in: "
             "its kernels are compiled for gfx1200 but have not yet run on one. Set SAGEATTN_SK1_GFX1200=1 to use "
             "them, and please report the results (docs/GFX1200-TESTING.md).";
    }
    if (v == "1") return "";
    return "sage: SAGEATTN_SK1_GFX1200 must be \"1\" (use gfx1200) or \"0\" / unset, got \"" + v + "\"";
  }
  if (arch.empty()) return "sage: could not read this AMD GPU's architecture (gcnArchName is empty)";
  return "sage: AMD GPU " + arch +
         " is not supported: torch_sage's GPU kernels are built for gfx1201 (Radeon RX 9070 / 9070 XT) and, with "
         "SAGEATTN_SK1_GFX1200=1, gfx1200 (RX 9060 / 9060 XT). Other devices: use the CPU.";
}

// Empty when torch_sage runs on an NVIDIA GPU of compute capability major.minor, else the error message
// (the rule of torch_sage/arch.py nvidia_refusal).
inline std::string nvidia_arch_refusal(int major, int minor) {
  if (major >= 8) return "";
  return "sage: NVIDIA GPU sm_" + std::to_string(major) + std::to_string(minor) +
         " is not supported: torch_sage's GPU kernels need sm_80 (Ampere) or newer. Other devices: use the CPU.";
}

#if !defined(SAGE_ARCH_RULES_ONLY)
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

// Raises the error of amd_arch_refusal for the GPU of `device`. SAGEATTN_SK1_GFX1200 is read at every call.
inline void check_amd_arch(const c10::Device& device) {
  const std::string refusal = amd_arch_refusal(gcn_arch_name(device.index()), std::getenv("SAGEATTN_SK1_GFX1200"));
  TORCH_CHECK(refusal.empty(), refusal);
}
#endif

// The arch of `device` as the precompiled-image table names it: "sm_90" (compute capability) or "gfx1201"
// (gcnArchName before ':'), read once per device. Raises, with the messages above, for a GPU torch_sage does not
// run on. Defined in gpu_arch.cpp (it reads the CUDA runtime, which hipify rewrites there, not in this header).
std::string device_arch(const c10::Device& device);
#endif  // !SAGE_ARCH_RULES_ONLY

}  // namespace sage
