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
--sweep guard: issue 45's study. For inputs inside and outside the documented bounds, the measured error of the
    accurate mode beside an estimate of the score error that INT8 quantization causes, computed only from what the
    prologue sees (quantization_error_estimate), and the same from the prologue's scales alone: whether one threshold
    on it separates the two kinds; and each input with the guard on (SAGEATTN_SK1_GUARD=on, CPU only so far).
--sweep guard-lengths: the guard's estimate on documented inputs from 1024 to 65536 tokens, head_dim 64-256.
--sweep guard-remedies: the same inputs, the estimate taken per query block; the rows of the blocks it flags
    computed with the key mean subtracted (where smooth_k=False), one q scale a token, 16-bit or float32 Q.K^T:
    which of these brings each input into the bound.
"""
import argparse
import contextlib
import csv
import math
import os

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


def block_error_estimates(q, k, sm_scale, smooth_k):
    """([B, Hq, query blocks] float64, the same bool): each query block's estimated standard deviation (in nats) of
    a score's INT8 rounding error and whether the guard flags it: the guard's own rule (csrc/guard_rules.h, through
    sage::_guard_block_estimates; docs/SEMANTICS.md, "The accuracy guard"). HND inputs."""
    return torch.ops.sage._guard_block_estimates(q, k, "HND", sm_scale, smooth_k)


def scales_only_block_estimates(q, k, sm_scale, smooth_k):
    """block_error_estimates with each rms replaced by its bound 127 * scale, so from the prologue's q_scale and
    k_scale alone (what a kernel after it could read, no new statistic): sqrt(D / 6) * 127 * s_q * max s_k."""
    from torch_sage.contract import LOG2E

    q16, k16 = (t.bfloat16() if t.dtype == torch.float32 else t for t in (q, k))  # as the op computes float32
    _, q_scale, _, k_scale, _ = torch.ops.sage.quant_qk_int8(q16, k16, "HND", sm_scale, smooth_k)
    group = q_scale.shape[1] // k_scale.shape[1]
    k_max = k_scale.double().amax(-1).repeat_interleave(group, 1)[..., None]
    return math.sqrt(q.shape[-1] / 6) * 127 * (q_scale.double() / LOG2E) * k_max  # q_scale carries log2(e)


def quantization_error_estimate(q, k, sm_scale, smooth_k):
    """The call's figure: the largest of block_error_estimates."""
    return block_error_estimates(q, k, sm_scale, smooth_k)[0].max().item()


def guard_cases():
    """(label, q, k, v, sm_scale, smooth_k): documented inputs first, then the four kinds of issue 45."""
    g = torch.Generator().manual_seed(45)
    for d in (64, 128):
        q, k, v = inputs(1, 4, 512, d, seed=d)
        for dtype in (torch.float16, torch.bfloat16):
            yield f"documented D={d} {str(dtype)[6:]}", q.to(dtype), k.to(dtype), v.to(dtype), 1 / math.sqrt(d), True
    for mult in (1.25, 2.0, 8.0, 100.0):
        q, k, v = inputs(1, 4, 512, 64, seed=64)
        yield f"sm_scale x{mult:g}", q.bfloat16(), k.bfloat16(), v.bfloat16(), mult / 8, True
    q, k, v = (torch.randn(1, 2, 200, 64, generator=g) for _ in range(3))
    q[0, 0, 17, 5] = 1e6
    yield "one q value 1e6 (float32)", q, k, v, 1 / 8, True
    q, k, v = (torch.randn(1, 2, 200, 64, generator=g) for _ in range(3))
    yield "q x 7e4 (float32)", q * 7e4, k, v, 1 / 8, True
    for big in (4, 16):
        q, k, v = (torch.randn(1, 4, 512, 128, generator=g) for _ in range(3))
        ch = torch.randperm(128, generator=g)[:big]
        q[..., ch] *= 20
        k[..., ch] *= 20
        yield f"{big} channels x20 in q and k", q.bfloat16(), k.bfloat16(), v.bfloat16(), 128 ** -0.5, True
    for offset in (1.0, 4.0, 10.0):
        q, k, v = inputs(1, 4, 1024, 128, seed=7, key_offset=offset)
        yield f"smooth_k=False, key offset {offset:g}", q.bfloat16(), k.bfloat16(), v.bfloat16(), 128 ** -0.5, False


