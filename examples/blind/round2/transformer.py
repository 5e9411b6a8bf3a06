"""Blind corpus (round 2) for exercises/transformer: TinyTransformer (and the parts pasted into it).

New entries only (round 1's names are not repeated). Each mistake breaks one sentence of the notebook's text, by an
input that text allows; each correct entry is another honest way to the same answer; the slow entry is correct but
far slower than the vectorised answer the notebook asks for.
"""

ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# The course model (the spec's) with every weight drawn, and the entry's model given its weights by the text's rules.
TINY_PAIR = '''
SIZES = (11, 16, 2, 32, 2, 20)                  # vocab_size, d_model, n_heads, d_ff, n_layers, max_len


def tiny_pair(norm_first=True, default_placement=False):
    torch.manual_seed(1)
    theirs = H.randomize(spec.TinyTransformer(*SIZES, norm_first=norm_first), 0.5)
    mine = TinyTransformer(*SIZES) if default_placement else TinyTransformer(*SIZES, norm_first=norm_first)
    H.load_tiny(mine, theirs, SIZES[0], SIZES[1], SIZES[4])
    return mine, theirs


tokens = torch.randint(0, 11, (3, 9))
'''

# The spec's TinyTransformer, to build entries that change one line of it.
HEAD = '''
class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""
'''


# ----------------------------------------------------------------------------------------------------------------------
# Mistakes
# ----------------------------------------------------------------------------------------------------------------------

entry("tiny_mask_without_device", "mistake", {"TinyTransformer": HEAD + '''
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
        mask = causal_mask(T)                          # (T, T), True = may attend
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, why="The causal mask is made on the default device, not the tokens', so the model moved to 'meta' (or a GPU) "
        "fails: 'A module (`TinyTransformer`) moves every tensor it uses with ... `.to(\"meta\")`' (Hint 2: "
        "`causal_mask(T, device=tokens.device)`).",
    shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20).to("meta")
raised = H.raises(model, torch.randint(0, 11, (2, 9), device="meta"))
shown = raised is not None
detail = f"on meta: raises {raised}"
''')

entry("tiny_pe_frozen_parameter", "mistake", {"TinyTransformer": HEAD + '''
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        # fixed positions: a parameter that is never trained
        self.pe = nn.Parameter(sinusoidal_encoding(max_len, d_model), requires_grad=False)
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
'''}, why="The table of positions is a (frozen) nn.Parameter, one more parameter than the model may hold: 'your "
        "model holds exactly these parameters' (an embedding, the blocks, a LayerNorm, the head; 'Buffers (a table "
        "of positions) are yours').",
    shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20)
extra = [n for n, p in model.named_parameters() if tuple(p.shape) == (20, 16)]
raised = H.raises(H.tiny_parts, model, 11, 16, 2)
shown = bool(extra) and raised == "ValueError"
detail = f"parameters of the table's shape: {extra}; loading the course weights by the text's rules: {raised}"
''')

entry("tiny_pe_computed_in_forward_on_cpu", "mistake", {"TinyTransformer": HEAD + '''
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + sinusoidal_encoding(T, self.d_model)     # the positions of these T tokens
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, why="The table is made anew on the CPU at every call instead of once, as a buffer, in __init__, so the model "
        "moved to 'meta' fails: 'compute it once for `max_len` positions in `__init__`, for example as a buffer' and "
        "'keep constant tensors in buffers'.",
    shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20).to("meta")
raised = H.raises(model, torch.randint(0, 11, (2, 9), device="meta"))
shown = raised is not None
detail = f"on meta: raises {raised}"
''')

entry("tiny_norm_on_embeddings_not_output", "mistake", {"TinyTransformer": HEAD + '''
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.norm = LayerNorm(d_model)                 # normalise the input of the stack, as BERT does
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.norm(self.embed(tokens) + self.pe[:T])
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)
'''}, why="The LayerNorm normalises the embeddings before the blocks instead of their output: 'a final "
        "`LayerNorm(d_model)` and a linear head', one 'LayerNorm(d_model) after them'.",
    shown_by=TINY_PAIR + '''
