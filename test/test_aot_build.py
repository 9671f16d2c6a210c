"""The build-time compile of the default GPU path's Triton kernels (build_tools/aot_build.py), run without a GPU for
sm_90 and gfx1201/gfx1200, with the images checked: the matrix instructions meant (IGMMA for Q.K, HGMMA or QGMMA for
P.V on sm_90; v_wmma on gfx12), no register spills, gfx1200 code identical to gfx1201's, metadata the C++ launcher
can use, and a generated table whose embedded blob holds each image at its offset.

On a GPU: the precompiled kernels give bit-identical results to Triton's JIT of the same source and config, and a
fresh process with an empty Triton cache runs the default path without importing Triton.

The full kernel set (72 kernels an arch) takes ~3 minutes on 2 cores; results are shared by the tests of a module.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import gpu_device

ROOT = Path(__file__).resolve().parents[1]
BUILD_TOOLS = ROOT / "build_tools"
REQUIRED = os.environ.get("SAGE_REQUIRE_AMD_COMPILE") == "1"  # CI: a missing tool fails instead of skipping


def _aot_build():
    pytest.importorskip("triton")
    if str(BUILD_TOOLS) not in sys.path:
        sys.path.insert(0, str(BUILD_TOOLS))
    import aot_build  # its key functions and tables only: the compiles run in a subprocess

    return aot_build


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """{arch: [(spec, image, metadata)]} for sm_90, gfx1201 and gfx1200, compiled in a subprocess (the test
    conftest may have switched Triton to its interpreter in this one) with an empty Triton cache."""
    if importlib_find("triton") is None:
        pytest.skip("Triton is not installed")
    out = tmp_path_factory.mktemp("aot")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(out / "triton-cache")
    script = textwrap.dedent(f"""
        import json, pickle, sys
        sys.path.insert(0, {str(BUILD_TOOLS)!r})
        import aot_build
        results = aot_build.compile_all(["sm_90", "gfx1201", "gfx1200"])
        aot_build.write_sources([r for r in results if r[0] == "sm_90"], {str(out)!r})
        pickle.dump(results, open({str(out / "results.pkl")!r}, "wb"))
    """)
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stderr[-4000:]
    import pickle

    _aot_build()  # the pickled Specs are aot_build's
    with open(out / "results.pkl", "rb") as f:
        results = pickle.load(f)
    by_arch = {}
    for arch, spec, image, md in results:
        by_arch.setdefault(arch, []).append((spec, image, md))
    return by_arch, out


def importlib_find(name):
    import importlib.util

    return importlib.util.find_spec(name)


def _tool(name):
    """Triton's bundled cuobjdump, or an LLVM tool of clang-19."""
    if name == "cuobjdump":
        import triton

        path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        return str(path) if path.exists() else None
    return shutil.which(name)


def test_kernel_set_covers_every_dispatch(compiled):
    aot_build = _aot_build()
    by_arch, _ = compiled
    for arch in ("sm_90", "gfx1201", "gfx1200"):
        keys = {spec.key for spec, _, _ in by_arch[arch]}
        for dp in (64, 128, 256):
            for v, o in aot_build.ATTENTION_DTYPES:
                for causal in (False, True):
                    for fast in (False, True):
                        assert aot_build.attention_key(dp, causal, v, o, fast) in keys
        assert len(keys) == len(by_arch[arch]) == 72


def test_unmasked_variant_rule_meets_the_fast_images_declaration():
    """The rule that picks the "fast" image (csrc/ops/triton_variant.h, through its op) admits exactly the calls
    that meet what aot_build.py declares that image assumes: no head_dim mask, the _ATTN_FAST_ALIGNED arguments
    divisible by 16 and every 32-bit argument in range."""
    import random

    import torch_sage  # noqa: F401  (registers the op)
    from torch_sage.contract import padded_head_dim

    aot_build = _aot_build()
    fast = next(s for s in aot_build.kernel_set("sm_90") if s.key.endswith("/fast"))
    assert fast.constexprs["MASK_D"] is False
    names = ("stride_vb", "stride_vh", "stride_vn", "stride_ob", "stride_oh", "stride_on")
    values = (0, 8, 16, 48, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16, 2**40)
    rng = random.Random(0)
    admitted = 0
    for _ in range(3000):
        head_dim = rng.choice((48, 64, 80, 128, 256))
        address = 0x7F0000000000 + rng.choice((0, 0, 0, 4, 8))
        strides = [rng.choice(values[:4]) if rng.random() < 0.8 else rng.choice(values) for _ in names]
        args = dict(zip(names, strides), V=address, head_dim=head_dim)
        declared = (head_dim == padded_head_dim(head_dim)
                    and all(args[n] % 16 == 0 for n in aot_build._ATTN_FAST_ALIGNED)
                    and all(args[n] < 2**31 for n in args if fast.types.get(n) == "i32"))
        rule = torch.ops.sage._triton_unmasked_variant(head_dim, padded_head_dim(head_dim), address, strides)
        assert rule == declared, (head_dim, hex(address), strides)
        admitted += rule
    assert 0 < admitted < 3000


