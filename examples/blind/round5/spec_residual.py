import math

import torch
from torch import nn

PARTS = {
    "MultiHeadAttention": ["scaled_dot_product_attention", "MultiHeadAttention"],
    "LayerNorm": ["LayerNorm"],
    "FeedForward": ["FeedForward"],
    "TransformerBlock": ["TransformerBlock"],
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


class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        centred = x - mu
        var = (centred * centred).mean(-1, keepdim=True)
        return centred / torch.sqrt(var + self.eps) * self.weight + self.bias


class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x, mask=mask))
            x = self.norm2(x + self.ff(x))
        return x
