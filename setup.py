"""Builds torch_sage._C against the installed torch.

The backend follows the installed torch and the toolkit beside it, never the presence of a GPU:
  CPU-only torch -> the C++ CPU kernels only (no CUDA, ROCm or Triton needed);
  CUDA torch     -> also csrc/hip and the hand-written mma.sync attention kernel (csrc/mma) through nvcc, and the
                    Triton kernels compiled ahead of time for each arch of TORCH_CUDA_ARCH_LIST (default
                    "8.0;8.6;8.9;9.0;12.0"), embedded in _C; with 9.0 in the list, also the hand-written Hopper
                    kernel (csrc/sm90), and 9.0 is built as sm_90a;
  ROCm torch     -> likewise through hipcc, for each arch of PYTORCH_ROCM_ARCH (default "gfx1201;gfx1200").
A CUDA/ROCm torch without a usable toolkit (no headers, or nvcc's CUDA major differs from torch's) gets the CPU
build, said in one line; on the GPU the library then runs Triton's kernels, compiled on first use.
TORCH_SAGE_BUILD=cpu forces the CPU build; TORCH_SAGE_BUILD=gpu makes a missing toolkit an error.
"""
import glob
import os
import re
import subprocess
import sys
import sysconfig

import torch
from setuptools import setup
from torch.utils import cpp_extension as ext

HERE = os.path.dirname(os.path.abspath(__file__))
AOT_DIR = os.path.join("build", "aot")  # generated: images.bin + aot_images.cpp (build_tools/aot_build.py)


def rel(pattern):
    return sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, pattern)))


def say(msg):
    print(f"torch_sage setup: {msg}", file=sys.stderr, flush=True)


def cuda_toolkit_problem():
    """None when nvcc and the CUDA headers match the installed torch, else why not."""
    home = ext.CUDA_HOME
    if not home:
        return "no CUDA toolkit found (set CUDA_HOME)"
    if not os.path.exists(os.path.join(home, "include", "cuda_runtime_api.h")):
        return f"CUDA_HOME={home} has no CUDA headers (include/cuda_runtime_api.h)"
    nvcc = os.path.join(home, "bin", "nvcc")
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"cannot run {nvcc}: {e}"
    m = re.search(r"release (\d+)\.", out)
    if not m or m.group(1) != torch.version.cuda.split(".")[0]:
        return (f"{nvcc} is CUDA {m.group(1) if m else '?'} but torch is built for CUDA {torch.version.cuda} "
                f"(the major versions must agree)")
    return None


def gpu_backend():
    """"cuda", "rocm" or None, as TORCH_SAGE_BUILD, the installed torch and its toolkit allow."""
    choice = os.environ.get("TORCH_SAGE_BUILD", "auto")
    if choice not in ("auto", "cpu", "gpu"):
        raise SystemExit(f'TORCH_SAGE_BUILD must be "auto", "cpu" or "gpu", got "{choice}"')
    if choice == "cpu":
        return None
    if torch.version.hip:
        backend, problem = "rocm", None if ext.ROCM_HOME else "no ROCm toolkit found (set ROCM_HOME)"
    elif torch.version.cuda:
        backend, problem = "cuda", cuda_toolkit_problem()
    else:
        backend, problem = None, "this torch is CPU-only"
    if problem is None:
        return backend
    if choice == "gpu":
        raise SystemExit(f"TORCH_SAGE_BUILD=gpu, but {problem}")
    if backend is not None:
        say(f"building the CPU extension only: {problem}; on the GPU, Triton compiles the kernels on first use")
    return None


def aot_archs(backend):
    """Arch names of the Triton images: "8.0;9.0a;8.6+PTX" -> sm_80, sm_90, sm_86; ROCm names as they are."""
    if backend == "cuda":
        archs = []
        for entry in re.split(r"[;\s,]+", os.environ["TORCH_CUDA_ARCH_LIST"]):
            m = re.fullmatch(r"(\d+)\.(\d+)a?(\+PTX)?", entry.strip())
            if m:
                archs.append(f"sm_{m.group(1)}{m.group(2)}")
            elif entry.strip():
                say(f"no Triton images for TORCH_CUDA_ARCH_LIST entry {entry!r} (expected e.g. 9.0)")
        return sorted(set(archs))
    return sorted({a.split(":")[0] for a in re.split(r"[;\s,]+", os.environ["PYTORCH_ROCM_ARCH"]) if a})


def use_sm90_arch():
    """Whether TORCH_CUDA_ARCH_LIST asks for Hopper ("9.0" or "9.0a"): then it is built as sm_90a, the target that
    has wgmma and setmaxnreg (its code runs on every compute capability 9.0 GPU), and csrc/sm90 is compiled."""
    entries = [e.strip() for e in re.split(r"[;\s,]+", os.environ["TORCH_CUDA_ARCH_LIST"]) if e.strip()]
    if not any(e in ("9.0", "9.0a") for e in entries):
        return False
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join("9.0a" if e == "9.0" else e for e in entries)
    return True


def load_aot_build():
    """build_tools/aot_build.py (imported only here: it needs Triton, and only a GPU build runs it)."""
    sys.path.insert(0, os.path.join(HERE, "build_tools"))
    import aot_build  # noqa: PLC0415
    return aot_build


