"""Accuracy of sage attention against float64 exact attention on biased-key inputs (docs/SEMANTICS.md).

python benchmarks/accuracy.py [--device cpu|cuda] [--csv out.csv]
Also prints the e4m3 floor: the error of exact attention with only P and V rounded to float8_e4m3.
"""
import argparse
import csv
import math

import torch
import torch.nn.functional as F

import torch_sage

SHAPES = [(1, 4, 1024, 64, False), (1, 4, 1024, 128, False), (1, 4, 2048, 128, True), (2, 8, 512, 128, False),
          (1, 4, 1000, 80, False)]


def metrics(out, ref):
    o, r = out.double().flatten(), ref.double().flatten()
    return F.cosine_similarity(o, r, dim=0).item(), ((o - r).abs().sum() / r.abs().sum()).item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--csv")
    args = p.parse_args()
    rows = []
    print(f"{'B,H,N,D,causal':24s}{'dtype':>10s}{'mode':>6s}{'cosine':>11s}{'rel L1':>9s}")
    for b, h, n, d, causal in SHAPES:
        g = torch.Generator().manual_seed(n + d)
        q = torch.randn(b, h, n, d, generator=g)
        k = torch.randn(b, h, n, d, generator=g) + 4 * torch.randn(d, generator=g)
        v = torch.randn(b, h, n, d, generator=g)
        for dtype in (torch.float16, torch.bfloat16):
            qd, kd, vd = (t.to(dtype) for t in (q, k, v))
            s = qd.double() @ kd.double().transpose(-1, -2) / math.sqrt(d)
            if causal:
                s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
            ref = torch.softmax(s, -1) @ vd.double()
            pexp = torch.exp(s - s.amax(-1, keepdim=True))
            vs = vd.double().abs().amax(2, keepdim=True) / 448
            e4 = lambda x: x.clamp(-448, 448).to(torch.float8_e4m3fn).double()  # noqa: E731
            floor = (e4(pexp * 448) / 448) @ (e4(vd.double() / vs) * vs) / pexp.sum(-1, keepdim=True)
            results = {"e4m3 floor": metrics(floor, ref)}
            for mode in ("fp16", "fp8"):
                out = torch_sage.attention(*(t.to(args.device) for t in (qd, kd, vd)), is_causal=causal,
                                           pv_mode=mode)
                results[mode] = metrics(out.cpu(), ref)
            for mode, (cos, l1) in results.items():
                label = f"{b},{h},{n},{d},{causal}"
                print(f"{label:24s}{str(dtype)[6:]:>10s}{mode:>11s}{cos:11.6f}{l1:9.5f}")
                rows.append(dict(shape=label, dtype=str(dtype)[6:], mode=mode, cosine=cos, rel_l1=l1,
                                 device=args.device))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
