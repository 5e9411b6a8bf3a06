"""Blind corpus, transformer: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# the course model's weights (every one drawn) put into the entry's model, as the hidden tests do
SAME_WEIGHTS = """
V, d, n_heads, d_ff, n_layers, max_len = 11, 16, 2, 32, 2, 20
torch.manual_seed(0)
mine = TinyTransformer(V, d, n_heads, d_ff, n_layers, max_len, norm_first=NORM_FIRST)
ref = spec.TinyTransformer(V, d, n_heads, d_ff, n_layers, max_len, norm_first=NORM_FIRST)
H.randomize(ref, 0.5, torch.Generator().manual_seed(1))
H.load_tiny(mine, ref, V, d, n_layers)
tokens = torch.randint(0, V, (3, 9), generator=torch.Generator().manual_seed(2))
"""


def same_weights(norm_first=True):
    return SAME_WEIGHTS.replace("NORM_FIRST", str(norm_first))


# ----------------------------------------------------------------------------------------------------------------------
# TinyTransformer: mistakes
# ----------------------------------------------------------------------------------------------------------------------

entry("tt_embeddings_scaled_sqrt_d", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) * math.sqrt(self.d_model) + self.pe[:T]      # as in Vaswani et al.
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, "The embeddings are multiplied by sqrt(d_model), as in the paper. The text: \"Add the embeddings as they are: "
      "Vaswani et al. multiply them by sqrt(d_model), but with embeddings initialised at scale 1 (PyTorch's default) "
      "that would drown the positions\".",
      shown_by=same_weights() + """
gap = H.maxdiff(mine(tokens), ref(tokens))
shown = gap > 1e-3
detail = f"with the course model's weights: logits off by {gap:.2f}"
""")

entry("tt_pe_plain_attribute", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pe = sinusoidal_encoding(max_len, d_model)          # fixed, not learned: no need for a Parameter
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers))
        self.ln_f = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.tok(tokens) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for blk in self.blocks:
            x = blk(x, mask=mask)
        return self.head(self.ln_f(x))
'''}, "The table of positions is a plain attribute, which .to() does not move: after .to(\"meta\") (or to a GPU) "
      "the model adds a CPU table to the embeddings there, and the table is in no state_dict. The promises: \"A module "
      "(TinyTransformer) moves every tensor it uses with .to(torch.float64) and .to(\"meta\") (keep constant "
      "tensors in buffers, register_buffer), computes in float64 once moved there\".",
      shown_by="""
model = TinyTransformer(11, 16, 2, 32, 2, 20)
err = H.raises(model.to("meta"), torch.randint(0, 11, (2, 9), device="meta"))
shown = err is not None or model.pe.device.type != "meta"
detail = f"after .to('meta'): the table stays on {model.pe.device}, forward {err or 'runs'}"
""")

entry("tt_pe_learned_parameter", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        # the sinusoidal table as a Parameter, so that .to() moves it and it shows in the state_dict
        self.pe = nn.Parameter(sinusoidal_encoding(max_len, d_model))
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.size(1)
        x = self.embed(tokens) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, "The table is an nn.Parameter: the optimiser trains it (the positions are no longer sinusoidal) and the model "
      "holds a parameter the course model does not. The text: \"your model holds exactly these parameters ... "
      "Buffers (a table of positions) are yours to name and keep\", and the promises: \"keep constant tensors in "
      "buffers, register_buffer\".",
      shown_by="""
model = TinyTransformer(11, 16, 2, 32, 2, 20)
err = H.raises(H.tiny_parts, model, 11, 16, 2)
shown = err == "ValueError" and any(n == "pe" for n, _ in model.named_parameters())
detail = f"a parameter 'pe' of shape {tuple(model.pe.shape)}: the stated parameters cannot be told apart ({err})"
""")

entry("tt_one_block_repeated", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        block = TransformerBlock(d_model, n_heads, d_ff, norm_first)
        self.blocks = nn.ModuleList([block] * n_layers)                # n_layers blocks
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, "`[block] * n_layers` lists the same block n_layers times: one set of weights used twice. The text asks for "
      "\"n_layers of your TransformerBlock(d_model, n_heads, d_ff, norm_first)\", and the visible check says "
      "\"n_layers = 2 separate TransformerBlocks, each with its own weights (not one block used twice)\".",
      shown_by="""
