// Triton kernels compiled ahead of time (build_tools/aot_build.py writes the table at build time) and their
// launcher. No ATen here: csrc/ops/gpu_triton_launch.cpp talks to the CUDA driver or the HIP module API only, so
// it compiles on its own (test/test_aot_build.py compiles the ROCm branch with clang-19).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace sage {
namespace aot {

// One precompiled kernel.
struct Image {
  const char* arch;       // "sm_90", "gfx1201"
  const char* key;        // what it computes, e.g. "attn/d128/c0/vbf16/obf16/fast" (aot_build.py)
  const char* kernel;     // the kernel's symbol in the image
  const char* signature;  // Triton types of its arguments, in order: "*i8,*fp32,...,i32"
  int scratch_args;       // null scratch pointers appended after them (the ABI of the Triton that built it)
  int num_warps, threads_per_warp, shared_bytes;
  int tile_m, tile_n;     // BLOCK_M, BLOCK_N
  size_t offset, size;    // its bytes in image_blob()
};

// The generated table (build/aot/aot_images.cpp).
extern const char kTritonVersion[];
// aot_build.py's ATTENTION_KEY, e.g. "attn/d{head_dim_pad}/c{causal}/v{v}/o{out}/{variant}".
extern const char kAttentionKeyTemplate[];
extern const Image kImages[];
extern const size_t kNumImages;
const unsigned char* image_blob();

// tmpl with each "{name}" replaced by the value of that name in fields; "" when it names a field fields lacks
// (or a brace is unmatched): the template and its filler have drifted apart.
inline std::string fill_template(const std::string& tmpl,
                                 const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] == '}') return "";
    if (tmpl[i] != '{') {
      out += tmpl[i];
      continue;
    }
    const size_t end = tmpl.find('}', i);
    if (end == std::string::npos) return "";
    const std::string name = tmpl.substr(i + 1, end - i - 1);
    bool found = false;
    for (const auto& field : fields) {
      if (field.first == name) {
        out += field.second;
        found = true;
        break;
      }
    }
    if (!found) return "";
    i = end;
  }
  return out;
}

// The image of key for a GPU of arch ("sm_86", "gfx1201"): built for that arch, else (NVIDIA) for the nearest
// lower arch of the same major version, whose code runs there. nullptr when the build has none.
const Image* find_image(const std::string& arch, const std::string& key);

// True when the build holds any image for arch (else a missing image means the arch was not built for).
bool has_arch(const std::string& arch);

// Enqueues img on `stream` (the CUDA or HIP stream) of GPU `device`, which must be current. The image's
// module is loaded once per device. args: one pointer per argument of `signature`, each to a value of that type
// (a pointer argument is an 8-byte device address); signature must equal the image's (checked, so that the
// caller and the generated table cannot drift apart). Returns "" or an error message.
std::string launch(const Image& img, int device, const std::string& signature, unsigned grid_x, unsigned grid_y,
                   unsigned grid_z, void** args, void* stream);

}  // namespace aot
}  // namespace sage
