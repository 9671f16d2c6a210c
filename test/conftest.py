import math
import os
import pathlib
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    # Without a GPU the Triton kernels run in Triton's interpreter on CPU tensors. The variable is read when
    # a kernel is defined, so it is set before anything imports torch_sage's Triton modules.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch_sage  # noqa: E402,F401  (registers torch.ops.sage.*)

# Test files that run Triton kernels in Triton's interpreter (on CPU tensors). TRITON_INTERPRET must be set before
# triton is first imported, and once set it switches every Triton kernel of the process to the interpreter, so on
# a machine with a GPU these files run in a child pytest process that sees no GPU, and the main process never
# sets the variable. SAGE_INTERPRETER_SUBPROCESS=1 takes that path on a CPU-only machine too (to test it).
INTERPRETER_TEST_FILES = ("test_triton_attention_interp.py", "test_triton_quant_interp.py")

# Accuracy bounds of docs/SEMANTICS.md against float64 exact attention.
BOUNDS = {"fp16": (0.9999, 0.015), "fp8": (0.9995, 0.03)}


def gpu_device():
    return "cuda" if torch.cuda.is_available() else None


def interpreter_in_subprocess() -> bool:
    return torch.cuda.is_available() or os.environ.get("SAGE_INTERPRETER_SUBPROCESS") == "1"


def triton_interpreter_unusable():
    """Why Triton's interpreter cannot run these kernels here (a skip reason), or None."""
    try:
        import numpy as np
        import triton
    except ImportError as e:
        return f"needs triton and numpy ({e})"
    try:
        int(np.zeros(1))
    except TypeError:  # numpy >= 2.4; Triton 3.7's interpreter squeezes its scalars first
        if tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7):
            return "Triton < 3.7's interpreter cannot run loops with runtime bounds under numpy >= 2.4"
    return None


class InterpreterProcessFailed(Exception):
    pass


class InterpreterProcessItem(pytest.Item):
    """Runs one interpreter test file in a child pytest process without a visible GPU and with
    TRITON_INTERPRET=1, and passes, fails or skips as that run does."""

    def runtest(self):
        env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="",
                   ROCR_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
        env.pop("SAGE_INTERPRETER_SUBPROCESS", None)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        with tempfile.TemporaryDirectory() as tmp:
            report = pathlib.Path(tmp) / "report.xml"
            cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", f"--junitxml={report}",
                   str(self.path)]
            res = subprocess.run(cmd, cwd=str(self.config.rootpath), env=env, capture_output=True, text=True,
                                 timeout=1200)
            if report.exists():
                suite = ET.parse(report).getroot()
                suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
                counts = {key: int(suite.get(key, 0)) for key in counts}
        output = (res.stdout + res.stderr)[-6000:]
        self.user_properties.append(("child_counts", counts))
        all_skipped = counts["tests"] > 0 and counts["skipped"] == counts["tests"]
        # pytest exits 5 when a module-level skip leaves no test to run
        if res.returncode not in ((0, 5) if all_skipped else (0,)) or counts["failures"] or counts["errors"] \
                or counts["tests"] == 0:
            raise InterpreterProcessFailed(f"child pytest exited {res.returncode} with {counts}:\n{output}")
        if all_skipped:
            reasons = [line for line in output.splitlines() if line.startswith("SKIPPED")]
            pytest.skip(f"all {counts['tests']} skipped in the interpreter process: {reasons[:1]}")

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, InterpreterProcessFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.path.name} in a Triton-interpreter process"


class InterpreterProcessFile(pytest.File):
    def collect(self):
        yield InterpreterProcessItem.from_parent(self, name="in_interpreter_process")


def pytest_pycollect_makemodule(module_path: pathlib.Path, parent):
    if module_path.name in INTERPRETER_TEST_FILES and interpreter_in_subprocess():
        return InterpreterProcessFile.from_parent(parent, path=module_path)
    return None


