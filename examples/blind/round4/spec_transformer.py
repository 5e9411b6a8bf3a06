"""Round 4 spec, transformer: what the notebook's text promises, written from the text alone."""
import torch  # noqa: F401
from torch import nn

from spec_attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention  # noqa: F401
from spec_positional_encoding import sinusoidal_encoding
from spec_residual import FeedForward, LayerNorm, TransformerBlock

PARTS = {
    "sinusoidal_encoding": ["sinusoidal_encoding"],
    "MultiHeadAttention": ["scaled_dot_product_attention", "causal_mask", "MultiHeadAttention"],
    "LayerNorm": ["LayerNorm"],
    "FeedForward": ["FeedForward"],
    "TransformerBlock": ["TransformerBlock"],
    "TinyTransformer": ["TinyTransformer"],
}


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
        mask = causal_mask(T, device=x.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
