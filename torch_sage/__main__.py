"""Demo: ``python -m torch_sage`` runs sage attention in each P.V mode on the best available device and prints
its accuracy against exact attention and its time against PyTorch's SDPA on the same inputs."""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torch_sage

PROG = "python -m torch_sage"
MODES = ("auto", "fp16", "fp8")


def _shape(text):
    parts = text.split(",")
    try:
        dims = [int(x) for x in parts]
    except ValueError:
        dims = None
    if dims is None or len(dims) != 4:
        raise argparse.ArgumentTypeError(f"expected four integers B,H,N,D (e.g. 1,8,1024,128), got {text!r}")
    b, h, n, d = dims
    if min(b, h, n) < 1 or not 1 <= d <= 256:
        raise argparse.ArgumentTypeError(f"B, H and N must be at least 1 and D between 1 and 256, got {text!r}")
    return b, h, n, d


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _timer(device):
    """Milliseconds of one call of fn, measured on the device's own clock."""
    if device.type == "cuda":
        def run(fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end)
    else:
        def run(fn):
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
    return run


def _median_times(fns, device, reps):
    """Median time of each fn over ``reps`` runs after one warm-up run each (kernel loading and any compilation
    stay out of the numbers). The functions take turns, so a change in machine load hits them alike."""
    run = _timer(device)
    for fn in fns.values():
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    times = {label: [] for label in fns}
    for _ in range(reps):
        for label, fn in fns.items():
            times[label].append(run(fn))
    return {label: statistics.median(t) for label, t in times.items()}


def main(argv=None):
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    p = argparse.ArgumentParser(prog=PROG, description=__doc__)
    p.add_argument("--version", action="version",
                   version=f"torch_sage {torch_sage.__version__} (torch {torch.__version__})")
    p.add_argument("--device", default=default_device, help=f"cpu or cuda[:N] (default: {default_device})")
    p.add_argument("--shape", type=_shape, default=None,
                   help="B,H,N,D (default: 1,40,8192,128 on a GPU, 1,8,1024,128 on the CPU)")
    p.add_argument("--dtype", default="bfloat16", choices=["float16", "bfloat16"])
    p.add_argument("--causal", action="store_true")
    p.add_argument("--reps", type=_positive, default=None,
                   help="timed runs per row, after one warm-up (default: 50 on a GPU, 9 on the CPU)")
    args = p.parse_args(argv)
    try:
        device = torch.device(args.device)
    except RuntimeError:
        p.error(f"argument --device: not a device: {args.device!r}")
    if device.type not in ("cpu", "cuda"):
        p.error(f"argument --device: expected cpu or cuda[:N], got {args.device!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("argument --device: no CUDA or ROCm GPU is available to this torch")
    gpu = device.type == "cuda"
    b, h, n, d = args.shape or ((1, 40, 8192, 128) if gpu else (1, 8, 1024, 128))
    reps = args.reps or (50 if gpu else 9)
    dtype = getattr(torch, args.dtype)
    try:
        run_demo(device, b, h, n, d, dtype, args.causal, reps)
    except (RuntimeError, ValueError) as e:  # an unsupported GPU, out of memory, ...: the message, no traceback
        p.exit(1, f"{PROG}: error: {e}\n")


def run_demo(device, b, h, n, d, dtype, causal, reps):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, n, d, generator=g)
    k = torch.randn(b, h, n, d, generator=g) + 4 * torch.randn(d, generator=g)  # keys with a channel offset
    v = torch.randn(b, h, n, d, generator=g)
    q, k, v = (t.to(device, dtype) for t in (q, k, v))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"torch_sage {torch_sage.__version__} on {name}, torch {torch.__version__}")
    print(f"shape B,H,N,D = {b},{h},{n},{d} {str(dtype).replace('torch.', '')} causal={causal}; keys carry a "
          "per-channel offset")
    print("accuracy: against float64 exact attention (softmax(q k^T / sqrt(D)) v on the CPU) on head 0")
    print(f"time: median of {reps} runs per row after one warm-up, rows taking turns; speed = SDPA time / row time")
    if device.type == "cpu":
        print("note: torch_sage's CPU kernels are its exact reference code (docs/SEMANTICS.md), written to be "
              "checked, not fast:")
        print("      on the CPU they are slower than SDPA by design; the speed column means something on a GPU")

    ref = F.scaled_dot_product_attention(*(t[:, :1].double().cpu() for t in (q, k, v)), is_causal=causal)
    fns = {"SDPA": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)}
    for mode in MODES:
        fns[f"sage ({mode})"] = lambda mode=mode: torch_sage.attention(q, k, v, is_causal=causal, pv_mode=mode)
    times = _median_times(fns, device, reps)
    print(f"{'':14s}{'cosine':>10s}{'rel L1':>10s}{'ms':>11s}{'speed vs SDPA':>15s}")
    for label, fn in fns.items():
        out = fn()[:, :1].double().cpu()
        cos = F.cosine_similarity(out.flatten(), ref.flatten(), dim=0).item()
        l1 = ((out - ref).abs().sum() / ref.abs().sum()).item()
        ms = times[label]
        print(f"{label:14s}{cos:10.6f}{l1:10.5f}{ms:11.3f}{times['SDPA'] / ms:14.2f}x")
    print('"auto" is the accurate (fp16) mode; "fp8" is the fast mode (e4m3 P and V), see README.md')


if __name__ == "__main__":
    sys.exit(main())