def test_configs_by_triton_version():
    """The table keys three entries by the Triton that compiles them, where the older entry spills registers with a
    newer Triton (torch_sage/attention_configs.py). sm_90: Dp=128 with fp16/bf16 V, aligned, is F6's measured
    (128, 64, 4, 3) with Triton 3.6 and 3.7 and (128, 64, 8, 3) from 3.8 on; Dp=128 with fp8 V, not aligned, is
    (128, 64, 8, 3) up to 3.8 and (128, 32, 8, 3) from 3.9 on; every other sm_90 entry is the same for each version.
    gfx12: Dp=128 with fp16/bf16 V, aligned, takes 8 warps with Triton 3.8. Triton 3.6 and 3.7 (the benchmarks'
    and CI's) keep the table they had. The kernel set compiled here follows the installed Triton."""
    aot_build = _aot_build()
    import triton

    config = aot_build.attention_config
    # (head_dim_pad, aligned) -> (16-bit V, fp8 V): the table with Triton 3.6 and 3.7
    older = {(64, True): ((128, 64, 8, 3),) * 2, (64, False): ((128, 64, 8, 3),) * 2,
             (128, True): ((128, 64, 4, 3), (128, 64, 8, 3)), (128, False): ((128, 64, 8, 3),) * 2,
             (256, True): ((64, 64, 8, 2),) * 2, (256, False): ((64, 32, 8, 2),) * 2}
    for version in ((3, 6), (3, 7), (3, 8), (3, 9)):
        for (dp, aligned), entries in older.items():
            for fp8 in (False, True):
                got, expect = config("sm_90", dp, fp8, aligned, version), entries[fp8]
                if dp == 128 and not fp8 and aligned and version >= (3, 8):
                    expect = (128, 64, 8, 3)
                if dp == 128 and fp8 and not aligned and version >= (3, 9):
                    expect = (128, 32, 8, 3)
                assert got == expect, (version, dp, fp8, aligned)
    installed = tuple(int(x) for x in triton.__version__.split(".")[:2])
    for arch, key, fp8, aligned in (("sm_90", "attn/d128/c1/vbf16/obf16/fast", False, True),
                                    ("sm_90", "attn/d128/c0/vfp8e4nv/ofp16/any", True, False),
                                    ("gfx1201", "attn/d128/c1/vbf16/obf16/fast", False, True)):
        spec = {s.key: s for s in aot_build.kernel_set(arch)}[key]
        assert (*spec.tile, spec.num_warps, spec.num_stages) == config(arch, 128, fp8, aligned, installed), key
    # gfx12: Dp=128 with fp16/bf16 V, aligned, is (64, 32, 4, 2) except with Triton 3.8, where it spills
    for arch in ("gfx1201", "gfx1200"):
        for version in ((3, 6), (3, 7), (3, 8), (3, 9)):
            expect = (64, 32, 8, 2) if version == (3, 8) else (64, 32, 4, 2)
            assert config(arch, 128, False, True, version) == expect, (arch, version)
            assert config(arch, 128, True, True, version) == (64, 32, 8, 2), (arch, version)


def test_metadata_is_what_the_launcher_handles(compiled):
    by_arch, _ = compiled
    for arch, items in by_arch.items():
        scratch = {md["scratch"] for _, _, md in items}
        assert len(scratch) == 1 and scratch <= {0, 1, 2}, scratch  # one ABI per Triton version
        for spec, image, md in items:
            assert md["name"] == spec.kernel and md["num_warps"] == spec.num_warps
            assert md["threads_per_warp"] == 32
            assert image[:4] == b"\x7fELF"
            limit = 227 * 1024 if arch == "sm_90" else 64 * 1024
            assert 0 <= md["shared"] <= limit, (arch, spec.key, md)


