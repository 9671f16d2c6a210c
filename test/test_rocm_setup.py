"""setup.py's GPU branches, run on CPU against torch's own cpp_extension code with a simulated ROCm / CUDA torch.

On ROCm, CUDAExtension runs torch's hipify over the sources it is given, writing rewritten copies beside them: it
must not touch csrc/hip or csrc/common (no rewritten .hip, no compat_hip.h, and never a .cu hipified onto the
hand-written .hip).
The ROCm branch runs for real here (torch's hipify on a copy of setup.py and csrc/); only hipcc and the ROCm
headers are missing, so compiling the result is left to a ROCm machine."""
import os
import runpy
import shutil
from pathlib import Path
from unittest import mock

import pytest
import setuptools
import torch
from torch.utils import cpp_extension as ext

ROOT = Path(__file__).resolve().parents[1]
# The GPU host code that torch's hipify rewrites on ROCm (c10/cuda, ATen/cuda and CUDA driver names).
HIPIFIED = [
    "csrc/ops/gpu_arch_hip.cpp",
    "csrc/ops/gpu_attention_hip.cpp",
    "csrc/ops/gpu_mma_attention_hip.cpp",
    "csrc/ops/gpu_prologue_hip.cpp",
    "csrc/ops/gpu_sm90_attention_hip.cpp",
    "csrc/ops/gpu_triton_kernels_hip.cpp",
    "csrc/ops/gpu_triton_launch_hip.cpp",
]


def snapshot(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def fake_cuda_toolkit(root, release="12.8", headers=True):
    """A CUDA_HOME whose nvcc reports `release` (and, with headers, that has cuda_runtime_api.h)."""
    (root / "bin").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.0'\n")
    nvcc.chmod(0o755)
    if headers:
        (root / "include").mkdir()
        (root / "include" / "cuda_runtime_api.h").write_text("")
    return str(root)


def simulate(monkeypatch, backend, cuda_home=None):
    """Makes torch look like a ROCm ("rocm"), CUDA ("cuda") or CPU-only (None) build to setup.py and cpp_extension.
    A CUDA torch (12.8) gets cuda_home as its toolkit."""
    monkeypatch.setattr(torch.version, "hip", "6.4.43482" if backend == "rocm" else None)
    monkeypatch.setattr(torch.version, "cuda", "12.8" if backend == "cuda" else None)
    monkeypatch.setattr(ext, "ROCM_HOME", "/opt/rocm" if backend == "rocm" else None)
    monkeypatch.setattr(ext, "IS_HIP_EXTENSION", backend == "rocm")
    monkeypatch.setattr(ext, "CUDA_HOME", cuda_home if backend == "cuda" else None)


def run_setup(tree, monkeypatch):
    """Runs tree/setup.py in tree (as pip does) and returns (the Extension it builds, the environment after)."""
    captured = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: captured.update(kw))
    monkeypatch.chdir(tree)
    with mock.patch.dict(os.environ):
        for var in ("PYTORCH_ROCM_ARCH", "TORCH_CUDA_ARCH_LIST"):
            os.environ.pop(var, None)
        runpy.run_path(str(tree / "setup.py"), run_name="setup")
        env = dict(os.environ)
    (extension,) = captured["ext_modules"]
    return extension, env


@pytest.fixture
def tree(tmp_path):
    """A copy of setup.py and csrc/ (without generated *_hip.* files)."""
    shutil.copy(ROOT / "setup.py", tmp_path / "setup.py")
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc", ignore=shutil.ignore_patterns("*_hip.*", "__pycache__"))
    return tmp_path


def test_rocm_branch_leaves_csrc_hip_alone(tree, monkeypatch):
    simulate(monkeypatch, "rocm")
    before = snapshot(tree)
    extension, env = run_setup(tree, monkeypatch)
    after = snapshot(tree)
    sources = sorted(extension.sources)
    # csrc/hip: the hand-written .hip files go to hipcc as they are; no .cu (hipify would turn it into X.hip).
    assert [s for s in sources if s.startswith("csrc/hip/")] == ["csrc/hip/quant_qk_int8.hip",
                                                                 "csrc/hip/quant_v_fp8.hip"]
    assert not any(s.endswith(".cu") for s in sources)
    assert str(tree / "csrc" / "hip") in extension.include_dirs
    # Nothing existing was rewritten; the new files are the hipified GPU host code beside its originals.
    assert {k: v for k, v in after.items() if k in before} == before
    assert sorted(set(after) - set(before)) == HIPIFIED
    assert set(HIPIFIED) <= set(sources) and "csrc/ops/gpu_prologue.cpp" not in sources
    cpu = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "csrc" / "ops").glob("*.cpp")
                 if not p.name.startswith("gpu_"))
    assert set(cpu) <= set(sources)
    # The hipified host code: c10/cuda headers -> their HIP versions; our headers and the arch check untouched.
    hipified = after["csrc/ops/gpu_prologue_hip.cpp"].decode()
    assert "c10/cuda/" not in hipified and "cudaGetErrorString" not in hipified
    for line in ('#include "gpu_arch.h"', '#include "quant_qk_int8.h"', "device_arch(q.device());"):
        assert line in hipified
    # BuildExtension sends .hip sources to hipcc, with one --offload-arch per PYTORCH_ROCM_ARCH entry.
    assert env["PYTORCH_ROCM_ARCH"] == "gfx1201;gfx1200"
    assert all(ext._is_cuda_file(s) for s in sources if s.startswith("csrc/hip/"))
    with mock.patch.dict(os.environ, {"PYTORCH_ROCM_ARCH": env["PYTORCH_ROCM_ARCH"]}):
        flags = ext._get_rocm_arch_flags([])
    assert [f for f in flags if f.startswith("--offload-arch")] == ["--offload-arch=gfx1201", "--offload-arch=gfx1200"]


