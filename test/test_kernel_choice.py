"""The one rule that picks the attention kernel of a call (csrc/ops/kernel_choice.h), on the CPU through
sage::_attention_kernel_choice: which GPU runs which kernel by default, what SAGEATTN_SK1_MMA and SAGEATTN_SK1_SM90
change, and what a build without a hand-written kernel falls back to."""
import pytest
import torch

import torch_sage  # noqa: F401  (registers the ops)


def choice(arch, fast=False, d=128, n=4096, sm90_built=True, mma_built=True):
    return torch.ops.sage._attention_kernel_choice(arch, fast, d, n, n, sm90_built, mma_built)


@pytest.fixture(autouse=True)
def default_settings(monkeypatch):
    monkeypatch.delenv("SAGEATTN_SK1_MMA", raising=False)
    monkeypatch.delenv("SAGEATTN_SK1_SM90", raising=False)


@pytest.mark.parametrize("arch", [80, 86, 87, 89, 120, 121])
def test_the_mma_kernel_is_the_fast_modes_default_from_ada_on_but_hopper(arch):
    # kernel_choice.h kMmaDefaultFast / kMmaDefaultAccurate (docs/FINDINGS.md F61): the accurate mode keeps the
    # Triton kernel; the fast mode needs e4m3 tensor cores (sm_89 on), Ampere's is the Triton kernel's.
    assert choice(arch) == "triton" and choice(arch, d=64, n=256) == "triton"
    expect = "mma" if arch >= 89 else "triton"
    assert choice(arch, fast=True) == expect and choice(arch, fast=True, d=64, n=256) == expect


def test_hopper_runs_the_sm90_kernel_in_its_measured_schedule():
    assert choice(90) == "sm90-ws"  # accurate, head_dim 128, thousands of tokens
    assert choice(90, n=2048) == "sm90"
    assert choice(90, d=64) == "sm90"
    assert choice(90, fast=True) == "sm90"
    assert choice(90, fast=True, n=256) == "triton"  # below kMinSm90FastKeys


@pytest.mark.parametrize("arch", [100, 103, 110, 0])  # data-centre Blackwell, Thor, AMD: no hand-written kernel
def test_other_gpus_run_the_triton_kernel(arch):
    assert choice(arch) == "triton" and choice(arch, fast=True) == "triton"


def test_head_dims_past_128_run_the_triton_kernel():
    assert choice(89, d=256) == "triton" and choice(90, d=256) == "triton"


def test_settings(monkeypatch):
    monkeypatch.setenv("SAGEATTN_SK1_MMA", "1")  # forced: on the H100 too, over the sm90 kernel
    assert choice(90) == "mma" and choice(90, fast=True, n=256) == "mma" and choice(100) == "mma"
    assert choice(86, fast=True) == "triton"  # no e4m3 tensor cores, forced or not
    monkeypatch.setenv("SAGEATTN_SK1_MMA", "0")
    assert choice(89) == "triton" and choice(89, fast=True) == "triton" and choice(90) == "sm90-ws"
    monkeypatch.delenv("SAGEATTN_SK1_MMA")
    monkeypatch.setenv("SAGEATTN_SK1_SM90", "1")
    assert choice(90) == "sm90" and choice(90, fast=True, n=256) == "sm90"
    monkeypatch.setenv("SAGEATTN_SK1_SM90", "ws")
    assert choice(90, d=64, n=256) == "sm90-ws"
    monkeypatch.setenv("SAGEATTN_SK1_SM90", "0")
    assert choice(90) == "triton"


@pytest.mark.parametrize("var,value", [("SAGEATTN_SK1_MMA", "yes"), ("SAGEATTN_SK1_MMA", "ws"),
                                       ("SAGEATTN_SK1_SM90", "2")])
def test_bad_settings_are_named(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(RuntimeError, match=var):
        choice(89)
    q = torch.randn(1, 1, 4, 64)
    with pytest.raises(RuntimeError, match=var):  # every call checks them, on every device
        torch.ops.sage.attention(q, q, q)


def test_builds_without_a_hand_written_kernel_fall_back(monkeypatch):
    monkeypatch.setenv("SAGEATTN_SK1_MMA", "1")
    assert choice(89) == "mma" and choice(89, mma_built=False) == "triton"
    monkeypatch.delenv("SAGEATTN_SK1_MMA")
    assert choice(90, sm90_built=False) == "triton"
    assert choice(90, sm90_built=False, mma_built=True) == "triton"  # the mma kernel only where it is the default
    assert choice(89, fast=True) == "mma" and choice(89, fast=True, mma_built=False) == "triton"
