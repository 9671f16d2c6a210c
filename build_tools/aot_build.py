"""Ahead-of-time compile of the Triton kernels of the default GPU path, for the C++ launcher in torch_sage._C: build
tooling, run by setup.py, never imported by torch_sage.

setup.py calls ``build`` for each arch of TORCH_CUDA_ARCH_LIST / PYTORCH_ROCM_ARCH. No GPU is needed: Triton's
wheel carries ptxas (cubin) and links hsaco itself. The output is ``images.bin`` (the images, concatenated) and
``aot_images.cpp``, which embeds the blob and lists each image with the metadata its launch needs (kernel name,
warps, shared memory, tile sizes, the argument signature and how many scratch pointers this Triton version
appends). csrc/ops/gpu_triton_kernels.cpp finds an image by (arch, key), checks its signature against the
arguments it passes, and launches it; kernels not listed here run through Triton's JIT with a warning.

The kernel set is every specialization the dispatcher can ask for: the attention kernel for padded head_dim
64/128/256, causal or not, each (V, out) dtype pair sage::attention produces, in two variants ("fast": head_dim
equal to its padded size with 16-byte aligned V/out rows; "any": everything else). An image's key is
``ATTENTION_KEY`` filled in; the table carries that template, so the launcher fills in the same one for a call
(csrc/ops/gpu_triton_kernels.cpp). (The quantization kernels of the default path are hand-written, csrc/hip.)
"""
import concurrent.futures
import hashlib
import importlib
import importlib.machinery
import importlib.util
import multiprocessing
import os
import re
import sys
from typing import Dict, List, NamedTuple, Tuple

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

SOURCES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "torch_sage")


def _source_module(name: str):
    """torch_sage/<name>.py of this source tree, imported without torch_sage/__init__.py (which loads the _C being
    built): the folder is imported as a namespace package under a name of its own, so relative imports work and
    an installed torch_sage is neither used nor shadowed."""
    package = "_torch_sage_sources"
    if package not in sys.modules:
        spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
        spec.submodule_search_locations = [SOURCES]
        sys.modules[package] = importlib.util.module_from_spec(spec)
    return importlib.import_module(f"{package}.{name}")


ta = _source_module("triton_attention")  # the kernels; the compile workers (forked) inherit it
attention_config = _source_module("attention_configs").attention_config
contract = _source_module("contract")

# (V dtype, out dtype) of the attention kernel: accurate mode (V is the 16-bit input; float32 inputs are computed
# as bfloat16 with a float32 out) and fast mode (fp8 V).
ATTENTION_DTYPES = (("fp16", "fp16"), ("bf16", "bf16"), ("bf16", "fp32"),
                    ("fp8e4nv", "fp16"), ("fp8e4nv", "bf16"), ("fp8e4nv", "fp32"))

# Argument types of the attention kernel (a Triton signature, in the kernel's argument order), all 32-bit in the
# "fast" variant (64-bit batch/head strides cost 175 registers a thread against 126, one CTA an SM instead of two);
# the "any" variant takes 64-bit batch/head strides (a V of over 2^31 elements). The kernel forms 64-bit bases
# from them either way; the C++ launcher checks that the values fit.
_ATTN_TYPES = {"Q": "*i8", "QS": "*fp32", "K": "*i8", "KS": "*fp32", "V": "*{v}", "VS": "*fp32", "O": "*{o}",
               "LSE": "*fp32", "stride_vb": "i32", "stride_vh": "i32", "stride_vn": "i32", "stride_ob": "i32",
               "stride_oh": "i32", "stride_on": "i32", "heads_q": "i32", "heads_kv": "i32", "qo_len": "i32",
               "kv_len": "i32", "nq_pad": "i32", "nk_pad": "i32", "head_dim": "i32"}
_ATTN_ANY_I64 = ("stride_vb", "stride_vh", "stride_ob", "stride_oh")
# Arguments always 16-byte aligned / divisible by 16 (allocated by torch_sage, padded lengths) ...
_ATTN_ALIGNED = ("Q", "QS", "K", "KS", "VS", "O", "LSE", "nq_pad", "nk_pad")
# ... and those that are so only in the "fast" variant (the launcher checks them; head_dim is the padded size).
_ATTN_FAST_ALIGNED = ("V", "stride_vb", "stride_vh", "stride_vn", "stride_ob", "stride_oh", "stride_on", "head_dim")

