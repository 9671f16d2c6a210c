"""benchmarks/timing.py's turns: every method once a turn, in an order of its own each turn, the same every run."""
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import timing  # noqa: E402


def turns(names, reps, monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # no GPU needed: `once` below times nothing
    calls = []
    fns = {n: (lambda n=n: calls.append(n)) for n in names}
    times = timing.interleaved_ms(fns, reps, once=lambda fn: (fn(), 1.0)[1])
    assert times == {n: 1.0 for n in names}
    return [calls[r * len(names):(r + 1) * len(names)] for r in range(reps)]


@pytest.mark.parametrize("n,reps", [(6, 5), (3, 50)])
def test_each_turn_calls_every_method_once_in_its_own_order(monkeypatch, n, reps):
    names = [f"m{i}" for i in range(n)]
    orders = turns(names, reps, monkeypatch)
    assert all(sorted(o) == sorted(names) for o in orders)
    # No method follows the same one in every turn (a fixed order gave cuDNN one neighbour, F44).
    for name in names:
        before = {o[o.index(name) - 1] if o.index(name) else None for o in orders}
        assert len(before) > 1, (name, orders)
    assert orders == turns(names, reps, monkeypatch)  # seeded: two runs time the same orders
