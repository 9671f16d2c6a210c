// sage::_attention_kernel_choice: kernel_choice.h's rule for a described call, in every build, so that
// test/test_kernel_choice.py checks it on the CPU. The settings are read from the environment as a call reads them;
// the GPU and the built kernels are arguments.
#include <torch/library.h>

#include <string>

#include "settings.h"
#include "kernel_choice.h"

namespace sage {
namespace {

std::string attention_kernel_choice(int64_t arch, bool fast, int64_t head_dim_pad, int64_t qo_len,
                                    int64_t kv_len, bool sm90_built, bool mma_built) {
  const KernelCall call{static_cast<int>(arch), fast, head_dim_pad, qo_len, kv_len};
  return kernel_name(choose_kernel(call, call_settings().kernels, BuiltKernels{sm90_built, mma_built}));
}

}  // namespace

// Not in op_schemas.cpp's table: no tensor in, nothing to dispatch, no autograd to refuse.
TORCH_LIBRARY_FRAGMENT(sage, m) {
  m.def("_attention_kernel_choice(int arch, bool fast, int head_dim_pad, int qo_len, int kv_len, "
        "bool sm90_built, bool mma_built) -> str",
        &attention_kernel_choice);
}

}  // namespace sage