# What an attention image computes. The one definition of the key's format: written into the generated table as
# kAttentionKeyTemplate, whose fields the C++ launcher fills (triton_images.h fill_template) with the same names.
ATTENTION_KEY = "attn/d{head_dim_pad}/c{causal}/v{v}/o{out}/{variant}"


def attention_key(head_dim_pad: int, causal: bool, v: str, out: str, fast: bool) -> str:
    return ATTENTION_KEY.format(head_dim_pad=head_dim_pad, causal=int(causal), v=v, out=out,
                                variant="fast" if fast else "any")


class Spec(NamedTuple):
    key: str
    kernel: str  # attribute name of the @triton.jit function in triton_attention
    types: Dict[str, str]  # non-constexpr arguments -> Triton type
    constexprs: Dict[str, object]
    aligned: Tuple[str, ...]
    num_warps: int
    num_stages: int
    tile: Tuple[int, int]  # (BLOCK_M, BLOCK_N)

    @property
    def signature(self) -> str:
        return ",".join(self.types.values())


def has_e4m3(arch: str) -> bool:
    """Whether Triton has float8_e4m3fn on arch: not on NVIDIA before sm_89 (Ampere), where sage::attention's fast
    mode runs the accurate one (csrc/ops/attention.cpp)."""
    return not (arch.startswith("sm_") and int(arch[3:].rstrip("a")) < 89)


def kernel_set(arch: str) -> List[Spec]:
    """Every kernel the C++ dispatcher can launch on arch ("sm_90", "gfx1201", ...)."""
    specs = []
    for dp in contract.HEAD_DIMS_PAD:
        for v, o in ATTENTION_DTYPES:
            fp8 = v == "fp8e4nv"
            if fp8 and not has_e4m3(arch):
                continue
            for causal in (False, True):
                for fast in (True, False):
                    types = {n: "i64" if n in _ATTN_ANY_I64 and not fast else t.format(v=v, o=o)
                             for n, t in _ATTN_TYPES.items()}
                    bm, bn, warps, stages = attention_config(arch, dp, fp8, fast)
                    const = {"BLOCK_M": bm, "BLOCK_N": bn, "QBLK": contract.BLOCK_Q, "KBLK": contract.BLOCK_K,
                             "HEAD_DIM_PAD": dp, "MASK_D": not fast, "IS_CAUSAL": causal, "FP8": fp8,
                             "P_SHIFT": contract.LOG2_FP8_MAX if fp8 else 0.0, "EMULATE": False}
                    aligned = _ATTN_ALIGNED + (_ATTN_FAST_ALIGNED if fast else ())
                    specs.append(Spec(attention_key(dp, causal, v, o, fast), "_qk_int8_attn_fwd", types, const,
                                      aligned, warps, stages, (bm, bn)))
    return specs


def target(arch: str) -> GPUTarget:
    """"sm_90" -> cuda 90; "gfx1201" -> hip gfx1201 (wave32 on RDNA, wave64 elsewhere)."""
    if arch.startswith("sm_"):
        return GPUTarget("cuda", int(arch[3:]), 32)
    if arch.startswith("gfx"):
        return GPUTarget("hip", arch, 32 if arch.startswith(("gfx10", "gfx11", "gfx12")) else 64)
    raise ValueError(f"unknown arch {arch!r} (expected sm_XY or gfxNNNN)")


def _param_count(asm: Dict[str, str], backend: str) -> int:
    """Kernel parameters of the compiled image, read from its PTX entry or its amdgcn kernel metadata."""
    if backend == "cuda":
        ptx = asm["ptx"]
        entry = ptx[ptx.index(".entry"):]
        return entry[: entry.index(")")].count(".param")
    amdgcn = asm["amdgcn"]
    args = amdgcn[amdgcn.index(".args:"):]
    args = args[: args.index(".group_segment_fixed_size")]
    return len(re.findall(r"\.value_kind:\s+(?!hidden_)\w+", args))


