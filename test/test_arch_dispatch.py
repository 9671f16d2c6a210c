"""Which GPUs torch_sage runs on (torch_sage/arch.py, csrc/ops/gpu_arch.h), checked on CPU by simulating devices:
torch.version.hip and torch.cuda.get_device_properties are replaced by stand-ins.

AMD: the architecture comes from gcnArchName (never the capability numbers); gfx1201 runs; gfx1200 runs only with
SAGEATTN_SK1_GFX1200=1; other AMD GPUs are refused. NVIDIA: sm_80 and newer run, older GPUs are refused. The rule
is C++ only (csrc/ops/arch_rules.h): arch.py reaches it through sage::_gpu_arch_refusal, so these tests check the
rule the C++ GPU ops apply."""
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import torch_sage  # noqa: F401
from torch_sage import arch, triton_jit_ops

ROOT = Path(__file__).resolve().parents[1]
ENV = "SAGEATTN_SK1_GFX1200"


@pytest.fixture
def gpu(monkeypatch):
    """gpu(props, hip=...) makes every GPU index report props (a SimpleNamespace, or a list of them by index)."""
    calls = []
    monkeypatch.delenv(ENV, raising=False)
    arch.clear_cache()

    def simulate(props, hip="6.4.43482"):
        monkeypatch.setattr(torch.version, "hip", hip)

        def get_device_properties(index=None):
            index = torch.device(index).index if isinstance(index, (str, torch.device)) else index
            calls.append(index)
            return props[index] if isinstance(props, list) else props

        monkeypatch.setattr(torch.cuda, "get_device_properties", get_device_properties)
        monkeypatch.setattr(torch.cuda, "get_device_capability",
                            lambda *a: pytest.fail("the arch must not come from get_device_capability"))
        arch.clear_cache()
        return calls

    yield simulate
    arch.clear_cache()


def amd(name, gcn):
    # major/minor as ROCm reports them for RDNA4 (12.0); the check must ignore them.
    return SimpleNamespace(name=name, gcnArchName=gcn, major=12, minor=0)


def nvidia(major, minor):
    return SimpleNamespace(name=f"NVIDIA sm_{major}{minor}", major=major, minor=minor)


CUDA0 = torch.device("cuda", 0)


@pytest.mark.parametrize("gcn", ["gfx1201", "gfx1201:sramecc-:xnack-", " gfx1201 "])
def test_gfx1201_is_the_default_path(gpu, gcn):
    gpu(amd("AMD Radeon RX 9070 XT", gcn))
    assert arch.check_device(CUDA0) == "gfx1201"
    assert arch.device_arch(CUDA0) == "gfx1201"


def test_gfx1200_needs_the_opt_in(gpu, monkeypatch):
    gpu(amd("AMD Radeon RX 9060 XT", "gfx1200:sramecc-:xnack-"))
    with pytest.raises(RuntimeError, match="SAGEATTN_SK1_GFX1200=1") as e:
        arch.check_device(CUDA0)
    assert "gfx1200" in str(e.value) and "GFX1200-TESTING.md" in str(e.value)
    for off in ("", "0"):
        monkeypatch.setenv(ENV, off)
        with pytest.raises(RuntimeError, match="opt-in"):
            arch.check_device(CUDA0)
    # Read at every call: setting it after a refusal takes effect at the next call.
    monkeypatch.setenv(ENV, "1")
    assert arch.check_device(CUDA0) == "gfx1200"
    monkeypatch.delenv(ENV)
    with pytest.raises(RuntimeError, match="opt-in"):
        arch.check_device(CUDA0)


@pytest.mark.parametrize("value", ["yes", "true", "2", " 1"])
def test_gfx1200_opt_in_value_is_checked(gpu, monkeypatch, value):
    gpu(amd("AMD Radeon RX 9060 XT", "gfx1200"))
    monkeypatch.setenv(ENV, value)
    with pytest.raises(RuntimeError, match=r'SAGEATTN_SK1_GFX1200 must be "1"'):
        arch.check_device(CUDA0)


def test_opt_in_does_not_matter_on_gfx1201(gpu, monkeypatch):
    gpu(amd("AMD Radeon RX 9070", "gfx1201"))
    for value in ("0", "1"):
        monkeypatch.setenv(ENV, value)
        assert arch.check_device(CUDA0) == "gfx1201"
    # Its value is checked whatever the GPU, as every setting is (csrc/ops/settings.cpp).
    monkeypatch.setenv(ENV, "whatever")
    with pytest.raises(RuntimeError, match=r'SAGEATTN_SK1_GFX1200 must be "1"'):
        arch.check_device(CUDA0)


