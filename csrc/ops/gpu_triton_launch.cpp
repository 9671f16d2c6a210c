// Loads and launches the precompiled Triton images (triton_images.h). CUDA: the driver's module API
// (cuModuleLoadData / cuLaunchKernel), reached through the runtime's driver entry points so that nothing links
// libcuda directly; ROCm: hipModuleLoadData / hipModuleLaunchKernel. No ATen.
#include "triton_images.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#if defined(USE_ROCM)
#include <hip/hip_runtime_api.h>
#else
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

namespace sage {
namespace aot {

namespace {

constexpr int kMaxArgs = 40;

int arch_major(const std::string& arch) {  // "sm_86" -> 8; "sm_100" -> 10
  return arch.size() > 4 ? std::atoi(arch.substr(3, arch.size() - 4).c_str()) : -1;
}
int arch_number(const std::string& arch) { return std::atoi(arch.c_str() + 3); }

#if defined(USE_ROCM)
using Function = hipFunction_t;

std::string load(const Image& img, Function* fn) {
  hipModule_t module = nullptr;
  hipError_t err = hipModuleLoadData(&module, image_blob() + img.offset);
  if (err == hipSuccess) err = hipModuleGetFunction(fn, module, img.kernel);
  return err == hipSuccess ? "" : std::string("hip module load: ") + hipGetErrorString(err);
}

std::string enqueue(const Image& img, Function fn, unsigned gx, unsigned gy, unsigned gz, void** params,
                    void* stream) {
  const hipError_t err =
      hipModuleLaunchKernel(fn, gx, gy, gz, static_cast<unsigned>(img.num_warps * img.threads_per_warp), 1, 1,
                            static_cast<unsigned>(img.shared_bytes), static_cast<hipStream_t>(stream), params, nullptr);
  return err == hipSuccess ? "" : std::string("hipModuleLaunchKernel: ") + hipGetErrorString(err);
}
#else
using Function = CUfunction;

// The driver functions used here, resolved once through the runtime (it has loaded libcuda already).
struct Driver {
  decltype(&cuModuleLoadData) module_load_data = nullptr;
  decltype(&cuModuleGetFunction) module_get_function = nullptr;
  decltype(&cuFuncGetAttribute) func_get_attribute = nullptr;
  decltype(&cuFuncSetAttribute) func_set_attribute = nullptr;
  decltype(&cuLaunchKernel) launch_kernel = nullptr;
  decltype(&cuGetErrorString) get_error_string = nullptr;
  decltype(&cuCtxGetCurrent) ctx_get_current = nullptr;
  std::string error;

  template <typename F>
  void resolve(const char* name, F* fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t err = cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &found);
#endif
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
      error = std::string("cannot resolve the CUDA driver function ") + name;
    }
    *fn = reinterpret_cast<F>(p);
  }

  Driver() {
    resolve("cuModuleLoadData", &module_load_data);
    resolve("cuModuleGetFunction", &module_get_function);
    resolve("cuFuncGetAttribute", &func_get_attribute);
    resolve("cuFuncSetAttribute", &func_set_attribute);
    resolve("cuLaunchKernel", &launch_kernel);
    resolve("cuGetErrorString", &get_error_string);
    resolve("cuCtxGetCurrent", &ctx_get_current);
  }

