"""Every unsupported input gets a clean Python exception of the expected type, naming the problem: never a crash
(a signal, an abort), never a silent result.

Each entry of BAD_INPUTS is a short snippet run in a child Python process, after PREAMBLE, so that a crash is
seen as one. The entries of a device share one process (a crash ends it: the entry it happened in is recorded,
and the rest run in a new process), so the table costs a few interpreter starts, not one per entry.
"""
import json
import os
import subprocess
import sys

import pytest
import torch

PREAMBLE = '''
import math, os, torch, torch_sage
from torch_sage import dropin
dev = os.environ["SAGE_BAD_INPUT_DEVICE"]

def qkv(b=1, hq=2, hk=2, nq=16, nk=16, d=64, dtype=torch.float16):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(b, h, n, d, generator=g).to(dev, dtype) for h, n in ((hq, nq), (hk, nk), (hk, nk))]

q, k, v = qkv()
attention = torch.ops.sage.attention
'''

# (name, snippet, exception type, regular expression its message must contain)
BAD_INPUTS = [
    ("float64", "attention(*[t.double() for t in qkv()])", RuntimeError, "float16 or bfloat16"),
    ("int8", "attention(*[t.to(torch.int8) for t in qkv()])", RuntimeError, "float16 or bfloat16"),
    ("float8 input", "attention(*[t.to(torch.float8_e4m3fn) for t in qkv()])", RuntimeError, "float16 or bfloat16"),
    ("mixed dtypes", "attention(q, k.bfloat16(), v)", RuntimeError, "same dtype"),
    ("3-D", "attention(q[0], k[0], v[0])", RuntimeError, "must be 4-D"),
    ("5-D", "attention(q[None], k[None], v[None])", RuntimeError, "must be 4-D"),
    ("not a tensor", "attention(1, k, v)", RuntimeError, "Expected a value of type 'Tensor'"),
    ("meta k among others", "attention(q, k.to('meta'), v)", RuntimeError, "same device, got .*k on meta"),
    ("meta q among others", "attention(q.to('meta'), k, v)", RuntimeError, "same device, got q on meta"),
    ("meta v, with lse", "torch.ops.sage.attention_with_lse(q, k, v.to('meta'))", RuntimeError,
     "same device, got .*v on meta"),
    ("meta k, prologue", "torch.ops.sage.quant_qk_int8(q, k.to('meta'), 'HND', 0.125, True)", RuntimeError,
     "same device"),
    ("head_dim mismatch", "attention(q, k[..., :32].contiguous(), v[..., :32].contiguous())", RuntimeError,
     "same head_dim"),
    ("k, v shape mismatch", "attention(q, k, v[:, :, :8].contiguous())", RuntimeError,
     "k and v must have the same shape"),
    ("batch mismatch", "attention(q, k.repeat(2, 1, 1, 1), v.repeat(2, 1, 1, 1))", RuntimeError, "same batch size"),
    ("heads not a multiple", "attention(*qkv(hq=3, hk=2))", RuntimeError,
     r"query heads \(3\) must be a multiple of the number of key/value heads \(2\)"),
    ("no key/value heads", "attention(q, k[:, :0], v[:, :0])", RuntimeError, "multiple of the number of key/value"),
    ("head_dim 320", "attention(*qkv(d=320))", RuntimeError, "head_dim must be between 1 and 256, got 320"),
    ("head_dim 0", "attention(*qkv(d=0))", RuntimeError, "head_dim must be between 1 and 256, got 0"),
    ("last dim strided", "attention(*[t.transpose(-1, -2) for t in qkv(nq=64, nk=64)])", RuntimeError,
     "last dimension .* must be contiguous"),
    ("bad layout", "attention(q, k, v, 'BHSD')", RuntimeError, 'tensor_layout must be "HND"'),
    ("bad layout, sageattn", "torch_sage.sageattn(q, k, v, tensor_layout='bhsd')", RuntimeError,
     'tensor_layout must be "HND"'),
    ("bad pv_mode", "attention(q, k, v, pv_mode='int4')", RuntimeError, 'pv_mode must be "auto", "fp16"'),
    ("bad pv_accum_dtype", "torch_sage.sageattn(q, k, v, pv_accum_dtype='fp64')", ValueError,
     "pv_accum_dtype must be one of"),
    ("sm_scale str", "attention(q, k, v, 'HND', False, 'x')", RuntimeError, "'sm_scale'"),
    ("sm_scale inf", "attention(q, k, v, sm_scale=math.inf)", RuntimeError, "sm_scale"),
    ("sm_scale nan", "attention(q, k, v, sm_scale=math.nan)", RuntimeError, "sm_scale"),
    ("sm_scale 1e36", "attention(q, k, v, sm_scale=1e36)", RuntimeError, "sm_scale"),
    ("sm_scale -1e39", "attention(q, k, v, sm_scale=-1e39)", RuntimeError, "sm_scale"),
    ("misspelt keyword", "torch_sage.sageattn(q, k, v, is_casual=True)", TypeError,
     "unexpected keyword argument 'is_casual'.*did you mean 'is_causal'"),
    ("sdpa's scale keyword", "torch_sage.sageattn(q, k, v, scale=0.1)", TypeError, "did you mean 'sm_scale'"),
    ("varlen keyword to sageattn", "torch_sage.sageattn(q, k, v, cu_seqlens_q=None)", TypeError, "sageattn_varlen"),
    ("attn_mask to sageattn", "torch_sage.sageattn(q, k, v, attn_mask=torch.ones(16, 16, dtype=torch.bool))",
     ValueError, "attn_mask is not supported"),
    ("dropout to sageattn", "torch_sage.sageattn(q, k, v, dropout_p=0.1)", ValueError, "dropout_p=0.1"),
    ("float32 to the alias", "dropin.sageattn(*qkv(dtype=torch.float32))", TypeError,
     "float32; SageAttention takes float16 or bfloat16 only"),
    ("float32 to an alias kernel", "dropin.sageattn_qk_int8_pv_fp8_cuda(*qkv(dtype=torch.float32))", TypeError,
     "float16 or bfloat16 only"),
    ("varlen with 4-D q", "dropin.sageattn_varlen(q, k, v, torch.tensor([0, 16]), torch.tensor([0, 16]), 16, 16)",
     ValueError, r"\[total_tokens, heads, head_dim\]"),
    ("backward", "attention(*[t.float().requires_grad_() for t in qkv()]).sum().backward()", RuntimeError,
     "derivative for sage::attention is not implemented"),
    ("kernel op, wrong qo_len",
     "a = torch.ops.sage.quant_qk_int8(q, k, 'HND', 0.125, False); "
     "torch.ops.sage.qk_int8_attention(a[0], a[1], a[2], a[3], v, None, 200, 'HND', False, torch.float16)",
     RuntimeError, "qo_len 200 / kv_len 16 do not match"),
    ("sdpa_mode bad pv_mode", "torch_sage.sdpa_mode(pv_mode='int4')", ValueError, "pv_mode"),
    # The variables are read at every call: set for one call, then removed.
    ("SAGEATTN_SK1_PROLOGUE=foo",
     "os.environ['SAGEATTN_SK1_PROLOGUE'] = 'foo'\ntry:\n    attention(q, k, v)\n"
     "finally:\n    del os.environ['SAGEATTN_SK1_PROLOGUE']", RuntimeError, "SAGEATTN_SK1_PROLOGUE"),
    ("SAGEATTN_SK1_PROLOGUE=foo, quant_v_fp8",
     "os.environ['SAGEATTN_SK1_PROLOGUE'] = 'foo'\ntry:\n    torch.ops.sage.quant_v_fp8(v, 'HND')\n"
     "finally:\n    del os.environ['SAGEATTN_SK1_PROLOGUE']", RuntimeError, "SAGEATTN_SK1_PROLOGUE"),
    ("SAGEATTN_SK1_GFX1200=yes",
     "os.environ['SAGEATTN_SK1_GFX1200'] = 'yes'\ntry:\n    attention(q, k, v)\n"
     "finally:\n    del os.environ['SAGEATTN_SK1_GFX1200']", RuntimeError, "SAGEATTN_SK1_GFX1200"),
    ("SAGEATTN_SK1_SM90=on",
     "os.environ['SAGEATTN_SK1_SM90'] = 'on'\ntry:\n    attention(q, k, v)\n"
     "finally:\n    del os.environ['SAGEATTN_SK1_SM90']", RuntimeError, "SAGEATTN_SK1_SM90 must be"),
    ("SAGEATTN_SK1_MMA=on",
     "os.environ['SAGEATTN_SK1_MMA'] = 'on'\ntry:\n    attention(q, k, v)\n"
     "finally:\n    del os.environ['SAGEATTN_SK1_MMA']", RuntimeError, "SAGEATTN_SK1_MMA must be"),
    ("SAGEATTN_SK1_OVERLAP=yes, quant_v_fp8",
     "os.environ['SAGEATTN_SK1_OVERLAP'] = 'yes'\ntry:\n    torch.ops.sage.quant_v_fp8(v, 'HND')\n"
     "finally:\n    del os.environ['SAGEATTN_SK1_OVERLAP']", RuntimeError, "SAGEATTN_SK1_OVERLAP must be"),
    ("float8 v to the fast mode's kernel, which quantizes v itself",
     "a = torch.ops.sage.quant_qk_int8(q, k, 'HND', 0.125, False); v8, vs = torch.ops.sage.quant_v_fp8(v, 'HND'); "
     "torch.ops.sage._qk_int8_attention_fast(a[0], a[1], a[2], a[3], v8, 16, 'HND', False, torch.float16)",
     RuntimeError, "float16 or bfloat16"),
]
# Only where a GPU exists: inputs on two real devices.
GPU_BAD_INPUTS = [
    ("cpu k among gpu inputs", "attention(q, k.cpu(), v)", RuntimeError, "same device"),
    ("gpu q among cpu inputs", "attention(q, k.cpu(), v.cpu())", RuntimeError, "same device"),
    ("cpu v_scale among gpu inputs",
     "a = torch.ops.sage.quant_qk_int8(q, k, 'HND', 0.125, False); v8, vs = torch.ops.sage.quant_v_fp8(v, 'HND'); "
     "torch.ops.sage.qk_int8_attention(a[0], a[1], a[2], a[3], v8, vs.cpu(), 16, 'HND', False, torch.float16)",
     RuntimeError, "must be on"),
]

