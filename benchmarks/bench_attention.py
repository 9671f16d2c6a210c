"""Side-by-side attention benchmark on the GPU, in one run: torch_sage (whole call, prologue included) in its
default mode (auto), with smooth_k=False (what key smoothing costs) and in the fp8 mode (on sm_90 also with the
hand-written kernel forced to each of its two schedules and with the precompiled Triton kernel), against
F.scaled_dot_product_attention with the flash and cuDNN backends and, when installed, sageattention 1.0.6.
Prints TOPS (4*B*H*N^2*D / time, half for causal), the ratio to cuDNN and accuracy against float64 exact
attention (first head, first 1024 queries); writes a CSV and a PNG plot. Long calls are timed one call between two
CUDA events, the methods in turns (each turn in its own order); short calls (256-1024 tokens) one call at a time
with the host included, each method's calls in a row; the "b2b" columns time 4 calls queued back to back between
two events, per call. Then the attention kernel alone, precompiled (C++ launch) against Triton's JIT of the same
source, and the first call in a fresh process with an empty Triton cache.

python benchmarks/bench_attention.py [--out DIR] [--quick] [--methods sage-auto,sage-fp8] [--tokens 32760,75600]
"""
import argparse
import contextlib
import csv
import math
import os
import subprocess
import sys
import tempfile
import textwrap

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_sage
from timing import device_ms, interleaved_ms, wall_ms

SHAPES = [  # B, H, N, D, causal
    (1, 40, 32760, 128, False), (1, 40, 75600, 128, False), (2, 24, 16384, 128, False), (1, 24, 4608, 128, False),
    (1, 48, 17776, 64, False), (2, 10, 4096, 64, False), (1, 32, 8192, 128, True),
]
SHORT = [(1, 40, n, 128, False) for n in (256, 512, 1024)]
BACK_TO_BACK = 4  # calls queued between two events for the "b2b" columns


@contextlib.contextmanager
def sm90_setting(value):
    """SAGEATTN_SK1_SM90 = value inside, the caller's setting (or none) after."""
    old = os.environ.get("SAGEATTN_SK1_SM90")
    os.environ["SAGEATTN_SK1_SM90"] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ["SAGEATTN_SK1_SM90"]
        else:
            os.environ["SAGEATTN_SK1_SM90"] = old


def bench_inputs(b, h, n, d, dtype=torch.bfloat16):
    """The benchmark's q, k, v of one shape (HND): Gaussian, the keys with a per-channel offset as real models' keys
    have, which key smoothing removes."""
    g = torch.Generator(device="cuda").manual_seed(n)
    q = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g)
    k = (torch.randn(b, h, n, d, device="cuda", generator=g) + 4 * torch.randn(d, device="cuda", generator=g)).to(dtype)
    v = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g)
    return q, k, v


def methods():
    m = {
        "sage-auto": lambda q, k, v, c: torch_sage.attention(q, k, v, is_causal=c),
        "sage-auto-nosmooth": lambda q, k, v, c: torch_sage.attention(q, k, v, is_causal=c, smooth_k=False),
        "sage-fp8": lambda q, k, v, c: torch_sage.attention(q, k, v, is_causal=c, pv_mode="fp8"),
    }
    if torch.cuda.get_device_capability() == (9, 0):
        for mode in ("auto", "fp8"):
            # The sm90 kernel forced to each schedule (the default picks one per call), and the precompiled Triton
            # kernel.
            for name, setting in (("sm90serial", "1"), ("sm90ws", "ws"), ("triton", "0")):
                def run(q, k, v, c, mode=mode, setting=setting):
                    with sm90_setting(setting):
                        return torch_sage.attention(q, k, v, is_causal=c, pv_mode=mode)
                m[f"sage-{name}-{mode}"] = run
    for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
        def run(q, k, v, c, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=c)
        m[name] = run
    try:
        from sageattention import sageattn as sage106
        m["sageattention-1.0.6"] = lambda q, k, v, c: sage106(q, k, v, is_causal=c)
    except ImportError:
        pass
    return m


