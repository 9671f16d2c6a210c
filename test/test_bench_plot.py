"""benchmarks/plot_results.py: bench_attention.py's table (ratio to cuDNN per shape, one bar per method, the card in
the title) drawn from a small made-up results table, the results file it is re-drawn from, and the error without
matplotlib. No GPU needed."""
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import plot_results  # noqa: E402

DEVICE = "NVIDIA H100 80GB HBM3"
# shape -> {method: ratio to cuDNN}; sage-fp8 has no row for the causal shape (no bar there)
RATIOS = {"1,40,32760,128,False": {"sdpa-cudnn": 1.0, "sdpa-flash": 0.61, "sage-auto": 1.32, "sage-fp8": 1.71},
          "1,32,8192,128,True": {"sdpa-cudnn": 1.0, "sdpa-flash": 0.58, "sage-auto": 1.05},
          "1,40,256,128,False": {"sdpa-cudnn": 1.0, "sdpa-flash": 0.92, "sage-auto": 0.55, "sage-fp8": 0.52}}


def fake_rows():
    return [dict(shape=shape, method=m, ms=2.0 / r, tops=100 * r, cosine=0.9999, rel_l1=0.01,
                 short_call=shape.split(",")[2] == "256", ms_back_to_back=1.9 / r, vs_cudnn=r,
                 vs_cudnn_back_to_back=r) for shape, by_method in RATIOS.items() for m, r in by_method.items()]


@pytest.fixture
def results_file(tmp_path):
    path = tmp_path / "bench.json"
    plot_results.save_results(path, fake_rows(), DEVICE, "2.11.0+cu128")  # no matplotlib needed for this
    return path


def test_bars_are_the_ratios_to_cudnn(results_file, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "bench.png"
    fig = plot_results.plot_ratios(plot_results.load_results(results_file), png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (ax,) = fig.axes
    assert DEVICE in ax.get_title() and "2.11.0+cu128" in ax.get_title()
    shapes = list(RATIOS)
    bars = {c.get_label(): [p.get_height() for p in c.patches] for c in ax.containers}
    assert list(bars) == ["sdpa-flash", "sage-auto", "sage-fp8"]  # cuDNN is the line at 1, not a bar
    for method, heights in bars.items():
        expect = [RATIOS[s].get(method, math.nan) for s in shapes]
        assert len(heights) == len(shapes)
        assert all((math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(heights, expect)), (method, heights)
    assert [line.get_ydata()[0] for line in ax.get_lines()] == [1.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1x40x32760x128", "1x32x8192x128 causal",
                                                            "1x40x256x128*"]
    # the bars of one shape side by side, centred on its tick
    centres = [[p.get_x() + p.get_width() / 2 for p in c.patches] for c in ax.containers]
    for i in range(len(shapes)):
        group = [c[i] for c in centres]
        assert group == sorted(group) and abs(sum(group) / len(group) - i) < 1e-9


def test_select_keeps_the_reference():
    results = {"device": DEVICE, "rows": fake_rows()}
    rows = plot_results.select(results, ["sage-a"], {32760, 8192})["rows"]
    assert {(r["shape"].split(",")[2], r["method"]) for r in rows} == {
        ("32760", "sdpa-cudnn"), ("32760", "sage-auto"), ("8192", "sdpa-cudnn"), ("8192", "sage-auto")}
    assert plot_results.select(results)["rows"] == results["rows"]


def test_load_refuses_other_json(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match="not a results file"):
        plot_results.load_results(path)


def test_no_matplotlib_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(ImportError, match="pip install matplotlib.*--plot-from"):
        plot_results.plot_ratios({"device": DEVICE, "rows": fake_rows()}, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def _bench(*args, block_matplotlib=False):
    """benchmarks/bench_attention.py with args in a fresh process (CPU only: nothing here measures)."""
    code = ("import runpy, sys\n"
            + ("sys.modules['matplotlib'] = None\n" if block_matplotlib else "")
            + f"sys.argv = ['bench_attention.py'] + {list(map(str, args))!r}\n"
            + f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
            + f"runpy.run_path({str(ROOT / 'benchmarks' / 'bench_attention.py')!r}, run_name='__main__')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_plot_from_a_saved_run(results_file, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "again.png"
    res = _bench("--plot-from", results_file, "--plot", png, "--methods", "sage-auto")
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == f"wrote {png} (6 rows of {DEVICE})"
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_plot_without_matplotlib_stops_before_measuring(tmp_path):
    """On a GPU machine without matplotlib, --plot fails at once (naming the fix), not after the measurements."""
    res = _bench("--plot", tmp_path / "x.png", "--save-json", tmp_path / "x.json", block_matplotlib=True)
    assert res.returncode == 2 and "pip install matplotlib" in res.stderr, res.stderr[-3000:]
    assert not (tmp_path / "x.json").exists()
