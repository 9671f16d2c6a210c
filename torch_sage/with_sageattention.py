"""Run a Python program with ``sageattention`` served by torch_sage (unless a real SageAttention is installed).

    python -m torch_sage.with_sageattention main.py --use-sage-attention      # ComfyUI
    python -m torch_sage.with_sageattention -m some.module args...            # a module, as python -m

ComfyUI imports ``sageattention`` while it starts (comfy/ldm/modules/attention.py), before any custom node
runs, so the alias must exist before ComfyUI's main.py: this launcher installs it and then runs the program
as ``__main__`` with the remaining arguments in ``sys.argv``. Set ``TORCH_SAGE_FORCE_ALIAS=1`` to use torch_sage
even where a real SageAttention is installed.
"""
import os
import runpy
import sys

import torch_sage

USAGE = "usage: python -m torch_sage.with_sageattention (SCRIPT | -m MODULE) [ARGS...]"


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0 if argv else 2)
    torch_sage.install_sageattention_alias()  # TORCH_SAGE_FORCE_ALIAS=1 forces it
    if argv[0] == "-m":
        if len(argv) < 2:
            raise SystemExit(USAGE)
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