model = TinyTransformer(11, 16, 2, 32, 2, 20)
distinct = len({id(m) for m in model.modules() if isinstance(m, TransformerBlock)})
shown = distinct == 1
detail = f"{distinct} distinct block for n_layers = 2"
""")

entry("tt_mask_not_passed", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.mask = None

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.pe[:T]
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.norm(x))
'''}, "The blocks get no causal mask (self.mask is never set), so every position sees the later ones. The text: "
      "\"n_layers of your TransformerBlock ..., each given the causal mask, so that the logits at position t depend "
      "only on the tokens 0, ..., t\".",
      shown_by="""
torch.manual_seed(0)
model = TinyTransformer(11, 16, 2, 32, 2, 20)
tokens = torch.randint(3, 11, (3, 9))
later = tokens.clone()
later[:, 5] = 0
gap = H.maxdiff(model(later)[:, :5], model(tokens)[:, :5])
shown = gap > 1e-5
detail = f"changing token 5 moves the logits at positions 0..4 by {gap:.2e}"
""")

entry("tt_mask_cached_once", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self._mask = None

    def forward(self, tokens):
        T = tokens.shape[1]
        if self._mask is None or self._mask.shape[0] != T:            # build the mask once per length
            self._mask = causal_mask(T, device=tokens.device)
        x = self.embed(tokens) + self.pe[:T]
        for block in self.blocks:
            x = block(x, self._mask)
        return self.head(self.norm(x))
'''}, "The mask is cached by length only, in a plain attribute: after .to(\"meta\") (or to a GPU) a call of the same "
      "length reuses the CPU mask. The promises: \"A module (TinyTransformer) moves every tensor it uses with "
      ".to(torch.float64) and .to(\"meta\") (keep constant tensors in buffers, register_buffer)\"; the hint: "
      "\"causal_mask(T, device=tokens.device)\".",
      shown_by="""
model = TinyTransformer(11, 16, 2, 32, 2, 20)
model(torch.randint(0, 11, (2, 9)))                      # a first call on the CPU
model.to("meta")
err = H.raises(model, torch.randint(0, 11, (2, 9), device="meta"))
shown = err is not None
detail = f"the same length after .to('meta'): {err}"
""")

entry("tt_head_without_bias_first", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)             # GPT-2's head, no bias
        self.wte = nn.Embedding(vocab_size, d_model)
        self.register_buffer("wpe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.h = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.ln_f = LayerNorm(d_model)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe[:T]
        mask = causal_mask(T, device=tokens.device)
        for block in self.h:
            x = block(x, mask)
        return self.lm_head(self.ln_f(x))
'''}, "A head without a bias, registered before the embedding: its weight has the embedding's shape, and the grader "
      "takes the first (vocab_size, d_model) matrix for the embedding. The text: \"The head is told from the "
      "embedding by its bias, or, without one, by coming after the embedding: a head without a bias is registered "
      "second.\"",
      shown_by=same_weights() + """
gap = H.maxdiff(mine(tokens), ref(tokens))
shown = gap > 1e-3
detail = f"the course model's weights loaded by the stated rule: logits off by {gap:.2f}"
""")

entry("tt_tokens_view", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        B, T = tokens.shape
        x = self.embed(tokens.view(-1)).view(B, T, self.d_model) + self.pe[:T]    # embed a flat list of ids
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, "`tokens.view(-1)` needs the ids contiguous in memory; a transposed batch of ids raises. The promises: \"A "
      "tensor argument may be a view that is not contiguous in memory, a slice or a transposed tensor "
      "(TinyTransformer): where you reshape an argument, use reshape, not view.\"",
      shown_by="""
