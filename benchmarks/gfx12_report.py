"""Validation report for an AMD RDNA4 GPU (gfx1200 RX 9060 / 9060 XT; also gfx1201 RX 9070 / 9070 XT), to paste
into an issue. The procedure around it: docs/GFX1200-TESTING.md.

    python benchmarks/gfx12_report.py [--out report.md] [--skip-tests] [--pytest-args "..."]

1. environment: OS, Python, torch / ROCm (HIP) / Triton versions, torch_sage version and git commit, the GPU's
   name, gcnArchName, memory, and the settings (SAGEATTN_SK1_GFX1200, SAGEATTN_SK1_PROLOGUE);
2. the opt-in: on gfx1200, a child process without SAGEATTN_SK1_GFX1200 must be refused with the message naming
   it (both the C++ prologue and a Triton op); on gfx1201 it must run without it;
3. correctness: the GPU tests (python -m pytest -m gpu test), their summary line and the names of failures;
4. accuracy: sage (fp16 and fp8 P.V) and SDPA against float64 exact attention, with the bounds of
   docs/SEMANTICS.md;
5. speed: sage and SDPA (torch's default backend) on a few shapes: median GPU time, and the first call's wall
   time (compiling nothing where the build precompiled the kernels).

On a machine without an AMD GPU it prints the environment and "no AMD GPU" (exit code 0); --any-gpu runs the
report on another GPU (an NVIDIA one) anyway. --smoke runs steps 3-5 on the CPU with tiny shapes: a test of this
script (test/test_gfx12_report.py), its numbers mean nothing.
"""
import argparse
import datetime
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch

from timing import device_ms, wall_ms  # benchmarks/timing.py (this script runs from benchmarks/)
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
OPT_IN = "SAGEATTN_SK1_GFX1200"
BOUNDS = {"fp16": (0.9999, 0.015), "fp8": (0.9995, 0.03)}  # docs/SEMANTICS.md: cosine >=, relative L1 <=
ACCURACY_SHAPES = [(1, 8, 2048, 128, False), (1, 8, 2048, 64, False), (1, 8, 2048, 128, True)]  # B, H, N, D, causal
SPEED_SHAPES = [(1, 24, 4096, 128, False), (1, 24, 8192, 64, False), (2, 10, 4096, 64, False),
                (1, 32, 4096, 128, True)]


class Report:
    def __init__(self):
        self.lines = []

    def __call__(self, line=""):
        print(line, flush=True)
        self.lines.append(line)


def git_commit():
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def environment(rep):
    rep(f"date:        {datetime.datetime.now().isoformat(timespec='seconds')}")
    rep(f"os:          {platform.platform()}")
    rep(f"python:      {platform.python_version()}")
    rep(f"torch:       {torch.__version__} (hip {torch.version.hip}, cuda {torch.version.cuda})")
    try:
        import triton
        rep(f"triton:      {triton.__version__}")
    except ImportError:
        rep("triton:      not installed")
    try:
        import torch_sage
        rep(f"torch_sage:  {torch_sage.__version__} ({torch_sage.__file__}), commit {git_commit()}")
    except Exception as e:  # noqa: BLE001 (the report says what went wrong)
        rep(f"torch_sage:  import failed: {type(e).__name__}: {e}")
    for var in (OPT_IN, "SAGEATTN_SK1_PROLOGUE", "HIP_VISIBLE_DEVICES", "HSA_OVERRIDE_GFX_VERSION"):
        rep(f"{var}={os.environ.get(var, '(unset)')}")
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gcn = getattr(p, "gcnArchName", None)
            rep(f"gpu {i}:       {p.name}, gcnArchName {gcn}, capability {p.major}.{p.minor}, "
                f"{p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} CUs/SMs")
            gpus.append((i, p.name, gcn))
    else:
        rep("gpu:         none (torch.cuda.is_available() is False)")
    return gpus


OPT_IN_PROBE = r"""
import torch, torch_sage
q = torch.randn(1, 2, 256, 64, device="cuda", dtype=torch.float16)
for name, call in [("quant_qk_int8 (C++ HIP prologue)", lambda: torch.ops.sage.quant_qk_int8(q, q, "HND", 0.125, True)),
                   ("quant_v_fp8 (Triton)", lambda: torch.ops.sage._quant_v_fp8_triton(q, "HND"))]:
    try:
        call(); torch.cuda.synchronize(); print("RAN", name)
    except RuntimeError as e:
        print("REFUSED", name, "|", str(e).splitlines()[0][:300])
"""