@pytest.mark.parametrize("gcn", ["gfx1100", "gfx1101", "gfx942:sramecc+:xnack-", "gfx90a:sramecc+:xnack-",
                                 "gfx1030", "gfx1150", "gfx12011"])
def test_other_amd_gpus_are_refused(gpu, monkeypatch, gcn):
    gpu(amd("AMD GPU", gcn))
    monkeypatch.setenv(ENV, "1")  # the opt-in is for gfx1200 only
    with pytest.raises(RuntimeError, match="is not supported") as e:
        arch.check_device(CUDA0)
    assert gcn.split(":")[0] in str(e.value) and "gfx1201" in str(e.value)


def test_empty_arch_name_is_an_error(gpu):
    gpu(amd("AMD GPU", ""))
    with pytest.raises(RuntimeError, match="gcnArchName is empty"):
        arch.check_device(CUDA0)


def test_arch_is_read_once_per_device(gpu):
    calls = gpu([amd("RX 9070 XT", "gfx1201"), amd("RX 7900 XTX", "gfx1100")])
    for _ in range(3):
        assert arch.check_device(CUDA0) == "gfx1201"
    with pytest.raises(RuntimeError, match="gfx1100 is not supported"):
        arch.check_device(torch.device("cuda", 1))
    with pytest.raises(RuntimeError, match="gfx1100 is not supported"):
        arch.check_device("cuda:1")
    assert calls == [0, 1]


@pytest.mark.parametrize("major,minor,expected", [(8, 0, "sm_80"), (8, 6, "sm_86"), (8, 9, "sm_89"),
                                                  (9, 0, "sm_90"), (10, 0, "sm_100"), (12, 0, "sm_120")])
def test_nvidia_sm80_and_newer(gpu, major, minor, expected):
    gpu(nvidia(major, minor), hip=None)
    assert arch.check_device(CUDA0) == expected


@pytest.mark.parametrize("major,minor", [(7, 5), (7, 0), (6, 1)])
def test_nvidia_before_sm80_is_refused(gpu, major, minor):
    gpu(nvidia(major, minor), hip=None)
    with pytest.raises(RuntimeError, match=f"sm_{major}{minor} is not supported.*sm_80"):
        arch.check_device(CUDA0)


def test_non_gpu_devices_pass_through(gpu):
    calls = gpu(amd("AMD GPU", "gfx1100"))
    assert arch.check_device(torch.device("cpu")) == "cpu"
    assert arch.check_device("meta") == "meta"
    assert calls == []


class _OnGpu:
    """Stands in for a GPU tensor: only .device is read before the check raises."""
    device = CUDA0

    def __getattr__(self, name):
        pytest.fail(f"a GPU kernel used its input ({name}) before checking the device")


@pytest.mark.parametrize("kernel,args", [
    (triton_jit_ops._quant_qk_int8_triton, (_OnGpu(), _OnGpu(), "HND", 0.1, True)),
    (triton_jit_ops._quant_v_fp8_triton, (_OnGpu(), "HND")),
    (triton_jit_ops._qk_int8_attention_triton, (_OnGpu(), None, None, None, None, None, 1, "HND", False, torch.float16)),
], ids=["quant_qk_int8_triton", "quant_v_fp8", "qk_int8_attention"])
@pytest.mark.parametrize("gcn,match", [("gfx1200", "SAGEATTN_SK1_GFX1200=1"), ("gfx1100", "not supported")])
def test_gpu_kernels_check_the_device_first(gpu, kernel, args, gcn, match):
    gpu(amd("AMD GPU", gcn))
    with pytest.raises(RuntimeError, match=match):
        kernel(*args)


def test_cpp_prologue_checks_the_arch_first():
    """csrc/ops/gpu_prologue.cpp (compiled only on a GPU machine) calls the C++ check (device_arch, which on ROCm
    starts with check_amd_arch) before anything but the settings scope (which reads only the environment), on CUDA
    and ROCm alike: in the op and in sage::attention's prologue, which does not go through the op."""
    src = (ROOT / "csrc" / "ops" / "gpu_prologue.cpp").read_text()
    for entry in ("QuantOut quant_qk_int8_gpu(", "std::optional<QuantQK> quant_qk_int8_one_allocation("):
        body = src[src.index(entry):]
        body = body[body.index("{") + 1:]
        assert re.match(r"\s*(const SettingsScope settings;[^\n]*\n)?\s*device_arch\(q\.device\(\)\);", body), body[:200]
    arch = (ROOT / "csrc" / "ops" / "gpu_arch.cpp").read_text()
    arch = arch[arch.index("std::string device_arch("):]
    assert re.match(r"[^{]*\{\s*#if defined\(USE_ROCM\)\s*check_amd_arch\(device\);", arch), arch[:200]
