import math

import torch
from torch import nn

PARTS = {
    "scaled_dot_product_attention": ["scaled_dot_product_attention"],
    "causal_mask": ["causal_mask"],
    "MultiHeadAttention": ["MultiHeadAttention"],
    "blockwise_attention": ["blockwise_attention"],
}


def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    m = scores.amax(-1, keepdim=True).detach()
    m = m.masked_fill(m == float("-inf"), 0.0)
    e = torch.exp(scores - m)
    total = e.sum(-1, keepdim=True)
    weights = e / total.masked_fill(total == 0, 1.0)
    out = weights @ v
    return out.to(dtype), weights.to(dtype)


def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"n_heads = {n_heads} does not divide d_model = {d_model}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, Lk = query.shape[0], query.shape[1], key.shape[1]
        H, dh = self.n_heads, self.d_head
        q = self.q_proj(query).reshape(B, Lq, H, dh).transpose(1, 2)
        k = self.k_proj(key).reshape(B, Lk, H, dh).transpose(1, 2)
        v = self.v_proj(value).reshape(B, Lk, H, dh).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, self.d_model))


def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    l = q.new_zeros((*q.shape[:-1], 1))
    a = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    rows = torch.arange(Lq, device=q.device)[:, None]
    for start in range(0, Lk, block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        if causal:
            cols = torch.arange(start, start + kb.shape[-2], device=q.device)
            s = s.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = m_new.masked_fill(m_new == float("-inf"), 0.0)
        c = torch.exp(m - shift)
        p = torch.exp(s - shift)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ vb
        m = m_new
    return a / l
