"""Measures the Triton attention kernel's launch configurations (BLOCK_M, BLOCK_N, num_warps, num_stages) on
pre-quantized inputs, kernel only, to fill the table in torch_sage/triton_attention.py::_config. Also splits
a short call's wall time into its parts (prologue, V quantization, attention kernel, whole op).

python benchmarks/sweep_attention_configs.py [--out DIR] [--part configs|transposed-v|all]
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


def transposed_v_experiment():
    """fp8 V stored [B, H, D, N] (tokens contiguous, the K-major operand Hopper's fp8 wgmma wants) against the
    [B, H, N, D] layout the op uses now: same kernel, V strides swapped, outputs compared."""
    lines = []
    b, h, n, d = 1, 40, 16384, 128
    q = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
    qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, q, "HND", d ** -0.5, True)
    v8, vs = torch.ops.sage.quant_v_fp8(v, "HND")
    v8t = v8.transpose(2, 3).contiguous()  # [B, H, D, N]
    flops = 4 * b * h * n * n * d
    for cfg in [(128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 3)]:
        bm, bn, warps, stages = cfg
        outs = {}
        for name, vv, strides in (("[N, D]", v8, (v8.stride(0), v8.stride(1), v8.stride(2), 1)),
                                  ("[D, N]", v8t, (v8t.stride(0), v8t.stride(1), 1, v8t.stride(2)))):
            out = torch.empty(b, h, n, d, device="cuda", dtype=torch.bfloat16)
            lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
            run = lambda vv=vv, strides=strides, out=out, lse=lse: ta._qk_int8_attn_fwd[(n // bm, h, b)](  # noqa: E731
                qi, qs, ki, ks, vv, vs, out, lse, *strides, out.stride(0), out.stride(1), out.stride(2),
                h, h, n, n, qi.size(2), ki.size(2), BLOCK_M=bm, BLOCK_N=bn, HEAD_DIM=d, HEAD_DIM_PAD=d,
                IS_CAUSAL=False, FP8=True, EMULATE=False, num_warps=warps, num_stages=stages)
            try:
                ms = device_ms(run)
                outs[name] = out
                line = f"fp8 V {name} cfg={cfg}: {ms:.3f} ms {flops / ms / 1e9:.0f} TOPS"
            except Exception as e:  # noqa: BLE001
                line = f"fp8 V {name} cfg={cfg}: failed {type(e).__name__}: {str(e)[:80]}"
            print(line, flush=True)
            lines.append(line)
        if len(outs) == 2:
            diff = (outs["[N, D]"].float() - outs["[D, N]"].float()).abs().max().item()
            lines.append(f"  max |difference| between layouts: {diff:.3g}")
            print(lines[-1], flush=True)
    return lines


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=".")
    p.add_argument("--part", choices=["configs", "transposed-v", "all"], default="configs")
    args = p.parse_args()
    original = ta._config
    lines = []
    for (d, fp8), cands in (CANDIDATES if args.part in ("configs", "all") else {}).items():
        for b, h, n, _, causal in SHAPES[d]:
            if fp8 and causal:
                continue
            q = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
            qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, k, "HND", d ** -0.5, True)
            vv, vs = torch.ops.sage.quant_v_fp8(v, "HND") if fp8 else (v, None)
            flops = 4 * b * h * n * n * d / (2 if causal else 1)
            for cfg in cands:
                ta._config = lambda *a, cfg=cfg: cfg
                try:
                    ms = device_ms(lambda: ta.qk_int8_attention_triton(qi, qs, ki, ks, vv, vs, n, "HND", causal,
                                                                       torch.bfloat16))
                    line = f"D={d} fp8={fp8} causal={causal} N={n} cfg={cfg}: {ms:.3f} ms {flops / ms / 1e9:.0f} TOPS"
                except Exception as e:  # noqa: BLE001  (out of shared memory, etc.)
                    line = f"D={d} fp8={fp8} causal={causal} N={n} cfg={cfg}: failed {type(e).__name__}: {str(e)[:80]}"
                print(line, flush=True)
                lines.append(line)
            ta._config = original
    if args.part in ("transposed-v", "all"):
        lines += transposed_v_experiment()
    # Where a short call's time goes (wall time per call, host included).
    q = torch.randn(1, 40, 256, 128, device="cuda", dtype=torch.bfloat16)
    qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, q, "HND", 0.088, True)
    parts = {
        "prologue (HIP)": lambda: torch.ops.sage.quant_qk_int8(q, q, "HND", 0.088, True),
        "quant_v_fp8": lambda: torch.ops.sage.quant_v_fp8(q, "HND"),
        "kernel op (Triton)": lambda: torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, q, None, 256, "HND", False,
                                                                       torch.bfloat16),
        "Triton wrapper direct": lambda: ta.qk_int8_attention_triton(qi, qs, ki, ks, q, None, 256, "HND", False,
                                                                     torch.bfloat16),
        "sage.attention fp16": lambda: torch.ops.sage.attention(q, q, q),
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
