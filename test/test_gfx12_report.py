"""benchmarks/gfx12_report.py (the script of docs/GFX1200-TESTING.md) runs on a machine without an AMD GPU: it says
so, and its measuring steps work (--smoke runs them on the CPU with tiny shapes)."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gfx12_report.py"


def report(*args, tmp_path):
    out = tmp_path / "report.md"
    res = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args], capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    text = out.read_text()
    assert text.startswith("## torch_sage gfx12 report\n```text\n") and text.rstrip().endswith("```")
    for field in ("torch:", "triton:", "torch_sage:", "SAGEATTN_SK1_GFX1200="):
        assert field in text
    return text


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the report would run for real")
def test_says_no_amd_gpu(tmp_path):
    text = report(tmp_path=tmp_path)
    assert "no AMD GPU" in text and "[accuracy" not in text


def test_smoke_run_of_the_measuring_steps(tmp_path):
    text = report("--smoke", "--skip-tests", tmp_path=tmp_path)
    rows = [ln for ln in text.splitlines() if "sage fp" in ln]
    assert len(rows) == 8 and all(" ok (" in ln for ln in rows), text
    assert "[speed" in text and "failed:" not in text
