"""What the two SDPA-route test files share: the registry check, the fixtures, an NHD-strided view."""
import pytest
import torch

import torch_sage
from torch_sage import sdpa
from torch_sage.sdpa._compat import impl_registry

attn = torch.nn.attention
HAS_REGISTRY = impl_registry() is not None
needs_registry = pytest.mark.skipif(not HAS_REGISTRY, reason="torch without torch.nn.attention's impl registry")


@pytest.fixture(autouse=True)
def _restore_flash_impl():
    sdpa.flash_impl_stats.reset()
    yield
    sdpa.deactivate_flash_impl()
    torch_sage.disable_sdpa()


def nhd_view(t):
    """The same values as t [B, H, N, D], stored as a contiguous [B, N, H, D] tensor (what models pass to SDPA)."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


@pytest.fixture(params=[None, "triton"], ids=["prologue-default", "prologue-triton"])
def prologue(request, monkeypatch):
    if request.param is None:
        monkeypatch.delenv("SAGEATTN_SK1_PROLOGUE", raising=False)
    else:
        monkeypatch.setenv("SAGEATTN_SK1_PROLOGUE", request.param)
    return request.param
