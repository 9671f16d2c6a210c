"""Timers shared by the benchmarks: the median of many single calls, after one warm-up call (kernel loading and
any compilation stay out of the numbers)."""
import random
import time

import torch


def device_once(fn):
    """GPU time of one call in ms, from a CUDA event pair around it; the GPU is idle before and after."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e)


def wall_once(fn, sync=torch.cuda.synchronize):
    """Wall time of one call in ms with the host included, synchronized after it."""
    t0 = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t0) * 1e3


def median(times):
    return sorted(times)[len(times) // 2]


def device_ms(fn, reps=20):
    """Median GPU time of one call, from a CUDA event pair around each call."""
    fn()
    torch.cuda.synchronize()
    return median([device_once(fn) for _ in range(reps)])


def wall_ms(fn, reps=200, device="cuda"):
    """Median wall time of one call with the host included, synchronized after each call."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    fn()
    sync()
    return median([wall_once(fn, sync) for _ in range(reps)])


def interleaved_ms(fns, reps, once=device_once):
    """{name: median ms} of the calls in fns ({name: fn}, each warmed up already) timed in turns: rep r times
    every fn once before rep r + 1, so that what drifts during a run (clocks, the host, the other processes) falls
    on every fn alike instead of on whichever is timed first. Each turn takes the fns in its own order (shuffled,
    seeded by r): on a card at its power cap a lone call's time depends on the call before it, and a fixed order
    gave each fn the same neighbour in every turn (the same build's fp8 call 26.0 ms in one fixed order, 23.1-23.9
    shuffled, docs/FINDINGS.md F45)."""
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for r in range(reps):
        order = list(fns)
        random.Random(r).shuffle(order)
        for name in order:
            times[name].append(once(fns[name]))
    return {name: median(t) for name, t in times.items()}
