"""One attention call, for a profiler to look at (docs/FINDINGS.md F21), after one warm-up call:
ncu --clock-control none -k "regex:qk_int8_attention(_ws)?_kernel" -s 1 -c 1 --metrics ... \
    python tools/profile_one_call.py [--mode auto|fp8] [--sm90 1|ws|0] [--overlap 0|1] [--shape B,H,N,D] [--causal]
    [--dtype bfloat16]
With --kernels N it instead times N calls back to back (wall time, host included) and under torch.profiler, and
prints each GPU kernel's time per call: where a call's time goes between the host, the prologue launches and the
attention kernel; then the same N calls one at a time (each kernel's time and the GPU's span of a call); then the
timeline of one call between two CUDA events as benchmarks/timing.py's device_ms times it (host runtime calls and
GPU kernels, from the start event's record)."""
import argparse
import os
import sys
from pathlib import Path

import torch

import torch_sage

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
# The benchmarks' timer and inputs, so that the calls here are bench_attention's calls, timed as it times them.
from bench_attention import bench_inputs  # noqa: E402
from timing import device_ms, device_once  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="auto", help="pv_mode")
    p.add_argument("--sm90", help="SAGEATTN_SK1_SM90 for the call (unset: the default)")
    p.add_argument("--overlap", help="SAGEATTN_SK1_OVERLAP for the call (0: per-kernel times without the waits that "
                   "overlapped launches put inside kernels; unset: the default)")
    p.add_argument("--shape", default="1,40,8192,128", help="B,H,N,D")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--kernels", type=int, default=0, help="calls to time per kernel (0: one call for ncu)")
    args = p.parse_args()
    for name, value in (("SAGEATTN_SK1_SM90", args.sm90), ("SAGEATTN_SK1_OVERLAP", args.overlap)):
        if value is not None:
            os.environ[name] = value
    b, h, n, d = (int(x) for x in args.shape.split(","))
    q, k, v = bench_inputs(b, h, n, d, getattr(torch, args.dtype))
    for _ in range(2):  # the first is the warm-up: profile the second (ncu -s 1 -c 1)
        torch_sage.attention(q, k, v, is_causal=args.causal, pv_mode=args.mode)
    torch.cuda.synchronize()
    if args.kernels > 0:
        print_kernel_times(lambda: torch_sage.attention(q, k, v, is_causal=args.causal, pv_mode=args.mode),
                           args.kernels, f"{args.shape} {args.dtype} causal={args.causal} mode={args.mode} "
                           f"sm90={args.sm90}")


def print_kernel_times(call, calls, title):
    import time

    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    wall_us = (time.perf_counter() - start) / calls * 1e6  # back to back: above the kernels' sum when host-bound
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    times = us_per_call(kernel_events(prof), calls)
    print(f"{title}: {sum(times.values()):.1f} us of kernels a call, {wall_us:.1f} us a call back to back")
    for name, us in sorted(times.items(), key=lambda x: -x[1]):
        print(f"  {us:9.1f} us  {name[:110]}")
    # The same calls one at a time, synchronized after each, as a benchmark's lone call runs (a lone fast call measured
    # ~150 us above its kernels' sum, docs/FINDINGS.md F25): the GPU's span of a call (first kernel's start to the last
    # one's end) against the kernels' sum shows gaps; each kernel's time against its queued time shows a slower kernel.
    # Once after an idle GPU, once right after 2 ms of spinning on it (torch.cuda._sleep), which keeps its clocks up.
    for label, before in (("after idle", None), ("after 2 ms busy", lambda: torch.cuda._sleep(4_000_000))):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                if before is not None:
                    before()
                call()
                torch.cuda.synchronize()
        print_lone_calls(prof, calls, times, label)
    print_event_timed_call(call, calls)


def print_event_timed_call(call, calls):
    """One call between CUDA events (benchmarks/timing.py device_once, as bench_attention times the long rows) takes
    longer than the GPU's span of a lone call (F27); F29 found why with this: the host's time before the first
    kernel. This prints the same calls' event time without and with the profiler and, for the profiled call of
    median event time, when each runtime call and aten op was issued and when each kernel ran."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    def timed_call():
        with record_function("event_timed_call"):
            return device_once(call) * 1e3

    unprofiled = device_ms(call, calls) * 1e3  # does the profiler change the gap?
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        elapsed = [timed_call() for _ in range(calls)]
    rows = [(ev.time_range.start, ev.time_range.elapsed_us(), "gpu " if ev.device_type == DeviceType.CUDA else "host",
             ev.name) for ev in prof.events()]
    # record_function leaves a host range and a GPU annotation of the same name; the window is the host one.
    windows = sorted((start, start + us) for start, us, side, name in rows
                     if name == "event_timed_call" and side == "host")
    median = sorted(range(len(elapsed)), key=elapsed.__getitem__)[len(elapsed) // 2]
    if len(windows) != len(elapsed):
        print(f"  one call between CUDA events: {unprofiled:.1f} us without the profiler; {len(windows)} profiler "
              f"windows for {len(elapsed)} calls, no timeline")
        return
    print(f"  one call between CUDA events: {unprofiled:.1f} us without the profiler, {elapsed[median]:.1f} us "
          f"under it (medians of {calls}); the latter's call, from the start event's record, host calls and GPU "
          "kernels:")
    for line in timeline_rows(rows, windows[median]):
        print(line)


def timeline_rows(rows, window):
    """rows: (start us, duration us, "host" or "gpu ", name) on the profiler's one clock. The runtime API calls
    (cuda*, cu*), the sage and aten ops (nested ones too) and the kernels that start inside window, from its first
    cudaEventRecord on."""
    lo, hi = window
    inside = sorted(r for r in rows if lo <= r[0] <= hi and r[3] != "event_timed_call" and
                    (r[2] == "gpu " or r[3].startswith(("cuda", "cu", "sage::", "aten::"))))
    origin = next((r[0] for r in inside if r[3].startswith("cudaEventRecord")), lo)  # ...WithFlags in torch 2.11
    return [f"    {side} {start - origin:+9.1f} us {us:8.1f} us  {name[:90]}" for start, us, side, name in inside]


def kernel_events(prof):
    """The GPU kernels a profile saw, by start time (the spin of torch.cuda._sleep left out)."""
    return sorted((e for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA and "spin_kernel" not in e.name),
                  key=lambda e: e.time_range.start)


def us_per_call(kernels, calls):
    """Each kernel's time per call, by name."""
    times = {}
    for e in kernels:
        times[e.name] = times.get(e.name, 0.0) + e.time_range.elapsed_us() / calls
    return times


def print_lone_calls(prof, calls, queued, label):
    kernels = kernel_events(prof)
    per_call = len(kernels) // calls
    groups = [kernels[c * per_call:(c + 1) * per_call] for c in range(calls)]
    if not kernels or len(kernels) % calls or any([e.name for e in ks] != [e.name for e in groups[0]] for ks in groups):
        print(f"  one at a time, {label}: {len(kernels)} kernels in {calls} calls, not the same kernels each call")
        return
    spans = [max(e.time_range.end for e in ks) - ks[0].time_range.start for ks in groups]
    lone = us_per_call(kernels, calls)
    print(f"  one at a time, {label}: {sum(lone.values()):.1f} us of kernels a call, the GPU's span of a call "
          f"{sorted(spans)[calls // 2]:.1f} us (median)")
    for name, us in sorted(lone.items(), key=lambda x: -x[1]):
        print(f"  {us:9.1f} us  (queued {queued.get(name, 0.0):.1f})  {name[:100]}")


if __name__ == "__main__":
    main()
