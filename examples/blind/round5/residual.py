"""Blind corpus, residual: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# A Pre-LN block as the spec writes it, for the block entries below that change only the Post-LN branch (and back).
_PRE = '''
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self.ff(self.norm2(x))
            return x
'''

# ----------------------------------------------------------------------------------------------------------------
# Mistakes
# ----------------------------------------------------------------------------------------------------------------

entry("ln_eps_argument_ignored", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + 1e-5) + self.bias
'''}, "Writes the default 1e-5 into forward instead of keeping the eps argument: LayerNorm(d, eps=0.1) behaves as "
   "eps = 1e-5, against 'LayerNorm(d_model, eps=1e-5)' ('the eps argument is used').",
      shown_by="""
g = torch.Generator().manual_seed(0)
x = 0.3 * torch.randn(4, 6, generator=g)
mine, ref = LayerNorm(6, eps=0.1), spec.LayerNorm(6, eps=0.1)
gap = H.maxdiff(mine(x), ref(x))
shown = gap > 1e-3
detail = f"eps = 0.1 on rows of spread 0.3: off by {gap:.3f}"
""")

entry("ln_centres_x_in_place", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        x -= x.mean(-1, keepdim=True)                  # centre in place: no extra copy of the activations
        var = (x ** 2).mean(-1, keepdim=True)
        return x / torch.sqrt(var + self.eps) * self.weight + self.bias
'''}, "Centres x in place (x -= mean) to save a copy: the caller's tensor comes back centred, against 'do not modify "
   "your inputs in place' ('does not modify x'); the visible checks never look at x afterwards.",
      shown_by="""
g = torch.Generator().manual_seed(1)
x = 3 + 5 * torch.randn(2, 3, 8, generator=g)
before = x.clone()
LayerNorm(8)(x)
gap = H.maxdiff(x, before)
shown = gap > 0
detail = f"x changed by the call (largest change {gap:.2f})"
""")

entry("ln_eps_as_plain_tensor", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = torch.tensor([eps])               # a tensor, to add to the variance tensor

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + self.eps) * self.weight + self.bias
'''}, "Keeps eps as a plain tensor attribute, not a buffer: .to('meta') (or to a GPU) leaves it on the CPU and "
   "forward fails, against 'moves every tensor it uses with .to(...) (keep constant tensors in buffers)'.",
      shown_by="""
ln = LayerNorm(8).to("meta")
err = H.raises(ln, torch.empty(2, 3, 8, device="meta"))
shown = err is not None
detail = f"after .to('meta'), forward on a meta tensor: {err}"
""")

entry("ln_parameters_shaped_for_broadcast", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        # shaped (1, 1, d_model) to broadcast over (B, L, d_model)
        self.weight = nn.Parameter(torch.ones(1, 1, d_model))
        self.bias = nn.Parameter(torch.zeros(1, 1, d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
'''}, "Shapes weight and bias (1, 1, d_model) 'for broadcasting': an input with no leading dimension comes back "
   "(1, 1, d_model) and nn.LayerNorm's state_dict does not load, against 'weight ... and bias ..., both of shape "
   "(d_model,)' and 'forward(x) accepts any number of leading dimensions'.",
      shown_by="""
ln = LayerNorm(5)
y = ln(torch.randn(5))
shown = tuple(ln.weight.shape) != (5,) or tuple(y.shape) != (5,)
detail = f"weight shape {tuple(ln.weight.shape)}; a (5,) input gives {tuple(y.shape)}"
""")

entry("ln_statistics_without_grad", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        with torch.no_grad():                         # the statistics are not learned, only weight and bias are
            mean = x.mean(-1, keepdim=True)
            std = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + self.eps)
        return (x - mean) / std * self.weight + self.bias
'''}, "Computes the mean and standard deviation under torch.no_grad() ('they are not learned'): the output is right "
   "but the gradient for x is wrong, against 'no .detach(), .data or torch.no_grad() on a path by which an input "
   "changes an output' ('gradients for x ... equal torch.nn.LayerNorm's').",
      shown_by="""
