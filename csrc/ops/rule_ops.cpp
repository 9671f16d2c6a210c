// C++ rules that Python applies too, as private ops in every build, so the Python side has no twin of them:
// sage::_gpu_arch_refusal (arch_rules.h; torch_sage/arch.py, the device check of the Triton JIT ops, with the
// call's SAGEATTN_SK1_GFX1200) and sage::_triton_unmasked_variant (triton_variant.h; the JIT Triton kernel's variant).
#include <c10/util/ArrayRef.h>
#include <torch/library.h>

#include <string>

#include "arch_rules.h"
#include "settings.h"
#include "triton_variant.h"

namespace sage {
namespace {

std::string gpu_arch_refusal(bool amd, const std::string& gcn_arch_name, int64_t major, int64_t minor) {
  return amd ? amd_arch_refusal(gcn_arch_name, call_settings().gfx1200)
             : nvidia_arch_refusal(static_cast<int>(major), static_cast<int>(minor));
}

bool unmasked_variant(int64_t head_dim, int64_t head_dim_pad, int64_t v_address, c10::IntArrayRef strides) {
  TORCH_CHECK(strides.size() == 6, "sage::_triton_unmasked_variant: 6 strides (V's and out's b, h, n), got ",
              strides.size());
  return triton_unmasked_variant(head_dim, head_dim_pad, static_cast<uint64_t>(v_address),
                                 {strides[0], strides[1], strides[2], strides[3], strides[4], strides[5]});
}

}  // namespace

// Not in op_schemas.cpp's table: no tensor in, nothing to dispatch, no autograd to refuse.
TORCH_LIBRARY_FRAGMENT(sage, m) {
  m.def("_gpu_arch_refusal(bool amd, str gcn_arch_name, int major, int minor) -> str", &gpu_arch_refusal);
  m.def("_triton_unmasked_variant(int head_dim, int head_dim_pad, int v_address, int[] strides) -> bool",
        &unmasked_variant);
}

}  // namespace sage