def check_opt_in(rep, arch):
    """gfx1200: refused without the variable; gfx1201: runs without it. In a child process without the variable."""
    env = {k: v for k, v in os.environ.items() if k != OPT_IN}
    res = subprocess.run([sys.executable, "-c", OPT_IN_PROBE], capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(("RAN", "REFUSED"))]
    for ln in lines:
        rep(f"  without {OPT_IN}: {ln}")
    if res.returncode != 0 or len(lines) != 2:
        rep(f"  probe failed (exit {res.returncode}): {res.stderr.strip()[-800:]}")
        return False
    if arch == "gfx1200":
        ok = all(ln.startswith("REFUSED") and f"{OPT_IN}=1" in ln for ln in lines)
    else:
        ok = all(ln.startswith("RAN") for ln in lines)
    rep(f"  opt-in behaviour: {'as documented' if ok else 'NOT as documented'}")
    return ok


def run_tests(rep, extra):
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-rfE", "test"] + extra
    rep(f"$ python {shlex.join(cmd[1:])}")
    t0 = time.time()
    try:
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
        out = res.stdout + res.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += "\n(timed out after 3600 s)"
    failures = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    summary = [ln for ln in out.splitlines() if re.search(r"\b(passed|failed|error|skipped|no tests ran)\b", ln)]
    rep(f"  {summary[-1].strip('= ') if summary else out.strip()[-500:]}   ({time.time() - t0:.0f} s)")
    for ln in failures[:40]:
        rep(f"  {ln[:300]}")
    if len(failures) > 40:
        rep(f"  ... and {len(failures) - 40} more")


