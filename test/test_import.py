"""Importing torch_sage is cheap: it compiles nothing and pulls in neither Triton nor torch._dynamo."""
import subprocess
import sys


def test_import_loads_no_triton_and_no_dynamo():
    script = ("import sys, torch; import torch_sage; "
              "print(sorted(m for m in ('triton', 'torch._dynamo') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]", res.stdout