mine, theirs = tiny_pair(norm_first=True)
err = H.maxdiff(mine(tokens), theirs(tokens))
shown = err > 1e-3
detail = f"Pre-LN, drawn weights: max diff {err:.2f}"
''')

entry("tiny_embedding_padding_idx_0", "mistake", {"TinyTransformer": HEAD + '''
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=0)     # token 0 pads
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
'''}, why="padding_idx=0 makes token 0 a padding token whose embedding never gets a gradient (and starts at zero), "
        "though 0 is an ordinary token of the task: 'a token embedding `nn.Embedding(vocab_size, d_model)`' and "
        "'Gradients reach ... every parameter'.",
    shown_by=TINY_PAIR + '''
mine, theirs = tiny_pair()
toks = tokens.clone()
toks[:, 0] = 0
r = torch.randn(3, 9, 11)
g_mine = H.grads_of([H.tiny_parts(mine, 11, 16, 2)["emb"]], (mine(toks) * r).sum())[0]
g_want = H.grads_of([theirs.embed.weight], (theirs(toks) * r).sum())[0]
shown = g_mine[0].abs().max().item() == 0 and g_want[0].abs().max().item() > 1e-4
detail = f"gradient of token 0's embedding: {g_mine[0].abs().max().item():.1e} (course model {g_want[0].abs().max().item():.1e})"
''')

entry("tiny_returns_log_softmax", "mistake", {"TinyTransformer": HEAD + '''
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
        return torch.log_softmax(self.head(self.norm(x)), dim=-1)     # log-probabilities of the next token
'''}, why="It returns log-probabilities, not the head's logits (training with cross_entropy still works, which hides "
        "it): 'Return the head's output as it is, `(B, T, vocab_size)`'.",
    shown_by=TINY_PAIR + '''
mine, theirs = tiny_pair()
err = H.maxdiff(mine(tokens), theirs(tokens))
shown = err > 1e-3
detail = f"drawn weights: max diff {err:.2f} from the course model's logits"
''')

entry("tiny_positions_from_one", "mistake", {"TinyTransformer": HEAD + '''
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.pe[1:T + 1]        # positions 1, ..., T (the first token is number 1)
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, why="Positions are counted from 1, so every token gets the next position's encoding and T = max_len runs off "
        "the table: 'the sinusoidal encoding of the positions `0, ..., T-1`' and 'T <= max_len'.",
    shown_by=TINY_PAIR + '''
mine, theirs = tiny_pair()
err = H.maxdiff(mine(tokens), theirs(tokens))
raised = H.raises(mine, torch.randint(0, 11, (2, 20)))
shown = err > 1e-3 and raised is not None
detail = f"T = 9: max diff {err:.2f}; T = max_len = 20: raises {raised}"
''')