def test_sm90_sass_uses_wgmma_without_spills(compiled, tmp_path):
    cuobjdump = _tool("cuobjdump")
    if cuobjdump is None:
        pytest.skip("Triton's cuobjdump is missing")
    by_arch, _ = compiled
    for spec, image, _ in by_arch["sm_90"]:
        path = tmp_path / "k.cubin"
        path.write_bytes(image)
        sass = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True, check=True).stdout
        ops = [op.split(".")[0] for op in re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)]
        names = set(ops)
        mma = [i for i, op in enumerate(ops) if op.endswith("GMMA")]
        # Register spills (local memory) inside the main loops, i.e. between the first and the last wgmma: none.
        # (A few spilled scalars saved before the loops and restored after them cost nothing measurable.)
        hot = ops[mma[0]:mma[-1]] if mma else ops
        assert not {"LDL", "STL"} & set(hot), (spec.key, "register spills in the main loop")
        assert "IGMMA" in names, (spec.key, "int8 Q.K not on wgmma")
        pv = "QGMMA" if spec.constexprs["FP8"] else "HGMMA"
        assert pv in names, (spec.key, f"P.V not on {pv}")


def _amd_tools():
    tools = {t: _tool(t) for t in ("llvm-objdump-19", "llvm-readelf-19")}
    if None in tools.values():
        if REQUIRED:
            pytest.fail("clang-19's LLVM tools are required (SAGE_REQUIRE_AMD_COMPILE=1)")
        pytest.skip("llvm-objdump-19 / llvm-readelf-19 not installed")
    return tools


def _amd_code(image, arch, tmp_path, tools):
    path = tmp_path / f"k-{arch}.hsaco"
    path.write_bytes(image)
    dis = subprocess.run([tools["llvm-objdump-19"], "-d", f"--mcpu={arch}", str(path)], capture_output=True,
                         text=True, check=True).stdout
    notes = subprocess.run([tools["llvm-readelf-19"], "--notes", str(path)], capture_output=True, text=True,
                           check=True).stdout
    body = dis[dis.index("Disassembly of section"):]  # without the file name and format header
    return body, notes


@pytest.mark.parametrize("arch", ["gfx1201", "gfx1200"])
def test_gfx12_code_uses_wmma_without_scratch(compiled, arch, tmp_path):
    tools = _amd_tools()
    by_arch, _ = compiled
    for spec, image, _ in by_arch[arch]:
        body, notes = _amd_code(image, arch, tmp_path, tools)
        ops = set(re.findall(r"^\s+([a-z][a-z0-9_]*)\b", body, flags=re.M))
        assert not {op for op in ops if op.startswith("scratch_")}, spec.key
        for key in ("private_segment_fixed_size", "vgpr_spill_count"):
            m = re.search(rf"\.{key}:\s+(\d+)", notes)
            assert m and int(m.group(1)) == 0, (spec.key, key)
        assert re.search(r"\.wavefront_size:\s+32", notes), spec.key
        assert "v_wmma_i32_16x16x16_iu8" in ops, spec.key
        pv = {"fp16": "v_wmma_f32_16x16x16_f16", "bf16": "v_wmma_f32_16x16x16_bf16",
              "fp8e4nv": "v_wmma_f32_16x16x16_fp8_fp8"}[spec.types["V"][1:]]
        assert pv in ops, (spec.key, pv)


def test_gfx1200_code_is_identical_to_gfx1201(compiled, tmp_path):
    tools = _amd_tools()
    by_arch, _ = compiled
    gfx1200 = {spec.key: image for spec, image, _ in by_arch["gfx1200"]}
    for spec, image, _ in by_arch["gfx1201"]:
        a, _ = _amd_code(image, "gfx1201", tmp_path, tools)
        b, _ = _amd_code(gfx1200[spec.key], "gfx1200", tmp_path, tools)
        assert a == b, f"{spec.key}: gfx1201 and gfx1200 code differ"