RUNNER = '''
import json, sys, traceback
entries = json.loads(sys.argv[1])
exec(compile(PREAMBLE, "<preamble>", "exec"))
for name, snippet in entries:
    print(json.dumps({"start": name}), flush=True)
    try:
        exec(compile(snippet, name, "exec"))
        result = {"name": name, "raised": None}
    except BaseException as e:  # noqa: BLE001 - the test judges it
        result = {"name": name, "raised": [c.__name__ for c in type(e).__mro__], "message": str(e)}
    print(json.dumps(result), flush=True)
'''


def run_entries(entries, device):
    """{name: result} for (name, snippet) entries, run in as few child processes as crashes allow."""
    env = dict(os.environ, SAGE_BAD_INPUT_DEVICE=device)
    for var in ("SAGEATTN_SK1_PROLOGUE", "SAGEATTN_SK1_GFX1200", "SAGEATTN_SK1_SM90", "SAGEATTN_SK1_MMA",
                "SAGEATTN_SK1_OVERLAP"):
        env.pop(var, None)
    results, pending = {}, list(entries)
    while pending:
        program = f"PREAMBLE = {PREAMBLE!r}\n{RUNNER}"
        res = subprocess.run([sys.executable, "-c", program, json.dumps(pending)], env=env, capture_output=True,
                             text=True, timeout=600)
        started = None
        for line in res.stdout.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if "start" in record:
                started = record["start"]
            elif "name" in record:
                results[record["name"]] = record
        done = [e for e in pending if e[0] in results]
        if started is None or len(done) == len(pending):
            if len(done) < len(pending):  # the preamble itself failed
                for name, _ in pending:
                    results[name] = {"name": name, "crash": f"exit {res.returncode} before any entry:\n"
                                                            f"{res.stderr[-3000:]}"}
            break
        if started not in results:  # the process died inside this entry
            results[started] = {"name": started, "crash": f"exit {res.returncode} (a negative one is a signal):\n"
                                                          f"{res.stderr[-3000:]}"}
        pending = [e for e in pending if e[0] not in results]
    return results


