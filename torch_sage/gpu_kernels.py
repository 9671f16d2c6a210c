"""GPU kernels written in Triton, registered as the CUDA (also ROCm) kernels of their sage ops.

The Triton modules are imported on first use, so importing torch_sage needs no Triton and compiles nothing.
The default prologue (sage::quant_qk_int8) is the hand-written HIP kernel registered in C++.
"""
import torch

from . import arch


def _quant_qk_int8_triton(q, k, tensor_layout, sm_scale, smooth_k):
    arch.check_device(q.device)  # supported GPU (gfx1200 opt-in, sm_80+), else a clear error
    from .triton_quant import quant_qk_int8_triton

    return quant_qk_int8_triton(q, k, tensor_layout, sm_scale, smooth_k)


def _quant_v_fp8(v, tensor_layout):
    arch.check_device(v.device)
    from .triton_quant import quant_v_fp8_triton

    if tensor_layout not in ("HND", "NHD"):
        raise RuntimeError(f'sage: tensor_layout must be "HND" or "NHD", got "{tensor_layout}"')
    return quant_v_fp8_triton(v, tensor_layout)


def _qk_int8_attention(q_int8, q_scale, k_int8, k_scale, v, v_scale, qo_len, tensor_layout, is_causal, out_dtype):
    arch.check_device(q_int8.device)
    from .triton_attention import qk_int8_attention_triton

    return qk_int8_attention_triton(q_int8, q_scale, k_int8, k_scale, v, v_scale, qo_len, tensor_layout, is_causal,
                                    out_dtype)


torch.library.register_kernel("sage::_quant_qk_int8_triton", "cuda", _quant_qk_int8_triton)
torch.library.register_kernel("sage::quant_v_fp8", "cuda", _quant_v_fp8)
torch.library.register_kernel("sage::qk_int8_attention", "cuda", _qk_int8_attention)
