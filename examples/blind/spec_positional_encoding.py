"""Independent implementation of exercises/positional_encoding, written from the notebook's text alone.

Each part is written as a learner's answer cell would be: it relies only on the notebook's setup cell
(`import math`, `import torch`) and imports anything else itself. PARTS maps each graded cell's grade_id to the
names (in this module) whose source makes up that cell.
"""
import math

import torch

PARTS = {
    "sinusoidal_encoding": ["sinusoidal_encoding"],
    "rope": ["rope"],
    "alibi_bias": ["alibi_bias"],
}


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even, got {d_model}")
    positions = torch.arange(seq_len, dtype=torch.float64)[:, None]              # (seq_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)                    # (d_model/2,)
    freqs = torch.pow(torch.tensor(float(base), dtype=torch.float64), -two_i / d_model)
    angles = positions * freqs                                                   # (seq_len, d_model/2)
    pe = torch.empty(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.float()


def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"the last dimension must be even, got {d}")
    L = x.shape[-2]
    positions = torch.arange(L, dtype=torch.float64, device=x.device)[:, None]  # (L, 1)
    two_i = torch.arange(0, d, 2, dtype=torch.float64, device=x.device)
    freqs = torch.pow(torch.tensor(float(base), dtype=torch.float64, device=x.device), -two_i / d)
    angles = positions * freqs                                                   # (L, d/2)
    # float16 / bfloat16 are rotated in float32 and converted at the end (the notebook's text)
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    cos, sin = torch.cos(angles).to(work.dtype), torch.sin(angles).to(work.dtype)
    x_even, x_odd = work[..., 0::2], work[..., 1::2]                             # (..., L, d/2)
    out_even = x_even * cos - x_odd * sin
    out_odd = x_even * sin + x_odd * cos
    return torch.stack([out_even, out_odd], dim=-1).flatten(-2).to(x.dtype)


def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    def pow2(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    if (n_heads & (n_heads - 1)) == 0:        # a power of two (n_heads >= 1)
        slopes = pow2(n_heads)
    else:
        c = 1 << (n_heads.bit_length() - 1)   # the largest power of two below n_heads
        slopes = pow2(c) + pow2(2 * c)[0::2][: n_heads - c]
    m = torch.tensor(slopes, dtype=torch.float64)[:, None, None]               # (n_heads, 1, 1)
    pos = torch.arange(seq_len, dtype=torch.float64)
    distance = (pos[:, None] - pos[None, :]).abs()                              # (seq_len, seq_len)
    return (-m * distance).float()
