"""Triton's JIT as the GPU kernels of the sage ops where nothing precompiled serves.

- ``sage::_quant_qk_int8_triton`` / ``sage::_quant_v_fp8_triton``: the quantization kernels chosen with
  SAGEATTN_SK1_PROLOGUE=triton, and those of an NVIDIA arch the build did not compile for (with a warning).
- ``sage::_qk_int8_attention_triton``: what the C++ kernel of qk_int8_attention calls for an arch or specialization
  the build did not compile ahead of time (it warns once).
- A build without GPU code (a CUDA or ROCm torch with no usable toolkit at build time) has no C++ GPU kernels at
  all: then these JIT kernels serve the public ops themselves, with a one-time warning that they compile on first use.

The Triton modules are imported on first use, so importing torch_sage needs no Triton and compiles nothing.
"""
import warnings

import torch

from . import arch, contract, ops


def _quant_qk_int8_triton(q, k, tensor_layout, sm_scale, smooth_k):
    contract.check_sm_scale(sm_scale)  # the Triton prologue's one check (the HIP one's is q_multiplier, in C++)
    arch.check_device(q.device)  # supported GPU (gfx1200 opt-in, sm_80+), else a clear error
    from .triton_quant import quant_qk_int8_triton

    return quant_qk_int8_triton(q, k, tensor_layout, sm_scale, smooth_k)


def _quant_v_fp8_triton(v, tensor_layout):
    arch.check_device(v.device)
    from .triton_quant import quant_v_fp8_triton

    return quant_v_fp8_triton(v, tensor_layout)


def _qk_int8_attention_triton(q_int8, q_scale, k_int8, k_scale, v, v_scale, qo_len, tensor_layout, is_causal,
                              out_dtype):
    arch.check_device(q_int8.device)
    from .triton_attention import qk_int8_attention_triton

    return qk_int8_attention_triton(q_int8, q_scale, k_int8, k_scale, v, v_scale, qo_len, tensor_layout, is_causal,
                                    out_dtype)


torch.library.register_kernel("sage::_quant_qk_int8_triton", "cuda", _quant_qk_int8_triton)
torch.library.register_kernel("sage::_quant_v_fp8_triton", "cuda", _quant_v_fp8_triton)
torch.library.register_kernel("sage::_qk_int8_attention_triton", "cuda", _qk_int8_attention_triton)
torch.library.register_fake("sage::_quant_v_fp8_triton")(ops._quant_v_fp8_fake)
torch.library.register_fake("sage::_qk_int8_attention_triton")(ops._qk_int8_attention_fake)

_warned = False


def _jit_only(fn):
    """fn, warning once that this build compiles its GPU kernels on first use."""
    def run(*args):
        global _warned
        if not _warned:
            _warned = True
            warnings.warn("torch_sage was built without GPU code (no usable CUDA/ROCm toolkit at build time): its "
                          "GPU kernels are Triton's, compiled on first use. Rebuild with a toolkit (see README.md, "
                          "Set-up) for precompiled kernels.", stacklevel=3)
        return fn(*args)
    return run


if not torch._C._dispatch_has_kernel_for_dispatch_key("sage::qk_int8_attention", "CUDA"):
    torch.library.register_kernel("sage::quant_qk_int8", "cuda", _jit_only(_quant_qk_int8_triton))
    torch.library.register_kernel("sage::quant_v_fp8", "cuda", _jit_only(_quant_v_fp8_triton))
    torch.library.register_kernel("sage::qk_int8_attention", "cuda", _jit_only(_qk_int8_attention_triton))
