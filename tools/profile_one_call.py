"""One attention call, for a profiler to look at (docs/FINDINGS.md F21), after one warm-up call:
ncu --clock-control none -k "regex:qk_int8_attention(_ws)?_kernel" -s 1 -c 1 --metrics ... \
    python tools/profile_one_call.py [--mode auto|fp8] [--sm90 1|ws|0] [--shape B,H,N,D] [--causal]"""
import argparse
import os

import torch

import torch_sage


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="auto", help="pv_mode")
    p.add_argument("--sm90", help="SAGEATTN_SK1_SM90 for the call (unset: the default)")
    p.add_argument("--shape", default="1,40,8192,128", help="B,H,N,D")
    p.add_argument("--causal", action="store_true")
    args = p.parse_args()
    if args.sm90 is not None:
        os.environ["SAGEATTN_SK1_SM90"] = args.sm90
    b, h, n, d = (int(x) for x in args.shape.split(","))
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    for _ in range(2):  # the first is the warm-up: profile the second (ncu -s 1 -c 1)
        torch_sage.attention(q, k, v, is_causal=args.causal, pv_mode=args.mode)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