model = TinyTransformer(11, 16, 2, 32, 2, 20)
tokens = torch.randint(0, 11, (3, 9)).t().contiguous().t()
err = H.raises(model, tokens)
shown = err is not None
detail = f"ids not contiguous in memory: {err}"
""")

entry("tt_embedding_dropout", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.drop = nn.Dropout(0.1)                                     # as in the original Transformer
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.drop(self.embed(tokens) + self.pe[:T])
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, "Dropout on the embeddings, as in Vaswani et al.: train() and eval() answer differently. The promises: \"... and "
      "answers the same in train() as in eval(): no dropout.\"",
      shown_by="""
torch.manual_seed(0)
model = TinyTransformer(11, 16, 2, 32, 2, 20)
tokens = torch.randint(0, 11, (3, 9))
model.train()
a = model(tokens)
model.eval()
b = model(tokens)
gap = H.maxdiff(a, b)
shown = gap > 1e-5
detail = f"train() and eval() differ by {gap:.2f}"
""")

entry("tt_embedding_weight_data", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed.weight.data[tokens] + self.pe[:T]            # look the rows up in the table directly
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, "The rows are looked up in `self.embed.weight.data`, outside autograd: the embedding never gets a gradient and "
      "never learns. The promises: \"Gradients reach every floating argument and every parameter (TinyTransformer) "
      "... no .detach(), .data or torch.no_grad() on a path by which an input changes an output\".",
      shown_by="""
model = TinyTransformer(11, 16, 2, 32, 2, 20)
model(torch.randint(0, 11, (3, 9))).sum().backward()
shown = model.embed.weight.grad is None
detail = f"the embedding's gradient after backward: {model.embed.weight.grad}"
""")

entry("tt_positions_from_one", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        # positions 1 .. max_len: position 0 would add sin 0 = 0 to half the features
        self.register_buffer("pe", sinusoidal_encoding(max_len + 1, d_model)[1:], persistent=False)
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
'''}, "The table starts at position 1. The text: \"a token embedding nn.Embedding(vocab_size, d_model), plus the "
      "sinusoidal encoding of the positions 0, ..., T-1\".",
      shown_by=same_weights() + """
gap = H.maxdiff(mine(tokens), ref(tokens))
shown = gap > 1e-3
detail = f"with the course model's weights: logits off by {gap:.2f}"
""")

entry("tt_post_ln_skips_final_norm", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
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
        if self.norm_first:              # a Post-LN block already ends with a LayerNorm: no need for another
            x = self.norm(x)
        return self.head(x)
'''}, "With norm_first=False the final LayerNorm is skipped, on the ground that a Post-LN block already ends with "
      "one. The text: \"a final LayerNorm(d_model) and a linear head\", and \"The tests use every parameter with "
      "drawn values, the final LayerNorm's too, and in both placements (norm_first=True and False).\"",
      shown_by=same_weights(False) + """
gap = H.maxdiff(mine(tokens), ref(tokens))
shown = gap > 1e-3
detail = f"Post-LN with the course model's weights: logits off by {gap:.2f}"
""")

entry("tt_norm_first_not_passed", "mistake", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, "norm_first is accepted but never given to the blocks, which are always Pre-LN. The text: \"n_layers of your "
      "TransformerBlock(d_model, n_heads, d_ff, norm_first)\" and \"in both placements (norm_first=True and "
      "False)\".",
      shown_by=same_weights(False) + """
gap = H.maxdiff(mine(tokens), ref(tokens))
shown = gap > 1e-3
detail = f"norm_first=False with the course model's weights: logits off by {gap:.2f}"
""")

entry("pasted_layernorm_unbiased_var", "mistake", {"LayerNorm": '''
# Paste your LayerNorm from the residual exercise here.
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias
'''}, "The pasted LayerNorm uses x.var, the unbiased variance (divided by d_model - 1): the model's logits are not "
      "the course model's. The residual exercise: \"The variance is the biased one (divide by d_model, not "
      "d_model - 1)\", and this one's graded cell: \"with the parts you pasted from the earlier exercises, it "
      "computes the course model's logits\".",
      shown_by=same_weights() + """
