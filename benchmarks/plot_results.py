"""bench_attention.py's side-by-side table as a PNG: per shape, each method's speed as a ratio to cuDNN SDPA (one bar
per method), the card named in the title; and the results file it is drawn from (JSON), so that a run on a GPU
machine without matplotlib is drawn elsewhere:

    python benchmarks/bench_attention.py --save-json bench.json            # on the GPU
    python benchmarks/bench_attention.py --plot-from bench.json --plot bench.png

Torch-free; matplotlib is an optional benchmark dependency, imported only to draw.
"""
import json
import math

REFERENCE = "sdpa-cudnn"  # every ratio is to this method's time, so it is the line at 1, not a bar


def save_results(path, rows, device, torch_version):
    """The table's rows (dicts of bench_attention.py) and the machine that measured them."""
    with open(path, "w") as f:
        json.dump({"device": device, "torch": torch_version, "rows": rows}, f, indent=1)


def load_results(path):
    with open(path) as f:
        results = json.load(f)
    if not isinstance(results, dict) or not {"device", "rows"} <= set(results):
        raise ValueError(f"{path}: not a results file of bench_attention.py --save-json (no device and rows)")
    return results


def select(results, methods=None, tokens=None):
    """The results with only the rows of methods whose names start with one of `methods` (the reference kept) and of
    the sequence lengths in `tokens`, as bench_attention.py's --methods and --tokens choose what to time."""
    def keep(row):
        n = int(row["shape"].split(",")[2])
        return ((not methods or row["method"].startswith(tuple(methods)) or row["method"] == REFERENCE)
                and (not tokens or n in tokens))
    return dict(results, rows=[r for r in results["rows"] if keep(r)])


def _matplotlib():
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("the plot needs matplotlib, an optional benchmark dependency: pip install matplotlib (or "
                          "write the results with --save-json and draw them where it is installed: "
                          "python benchmarks/bench_attention.py --plot-from FILE --plot PNG)") from None
    return matplotlib, Figure


def check_matplotlib():
    """Raises the ImportError that plot_ratios would, before any time is spent measuring."""
    _matplotlib()


def _label(shape, short):
    b, h, n, d, causal = shape.split(",")
    return f"{b}x{h}x{n}x{d}" + (" causal" if causal == "True" else "") + ("*" if short else "")


def plot_ratios(results, path):
    """Writes the PNG to path and returns the matplotlib Figure (one Axes: a group of bars per shape)."""
    matplotlib, Figure = _matplotlib()
    rows = results["rows"]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    methods = [m for m in dict.fromkeys(r["method"] for r in rows) if m != REFERENCE]
    if not shapes or not methods:
        raise ValueError("nothing to plot: the results have no rows beside the reference's")
    ratio = {(r["shape"], r["method"]): r["vs_cudnn"] for r in rows}
    short = {r["shape"]: r.get("short_call", False) for r in rows}
    width = 0.8 / len(methods)
    fig = Figure(figsize=(max(10.0, 1.6 + 0.11 * len(shapes) * len(methods)), 6), layout="constrained")
    ax = fig.add_subplot()
    # the default cycle has 10 colours; bench_attention.py has up to ~20 methods on an H100
    colors = matplotlib.colormaps["tab10" if len(methods) <= 10 else "tab20"]
    for i, method in enumerate(methods):
        color = colors(i % colors.N)
        # nan where a method has no row for a shape: no bar there
        heights = [ratio.get((s, method), math.nan) for s in shapes]
        ax.bar([x + (i - (len(methods) - 1) / 2) * width for x in range(len(shapes))], heights, width,
               label=method, color=color)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label=f"{REFERENCE} (= 1)")
    ax.set_xticks(range(len(shapes)), [_label(s, short[s]) for s in shapes], rotation=20, ha="right")
    ax.set_xlabel("B x H x N x D" + ("  (* short call: wall time, host included)" if any(short.values()) else ""))
    ax.set_ylabel("speed / cuDNN SDPA (higher is faster)")
    ax.set_title(f"Attention speed as a ratio to cuDNN SDPA, bf16: {results['device']}"
                 + (f", torch {results['torch']}" if results.get("torch") else ""))
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1), fontsize="small")  # beside the bars, never over them
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(path, dpi=120)
    return fig