def exact_head(q, k, v, causal):
    qh, kh, vh = q[:1, :1, :1024].double(), k[:1, :1].double(), v[:1, :1].double()
    s = qh @ kh.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), float("-inf"))
    return torch.softmax(s, -1) @ vh


def accuracy(out, ref):
    o, r = out[:1, :1, :1024].double().flatten(), ref.flatten()
    return F.cosine_similarity(o, r, dim=0).item(), ((o - r).abs().sum() / r.abs().sum()).item()


def first_call_seconds():
    script = textwrap.dedent("""
        import sys, time, torch
        import torch.nn.functional as F
        q = torch.randn(1, 24, 4608, 128, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        t0 = time.perf_counter(); import torch_sage; t_import = time.perf_counter() - t0
        for mode in ("auto", "fp8"):
            t0 = time.perf_counter(); torch_sage.attention(q, q, q, pv_mode=mode); torch.cuda.synchronize()
            first = time.perf_counter() - t0
            t0 = time.perf_counter(); torch_sage.attention(q, q, q, pv_mode=mode); torch.cuda.synchronize()
            second = time.perf_counter() - t0
            print(f"first call {mode}: {first:.3f} s beyond import (import {t_import:.2f} s), second {second:.4f} s")
        print(f"triton imported: {'triton' in sys.modules}")
        t0 = time.perf_counter(); F.scaled_dot_product_attention(q, q, q); torch.cuda.synchronize()
        print(f"first call SDPA (default backend) in the same process: {time.perf_counter() - t0:.3f} s")
    """)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRITON_CACHE_DIR=cache)
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
        return (res.stdout + res.stderr).strip()


def kernel_aot_vs_jit(quick):
    """The attention kernel alone on the same quantized inputs: the precompiled image launched from C++
    (sage::qk_int8_attention) against Triton's JIT of the same source and config (sage::_qk_int8_attention_triton)."""
    lines = []
    for b, h, n, d, causal in SHAPES:
        q, k, v = bench_inputs(b, h, n, d)
        qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, k, "HND", d ** -0.5, True)
        v8, vs = torch.ops.sage.quant_v_fp8(v, "HND")
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        reps = 5 if quick else max(5, min(50, int(2e13 / flops)))
        for mode, vv, vsc in (("fp16", v, None), ("fp8", v8, vs)):
            t = {}
            for name, op in (("aot", torch.ops.sage.qk_int8_attention),
                             ("jit", torch.ops.sage._qk_int8_attention_triton)):
                t[name] = device_ms(lambda op=op: op(qi, qs, ki, ks, vv, vsc, n, "HND", causal, torch.bfloat16), reps)
            lines.append(f"kernel {b},{h},{n},{d},{causal} {mode}: precompiled {t['aot']:.3f} ms, "
                         f"JIT {t['jit']:.3f} ms, JIT/precompiled {t['jit'] / t['aot']:.3f}")
        del q, k, v, qi, ki, v8
        torch.cuda.empty_cache()
    return "\n".join(lines)