_CACHE = {}


def results_for(device):
    if device not in _CACHE:
        table = BAD_INPUTS + (GPU_BAD_INPUTS if device != "cpu" else [])
        _CACHE[device] = run_entries([(name, snippet) for name, snippet, _, _ in table], device)
    return _CACHE[device]


def check(entry, device):
    import re

    name, _, exc, pattern = entry
    result = results_for(device)[name]
    assert "crash" not in result, f"{name}: the process crashed: {result['crash']}"
    assert result["raised"] is not None, f"{name}: returned without an error"
    assert exc.__name__ in result["raised"], f"{name}: raised {result['raised'][0]}, not {exc.__name__}: " \
                                             f"{result['message']}"
    assert re.search(pattern, result["message"]), f"{name}: message {result['message']!r} lacks {pattern!r}"
    assert "Traceback" not in result["message"]


@pytest.mark.parametrize("entry", BAD_INPUTS, ids=[e[0] for e in BAD_INPUTS])
def test_cpu_bad_input_raises_cleanly(entry):
    check(entry, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("entry", BAD_INPUTS + GPU_BAD_INPUTS, ids=[e[0] for e in BAD_INPUTS + GPU_BAD_INPUTS])
def test_gpu_bad_input_raises_cleanly(entry):
    check(entry, "cuda")


def test_a_crash_is_reported_as_one_and_the_rest_still_run():
    entries = [("fine", "attention(q, k, v)"), ("abort", "os.abort()"), ("after", "attention(q, k, 'x')")]
    results = run_entries(entries, "cpu")
    assert results["fine"]["raised"] is None
    assert "crash" in results["abort"] and "exit -" in results["abort"]["crash"]
    assert "TypeError" in results["after"]["raised"] or "RuntimeError" in results["after"]["raised"]
    assert torch.ops.sage.attention is not None  # the main process is untouched
