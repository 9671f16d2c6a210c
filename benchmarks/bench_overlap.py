"""SAGEATTN_SK1_OVERLAP on and off in one process (it is read at every call), beside SDPA's cuDNN backend: time per
call made back to back (GPU-bound calls show the launch gaps there) and one call at a time with a synchronisation
after each (host included). Each figure is the median of 5 rounds of the mean over `calls` calls; two rounds of the
whole comparison per shape.

python benchmarks/bench_overlap.py
"""
import os
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_sage

CASES = [((1, 40, 256, 128), False, "auto"), ((1, 40, 512, 128), False, "auto"), ((1, 40, 1024, 128), False, "auto"),
         ((1, 40, 1024, 128), False, "fp8"), ((1, 24, 4608, 128), False, "auto"), ((1, 32, 8192, 128), True, "auto"),
         ((1, 32, 8192, 128), True, "fp8")]


def per_call_us(fn, calls, sync_each):
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
            if sync_each:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
    return sorted(rounds)[len(rounds) // 2]


def main():
    for (b, h, n, d), causal, mode in CASES:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        calls = 200 if n <= 1024 else 20

        def sage():
            return torch_sage.attention(q, k, v, is_causal=causal, pv_mode=mode)

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        for f in (sage, cudnn):  # warm-up
            f()
            f()
        row = {}
        for _ in range(2):
            for overlap in ("1", "0"):
                os.environ["SAGEATTN_SK1_OVERLAP"] = overlap
                for sync in (False, True):
                    row.setdefault((overlap, sync), []).append(per_call_us(sage, calls, sync))
            for sync in (False, True):
                row.setdefault(("cudnn", sync), []).append(per_call_us(cudnn, calls, sync))
        os.environ.pop("SAGEATTN_SK1_OVERLAP")

        def fmt(key):
            return "/".join(f"{x:.1f}" for x in row[key])

        print(f"{b}x{h}x{n}x{d} causal={causal} {mode}: back-to-back us overlap {fmt(('1', False))} | off "
              f"{fmt(('0', False))} | cudnn {fmt(('cudnn', False))};  one-at-a-time overlap {fmt(('1', True))} | off "
              f"{fmt(('0', True))} | cudnn {fmt(('cudnn', True))}", flush=True)


if __name__ == "__main__":
    main()