def test_generated_table_embeds_every_image(compiled, tmp_path):
    """aot_images.cpp compiles, and each table row points at its image's bytes in the embedded blob."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    by_arch, out = compiled
    main = tmp_path / "main.cpp"
    main.write_text(textwrap.dedent("""
        #include <cstdio>
        #include "triton_images.h"
        int main() {
          for (size_t i = 0; i < sage::aot::kNumImages; ++i) {
            const sage::aot::Image& im = sage::aot::kImages[i];
            const unsigned char* p = sage::aot::image_blob() + im.offset;
            unsigned long sum = 0;
            for (size_t j = 0; j < im.size; ++j) sum = sum * 31 + p[j];
            std::printf("%s %s %zu %lu\\n", im.arch, im.key, im.size, sum);
          }
          std::printf("triton %s\\n", sage::aot::kTritonVersion);
        }
    """))
    exe = tmp_path / "table"
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{ROOT / 'csrc' / 'ops'}", str(main), str(out / "aot_images.cpp"),
                    "-o", str(exe)], check=True, capture_output=True)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    import triton

    assert lines[-1] == f"triton {triton.__version__}"
    rows = {line.split()[1]: line.split() for line in lines[:-1]}
    assert len(rows) == len(by_arch["sm_90"])
    for spec, image, _ in by_arch["sm_90"]:
        arch, _, size, digest = rows[spec.key]
        expect = 0
        for byte in image:
            expect = (expect * 31 + byte) % 2**64
        assert arch == "sm_90" and int(size) == len(image) and int(digest) == expect, spec.key


def test_launcher_fills_the_tables_key_template(compiled, tmp_path):
    """The C++ launcher's key for a call (fill_template over the generated kAttentionKeyTemplate, as
    gpu_triton_kernels.cpp attention_key does) is aot_build's key of that image, for every image of the set; a
    template naming a field the launcher does not fill gives "" (an error there), not a key that finds nothing."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    aot_build = _aot_build()
    _, out = compiled
    combos = [(dp, causal, v, o, fast) for dp in (64, 128, 256) for v, o in aot_build.ATTENTION_DTYPES
              for causal in (False, True) for fast in (False, True)]
    calls = "".join(
        f'  show({dp}, {str(causal).lower()}, "{v}", "{o}", {str(fast).lower()});\n' for dp, causal, v, o, fast in combos)
    main = tmp_path / "keys.cpp"
    main.write_text(textwrap.dedent("""
        #include <cstdio>
        #include "triton_images.h"
        static void show(int dp, bool causal, const char* v, const char* o, bool fast) {
          const std::string key = sage::aot::fill_template(sage::aot::kAttentionKeyTemplate,
              {{"head_dim_pad", std::to_string(dp)}, {"causal", causal ? "1" : "0"}, {"v", v}, {"out", o},
               {"variant", fast ? "fast" : "any"}});
          std::printf("%s\\n", key.c_str());
        }
        int main() {
          std::printf("[%s]\\n", sage::aot::fill_template("a/{x}/{y}", {{"x", "1"}}).c_str());
          std::printf("[%s]\\n", sage::aot::fill_template("a/{x", {{"x", "1"}}).c_str());
    """) + calls + "}\n")
    exe = tmp_path / "keys"
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{ROOT / 'csrc' / 'ops'}", str(main), str(out / "aot_images.cpp"),
                    "-o", str(exe)], check=True, capture_output=True)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines[:2] == ["[]", "[]"]
    assert lines[2:] == [aot_build.attention_key(*c) for c in combos]
    keys = {spec.key for spec, _, _ in compiled[0]["sm_90"]}
    assert set(lines[2:]) == keys


# ------------------------------------------------------------------------------------------------------ GPU


def _fresh_process(code, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=600)


FIRST_CALL = """
    import json, os, sys, time, warnings
    t0 = time.perf_counter()
    import torch, torch_sage
    t1 = time.perf_counter()
    dev = "{device}"
    q, k, v = (torch.randn(1, 8, 1000, 128, dtype=torch.bfloat16, device=dev) for _ in range(3))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = torch.ops.sage.attention(q, k, v)
        out = torch.ops.sage.attention(q, k, v, pv_mode="fp8", is_causal=True)
        if dev == "cuda":
            torch.cuda.synchronize()
    t2 = time.perf_counter()
    cache = os.environ["TRITON_CACHE_DIR"]
    print(json.dumps({{"triton_imported": "triton" in sys.modules, "cache": os.listdir(cache) if os.path.isdir(cache) else [],
                       "warnings": [str(x.message) for x in w], "first_call_s": t2 - t1, "finite": bool(out.isfinite().all())}}))
"""


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_default_path_imports_no_triton_and_compiles_nothing(device, tmp_path):
    cache = tmp_path / "triton-cache"
    res = _fresh_process(FIRST_CALL.format(device=device), {"TRITON_CACHE_DIR": str(cache)})
    assert res.returncode == 0, res.stderr[-4000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert report["finite"]
    assert not report["triton_imported"], report
    assert report["cache"] == [], report
    assert not [m for m in report["warnings"] if "Triton" in m or "first use" in m], report["warnings"]


def _quantized(b, hq, hk, n_q, n_k, d, layout, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    shape = lambda h, n: (b, h, n, d) if layout == "HND" else (b, n, h, d)  # noqa: E731
    q = torch.randn(shape(hq, n_q), generator=g).to(dtype).cuda()
    k = (torch.randn(shape(hk, n_k), generator=g) + 2 * torch.randn(d, generator=g)).to(dtype).cuda()
    v = torch.randn(shape(hk, n_k), generator=g).to(dtype).cuda()
    return q, k, v


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128, 80, 256, 40])
@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mode,dtype,out_dtype", [("fp16", torch.float16, torch.float16),
                                                  ("fp16", torch.bfloat16, torch.bfloat16),
                                                  ("fp16", torch.bfloat16, torch.float32),
                                                  ("fp8", torch.float16, torch.float16),
                                                  ("fp8", torch.bfloat16, torch.float32)])
