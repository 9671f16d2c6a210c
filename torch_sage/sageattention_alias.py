"""``import sageattention`` served by torch_sage (its SageAttention 2.2.0 API, torch_sage.sageattention_api), for
diffusers, ComfyUI and other callers of SageAttention 2.x.

Opt-in, one call::

    import torch_sage
    torch_sage.install_sageattention_alias()   # no-op if a real sageattention is installed

    import diffusers                            # its "sage" attention backend now runs torch_sage

It puts a module object named ``sageattention`` into ``sys.modules`` (with a module spec, so
``importlib.util.find_spec("sageattention")`` finds it) and makes ``importlib.metadata`` report a
distribution ``sageattention`` of version ``2.2.0+torchsage.<version>`` (diffusers requires >= 2.1.1 by
that lookup). Nothing is written to disk and no other import is affected. ``uninstall_sageattention_alias()``
undoes it. A real, importable SageAttention is left in place unless ``force=True`` or
``TORCH_SAGE_FORCE_ALIAS=1``.

Callers that look for sageattention once:
- diffusers records whether it is installed when ``diffusers`` is imported (``diffusers.utils.import_utils``), and
  its attention dispatcher derives the sage backends' availability from that record, and imports the functions,
  when it is first imported (with the first model class). An alias installed after either is written into both
  records, so there the order does not matter; a diffusers that keeps them elsewhere gets a warning instead.
- ComfyUI imports sageattention while it starts and picks its attention function then, so for ComfyUI use the
  launcher: ``python -m torch_sage.with_sageattention main.py --use-sage-attention``.
"""
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import types
import warnings
from typing import List, Optional, Tuple

from . import sageattention_api
from .contract import check_bool as _check_bool

_MODULE_NAME = "sageattention"


def _version() -> str:
    from . import __version__

    return f"{sageattention_api.SAGEATTENTION_API_VERSION}+torchsage.{__version__}"