gap = H.maxdiff(mine(tokens), ref(tokens))
shown = gap > 1e-3
detail = f"with the course model's weights: logits off by {gap:.2f}"
""")

# ----------------------------------------------------------------------------------------------------------------------
# TinyTransformer: correct alternatives
# ----------------------------------------------------------------------------------------------------------------------

entry("tt_gpt_names_persistent_table", "correct", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    """GPT-2's names; the table of positions kept in the state_dict too."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.max_len = max_len
        self.wte = nn.Embedding(vocab_size, d_model)
        self.register_buffer("wpe", sinusoidal_encoding(max_len, d_model))          # persistent: fine too
        self.h = nn.ModuleList()
        for _ in range(n_layers):
            self.h.append(TransformerBlock(d_model, n_heads, d_ff, norm_first=norm_first))
        self.ln_f = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        B, T = tokens.shape
        assert T <= self.max_len, f"{T} tokens, at most {self.max_len}"
        h = self.wte(tokens) + self.wpe[:T].unsqueeze(0)
        mask = causal_mask(T, tokens.device)
        for block in self.h:
            h = block(h, mask=mask)
        return self.lm_head(self.ln_f(h))
'''}, "GPT-2's names (wte, wpe, h, ln_f, lm_head), the table as a persistent buffer (\"Buffers ... are yours to name "
      "and keep\"), blocks appended one by one, the mask passed by keyword.")

entry("tt_head_no_bias_second", "correct", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)        # registered second: after the embedding
        self.layers = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.final_norm = LayerNorm(d_model)
        self.register_buffer("positions", sinusoidal_encoding(max_len, d_model), persistent=False)

    def forward(self, tokens):
        T = tokens.shape[-1]
        x = self.embedding(tokens) + self.positions[:T]
        mask = causal_mask(T, device=tokens.device)
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(self.final_norm(x))
'''}, "A head without a bias (\"bias=False is fine too\"), registered right after the embedding as the text asks, "
      "the other modules in another order.")

entry("tt_mask_buffer_reduce", "correct", {"TinyTransformer": '''
import functools


class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.register_buffer("causal", causal_mask(max_len), persistent=False)       # moves with .to() as well
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        mask = self.causal[:T, :T]
        x = functools.reduce(lambda h, block: block(h, mask), self.blocks, self.embed(tokens) + self.pe[:T])
        return self.head(self.norm(x))
'''}, "The causal mask for max_len made once, as a buffer (so .to() moves it), and cut to (T, T) at each call; the "
      "blocks applied with functools.reduce.")

entry("tt_pe_indexed_by_positions", "correct", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pos_table", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        B, T = tokens.shape
        positions = torch.arange(T, device=tokens.device).expand(B, T)          # (B, T) ids of positions
        x = self.token_embedding(tokens) + nn.functional.embedding(positions, self.pos_table)
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, "The positions looked up like tokens: the table indexed by a (B, T) tensor of position ids with "
      "F.embedding (a lookup, not a library version of a graded part).")

entry("pasted_einsum_parts", "correct", {"MultiHeadAttention": '''
# Paste your scaled_dot_product_attention, causal_mask and MultiHeadAttention from the attention exercise here.
def scaled_dot_product_attention(q, k, v, mask=None):
    out_dtype = q.dtype
    if q.dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    s = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(mask.logical_not(), float("-inf"))
    m = s.amax(dim=-1, keepdim=True).detach()
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)           # a row with every key masked
    e = (s - m).exp()
    w = e / e.sum(-1, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)
    return torch.einsum("...ij,...jd->...id", w, v).to(out_dtype), w.to(out_dtype)


def causal_mask(seq_len, device=None):
    i = torch.arange(seq_len, device=device)
    return i[None, :] <= i[:, None]


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        self.h, self.dk = n_heads, d_model // n_heads
        self.q_proj, self.k_proj = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)
        self.v_proj, self.out_proj = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        q = self.q_proj(query).unflatten(-1, (self.h, self.dk)).transpose(1, 2)
        k = self.k_proj(key).unflatten(-1, (self.h, self.dk)).transpose(1, 2)
        v = self.v_proj(value).unflatten(-1, (self.h, self.dk)).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.transpose(1, 2).flatten(-2))
''', "LayerNorm": '''
# Paste your LayerNorm from the residual exercise here.
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias
'''}, "Other honest pasted parts: einsum attention, a causal mask from two aranges, heads split with unflatten / "
      "flatten, LayerNorm with var_mean(correction=0) and rsqrt: the same model.")

