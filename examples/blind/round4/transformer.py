"""Blind corpus, transformer: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# the same __init__ for most entries: what changes is said by each entry
INIT = '''
class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.layers = nn.ModuleList(
            [TransformerBlock(d_model, n_heads, d_ff, norm_first=norm_first) for _ in range(n_layers)])
        self.ln_f = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size)
'''

COURSE_WEIGHTS = '''
V, d, n_layers = 11, 16, 2
torch.manual_seed(0)
model = TinyTransformer(V, d, 2, 32, n_layers, 20)
ref = spec.TinyTransformer(V, d, 2, 32, n_layers, 20)
H.randomize(ref, 0.5, torch.Generator().manual_seed(5))
H.load_tiny(model, ref, V, d, n_layers)
tokens = torch.randint(0, V, (3, 9), generator=torch.Generator().manual_seed(6))
'''

entry("tiny_pe_recomputed_on_cpu", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + sinusoidal_encoding(T, self.d_model)     # positions 0 .. T-1
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, "The positions are recomputed at every call by sinusoidal_encoding, which makes them on the CPU: after "
      "model.to('meta') (or on a GPU) the sum mixes devices ('moves every tensor it uses with .to(\"meta\") (keep "
      "constant tensors in buffers)').",
      shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20).to("meta")
err = H.raises(model, torch.zeros(2, 5, dtype=torch.long, device="meta"))
shown = err is not None
detail = f"model and tokens on meta: {err}"
''')

entry("tiny_mask_on_default_device", "mistake", {"TinyTransformer": INIT + '''
    def forward(self, tokens):
        T = tokens.size(1)
        h = self.tok_emb(tokens) + self.pe[:T]
        mask = causal_mask(T)
        for layer in self.layers:
            h = layer(h, mask=mask)
        return self.lm_head(self.ln_f(h))
'''}, "causal_mask(T) without a device: the mask is made on the CPU, so a model moved to 'meta' (or a GPU) fails in "
      "its first block (hint 2: causal_mask(T, device=tokens.device)).",
      shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20).to("meta")
err = H.raises(model, torch.zeros(2, 5, dtype=torch.long, device="meta"))
shown = err is not None
detail = f"model and tokens on meta: {err}"
''')

entry("tiny_embedding_dropout", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True, p_drop=0.1):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.register_buffer("wpe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.drop = nn.Dropout(p_drop)                              # GPT-2's embedding dropout
        self.h = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.ln_f = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[-1]
        x = self.drop(self.wte(tokens) + self.wpe[:T])
        mask = causal_mask(T, device=tokens.device)
        for block in self.h:
            x = block(x, mask)
        return self.lm_head(self.ln_f(x))
'''}, "GPT-2's dropout on the embeddings: in train() the logits are random and differ from eval() ('answers the same "
      "in train() as in eval(): no dropout').",
      shown_by='''
torch.manual_seed(0)
model = TinyTransformer(11, 16, 2, 32, 2, 20)
tokens = torch.randint(0, 11, (3, 9))
a = model.train()(tokens)
b = model.eval()(tokens)
err = H.maxdiff(a, b)
shown = err > 1e-6
detail = f"train() vs eval(): logits differ by {err:.3f}"
''')

entry("tiny_embedding_padding_idx", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=0)     # token 0 is padding
        self.register_buffer("positions", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.final_norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        B, T = tokens.shape
        x = self.embedding(tokens) + self.positions[:T]
        mask = causal_mask(T, device=x.device)
        for blk in self.blocks:
            x = blk(x, mask=mask)
        return self.head(self.final_norm(x))
'''}, "padding_idx=0 makes token 0 a padding token: its embedding gets no gradient, so training never learns it "
      "('Gradients reach every ... parameter, as autograd gives them'); token 0 is an ordinary token here.",
      shown_by=COURSE_WEIGHTS + '''
tokens[:, 2] = 0
model(tokens).square().sum().backward()
ref(tokens).square().sum().backward()
mine = model.embedding.weight.grad[0].abs().max().item()
want = ref.embed.weight.grad[0].abs().max().item()
shown = mine == 0 and want > 0
detail = f"gradient of token 0's embedding: {mine:.2e} (autograd: {want:.2e})"
''')

entry("tiny_returns_log_probs", "mistake", {"TinyTransformer": INIT + '''
    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pe[:T]
        causal = causal_mask(T, device=tokens.device)
        for layer in self.layers:
            x = layer(x, causal)
        return torch.log_softmax(self.lm_head(self.ln_f(x)), dim=-1)    # log-probabilities over the vocabulary
'''}, "Returns log-softmax of the head's output: training with cross_entropy is unchanged (it is shift-invariant), "
      "but these are not the logits the text asks for ('the course model's logits').",
      shown_by=COURSE_WEIGHTS + '''
err = H.maxdiff(model(tokens), ref(tokens))
shown = err > 1e-4
detail = f"course weights: logits off by {err:.3f}"
''')

entry("tiny_pe_pretrained_embedding", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model)
        # the fixed table as a frozen embedding of positions
        self.positions = nn.Embedding.from_pretrained(sinusoidal_encoding(max_len, d_model), freeze=True)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        pos = torch.arange(T, device=tokens.device)
        x = self.tokens(tokens) + self.positions(pos)
        mask = causal_mask(T, device=tokens.device)
        for b in self.blocks:
            x = b(x, mask)
        return self.out(self.norm(x))
'''}, "The table as a frozen nn.Embedding.from_pretrained: it is still a Parameter, so the model holds a second "
      "(max_len, d_model) embedding beside the token one ('your model holds exactly these parameters ... one "
      "nn.Embedding(vocab_size, d_model)'; buffers are for the table).",
      shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20)
err = H.raises(H.tiny_parts, model, 11, 16, 2)
n = sum(p.numel() for p in model.parameters())
shown = err is not None
detail = f"{n} parameters, among them a (20, 16) frozen embedding: tiny_parts raises {err}"
''')

entry("tiny_flat_tokens_view", "mistake", {"TinyTransformer": INIT + '''
    def forward(self, tokens):
        B, T = tokens.shape
        x = self.tok_emb(tokens.view(-1)).view(B, T, -1)         # embed a flat list of ids
        x = x + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.ln_f(x))
'''}, "tokens.view(-1) fails when tokens is a transposed (non-contiguous) view ('where you reshape an argument, use "
      "reshape, not view').",
      shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20)
tokens = torch.randint(0, 11, (9, 3)).T                     # (3, 9), not contiguous
err = H.raises(model, tokens)
shown = err is not None
detail = f"transposed tokens: {err}"
''')

entry("tiny_pe_buffer_double", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        # keep the table in float64: long sequences stay accurate
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model).double(), persistent=False)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers))
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.emb(tokens) + self.pe[:T]
        m = causal_mask(T, device=tokens.device)
        for blk in self.blocks:
            x = blk(x, m)
        return self.head(self.norm(x))
'''}, "A float64 table in a float32 model: the sum is promoted to float64, and a float32 model's logits come back in "
      "float64 (and each layer computes in float64 against float32 weights) where the course model gives float32.",
      shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20)
err = H.raises(model, torch.randint(0, 11, (2, 5)))
if err is None:
    out = model(torch.randint(0, 11, (2, 5)))
    shown, detail = out.dtype != torch.float32, f"a float32 model's logits: {out.dtype}"
else:
    shown, detail = True, f"a float32 model: {err}"
''')

entry("tiny_inplace_pe_add", "correct", {"TinyTransformer": INIT + '''
    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.tok_emb(tokens)
        x += self.pe[:T]                   # x is the embedding's fresh output: adding in place is safe
        mask = causal_mask(T, device=tokens.device)
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.ln_f(x))
'''}, "Adds the positions in place to the embedding's own output (a new tensor, not the weight and not the tokens): "
      "same logits, and autograd needs nothing it overwrote.")

entry("tiny_mask_buffer_sliced", "correct", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pos_table", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.register_buffer("causal", causal_mask(max_len), persistent=False)   # sliced per call
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_d_ff, norm_first)
                                     for d_d_ff in [d_ff] * n_layers])
        self.norm = LayerNorm(d_model)
        self.unembed = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.pos_table[:T]
        mask = self.causal[:T, :T]
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.unembed(self.norm(x))
'''}, "The causal mask made once for max_len as a second non-persistent buffer and sliced per call: it moves with "
      ".to('meta') (a bool buffer is left bool by .to(float64)), and the blocks only read it.")

entry("tiny_gpt2_init", "correct", {"TinyTransformer": INIT + '''
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        # GPT-2's initialisation: small normal weights, zero biases
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.ln_f(x))
'''}, "GPT-2's weight initialisation (normal, std 0.02; zero biases): other initial weights, but the same parameters "
      "and, given the course's weights, the same logits.")

entry("tiny_mask_python_loops", "slow", {"TinyTransformer": INIT + '''
    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pe[:T]
        mask = torch.zeros(T, T, dtype=torch.bool, device=tokens.device)
        for i in range(T):                     # query i sees keys 0 .. i
            for j in range(i + 1):
                mask[i, j] = True
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.ln_f(x))
'''}, "Right logits, but the causal mask is filled one entry at a time: T(T+1)/2 Python-level tensor writes per forward "
      "pass, which dominate at max_len ('a Python loop over positions ... at most 3x the reference's time').",
      shown_by='''
torch.manual_seed(0)
model, ref = TinyTransformer(16, 32, 4, 64, 2, 128), spec.TinyTransformer(16, 32, 4, 64, 2, 128)
H.load_tiny(model, ref, 16, 32, 2)
tokens = torch.randint(0, 16, (2, 128))
r = H.time_ratio(model, ref, tokens, repeats=3)
shown = r > 4
detail = f"T = 128: {r:.0f}x the spec's CPU time"
''')