  std::string message(const char* what, CUresult r) const {
    const char* s = nullptr;
    if (get_error_string == nullptr || get_error_string(r, &s) != CUDA_SUCCESS || s == nullptr) s = "unknown error";
    return std::string(what) + ": " + s;
  }
};

const Driver& driver() {
  static const Driver d;
  return d;
}

// The driver API acts on the calling thread's current context; a thread whose only CUDA work so far went through
// paths that need none (cached allocations) may have none yet: bind the current device's primary context.
std::string ensure_context() {
  CUcontext ctx = nullptr;
  if (driver().ctx_get_current(&ctx) == CUDA_SUCCESS && ctx != nullptr) return "";
  return cudaFree(nullptr) == cudaSuccess ? "" : "cannot make the GPU's context current";
}

std::string load(const Image& img, Function* fn, int device) {
  const Driver& d = driver();
  if (!d.error.empty()) return d.error;
  if (const std::string err = ensure_context(); !err.empty()) return err;
  CUmodule module = nullptr;
  CUresult r = d.module_load_data(&module, image_blob() + img.offset);
  if (r != CUDA_SUCCESS) return d.message("cuModuleLoadData", r);
  r = d.module_get_function(fn, module, img.kernel);
  if (r != CUDA_SUCCESS) return d.message("cuModuleGetFunction", r);
  if (img.shared_bytes > 49152) {  // beyond the default limit: opt in, as Triton's own loader does
    int optin = 0, static_bytes = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
      return "cudaDeviceGetAttribute failed";
    }
    r = d.func_get_attribute(&static_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, *fn);
    if (r != CUDA_SUCCESS) return d.message("cuFuncGetAttribute", r);
    if (img.shared_bytes > optin - static_bytes) {
      return "the kernel needs " + std::to_string(img.shared_bytes) + " bytes of shared memory, the GPU allows " +
             std::to_string(optin - static_bytes);
    }
    r = d.func_set_attribute(*fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin - static_bytes);
    if (r != CUDA_SUCCESS) return d.message("cuFuncSetAttribute", r);
  }
  return "";
}

std::string enqueue(const Image& img, Function fn, unsigned gx, unsigned gy, unsigned gz, void** params,
                    void* stream) {
  if (const std::string err = ensure_context(); !err.empty()) return err;
  const CUresult r = driver().launch_kernel(fn, gx, gy, gz, static_cast<unsigned>(img.num_warps * img.threads_per_warp),
                                            1, 1, static_cast<unsigned>(img.shared_bytes),
                                            static_cast<CUstream>(stream), params, nullptr);
  return r == CUDA_SUCCESS ? "" : driver().message("cuLaunchKernel", r);
}
#endif

}  // namespace

const Image* find_image(const std::string& arch, const std::string& key) {
  const Image* best = nullptr;
  for (size_t i = 0; i < kNumImages; ++i) {
    const Image& img = kImages[i];
    if (key != img.key) continue;
    if (arch == img.arch) return &img;
    // An sm_XY cubin runs on sm_XZ for Z >= Y: take the newest such.
    if (arch.rfind("sm_", 0) == 0 && std::strncmp(img.arch, "sm_", 3) == 0 && arch_major(arch) == arch_major(img.arch) &&
        arch_number(img.arch) < arch_number(arch) && (best == nullptr || arch_number(img.arch) > arch_number(best->arch))) {
      best = &img;
    }
  }
  return best;
}

bool has_arch(const std::string& arch) {
  for (size_t i = 0; i < kNumImages; ++i) {
    if (arch == kImages[i].arch) return true;
  }
  return false;
}

std::string launch(const Image& img, int device, const std::string& signature, unsigned grid_x, unsigned grid_y,
                   unsigned grid_z, void** args, void* stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, const Image*>, Function> loaded;
  Function fn = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = loaded.find({device, &img});
    if (it == loaded.end()) {
      if (signature != img.signature) {
        return std::string("image ") + img.key + " takes (" + img.signature + "), the launcher passes (" + signature +
               "): rebuild torch_sage";
      }
#if defined(USE_ROCM)
      const std::string err = load(img, &fn);
#else
      const std::string err = load(img, &fn, device);
#endif
      if (!err.empty()) return std::string("loading ") + img.key + " for " + img.arch + ": " + err;
      it = loaded.emplace(std::make_pair(device, &img), fn).first;
    }
    fn = it->second;
  }
  if (static_cast<long>(grid_x) * grid_y * grid_z == 0) return "";
  // The user arguments, then the scratch pointers this Triton version's kernels take (none is used: null).
  int n = 1;
  for (const char* c = img.signature; *c; ++c) n += *c == ',';
  if (n + img.scratch_args > kMaxArgs) return std::string("image ") + img.key + " has too many arguments";
  void* params[kMaxArgs];
  static uint64_t null_scratch = 0;
  for (int i = 0; i < n; ++i) params[i] = args[i];
  for (int i = 0; i < img.scratch_args; ++i) params[n + i] = &null_scratch;
  return enqueue(img, fn, grid_x, grid_y, grid_z, params, stream);
}

}  // namespace aot
}  // namespace sage
