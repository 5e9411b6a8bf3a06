"""Known answers to the transformer exercise (see autograder/authoring/variants.py)."""
from autograder.authoring.variants import Bug, Correct, load, reference_sources

# Mistakes in the parts pasted from the earlier exercises: the TinyTransformer tests use the course's versions of
# those parts, so a right TinyTransformer loses only the test that uses the learner's own parts.
_RESIDUAL = {v.name: v.cells for v in load("residual")}
_SDPA_UNSCALED = '''
def scaled_dot_product_attention(q, k, v, mask=None):  # pasted, but the scores are not scaled
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return w @ v, w
'''
PASTED_BUGS = [
    Bug("pasted_layernorm_unbiased", {"LayerNorm": _RESIDUAL["ln_unbiased_variance"]["LayerNorm"]}, {},
        "a right model, with a pasted LayerNorm whose variance is unbiased",
        together={"TinyTransformer_tests": "your pasted LayerNorm"}),
    Bug("pasted_attention_unscaled",
        {"MultiHeadAttention": reference_sources("transformer")["MultiHeadAttention"] + _SDPA_UNSCALED}, {},
        "a right model, with a pasted scaled_dot_product_attention that does not scale the scores",
        together={"TinyTransformer_tests": "your pasted scaled_dot_product_attention"}),
    Bug("pasted_block_missing", {"TransformerBlock": "# the TransformerBlock from the residual exercise goes here\n"},
        {}, "a right model, with no TransformerBlock pasted",
        together={"TinyTransformer_tests": "TransformerBlock is missing or wrong"}),
]

TINY_NANOGPT = '''class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, d_ff, norm_first=norm_first)
                                    for _ in range(n_layers))
        self.ln_f = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        B, T = tokens.size()
        assert T <= self.max_len
        pos = sinusoidal_encoding(T, self.d_model).to(tokens.device)
        x = self.tok_emb(tokens) + pos
        mask = ~torch.triu(torch.ones(T, T, dtype=torch.bool, device=tokens.device), diagonal=1)
        for block in self.blocks:
            x = block(x, mask=mask)
        x = self.ln_f(x)
        return self.lm_head(x)
'''

TINY_GPT2_INIT = '''class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)
        self.register_buffer("positions", sinusoidal_encoding(max_len, d_model))
        self.layers = nn.ModuleList()
        for _ in range(n_layers):
            self.layers.append(TransformerBlock(d_model, n_heads, d_ff, norm_first))
        self.final_norm = LayerNorm(d_model)
        self.unembed = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens):
        T = tokens.shape[-1]
        h = self.embedding(tokens) + self.positions[:T].unsqueeze(0)
        m = causal_mask(T, tokens.device).unsqueeze(0).unsqueeze(0)      # (1, 1, T, T)
        for layer in self.layers:
            h = layer(h, m)
        return self.unembed(self.final_norm(h))
'''

TINY_HEAD_FIRST = """class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.head = nn.Linear(d_model, vocab_size)              # registered first: the output side, then the input
        self.final_norm = LayerNorm(d_model)
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embedding(tokens) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(self.final_norm(x))
"""


def changed(source: str, old: str, new: str) -> str:
    """`source` with `old` replaced by `new` (which must be there: a variant that changes nothing is no variant)."""
    assert old in source, old
    return source.replace(old, new)


TINY_GPT2_INIT_EVERYWHERE = changed(TINY_GPT2_INIT, """        self.unembed = nn.Linear(d_model, vocab_size, bias=False)
""", """        self.unembed = nn.Linear(d_model, vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
""")


def bug(name: str, code: str, cause: str, about: str = ""):
    return Bug(name, {"TinyTransformer": code}, {"TinyTransformer_tests": cause}, about, cause=cause)


