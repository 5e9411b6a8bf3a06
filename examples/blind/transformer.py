"""Blind corpus for exercises/transformer: TinyTransformer (the cells sinusoidal_encoding, MultiHeadAttention (with
scaled_dot_product_attention and causal_mask), LayerNorm, FeedForward and TransformerBlock hold the learner's pasted
parts; they are the spec's unless an entry replaces them).

The notebook's setup cell is `import math`, `import torch`, `from torch import nn` (no `F`); every cell below relies
on nothing else. In shown_by code the entry's definitions are in scope under their own names, the spec module as
`spec`, and the checker's helpers as `H` (see check.py). shown_by sets `shown` (and, for information, `detail`).
"""

ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


def tiny(init, forward):
    return ('''
class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
''' + init + '''
    def forward(self, tokens):
''' + forward)


_STD_INIT = '''        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
'''

_STD_FORWARD = '''        T = tokens.shape[1]
        x = self.embed(tokens) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''

# Compare with the course model given the same (drawn) weights, loaded by the rules of the notebook's text.
_SHOW_LOGITS = '''
torch.manual_seed(0)
V, d, n_layers = 11, 16, 2
mine = TinyTransformer(V, d, 2, 32, n_layers, 20, norm_first={nf})
ref = spec.TinyTransformer(V, d, 2, 32, n_layers, 20, norm_first={nf})
H.randomize(ref, 0.5)
H.load_tiny(mine, ref, V, d, n_layers)
tokens = torch.randint(0, V, (3, 9))
with torch.no_grad():
    diff = H.maxdiff(mine(tokens), ref(tokens))
shown = diff > 1e-3
detail = f"norm_first={nf}, the course model's drawn weights: logits differ by {{diff:.3f}}"
'''

entry("tiny_embeddings_scaled_sqrt_d", "mistake", {"TinyTransformer": tiny(_STD_INIT, '''        T = tokens.shape[1]
        x = self.embed(tokens) * math.sqrt(self.embed.embedding_dim) + self.pe[:T]    # as in Vaswani et al.
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
''')}, why="Multiplies the token embeddings by sqrt(d_model), which the text says not to do (it drowns the positions "
          "and changes the logits).",
    shown_by=_SHOW_LOGITS.format(nf=True))

entry("tiny_pe_plain_tensor_attribute", "mistake", {"TinyTransformer": tiny('''        self.embed = nn.Embedding(vocab_size, d_model)
        self.pe = sinusoidal_encoding(max_len, d_model)             # (max_len, d_model), fixed
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
''', _STD_FORWARD)}, why="Keeps the table of positions as a plain tensor attribute, not a buffer: model.to(device) "
          "leaves it behind on the CPU, so the model fails on any other device.",
    shown_by='''
torch.manual_seed(0)
mine, ref = TinyTransformer(11, 16, 2, 32, 2, 20).to("meta"), spec.TinyTransformer(11, 16, 2, 32, 2, 20).to("meta")
tokens = torch.randint(0, 11, (2, 9), device="meta")
err = H.raises(mine, tokens)
shown = err is not None and ref(tokens).device.type == "meta" and mine.pe.device.type == "cpu"
detail = f"after .to('meta'), pe stays on {mine.pe.device}: forward raises {err}"
''')

entry("tiny_mask_cached_on_first_call", "mistake", {"TinyTransformer": tiny(_STD_INIT + '''        self.mask = None
''', '''        T = tokens.shape[1]
        if self.mask is None:                                      # build the causal mask once
            self.mask = causal_mask(T, device=tokens.device)
        x = self.embed(tokens) + self.pe[:T]
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.norm(x))
''')}, why="Builds the causal mask on the first call and keeps it as an attribute: a later call with another length "
          "T gets the first call's mask and fails.",
    shown_by='''
torch.manual_seed(0)
model = TinyTransformer(11, 16, 2, 32, 2, 20)
model(torch.randint(0, 11, (2, 9)))
err = H.raises(model, torch.randint(0, 11, (2, 5)))
shown = err is not None and H.raises(spec.TinyTransformer(11, 16, 2, 32, 2, 20), torch.randint(0, 11, (2, 5))) is None
detail = f"T = 9, then T = 5: {err}"
''')

entry("tiny_no_final_norm_in_post_ln", "mistake", {"TinyTransformer": tiny('''        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        # Post-LN blocks already end with a norm: only Pre-LN needs a final one
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()
        self.head = nn.Linear(d_model, vocab_size)
''', _STD_FORWARD)}, why="Leaves out the final LayerNorm when norm_first=False, although the text asks for it in both "
          "placements: the model lacks two of the stated parameters and computes other logits.",
    shown_by='''
torch.manual_seed(0)
mine = TinyTransformer(11, 16, 2, 32, 2, 20, norm_first=False)
ref = spec.TinyTransformer(11, 16, 2, 32, 2, 20, norm_first=False)
n_mine, n_ref = sum(p.numel() for p in mine.parameters()), sum(p.numel() for p in ref.parameters())
err = H.raises(H.tiny_parts, mine, 11, 16, 2)
shown = n_mine != n_ref and err is not None
detail = f"Post-LN: {n_mine} parameters instead of {n_ref}; loading the course weights: {err}"
''')

entry("tiny_embeddings_under_no_grad", "mistake", {"TinyTransformer": tiny(_STD_INIT, '''        T = tokens.shape[1]
        with torch.no_grad():                                      # the inputs: nothing to differentiate here
            x = self.embed(tokens) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
''')}, why="Looks the embeddings up under torch.no_grad(), so the embedding never gets a gradient and is never "
          "trained; the logits themselves are right.",
    shown_by='''