entry("tiny_embed_view_flattened_tokens", "mistake", {"TinyTransformer": HEAD + '''
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        B, T = tokens.shape
        x = self.embed(tokens.view(-1)).view(B, T, -1) + self.pe[:T]       # embed B*T ids, then back to (B, T, d)
        mask = causal_mask(T, device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, why="tokens.view(-1) fails on tokens that are a transposed view: 'A tensor argument may be a view that is not "
        "contiguous in memory ... (`TinyTransformer`): where you reshape an argument, use `reshape`, not `view`.'",
    shown_by='''
model = TinyTransformer(11, 16, 2, 32, 2, 20)
toks = torch.randint(0, 11, (9, 3)).t()               # (B, T) = (3, 9), not contiguous
raised = H.raises(model, toks)
shown = raised is not None
detail = f"transposed tokens: raises {raised}"
''')

entry("tiny_padding_mask_token_0", "mistake", {"TinyTransformer": HEAD + '''
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
        not_padding = (tokens != 0)[:, None, None, :]                        # (B, 1, 1, T): keys that are real
        mask = causal_mask(T, device=tokens.device) & not_padding           # (B, 1, T, T)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, why="Keys holding token 0 are masked out as padding, though 0 is an ordinary token of the task (the visible "
        "checks change a token to 0 only after the positions they compare): 'each given the causal mask', nothing "
        "else.",
    shown_by=TINY_PAIR + '''
mine, theirs = tiny_pair()
toks = tokens.clone()
toks[:, 1] = 0
err = H.maxdiff(mine(toks), theirs(toks))
shown = err > 1e-3
detail = f"token 0 at position 1: max diff {err:.2f}"
''')

entry("tiny_mask_only_in_training", "mistake", {"TinyTransformer": HEAD + '''
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
        # teacher forcing: hide the later tokens while training; at inference there is nothing later to hide
        mask = causal_mask(T, device=tokens.device) if self.training else None
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, why="The causal mask is dropped in eval(), so the evaluated model sees later tokens: 'answers the same in "
        "`train()` as in `eval()`' and 'each given the causal mask, so that the logits at position t depend only on "
        "the tokens 0, ..., t'.",
    shown_by=TINY_PAIR + '''
mine, theirs = tiny_pair()
mine.eval()
theirs.eval()
err = H.maxdiff(mine(tokens), theirs(tokens))
mine.train()
err_train = H.maxdiff(mine(tokens), theirs(tokens))
shown = err > 1e-3 and err_train < 1e-4
detail = f"eval(): max diff {err:.2f}; train(): {err_train:.1e}"
''')

entry("tiny_default_post_ln", "mistake", {"TinyTransformer": HEAD + '''
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=False):
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
'''}, why="norm_first defaults to False (the original Transformer's Post-LN), so a model built without it is "
        "Post-LN: '`TinyTransformer(vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True)`'.",
    shown_by=TINY_PAIR + '''
mine, theirs = tiny_pair(norm_first=True, default_placement=True)
err = H.maxdiff(mine(tokens), theirs(tokens))
shown = err > 1e-3
detail = f"built with the default placement: max diff {err:.2f} from the Pre-LN course model"
''')

entry("tiny_logits_cast_to_float32", "mistake", {"TinyTransformer": HEAD + '''
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
        logits = self.head(self.norm(x))
        return logits.float()                          # logits in float32 for the loss, as LLaMA's code does
'''}, why="The logits are always cast to float32, so a model moved with .to(torch.float64) answers in float32: 'A "
        "module (`TinyTransformer`) moves every tensor it uses with `.to(torch.float64)`'.",
    shown_by=TINY_PAIR + '''
mine, theirs = tiny_pair()
mine, theirs = mine.double(), theirs.double()
out = mine(tokens)
shown = out.dtype != torch.float64
detail = f"after .double(): logits in {out.dtype}, max diff {H.maxdiff(out, theirs(tokens)):.1e}"
''')

entry("pasted_block_dropout_before_norm_first", "mistake", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=True):   # the order of nn.TransformerEncoderLayer
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.dropout(self.attn(self.norm1(x), mask=mask))
            x = x + self.dropout(self.ff(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout(self.attn(x, mask=mask)))
            x = self.norm2(x + self.dropout(self.ff(x)))
        return x
'''}, why="The pasted block takes a dropout argument before norm_first, so `TransformerBlock(d_model, n_heads, d_ff, "
        "norm_first)` as the text builds it puts norm_first into dropout: every block is Pre-LN, and norm_first=True "
        "becomes dropout p = 1 in training: the model must be right 'in both placements (`norm_first=True` and "
        "`False`)' and 'answers the same in `train()` as in `eval()`: no dropout'.",
    shown_by=TINY_PAIR + '''
mine, theirs = tiny_pair(norm_first=False)
err = H.maxdiff(mine(tokens), theirs(tokens))
shown = err > 1e-3
detail = f"norm_first=False: max diff {err:.2f} from the Post-LN course model"
''')


# ----------------------------------------------------------------------------------------------------------------------
# Correct alternatives
# ----------------------------------------------------------------------------------------------------------------------

entry("tiny_mask_buffer_sliced", "correct", {"TinyTransformer": HEAD + '''
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.register_buffer("causal", causal_mask(max_len), persistent=False)     # sliced for each T
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens) + self.pe[:T]
        mask = self.causal[:T, :T]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))
'''}, why="The causal mask made once for max_len as a non-persistent bool buffer (it moves with the model, .double() "
        "leaves it bool) and sliced to (T, T).")

entry("tiny_pe_batch_dim_buffer", "correct", {"TinyTransformer": HEAD + '''
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pos_table", sinusoidal_encoding(max_len, d_model).unsqueeze(0), persistent=False)
        layers = []
        for _ in range(n_layers):
            layers.append(TransformerBlock(d_model, n_heads, d_ff, norm_first=norm_first))
        self.layers = nn.ModuleList(layers)
        self.ln_f = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        B, T = tokens.shape
        h = self.tok_emb(tokens) + self.pos_table[:, :T, :]          # (1, T, d) broadcasts over the batch
        mask = causal_mask(T, device=tokens.device)
        for layer in self.layers:
            h = layer(h, mask=mask)
        return self.lm_head(self.ln_f(h))
'''}, why="GPT-2's names (tok_emb, layers, ln_f, lm_head), the table kept as (1, max_len, d), blocks built by "
        "keyword in a loop and given the mask by keyword: the same model.")