def test_rocm_branch_is_idempotent(tree, monkeypatch):
    """A second build in the same tree (pip install -e . again) hipifies nothing new and changes nothing."""
    simulate(monkeypatch, "rocm")
    run_setup(tree, monkeypatch)
    first = snapshot(tree)
    extension, _ = run_setup(tree, monkeypatch)
    assert snapshot(tree) == first
    assert sorted(s for s in extension.sources if "_hip" in s) == HIPIFIED


def test_cuda_branch_compiles_the_cu_wrappers(tree, monkeypatch):
    simulate(monkeypatch, "cuda", fake_cuda_toolkit(tree / "cuda"))
    before = snapshot(tree)
    extension, env = run_setup(tree, monkeypatch)
    after = snapshot(tree)
    sources = sorted(extension.sources)
    assert [s for s in sources if s.startswith("csrc/hip/")] == ["csrc/hip/quant_qk_int8.cu", "csrc/hip/quant_v_fp8.cu"]
    assert {"csrc/ops/gpu_prologue.cpp", "csrc/ops/gpu_triton_kernels.cpp", "csrc/ops/gpu_triton_launch.cpp"} <= set(sources)
    assert after == before  # no hipify on CUDA
    # Hopper in the list: built as sm_90a (wgmma), with the hand-written kernel of csrc/sm90; the mma kernel for
    # every arch of the list.
    assert env["TORCH_CUDA_ARCH_LIST"] == "8.0;8.6;8.9;9.0a;12.0"
    assert "csrc/sm90/qk_int8_attention_sm90.cu" in sources
    assert {f"csrc/mma/inst_d{d}_{v}.cu" for d in (64, 128) for v in ("float16", "bfloat16", "float8")} <= set(sources)
    assert "-DSAGE_WITH_SM90" in extension.extra_compile_args["nvcc"]
    assert "-DSAGE_WITH_MMA" in extension.extra_compile_args["nvcc"]
    assert "-DSAGE_WITH_MMA" in extension.extra_compile_args["cxx"]
    for cu in (ROOT / "csrc" / "hip").glob("*.cu"):  # each X.cu is the one-line include of X.hip
        assert cu.read_text().strip() == f'#include "{cu.stem}.hip"'


def test_cpu_branch_has_no_gpu_sources(tree, monkeypatch):
    simulate(monkeypatch, None)
    before = snapshot(tree)
    extension, _ = run_setup(tree, monkeypatch)
    after = snapshot(tree)
    assert not any("gpu_" in s or s.startswith(("csrc/hip/", "csrc/sm90/", "csrc/mma/")) for s in extension.sources)
    assert after == before


@pytest.mark.parametrize("toolkit,why", [
    (dict(release="13.0"), "is CUDA 13 but torch is built for CUDA 12.8"),
    (dict(headers=False), "has no CUDA headers"),
    (None, "no CUDA toolkit found"),
])
def test_cuda_torch_without_a_usable_toolkit_builds_cpu_code(tree, monkeypatch, capsys, toolkit, why):
    """A CUDA torch whose toolkit is missing or of another CUDA major gets the CPU extension and one line why."""
    simulate(monkeypatch, "cuda", None if toolkit is None else fake_cuda_toolkit(tree / "cuda", **toolkit))
    extension, _ = run_setup(tree, monkeypatch)
    assert not any("gpu_" in s or s.startswith(("csrc/hip/", "csrc/sm90/", "csrc/mma/")) for s in extension.sources)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("torch_sage setup:")]
    assert len(lines) == 1 and why in lines[0] and "CPU extension only" in lines[0], lines


def test_build_variable_forces_either_build(tree, monkeypatch):
    simulate(monkeypatch, "cuda", fake_cuda_toolkit(tree / "cuda"))
    monkeypatch.setenv("TORCH_SAGE_BUILD", "cpu")
    extension, _ = run_setup(tree, monkeypatch)
    assert not any("gpu_" in s for s in extension.sources)
    monkeypatch.setenv("TORCH_SAGE_BUILD", "gpu")
    monkeypatch.setattr(ext, "CUDA_HOME", None)
    with pytest.raises(SystemExit, match="TORCH_SAGE_BUILD=gpu, but no CUDA toolkit found"):
        run_setup(tree, monkeypatch)
    monkeypatch.setenv("TORCH_SAGE_BUILD", "yes")
    with pytest.raises(SystemExit, match="TORCH_SAGE_BUILD must be"):
        run_setup(tree, monkeypatch)


@pytest.mark.parametrize("arch", ["gfx1201", "gfx1200"])
def test_rocm_arch_list_can_be_overridden(arch, monkeypatch):
    monkeypatch.setenv("PYTORCH_ROCM_ARCH", arch)
    assert ext._get_rocm_arch_flags([])[0] == f"--offload-arch={arch}"
