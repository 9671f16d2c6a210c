"""Launch configurations of the Triton attention kernel: (BLOCK_M, BLOCK_N, num_warps, num_stages), keyed by
(arch, padded head_dim, P.V mode, aligned). No autotuning in the call path: the kernels compiled ahead of time
(build_tools/aot_build.py) and the JIT (torch_sage/triton_attention.py) read the same table, and
benchmarks/sweep_attention_configs.py measures candidates for it.
"""
import sys
from typing import Optional, Tuple

# sm_90 Dp=64/128 are measured on an H200 (docs/FINDINGS.md F6, benchmarks/sweep_attention_configs.py): best of
# 3-7 candidates each at N=16384-17776, kernel only. Other entries were chosen from offline compiles (no spills;
# register counts from ptxas / the amdgcn metadata) and are not measured yet:
#   sm_90  Dp=256 (64, 64, 8, 2): 180-200 regs fp16/bf16 V, 233-252 fp8 V (BLOCK_M=128 spills with fp8 V).
#   gfx1201 (wave32 WMMA): Dp=64 (64, 64, 8, 2) 153-182 VGPRs fp16/bf16 V, (64, 32, 8, 2) 116-162 fp8 V (with
#          Triton 3.7 the (64, 64) tile spills for fp8 V and float32 out); Dp=128 (64, 32, 4, 2) 220-236 fp16 V,
#          (64, 32, 8, 2) 228-249 fp8 V; Dp=256 (64, 32, 8, 1) 219-249; larger tiles spill. Checked with Triton
#          3.6 and 3.7 (test/test_aot_build.py runs the check with the Triton CI installs).
# The entry can depend on the Triton version that compiles the kernel (``triton_version``): the kernels compiled
# ahead of time take the build machine's Triton, the JIT the installed one, and each image carries its own tile and
# warps to the C++ launcher (aot_images.cpp), so a launch always matches the compile it came from.
#   sm_90 Dp=128 fp16/bf16 V, aligned: (128, 64, 4, 3) is the measured best (F6) and compiles without spills in
#          the main loop with Triton 3.6 and 3.7 (3.7.1: 250-255 regs). With Triton 3.8.0 and 3.9.0 it needs more:
#          255 regs, 8-72 bytes of stack, LDL/STL inside the main loop (the causal kernels worst). From Triton 3.8 on
#          the entry is (128, 64, 8, 3), F6's runner-up (511 TOPS against 588, causal 450 against 509, measured with
#          Triton 3.6, not yet with 3.8/3.9): 147-174 regs, no spills. (64, 64, 4, 3) (148-188 regs) and
#          (128, 32, 4, 3) (232-244 regs) compile without spills too; (128, 64, 4, 2) spills like (128, 64, 4, 3).
#   sm_90 Dp=128 fp8 V, not aligned (unmeasured): (128, 64, 8, 3) takes 248-255 regs without spills with Triton 3.7.1
#          and 3.8.0; with 3.9.0 it spills (255 regs, 8-24 bytes of stack, LDL/STL in the main loop of the non-causal
#          kernels), and so do (128, 64, 8, 2) and (64, 64, 4, 3). From Triton 3.9 on the entry is (128, 32, 8, 3):
#          236-247 regs, no spills ((64, 64, 8, 3) compiles without spills too, 234-238 regs, but splits each row's
#          softmax over two warpgroups).
#   gfx1201 Dp=128 fp16/bf16 V, aligned (unmeasured): (64, 32, 4, 2) spills with Triton 3.8.0 only (256 VGPRs, 4-14
#          spilled, 20-60 bytes of scratch; 3.7.1: 220-236 VGPRs, 3.9.0: 228-236, no spills). With Triton 3.8 the
#          entry is (64, 32, 8, 2), the fp8 V one: 151-171 VGPRs ((64, 32, 4, 1), (64, 16, 4, 2) and (32, 32, 4, 2)
#          compile without spills too).
# Version-dependent entries change only for the Triton versions where the older entry spills.


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
        # Measured (F6): Dp=128 fp16/bf16 V 588 TOPS with 4 warps against 511 with 8; fp8 V best with 8 warps.
        if not aligned and head_dim_pad >= 128:  # unmeasured; the aligned entries spill here
            if head_dim_pad == 256:
                return (64, 32, 8, 2)
            # fp8 V: (128, 64, 8, 3) spills with Triton 3.9 (the comment above)
            return (128, 32, 8, 3) if fp8 and (triton_version or _installed_triton()) >= (3, 9) else (128, 64, 8, 3)
        if head_dim_pad == 128 and not fp8:
            # (128, 64, 4, 3) spills from Triton 3.8 on (the comment above)
            return (128, 64, 8, 3) if (triton_version or _installed_triton()) >= (3, 8) else (128, 64, 4, 3)
        return {64: (128, 64, 8, 3), 128: (128, 64, 8, 3), 256: (64, 64, 8, 2)}[head_dim_pad]
    if arch.startswith("sm_"):  # other NVIDIA: mma.sync (Ampere/Ada, ~100 KiB shared memory) or Blackwell
        return {64: (128, 64, 4, 3), 128: (128, 64, 8, 3), 256: (64, 64, 4, 2)}[head_dim_pad]  # TO BE MEASURED
    if arch.startswith("gfx12"):  # RDNA4: wave32 WMMA, 64 KiB LDS per workgroup
        # TO BE MEASURED
        if not aligned and head_dim_pad >= 128:
            return (64, 32, 8, 2) if head_dim_pad == 128 else (32, 32, 8, 1)
        if head_dim_pad == 128 and not fp8 and (3, 8) <= (triton_version or _installed_triton()) < (3, 9):
            return (64, 32, 8, 2)  # (64, 32, 4, 2) spills with Triton 3.8 (the comment above)
        return {64: (64, 32 if fp8 else 64, 8, 2), 128: (64, 32, 8 if fp8 else 4, 2), 256: (64, 32, 8, 1)}[head_dim_pad]
    return (64, 64, 4, 2)  # unknown arch (and TRITON_INTERPRET runs on CPU): conservative
