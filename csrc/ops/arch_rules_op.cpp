// sage::_gpu_arch_refusal: arch_rules.h's rule for a described GPU, in every build, so that torch_sage/arch.py (the
// device check of the Triton JIT ops) applies the same rule, with the call's SAGEATTN_SK1_GFX1200, without a twin.
#include <torch/library.h>

#include <string>

#include "arch_rules.h"
#include "settings.h"

namespace sage {
namespace {

std::string gpu_arch_refusal(bool amd, const std::string& gcn_arch_name, int64_t major, int64_t minor) {
  return amd ? amd_arch_refusal(gcn_arch_name, call_settings().gfx1200)
             : nvidia_arch_refusal(static_cast<int>(major), static_cast<int>(minor));
}

}  // namespace

// Not in op_schemas.cpp's table: no tensor in, nothing to dispatch, no autograd to refuse.
TORCH_LIBRARY_FRAGMENT(sage, m) {
  m.def("_gpu_arch_refusal(bool amd, str gcn_arch_name, int major, int minor) -> str", &gpu_arch_refusal);
}

}  // namespace sage
