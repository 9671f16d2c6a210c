"""torch_sage: SageAttention-style 8-bit attention as PyTorch custom ops.

Importing the package loads the compiled library (which defines the ``torch.ops.sage.*`` ops and their
CPU kernels) and registers the fake kernels that torch.compile and torch.export need.
"""
import torch  # noqa: F401  (the extension links against torch: load it first)

from . import _C  # noqa: F401  (registers torch.ops.sage.*)
from . import ops  # noqa: F401  (fake kernels)
from . import triton_jit_ops  # noqa: F401  (the ops Triton's JIT serves; Triton imported on first use)
from .api import sageattn
from .ops import attention, attention_with_lse, guard_counts
from . import sdpa  # noqa: F401  (registers the "SAGE" flash-attention impl; activates nothing)
from .sdpa import SageSDPAMode, SDPAStats, disable_sdpa, enable_sdpa, sdpa_mode
from .sageattention_alias import install_sageattention_alias, uninstall_sageattention_alias

__version__ = "0.1.0"
__all__ = ["attention", "attention_with_lse", "guard_counts", "sageattn", "sdpa_mode", "SageSDPAMode", "SDPAStats",
           "enable_sdpa", "disable_sdpa", "install_sageattention_alias", "uninstall_sageattention_alias", "__version__"]
