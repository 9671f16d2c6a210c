"""Route ``F.scaled_dot_product_attention`` to torch_sage.

Two ways, both opt-in (importing torch_sage changes nothing):

1. ``sdpa_mode()``: a ``TorchFunctionMode`` that sends every eligible
   ``F.scaled_dot_product_attention`` call to ``torch.ops.sage.attention`` and every other call to
   SDPA itself, counting both (``mode.stats``). It works on every supported torch (2.11 to 2.15) and
   device, in eager mode and inside ``torch.compile(fullgraph=True)``, without graph breaks::

       with torch_sage.sdpa_mode() as mode:
           out = model(x)
       print(mode.stats)        # SDPAStats(routed=24, fallback={'attn_mask': 2})

   ``enable_sdpa()`` / ``disable_sdpa()`` do the same for the rest of the program (this thread).

2. The flash-attention implementation registry of torch >= 2.11
   (``torch.nn.attention.register_flash_attention_impl``). torch_sage registers itself there as
   ``"SAGE"`` on import, without activating::

       torch.nn.attention.activate_flash_attention_impl("SAGE")
       ...
       torch.nn.attention.restore_flash_attention_impl()

   The registry only reaches SDPA's CUDA flash backend: activating replaces the CUDA kernels of
   ``aten::_scaled_dot_product_flash_attention`` (forward) and its backward, as torch's own FA3/FA4
   entries do. SDPA calls that torch sends elsewhere (attention masks, float32, the efficient, cuDNN or
   math backends, CPU) are unchanged; calls the flash op gets that torch_sage cannot compute (dropout, ...)
   run torch's own kernel. Inference only: while SAGE is active the flash backward raises.
   ``activate_flash_impl(devices=("cuda", "cpu"))`` additionally replaces the CPU flash kernel
   (``aten::_scaled_dot_product_flash_attention_for_cpu``): slow (the CPU kernels of torch_sage are exact
   reference code), meant for testing the path on a machine without a GPU.

Which calls are routed, and why the others fall back: ``sdpa_fallback_reason`` (the mode) and
``flash_fallback_reason`` (the flash impl) return ``None`` or the reason key used in the stats.

Layout: ``function_mode`` (the TorchFunctionMode), ``flash_registry`` (the registry entry), ``_shared`` (stats and
the op call both use), ``_compat`` (the torch-private interfaces, in one place).
"""
from ._shared import SDPAStats
from .function_mode import SageSDPAMode, disable_sdpa, enable_sdpa, sdpa_fallback_reason, sdpa_mode
from .flash_registry import (FLASH_IMPL_NAME, activate_flash_impl, deactivate_flash_impl, flash_fallback_reason,
                             flash_impl, flash_impl_active, flash_impl_stats, register_flash_impl,
                             sage_scaled_dot_product_flash_attention,
                             sage_scaled_dot_product_flash_attention_for_cpu)

__all__ = [
    "FLASH_IMPL_NAME",
    "SDPAStats",
    "SageSDPAMode",
    "sdpa_mode",
    "enable_sdpa",
    "disable_sdpa",
    "sdpa_fallback_reason",
    "flash_fallback_reason",
    "flash_impl_stats",
    "register_flash_impl",
    "activate_flash_impl",
    "deactivate_flash_impl",
    "flash_impl",
    "flash_impl_active",
    "sage_scaled_dot_product_flash_attention",
    "sage_scaled_dot_product_flash_attention_for_cpu",
]