VARIANTS = [
    Correct("nanogpt_names", {"TinyTransformer": TINY_NANOGPT},
            "nanoGPT's names, the encoding computed in forward, the mask from torch.triu"),
    Correct("gpt2_init_and_buffer", {"TinyTransformer": TINY_GPT2_INIT},
            "embeddings initialised with std 0.02, a persistent buffer of positions, a head without bias, "
            "a (1, 1, T, T) mask"),
    Correct("gpt2_init_everywhere", {"TinyTransformer": TINY_GPT2_INIT_EVERYWHERE},
            "GPT-2's initialisation of every linear map and embedding (std 0.02, biases 0): the order of earlier "
            "tokens moves its logits by about 1e-5 at first"),
    Correct("head_registered_first", {"TinyTransformer": TINY_HEAD_FIRST},
            "the head and the final norm registered before the embedding and the blocks, which come under other names"),
    bug("no_positions", changed(TINY_NANOGPT, "x = self.tok_emb(tokens) + pos", "x = self.tok_emb(tokens)"),
        "the positions are not added to the token embeddings: the model takes the earlier tokens as an unordered set",
        "the encoding is computed but never added"),
    bug("no_causal_mask", changed(TINY_NANOGPT, "x = block(x, mask=mask)", "x = block(x)"),
        "the blocks get no causal mask: the logits at a position depend on the tokens after it",
        "the blocks see the whole sequence"),
    bug("embeddings_scaled", changed(TINY_NANOGPT, "x = self.tok_emb(tokens) + pos",
                                     "x = self.tok_emb(tokens) * math.sqrt(self.d_model) + pos"),
        "the token embeddings are multiplied by sqrt(d_model), which drowns the positions here: add them as they are",
        "Vaswani et al.'s sqrt(d_model) factor"),
    bug("logits_transposed", changed(TINY_NANOGPT, "return self.lm_head(x)", "return self.lm_head(x).transpose(1, 2)"),
        "the logits are returned as (B, vocab_size, T); forward returns (B, T, vocab_size), the head applied at every "
        "position", "the layout F.cross_entropy wants, returned from forward"),
    Bug("shared_block", {"TinyTransformer": changed(TINY_NANOGPT,
        "self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, d_ff, norm_first=norm_first)\n"
        "                                    for _ in range(n_layers))",
        "block = TransformerBlock(d_model, n_heads, d_ff, norm_first=norm_first)\n"
        "        self.blocks = nn.ModuleList([block] * n_layers)")},
        {"TinyTransformer_tests": "one TransformerBlock is shared by all layers"},
        "one block object repeated: every layer has the same weights"),
    bug("mask_first_block_only", changed(TINY_NANOGPT, "for block in self.blocks:\n            x = block(x, mask=mask)",
                                         "for i, block in enumerate(self.blocks):\n"
                                         "            x = block(x, mask=mask if i == 0 else None)"),
        "only the first block gets the causal mask: every block needs it", "the second block sees the whole sequence"),
    bug("post_ln_no_final_norm", changed(TINY_NANOGPT, "x = self.ln_f(x)",
                                         "x = self.ln_f(x) if self.blocks[0].norm_first else x"),
        "with norm_first=False the final LayerNorm is left out; it comes after the blocks in both placements",
        "the final norm taken for a Pre-LN detail"),
    Bug("mask_cached_by_length", {"TinyTransformer": changed(TINY_NANOGPT,
        "        mask = ~torch.triu(torch.ones(T, T, dtype=torch.bool, device=tokens.device), diagonal=1)\n",
        "        if getattr(self, \"_mask\", None) is None or self._mask.shape[0] != T:     # once per length\n"
        "            self._mask = ~torch.triu(torch.ones(T, T, dtype=torch.bool, device=tokens.device), diagonal=1)\n"
        "        mask = self._mask\n")},
        {"TinyTransformer_tests": "a module after .to(\"meta\")"},
        "the mask kept in a plain attribute, made again only for a new length: after .to(...) a call of the same "
        "length uses the mask where it was made (a blind corpus's)", kind="promise"),
    Bug("library_blocks", {"TinyTransformer": """class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, batch_first=True,
                                                               norm_first=norm_first) for _ in range(n_layers))
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.pe[:T]
        blocked = ~causal_mask(T, tokens.device)
        for block in self.blocks:
            x = block(x, src_mask=blocked)
        return self.head(self.norm(x))
"""}, {"TinyTransformer_tests": "library version"}, "torch.nn.TransformerEncoderLayer as the blocks", kind="library"),
    *PASTED_BUGS,
]

# The known mistakes each visible check catches: variant -> (visible-check cell, text of its message).
VISIBLE = {
    "no_positions": ("TinyTransformer_checks", "positions are added"),
    "no_causal_mask": ("TinyTransformer_checks", "causal"),
    "mask_first_block_only": ("TinyTransformer_checks", "causal"),
    "shared_block": ("TinyTransformer_checks", "not one block used twice"),
    "embeddings_scaled": ("TinyTransformer_training", "cannot tell positions apart"),
    "logits_transposed": ("TinyTransformer_checks", "(B, T, vocab_size)"),
}
# The known mistakes no visible check can see, and why: only the hidden tests catch them.
HIDDEN_ONLY = {
    "library_blocks": "right values: the grader sees the library call",
    "post_ln_no_final_norm": "the visible checks build Pre-LN models only",
    "mask_cached_by_length": "the visible checks never move a model they have called",
    "pasted_layernorm_unbiased": "a pasted part: its own exercise's visible checks catch it",
    "pasted_attention_unscaled": "a pasted part: its own exercise's visible checks catch it",
    "pasted_block_missing": "a pasted part left out: the cell that needs it raises NameError",
}

# The book's section that teaches each mistake, where it is not the one section its part's description names (the
# class report's re-teach link): `<page>#<id>`, book/<page>.md and the id Sphinx gives the heading.
SECTIONS = {
    "no_positions": "positional_encoding#attention-without-positions-cannot-see-order",
}
