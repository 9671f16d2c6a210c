"""Which GPU a tensor is on, and whether torch_sage's GPU kernels run there.

- AMD (ROCm torch): the architecture is the device's ``gcnArchName`` ("gfx1201", "gfx1201:sramecc-:xnack-"), never
  the capability numbers. gfx1201 (Radeon RX 9070 / 9070 XT) runs the default kernels. gfx1200 (RX 9060 / 9060 XT)
  runs the same kernels only with ``SAGEATTN_SK1_GFX1200=1``: they are compiled and checked for it but have not run
  on one. Every other AMD GPU gets an error (the HIP kernels are not compiled for it and nothing was checked there).
- NVIDIA (CUDA torch): sm_80 and newer; older GPUs get an error.

The architecture is read once per device and cached; the opt-in variable is read at every call (a change takes
effect at the next call; a CUDA graph keeps what it captured). The C++ GPU ops apply the same rules, word for word
(csrc/ops/gpu_arch.h, through device_arch in csrc/ops/gpu_arch.cpp).
"""
import functools
import os
from typing import Optional, Tuple

import torch

GFX1200_OPT_IN = "SAGEATTN_SK1_GFX1200"
AMD_DEFAULT = "gfx1201"
AMD_OPT_IN = "gfx1200"
NVIDIA_MIN = (8, 0)


def amd_refusal(gcn_arch_name: str, opt_in: Optional[str]) -> Optional[str]:
    """None when torch_sage runs on an AMD GPU whose gcnArchName is gcn_arch_name, else the error message.

    opt_in is the value of SAGEATTN_SK1_GFX1200 (None when unset). The C++ twin is sage::amd_arch_refusal.
    """
    arch = gcn_arch_name.split(":", 1)[0].strip()
    if arch == AMD_DEFAULT:
        return None
    if arch == AMD_OPT_IN:
        if opt_in is None or opt_in in ("", "0"):
            return ("sage: this GPU is gfx1200 (Radeon RX 9060 / 9060 XT), which torch_sage supports only as an "
                    "opt-in: its kernels are compiled for gfx1200 but have not yet run on one. Set "
                    "SAGEATTN_SK1_GFX1200=1 to use them, and please report the results "
                    "(docs/GFX1200-TESTING.md).")
        if opt_in == "1":
            return None
        return f'sage: SAGEATTN_SK1_GFX1200 must be "1" (use gfx1200) or "0" / unset, got "{opt_in}"'
    if not arch:
        return "sage: could not read this AMD GPU's architecture (gcnArchName is empty)"
    return (f"sage: AMD GPU {arch} is not supported: torch_sage's GPU kernels are built for gfx1201 (Radeon RX "
            f"9070 / 9070 XT) and, with SAGEATTN_SK1_GFX1200=1, gfx1200 (RX 9060 / 9060 XT). Other devices: "
            f"use the CPU.")


def nvidia_refusal(major: int, minor: int) -> Optional[str]:
    """None when torch_sage runs on an NVIDIA GPU of compute capability major.minor, else the error message."""
    if (major, minor) >= NVIDIA_MIN:
        return None
    return (f"sage: NVIDIA GPU sm_{major}{minor} is not supported: torch_sage's GPU kernels need sm_80 (Ampere) or "
            f"newer. Other devices: use the CPU.")


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
    if is_amd:
        msg = amd_refusal(arch, os.environ.get(GFX1200_OPT_IN))
        arch = arch.split(":", 1)[0].strip()
    else:
        msg = nvidia_refusal(major, minor)
    if msg is not None:
        raise RuntimeError(msg)
    return arch
