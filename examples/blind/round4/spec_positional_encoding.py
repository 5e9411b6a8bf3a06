"""Round 4 spec, positional_encoding: what the notebook's text promises, written from the text alone."""
import math

import torch

PARTS = {
    "sinusoidal_encoding": ["sinusoidal_encoding"],
    "rope": ["rope"],
    "alibi_bias": ["alibi_slopes", "alibi_bias"],
}


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    positions = torch.arange(seq_len, dtype=torch.float64)[:, None]
    freqs = float(base) ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = positions * freqs                                      # (seq_len, d_model / 2), float64
    pe = torch.empty(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.float()


def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    L, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"the last dimension must be even, got {d}")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    positions = torch.arange(L, dtype=torch.float64, device=x.device)[:, None]
    freqs = float(base) ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = positions * freqs                                      # (L, d / 2)
    cos, sin = torch.cos(angles).to(work), torch.sin(angles).to(work)
    xw = x.to(work)
    a, b = xw[..., 0::2], xw[..., 1::2]
    out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return out.to(x.dtype)


def alibi_slopes(n):
    """Press et al.'s slopes for n heads."""
    def pow2(m):
        return [2.0 ** (-8.0 * (h + 1) / m) for h in range(m)]
    if n & (n - 1) == 0:
        return pow2(n)
    c = 2 ** math.floor(math.log2(n))
    return pow2(c) + pow2(2 * c)[0::2][: n - c]


def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    slopes = torch.tensor(alibi_slopes(n_heads), dtype=torch.float64)
    pos = torch.arange(seq_len, dtype=torch.float64)
    distance = (pos[None, :] - pos[:, None]).abs()
    return (-slopes[:, None, None] * distance).float()