@contextlib.contextmanager
def guard_setting(value):
    old = os.environ.get("SAGEATTN_SK1_GUARD")
    os.environ["SAGEATTN_SK1_GUARD"] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ["SAGEATTN_SK1_GUARD"]
        else:
            os.environ["SAGEATTN_SK1_GUARD"] = old


def sweep_guard(device):
    print("accurate mode; bound (docs/SEMANTICS.md): cosine >= 0.9999, rel L1 <= 0.015")
    print("guarded: SAGEATTN_SK1_GUARD=on (CPU), its cosine / rel L1 and the query blocks it computed again")
    print(f"{'input':>36s}{'cosine':>11s}{'rel L1':>9s}{'estimate':>10s}{'scales only':>12s}{'in bound':>10s}"
          f"{'guarded':>22s}{'blocks':>8s}")
    rows = []
    for label, q, k, v, scale, smooth_k in guard_cases():
        _, ref = exact(q, k, v, False, scale)
        with guard_setting("off"):
            cos, l1 = metrics(sage(q, k, v, device, False, scale, "fp16", smooth_k), ref)
        est = quantization_error_estimate(q, k, scale, smooth_k)
        est_scales = scales_only_block_estimates(q, k, scale, smooth_k).max().item()
        ok = cos >= 0.9999 and l1 <= 0.015
        blocks = torch_sage.guard_counts()["blocks"]
        with guard_setting("on"):
            g_cos, g_l1 = metrics(sage(q, k, v, device, False, scale, "fp16", smooth_k), ref)
        blocks = torch_sage.guard_counts()["blocks"] - blocks
        print(f"{label:>36s}{cos:11.6f}{l1:9.5f}{est:10.4f}{est_scales:12.4f}{str(ok):>10s}"
              f"{g_cos:12.6f} /{g_l1:8.5f}{blocks:8d}")
        rows.append(dict(input=label, cosine=cos, rel_l1=l1, estimate=est, scales_only_estimate=est_scales,
                         in_bound=ok, guarded_cosine=g_cos, guarded_rel_l1=g_l1, guarded_blocks=blocks,
                         device=device))
    return rows


def sixteen_bit(q, k, v, sm_scale, qk_dtype):
    """Attention with Q.K^T from q and k rounded to qk_dtype (products in float32 or, for float64, exact), the
    softmax in float32 and P rounded to V's 16-bit type, as a 16-bit tensor-core kernel would compute it."""
    v16 = v if v.dtype in (torch.float16, torch.bfloat16) else v.bfloat16()
    acc = torch.float64 if qk_dtype == torch.float64 else torch.float32
    s = (q.to(qk_dtype).to(acc) @ k.to(qk_dtype).to(acc).transpose(-1, -2)).float() * sm_scale
    p = torch.exp(s - s.amax(-1, keepdim=True))
    return (p.to(v16.dtype).float() @ v16.float()) / p.sum(-1, keepdim=True)


def per_row_q(q, k, v, sm_scale, smooth_k):
    """The accurate mode's arithmetic with one q scale a token instead of one a block of BLOCK_Q (k per block of
    BLOCK_K as the prologue quantizes it), in float64 apart from the INT8 rounding and P in V's 16-bit type."""
    from torch_sage.contract import BLOCK_K

    q16, k16 = (t if t.dtype in (torch.float16, torch.bfloat16) else t.bfloat16() for t in (q, k))
    qd, kd = q16.double() * sm_scale, k16.double()
    if smooth_k:
        kd = kd - kd.mean(2, keepdim=True)
    s_q = qd.abs().amax(-1, keepdim=True).clamp_min(1e-30) / 127
    n, d = kd.shape[2], kd.shape[3]
    kb = F.pad(kd, (0, 0, 0, (-n) % BLOCK_K)).reshape(kd.shape[0], kd.shape[1], -1, BLOCK_K, d)
    s_k = kb.abs().amax((-1, -2), keepdim=True).clamp_min(1e-30) / 127
    kq = ((kb / s_k).round() * s_k).reshape(kd.shape[0], kd.shape[1], -1, d)[:, :, :n]
    group = qd.shape[1] // kd.shape[1]
    s = ((qd / s_q).round() * s_q) @ kq.repeat_interleave(group, 1).transpose(-1, -2)
    v16 = v if v.dtype in (torch.float16, torch.bfloat16) else v.bfloat16()
    p = torch.exp(s - s.amax(-1, keepdim=True))
    return (p.to(v16.dtype).double() @ v16.double()) / p.sum(-1, keepdim=True)