def pytest_collection_modifyitems(config, items):
    if gpu_device() is None:
        skip = pytest.mark.skip(reason="needs a CUDA or ROCm GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


def make_qkv(b, hq, hk, nq, nk, d, dtype=torch.float16, layout="HND", device="cpu", seed=0, key_bias=4.0,
             scale=1.0):
    """Random q, k, v; keys carry a per-channel offset shared by all tokens (key_bias * randn(D))."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, nq, d, generator=g) * scale
    k = torch.randn(b, hk, nk, d, generator=g) * scale + key_bias * torch.randn(d, generator=g)
    v = torch.randn(b, hk, nk, d, generator=g)
    out = []
    for t in (q, k, v):
        t = t.to(dtype=dtype, device=device)
        out.append(t if layout == "HND" else t.transpose(1, 2).contiguous())
    return out


def poison_allocator_cache():
    """Leaves the CUDA caching allocator's free blocks, small (under 1 MiB, from 2 MiB segments) and large, holding
    0xFF bytes (NaN in float32 and e4m3, -1 in int8): the next allocations reuse them, so a byte a kernel should
    write and does not shows in its results."""
    torch.cuda.empty_cache()
    poison = [torch.full((n,), 0xFF, dtype=torch.uint8, device="cuda") for n in [1 << 20] * 16 + [20 << 20] * 4]
    del poison


def to_hnd(t, layout):
    return t if layout == "HND" else t.transpose(1, 2)


def exact_attention(q, k, v, layout="HND", is_causal=False, sm_scale=None):
    """float64 attention (SDPA math) with GQA; returns (out in layout, lse [B, Hq, Nq])."""
    q, k, v = (to_hnd(t, layout).double().cpu() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = q @ k.transpose(-1, -2) * scale
    if is_causal:
        nq, nk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(nq, nk, dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(s, -1)
    out = torch.softmax(s, -1) @ v if s.shape[-1] > 0 else torch.zeros_like(q[..., : v.shape[-1]])
    return (out if layout == "HND" else out.transpose(1, 2)), lse


def as_computed(t):
    """The values torch_sage computes with: float32 inputs are converted to bfloat16 first (docs/SEMANTICS.md), so
    the accuracy bounds hold against exact attention of those."""
    return t.bfloat16() if t.dtype == torch.float32 else t


def accuracy(out, ref):
    """(cosine similarity, relative L1) of out against the reference, over all elements, in float64."""
    o, r = out.double().cpu().flatten(), ref.double().cpu().flatten()
    cos = F.cosine_similarity(o, r, dim=0).item()
    rel_l1 = ((o - r).abs().sum() / r.abs().sum()).item()
    return cos, rel_l1


def e4m3_floor(q, k, v, causal, scale):
    """(cosine, rel L1) of exact attention with only P (times 448) and V (per-channel scale over all keys) rounded
    to e4m3 against exact attention, all in float64, inputs [B, H, N, D] with GQA."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    p = torch.exp(s - s.amax(-1, keepdim=True))
    vs = v.abs().amax(2, keepdim=True) / 448
    vs = torch.where(vs > 0, vs, torch.ones_like(vs))
    e4 = lambda x: x.clamp(-448, 448).to(torch.float8_e4m3fn).double()  # noqa: E731
    approx = (e4(p * 448) / 448) @ (e4(v / vs) * vs) / p.sum(-1, keepdim=True)
    return accuracy(approx, torch.softmax(s, -1) @ v)


def mode_bound(mode, q, k, v, causal, scale):
    """(min cosine, max rel L1) a result of mode must meet on these inputs: the mode's bound, and in the fast mode,
    where few keys or channels leave P's and V's e4m3 rounding nothing to average over, 1.15 times the e4m3 floor
    of the case (1.3 times its cosine gap), whichever is looser (docs/SEMANTICS.md, "Accuracy bounds")."""
    min_cos, max_l1 = BOUNDS[mode]
    if mode == "fp8":
        floor_cos, floor_l1 = e4m3_floor(q, k, v, causal, scale)
        max_l1 = max(max_l1, 1.15 * floor_l1)
        min_cos = min(min_cos, 1 - 1.3 * (1 - floor_cos))
    return min_cos, max_l1


def assert_accurate(out, ref, mode):
    cos, l1 = accuracy(out, ref)
    min_cos, max_l1 = BOUNDS[mode]
    assert torch.isfinite(out).all()
    assert cos >= min_cos and l1 <= max_l1, f"{mode}: cosine {cos:.6f} (>= {min_cos}), rel L1 {l1:.5f} (<= {max_l1})"