class _AliasDistribution(importlib.metadata.Distribution):
    """What importlib.metadata reports for the alias: name, version, top-level module."""

    def read_text(self, filename):
        if filename == "METADATA":
            return (f"Metadata-Version: 2.1\nName: {_MODULE_NAME}\nVersion: {_version()}\n"
                    "Summary: torch_sage standing in for SageAttention\n")
        if filename == "top_level.txt":
            return _MODULE_NAME + "\n"
        return None

    def locate_file(self, path):
        return None


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds the alias module (after a sys.modules purge too) and its distribution metadata."""

    def __init__(self, module):
        self.module = module

    def find_spec(self, fullname, path=None, target=None):
        if fullname == _MODULE_NAME:
            return self.module.__spec__
        return None

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        name = getattr(context, "name", None)
        if name is None or name.replace("-", "_").lower() == _MODULE_NAME:
            yield _AliasDistribution()


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        pass


def _make_module() -> types.ModuleType:
    mod = types.ModuleType(_MODULE_NAME, "torch_sage standing in for SageAttention (torch_sage.sageattention_alias).")
    for name in sageattention_api.FUNCTIONS:
        setattr(mod, name, getattr(sageattention_api, name))
    mod.__version__ = _version()
    mod.__all__ = list(sageattention_api.FUNCTIONS)
    mod.__torch_sage_alias__ = True
    mod.__spec__ = importlib.machinery.ModuleSpec(_MODULE_NAME, _AliasLoader(mod), origin="torch_sage")
    mod.__loader__ = mod.__spec__.loader
    return mod


_FINDER: Optional[_AliasFinder] = None
# (module, attribute, value before, value the alias set) for each record of another library that the alias
# updated, so that uninstalling puts them back.
_UPDATED: List[Tuple[types.ModuleType, str, object, object]] = []


def is_sageattention_alias(module) -> bool:
    return getattr(module, "__torch_sage_alias__", False) is True


def _real_sageattention_available() -> bool:
    mod = sys.modules.get(_MODULE_NAME)
    if mod is not None:
        return not is_sageattention_alias(mod)
    try:
        return importlib.util.find_spec(_MODULE_NAME) is not None
    except (ImportError, ValueError):
        return False


def _diffusers_records(alias) -> Tuple[Tuple[str, dict], ...]:
    """Where diffusers (0.42) keeps what it found of sageattention, as (module, {attribute: the
    value it has when sageattention is there}); the first attribute is the flag."""
    functions = {name: getattr(alias, name) for name in sageattention_api.FUNCTIONS}
    return (("diffusers.utils.import_utils", {"_sageattention_available": True,
                                              "_sageattention_version": alias.__version__}),
            ("diffusers.models.attention_dispatch", {"_CAN_USE_SAGE_ATTN": True, **functions}))


def _update_diffusers(alias) -> None:
    """Tell an already imported diffusers that sageattention is there now, or warn where it cannot be told."""
    if "diffusers" not in sys.modules:
        return  # it will find the alias when it is imported
    for module_name, values in _diffusers_records(alias):
        mod = sys.modules.get(module_name)
        if mod is None:
            continue  # not imported yet: it reads the records above when it is
        flag = next(iter(values))
        if getattr(mod, flag, None) is True:
            continue  # it found a sageattention already
        if getattr(mod, flag, None) is not False or not all(hasattr(mod, name) for name in values):
            version = getattr(sys.modules["diffusers"], "__version__", "?")
            warnings.warn(f"diffusers {version} was imported before install_sageattention_alias() and keeps its "
                          f"sageattention check where torch_sage does not know it ({module_name}.{flag}), so its "
                          "'sage' backend stays unavailable: install the alias before importing diffusers",
                          stacklevel=4)
            return
        for name, value in values.items():
            _UPDATED.append((mod, name, getattr(mod, name), value))
            setattr(mod, name, value)


def _warn_if_comfyui_looked() -> None:
    mod = sys.modules.get("comfy.ldm.modules.attention")
    if mod is not None and getattr(mod, "SAGE_ATTENTION_IS_AVAILABLE", True) is False:
        warnings.warn("comfy.ldm.modules.attention was imported before install_sageattention_alias() and has already "
                      "decided that sageattention is missing; install the alias before ComfyUI starts: "
                      "python -m torch_sage.with_sageattention main.py --use-sage-attention", stacklevel=3)


def install_sageattention_alias(force: bool = False) -> types.ModuleType:
    """Make ``import sageattention`` give torch_sage's drop-in module, unless a real SageAttention is
    importable (then it is returned untouched) or ``force=True`` (then the alias replaces it in this process).

    ``TORCH_SAGE_FORCE_ALIAS=1`` in the environment forces too. An already imported diffusers is told that
    sageattention is there now; ComfyUI must start after it (a warning says so when it started before).
    Returns the module that ``import sageattention`` now gives. Idempotent."""
    global _FINDER
    force = _check_bool("install_sageattention_alias", "force", force)
    force = force or os.environ.get("TORCH_SAGE_FORCE_ALIAS") == "1"
    current = sys.modules.get(_MODULE_NAME)
    if current is not None and is_sageattention_alias(current):
        return current
    _warn_if_comfyui_looked()
    if not force and _real_sageattention_available():
        try:
            return importlib.import_module(_MODULE_NAME)
        except Exception as e:  # noqa: BLE001 - installed but not importable here (no GPU, wrong build): stand in
            warnings.warn(f"sageattention is installed but failed to import ({e!r}); torch_sage stands in for it")
            sys.modules.pop(_MODULE_NAME, None)
    mod = _make_module()
    _FINDER = _AliasFinder(mod)
    sys.meta_path.insert(0, _FINDER)
    sys.modules[_MODULE_NAME] = mod
    _update_diffusers(mod)
    return mod


def uninstall_sageattention_alias() -> None:
    """Undo ``install_sageattention_alias``, diffusers' records included (modules that already imported sageattn
    keep their reference)."""
    global _FINDER
    if _FINDER is not None:
        try:
            sys.meta_path.remove(_FINDER)
        except ValueError:
            pass
        _FINDER = None
    while _UPDATED:
        mod, name, before, value = _UPDATED.pop()
        if getattr(mod, name, None) is value:  # not changed since by someone else
            setattr(mod, name, before)
    mod = sys.modules.get(_MODULE_NAME)
    if mod is not None and is_sageattention_alias(mod):
        del sys.modules[_MODULE_NAME]
