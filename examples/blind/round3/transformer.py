"""Blind corpus, transformer: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


HEAD = '''
class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
'''
BODY = '''        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
'''

entry("tiny_pe_plain_attribute", "mistake", {"TinyTransformer": HEAD + '''
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pe = sinusoidal_encoding(max_len, d_model)          # a constant table: no need to learn it
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
'''}, "Keeps the table of positions as a plain attribute, which .to() does not move; breaks 'moves every tensor it "
      "uses with .to(torch.float64) and .to(\\\"meta\\\") (keep constant tensors in buffers, register_buffer)'.",
      shown_by='''
import copy
model = TinyTransformer(11, 16, 2, 32, 2, 20)
moved = copy.deepcopy(model).to("meta")
err = H.raises(moved, torch.randint(0, 11, (2, 9), device="meta"))
shown = err is not None and moved.pe.device.type == "cpu"
detail = f"after .to('meta') the table stays on the CPU: forward raises {err}"
''')

entry("tiny_flatten_tokens_with_view", "mistake", {"TinyTransformer": HEAD + BODY + '''
    def forward(self, tokens):
        B, T = tokens.shape
        x = self.embed(tokens.view(-1)).view(B, T, -1)           # one lookup for the whole batch
        x = x + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.head(self.norm(x))
'''}, "Flattens the token ids with .view, which raises when they are not contiguous (a transposed or sliced batch); "
      "breaks 'A tensor argument may be a view that is not contiguous ... use reshape, not view' (TinyTransformer).",
      shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20)
tokens = torch.randint(0, 11, (9, 3)).t()
err = H.raises(model, tokens)
shown = err is not None and H.raises(model, tokens.contiguous()) is None
detail = f"tokens (3, 9) from a transpose: {err}"
''')

entry("tiny_postln_skips_final_norm", "mistake", {"TinyTransformer": HEAD + BODY + '''
        self.norm_first = norm_first

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        if self.norm_first:               # Post-LN blocks already end with a LayerNorm
            x = self.norm(x)
        return self.head(x)
'''}, "Skips the final LayerNorm for Post-LN blocks, reasoning that they end normalised: with drawn weights (the "
      "final norm's too) the logits differ; breaks 'a final LayerNorm(d_model) ... The tests use every parameter with "
      "drawn values, the final LayerNorm's too, and in both placements'.",
      shown_by='''
g = torch.Generator().manual_seed(0)
args = (11, 16, 2, 32, 2, 20)
mine, ref = TinyTransformer(*args, norm_first=False), spec.TinyTransformer(*args, norm_first=False)
H.randomize(ref, 0.5, g)
H.load_tiny(mine, ref, 11, 16, 2)
tokens = torch.randint(0, 11, (3, 9), generator=g)
err = H.maxdiff(mine(tokens), ref(tokens))
shown = err > 1e-3
detail = f"norm_first=False with drawn weights: logits off by {err:.2f}"
''')

entry("tiny_tied_head", "mistake", {"TinyTransformer": HEAD + BODY + '''
        self.head.weight = self.embed.weight          # weight tying, as GPT-2 does

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, "Ties the head to the embedding (as GPT-2 does): the model then holds one (V, d) matrix, not two, and the course "
      "model's weights cannot be put in; breaks 'your model holds exactly these parameters ... one nn.Embedding ... "
      "and the head'.",
      shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20)
err = H.raises(H.tiny_parts, model, 11, 16, 2)
shown = err == "ValueError"
detail = f"tiny_parts: {err} (one (V, d) matrix instead of two)"
''')

entry("tiny_embedding_under_no_grad", "mistake", {"TinyTransformer": HEAD + BODY + '''
    def forward(self, tokens):
        T = tokens.shape[1]
        with torch.no_grad():                               # the positions are a fixed table
            pos = self.pe[:T]
            x = self.embed(tokens) + pos
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, "The no_grad block meant for the fixed positions also holds the embedding lookup, so the embedding never learns "
      "(the visible checks, and even training, can pass); breaks 'Gradients reach every floating argument and every "
      "parameter (TinyTransformer): no ... torch.no_grad()'.",
      shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20)
model(torch.randint(0, 11, (3, 9))).sum().backward()
shown = model.embed.weight.grad is None and model.head.weight.grad is not None
detail = "after backward the embedding has no gradient"
''')

entry("tiny_positions_frozen_embedding", "mistake", {"TinyTransformer": HEAD + '''
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding.from_pretrained(sinusoidal_encoding(max_len, d_model), freeze=True)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.pos(torch.arange(T, device=tokens.device))
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, "Holds the sinusoidal table as a frozen nn.Embedding: that is a parameter (requires_grad=False), an extra one in "
      "named_parameters and the state_dict; breaks 'your model holds exactly these parameters ... Buffers (a table of "
      "positions) are yours'.",
      shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20)
err = H.raises(H.tiny_parts, model, 11, 16, 2)
shown = err == "ValueError"
detail = f"tiny_parts: {err} (pos.weight is a parameter)"
''')

entry("tiny_logits_prefix_by_prefix", "slow", {"TinyTransformer": HEAD + BODY + '''
    def _last_logits(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x[:, -1]))

    def forward(self, tokens):
        # position t predicts from tokens 0..t only: run each prefix, keep its last logits
        return torch.stack([self._last_logits(tokens[:, : t + 1]) for t in range(tokens.shape[1])], dim=1)
'''}, "Right and causal by construction, but runs the model once per prefix (T forward passes); breaks 'the forward "
      "pass runs about as fast as the reference solution; at most 3x'.",
      shown_by='''
torch.manual_seed(0)
sizes = (16, 64, 4, 128, 2, 64)
mine, ref = TinyTransformer(*sizes), spec.TinyTransformer(*sizes)
H.load_tiny(mine, ref, 16, 64, 2)
tokens = torch.randint(0, 16, (2, 64))
ratio = H.time_ratio(mine, ref, tokens, repeats=3)
shown = ratio > 3
detail = f"{ratio:.1f}x the spec's CPU time for 64 tokens"
''')

entry("tiny_no_bias_persistent_table", "correct", {"TinyTransformer": HEAD + '''
        self.tok = nn.Embedding(vocab_size, d_model)
        self.register_buffer("positions", sinusoidal_encoding(max_len, d_model))      # persistent: in state_dict
        self.layers = nn.ModuleList(TransformerBlock(d_model, n_heads, d_ff, norm_first=norm_first)
                                    for _ in range(n_layers))
        self.ln_f = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)                    # GPT-2: no bias

    def forward(self, tokens):
        T = tokens.size(-1)
        h = self.tok(tokens) + self.positions.narrow(0, 0, T)
        causal = causal_mask(T, tokens.device)
        for layer in self.layers:
            h = layer(h, mask=causal)
        return self.lm_head(self.ln_f(h))
'''}, "Other names, a persistent buffer, a head without bias (the embedding registered first, so the head 'comes "
      "second'), narrow instead of slicing: 'bias=False is fine too', 'under any names', 'Buffers ... are yours to "
      "name and keep'.")

entry("tiny_gather_positions_print", "correct", {"TinyTransformer": HEAD + BODY + '''
    def forward(self, tokens):
        B, T = tokens.shape
        if T > self.pe.shape[0]:
            raise ValueError(f"{T} tokens, but max_len = {self.pe.shape[0]}")
        positions = torch.arange(T, device=tokens.device)
        x = self.embed(tokens) + self.pe.index_select(0, positions).unsqueeze(0)
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


print(TinyTransformer(11, 16, 2, 32, 2, 20))
'''}, "Gathers the positions with index_select on the tokens' device, checks T <= max_len with a ValueError, and "
      "prints the model at the end of the cell: the text's model, other calls.")