def make_qkv(b, h, n, d, dtype, seed, device, v_offset=False):
    """The inputs of docs/SEMANTICS.md's accuracy bounds: keys carry a per-channel offset (k + 4 randn(D)); for the
    fp8 mode values do too (v + randn(D)): on iid Gaussian V it sits at the e4m3 rounding floor, just outside."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=g)
    k = torch.randn(b, h, n, d, generator=g) + 4 * torch.randn(d, generator=g)
    v = torch.randn(b, h, n, d, generator=g) + (torch.randn(d, generator=g) if v_offset else 0)
    return [t.to(device, dtype) for t in (q, k, v)]


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def metrics(out, ref):
    o, r = out.double().flatten(), ref.flatten()
    return F.cosine_similarity(o, r, dim=0).item(), ((o - r).abs().sum() / r.abs().sum()).item()


def accuracy(rep, device, shapes):
    import torch_sage

    rep("  keys with a per-channel offset; V too in the fp8 rows (docs/SEMANTICS.md, Accuracy bounds)")
    rep(f"  {'B,H,N,D causal':22s}{'dtype':>10s}{'impl':>12s}{'cosine':>11s}{'rel L1':>9s}  bound")
    for b, h, n, d, causal in shapes:
        for dtype in (torch.float16, torch.bfloat16):
            rows = []
            for v_offset, impls in ((False, ("SDPA", "fp16")), (True, ("fp8",))):
                q, k, v = make_qkv(b, h, n, d, dtype, n + d, device, v_offset)
                ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
                for impl in impls:
                    if impl == "SDPA":
                        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        rows.append(("SDPA", None) + metrics(out, ref))
                    else:
                        out = torch_sage.attention(q, k, v, is_causal=causal, pv_mode=impl)
                        rows.append((f"sage {impl}", impl) + metrics(out, ref))
                del q, k, v, ref, out
            for name, mode, cos, l1 in rows:
                verdict = ""
                if mode is not None:
                    min_cos, max_l1 = BOUNDS[mode]
                    ok = math.isfinite(cos) and cos >= min_cos and l1 <= max_l1
                    verdict = f"{'ok' if ok else 'OUT OF BOUND'} (>= {min_cos}, <= {max_l1})"
                rep(f"  {f'{b},{h},{n},{d} {causal}':22s}{str(dtype)[6:]:>10s}{name:>12s}{cos:11.6f}{l1:9.5f}  "
                    f"{verdict}")
            if device == "cuda":
                torch.cuda.empty_cache()


def median_ms(fn, device, reps=20):
    """Median time of one call: GPU time from events on the GPU, wall time on the CPU."""
    return device_ms(fn, reps) if device == "cuda" else wall_ms(fn, reps, device="cpu")


def speed(rep, device, shapes, reps):
    import torch_sage

    rep(f"  {'B,H,N,D causal':22s}{'SDPA ms':>9s}{'fp16 ms':>9s}{'fp8 ms':>9s}{'fp16 x':>8s}{'fp8 x':>7s}"
        f"{'1st call s':>11s}")
    for b, h, n, d, causal in shapes:
        q, k, v = make_qkv(b, h, n, d, torch.bfloat16, 1, device)
        t0 = time.perf_counter()
        torch_sage.attention(q, k, v, is_causal=causal)
        synchronize(device)
        first = time.perf_counter() - t0
        sdpa = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), device, reps)
        fp16 = median_ms(lambda: torch_sage.attention(q, k, v, is_causal=causal, pv_mode="fp16"), device, reps)
        fp8 = median_ms(lambda: torch_sage.attention(q, k, v, is_causal=causal, pv_mode="fp8"), device, reps)
        rep(f"  {f'{b},{h},{n},{d} {causal}':22s}{sdpa:9.3f}{fp16:9.3f}{fp8:9.3f}{sdpa / fp16:7.2f}x{sdpa / fp8:6.2f}x"
            f"{first:11.2f}")
        del q, k, v
        if device == "cuda":
            torch.cuda.empty_cache()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="also write the report to this file")
    p.add_argument("--skip-tests", action="store_true", help="skip the pytest run (step 3)")
    p.add_argument("--pytest-args", default="", help='extra pytest arguments, e.g. "-x" or "-k prologue"')
    p.add_argument("--any-gpu", action="store_true", help="run on a GPU that is not an AMD one too")
    p.add_argument("--smoke", action="store_true", help="steps 3-5 on the CPU, tiny shapes (tests this script)")
    args = p.parse_args(argv)
    rep = Report()
    rep("## torch_sage gfx12 report")
    rep("```text")
    gpus = environment(rep)
    if args.smoke:
        rep("smoke run on the CPU: the numbers below mean nothing")
        return finish(rep, args, steps(rep, args, "cpu", [(1, 2, 200, 64, False), (1, 2, 130, 128, True)],
                                       [(1, 2, 256, 64, False)], reps=2))
    amd = [g for g in gpus if g[2]]
    if not amd and not (args.any_gpu and gpus):
        rep("no AMD GPU: nothing was tested (this report only shows the environment)")
        rep("```")
        return finish(rep, args, 0)
    index, name, gcn = (amd or gpus)[0]
    torch.cuda.set_device(index)
    arch = (gcn or "").split(":")[0]
    rep(f"testing gpu {index}: {name} ({arch or 'not AMD'})")
    code = 0
    from torch_sage import arch as sage_arch
    try:
        sage_arch.check_device(torch.device("cuda", index))
    except RuntimeError as e:
        rep(f"torch_sage refuses this GPU: {e}")
        if arch == "gfx1200":
            rep(f"(set {OPT_IN}=1 and run again: see docs/GFX1200-TESTING.md)")
        rep("```")
        return finish(rep, args, 2)
    if arch in ("gfx1200", "gfx1201"):
        rep("[opt-in check]")
        code |= 0 if check_opt_in(rep, arch) else 1
    return finish(rep, args, code | steps(rep, args, "cuda", ACCURACY_SHAPES, SPEED_SHAPES, reps=20))


def steps(rep, args, device, accuracy_shapes, speed_shapes, reps):
    """Steps 3-5; returns 0, or 1 when a step could not run."""
    code = 0
    if not args.skip_tests:
        rep("[GPU tests]")
        run_tests(rep, shlex.split(args.pytest_args))
    for title, step in (("[accuracy vs float64 exact]", lambda: accuracy(rep, device, accuracy_shapes)),
                        (f"[speed, bfloat16, median of {reps}]", lambda: speed(rep, device, speed_shapes, reps))):
        rep(title)
        try:
            step()
        except Exception as e:  # noqa: BLE001 (the report says what went wrong and goes on)
            rep(f"  failed: {type(e).__name__}: {str(e)[:500]}")
            code = 1
    rep("```")
    return code


def finish(rep, args, code):
    if args.out:
        Path(args.out).write_text("\n".join(rep.lines) + "\n")
        print(f"(written to {args.out})")
    return code


if __name__ == "__main__":
    sys.exit(main())
