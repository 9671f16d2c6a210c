"""Runs the prologue (HIP and Triton) and the attention over awkward shapes, for compute-sanitizer:
compute-sanitizer --tool memcheck --error-exitcode 1 python tools/gpu_memcheck.py [--attention] [--sm90] [--mma]
(--sm90: the attention calls also with SAGEATTN_SK1_SM90=1 and =ws, the hand-written Hopper kernel's two schedules,
on an sm_90 GPU; --mma: also with SAGEATTN_SK1_MMA=1, the mma.sync kernel, on any NVIDIA GPU)"""
import os
import sys

import torch

import torch_sage  # noqa: F401

shapes = [(1, 2, 1, 1, 1, 64), (2, 3, 1, 129, 65, 128), (1, 2, 2, 1000, 777, 80), (1, 1, 1, 300, 5, 256),
          (1, 4, 2, 4097, 4097, 128)]
for impl in ("hip", "triton"):
    os.environ["SAGEATTN_SK1_PROLOGUE"] = impl
    for b, hq, hk, nq, nk, d in shapes:
        for dtype in (torch.float16, torch.bfloat16):
            q = torch.randn(b, nq, hq, d, device="cuda", dtype=dtype)
            k = torch.randn(b, nk, hk, d, device="cuda", dtype=dtype)
            v = torch.randn(b, nk, hk, d, device="cuda", dtype=dtype)
            for smooth_k in (False, True):
                torch.ops.sage.quant_qk_int8(q, k, "NHD", 0.1, smooth_k)
                if "--attention" in sys.argv:
                    settings = [("0", "0")] + ([("1", "0"), ("ws", "0")] if "--sm90" in sys.argv else [])
                    settings += [("0", "1")] if "--mma" in sys.argv else []
                    for sm90, mma in settings:
                        os.environ["SAGEATTN_SK1_SM90"], os.environ["SAGEATTN_SK1_MMA"] = sm90, mma
                        for mode in ("fp16", "fp8"):
                            torch.ops.sage.attention(q, k, v, "NHD", True, None, smooth_k, mode)
torch.cuda.synchronize()
print("memcheck workload done")