g = torch.Generator().manual_seed(2)
base = torch.randn(3, 8, generator=g, dtype=torch.float64)
r = torch.randn(3, 8, generator=g, dtype=torch.float64)
grads = []
for make in (LayerNorm, spec.LayerNorm):
    x = base.clone().requires_grad_()
    (make(8).double()(x) * r).sum().backward()
    grads.append(x.grad)
gap = H.maxdiff(grads[0], grads[1])
shown = gap > 1e-6
detail = f"gradient for x off by {gap:.3f}"
""")

entry("ln_one_pass_variance", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean * mean        # E[x^2] - E[x]^2: both statistics in one pass
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
'''}, "Uses the one-pass variance E[x^2] - E[x]^2, which cancels catastrophically in float32 for a nearly constant "
   "row far from 0 (even going negative, NaN), against 'eps ... matters when a row is nearly constant' and the "
   "hidden tests' 'rows that are nearly constant' at 'any ... scales'.",
      shown_by="""
g = torch.Generator().manual_seed(3)
x = 300.0 + 1e-2 * torch.randn(4, 16, generator=g)
mine, ref = LayerNorm(16)(x), spec.LayerNorm(16)(x)
gap = H.maxdiff(mine, ref)
shown = gap > 1e-2
detail = f"rows 300 + 0.01 * noise: off by {gap:.2f} ({int(mine.isnan().sum())} NaN)"
""")

entry("ff_gelu_instead_of_relu", "mistake", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.act = nn.GELU()                           # as in GPT-2

    def forward(self, x):
        return self.linear2(self.act(self.linear1(x)))
'''}, "Uses GELU, as GPT-2 does, instead of the ReLU the text asks for ('linear1, a ReLU, then linear2'); the visible "
   "check with every hidden unit far below 0 still passes, since GELU(-100) is 0 too.",
      shown_by="""
torch.manual_seed(4)
mine, ref = FeedForward(8, 32), spec.FeedForward(8, 32)
H.load_ff(mine, ref)
x = torch.randn(2, 3, 8)
gap = H.maxdiff(mine(x), ref(x))
shown = gap > 1e-4
detail = f"same weights, output off by {gap:.3f}"
""")

entry("ff_view_to_flatten_positions", "mistake", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        shape = x.shape
        flat = x.view(-1, shape[-1])                     # every position of every sequence: one row each
        out = self.linear2(torch.relu(self.linear1(flat)))
        return out.view(*shape[:-1], out.shape[-1])
'''}, "Flattens the positions with view before the linear layers: a transposed (non-contiguous) input raises, "
   "against 'a tensor argument may be a view that is not contiguous ... use reshape, not view'.",
      shown_by="""
torch.manual_seed(5)
x = torch.randn(4, 3, 8).transpose(0, 1)                  # (3, 4, 8), not contiguous
err = H.raises(FeedForward(8, 16), x)
shown = err is not None
detail = f"a transposed (3, 4, 8) input: {err}"
""")

entry("block_norm1_used_twice", "mistake", {"TransformerBlock": '''
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
            x = x + self.ff(self.norm1(x))
        else:
            x = self.norm1(x + self.attn(x, mask=mask))
            x = self.norm2(x + self.ff(x))
        return x
'''}, "Pre-LN feeds the feed-forward sublayer norm1(x) instead of norm2(x) (a copy-paste slip): identical while both "
   "norms hold their initial ones and zeros, wrong once they are trained, against 'x <- x + ff(norm2(x))' (the "
   "hidden tests use 'random weights (the norms' too)').",
      shown_by="""
torch.manual_seed(6)
mine, ref = TransformerBlock(16, 4, 32), spec.TransformerBlock(16, 4, 32)
H.randomize(ref)
H.load_block(mine, ref)
x = torch.randn(2, 5, 16)
gap = H.maxdiff(mine(x), ref(x))
shown = gap > 1e-4
detail = f"random weights, norms included: off by {gap:.3f}"
""")

entry("block_post_ln_adds_in_place", "mistake", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def forward(self, x, mask=None):''' + _PRE + '''        x += self.attn(x, mask=mask)
        x = self.norm1(x)
        x = x + self.ff(x)
        return self.norm2(x)
'''}, "Writes the Post-LN branch with x += attn(x): the caller's residual stream is overwritten (the visible check of "
   "x only runs the Pre-LN block), against 'write x = x + ..., never x += ...' and 'does not modify x'.",
      shown_by="""
