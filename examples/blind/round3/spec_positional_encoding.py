"""My reading of the positional_encoding notebook's text."""
import math

import torch

PARTS = {"sinusoidal_encoding": ["sinusoidal_encoding"], "rope": ["rope"], "alibi_bias": ["_alibi_pow2", "alibi_bias"]}


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2:
        raise ValueError(f"d_model must be even, not {d_model}")
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]
    freq = torch.pow(torch.tensor(float(base), dtype=torch.float64),
                     -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = pos * freq
    pe = torch.empty(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.float()


def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"the last dimension must be even, not {d}")
    L = x.shape[-2]
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    pos = torch.arange(L, dtype=torch.float64, device=x.device)[:, None]
    freq = torch.pow(torch.tensor(float(base), dtype=torch.float64, device=x.device),
                     -torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = pos * freq
    cos, sin = torch.cos(angles).to(compute), torch.sin(angles).to(compute)
    xc = x.to(compute)
    a, b = xc[..., 0::2], xc[..., 1::2]
    out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return out.to(x.dtype)


def _alibi_pow2(n):
    return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]


def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    if n_heads & (n_heads - 1) == 0:
        slopes = _alibi_pow2(n_heads)
    else:
        c = 2 ** math.floor(math.log2(n_heads))
        slopes = _alibi_pow2(c) + _alibi_pow2(2 * c)[0::2][: n_heads - c]
    pos = torch.arange(seq_len)
    dist = (pos[None, :] - pos[:, None]).abs().to(torch.float64)
    m = torch.tensor(slopes, dtype=torch.float64)[:, None, None]
    return (-m * dist).float()
