"""Accuracy of sage attention against float64 exact attention on biased-key inputs (docs/SEMANTICS.md).

python benchmarks/accuracy.py [--device cpu|cuda] [--csv out.csv] [--sweep shapes|scale|smooth_k]

--sweep shapes (default): each shape of SHAPES in float16 and bfloat16, both P.V modes, and the e4m3 floor
    (the error of exact attention with only P and V rounded to float8_e4m3).
--sweep scale: the same inputs with sm_scale at 0.5, 1, 1.25, 2 and 5 times the default 1/sqrt(D); the worst
    cosine and relative L1 over the shapes and dtypes, per mode and multiplier (the table of docs/SEMANTICS.md).
    "fp8, offset V" is the fast mode on the same inputs with v + randn(D) (values with a per-channel offset).
--sweep smooth_k: smooth_k=True against smooth_k=False (what ComfyUI passes) in the accurate mode, bfloat16,
    at the head dims and head counts of Flux, SDXL and Wan (short sequences, so that it runs on a CPU), keys
    with a per-channel offset of 1, 4 and 10 times randn(D).
"""
import argparse
import csv
import math

import torch
import torch.nn.functional as F

import torch_sage

SHAPES = [(1, 4, 1024, 64, False), (1, 4, 1024, 128, False), (1, 4, 2048, 128, True), (2, 8, 512, 128, False),
          (1, 4, 1000, 80, False)]
SCALE_MULTIPLIERS = (0.5, 1.0, 1.25, 2.0, 5.0)
# (model, heads, head_dim): Flux (24 x 128), SDXL (10 x 64 in its first transformer blocks), Wan 2.1 (40 x 128)
MODEL_HEADS = [("Flux", 24, 128), ("SDXL", 10, 64), ("Wan", 40, 128)]
SMOOTH_K_TOKENS = 1024
KEY_OFFSETS = (1.0, 4.0, 10.0)


def metrics(out, ref):
    o, r = out.double().flatten(), ref.double().flatten()
    return F.cosine_similarity(o, r, dim=0).item(), ((o - r).abs().sum() / r.abs().sum()).item()


