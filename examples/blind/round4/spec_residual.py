"""Round 4 spec, residual: what the notebook's text promises, written from the text alone."""
import torch
from torch import nn

from spec_attention import MultiHeadAttention, scaled_dot_product_attention  # noqa: F401 - the pasted cell

PARTS = {
    "MultiHeadAttention": ["scaled_dot_product_attention", "MultiHeadAttention"],
    "LayerNorm": ["LayerNorm"],
    "FeedForward": ["FeedForward"],
    "TransformerBlock": ["TransformerBlock"],
}


class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
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
