"""Launch configurations of the Triton attention kernel: (BLOCK_M, BLOCK_N, num_warps, num_stages), keyed by
(arch, padded head_dim, P.V mode, aligned). No autotuning in the call path: the kernels compiled ahead of time
(build_tools/aot_build.py) and the JIT (torch_sage/triton_attention.py) read the same table, and
benchmarks/sweep_attention_configs.py measures candidates for it.
"""
from typing import Tuple

# sm_90 Dp=64/128 are measured on an H200 (docs/FINDINGS.md F6, benchmarks/sweep_attention_configs.py): best of
# 3-7 candidates each at N=16384-17776, kernel only. Other entries were chosen from offline compiles (no spills;
# register counts from ptxas / the amdgcn metadata) and are not measured yet:
#   sm_90  Dp=256 (64, 64, 8, 2): 180-200 regs fp16/bf16 V, 233-252 fp8 V (BLOCK_M=128 spills with fp8 V).
#   gfx1201 (wave32 WMMA): Dp=64 (64, 64, 8, 2) 153-182 VGPRs fp16/bf16 V, (64, 32, 8, 2) 116-162 fp8 V (with
#          Triton 3.7 the (64, 64) tile spills for fp8 V and float32 out); Dp=128 (64, 32, 4, 2) 220-236 fp16 V,
#          (64, 32, 8, 2) 228-249 fp8 V; Dp=256 (64, 32, 8, 1) 219-249; larger tiles spill. Checked with Triton
#          3.6 and 3.7 (test/test_aot_build.py runs the check with the Triton CI installs).


def attention_config(arch: str, head_dim_pad: int, fp8: bool, aligned: bool = True) -> Tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for an arch ("sm_90", "sm_80", "gfx1201", ...).

    aligned: head_dim equals head_dim_pad and V's and out's rows are 16-byte aligned (``fast_variant``); otherwise
    V goes through registers with masks, and the entries below are the ones that compile without spills.
    BLOCK_M divides BLOCK_Q (one q scale per tile); BLOCK_N divides BLOCK_K or is a multiple of it. The same
    entry serves every length (num_stages only pipelines; a single key block runs it too), so the kernels
    compiled ahead of time (build_tools/aot_build.py) are the ones the JIT would build.
    """
    if arch in ("sm_90", "sm_90a"):  # Hopper (H100/H200): wgmma, 227 KiB shared memory
        # Measured (F6): Dp=128 fp16/bf16 V 588 TOPS with 4 warps against 511 with 8; fp8 V best with 8 warps.
        if not aligned and head_dim_pad >= 128:  # unmeasured; the aligned entries spill here
            return (128, 64, 8, 3) if head_dim_pad == 128 else (64, 32, 8, 2)
        return {64: (128, 64, 8, 3), 128: (128, 64, 8, 3) if fp8 else (128, 64, 4, 3),
                256: (64, 64, 8, 2)}[head_dim_pad]
    if arch.startswith("sm_"):  # other NVIDIA: mma.sync (Ampere/Ada, ~100 KiB shared memory) or Blackwell
        return {64: (128, 64, 4, 3), 128: (128, 64, 8, 3), 256: (64, 64, 4, 2)}[head_dim_pad]  # TO BE MEASURED
    if arch.startswith("gfx12"):  # RDNA4: wave32 WMMA, 64 KiB LDS per workgroup
        # TO BE MEASURED
        if not aligned and head_dim_pad >= 128:
            return (64, 32, 8, 2) if head_dim_pad == 128 else (32, 32, 8, 1)
        return {64: (64, 32 if fp8 else 64, 8, 2), 128: (64, 32, 8 if fp8 else 4, 2), 256: (64, 32, 8, 1)}[head_dim_pad]
    return (64, 64, 4, 2)  # unknown arch (and TRITON_INTERPRET runs on CPU): conservative
