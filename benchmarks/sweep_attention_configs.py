"""Measures the Triton attention kernel's launch configurations (BLOCK_M, BLOCK_N, num_warps, num_stages) on
pre-quantized inputs, kernel only, to fill the table in torch_sage/attention_configs.py: long inputs
(``--part configs``) and short ones (``--part short``: 256-4608 tokens, where the grid is small). Also splits a
short call's wall time into its parts (prologue, V quantization, attention kernel, whole op).

python benchmarks/sweep_attention_configs.py [--out DIR] [--part configs|short|all]
"""
import argparse
import os

import torch

import torch_sage  # noqa: F401
from torch_sage import triton_attention as ta
from timing import device_ms, wall_ms

CANDIDATES = {
    (128, False): [(128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2), (128, 64, 4, 3),
                   (64, 64, 4, 3), (64, 128, 4, 3)],
    (64, False): [(128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3), (128, 128, 4, 3), (128, 64, 4, 4),
                  (64, 64, 4, 4)],
    (128, True): [(128, 64, 8, 3), (64, 64, 8, 2), (128, 128, 8, 3), (64, 64, 4, 3)],
    (64, True): [(128, 64, 8, 3), (64, 64, 4, 3), (128, 64, 4, 3)],
}
SHAPES = {128: [(1, 40, 16384, 128, False), (1, 32, 8192, 128, True)], 64: [(1, 48, 17776, 64, False)]}
SHORT_CANDIDATES = [(128, 64, 4, 3), (128, 64, 8, 3), (64, 64, 4, 3), (64, 64, 4, 2), (64, 32, 4, 3), (64, 64, 8, 3)]
SHORT_SHAPES = [(1, 40, n, 128) for n in (256, 512, 1024, 2048, 4608)] + [(2, 10, 4096, 64), (1, 24, 1024, 64)]


def sweep(shapes, candidates, fp8_modes, lines):
    for b, h, n, d, causal in shapes:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, k, "HND", d ** -0.5, True)
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        for fp8 in fp8_modes:
            vv, vs = torch.ops.sage.quant_v_fp8(v, "HND") if fp8 else (v, None)
            for cfg in candidates(d, fp8, causal):
                try:
                    ms = device_ms(lambda cfg=cfg: ta.qk_int8_attention_triton(
                        qi, qs, ki, ks, vv, vs, n, "HND", causal, torch.bfloat16, config=cfg), 50)
                    line = f"B={b} H={h} N={n} D={d} fp8={fp8} causal={causal} cfg={cfg}: {ms:.4f} ms " \
                           f"{flops / ms / 1e9:.0f} TOPS"
                except Exception as e:  # noqa: BLE001  (out of shared memory, etc.)
                    line = f"B={b} H={h} N={n} D={d} fp8={fp8} causal={causal} cfg={cfg}: failed " \
                           f"{type(e).__name__}: {str(e)[:80]}"
                print(line, flush=True)
                lines.append(line)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=".")
    p.add_argument("--part", choices=["configs", "short", "all"], default="configs")
    args = p.parse_args()
    lines = []
    if args.part in ("configs", "all"):
        shapes = [s for d in SHAPES for s in SHAPES[d]]
        sweep(shapes, lambda d, fp8, causal: CANDIDATES.get((d, causal), []) if not (fp8 and causal) else [],
              (False, True), lines)
    if args.part in ("short", "all"):
        sweep([(b, h, n, d, False) for b, h, n, d in SHORT_SHAPES], lambda d, fp8, causal: SHORT_CANDIDATES,
              (False,), lines)
    # Where a short call's time goes (wall time per call, host included).
    q = torch.randn(1, 40, 256, 128, device="cuda", dtype=torch.bfloat16)
    qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, q, "HND", 0.088, True)
    parts = {
        "prologue (HIP), smooth_k": lambda: torch.ops.sage.quant_qk_int8(q, q, "HND", 0.088, True),
        "prologue (HIP), no smooth_k": lambda: torch.ops.sage.quant_qk_int8(q, q, "HND", 0.088, False),
        "quant_v_fp8": lambda: torch.ops.sage.quant_v_fp8(q, "HND"),
        "kernel op (precompiled)": lambda: torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, q, None, 256, "HND",
                                                                            False, torch.bfloat16),
        "kernel (Triton JIT)": lambda: ta.qk_int8_attention_triton(qi, qs, ki, ks, q, None, 256, "HND", False,
                                                                   torch.bfloat16),
        "sage.attention auto": lambda: torch.ops.sage.attention(q, q, q),
        "SDPA": lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q),
    }
    for name, fn in parts.items():
        line = f"short call N=256 H=40 D=128, {name}: {1e3 * wall_ms(fn):.1f} us"
        print(line, flush=True)
        lines.append(line)
    with open(os.path.join(args.out, "sweep_attention_configs.log"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
