"""Side-by-side attention benchmark on the GPU, in one run: torch_sage (whole call, prologue included) in its
default mode (auto), with smooth_k=False (what key smoothing costs) and in the fp8 mode, each mode also with the
hand-written mma kernel forced (sage-mma-*), with the precompiled Triton kernel (sage-triton-*) and on sm_90 with the
sm90 kernel forced to each of its two schedules, against F.scaled_dot_product_attention with the flash and cuDNN
backends and, when importable, SageAttention 2.2.0's CUDA kernels (sage2-*; run_gpu.sh SAGE_SAGE2=1) or else
sageattention 1.0.6, and on sm_90 FlashAttention-3 (fa3-bf16, fa3-e4m3; the fa3_fwd wheel in .whl/).
Prints TOPS (4*B*H*N^2*D / time, half for causal), the ratio to cuDNN and accuracy against float64 exact
attention (first head, first 1024 queries); writes a CSV, with --save-json the results file (JSON) and with --plot a
PNG of the ratios to cuDNN (matplotlib; --plot-from draws a results file, no GPU needed: benchmarks/plot_results.py).
Long calls are timed one call between two CUDA events, the methods in turns (each turn in its own order); short calls
(256-1024 tokens) one call at a time with the host included, each method's calls in a row; the "b2b" columns time 4
calls queued back to back between two events, per call. Then the attention kernel alone, precompiled (C++ launch)
against Triton's JIT of the same source, and the first call in a fresh process with an empty Triton cache.

python benchmarks/bench_attention.py [--out DIR] [--quick] [--methods sage-auto,sage-fp8] [--tokens 32760,75600]
                                     [--save-json FILE] [--plot PNG]
python benchmarks/bench_attention.py --plot-from FILE --plot PNG [--methods ...] [--tokens ...]
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

import plot_results
import torch_sage
from timing import device_ms, interleaved_ms, wall_ms

SHAPES = [  # B, H, N, D, causal
    (1, 40, 32760, 128, False), (1, 40, 75600, 128, False), (2, 24, 16384, 128, False), (1, 24, 4608, 128, False),
    (1, 48, 17776, 64, False), (2, 10, 4096, 64, False), (1, 32, 8192, 128, True),
]
SHORT = [(1, 40, n, 128, False) for n in (256, 512, 1024)]
BACK_TO_BACK = 4  # calls queued between two events for the "b2b" columns


@contextlib.contextmanager
def env_setting(**values):
    """The environment variables given (e.g. SAGEATTN_SK1_SM90="0") set inside, the caller's settings (or none)
    after: torch_sage reads its kernel choices at each call."""
    old = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def bench_inputs(b, h, n, d, dtype=torch.bfloat16):
    """The benchmark's q, k, v of one shape (HND): Gaussian, the keys with a per-channel offset as real models' keys
    have, which key smoothing removes."""
    g = torch.Generator(device="cuda").manual_seed(n)
    q = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g)
    k = (torch.randn(b, h, n, d, device="cuda", generator=g) + 4 * torch.randn(d, device="cuda", generator=g)).to(dtype)
    v = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g)
    return q, k, v


def fa3_interface():
    """FlashAttention-3's flash_attn_func from the fa3_fwd wheel (.whl/), or None: its interface imports the
    config module under flash_attn's name."""
    try:
        import fa3_fwd_config
        sys.modules.setdefault("flash_attn_config", fa3_fwd_config)
        from fa3_fwd_interface import flash_attn_func
    except ImportError:
        return None
    return flash_attn_func


def triton_as_sm89(q, k, v, causal, fp8):
    """sage::attention's steps (HND, default scale, smooth_k) with the attention by the Triton JIT compiled as for
    sm_89 (mma.sync; see methods())."""
    from torch_sage.attention_configs import attention_config
    from torch_sage.triton_attention import qk_int8_attention_triton

    q_int8, q_scale, k_int8, k_scale, _ = torch.ops.sage.quant_qk_int8(q, k, "HND", q.size(3) ** -0.5, True)
    v_scale = None
    if fp8:
        v, v_scale = torch.ops.sage.quant_v_fp8(v, "HND")
    config = attention_config("sm_89", q_int8.size(3), fp8)
    with env_setting(DISABLE_MMA_V3="1"):
        return qk_int8_attention_triton(q_int8, q_scale, k_int8, k_scale, v, v_scale, q.size(2), "HND", causal,
                                        q.dtype, config=config)[0]