class BuildExt(ext.BuildExtension):
    """Compiles the Triton images (only when the extension is built, not for every setup.py command)."""

    def build_extensions(self):
        if BACKEND is not None:
            os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(HERE, AOT_DIR, "triton-cache"))
            try:
                aot_build = load_aot_build()
            except ImportError as e:
                say(f"Triton is not installed ({e}): no precompiled GPU kernels; Triton's JIT will be needed at run "
                    f"time")
                aot_build, archs = None, []
            else:
                archs = aot_archs(BACKEND)
            if aot_build is not None:
                say(f"compiling the Triton kernels ahead of time for {', '.join(archs) or 'no arch'}")
                cpp = aot_build.build(archs, os.path.join(HERE, AOT_DIR), int(os.environ.get("MAX_JOBS", "0")))
            else:
                cpp = write_empty_table()
            for e in self.extensions:
                e.sources.append(os.path.relpath(cpp, HERE))
        super().build_extensions()


def write_empty_table():
    """The image table with no image (every GPU kernel then goes through Triton's JIT)."""
    os.makedirs(os.path.join(HERE, AOT_DIR), exist_ok=True)
    path = os.path.join(HERE, AOT_DIR, "aot_images.cpp")
    src = ('// Generated by setup.py: Triton was not installed at build time, so no image is embedded.\n'
           '#include "triton_images.h"\n'
           'namespace sage {\nnamespace aot {\n'
           'const char kTritonVersion[] = "";\n'
           'const Image kImages[] = {{"", "", "", "", 0, 0, 0, 0, 0, 0, 0, 0}};\n'
           'const size_t kNumImages = 0;\n'
           'const unsigned char* image_blob() { return nullptr; }\n'
           '}  // namespace aot\n}  // namespace sage\n')
    with open(path, "w") as f:
        f.write(src)
    return path


def shared_libstdcxx():
    """The compiler's libstdc++.so.6 as an explicit link input (Linux). A toolchain that links libstdc++ statically
    (seen on the GPU machine's /opt/gcc g++: _C had no NEEDED libstdc++) gives _C its own copy of the stream
    code next to torch's shared one, and formatting a number into an error message then crashed the process."""
    if not sys.platform.startswith("linux"):
        return []
    cxx = (os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++").split()[0]
    try:
        path = subprocess.run([cxx, "-print-file-name=libstdc++.so.6"], capture_output=True, text=True,
                              timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return []
    return [path] if os.path.isabs(path) and os.path.exists(path) else []


def extension(backend):
    cpu_sources = [p for p in rel("csrc/ops/*.cpp") if not os.path.basename(p).startswith("gpu_")]
    # at::parallel_for is an OpenMP loop in torch's headers: without -fopenmp it runs on one thread.
    # The C++ standard is torch's choice (BuildExtension adds it).
    cxx = ["-O3", "-fopenmp"]
    link = ["-fopenmp"] + shared_libstdcxx()
    if backend is None:
        return ext.CppExtension("torch_sage._C", cpu_sources, extra_compile_args={"cxx": cxx}, extra_link_args=link)
    sources = cpu_sources + rel("csrc/ops/gpu_*.cpp")
    cxx += ["-DSAGE_WITH_GPU"]  # csrc/ops/gpu_*.cpp are built: the CPU sources may call into them
    ops_dir, hip_dir = os.path.join(HERE, "csrc", "ops"), os.path.join(HERE, "csrc", "hip")
    if backend == "cuda":
        # Ampere (A100, RTX 30xx), Ada (RTX 40xx, L40), Hopper and Blackwell consumer (RTX 50xx) GPUs.
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;8.6;8.9;9.0;12.0")
        sm90 = use_sm90_arch()
        defines = ["-DSAGE_WITH_MMA"] + (["-DSAGE_WITH_SM90"] if sm90 else [])
        nvcc = ["-O3", "-lineinfo"] + defines
        # BuildExtension sends only .cu files to nvcc; each csrc/hip/X.cu is a one-line include of X.hip.
        return ext.CUDAExtension(
            "torch_sage._C",
            sources + rel("csrc/hip/*.cu") + rel("csrc/mma/*.cu") + (rel("csrc/sm90/*.cu") if sm90 else []),
            include_dirs=[hip_dir, ops_dir],
            extra_compile_args={"cxx": cxx + defines, "nvcc": nvcc},
            extra_link_args=link,
        )
    os.environ.setdefault("PYTORCH_ROCM_ARCH", "gfx1201;gfx1200")
    # On ROCm, CUDAExtension hipifies every source it is given, and the headers they include from their folder or
    # from include_dirs, writing rewritten copies beside them (csrc/hip/X.hip -> X_hip.hip, compat.h ->
    # compat_hip.h with its kernel launches rewritten; an X.cu would become X.hip, over the hand-written file).
    # So it gets only csrc/ops/*.cpp (gpu_prologue.cpp needs it: c10/cuda -> c10/hip, written to
    # gpu_prologue_hip.cpp), and csrc/hip is added afterwards: BuildExtension sends the .hip files to hipcc as they
    # are, with --offload-arch for each PYTORCH_ROCM_ARCH entry, and hipify never reads or writes csrc/hip. The
    # generated image table is added at build time (BuildExt), after hipify too.
    # test/test_rocm_setup.py runs this branch with torch's own hipify on a copy of the tree.
    extension = ext.CUDAExtension(
        "torch_sage._C",
        sources,
        extra_compile_args={"cxx": cxx, "nvcc": ["-O3"]},
        extra_link_args=link,
    )
    extension.sources += rel("csrc/hip/*.hip")
    extension.include_dirs += [hip_dir, ops_dir]
    return extension


BACKEND = gpu_backend()
setup(
    ext_modules=[extension(BACKEND)],
    cmdclass={"build_ext": BuildExt.with_options(use_ninja=True)},
)
