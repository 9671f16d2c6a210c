"""Builds torch_sage._C against the installed torch.

The backend follows the installed torch, never the presence of a GPU:
  CPU-only torch -> the C++ CPU kernels only (no CUDA or ROCm needed);
  CUDA torch     -> also csrc/hip through nvcc (TORCH_CUDA_ARCH_LIST, default "8.0;9.0");
  ROCm torch     -> also csrc/hip through hipcc (PYTORCH_ROCM_ARCH, default "gfx1201;gfx1200").
"""
import glob
import os

import torch
from setuptools import setup
from torch.utils import cpp_extension as ext

HERE = os.path.dirname(os.path.abspath(__file__))


def rel(pattern):
    return sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, pattern)))


def gpu_backend():
    if torch.version.hip and ext.ROCM_HOME:
        return "rocm"
    if torch.version.cuda and ext.CUDA_HOME:
        return "cuda"
    return None


def extension():
    cpu_sources = [p for p in rel("csrc/ops/*.cpp") if not os.path.basename(p).startswith("gpu_")]
    # at::parallel_for is an OpenMP loop in torch's headers: without -fopenmp it runs on one thread.
    # The C++ standard is torch's choice (BuildExtension adds it).
    cxx = ["-O3", "-fopenmp"]
    backend = gpu_backend()
    if backend is None:
        return ext.CppExtension("torch_sage._C", cpu_sources, extra_compile_args={"cxx": cxx},
                                extra_link_args=["-fopenmp"])
    sources = cpu_sources + rel("csrc/ops/gpu_*.cpp")
    hip_dir = os.path.join(HERE, "csrc", "hip")
    if backend == "cuda":
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
        # BuildExtension sends only .cu files to nvcc; each csrc/hip/X.cu is a one-line include of X.hip.
        return ext.CUDAExtension(
            "torch_sage._C",
            sources + rel("csrc/hip/*.cu"),
            include_dirs=[hip_dir],
            define_macros=[("SAGE_WITH_GPU", "1")],
            extra_compile_args={"cxx": cxx, "nvcc": ["-O3", "-lineinfo"]},
            extra_link_args=["-fopenmp"],
        )
    os.environ.setdefault("PYTORCH_ROCM_ARCH", "gfx1201;gfx1200")
    # On ROCm, CUDAExtension hipifies every source it is given, and the headers they include from their folder or
    # from include_dirs, writing rewritten copies beside them (csrc/hip/X.hip -> X_hip.hip, compat.h ->
    # compat_hip.h with its launch macro rewritten; an X.cu would become X.hip, over the hand-written file).
    # So it gets only csrc/ops/*.cpp (gpu_prologue.cpp needs it: c10/cuda -> c10/hip, written to
    # gpu_prologue_hip.cpp), and csrc/hip is added afterwards: BuildExtension sends the .hip files to hipcc as they
    # are, with --offload-arch for each PYTORCH_ROCM_ARCH entry, and hipify never reads or writes csrc/hip.
    # test/test_rocm_setup.py runs this branch with torch's own hipify on a copy of the tree.
    extension = ext.CUDAExtension(
        "torch_sage._C",
        sources,
        define_macros=[("SAGE_WITH_GPU", "1")],
        extra_compile_args={"cxx": cxx, "nvcc": ["-O3"]},
        extra_link_args=["-fopenmp"],
    )
    extension.sources += rel("csrc/hip/*.hip")
    extension.include_dirs.append(hip_dir)
    return extension


setup(
    ext_modules=[extension()],
    cmdclass={"build_ext": ext.BuildExtension.with_options(use_ninja=True)},
)
