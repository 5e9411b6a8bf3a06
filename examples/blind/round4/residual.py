"""Blind corpus, residual: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# ---------------------------------------------------------------- LayerNorm
entry("ln_upcast_to_float32", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        xf = x.float()                              # statistics in float32, also for half inputs
        mu = xf.mean(-1, keepdim=True)
        var = ((xf - mu) ** 2).mean(-1, keepdim=True)
        y = (xf - mu) / torch.sqrt(var + self.eps)
        return (y * self.weight.float() + self.bias.float()).type_as(x)
'''}, "Computes in float32 whatever the input, as mixed-precision code does for half inputs: after .to(torch.float64) "
      "the module's answer has only float32's precision ('computes in float64 once moved there').",
      shown_by='''
torch.manual_seed(0)
ln, ref = LayerNorm(97).double(), spec.LayerNorm(97).double()
H.randomize(ref, 1.0, torch.Generator().manual_seed(1))
H.load_ln(ln, ref)
x = torch.randn(4, 97, dtype=torch.float64) * 3 + 1
err = H.maxdiff(ln(x), ref(x))
shown = err > 1e-10
detail = f"float64 module and input: off by {err:.1e}"
''')

entry("ln_inplace_affine", "correct", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        y = (x - mean) / torch.sqrt(var + self.eps)      # a new tensor: safe to update in place
        y *= self.weight
        y += self.bias
        return y
'''}, "Scales and shifts its own normalised tensor in place (y *= weight; y += bias): y is a new tensor, not x, and "
      "autograd keeps what mul_ overwrites, so values and gradients are those of the spec.")

entry("ln_rows_flattened_with_view", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        rows = x.view(-1, self.d_model)                  # a matrix of rows, whatever the leading dims
        mu = rows.mean(1, keepdim=True)
        var = rows.sub(mu).pow(2).mean(1, keepdim=True)
        out = (rows - mu) * torch.rsqrt(var + self.eps) * self.weight + self.bias
        return out.view(x.shape)
'''}, "Flattens the leading dimensions with view, which fails on a transposed or permuted x ('where you reshape an "
      "argument, use reshape, not view').",
      shown_by='''
ln = LayerNorm(6)
x = torch.randn(6, 4, 5).transpose(0, 2)               # (5, 4, 6), not contiguous
err = H.raises(ln, x)
shown = err is not None
detail = f"transposed x: {err}"
''')

entry("ln_vector_norm", "correct", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        d = x.shape[-1]
        centred = x - x.sum(-1, keepdim=True) / d
        # the biased variance is |x - mu|^2 / d
        var = torch.linalg.vector_norm(centred, dim=-1, keepdim=True).square() / d
        return torch.addcmul(self.bias, centred * (var + self.eps).rsqrt(), self.weight)
'''}, "The variance as the squared vector norm of the centred row over d, rsqrt and addcmul: the same function and "
      "gradients.")

# ---------------------------------------------------------------- FeedForward
entry("ff_dropout_after_relu", "mistake", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))
'''}, "Dropout after the ReLU, as nn.TransformerEncoderLayer has by default: in training mode (a fresh module's) the "
      "output is random ('answers the same in train() as in eval(): no dropout').",
      shown_by='''
torch.manual_seed(0)
ff = FeedForward(8, 32)
x = torch.randn(2, 3, 8)
a = ff.train()(x)
b = ff.eval()(x)
err = H.maxdiff(a, b)
shown = err > 1e-6
detail = f"train() vs eval(): differ by {err:.3f}"
''')

entry("ff_maximum_with_cpu_zeros", "mistake", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = self.linear1(x)
        h = torch.maximum(h, torch.zeros(1, dtype=h.dtype))    # ReLU written out: max(h, 0)
        return self.linear2(h)
'''}, "ReLU as torch.maximum with torch.zeros(1) made on the CPU: after .to('meta') (or on a GPU) maximum refuses "
      "tensors on two devices ('moves every tensor it uses with .to(\"meta\")').",
      shown_by='''
ff = FeedForward(8, 16).to("meta")
err = H.raises(ff, torch.empty(2, 3, 8, device="meta"))
shown = err is not None
detail = f"module on meta: {err}"
''')

entry("ff_sequential_with_aliases", "correct", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.linear1, self.linear2 = self.net[0], self.net[2]     # the names the grader loads by

    def forward(self, x):
        return self.net(x)
'''}, "An nn.Sequential with linear1 and linear2 as aliases of its layers, as the text allows ('other names for the "
      "same layers ... are fine beside them').")

# ---------------------------------------------------------------- TransformerBlock
entry("block_postln_residual_from_input", "mistake", {"TransformerBlock": '''
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
            h = x + self.attn(self.norm1(x), mask=mask)
            return h + self.ff(self.norm2(h))
        h = self.norm1(x + self.attn(x, mask=mask))
        return self.norm2(x + self.ff(h))              # residual of the block's input
'''}, "Post-LN's second residual adds the block's input x instead of the first sublayer's normalised output h: "
      "'x <- norm2(x + ff(x))' with x the updated stream. Pre-LN is right.",
      shown_by='''
torch.manual_seed(0)
blk, ref = TransformerBlock(16, 4, 32, norm_first=False), spec.TransformerBlock(16, 4, 32, norm_first=False)
H.randomize(ref, 0.5, torch.Generator().manual_seed(2))
H.load_block(blk, ref)
x = torch.randn(2, 5, 16)
err = H.maxdiff(blk(x), ref(x))
shown = err > 1e-4
detail = f"Post-LN, drawn weights: off by {err:.3f}"
''')

entry("block_preln_ff_reads_old_stream", "mistake", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.norm_first = norm_first

    def forward(self, x, mask=None):
        if not self.norm_first:
            x = self.norm1(x + self.attn(x, mask=mask))
            return self.norm2(x + self.ff(x))
        a = self.attn(self.norm1(x), mask=mask)
        f = self.ff(self.norm2(x))                      # both sublayers read the block's input
        return x + a + f
'''}, "Pre-LN computed as parallel sublayers (GPT-J style): the feed-forward reads norm2 of the block's input, not of "
      "the stream after attention ('x <- x + attn(norm1(x)), x <- x + ff(norm2(x))', in that order).",
      shown_by='''
torch.manual_seed(0)
blk, ref = TransformerBlock(16, 4, 32), spec.TransformerBlock(16, 4, 32)
H.randomize(ref, 0.5, torch.Generator().manual_seed(3))
H.load_block(blk, ref)
x = torch.randn(2, 5, 16)
err = H.maxdiff(blk(x), ref(x))
shown = err > 1e-4
detail = f"Pre-LN, drawn weights: off by {err:.3f}"
''')

entry("block_norm_eps_1e6", "mistake", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model, eps=1e-6)       # as in LLaMA
        self.norm2 = LayerNorm(d_model, eps=1e-6)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x, mask=mask))
            x = self.norm2(x + self.ff(x))
        return x
'''}, "norm1 and norm2 with eps = 1e-6: the text asks for LayerNorm(d_model) (eps 1e-5), and the block must equal "
      "nn.TransformerEncoderLayer (layer_norm_eps 1e-5): on nearly constant rows the two differ.",
      shown_by='''
torch.manual_seed(0)
blk, ref = TransformerBlock(16, 4, 32), spec.TransformerBlock(16, 4, 32)
H.randomize(ref, 0.5, torch.Generator().manual_seed(4))
H.load_block(blk, ref)
x = 1.0 + 1e-3 * torch.randn(2, 5, 16)                 # nearly constant rows
err = H.maxdiff(blk(x), ref(x))
shown = err > 1e-3
detail = f"Pre-LN, rows 1 + 1e-3 noise: off by {err:.3f}"
''')

entry("block_checkpointed_sublayers", "correct", {"TransformerBlock": '''
from torch.utils.checkpoint import checkpoint


class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def _attend(self, h, mask):
        return self.attn(h, mask=mask)

    def forward(self, x, mask=None):
        # activation checkpointing: recompute the sublayers in backward instead of storing their insides
        if self.norm_first:
            x = x + checkpoint(self._attend, self.norm1(x), mask, use_reentrant=False)
            x = x + checkpoint(self.ff, self.norm2(x), use_reentrant=False)
        else:
            x = self.norm1(x + checkpoint(self._attend, x, mask, use_reentrant=False))
            x = self.norm2(x + checkpoint(self.ff, x, use_reentrant=False))
        return x
'''}, "Activation checkpointing (torch.utils.checkpoint, allowed) around each sublayer: the same outputs and the same "
      "gradients, recomputed in backward.")

entry("block_attn_per_sequence", "slow", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def _attention(self, x, mask):
        # one sequence at a time, so that a (B, 1, L, L) padding mask is easy to pick apart
        outs = []
        for b in range(x.shape[0]):
            m = mask if mask is None or mask.dim() == 2 else mask[b:b + 1]
            outs.append(self.attn(x[b:b + 1], mask=m))
        return torch.cat(outs, dim=0)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self._attention(self.norm1(x), mask)
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self._attention(x, mask))
            x = self.norm2(x + self.ff(x))
        return x
'''}, "Right values, but attention called once per sequence of the batch: a Python loop over the batch, many times "
      "the reference's time on a batch of short sequences (at most 3x).",
      shown_by='''
torch.manual_seed(0)
blk, ref = TransformerBlock(32, 4, 64), spec.TransformerBlock(32, 4, 64)
H.load_block(blk, ref)
x = torch.randn(64, 8, 32)
r = H.time_ratio(blk, ref, x, repeats=3)
shown = r > 5
detail = f"B = 64, L = 8: {r:.0f}x the spec's CPU time"
''')