def inputs(b, h, n, d, seed, key_offset=4.0):
    """q, v ~ randn; k ~ randn + key_offset * randn(D), the offset shared by all tokens (float32, CPU)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=g)
    k = torch.randn(b, h, n, d, generator=g) + key_offset * torch.randn(d, generator=g)
    v = torch.randn(b, h, n, d, generator=g)
    return q, k, v


def exact(q, k, v, causal, sm_scale):
    s = q.double() @ k.double().transpose(-1, -2) * sm_scale
    if causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(~torch.ones(n, m, dtype=torch.bool).tril(), float("-inf"))
    return s, torch.softmax(s, -1) @ v.double()


def e4m3_floor(s, v):
    """Exact attention with only P (scaled by 448) and V (per-channel scale) rounded to e4m3."""
    pexp = torch.exp(s - s.amax(-1, keepdim=True))
    vs = v.double().abs().amax(2, keepdim=True) / 448
    e4 = lambda x: x.clamp(-448, 448).to(torch.float8_e4m3fn).double()  # noqa: E731
    return (e4(pexp * 448) / 448) @ (e4(v.double() / vs) * vs) / pexp.sum(-1, keepdim=True)


def sage(qd, kd, vd, device, causal, sm_scale, mode, smooth_k=True):
    out = torch_sage.attention(*(t.to(device) for t in (qd, kd, vd)), is_causal=causal, sm_scale=sm_scale,
                               smooth_k=smooth_k, pv_mode=mode)
    return out.cpu()


def sweep_shapes(device):
    rows = []
    print(f"{'B,H,N,D,causal':24s}{'dtype':>10s}{'mode':>11s}{'cosine':>11s}{'rel L1':>9s}")
    for b, h, n, d, causal in SHAPES:
        q, k, v = inputs(b, h, n, d, seed=n + d)
        for dtype in (torch.float16, torch.bfloat16):
            qd, kd, vd = (t.to(dtype) for t in (q, k, v))
            scale = 1 / math.sqrt(d)
            s, ref = exact(qd, kd, vd, causal, scale)
            results = {"e4m3 floor": metrics(e4m3_floor(s, vd), ref)}
            for mode in ("fp16", "fp8"):
                results[mode] = metrics(sage(qd, kd, vd, device, causal, scale, mode), ref)
            for mode, (cos, l1) in results.items():
                label = f"{b},{h},{n},{d},{causal}"
                print(f"{label:24s}{str(dtype)[6:]:>10s}{mode:>11s}{cos:11.6f}{l1:9.5f}")
                rows.append(dict(shape=label, dtype=str(dtype)[6:], mode=mode, cosine=cos, rel_l1=l1, device=device))
    return rows


def sweep_scale(device):
    worst = {}  # (mode, multiplier) -> [min cosine, max rel L1]
    for b, h, n, d, causal in SHAPES:
        q, k, v = inputs(b, h, n, d, seed=n + d)
        v_off = v + torch.randn(d, generator=torch.Generator().manual_seed(d))
        for dtype in (torch.float16, torch.bfloat16):
            qd, kd, vd, vd_off = (t.to(dtype) for t in (q, k, v, v_off))
            for mult in SCALE_MULTIPLIERS:
                scale = mult / math.sqrt(d)
                s, ref = exact(qd, kd, vd, causal, scale)
                results = {"e4m3 floor": metrics(e4m3_floor(s, vd), ref)}
                for mode in ("fp16", "fp8"):
                    results[mode] = metrics(sage(qd, kd, vd, device, causal, scale, mode), ref)
                _, ref_off = exact(qd, kd, vd_off, causal, scale)
                results["fp8, offset V"] = metrics(sage(qd, kd, vd_off, device, causal, scale, "fp8"), ref_off)
                for mode, (cos, l1) in results.items():
                    w = worst.setdefault((mode, mult), [1.0, 0.0])
                    w[0], w[1] = min(w[0], cos), max(w[1], l1)
    print(f"worst over {len(SHAPES)} shapes x float16/bfloat16; sm_scale = multiplier / sqrt(D)")
    print(f"{'mode':>14s}{'multiplier':>12s}{'min cosine':>12s}{'max rel L1':>12s}")
    rows = []
    for (mode, mult), (cos, l1) in sorted(worst.items(), key=lambda item: (item[0][0], item[0][1])):
        print(f"{mode:>14s}{mult:12.2f}{cos:12.6f}{l1:12.5f}")
        rows.append(dict(mode=mode, multiplier=mult, min_cosine=cos, max_rel_l1=l1, device=device))
    return rows


def sweep_smooth_k(device):
    rows = []
    print(f"bfloat16, accurate mode, B=1, N={SMOOTH_K_TOKENS}, keys k + offset * randn(D)")
    print(f"{'model':>6s}{'H':>4s}{'D':>5s}{'offset':>8s}{'smooth_k':>10s}{'cosine':>11s}{'rel L1':>9s}")
    for model, h, d in MODEL_HEADS:
        for offset in KEY_OFFSETS:
            q, k, v = inputs(1, h, SMOOTH_K_TOKENS, d, seed=h + d, key_offset=offset)
            qd, kd, vd = (t.to(torch.bfloat16) for t in (q, k, v))
            scale = 1 / math.sqrt(d)
            _, ref = exact(qd, kd, vd, False, scale)
            for smooth_k in (True, False):
                cos, l1 = metrics(sage(qd, kd, vd, device, False, scale, "fp16", smooth_k), ref)
                print(f"{model:>6s}{h:4d}{d:5d}{offset:8.1f}{str(smooth_k):>10s}{cos:11.6f}{l1:9.5f}")
                rows.append(dict(model=model, heads=h, head_dim=d, offset=offset, smooth_k=smooth_k, cosine=cos,
                                 rel_l1=l1, device=device))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--csv")
    p.add_argument("--sweep", choices=["shapes", "scale", "smooth_k"], default="shapes")
    args = p.parse_args()
    rows = {"shapes": sweep_shapes, "scale": sweep_scale, "smooth_k": sweep_smooth_k}[args.sweep](args.device)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