torch.manual_seed(7)
block = TransformerBlock(16, 4, 32, norm_first=False)
x = torch.randn(2, 5, 16)
before = x.clone()
block(x)
gap = H.maxdiff(x, before)
shown = gap > 0
detail = f"Post-LN block changed its input x (largest change {gap:.2f})"
""")

entry("block_post_ln_forgets_mask", "mistake", {"TransformerBlock": '''
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
            x = self.norm1(x + self.attn(x))
            x = self.norm2(x + self.ff(x))
        return x
'''}, "Passes mask to the attention in the Pre-LN branch only; the Post-LN block attends everywhere, against 'passes "
   "mask (True = may attend) to the attention' ('the mask reaches the attention ..., Pre-LN and Post-LN').",
      shown_by="""
torch.manual_seed(8)
mine, ref = TransformerBlock(16, 4, 32, norm_first=False), spec.TransformerBlock(16, 4, 32, norm_first=False)
H.load_block(mine, ref)
x = torch.randn(2, 5, 16)
causal = torch.ones(5, 5, dtype=torch.bool).tril()
gap = H.maxdiff(mine(x, causal), ref(x, causal))
shown = gap > 1e-4
detail = f"Post-LN with a causal mask: off by {gap:.3f}"
""")

entry("block_keys_from_raw_stream", "mistake", {"TransformerBlock": '''
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
            x = x + self.attn(h, x, x, mask=mask)        # normalised queries read the stream
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x, x, x, mask=mask))
            x = self.norm2(x + self.ff(x))
        return x
'''}, "In Pre-LN normalises only the queries and lets keys and values come from the raw stream, against 'x <- x + "
   "attn(norm1(x))' (self-attention of the normalised x), which nn.TransformerEncoderLayer(norm_first=True) computes.",
      shown_by="""
torch.manual_seed(9)
mine, ref = TransformerBlock(16, 4, 32), spec.TransformerBlock(16, 4, 32)
H.load_block(mine, ref)
x = 3 + 2 * torch.randn(2, 5, 16)
gap = H.maxdiff(mine(x), ref(x))
shown = gap > 1e-4
detail = f"Pre-LN, same weights: off by {gap:.3f}"
""")

entry("block_sublayers_in_parallel", "mistake", {"TransformerBlock": '''
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
            return h + self.ff(self.norm2(x))
        h = self.norm1(x + self.attn(x, mask=mask))
        return self.norm2(h + self.ff(h))
'''}, "In Pre-LN the feed-forward sublayer reads norm2 of the block's input instead of the stream after attention "
   "(both sublayers in parallel), against the two updates in order: 'x <- x + attn(norm1(x)), x <- x + "
   "ff(norm2(x))'. The visible check, with sublayers that output 0, cannot tell.",
      shown_by="""
torch.manual_seed(10)
mine, ref = TransformerBlock(16, 4, 32), spec.TransformerBlock(16, 4, 32)
H.randomize(ref)
H.load_block(mine, ref)
x = torch.randn(2, 5, 16)
gap = H.maxdiff(mine(x), ref(x))
shown = gap > 1e-4
detail = f"Pre-LN, same weights: off by {gap:.3f}"
""")

entry("block_mask_parameter_named_attn_mask", "mistake", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def forward(self, x, attn_mask=None):               # named as in nn.TransformerEncoderLayer / nn.MultiheadAttention
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=attn_mask)
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x, mask=attn_mask))
            x = self.norm2(x + self.ff(x))
        return x
'''}, "Names forward's mask parameter attn_mask, as torch does: block(x, mask) works but block(x, mask=m) raises "
   "TypeError, against 'forward(x, mask=None)' ('masks of both shapes, by position or keyword').",
      shown_by="""