torch.manual_seed(0)
model = TinyTransformer(11, 16, 2, 32, 2, 20)
logits = model(torch.randint(0, 11, (3, 9)))
logits.sum().backward()
ref = spec.TinyTransformer(11, 16, 2, 32, 2, 20)
ref(torch.randint(0, 11, (3, 9))).sum().backward()
shown = model.embed.weight.grad is None and ref.embed.weight.grad is not None
detail = f"embedding gradient after backward: {model.embed.weight.grad}"
''')

entry("tiny_learned_position_embedding", "mistake", {"TinyTransformer": tiny('''        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)                  # learned positions, as in the book's TinyLM
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers))
        self.ln_f = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
''', '''        p = torch.arange(tokens.shape[1], device=tokens.device)
        mask = p[None, :] <= p[:, None]
        x = self.tok(tokens) + self.pos(p)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))
''')}, why="Uses learned position embeddings (as the book's TinyLM does) instead of the sinusoidal encoding: an "
          "extra nn.Embedding(max_len, d_model) and other logits than the course model's.",
    shown_by='''
torch.manual_seed(0)
mine, ref = TinyTransformer(11, 16, 2, 32, 2, 20), spec.TinyTransformer(11, 16, 2, 32, 2, 20)
n_mine, n_ref = sum(p.numel() for p in mine.parameters()), sum(p.numel() for p in ref.parameters())
shown = n_mine == n_ref + 20 * 16 and H.raises(H.tiny_parts, mine, 11, 16, 2) is not None
detail = f"{n_mine} parameters instead of {n_ref}"
''')

entry("tiny_head_tied_to_embedding", "mistake", {"TinyTransformer": tiny(_STD_INIT + '''        self.head.weight = self.embed.weight                      # weight tying, as in GPT-2
''', _STD_FORWARD)}, why="Ties the head's weight to the embedding (GPT-2 style): the model has one (vocab, d_model) "
          "matrix where the text asks for two, so the course model's head and embedding cannot both be loaded.",
    shown_by='''
torch.manual_seed(0)
mine, ref = TinyTransformer(11, 16, 2, 32, 2, 20), spec.TinyTransformer(11, 16, 2, 32, 2, 20)
n_mine, n_ref = sum(p.numel() for p in mine.parameters()), sum(p.numel() for p in ref.parameters())
shown = n_mine == n_ref - 11 * 16 and H.raises(H.tiny_parts, mine, 11, 16, 2) is not None
detail = f"{n_mine} parameters instead of {n_ref}"
''')

entry("tiny_norm_first_not_passed", "mistake", {"TinyTransformer": tiny('''        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
''', _STD_FORWARD)}, why="Never passes norm_first to the blocks, so TinyTransformer(..., norm_first=False) still builds "
          "Pre-LN blocks; the visible checks only use the default.",
    shown_by=_SHOW_LOGITS.format(nf=False))

entry("tiny_biasless_head_declared_first", "mistake", {"TinyTransformer": tiny('''        self.head = nn.Linear(d_model, vocab_size, bias=False)     # GPT-2's head has no bias
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
''', _STD_FORWARD)}, why="A head without bias is allowed, but the text tells it from the embedding by coming second; "
          "declared before the embedding, the course model's head weights land in the embedding and vice versa.",
    shown_by=_SHOW_LOGITS.format(nf=True))

entry("tiny_persistent_buffer_other_names", "correct", {"TinyTransformer": tiny('''        self.tok = nn.Embedding(vocab_size, d_model)
        self.register_buffer("positions", sinusoidal_encoding(max_len, d_model))      # persistent: in state_dict
        self.layers = nn.ModuleList()
        for _ in range(n_layers):
            self.layers.append(TransformerBlock(d_model, n_heads, d_ff, norm_first=norm_first))
        self.ln_f = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size)
''', '''        B, T = tokens.shape
        x = self.tok(tokens)                 # a fresh tensor: adding in place is safe here
        x += self.positions[:T]
        mask = causal_mask(T, device=tokens.device)
        for layer in self.layers:
            x = layer(x, mask=mask)
        return self.lm_head(self.ln_f(x))
''')}, why="Other names for every part, a persistent buffer, blocks appended in a loop, the positions added in place to "
          "the embedding lookup's fresh output, and the mask passed by keyword.")

entry("tiny_head_without_bias", "correct", {"TinyTransformer": tiny('''        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)     # as GPT-2: the text allows it
''', _STD_FORWARD)}, why="A head without bias, declared after the embedding, which the text allows.")

entry("tiny_inline_mask_index_select", "correct", {"TinyTransformer": tiny('''        self.final_norm = LayerNorm(d_model)
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.stack = nn.ModuleList(TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers))
        self.register_buffer("table", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.readout = nn.Linear(d_model, vocab_size)
''', '''        T = tokens.size(1)
        positions = torch.arange(T, device=tokens.device)
        x = self.embedding(tokens) + self.table.index_select(0, positions).unsqueeze(0)
        mask = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
        for block in self.stack:
            x = block(x, mask)
        return self.readout(self.final_norm(x))
''')}, why="Declares the final norm first, picks the rows of the table with index_select, and builds the causal mask "
          "inline instead of calling causal_mask.")

entry("pasted_sinusoidal_in_two_halves", "mistake", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2:
        raise ValueError("d_model must be even")
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]
    freqs = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.cat([torch.sin(pos * freqs), torch.cos(pos * freqs)], dim=-1).float()   # sines, then cosines
'''}, why="The pasted sinusoidal_encoding puts all sines in the first half and all cosines in the second instead of "
       "interleaving them, so the model built from the learner's own parts computes other logits than the course "
       "model.",
    shown_by=_SHOW_LOGITS.format(nf=True))