def token_counts(text):
    """--tokens' value: a set of sequence lengths (argparse turns the error into a usage message)."""
    try:
        return {int(n) for n in text.split(",")}
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers expected") from None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=".")
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--methods", help="comma-separated name prefixes to time (sdpa-cudnn, the reference, always)")
    p.add_argument("--tokens", type=token_counts,
                   help="comma-separated sequence lengths N: only the rows of those (an A/B's long rows); with it or "
                   "--methods, the kernel-alone and first-call parts are left out")
    args = p.parse_args()
    ms = methods()
    if args.methods:
        keep = tuple(args.methods.split(","))
        ms = {name: fn for name, fn in ms.items() if name.startswith(keep) or name == "sdpa-cudnn"}
    rows = []
    header = (f"{'B,H,N,D,causal':24s}{'method':>21s}{'ms':>10s}{'TOPS':>8s}{'/cuDNN':>8s}{'cosine':>10s}{'rel L1':>9s}"
              f"{'b2b ms':>10s}{'/cuDNN':>8s}")
    print(header)
    shapes = SHAPES + SHORT
    if args.tokens:
        shapes = [s for s in shapes if s[2] in args.tokens]
        if not shapes:
            lengths = sorted({s[2] for s in SHAPES + SHORT})
            p.error(f"--tokens {sorted(args.tokens)}: no row has those lengths ({lengths})")
    for shape in shapes:
        b, h, n, d, causal = shape
        short = shape in SHORT
        q, k, v = bench_inputs(b, h, n, d)
        ref = exact_head(q, k, v, causal)
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        reps = 5 if args.quick else (200 if short else max(5, min(50, int(2e13 / flops))))
        calls, accuracies = {}, {}
        for name, fn in ms.items():
            call = lambda fn=fn: fn(q, k, v, causal)  # noqa: E731
            accuracies[name] = accuracy(call(), ref)  # also the warm-up call
            calls[name] = call
        # The same call BACK_TO_BACK times between the events: a model's layers queue calls, and a lone call
        # carries a fixed cost the queued ones do not (docs/FINDINGS.md F25).
        queued = {name: (lambda c=c: [c() for _ in range(BACK_TO_BACK)]) for name, c in calls.items()}
        if short:
            # Host-bound: each method's calls in a row, as issue 9's target was measured (in turns, cuDNN's
            # 1024-token call took 0.12-0.14 ms where runs in a row had measured 0.08-0.10, F30).
            timed = {name: wall_ms(c, reps) for name, c in calls.items()}
            b2b = {name: device_ms(c, max(3, reps // 4)) for name, c in queued.items()}
        else:
            # In turns (timing.interleaved_ms), each in its own order: a lone call's time moves by up to 10% with
            # the call before it (F29, F45).
            timed = interleaved_ms(calls, reps)
            b2b = interleaved_ms(queued, max(3, reps // 4))
        for name in ms:
            cos, l1 = accuracies[name]
            b2b[name] /= BACK_TO_BACK
            rows.append(dict(shape=f"{b},{h},{n},{d},{causal}", method=name, ms=timed[name],
                             tops=flops / timed[name] / 1e9, cosine=cos, rel_l1=l1, short_call=short,
                             ms_back_to_back=b2b[name]))
        for r in rows[-len(ms):]:
            r["vs_cudnn"] = timed["sdpa-cudnn"] / r["ms"]
            r["vs_cudnn_back_to_back"] = b2b["sdpa-cudnn"] / r["ms_back_to_back"]
            print(f"{r['shape']:24s}{r['method']:>21s}{r['ms']:10.3f}{r['tops']:8.0f}{r['vs_cudnn']:8.2f}"
                  f"{r['cosine']:10.6f}{r['rel_l1']:9.5f}{r['ms_back_to_back']:10.3f}{r['vs_cudnn_back_to_back']:8.2f}")
        del q, k, v
        torch.cuda.empty_cache()
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}; "
          "short calls: wall time per call, host included")
    if not (args.methods or args.tokens):
        with sm90_setting("0"):  # sage::qk_int8_attention's Triton image, also on sm_90
            print(kernel_aot_vs_jit(args.quick))
        print(first_call_seconds())
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_attention.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        shapes = list(dict.fromkeys(r["shape"] for r in rows))
        names = list(ms)
        fig, ax = plt.subplots(figsize=(14, 5))
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            vals = [next(r["tops"] for r in rows if r["shape"] == s and r["method"] == name) for s in shapes]
            ax.bar([x + i * width for x in range(len(shapes))], vals, width, label=name)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(shapes))], shapes, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("TOPS")
        ax.set_title(f"attention, bf16, {torch.cuda.get_device_name()}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "bench_attention.png"), dpi=100)
    except ImportError:
        print("matplotlib not installed: no plot")


if __name__ == "__main__":
    main()