torch.manual_seed(11)
block = TransformerBlock(16, 4, 32)
x = torch.randn(2, 5, 16)
err = H.raises(lambda: block(x, mask=torch.ones(5, 5, dtype=torch.bool).tril()))
shown = err is not None
detail = f"block(x, mask=causal): {err}"
""")

entry("block_d_ff_ignored", "mistake", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, 4 * d_model)       # the usual width of the hidden layer
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.attn(x, mask=mask))
        return self.norm2(x + self.ff(x))
'''}, "Builds the feed-forward sublayer with the 'usual' 4 * d_model hidden units instead of the d_ff argument, "
   "against 'ff = FeedForward(d_model, d_ff)': the weights of an nn.TransformerEncoderLayer(d_model, n_heads, d_ff) "
   "no longer fit.",
      shown_by="""
block = TransformerBlock(16, 4, 24)
width = block.ff.linear1.out_features
err = H.raises(H.load_block, block, spec.TransformerBlock(16, 4, 24))
shown = width != 24
detail = f"TransformerBlock(16, 4, d_ff=24) has a hidden layer of {width}; loading the spec's weights: {err}"
""")

# ----------------------------------------------------------------------------------------------------------------
# Correct answers written another way
# ----------------------------------------------------------------------------------------------------------------

entry("ln_var_mean_rsqrt", "correct", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias

    def extra_repr(self):
        return f"{self.d_model}, eps={self.eps}"
'''}, "torch.var_mean with correction=0 and a multiplication by torch.rsqrt(var + eps); an extra_repr for printing.")

entry("ln_explicit_sums", "correct", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        n = x.shape[-1]
        mu = x.sum(dim=-1, keepdim=True) / n
        dev = x - mu
        sigma2 = (dev ** 2).sum(dim=-1, keepdim=True) / n          # biased: divide by d_model
        return dev / (sigma2 + self.eps).sqrt() * self.weight + self.bias


ln = LayerNorm(8)
print(ln(torch.randn(2, 8) * 5 + 3).mean(-1))                       # ~0
'''}, "Writes the mean and biased variance as explicit sums divided by d_model, and prints a quick check at the end "
   "of the cell.")

entry("ln_register_parameter_addcmul", "correct", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.register_parameter("weight", nn.Parameter(torch.empty(d_model)))
        self.register_parameter("bias", nn.Parameter(torch.empty(d_model)))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        std = torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps)
        return torch.addcmul(self.bias, centred / std, self.weight)
'''}, "Registers the parameters with register_parameter, initialises them in reset_parameters with nn.init, and "
   "applies scale and shift with torch.addcmul.")

entry("ff_sequential_beside_names", "correct", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.linear1, nn.ReLU(inplace=True), self.linear2)   # the same two layers

    def forward(self, x):
        return self.net(x)
'''}, "Keeps linear1 and linear2 and also an nn.Sequential of the same layers with an in-place ReLU (on linear1's "
   "fresh output, so no input is touched), as the text allows ('other names ... beside them').")

entry("ff_relu_as_mask_product", "correct", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = self.linear1(x)
        return self.linear2(h * (h > 0))                  # ReLU: keep the positive part
'''}, "Writes the ReLU as h * (h > 0), which has the same values and gradients.")

entry("block_sublayer_helper", "correct", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def _residual(self, x, sublayer, norm):
        """One residual step, in this block's arrangement."""
        if self.norm_first:
            return torch.add(x, sublayer(norm(x)))
        return norm(torch.add(x, sublayer(x)))

    def forward(self, x, mask=None):
        x = self._residual(x, lambda h: self.attn(h, mask=mask), self.norm1)
        return self._residual(x, self.ff, self.norm2)