def test_precompiled_kernels_match_the_jit_bit_for_bit(d, layout, causal, mode, dtype, out_dtype, monkeypatch):
    monkeypatch.setenv("SAGEATTN_SK1_SM90", "0")  # the precompiled Triton kernel, also on sm_90
    monkeypatch.setenv("SAGEATTN_SK1_MMA", "0")  # and on sm_80-sm_89 / sm_120
    q, k, v = _quantized(2, 4, 2, 300, 517, d, layout, dtype, seed=d)
    qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, k, layout, d ** -0.5, True)
    if mode == "fp8":  # the hand-written V quantization and the Triton one agree too
        v_in, vs = torch.ops.sage.quant_v_fp8(v, layout)
        v_jit, vs_jit = torch.ops.sage._quant_v_fp8_triton(v, layout)
        assert torch.equal(v_in.view(torch.uint8), v_jit.view(torch.uint8)) and torch.equal(vs, vs_jit)
    else:
        v_in, vs = v, None
    out, lse = torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, v_in, vs, 300, layout, causal, out_dtype)
    out_jit, lse_jit = torch.ops.sage._qk_int8_attention_triton(qi, qs, ki, ks, v_in, vs, 300, layout, causal,
                                                                out_dtype)
    assert out.dtype == out_jit.dtype == out_dtype and out.shape == out_jit.shape
    assert torch.isfinite(out).all()
    assert torch.equal(out, out_jit) and torch.equal(lse, lse_jit)


@pytest.mark.gpu
def test_unaligned_v_takes_the_any_variant_and_matches_the_jit(monkeypatch):
    """A V view at an odd element offset (not 16-byte aligned) and a fused-QKV stride."""
    monkeypatch.setenv("SAGEATTN_SK1_SM90", "0")
    monkeypatch.setenv("SAGEATTN_SK1_MMA", "0")
    qkv = torch.randn(1, 777, 3 * 4 * 128 + 1, dtype=torch.float16, device="cuda")[..., 1:]
    q, k, v = (qkv[..., i * 512:(i + 1) * 512].unflatten(-1, (4, 128)) for i in range(3))  # NHD views
    qi, qs, ki, ks, _ = torch.ops.sage.quant_qk_int8(q, k, "NHD", 128 ** -0.5, True)
    out, lse = torch.ops.sage.qk_int8_attention(qi, qs, ki, ks, v, None, 777, "NHD", False, torch.float16)
    out_jit, lse_jit = torch.ops.sage._qk_int8_attention_triton(qi, qs, ki, ks, v, None, 777, "NHD", False,
                                                                torch.float16)
    assert torch.equal(out, out_jit) and torch.equal(lse, lse_jit)


def test_setup_loads_the_build_tool_without_the_package(tmp_path):
    """setup.py's load_aot_build, run as a build runs it (before _C exists): build_tools/aot_build.py reads the kernel
    sources of this tree without running torch_sage/__init__.py (which loads _C) and without putting a torch_sage
    into sys.modules."""
    pytest.importorskip("triton")
    script = textwrap.dedent(f"""
        import runpy, sys, setuptools
        setuptools.setup = lambda **kwargs: None  # the module's definitions only
        aot_build = runpy.run_path({str(ROOT / "setup.py")!r}, run_name="setup")["load_aot_build"]()
        print(sorted(m for m in sys.modules if m.split(".")[0] == "torch_sage"), aot_build.ta.__file__,
              len(aot_build.kernel_set("sm_90")), len(aot_build.kernel_set("sm_80")))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH")}
    res = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    # sm_80 has no e4m3: the fast mode's 36 kernels are left out
    assert res.stdout.split() == ["[]", str(ROOT / "torch_sage" / "triton_attention.py"), "72", "36"]