def compile_spec(spec: Spec, arch: str) -> Tuple[bytes, dict]:
    """(image, metadata) of one kernel. Raises if the image needs what the C++ launcher does not provide."""
    fn = getattr(ta, spec.kernel)
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in spec.constexprs:
            signature[name] = "constexpr"
        else:
            signature[name] = spec.types[name]
            if name in spec.aligned:
                attrs[(i,)] = [["tt.divisibility", 16]]
    missing = set(spec.types) - set(signature)
    if missing:
        raise ValueError(f"{spec.key}: {sorted(missing)} are not arguments of {spec.kernel}")
    tgt = target(arch)
    k = triton.compile(ASTSource(fn, signature, spec.constexprs, attrs), target=tgt,
                       options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})
    md = k.metadata
    for what in ("global_scratch_size", "profile_scratch_size"):
        if getattr(md, what, 0):
            raise RuntimeError(f"{spec.key} on {arch}: needs {what}={getattr(md, what)}; the launcher passes none")
    if getattr(md, "num_ctas", 1) != 1 or getattr(md, "launch_cooperative_grid", False):
        raise RuntimeError(f"{spec.key} on {arch}: clusters / cooperative launch are not supported by the launcher")
    scratch = _param_count(k.asm, tgt.backend) - len(spec.types)
    if not 0 <= scratch <= 2:
        raise RuntimeError(f"{spec.key} on {arch}: {scratch} parameters beyond the signature")
    image = k.asm["cubin" if tgt.backend == "cuda" else "hsaco"]
    return image, {"name": md.name, "shared": int(md.shared), "num_warps": int(md.num_warps),
                   "threads_per_warp": int(tgt.warp_size), "scratch": scratch}


def _compile_job(job):
    arch, spec = job
    image, md = compile_spec(spec, arch)
    return arch, spec, image, md


def compile_all(archs: List[str], jobs: int = 0) -> List[Tuple[str, Spec, bytes, dict]]:
    """Compiles kernel_set(arch) for every arch, in parallel processes where the platform forks."""
    work = [(arch, spec) for arch in archs for spec in kernel_set(arch)]
    jobs = jobs or os.cpu_count() or 1
    if jobs > 1 and "fork" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("fork")  # the workers inherit the modules loaded here
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            return list(pool.map(_compile_job, work))
    return [_compile_job(w) for w in work]


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_sources(results, out_dir: str) -> str:
    """Writes images.bin and aot_images.cpp under out_dir; returns the .cpp path. An empty result gives an
    empty table (every kernel then runs through the JIT fallback)."""
    os.makedirs(out_dir, exist_ok=True)
    blob_path = os.path.abspath(os.path.join(out_dir, "images.bin"))
    rows, offset, blob = [], 0, bytearray()
    for arch, spec, image, md in results:
        pad = (-offset) % 16
        blob += b"\0" * pad
        offset += pad
        rows.append(f"    {{{_c_string(arch)}, {_c_string(spec.key)}, {_c_string(md['name'])}, "
                    f"{_c_string(spec.signature)}, {md['scratch']}, {md['num_warps']}, {md['threads_per_warp']}, "
                    f"{md['shared']}, {spec.tile[0]}, {spec.tile[1]}, {offset}, {len(image)}}},")
        blob += image
        offset += len(image)
    blob += b"\0" * 16  # the blob is never empty
    with open(blob_path, "wb") as f:
        f.write(blob)
    digest = hashlib.sha256(blob).hexdigest()[:16]
    if '"' in blob_path or "\\" in blob_path:
        raise ValueError(f"cannot embed {blob_path}: quote or backslash in the path")
    src = f"""// Generated by build_tools/aot_build.py (Triton {triton.__version__}); do not edit.
// {len(rows)} images, {len(blob)} bytes, sha256 {digest} (a changed blob changes this file, so ninja rebuilds it).
#include "triton_images.h"

// The images are embedded as one read-only blob, assembled from images.bin.
__asm__(".section .rodata\\n.balign 16\\n.globl sage_triton_images_blob\\nsage_triton_images_blob:\\n"
        ".incbin \\"{blob_path}\\"\\n.previous\\n");
extern "C" const unsigned char sage_triton_images_blob[];

namespace sage {{
namespace aot {{

const char kTritonVersion[] = {_c_string(triton.__version__)};
const char kAttentionKeyTemplate[] = {_c_string(ATTENTION_KEY)};
const Image kImages[] = {{
{chr(10).join(rows) if rows else '    {"", "", "", "", 0, 0, 0, 0, 0, 0, 0, 0},'}
}};
const size_t kNumImages = {len(rows)};
const unsigned char* image_blob() {{ return sage_triton_images_blob; }}

}}  // namespace aot
}}  // namespace sage
"""
    cpp_path = os.path.join(out_dir, "aot_images.cpp")
    old = open(cpp_path).read() if os.path.exists(cpp_path) else None
    if old != src:
        with open(cpp_path, "w") as f:
            f.write(src)
    return cpp_path


def build(archs: List[str], out_dir: str, jobs: int = 0) -> str:
    """Compiles the kernel set for archs and writes the sources; returns the .cpp path."""
    return write_sources(compile_all(archs, jobs) if archs else [], out_dir)