'''}, "Factors each residual step into one helper that takes the sublayer and its norm and picks the arrangement; "
   "the mask reaches the attention through a lambda.")

entry("block_two_arrangement_methods", "correct", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm_first = bool(norm_first)

    def pre_ln(self, x, mask):
        a = self.attn(self.norm1(x), None, None, mask)
        x = x + a
        return x + self.ff(self.norm2(x))

    def post_ln(self, x, mask):
        x = self.norm1(x + self.attn(x, x, x, mask))
        return self.norm2(x + self.ff(x))

    def forward(self, x, mask=None):
        return (self.pre_ln if self.norm_first else self.post_ln)(x, mask)
'''}, "One method per arrangement, chosen in forward, passing key, value and mask to the attention by position.")

entry("ln_float64_statistics", "correct", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        x64 = x.double()                                   # statistics in float64, then back to x's dtype
        mean = x64.mean(-1, keepdim=True)
        var = (x64 - mean).square().mean(-1, keepdim=True)
        normed = ((x64 - mean) / torch.sqrt(var + self.eps)).to(x.dtype)
        return normed * self.weight + self.bias
'''}, "Normalises in float64 whatever x's dtype and converts back before the scale and shift.")

# ----------------------------------------------------------------------------------------------------------------
# Slow
# ----------------------------------------------------------------------------------------------------------------

entry("block_loop_over_batch", "slow", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def _one(self, x, mask):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.attn(x, mask=mask))
        return self.norm2(x + self.ff(x))

    def forward(self, x, mask=None):
        outs = []
        for b in range(x.shape[0]):                        # one sequence at a time
            m = mask
            if mask is not None and mask.dim() == 4 and mask.shape[0] > 1:
                m = mask[b:b + 1]
            outs.append(self._one(x[b:b + 1], m))
        return torch.cat(outs, dim=0)
'''}, "Runs the block one sequence of the batch at a time in a Python loop: right, but with many short sequences "
   "far over 'at most 3x the reference solution's time (the whole batch at once)'.",
      shown_by="""
torch.manual_seed(12)
mine, ref = TransformerBlock(32, 4, 64), spec.TransformerBlock(32, 4, 64)
H.load_block(mine, ref)
x = torch.randn(32, 8, 32)
r = H.time_ratio(mine, ref, x)
shown = r > 3
detail = f"B = 32, L = 8: {r:.1f}x the spec's CPU time"
""")

entry("block_ff_loop_over_positions", "slow", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def position_wise(self, h):
        """The feed-forward network at every position on its own, as the text says."""
        return torch.stack([self.ff(h[:, i]) for i in range(h.shape[1])], dim=1)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            return x + self.position_wise(self.norm2(x))
        x = self.norm1(x + self.attn(x, mask=mask))
        return self.norm2(x + self.position_wise(x))
'''}, "Applies the feed-forward sublayer position by position in a Python loop ('at every position on its own' taken "
   "literally): several times the reference's time at 128 positions.",
      shown_by="""
torch.manual_seed(13)
mine, ref = TransformerBlock(16, 2, 32), spec.TransformerBlock(16, 2, 32)
H.load_block(mine, ref)
x = torch.randn(2, 128, 16)
r = H.time_ratio(mine, ref, x)
shown = r > 3
detail = f"B = 2, L = 128, d_model = 16: {r:.1f}x the spec's CPU time"
""")

entry("block_attention_one_query_at_a_time", "slow", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def attend(self, h, mask):
        rows = []
        for i in range(h.shape[1]):                        # query i reads every key
            m = None if mask is None else mask[..., i:i + 1, :]
            rows.append(self.attn(h[:, i:i + 1], h, h, mask=m))
        return torch.cat(rows, dim=1)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attend(self.norm1(x), mask)
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.attend(x, mask))
        return self.norm2(x + self.ff(x))
'''}, "Calls the attention once per query position, each query against all the keys with its row of the mask: "
   "right, but a Python loop over positions, far over 3x the reference's time.",
      shown_by="""
torch.manual_seed(14)
mine, ref = TransformerBlock(64, 4, 128), spec.TransformerBlock(64, 4, 128)
H.load_block(mine, ref)
x = torch.randn(2, 64, 64)
r = H.time_ratio(mine, ref, x)
shown = r > 3
detail = f"B = 2, L = 64, d_model = 64: {r:.1f}x the spec's CPU time"
""")
