"""Which GPU a tensor is on, and whether torch_sage's GPU kernels run there.

- AMD (ROCm torch): the architecture is the device's ``gcnArchName`` ("gfx1201", "gfx1201:sramecc-:xnack-"), never
  the capability numbers. gfx1201 (Radeon RX 9070 / 9070 XT) runs the default kernels. gfx1200 (RX 9060 / 9060 XT)
  runs the same kernels only with ``SAGEATTN_SK1_GFX1200=1``: they are compiled and checked for it but have not run
  on one. Every other AMD GPU gets an error (the HIP kernels are not compiled for it and nothing was checked there).
- NVIDIA (CUDA torch): sm_80 and newer; older GPUs get an error.

The architecture is read once per device and cached; the opt-in variable once per call (a change takes effect at
the next call; a CUDA graph keeps what it captured). The rule itself is C++ only (csrc/ops/arch_rules.h): the C++
GPU ops apply it through device_arch (csrc/ops/gpu_arch.cpp), this module through sage::_gpu_arch_refusal.
"""
import functools
from typing import Tuple

import torch


@functools.lru_cache(maxsize=None)
def _device_info(index: int) -> Tuple[str, bool, int, int]:
    """(arch, is_amd, major, minor) of GPU index: ("gfx1201:sramecc-:xnack-", True, ...) or ("sm_90", False, 9, 0)."""
    props = torch.cuda.get_device_properties(index)
    if getattr(torch.version, "hip", None):
        return str(getattr(props, "gcnArchName", "") or ""), True, props.major, props.minor
    return f"sm_{props.major}{props.minor}", False, props.major, props.minor


def clear_cache() -> None:
    """Forget the cached device properties (for tests that simulate devices)."""
    _device_info.cache_clear()


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def device_arch(device) -> str:
    """"sm_90", "gfx1201" (the part of gcnArchName before ':'), or the device type for a non-GPU device."""
    device = torch.device(device)
    if device.type != "cuda":
        return device.type
    arch, is_amd, _, _ = _device_info(_index(device))
    return arch.split(":", 1)[0].strip() if is_amd else arch


def check_device(device) -> str:
    """device_arch(device) when torch_sage's GPU kernels run on device; else raises RuntimeError saying why.

    Non-GPU devices ("cpu", "meta") pass through (their kernels are the C++ ones or fakes).
    """
    device = torch.device(device)
    if device.type != "cuda":
        return device.type
    arch, is_amd, major, minor = _device_info(_index(device))
    msg = torch.ops.sage._gpu_arch_refusal(is_amd, arch, major, minor)
    if msg:
        raise RuntimeError(msg)
    return device_arch(device)
