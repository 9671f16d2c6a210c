"""Demo: ``python -m torch_sage`` runs sage attention on the best available device and prints its accuracy
against exact attention and its time against PyTorch's SDPA on the same inputs."""
import argparse
import time

import torch
import torch.nn.functional as F

import torch_sage


def _time(fn, device, reps):
    fn()  # warm-up: kernel loading and any compilation stay out of the numbers
    if device == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) * 1e3 / reps


def main(argv=None):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default=dev)
    p.add_argument("--shape", default="1,40,8192,128" if dev == "cuda" else "1,8,1024,128", help="B,H,N,D")
    p.add_argument("--dtype", default="bfloat16", choices=["float16", "bfloat16"])
    p.add_argument("--causal", action="store_true")
    args = p.parse_args(argv)
    b, h, n, d = (int(x) for x in args.shape.split(","))
    dtype = getattr(torch, args.dtype)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, n, d, generator=g)
    k = torch.randn(b, h, n, d, generator=g) + 4 * torch.randn(d, generator=g)  # keys with a channel offset
    v = torch.randn(b, h, n, d, generator=g)
    q, k, v = (t.to(args.device, dtype) for t in (q, k, v))
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"torch_sage {torch_sage.__version__} on {name}, torch {torch.__version__}")
    print(f"shape B,H,N,D = {b},{h},{n},{d} {args.dtype} causal={args.causal}")

    # Exact reference on the first head, in float64 on the CPU.
    qh, kh, vh = (t[:, :1].double().cpu() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qh, kh, vh, is_causal=args.causal)
    sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)  # noqa: E731
    reps = 20 if args.device == "cuda" else 3
    t_sdpa = _time(sdpa, args.device, reps)
    print(f"{'':18s}{'cosine':>10s}{'rel L1':>10s}{'ms':>10s}{'speed vs SDPA':>15s}")
    for label, fn in [("SDPA", sdpa)] + [
        (f"sage ({mode})", lambda mode=mode: torch_sage.attention(q, k, v, is_causal=args.causal, pv_mode=mode))
        for mode in ("fp16", "fp8")
    ]:
        out = fn()[:, :1].double().cpu()
        cos = F.cosine_similarity(out.flatten(), ref.flatten(), dim=0).item()
        l1 = ((out - ref).abs().sum() / ref.abs().sum()).item()
        ms = t_sdpa if label == "SDPA" else _time(fn, args.device, reps)
        print(f"{label:18s}{cos:10.6f}{l1:10.5f}{ms:10.3f}{t_sdpa / ms:14.2f}x")


if __name__ == "__main__":
    main()
