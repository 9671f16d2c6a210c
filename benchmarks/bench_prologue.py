"""Prologue speed on the GPU, in one run:
1. bandwidth: bytes read + written over time, HIP and Triton prologue, beside a device-to-device copy of the
   same number of bytes (H=40, D=128, N from 256 to 75,600);
2. short calls: per-call wall time (host included, one call at a time) of HIP vs Triton for N=256..1024.

python benchmarks/bench_prologue.py [--out DIR]
"""
import argparse
import csv
import os

import torch

import torch_sage  # noqa: F401
from timing import device_ms, wall_ms

LENGTHS = [256, 1024, 4096, 16384, 32760, 75600]


def set_impl(impl):
    os.environ["SAGEATTN_SK1_PROLOGUE"] = impl


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=".")
    args = p.parse_args()
    rows = []
    h, d = 40, 128
    print(f"{'N':>7s} {'smooth_k':>8s} {'MB moved':>9s} {'copy GB/s':>10s} {'HIP GB/s':>9s} {'HIP/copy':>8s} "
          f"{'Triton GB/s':>11s} {'Triton/copy':>11s}")
    for n in LENGTHS:
        q = torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16)
        n_q, n_k = -(-n // 128) * 128, -(-n // 64) * 64
        read = 2 * q.numel() + 2 * k.numel()
        written = h * (n_q + n_k) * d + 4 * h * (n_q // 128 + n_k // 64)
        moved = read + written
        src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        copy_ms = device_ms(lambda: dst.copy_(src))  # reads moved/2 and writes moved/2 bytes
        for smooth_k in (False, True):
            res = {}
            for impl in ("hip", "triton"):
                set_impl(impl)
                res[impl] = device_ms(lambda: torch.ops.sage.quant_qk_int8(q, k, "HND", 0.088, smooth_k))
            rate = lambda ms: moved / ms / 1e6  # noqa: E731  GB/s
            print(f"{n:7d} {str(smooth_k):>8s} {moved / 1e6:9.1f} {rate(copy_ms):10.0f} {rate(res['hip']):9.0f} "
                  f"{copy_ms / res['hip']:8.2f} {rate(res['triton']):11.0f} {copy_ms / res['triton']:11.2f}")
            rows.append(dict(kind="bandwidth", n=n, smooth_k=smooth_k, bytes=moved, copy_ms=copy_ms,
                             hip_ms=res["hip"], triton_ms=res["triton"]))
        del q, k, src, dst
    print(f"\n{'N':>7s} {'smooth_k':>8s} {'HIP us/call':>12s} {'Triton us/call':>15s} {'Triton/HIP':>10s}")
    for n in (256, 512, 1024):
        q = torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16)
        for smooth_k in (False, True):
            res = {}
            for impl in ("hip", "triton"):
                set_impl(impl)
                res[impl] = 1e3 * wall_ms(lambda: torch.ops.sage.quant_qk_int8(q, q, "HND", 0.088, smooth_k))
            print(f"{n:7d} {str(smooth_k):>8s} {res['hip']:12.1f} {res['triton']:15.1f} "
                  f"{res['triton'] / res['hip']:10.2f}")
            rows.append(dict(kind="short_call", n=n, smooth_k=smooth_k, hip_us=res["hip"], triton_us=res["triton"]))
    os.environ.pop("SAGEATTN_SK1_PROLOGUE", None)
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}")
    keys = sorted({k for r in rows for k in r})
    with open(os.path.join(args.out, "bench_prologue.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