# ----------------------------------------------------------------------------------------------------------------------
# slow answers
# ----------------------------------------------------------------------------------------------------------------------

entry("tt_one_prefix_at_a_time", "slow", {"TinyTransformer": '''
class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        logits = []
        for t in range(1, T + 1):                 # the logits at t - 1 from the tokens 0 .. t - 1 only: causal
            x = self.embed(tokens[:, :t]) + self.pe[:t]
            mask = causal_mask(t, device=tokens.device)
            for block in self.blocks:
                x = block(x, mask)
            logits.append(self.head(self.norm(x[:, -1])))
        return torch.stack(logits, dim=1)
'''}, "Right logits, but the whole model runs once per prefix, as when generating: T forward passes instead of one. "
      "The graded cell: \"the forward pass runs about as fast as the reference solution; at most 3x\".",
      shown_by="""
torch.manual_seed(0)
sizes = dict(vocab_size=16, d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=64)
model, ref = TinyTransformer(**sizes), spec.TinyTransformer(**sizes)
tokens = torch.randint(0, 16, (2, 64))
ratio = H.time_ratio(model, ref, tokens, repeats=3)
ops, ref_ops = H.op_count(model, tokens), H.op_count(ref, tokens)
shown = ratio > 5 and ops > 20 * ref_ops
detail = f"64 tokens: {ratio:.0f}x the time, {ops} torch operations against {ref_ops}"
""")

entry("pasted_attention_loop_over_queries", "slow", {"MultiHeadAttention": '''
# Paste your scaled_dot_product_attention, causal_mask and MultiHeadAttention from the attention exercise here.
def scaled_dot_product_attention(q, k, v, mask=None):
    """One query at a time."""
    dtype = q.dtype
    work = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    Lq = q.shape[-2]
    full = None if mask is None else mask.expand(*mask.shape[:-2], Lq, mask.shape[-1])
    outs, weights = [], []
    for i in range(Lq):
        s = (q[..., i:i + 1, :] @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])        # (..., 1, Lk)
        if full is not None:
            s = s.masked_fill(~full[..., i:i + 1, :], float("-inf"))
        top = s.amax(-1, keepdim=True).detach()
        top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
        e = torch.exp(s - top)
        total = e.sum(-1, keepdim=True)
        w = e / torch.where(total == 0, torch.ones_like(total), total)
        outs.append(w @ v)
        weights.append(w)
    return torch.cat(outs, dim=-2).to(dtype), torch.cat(weights, dim=-2).to(dtype)


def causal_mask(seq_len, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError("n_heads must divide d_model")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, D = query.shape

        def split(t):
            return t.reshape(B, t.shape[1], self.n_heads, self.d_head).transpose(1, 2)

        out, _ = scaled_dot_product_attention(split(self.q_proj(query)), split(self.k_proj(key)),
                                              split(self.v_proj(value)), mask)
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, D))
'''}, "The pasted attention loops over the queries: right logits, but the model's operations grow with the length. "
      "The speed text: \"a Python loop over positions, here or in a part you pasted, makes more of them the longer "
      "the sequence\", and the graded cell: \"at most 3x the reference solution's time\".",
      shown_by="""
torch.manual_seed(0)
sizes = dict(vocab_size=16, d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=64)
model, ref = TinyTransformer(**sizes), spec.TinyTransformer(**sizes)
few, many = (H.op_count(model, torch.randint(0, 16, (2, T))) for T in (16, 64))
ratio = H.time_ratio(model, ref, torch.randint(0, 16, (2, 64)), repeats=3)
shown = many > 2 * few and ratio > 3
detail = f"{few} torch operations for 16 tokens, {many} for 64; {ratio:.1f}x the time at 64 tokens"
""")