def methods():
    m = {
        "sage-auto": lambda q, k, v, c: torch_sage.attention(q, k, v, is_causal=c),
        "sage-auto-nosmooth": lambda q, k, v, c: torch_sage.attention(q, k, v, is_causal=c, smooth_k=False),
        "sage-fp8": lambda q, k, v, c: torch_sage.attention(q, k, v, is_causal=c, pv_mode="fp8"),
    }
    sm90 = torch.cuda.get_device_capability() == (9, 0)
    for mode in ("auto", "fp8"):
        # The hand-written mma kernel forced (SAGEATTN_SK1_MMA=1, sm_90 included; a build without it falls back),
        # and the precompiled Triton kernel on every GPU (mma and, on sm_90, the sm90 kernel off).
        settings = [("mma", dict(SAGEATTN_SK1_MMA="1")),
                    ("triton", dict(SAGEATTN_SK1_MMA="0", SAGEATTN_SK1_SM90="0"))]
        if sm90:
            # The sm90 kernel forced to each schedule (the default picks one per call).
            settings += [("sm90serial", dict(SAGEATTN_SK1_SM90="1")), ("sm90ws", dict(SAGEATTN_SK1_SM90="ws"))]
        for name, setting in settings:
            def run(q, k, v, c, mode=mode, setting=setting):
                with env_setting(**setting):
                    return torch_sage.attention(q, k, v, is_causal=c, pv_mode=mode)
            m[f"sage-{name}-{mode}"] = run
    for mode in ("auto", "fp8") if sm90 else ():
        # Our Triton kernel as an sm_80-sm_89 card runs it: Triton's mma.sync code (DISABLE_MMA_V3=1, a Triton
        # compile setting) with the sm_89 entry of the tile table, under the JIT: the fair match on sm_90 for the mma
        # kernel forced (issue 41), both mma.sync code, where the precompiled Triton kernel runs wgmma.
        m[f"sage-tritonmma-{mode}"] = lambda q, k, v, c, mode=mode: triton_as_sm89(q, k, v, c, mode == "fp8")
    for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
        def run(q, k, v, c, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=c)
        m[name] = run
    try:
        import sageattention
    except ImportError:
        sageattention = None
    if hasattr(sageattention, "sageattn_qk_int8_pv_fp16_cuda"):
        # SageAttention 2.2.0 (run_gpu.sh SAGE_SAGE2=1; the same package name as 1.0.6): its INT8 QK kernels with
        # FP16 PV (sm80) in the most accurate and the fastest accumulation, and with FP8 PV (sm89, which the H100
        # runs too; its sm90 kernel is not built). Head dims 64 and 128 only, as the shapes here have.
        # Rows only for the extensions that imported (a missing one fails an assert in the call).
        s2 = sageattention
        for acc in ("fp32", "fp16") if s2.core.SM80_ENABLED else ():
            m[f"sage2-sm80-{acc}"] = lambda q, k, v, c, acc=acc: s2.sageattn_qk_int8_pv_fp16_cuda(
                q, k, v, tensor_layout="HND", is_causal=c, pv_accum_dtype=acc)
        for acc in ("fp32+fp32", "fp32+fp16") if s2.core.SM89_ENABLED else ():
            m[f"sage2-sm89-{acc}"] = lambda q, k, v, c, acc=acc: s2.sageattn_qk_int8_pv_fp8_cuda(
                q, k, v, tensor_layout="HND", is_causal=c, pv_accum_dtype=acc)
    elif sageattention is not None:
        m["sageattention-1.0.6"] = lambda q, k, v, c: sageattention.sageattn(q, k, v, is_causal=c)
    fa3 = fa3_interface() if sm90 else None
    if fa3 is not None:
        # FlashAttention-3 (sm_90 only) takes [B, N, H, D]; its fast mode is e4m3 q, k, v, the plain cast (no scaling)
        # inside the timed call.
        def run_fa3(q, k, v, c, dtype=None):
            q, k, v = (x.transpose(1, 2) if dtype is None else x.transpose(1, 2).to(dtype) for x in (q, k, v))
            return fa3(q, k, v, causal=c).transpose(1, 2)
        m["fa3-bf16"] = run_fa3
        m["fa3-e4m3"] = lambda q, k, v, c: run_fa3(q, k, v, c, torch.float8_e4m3fn)
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
    p.add_argument("--save-json", metavar="FILE", help="write the table and the card's name to FILE (for --plot-from)")
    p.add_argument("--plot", metavar="PNG", help="draw the ratios to cuDNN, one bar per method and shape (matplotlib)")
    p.add_argument("--plot-from", metavar="FILE", help="draw --plot from a --save-json FILE instead of measuring; "
                   "--methods and --tokens choose its rows")
    args = p.parse_args()
    if args.plot_from:
        if not args.plot:
            p.error("--plot-from needs --plot PNG")
        try:
            results = plot_results.select(plot_results.load_results(args.plot_from), args.methods and
                                          args.methods.split(","), args.tokens)
            plot_results.plot_ratios(results, args.plot)
        except (ImportError, OSError, ValueError) as e:
            p.error(str(e))
        print(f"wrote {args.plot} ({len(results['rows'])} rows of {results['device']})")
        return
    if args.plot:
        try:
            plot_results.check_matplotlib()  # before the measurements, not after them
        except ImportError as e:
            p.error(str(e))
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
        with env_setting(SAGEATTN_SK1_MMA="0", SAGEATTN_SK1_SM90="0"):  # sage::qk_int8_attention's Triton image
            print(kernel_aot_vs_jit(args.quick))
        print(first_call_seconds())
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_attention.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    device = torch.cuda.get_device_name()
    if args.save_json:
        plot_results.save_results(args.save_json, rows, device, torch.__version__)
    if args.plot:
        plot_results.plot_ratios({"device": device, "torch": torch.__version__, "rows": rows}, args.plot)


if __name__ == "__main__":
    main()
