"""Kept so that ``from torch_sage import dropin`` still works: SageAttention 2.2.0's API is
torch_sage.sageattention_api, the ``sageattention`` module alias torch_sage.sageattention_alias."""
from .sageattention_alias import (_real_sageattention_available, install_sageattention_alias,  # noqa: F401
                                  is_sageattention_alias, uninstall_sageattention_alias)
from .sageattention_api import *  # noqa: F401,F403
from .sageattention_api import SAGEATTENTION_API_VERSION  # noqa: F401
