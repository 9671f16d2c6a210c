"""The AMD RDNA4 path, checked without an AMD GPU: what compiles, and what the machine code is. Nothing here runs
a kernel; that needs the GPU (docs/GFX1200-TESTING.md).

HIP (csrc/hip): Debian's clang-19 with the ROCm 5.2.3 headers and device libraries that tools/amd_toolchain.sh
unpacks into a cache (its only download, ~0.65 MB). For gfx1201 and gfx1200:
- the full host + device object builds with the flags torch's BuildExtension gives hipcc (-Werror);
- every kernel is in the code object, wave32, with no scratch (private segment 0, no spills, no scratch_*
  instructions), float denormals kept, and uses the instructions it is written for (16-byte loads on the vector
  path, ds_bpermute for the warp reductions, IEEE division, float64 sums, f16 conversions only in the fp16
  variants);
- the gfx1200 and gfx1201 machine code and kernel descriptor of every kernel are identical (the gfx1200 opt-in
  runs the gfx1201 code).
The HIP host code that reads gcnArchName (csrc/ops/gpu_arch.h, ROCm builds only) is syntax-checked against the
HIP headers.

Triton: the Triton prologue compiled for GPUTarget("hip", arch, 32) by tools/amd_triton_compile.py (no GPU, no ROCm
needed): wave32, no scratch, 16-byte loads. (The precompiled attention and V kernels: test/test_aot_build.py.)

The HIP tests skip without clang++-19 and its tools (apt-get install clang-19 lld-19 llvm-19 clang-tools-19) or
when tools/amd_toolchain.sh cannot download; the Triton tests skip without Triton's AMD backend. With
SAGE_REQUIRE_AMD_COMPILE=1 (CI) all of these fail instead of skipping. About 30 s on 2 cores.
"""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HIP_SOURCES = sorted((ROOT / "csrc" / "hip").glob("*.hip"))
ARCHS = ("gfx1201", "gfx1200")
TOOLS = ("clang++-19", "llvm-objdump-19", "llvm-readelf-19", "llvm-objcopy-19", "llvm-dis-19", "llvm-as-19",
         "clang-offload-bundler-19")
REQUIRED = os.environ.get("SAGE_REQUIRE_AMD_COMPILE") == "1"

# Kernels each source must contain, by (unmangled) name: (instantiations, launch threads at most).
KERNELS = {"quant_qk_int8.hip": {"quant_qk_int8_kernel": (4, 512), "k_colsum_kernel": (4, 256)},
           "quant_v_fp8.hip": {"channel_amax_kernel": (4, 256), "quant_v_kernel": (4, 256)}}


def unavailable(reason):
    if REQUIRED:
        pytest.fail(f"{reason} (SAGE_REQUIRE_AMD_COMPILE=1)")
    pytest.skip(reason)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 300), **kw)


