"""Round 6's own spec of the tiny Transformer exercise (with the parts it pastes), from the notebooks' text alone."""
import math

import torch
from torch import nn

PARTS = {"sinusoidal_encoding": ["sinusoidal_encoding"],
         "MultiHeadAttention": ["scaled_dot_product_attention", "causal_mask", "MultiHeadAttention"],
         "LayerNorm": ["LayerNorm"], "FeedForward": ["FeedForward"], "TransformerBlock": ["TransformerBlock"],
         "TinyTransformer": ["TinyTransformer"]}


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]
    freq = torch.pow(torch.tensor(float(base), dtype=torch.float64),
                     -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = pos * freq
    pe = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).reshape(seq_len, d_model)
    return pe.float()


def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    work = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    top = scores.amax(-1, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e = torch.exp(scores - top)
    total = e.sum(-1, keepdim=True)
    weights = e / torch.where(total == 0, torch.ones_like(total), total)
    return (weights @ v).to(dtype), weights.to(dtype)


def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"n_heads = {n_heads} does not divide d_model = {d_model}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, _ = query.shape
        Lk = key.shape[1]

        def heads(t, L):
            return t.reshape(B, L, self.n_heads, self.d_head).transpose(1, 2)

        q, k, v = heads(self.q_proj(query), Lq), heads(self.k_proj(key), Lk), heads(self.v_proj(value), Lk)
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
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + self.eps) * self.weight + self.bias


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
            h = self.norm1(x)
            x = x + self.attn(h, mask=mask)
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x, mask=mask))
            x = self.norm2(x + self.ff(x))
        return x


class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
