"""``python -m torch_sage``: a row per mode, the timing method and the reference said, argparse errors."""
import pytest

import torch_sage
from torch_sage.__main__ import main


def test_demo_prints_a_row_per_mode_and_says_how_it_measures(capsys):
    main(["--device", "cpu", "--shape", "1,2,130,64", "--reps", "3", "--causal"])
    out = capsys.readouterr().out
    rows = {line.split()[0] + (" " + line.split()[1] if line.startswith("sage") else ""): line.split()
            for line in out.splitlines() if line.startswith(("SDPA", "sage ("))}
    assert list(rows) == ["SDPA", "sage (auto)", "sage (fp16)", "sage (fp8)"]
    assert "median of 3 runs" in out and "float64 exact attention" in out
    assert "reference code" in out and "slower than SDPA by design" in out
    cos = {label: float(fields[-4]) for label, fields in rows.items()}
    assert cos["sage (auto)"] == cos["sage (fp16)"] >= 0.9999 and cos["sage (fp8)"] >= 0.999


@pytest.mark.parametrize("argv,message", [
    (["--shape", "1,8,1024"], "argument --shape: expected four integers B,H,N,D"),
    (["--shape", "1,8,x,64"], "argument --shape: expected four integers"),
    (["--shape", "1,8,64,300"], "D between 1 and 256"),
    (["--reps", "0"], "argument --reps: expected a positive integer"),
    (["--device", "tpu"], "argument --device"),
    (["--dtype", "float64"], "argument --dtype: invalid choice"),
])
def test_bad_arguments_are_argparse_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m torch_sage") and message in err and "Traceback" not in err


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith(f"torch_sage {torch_sage.__version__}")