@pytest.fixture(scope="module")
def rocm():
    """--rocm-path of the unpacked ROCm 5.2.3 files (set up by tools/amd_toolchain.sh, cached)."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not installed (apt-get install clang-19 lld-19 llvm-19 clang-tools-19)")
    if not Path(run(["clang++-19", "-print-prog-name=ld.lld"]).stdout.strip()).exists():
        unavailable("ld.lld for clang-19 not installed (apt-get install lld-19)")
    res = run(["bash", str(ROOT / "tools" / "amd_toolchain.sh")])
    if res.returncode != 0:
        unavailable(f"tools/amd_toolchain.sh failed: {(res.stderr.strip().splitlines() or ['?'])[-1]}")
    return Path(res.stdout.strip().splitlines()[-1])


def hip_clang(rocm, std="c++17"):
    bitcode = rocm / "lib" / "x86_64-linux-gnu" / "amdgcn" / "bitcode"
    return ["clang++-19", "-x", "hip", f"-std={std}", "-O3", "-Wall", "-Wextra", "-Werror", f"--rocm-path={rocm}",
            f"--rocm-device-lib-path={bitcode}"]


def torch_hipcc_flags():
    """What BuildExtension adds for a .hip source on Linux (torch's COMMON_HIP/HIPCC flags, -fno-gpu-rdc), plus
    setup.py's -O3."""
    from torch.utils import cpp_extension as ext

    return list(ext.COMMON_HIP_FLAGS) + list(ext.COMMON_HIPCC_FLAGS) + ["-fno-gpu-rdc", "-O3"]


def parse_disassembly(text):
    """{symbol: [instruction text without address, encoding or comment]} of the code object's .text."""
    kernels, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if m:
            current = kernels.setdefault(m.group(1), [])
        elif current is not None and line.startswith("\t"):
            ins = " ".join(line.split("//")[0].split())
            if ins:
                current.append(ins)
    return {k: v for k, v in kernels.items() if k.startswith("_Z")}


def parse_metadata(notes):
    """{kernel symbol: {field: value}} from llvm-readelf --notes (the amdhsa.kernels YAML)."""
    meta = {}
    for entry in re.split(r"^  - \.args:", notes, flags=re.M)[1:]:
        fields = dict(re.findall(r"^    \.([a-z_]+):\s+(\S+)", entry, flags=re.M))
        meta[fields["name"]] = fields
    return meta


def kernel_descriptors(hsaco, tmp):
    """{kernel symbol: its 64-byte kernel descriptor} (the .kd objects in .rodata). llvm-objdump-19 cannot decode
    gfx12 descriptors, so they are read as bytes."""
    rodata = tmp / (hsaco.name + ".rodata")
    res = run(["llvm-objcopy-19", "-O", "binary", "--only-section=.rodata", str(hsaco), str(rodata)])
    assert res.returncode == 0, res.stderr
    data = rodata.read_bytes()
    sections = run(["llvm-readelf-19", "-S", str(hsaco)]).stdout
    base = int(re.search(r"\.rodata\s+PROGBITS\s+([0-9a-f]+)", sections).group(1), 16)
    kds = {}
    for line in run(["llvm-readelf-19", "-s", str(hsaco)]).stdout.splitlines():
        f = line.split()
        if len(f) >= 8 and f[-1].endswith(".kd") and f[2] == "64":
            offset = int(f[1], 16) - base
            kds[f[-1][:-3]] = data[offset:offset + 64]
    return kds


def kernel_name(symbol):
    """(name, bool template arguments) of a mangled sage kernel, e.g. ("quant_qk_int8_kernel", (True, False)); int
    template arguments after them (quant_v_kernel's VT) are left out."""
    m = re.match(r"_ZN4sage(?:12_GLOBAL__N_1)?(\d+)", symbol)
    assert m, f"not a sage kernel: {symbol}"
    start = m.end()
    name = symbol[start:start + int(m.group(1))]
    rest = symbol[start + len(name):]
    flags = re.match(r"I((?:Lb[01]E)+)(?:Li\d+E)*E", rest)
    return name, tuple(f == "1" for f in re.findall(r"Lb([01])E", flags.group(1))) if flags else ()


@pytest.fixture(scope="module")
def code_objects(rocm, tmp_path_factory):
    """{(source name, arch): {"text": {symbol: [instructions]}, "meta": {symbol: fields}}}: device-only code
    objects, one per source and arch."""
    out = {}
    tmp = tmp_path_factory.mktemp("hsaco")
    for src in HIP_SOURCES:
        for arch in ARCHS:
            hsaco = tmp / f"{src.stem}_{arch}.hsaco"
            res = run(hip_clang(rocm) + [f"--offload-arch={arch}", "--offload-device-only", "--no-gpu-bundle-output",
                                         str(src), "-o", str(hsaco)])
            assert res.returncode == 0, res.stderr
            dis = run(["llvm-objdump-19", "-d", f"--mcpu={arch}", str(hsaco)])
            notes = run(["llvm-readelf-19", "--notes", str(hsaco)])
            assert dis.returncode == 0 and notes.returncode == 0, dis.stderr + notes.stderr
            out[(src.name, arch)] = {"text": parse_disassembly(dis.stdout), "meta": parse_metadata(notes.stdout),
                                     "kd": kernel_descriptors(hsaco, tmp)}
    return out


@pytest.mark.parametrize("src", HIP_SOURCES, ids=lambda p: p.name)
def test_full_object_builds_with_torchs_hipcc_flags(rocm, src, tmp_path):
    """Host + device object for both archs, with the flags torch's BuildExtension passes to hipcc (C++20 as torch
    2.13 uses; the code objects below are C++17, as torch 2.11 uses)."""
    obj = tmp_path / "k.o"
    res = run(hip_clang(rocm, "c++20") + torch_hipcc_flags() + [f"--offload-arch={a}" for a in ARCHS]
              + ["-c", str(src), "-o", str(obj)])
    assert res.returncode == 0, res.stderr
    # The host object embeds the device code bundle in .hip_fatbin: one code object per arch.
    fatbin = tmp_path / "fatbin"
    dumped = run(["llvm-objcopy-19", f"--dump-section=.hip_fatbin={fatbin}", str(obj), str(tmp_path / "copy.o")])
    assert dumped.returncode == 0, dumped.stderr
    listed = run(["clang-offload-bundler-19", "--list", "--type=o", f"--input={fatbin}"])
    assert listed.returncode == 0, listed.stderr
    for arch in ARCHS:
        assert any(t.endswith(f"amdgcn-amd-amdhsa--{arch}") for t in listed.stdout.split()), listed.stdout


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("src", HIP_SOURCES, ids=lambda p: p.name)
def test_every_kernel_is_wave32_without_scratch(code_objects, src, arch):
    co = code_objects[(src.name, arch)]
    expected = KERNELS.get(src.name)
    assert expected is not None, f"list the kernels of {src.name} in KERNELS"
    names = [kernel_name(s)[0] for s in co["text"]]
    assert {n: names.count(n) for n in set(names)} == {n: c for n, (c, _) in expected.items()}
    assert set(co["meta"]) == set(co["text"])
    for symbol, fields in co["meta"].items():
        name = kernel_name(symbol)[0]
        assert fields["wavefront_size"] == "32", (symbol, fields)
        assert fields["private_segment_fixed_size"] == "0", (symbol, fields)
        assert fields["vgpr_spill_count"] == "0" and fields["sgpr_spill_count"] == "0", (symbol, fields)
        assert fields["uses_dynamic_stack"] == "false", (symbol, fields)
        assert int(fields["group_segment_fixed_size"]) <= 65536, (symbol, fields)  # LDS per workgroup
        assert int(fields["max_flat_workgroup_size"]) >= expected[name][1], (symbol, fields)
        assert not [i for i in co["text"][symbol] if i.startswith("scratch_")], symbol
        # Denormals are kept (not flushed) in float32 and float16/64: the prologue is bit-exact for tiny values.
        rsrc1 = int.from_bytes(co["kd"][symbol][48:52], "little")  # COMPUTE_PGM_RSRC1
        assert (rsrc1 >> 16) & 3 == 3 and (rsrc1 >> 18) & 3 == 3, (symbol, hex(rsrc1))


def ops(instructions):
    return {i.split()[0] for i in instructions}


def quant_kernels(code_objects, src, arch):
    """(symbol, name, vec, instructions used) of each kernel of src (template <bool BF16, bool VEC>), after the
    checks every quantization kernel passes: fp16 -> float32 conversions only in the fp16 variants (bf16 is a
    shift), and gfx12's split workgroup barrier."""
    for symbol, ins in code_objects[(src, arch)]["text"].items():
        name, (bf16, vec) = kernel_name(symbol)
        used = ops(ins)
        f16 = {"v_cvt_f32_f16_e32", "v_cvt_f32_f16_e64", "v_fma_mix_f32", "v_fma_mixlo_f16"} & used
        assert bool(f16) != bf16, (symbol, sorted(f16))
        assert {"s_barrier_signal", "s_barrier_wait"} <= used, symbol
        yield symbol, name, vec, used


@pytest.mark.parametrize("arch", ARCHS)
def test_quant_kernels_use_the_intended_instructions(code_objects, arch):
    for symbol, name, vec, used in quant_kernels(code_objects, "quant_qk_int8.hip", arch):
        # 16-byte row loads only in the vector variants (the scalar ones are for unaligned inputs).
        assert ("global_load_b128" in used) == vec, (symbol, sorted(used))
        assert "global_load_u16" in used, symbol
        if name == "quant_qk_int8_kernel":
            assert "ds_bpermute_b32" in used, symbol  # warp butterfly of the block amax (compat::shfl_xor)
            assert {"v_div_scale_f32", "v_div_fmas_f32", "v_div_fixup_f32"} <= used, symbol  # IEEE amax / 127, 1/s
            assert "v_fma_f32" in used or "v_fmac_f32_e32" in used, symbol  # the correctly rounded x / s
            assert "global_store_b64" in used, symbol  # 8 int8 values per thread and row
        else:
            assert {"v_cvt_f64_f32_e32", "v_add_f64_e32"} <= used, symbol  # float64 column sums
            assert "ds_bpermute_b32" not in used, symbol


@pytest.mark.parametrize("arch", ARCHS)
def test_v_quant_kernels_use_the_intended_instructions(code_objects, arch):
    for symbol, name, vec, used in quant_kernels(code_objects, "quant_v_fp8.hip", arch):
        # 8-byte row loads (4 channels) only in the vector variants, 2-byte loads only in the others.
        assert ("global_load_b64" in used) == vec and ("global_load_u16" in used) != vec, (symbol, sorted(used))
        if name == "quant_v_kernel":
            assert {"v_div_scale_f32", "v_div_fmas_f32", "v_div_fixup_f32"} <= used, symbol  # IEEE divisions
            assert ("global_store_b8" in used) != vec, symbol  # 4 channels a store in the vector variants
        else:
            assert not {"v_div_scale_f32", "ds_bpermute_b32"} & used, symbol  # integer maxima only


@pytest.mark.parametrize("src", HIP_SOURCES, ids=lambda p: p.name)
def test_gfx1200_and_gfx1201_machine_code_is_identical(code_objects, src):
    a, b = (code_objects[(src.name, arch)]["text"] for arch in ARCHS)
    assert sorted(a) == sorted(b)
    for symbol in a:
        assert a[symbol] == b[symbol], f"{symbol}: gfx1201 and gfx1200 code differ"
    # And the kernel descriptors (resources, modes), all but bytes 16-23, kernel_code_entry_byte_offset: where the
    # code lies relative to its descriptor is layout (seen to differ between the two archs' code objects under CI's
    # .ci/run, not when the test is run alone), and the code itself is compared above.
    kd_a, kd_b = (code_objects[(src.name, arch)]["kd"] for arch in ARCHS)
    assert sorted(kd_a) == sorted(kd_b) == sorted(a)
    for symbol, kd in kd_a.items():
        differ = [i for i in range(64) if kd[i] != kd_b[symbol][i] and not 16 <= i < 24]
        assert not differ, f"{symbol}: kernel descriptor bytes {differ} differ between gfx1201 and gfx1200"


def test_rocm_host_code_of_the_arch_check_compiles(rocm, tmp_path):
    """csrc/ops/gpu_arch.h under USE_ROCM (hipGetDeviceProperties, gcnArchName) against the HIP headers and torch's
    c10 headers, as the host compiler of a ROCm build sees it."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    from torch.utils.cpp_extension import include_paths

    tu = tmp_path / "arch_check.cpp"
    tu.write_text('#include "gpu_arch.h"\n'
                  'void check(const c10::Device& d) { sage::check_amd_arch(d); }\n'
                  'static_assert(sizeof(hipDeviceProp_t::gcnArchName) >= 16, "gcnArchName is a char array");\n')
    res = run([cxx, "-std=c++17", "-fsyntax-only", "-Werror", "-DUSE_ROCM=1", "-D__HIP_PLATFORM_AMD__=1",
               f"-I{ROOT / 'csrc' / 'ops'}", f"-isystem{rocm / 'include'}"]
              + [f"-isystem{p}" for p in include_paths()] + [str(tu)])
    assert res.returncode == 0, res.stderr


def test_rocm_launcher_of_the_precompiled_triton_kernels_compiles(rocm, tmp_path):
    """csrc/ops/gpu_triton_launch.cpp (hipModuleLoadData / hipModuleLaunchKernel; no ATen) under USE_ROCM, compiled
    to an object by clang-19 against the HIP headers, with a one-image table."""
    table = tmp_path / "table.cpp"
    table.write_text('#include "triton_images.h"\n'
                     'namespace sage { namespace aot {\n'
                     'const char kTritonVersion[] = "test";\n'
                     'const Image kImages[] = {{"gfx1201", "k", "kernel", "*i8", 2, 4, 32, 0, 64, 64, 0, 16}};\n'
                     'const size_t kNumImages = 1;\n'
                     'static const unsigned char blob[16] = {0};\n'
                     'const unsigned char* image_blob() { return blob; }\n'
                     '}}\n')
    for src in (ROOT / "csrc" / "ops" / "gpu_triton_launch.cpp", table):
        res = run(["clang++-19", "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-c", "-DUSE_ROCM=1",
                   "-D__HIP_PLATFORM_AMD__=1", f"-I{ROOT / 'csrc' / 'ops'}", f"-isystem{rocm / 'include'}", str(src),
                   "-o", str(tmp_path / (src.stem + ".o"))])
        assert res.returncode == 0, res.stderr
    syms = run(["llvm-nm-19", "-C", str(tmp_path / "gpu_triton_launch.o")]).stdout
    for needed in ("hipModuleLoadData", "hipModuleGetFunction", "hipModuleLaunchKernel", "sage::aot::launch"):
        assert needed in syms, needed


# ------------------------------------------------------------------------------------------------- Triton


def triton_report(arch, tmp_path, quick):
    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("triton.backends.amd") is None:
        unavailable("Triton with its AMD backend is not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")  # a real compile, not a cache hit
    cmd = [sys.executable, str(ROOT / "tools" / "amd_triton_compile.py"), "--arch", arch]
    cmd += ["--quick"] if quick else []
    res = run(cmd, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout)


@pytest.mark.parametrize("arch,quick", [("gfx1201", False), ("gfx1200", True)])
def test_triton_kernels_use_wmma_without_scratch(arch, quick, tmp_path):
    report = triton_report(arch, tmp_path, quick)
    assert report["kernels"]
    names = {k["name"] for k in report["kernels"]}
    assert {"_quant_blocks_kernel", "_column_sums_kernel"} <= names
    for k in report["kernels"]:
        what = f"{k['name']} {k['dtype']} {k['config']}"
        assert k["wavefront_size"] == 32, what
        # No scratch: VGPR spills would go there. (SGPR spills go to VGPR lanes, not memory: reported, allowed.)
        assert k["private_segment_fixed_size"] == 0 and k["vgpr_spill_count"] == 0, (what, k)
        assert k["scratch_instructions"] == 0, what
        assert {"global_load_b128", "buffer_load_b128"} & set(k["global_loads"]), (what, k["global_loads"])
        assert not k["wmma"], what
