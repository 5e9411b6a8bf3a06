"""Blind corpus, residual: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


LN_HEAD = '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
'''
FF_HEAD = '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
'''
BLOCK_HEAD = '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
'''
BLOCK_INIT = '''        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
'''

# ----------------------------------------------------------------------------------------------------------- LayerNorm

entry("ln_subtracts_mean_in_place", "mistake", {"LayerNorm": LN_HEAD + '''
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        x -= x.mean(dim=-1, keepdim=True)                  # centre
        var = (x ** 2).mean(dim=-1, keepdim=True)
        return x / torch.sqrt(var + self.eps) * self.weight + self.bias
'''}, "Centres with `x -= mean`, which writes into the caller's tensor (and raises on a leaf that requires grad); "
      "breaks 'does not modify x' / 'do not modify your inputs in place' (the visible checks never look at x).",
      shown_by='''
ln = LayerNorm(8)
x = torch.randn(2, 3, 8) * 5 + 3
saved = x.clone()
y = ln(x)
err = H.raises(ln, torch.randn(2, 8, requires_grad=True))
shown = not torch.equal(x, saved)
detail = f"x is centred in place by the call; on a leaf that requires grad: {err}"
''')

entry("ln_var_from_mean_of_squares", "mistake", {"LayerNorm": LN_HEAD + '''
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean * mean          # E[x^2] - E[x]^2, one pass
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
'''}, "The one-pass variance E[x^2] - mean^2 cancels catastrophically on nearly constant rows far from 0 (float32: "
      "1e-4 of noise on a variance of 1e-6, even negative); breaks 'rows that are nearly constant' / 'any shapes, "
      "scales' and 'eps ... matters when a row is nearly constant'.",
      shown_by='''
g = torch.Generator().manual_seed(0)
x64 = 50.0 + 1e-3 * torch.randn(64, 16, generator=g, dtype=torch.float64)
truth = spec.LayerNorm(16).double()(x64)
x = x64.float()
mine, ref = LayerNorm(16)(x), spec.LayerNorm(16)(x)
e_mine, e_ref = H.maxdiff(mine, truth), H.maxdiff(ref, truth)
shown = e_mine > 10 * e_ref
detail = f"float32 rows 50 + 1e-3 noise: error {e_mine:.3g} (two-pass: {e_ref:.3g})"
''')

entry("ln_stats_in_float32", "mistake", {"LayerNorm": LN_HEAD + '''
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        xf = x.float()                                       # statistics in float32, as mixed precision does
        mean = xf.mean(-1, keepdim=True)
        var = (xf - mean).pow(2).mean(-1, keepdim=True)
        y = (xf - mean) / torch.sqrt(var + self.eps)
        return (y.to(x.dtype) * self.weight + self.bias)
'''}, "Always computes the statistics in float32 (a mixed-precision habit) and casts back; breaks 'computes in float64 "
      "once moved there'.",
      shown_by='''
g = torch.Generator().manual_seed(1)
mine, ref = LayerNorm(33).double(), spec.LayerNorm(33).double()
H.randomize(ref, 1.0, g)
H.load_ln(mine, ref)
x = torch.randn(4, 33, generator=g, dtype=torch.float64)
err = H.maxdiff(mine(x), ref(x))
shown = err > 1e-9
detail = f"after .double(): off by {err:.1e} from float64"
''')

entry("ln_eps_argument_ignored", "mistake", {"LayerNorm": LN_HEAD + '''
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x, eps=1e-5):
        mu = x.mean(-1, keepdim=True)
        sigma2 = x.var(-1, unbiased=False, keepdim=True)
        return (x - mu) / torch.sqrt(sigma2 + eps) * self.weight + self.bias
'''}, "eps is moved to forward's default and the constructor's argument is dropped; breaks 'LayerNorm(d_model, "
      "eps=1e-5)' ('the eps argument is used').",
      shown_by='''
x = 1e-3 * torch.randn(3, 8, dtype=torch.float64)
mine, ref = LayerNorm(8, eps=0.1).double()(x), spec.LayerNorm(8, 0.1).double()(x)
shown = H.maxdiff(mine, ref) > 1e-6
detail = f"eps=0.1 on small rows: off by {H.maxdiff(mine, ref):.2f}"
''')

entry("ln_var_mean_rsqrt", "correct", {"LayerNorm": LN_HEAD + '''
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return torch.addcmul(self.bias, (x - mean) * torch.rsqrt(var + self.eps), self.weight)

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"
'''}, "torch.var_mean with correction=0 (the biased variance), rsqrt of var + eps and addcmul: the formula of the "
      "text in other calls, plus an extra_repr.")

# --------------------------------------------------------------------------------------------------------- FeedForward

entry("ff_flatten_with_view", "mistake", {"FeedForward": FF_HEAD + '''
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        shape = x.shape
        h = x.view(-1, shape[-1])                        # every position as a row of one matrix
        h = self.linear2(torch.relu(self.linear1(h)))
        return h.view(*shape[:-1], h.shape[-1])
'''}, "Flattens the positions with .view, which raises on a transposed x; breaks 'A tensor argument may be a view "
      "that is not contiguous ... use reshape, not view' (FeedForward).",
      shown_by='''
ff = FeedForward(8, 32)
x = torch.randn(2, 8, 5).transpose(1, 2)
err = H.raises(ff, x)
shown = err is not None and H.raises(ff, x.contiguous()) is None
detail = f"transposed x (2, 5, 8): {err}"
''')

entry("ff_dropout_as_in_torch", "mistake", {"FeedForward": FF_HEAD + '''
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(0.1)            # nn.TransformerEncoderLayer has one here

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))
'''}, "Copies nn.TransformerEncoderLayer's dropout between the two layers; breaks 'answers the same in train() as in "
      "eval(): no dropout'.",
      shown_by='''
torch.manual_seed(0)
ff = FeedForward(8, 32)
x = torch.randn(4, 8)
with torch.no_grad():
    a, b = ff.train()(x), ff.eval()(x)
shown = not torch.allclose(a, b)
detail = f"train() vs eval(): {H.maxdiff(a, b):.2f}"
''')

entry("ff_sequential_same_layers", "correct", {"FeedForward": FF_HEAD + '''
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.linear1, nn.ReLU(inplace=True), self.linear2)   # the same two layers

    def forward(self, x):
        return self.net(x)
'''}, "An nn.Sequential holding the very layers named linear1 and linear2 (an in-place ReLU on linear1's fresh "
      "output): 'other names for the same layers (an nn.Sequential of them, say) are fine'.")

# ---------------------------------------------------------------------------------------------------- TransformerBlock

entry("block_postln_adds_in_place", "mistake", {"TransformerBlock": BLOCK_HEAD + BLOCK_INIT + '''
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self.ff(self.norm2(x))
            return x
        x += self.attn(x, mask=mask)                   # Post-LN: add, then normalise the sum
        x = self.norm1(x)
        x = self.norm2(x + self.ff(x))
        return x
'''}, "Post-LN's first residual is `x += ...`, writing into the caller's x (the visible checks test x only with "
      "Pre-LN); breaks 'does not modify x (x = x + ..., not x += ...)'.",
      shown_by='''
block = TransformerBlock(16, 4, 32, norm_first=False)
x = torch.randn(2, 5, 16)
saved = x.clone()
with torch.no_grad():
    block(x)
shown = not torch.equal(x, saved)
detail = "norm_first=False: the caller's x holds x + attn(x) after the call"
''')

entry("block_postln_drops_mask", "mistake", {"TransformerBlock": BLOCK_HEAD + BLOCK_INIT + '''
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x))
            x = self.norm2(x + self.ff(x))
        return x
'''}, "The Post-LN branch never passes the mask on (the visible mask check builds a Pre-LN block); breaks 'passes "
      "`mask` ... to the attention' ('the mask reaches the attention (a causal mask, Pre-LN and Post-LN)').",
      shown_by='''
torch.manual_seed(0)
block = TransformerBlock(16, 4, 32, norm_first=False)
x = torch.randn(2, 5, 16)
later = x.clone()
later[:, 4] = torch.randn(16)
causal = torch.ones(5, 5, dtype=torch.bool).tril()
with torch.no_grad():
    moved = H.maxdiff(block(later, causal)[:, :4], block(x, causal)[:, :4])
shown = moved > 1e-4
detail = f"Post-LN with a causal mask: changing position 4 moves positions 0-3 by {moved:.2f}"
''')

entry("block_norm1_used_twice", "mistake", {"TransformerBlock": BLOCK_HEAD + BLOCK_INIT + '''
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self.ff(self.norm1(x))
        else:
            x = self.norm1(x + self.attn(x, mask=mask))
            x = self.norm2(x + self.ff(x))
        return x
'''}, "Pre-LN normalises the feed-forward's input with norm1 again: with the initial weights (ones, zeros) nobody can "
      "tell, with drawn norm weights it differs and norm2 gets no gradient; breaks 'x <- x + ff(norm2(x))' ('random "
      "weights (the norms' too)').",
      shown_by='''
g = torch.Generator().manual_seed(2)
mine, ref = TransformerBlock(16, 4, 32), spec.TransformerBlock(16, 4, 32)
H.randomize(ref, 0.4, g)
H.load_block(mine, ref)
x = torch.randn(2, 5, 16, generator=g)
err = H.maxdiff(mine(x), ref(x))
shown = err > 1e-3
detail = f"drawn norm weights: off by {err:.2f}"
''')

entry("block_ff_loop_over_positions", "slow", {"TransformerBlock": BLOCK_HEAD + BLOCK_INIT + '''
    def _ff_each_position(self, h):                     # "applied at every position on its own"
        return torch.stack([self.ff(h[:, t]) for t in range(h.shape[1])], dim=1)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self._ff_each_position(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x, mask=mask))
            x = self.norm2(x + self._ff_each_position(x))
        return x
'''}, "Right, but takes 'applied at every position on its own' literally and loops over positions in Python; breaks "
      "'runs about as fast as the reference solution; at most 3x'.",
      shown_by='''
torch.manual_seed(0)
mine, ref = TransformerBlock(64, 4, 128), spec.TransformerBlock(64, 4, 128)
H.load_block(mine, ref)
x = torch.randn(2, 128, 64)
ratio = H.time_ratio(mine, ref, x)
shown = ratio > 3
detail = f"{ratio:.1f}x the spec's CPU time at L = 128"
''')

entry("block_sublayer_helper", "correct", {"TransformerBlock": BLOCK_HEAD + '''
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.norm_first = bool(norm_first)

    def _residual(self, x, sublayer, norm):
        if self.norm_first:
            return x + sublayer(norm(x))              # Pre-LN: normalise what the sublayer reads
        return norm(x + sublayer(x))                  # Post-LN: normalise the sum

    def forward(self, x, mask=None):
        x = self._residual(x, lambda h: self.attn(h, h, h, mask=mask), self.norm1)
        return self._residual(x, self.ff, self.norm2)
'''}, "One helper for both arrangements and both sublayers, attention called with explicit key and value: the two "
      "pairs of equations of the text, written once.")
