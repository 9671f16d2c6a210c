"""An independent, vectorized torch implementation of the quantization rules of docs/SEMANTICS.md,
used to check every backend of the prologue bit for bit."""
import math

import torch

LOG2E = 1.4426950408889634


def _padded(d):
    return 64 if d <= 64 else (128 if d <= 128 else 256)


def quantize_blocks(x, block, qmax=127.0):
    """x: float32 [B, H, N, D] -> (int8 [B, H, N_pad, D_pad], scale [B, H, N_pad / block])."""
    b, h, n, d = x.shape
    n_pad, d_pad = math.ceil(n / block) * block, _padded(d)
    xp = torch.zeros(b, h, n_pad, d, dtype=torch.float32)
    xp[:, :, :n] = x
    blocks = xp.view(b, h, n_pad // block, block * d)
    finite = torch.isfinite(blocks).all(-1)
    amax = blocks.abs().nan_to_num(0.0, 0.0, 0.0).amax(-1) if blocks.numel() else torch.zeros(b, h, 0)
    scale = torch.where(finite, amax / torch.tensor(qmax, dtype=torch.float32), torch.tensor(float("nan")))
    ok = (scale > 0)[..., None]
    safe = torch.where(ok, scale[..., None], torch.ones(()))
    vals = torch.where(ok, torch.round(blocks / safe).clamp(-qmax, qmax), torch.zeros(()))
    vals = vals.view(b, h, n_pad, d).to(torch.int8)
    out = torch.zeros(b, h, n_pad, d_pad, dtype=torch.int8)
    out[..., :d] = vals
    out[:, :, n:] = 0
    return out, scale


def quant_qk_reference(q_hnd, k_hnd, sm_scale, smooth_k):
    """q_hnd, k_hnd: [B, H, N, D] views; returns what sage::quant_qk_int8 must return."""
    mult = torch.tensor(sm_scale * LOG2E, dtype=torch.float32)
    xq = q_hnd.float() * mult
    xk = k_hnd.float()
    mean = torch.empty(0)
    if smooth_k:
        n = k_hnd.shape[2]
        mean = (k_hnd.double().sum(2) / n).float() if n else torch.zeros(k_hnd.shape[0], k_hnd.shape[1], k_hnd.shape[3])
        xk = xk - mean[:, :, None, :]
    qi, qs = quantize_blocks(xq, 128)
    ki, ks = quantize_blocks(xk, 64)
    return qi, qs, ki, ks, mean


def quant_v_reference(v_hnd):
    """Per-channel float8_e4m3fn of v [B, H, N, D] -> (v_fp8 [B, H, N, D], v_scale [B, H, D])."""
    x = v_hnd.float()
    finite = torch.isfinite(x).all(2)
    amax = x.abs().nan_to_num(0.0, 0.0, 0.0).amax(2) if x.shape[2] else torch.zeros(x.shape[0], x.shape[1], x.shape[3])
    scale = torch.where(finite, amax / torch.tensor(448.0), torch.tensor(float("nan")))
    ok = (scale > 0)[:, :, None, :]
    y = torch.where(ok, (x / torch.where(ok, scale[:, :, None, :], torch.ones(()))).clamp(-448, 448), torch.zeros(()))
    return y.to(torch.float8_e4m3fn), scale
