// Which GPUs torch_sage runs on, as plain C++ (no torch, no GPU runtime): the one definition of the rule. The C++
// GPU ops apply it through gpu_arch.h; torch_sage/arch.py (the Triton JIT ops) through sage::_gpu_arch_refusal
// (rule_ops.cpp), so the Python side has no twin of it.
#pragma once

#include <string>

namespace sage {

// Empty when torch_sage runs on an AMD GPU whose gcnArchName ("gfx1201", "gfx1201:sramecc-:xnack-") is
// gcn_arch_name, else the error message. gfx1200_opted_in: SAGEATTN_SK1_GFX1200=1 (settings.h).
// gfx1201 runs the default kernels; gfx1200 the same ones, only when opted in; others are refused.
inline std::string amd_arch_refusal(const std::string& gcn_arch_name, bool gfx1200_opted_in) {
  std::string arch = gcn_arch_name.substr(0, gcn_arch_name.find(':'));
  const auto first = arch.find_first_not_of(" \t");
  arch = first == std::string::npos ? std::string() : arch.substr(first, arch.find_last_not_of(" \t") - first + 1);
  if (arch == "gfx1201") return "";
  if (arch == "gfx1200") {
    if (gfx1200_opted_in) return "";
    return "sage: this GPU is gfx1200 (Radeon RX 9060 / 9060 XT), which torch_sage supports only as an opt-in: "
           "its kernels are compiled for gfx1200 but have not yet run on one. Set SAGEATTN_SK1_GFX1200=1 to use "
           "them, and please report the results (docs/GFX1200-TESTING.md).";
  }
  if (arch.empty()) return "sage: could not read this AMD GPU's architecture (gcnArchName is empty)";
  return "sage: AMD GPU " + arch +
         " is not supported: torch_sage's GPU kernels are built for gfx1201 (Radeon RX 9070 / 9070 XT) and, with "
         "SAGEATTN_SK1_GFX1200=1, gfx1200 (RX 9060 / 9060 XT). Other devices: use the CPU.";
}

// Empty when torch_sage runs on an NVIDIA GPU of compute capability major.minor, else the error message.
inline std::string nvidia_arch_refusal(int major, int minor) {
  if (major >= 8) return "";
  return "sage: NVIDIA GPU sm_" + std::to_string(major) + std::to_string(minor) +
         " is not supported: torch_sage's GPU kernels need sm_80 (Ampere) or newer. Other devices: use the CPU.";
}

}  // namespace sage
