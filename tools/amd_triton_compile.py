"""Compiles torch_sage's Triton prologue (the JIT-only alternate, SAGEATTN_SK1_PROLOGUE=triton) for an AMD target
without a GPU and reports what the machine code uses. The attention kernels compiled ahead of time for the default
path are checked by test/test_aot_build.py.

python tools/amd_triton_compile.py [--arch gfx1201] [--quick]

Prints one JSON object: {"triton": version, "arch": ..., "kernels": [{"name", "dtype", "config", "seconds",
"wmma": {instruction: count}, "scratch_instructions", "global_loads", "private_segment_fixed_size", "vgpr_count",
"vgpr_spill_count", "sgpr_spill_count", "wavefront_size"}, ...], "skipped": [reason, ...]}.

Each kernel is compiled for the arguments its Python wrapper passes for a typical call (B=2, H=24, N=4096, D=128 or
64, contiguous HND tensors): the arguments go through Triton's own launcher specialization (native_specialize_impl:
16-byte alignment and divisibility by 16, buffer-op pointer ranges, integers equal to 1 made constant), so the code
is what a GPU run would compile for those shapes. Triton compiles AMD code objects with no GPU and no ROCm
installed (its LLVM and lld are inside the wheel); running one needs a GPU.

test/test_amd_compile.py runs this in a subprocess: the Triton interpreter must be off, and the test conftest turns
it on when there is no GPU.
"""
import argparse
import json
import os
import re
import sys
import time

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("amd_triton_compile.py: unset TRITON_INTERPRET (interpreted kernels cannot be compiled)")

import torch  # noqa: E402
import triton  # noqa: E402
from triton._C.libtriton import native_specialize_impl  # noqa: E402
from triton.backends.amd.compiler import HIPBackend  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from torch_sage import triton_quant as tq  # noqa: E402

# Metadata fields of the code object (the amdgcn text ends with the YAML note that the hsaco carries).
_META = ("private_segment_fixed_size", "vgpr_count", "vgpr_spill_count", "sgpr_spill_count", "wavefront_size")
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64,
           "i8": torch.int8, "fp8e4nv": torch.float8_e4m3fn}

B, H, N = 2, 24, 4096  # the typical call every kernel is specialized for


class Ptr:
    """A pointer argument: specialized like a freshly allocated tensor of this dtype (16-byte aligned, < 2 GiB)."""

    def __init__(self, dtype):
        self.tensor = torch.empty(16, dtype=_DTYPES[dtype])


def _analyse(asm):
    # Instruction lines start with whitespace and a mnemonic; labels, directives (.x) and comments (;) do not.
    ops = re.findall(r"^\s+([a-z][a-z0-9_]*)\b", asm, flags=re.M)
    wmma = {}
    for op in ops:
        if op.startswith("v_wmma"):
            wmma[op] = wmma.get(op, 0) + 1
    info = {"wmma": wmma, "scratch_instructions": sum(op.startswith("scratch_") for op in ops),
            "global_loads": sorted({op for op in ops if op.startswith(("global_load", "buffer_load"))})}
    for key in _META:
        m = re.search(rf"^\s+\.{key}:\s+(\d+)", asm, flags=re.M)
        info[key] = int(m.group(1)) if m else None
    return info


def _source(fn, args, constexprs):
    """ASTSource for fn called with args (name -> Ptr / int / float) and constexprs, specialized as Triton's
    launcher specializes a real call."""
    signature, constants, attrs = {}, dict(constexprs), {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
            continue
        value = args[name]
        value = value.tensor if isinstance(value, Ptr) else value
        kind, attr = native_specialize_impl(HIPBackend, value, False, True, True)
        signature[name] = kind
        if kind == "constexpr":  # an integer equal to 1
            constants[name] = attr
        elif attr:
            attrs[(i,)] = HIPBackend.parse_attr(attr)
    return ASTSource(fn, signature=signature, constexprs=constants, attrs=attrs)


def _compile(fn, args, constexprs, target, num_warps, num_stages):
    t0 = time.perf_counter()
    options = {"num_warps": num_warps}
    if num_stages is not None:  # else the backend's default, as a launch without num_stages gets
        options["num_stages"] = num_stages
    k = triton.compile(_source(fn, args, constexprs), target=target, options=options)
    return k.asm["amdgcn"], time.perf_counter() - t0


def _quant_jobs(quick):
    """The launches of triton_quant.quant_qk_int8_triton and quant_v_fp8_triton for [B, H, N, 128] HND inputs."""
    d = dp = 128
    sb, sh, sn = H * N * d, N * d, d
    jobs = []
    for dt in ("fp16",) if quick else ("fp16", "bf16"):
        for block, mult, smooth in ((tq.BLOCK_Q, 0.1275, False), (tq.BLOCK_K, None, True)):
            n_blocks = N // block
            args = {"x_ptr": Ptr(dt), "out_ptr": Ptr("i8"), "scale_ptr": Ptr("fp32"),
                    "part_ptr": Ptr("fp64") if smooth else None, "mean_ptr": Ptr("fp32") if smooth else None,
                    "mult": mult, "n_tokens": N, "n_blocks": n_blocks, "heads": H, "stride_b": sb, "stride_h": sh,
                    "stride_n": sn, "head_dim": d}
            const = {"BLOCK": block, "DP": dp, "USE_MULT": mult is not None, "SMOOTH": smooth,
                     "CHUNKS": tq.MEAN_CHUNKS}
            jobs.append(("_quant_blocks_kernel", tq._quant_blocks_kernel, args, const, 4, None, dt))
    sums = {"x_ptr": Ptr("fp16"), "part_ptr": Ptr("fp64"), "n_tokens": N, "heads": H, "stride_b": sb,
            "stride_h": sh, "stride_n": sn, "head_dim": d}
    small = {"CHUNKS": tq.MEAN_CHUNKS, "ROWS": 32, "DP": dp}
    jobs.append(("_column_sums_kernel", tq._column_sums_kernel, sums, small, 4, None, "fp16"))
    return jobs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="gfx1201")
    p.add_argument("--quick", action="store_true", help="fewer configurations")
    args = p.parse_args()
    target = GPUTarget("hip", args.arch, 32 if args.arch.startswith(("gfx10", "gfx11", "gfx12")) else 64)
    jobs, skipped = _quant_jobs(args.quick), []
    kernels = []
    for name, fn, kargs, const, warps, stages, dtype in jobs:
        asm, seconds = _compile(fn, kargs, const, target, warps, stages)
        kernels.append({"name": name, "dtype": dtype, "config": {**const, "num_warps": warps, "num_stages": stages},
                        "seconds": round(seconds, 2), **_analyse(asm)})
    json.dump({"triton": triton.__version__, "arch": args.arch, "kernels": kernels, "skipped": skipped}, sys.stdout,
              indent=1)
    print()


if __name__ == "__main__":
    main()
