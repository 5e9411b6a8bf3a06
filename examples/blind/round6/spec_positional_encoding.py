"""Round 6's own spec of the positional encoding exercise, written from the notebook's text alone."""
import math

import torch

PARTS = {"sinusoidal_encoding": ["sinusoidal_encoding"], "rope": ["rope"], "alibi_bias": ["alibi_bias"]}


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]
    freq = torch.pow(torch.tensor(float(base), dtype=torch.float64),
                     -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = pos * freq                                                   # (seq_len, d_model / 2)
    pe = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).reshape(seq_len, d_model)
    return pe.float()


def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"the last dimension must be even, got {d}")
    L = x.shape[-2]
    pos = torch.arange(L, dtype=torch.float64, device=x.device)[:, None]
    freq = torch.pow(torch.tensor(float(base), dtype=torch.float64, device=x.device),
                     -torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = pos * freq                                                   # (L, d / 2)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    cos, sin = torch.cos(angles).to(work), torch.sin(angles).to(work)
    a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)
    out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return out.to(x.dtype)


def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    def pow2(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    if n_heads & (n_heads - 1) == 0:
        slopes = pow2(n_heads)
    else:
        c = 2 ** int(math.floor(math.log2(n_heads)))
        slopes = pow2(c) + pow2(2 * c)[0::2][: n_heads - c]
    m = torch.tensor(slopes, dtype=torch.float64)[:, None, None]
    pos = torch.arange(seq_len, dtype=torch.float64)
    dist = (pos[None, :] - pos[:, None]).abs()
    return (-m * dist).float()
