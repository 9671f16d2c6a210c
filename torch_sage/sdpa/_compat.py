"""The torch-private interfaces the two SDPA routes use, each behind one function with its fallback, so that a
torch release that moves one changes this file only (torch 2.11 to 2.15 are supported)."""
from typing import Optional

import torch


def mark_constant_result(fn):
    """What ``torch.compiler.assume_constant_result`` sets on fn (dynamo runs fn once while tracing and keeps the
    result as a constant); the decorator itself imports torch._dynamo (1-5 s) at import."""
    fn._dynamo_marked_constant = True
    return fn


def top_function_mode(default):
    """The innermost active torch function mode (None when there is none); default where the private stack API
    is missing."""
    try:
        n = torch._C._len_torch_function_stack()
        return torch._C._get_function_stack_at(n - 1) if n > 0 else None
    except AttributeError:
        return default


def original_kernel(op: str, dispatch_key: str):
    """torch's own kernel of aten::op for dispatch_key (to fall back to), or None."""
    get_kernel = getattr(torch.library, "get_kernel", None)
    if get_kernel is None:
        return None
    try:
        return get_kernel(f"aten::{op}", dispatch_key)
    except Exception:  # noqa: BLE001 - no kernel to fall back to: unsupported calls raise instead
        return None


def destroy_library(lib) -> None:
    """Undo a torch.library.Library's registrations (torch has no public call for it)."""
    if lib is not None and hasattr(lib, "_destroy"):
        lib._destroy()


_REGISTRY_FUNCTIONS = ("register_flash_attention_impl", "activate_flash_attention_impl",
                       "restore_flash_attention_impl", "current_flash_attention_impl", "list_flash_attention_impls")


def impl_registry() -> Optional[object]:
    """torch.nn.attention when it has the flash-attention impl registry (torch >= 2.11), else None."""
    attn = torch.nn.attention
    return attn if all(hasattr(attn, n) for n in _REGISTRY_FUNCTIONS) else None
