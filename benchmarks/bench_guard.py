"""What the accuracy guard (SAGEATTN_SK1_GUARD=on) costs a call that it leaves unchanged: documented inputs (keys
with a per-channel offset, default scale), guard off and on in turns, on the CPU (the only device it runs on so
far; docs/SEMANTICS.md, "The accuracy guard").

python benchmarks/bench_guard.py [--rounds 2]
"""
import argparse
import os
import time

import torch

import torch_sage

SHAPES = [(1, 8, 4096, 128, 3), (1, 8, 256, 128, 50)]  # B, H, N, D, calls a timing


def mean_ms(fn, reps):
    fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    print(f"CPU, {torch.get_num_threads()} threads, bfloat16; ms a call, guard off / on, {args.rounds} rounds")
    for b, h, n, d, reps in SHAPES:
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(b, h, n, d, generator=g) for _ in range(3))
        q, k, v = q.bfloat16(), (k + 4 * torch.randn(d, generator=g)).bfloat16(), v.bfloat16()
        times = {"off": [], "on": []}
        blocks = torch_sage.guard_counts()["blocks"]
        for _ in range(args.rounds):
            for mode in times:
                os.environ["SAGEATTN_SK1_GUARD"] = mode
                times[mode].append(mean_ms(lambda: torch_sage.attention(q, k, v), reps))
        del os.environ["SAGEATTN_SK1_GUARD"]
        flagged = torch_sage.guard_counts()["blocks"] - blocks
        off, on = sum(times["off"]) / args.rounds, sum(times["on"]) / args.rounds
        print(f"{b}x{h}x{n}x{d}: off {' '.join(f'{t:.1f}' for t in times['off'])}, on "
              f"{' '.join(f'{t:.1f}' for t in times['on'])}: {100 * (on / off - 1):+.1f}% (blocks flagged: {flagged})")


if __name__ == "__main__":
    main()
