"""Timers shared by the benchmarks: the median of many single calls, after one warm-up call (kernel loading and
any compilation stay out of the numbers)."""
import time

import torch


def device_ms(fn, reps=20):
    """Median GPU time of one call, from a CUDA event pair around each call."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def wall_ms(fn, reps=200, device="cuda"):
    """Median wall time of one call with the host included, synchronized after each call."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3
