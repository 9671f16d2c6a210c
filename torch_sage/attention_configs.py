"""Launch configurations of the Triton attention kernel: (BLOCK_M, BLOCK_N, num_warps, num_stages), keyed by
(arch, padded head_dim, P.V mode, aligned). No autotuning in the call path: the kernels compiled ahead of time
(build_tools/aot_build.py) and the JIT (torch_sage/triton_attention.py) read the same table, and
benchmarks/sweep_attention_configs.py measures candidates for it.
"""
import sys
from typing import Optional, Tuple

# Why each entry is what it is; the figures behind it (throughput per candidate, register counts, spills per Triton
# version) are in docs/FINDINGS.md F6 (the sm_90 sweep) and F51 (the compile records):
#   - sm_90 Dp=64 and Dp=128 aligned: the fastest of the candidates benchmarks/sweep_attention_configs.py measured.
#   - every other entry: a tile that compiles without register spills for every specialization of the set (causal
#     or not, each V and out dtype), chosen offline and not yet timed; larger tiles spill.
#   - an entry keyed by the Triton version: where a newer Triton needs more registers for the older entry and
#     spills, the next candidate that does not; the older Tritons keep their entry. The kernels compiled ahead of
#     time take the build machine's Triton, the JIT the installed one, and each image carries its own tile and warps
#     to the C++ launcher (aot_images.cpp), so a launch always matches the compile it came from.
# test/test_aot_build.py compiles the whole set with the installed Triton and fails on a spill in a main loop.


def _installed_triton() -> Tuple[int, int]:
    """(major, minor) of the Triton in this process ("3.8.0", "3.5.0+git..." of pytorch-triton-rocm)."""
    triton = sys.modules.get("triton")
    if triton is None:
        import triton
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def attention_config(arch: str, head_dim_pad: int, fp8: bool, aligned: bool = True,
                     triton_version: Optional[Tuple[int, int]] = None) -> Tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for an arch ("sm_90", "sm_80", "gfx1201", ...).

    aligned: head_dim equals head_dim_pad and V's and out's rows are 16-byte aligned (``fast_variant``); otherwise
    V goes through registers with masks, and the entries below are the ones that compile without spills.
    BLOCK_M divides BLOCK_Q (one q scale per tile); BLOCK_N divides BLOCK_K or is a multiple of it. The same
    entry serves every length (num_stages only pipelines; a single key block runs it too), so the kernels
    compiled ahead of time (build_tools/aot_build.py) are the ones the JIT would build with the same Triton.
    triton_version: (major, minor) of the Triton that compiles the kernel; None: the installed one (read only
    where an entry depends on it).
    """
    if arch in ("sm_90", "sm_90a"):  # Hopper (H100/H200): wgmma, 227 KiB shared memory
        # Measured (F6): 4 warps for 16-bit V at Dp=128, 8 for fp8 V.
        if not aligned and head_dim_pad >= 128:  # unmeasured; the aligned entries spill here
            if head_dim_pad == 256:
                return (64, 32, 8, 2)
            # fp8 V: (128, 64, 8, 3) spills from Triton 3.9 on
            return (128, 32, 8, 3) if fp8 and (triton_version or _installed_triton()) >= (3, 9) else (128, 64, 8, 3)
        if head_dim_pad == 128 and not fp8:
            # (128, 64, 4, 3), the measured best, spills from Triton 3.8 on: its runner-up there
            return (128, 64, 8, 3) if (triton_version or _installed_triton()) >= (3, 8) else (128, 64, 4, 3)
        return {64: (128, 64, 8, 3), 128: (128, 64, 8, 3), 256: (64, 64, 8, 2)}[head_dim_pad]
    if arch.startswith("sm_"):  # other NVIDIA: mma.sync (Ampere/Ada, ~100 KiB shared memory) or Blackwell
        return {64: (128, 64, 4, 3), 128: (128, 64, 8, 3), 256: (64, 64, 4, 2)}[head_dim_pad]  # TO BE MEASURED
    if arch.startswith("gfx12"):  # RDNA4: wave32 WMMA, 64 KiB LDS per workgroup
        # TO BE MEASURED
        if not aligned and head_dim_pad >= 128:
            return (64, 32, 8, 2) if head_dim_pad == 128 else (32, 32, 8, 1)
        if head_dim_pad == 128 and not fp8 and (3, 8) <= (triton_version or _installed_triton()) < (3, 9):
            return (64, 32, 8, 2)  # (64, 32, 4, 2) spills with Triton 3.8
        return {64: (64, 32 if fp8 else 64, 8, 2), 128: (64, 32, 8 if fp8 else 4, 2), 256: (64, 32, 8, 1)}[head_dim_pad]
    return (64, 64, 4, 2)  # unknown arch (and TRITON_INTERPRET runs on CPU): conservative