def sweep_guard_lengths(device):
    """The guard's estimate on documented inputs (q ~ randn, k ~ randn + 4 randn(D), default scale, float16) at the
    lengths and head_dims of real models: its largest block against the threshold (estimates only, no attention)."""
    from torch_sage.contract import BLOCK_Q

    print("documented inputs, B=1, H=2, float16; flagged: by the guard's rule (csrc/guard_rules.h)")
    print(f"{'D':>5s}{'N':>8s}{'largest':>10s}{'flagged':>10s}")
    rows = []
    for d in (64, 128, 256):
        for n in (1024, 4096, 16384, 65536):
            q, k, _ = inputs(1, 2, n, d, seed=d + n)
            est, flags = block_error_estimates(q.half(), k.half(), 1 / math.sqrt(d), True)
            flagged = int(flags.sum())
            print(f"{d:5d}{n:8d}{est.max().item():10.5f}{flagged:6d}/{2 * -(-n // BLOCK_Q)}")
            rows.append(dict(head_dim=d, tokens=n, largest=est.max().item(), flagged=flagged, device=device))
    return rows


def sweep_guard_remedies(device):
    """Issue 45's second step: per query block, the guard's rule flags blocks by the estimate; each flagged
    block's rows are then computed another way (the rest stay the accurate mode's). Which way meets the bound."""
    from torch_sage.contract import BLOCK_Q

    print("accurate mode; bound cosine >= 0.9999, rel L1 <= 0.015; flagged: the query blocks the guard's rule flags "
          "(csrc/guard_rules.h); each column: cosine / rel L1 with the flagged blocks' rows computed that way")
    ways = ("as today", "key mean out", "per-token q", "16-bit QK", "float32 QK", "all 16-bit QK")
    print(f"{'input':>36s}{'flagged':>9s}" + "".join(f"{w:>22s}" for w in ways))
    rows = []
    for label, q, k, v, scale, smooth_k in guard_cases():
        _, ref = exact(q, k, v, False, scale)
        today = sage(q, k, v, device, False, scale, "fp16", smooth_k).double()
        flags = block_error_estimates(q, k, scale, smooth_k)[1]  # [B, Hq, blocks]
        rows_flagged = flags.repeat_interleave(BLOCK_Q, -1)[..., : q.shape[2], None]  # [B, Hq, N, 1]
        q16 = torch.bfloat16 if q.dtype == torch.float32 else q.dtype  # the op computes float32 as bfloat16
        # smooth_k=False: the key mean subtracted all the same (softmax does not see it; lse gets it back)
        others = {"key mean out": sage(q, k, v, device, False, scale, "fp16", True) if not smooth_k else today,
                  "per-token q": per_row_q(q, k, v, scale, smooth_k),
                  "16-bit QK": sixteen_bit(q, k, v, scale, q16),
                  "float32 QK": sixteen_bit(q, k, v, scale, torch.float32)}
        results = {"as today": metrics(today, ref)}
        for way, out in others.items():
            results[way] = metrics(torch.where(rows_flagged, out.double(), today), ref)
        results["all 16-bit QK"] = metrics(others["16-bit QK"], ref)
        share = flags.double().mean().item()
        print(f"{label:>36s}{share:9.3f}" + "".join(f"{c:12.6f} /{l:8.5f}" for c, l in results.values()))
        row = dict(input=label, flagged_share=share, device=device)
        for way, (c, l) in results.items():
            row[f"{way} cosine"], row[f"{way} rel L1"] = c, l
        rows.append(row)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--csv")
    p.add_argument("--sweep", choices=["shapes", "scale", "smooth_k", "guard", "guard-remedies", "guard-lengths"],
                   default="shapes")
    args = p.parse_args()
    sweeps = {"shapes": sweep_shapes, "scale": sweep_scale, "smooth_k": sweep_smooth_k, "guard": sweep_guard,
              "guard-remedies": sweep_guard_remedies, "guard-lengths": sweep_guard_lengths}
    rows = sweeps[args.sweep](args.device)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