entry("tiny_functional_embedding_einsum_head", "correct", {"TinyTransformer": '''
import torch.nn.functional as F


class TinyTransformer(nn.Module):
    """A causal language model; forward(tokens) returns logits of shape (B, T, vocab_size)."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers))
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[-1]
        x = F.embedding(tokens, self.embed.weight) + self.pe[:T]
        mask = ~torch.ones(T, T, dtype=torch.bool, device=tokens.device).triu(1)     # not above the diagonal
        for block in self.blocks:
            x = block(x, mask)
        h = self.norm(x)
        return torch.einsum("btd,vd->btv", h, self.head.weight) + self.head.bias
'''}, why="F.embedding on the embedding's weight, the mask as the complement of the strict upper triangle, and the "
        "head applied by einsum with its own weight and bias: the same logits.")

entry("tiny_head_first_helpers_and_print", "correct", {"TinyTransformer": HEAD + '''
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.head = nn.Linear(d_model, vocab_size)                     # with its bias: told from the embedding by it
        self.final_norm = LayerNorm(d_model)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.register_buffer("positions", sinusoidal_encoding(max_len, d_model), persistent=False)

    def embed(self, tokens):
        """Token embeddings plus the encodings of positions 0, ..., T-1."""
        return self.embedding(tokens) + self.positions[: tokens.shape[1]]

    def forward(self, tokens):
        x = self.embed(tokens)
        mask = causal_mask(tokens.shape[1], device=tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.final_norm(x))


_demo = TinyTransformer(11, 16, 2, 32, 2, 20)
print(f"{sum(p.numel() for p in _demo.parameters())} parameters;", _demo(torch.randint(0, 11, (2, 5))).shape)
'''}, why="The submodules declared in another order (the head first, with its bias), a helper method for the "
        "embeddings, and a demo print at the end of the cell: 'under any names and in any order'.")

entry("tiny_mask_expanded_per_batch", "correct", {"TinyTransformer": HEAD + '''
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        B, T = tokens.shape
        x = self.embed(tokens.reshape(-1)).reshape(B, T, -1) + self.pe[:T]
        mask = causal_mask(T, device=tokens.device).expand(B, 1, T, T)      # one (T, T) mask per sequence
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.head(self.norm(x))
'''}, why="Token ids embedded flat with reshape (fine on any layout) and the causal mask expanded to (B, 1, T, T), "
        "a shape the attention broadcasts over the heads: the same logits.")


# ----------------------------------------------------------------------------------------------------------------------
# Slow
# ----------------------------------------------------------------------------------------------------------------------

entry("tiny_forward_per_prefix", "slow", {"TinyTransformer": HEAD + '''
    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        outs = []
        for t in range(1, T + 1):          # as in generation: the logits of position t - 1 from the first t tokens
            x = self.embed(tokens[:, :t]) + self.pe[:t]
            mask = causal_mask(t, device=tokens.device)
            for block in self.blocks:
                x = block(x, mask)
            outs.append(self.head(self.norm(x[:, -1])))
        return torch.stack(outs, dim=1)
'''}, why="Correct (the last position of each prefix, as a generation loop computes it) but one whole forward "
        "pass per position, T times the work and T times the operations: 'at most 3x the reference solution's time' (the speed "
        "self-check: 'a Python loop over positions ... makes more of them the longer the sequence').",
    shown_by='''
torch.manual_seed(0)
model = TinyTransformer(16, 64, 4, 128, 2, 64)
ref = spec.TinyTransformer(16, 64, 4, 128, 2, 64)
toks = torch.randint(0, 16, (2, 64))
few, many = H.op_count(model, toks[:, :16]), H.op_count(model, toks)
ratio = H.time_ratio(model, ref, toks, repeats=3)
shown = many > 2 * few and ratio > 5
detail = f"{few} torch operations for 16 tokens, {many} for 64; {ratio:.0f}x the spec's CPU time for 64 tokens"
''')
