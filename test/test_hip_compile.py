"""csrc/hip compiles on its own (no torch, no ATen) with nvcc for sm_90, without spills: a compile-only check
that runs on CPU machines with nvcc (CI has one)."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "csrc" / "hip").glob("*.hip"))


def test_csrc_hip_has_no_aten():
    for path in sorted((ROOT / "csrc" / "hip").iterdir()):
        text = path.read_text()
        assert not re.search(r"#include\s*[<\"](ATen|torch|c10)/", text), f"{path.name} includes torch headers"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_nvcc_sm90_compiles_without_spills(src, tmp_path):
    res = subprocess.run(["nvcc", "-std=c++17", "-O3", "-arch=sm_90", "-Xptxas", "-v", "-Werror", "all-warnings",
                          "-x", "cu", "-c", str(src), "-o", str(tmp_path / "k.o")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    report = res.stderr
    assert "Used" in report and re.findall(r"(\d+) bytes spill stores", report)
    assert all(n == "0" for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)), report
    assert all(n == "0" for n in re.findall(r"(\d+) bytes stack frame", report)), report
