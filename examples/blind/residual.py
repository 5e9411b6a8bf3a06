"""Blind corpus for exercises/residual: LayerNorm, FeedForward, TransformerBlock (the cell MultiHeadAttention holds the
learner's pasted scaled_dot_product_attention and MultiHeadAttention; it is the spec's unless an entry replaces it).

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


# ======================================================================================================================
# LayerNorm
# ======================================================================================================================

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
        return (x - mean) / torch.sqrt(var + 1e-5) * self.weight + self.bias
'''}, why="Uses the constant 1e-5 inside the square root and ignores the eps argument.",
    shown_by='''
x = 1e-2 * torch.randn(3, 8, dtype=torch.float64)
mine, ref = LayerNorm(8, eps=1e-2).double(), spec.LayerNorm(8, eps=1e-2).double()
with torch.no_grad():
    diff = H.maxdiff(mine(x), ref(x))
shown = diff > 1e-3
detail = f"eps = 1e-2: max diff {diff:.3f}"
''')

entry("ln_statistics_detached", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        # the statistics are constants of the normalisation, not something to learn through
        mean = x.mean(-1, keepdim=True).detach()
        var = x.var(-1, keepdim=True, unbiased=False).detach()
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
'''}, why="Detaches the mean and variance, so the forward values are right but the gradient with respect to x "
       "misses the terms through the statistics.",
    shown_by='''
x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
r = torch.randn(2, 3, 8, dtype=torch.float64)
mine, ref = LayerNorm(8).double(), spec.LayerNorm(8).double()
g_mine = torch.autograd.grad((mine(x) * r).sum(), x)[0]
g_ref = torch.autograd.grad((ref(x) * r).sum(), x)[0]
with torch.no_grad():
    same_forward = H.maxdiff(mine(x), ref(x)) < 1e-12
shown = same_forward and H.maxdiff(g_mine, g_ref) > 1e-3
detail = f"forward equal; d/dx differs by {H.maxdiff(g_mine, g_ref):.2f}"
''')

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
        var = (x * x).mean(-1, keepdim=True) - mean * mean     # E[x^2] - E[x]^2, one pass over x
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
'''}, why="Computes the variance as E[x^2] - E[x]^2, which cancels catastrophically in float32 for nearly constant "
       "rows far from 0 (e.g. 10 + 0.01 * noise): the variance is garbage, even negative (NaN).",
    shown_by='''
torch.manual_seed(0)
x = 10.0 + 1e-2 * torch.randn(4, 64)
mine, ref = LayerNorm(64), spec.LayerNorm(64)
with torch.no_grad():
    out, want = mine(x), ref(x)
exact = spec.LayerNorm(64).double()(x.double()).float()
shown = H.maxdiff(out, exact) > 0.05 and H.maxdiff(want, exact) < 0.05
detail = f"rows 10 + 0.01 noise, float32: max error {H.maxdiff(out, exact):.2f} (spec {H.maxdiff(want, exact):.1e})"
''')

entry("ln_subtracts_mean_in_place", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        x -= x.mean(dim=-1, keepdim=True)              # centre
        var = (x ** 2).mean(dim=-1, keepdim=True)
        return x / torch.sqrt(var + self.eps) * self.weight + self.bias
'''}, why="Centres x with the in-place `x -= mean`, so the caller's tensor (the residual stream, in a block) is "
       "changed; a leaf x that requires grad raises.",
    shown_by='''
x = torch.randn(2, 3, 8) * 5 + 3
before = x.clone()
with torch.no_grad():
    out = LayerNorm(8)(x)
    want = spec.LayerNorm(8)(before)
shown = not torch.equal(x, before) and H.maxdiff(out, want) < 1e-5
detail = f"x changed by up to {H.maxdiff(x, before):.2f}"
''')

entry("ln_parameters_shaped_for_broadcast", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(1, 1, d_model))     # (1, 1, d_model): broadcasts over (B, L)
        self.bias = nn.Parameter(torch.zeros(1, 1, d_model))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        sigma2 = ((x - mu) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mu) / torch.sqrt(sigma2 + self.eps) + self.bias
'''}, why="weight and bias have shape (1, 1, d_model) instead of (d_model,): an input with no or one leading "
       "dimension comes back with extra dimensions, and nn.LayerNorm's weights do not load.",
    shown_by='''
ln = LayerNorm(4)
x = torch.randn(3, 4)
with torch.no_grad():
    out = ln(x)
load_error = H.raises(ln.load_state_dict, spec.LayerNorm(4).state_dict())
shown = tuple(ln.weight.shape) != (4,) and tuple(out.shape) != (3, 4) and load_error is not None
detail = f"weight {tuple(ln.weight.shape)}; input (3, 4) -> output {tuple(out.shape)}; load_state_dict: {load_error}"
''')

entry("ln_unbiased_variance", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
'''}, why="Plain x.var divides by d_model - 1 (the unbiased variance) where the text asks for d_model (the classic "
       "slip the visible check names); with d_model = 1 it even gives NaN.",
    shown_by='''
x = torch.randn(3, 97, dtype=torch.float64)
with torch.no_grad():
    diff = H.maxdiff(LayerNorm(97).double()(x), spec.LayerNorm(97).double()(x))
    one = LayerNorm(1)(torch.randn(4, 1))
shown = diff > 1e-4 and bool(torch.isnan(one).any())
detail = f"d_model = 97: max diff {diff:.1e}; d_model = 1: {one.flatten().tolist()}"
''')

entry("ln_var_mean_rsqrt", "correct", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias
'''}, why="torch.var_mean with correction=0 and torch.rsqrt(var + eps).")

entry("ln_addcmul_with_timeit", "correct", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.register_parameter("weight", nn.Parameter(torch.ones(d_model)))
        self.register_parameter("bias", nn.Parameter(torch.zeros(d_model)))

    def forward(self, x):
        centred = x - x.sum(-1, keepdim=True) / self.d_model
        std = centred.pow(2).sum(-1, keepdim=True).div(self.d_model).add(self.eps).sqrt()
        return torch.addcmul(self.bias, centred / std, self.weight)

    def extra_repr(self):
        return f"{self.d_model}, eps={self.eps}"

%timeit LayerNorm(512)(torch.randn(64, 512))
'''}, why="Registers the parameters with register_parameter, computes the statistics from sums divided by d_model, "
          "finishes with torch.addcmul, and leaves a %timeit line in the cell.")


# ======================================================================================================================
# FeedForward
# ======================================================================================================================

entry("ff_gelu", "mistake", {"FeedForward": '''
import torch.nn.functional as F


class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(F.gelu(self.linear1(x)))          # as in GPT-2
'''}, why="GELU instead of the ReLU the text asks for; the visible check (every hidden unit at -100) cannot tell them "
       "apart since GELU(-100) = 0 too.",
    shown_by='''
mine, ref = FeedForward(8, 32), spec.FeedForward(8, 32)
H.load_ff(ref, mine)
x = torch.randn(2, 3, 8)
with torch.no_grad():
    diff = H.maxdiff(mine(x), ref(x))
shown = diff > 1e-3
detail = f"max diff {diff:.3f}"
''')

entry("ff_hidden_width_4_d_model", "mistake", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        hidden = 4 * d_model                                  # d_ff = 4 d_model, as usual
        self.linear1 = nn.Linear(d_model, hidden)
        self.linear2 = nn.Linear(hidden, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))
'''}, why="Builds the hidden layer with 4 * d_model units and ignores d_ff: right only when d_ff = 4 d_model, as in "
       "the visible check (8, 32).",
    shown_by='''
ff = FeedForward(24, 97)
shown = tuple(ff.linear1.weight.shape) != (97, 24) and tuple(spec.FeedForward(24, 97).linear1.weight.shape) == (97, 24)
detail = f"FeedForward(24, 97).linear1.weight: {tuple(ff.linear1.weight.shape)}"
''')

entry("ff_sequential_inplace_relu", "correct", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.linear1, nn.ReLU(inplace=True), self.linear2)   # the same two layers

    def forward(self, x):
        return self.net(x)
'''}, why="linear1 and linear2 also registered inside an nn.Sequential with an in-place ReLU (it only overwrites "
          "linear1's fresh output, never x).")

entry("ff_manual_matmul_clamp", "correct", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = (x @ self.linear1.weight.T + self.linear1.bias).clamp_min(0.0)
        return torch.matmul(h, self.linear2.weight.t()) + self.linear2.bias
'''}, why="Applies the two layers' weights by hand with matmuls and uses clamp_min(0) for the ReLU.")


# ======================================================================================================================
# TransformerBlock
# ======================================================================================================================

_BLOCK_INIT = '''
    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
'''


def block(forward):
    return ('''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""
''' + _BLOCK_INIT + forward)


_SHOW_BLOCK = '''
torch.manual_seed(0)
mine = TransformerBlock(16, 4, 32, norm_first={nf})
ref = spec.TransformerBlock(16, 4, 32, norm_first={nf})
H.randomize(ref, 0.4)
H.load_block(mine, ref)
x = torch.randn(2, 5, 16)
mask = {mask}
with torch.no_grad():
    diff = H.maxdiff(mine(x, mask), ref(x, mask))
shown = diff > 1e-3
detail = f"norm_first={nf}, drawn weights (norms' too): max diff {{diff:.3f}}"
'''

entry("block_ff_reads_first_norm", "mistake", {"TransformerBlock": block('''
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.attn(h, mask=mask)
            x = x + self.ff(self.norm2(h))               # should normalise the updated stream
        else:
            x = self.norm1(x + self.attn(x, mask=mask))
            x = self.norm2(x + self.ff(x))
        return x
''')}, why="In Pre-LN the feed-forward reads norm2 of the stream from before the attention update (a stale h), not "
          "of the updated stream.",
    shown_by=_SHOW_BLOCK.format(nf=True, mask="None"))

entry("block_norm1_used_twice", "mistake", {"TransformerBlock": block('''
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self.ff(self.norm1(x))
        else:
            x = self.norm1(x + self.attn(x, mask=mask))
            x = self.norm2(x + self.ff(x))
        return x
''')}, why="Pre-LN normalises the feed-forward's input with norm1 instead of norm2 (a copy-paste slip): identical at "
          "initialisation, wrong as soon as the two norms' weights differ.",
    shown_by=_SHOW_BLOCK.format(nf=True, mask="torch.ones(5, 5, dtype=torch.bool).tril()"))

entry("block_postln_missing_norm2", "mistake", {"TransformerBlock": block('''
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x, mask=mask))
            x = x + self.ff(x)                         # the stream is already normalised
        return x
''')}, why="Post-LN leaves out the second norm (x = norm2(x + ff(x))); the visible Post-LN check zeroes the "
          "sublayers, where this cannot show.",
    shown_by=_SHOW_BLOCK.format(nf=False, mask="None"))

entry("block_preln_key_value_unnormalised", "mistake", {"TransformerBlock": block('''
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.attn(h, x, x, mask=mask)        # queries normalised, keys and values from the stream
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x, mask=mask))
            x = self.norm2(x + self.ff(x))
        return x
''')}, why="Pre-LN normalises only the queries: keys and values come from the un-normalised stream.",
    shown_by=_SHOW_BLOCK.format(nf=True, mask="None"))

entry("block_postln_mask_dropped", "mistake", {"TransformerBlock": block('''
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x))
            x = self.norm2(x + self.ff(x))
        return x
''')}, why="The Post-LN branch calls the attention without the mask; the visible causal check only runs Pre-LN.",
    shown_by=_SHOW_BLOCK.format(nf=False, mask="torch.ones(5, 5, dtype=torch.bool).tril()"))

entry("block_postln_norms_before_sublayers", "mistake", {"TransformerBlock": block('''
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x)
            x = x + self.attn(x, mask=mask)
            x = self.norm2(x)
            x = x + self.ff(x)
        return x
''')}, why="Post-LN normalises the stream before each sublayer and adds the sublayer after, so the block's output is "
          "not normalised; with zeroed sublayers (the visible check) it looks normalised.",
    shown_by=_SHOW_BLOCK.format(nf=False, mask="None"))

entry("block_dropout_like_torch_default", "mistake", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True, dropout=0.1):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)            # as nn.TransformerEncoderLayer, whose default is 0.1
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.dropout1(self.attn(self.norm1(x), mask=mask))
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout1(self.attn(x, mask=mask)))
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return x
'''}, why="Adds dropout (p = 0.1, nn.TransformerEncoderLayer's default) on both sublayers, which the text does not ask "
       "for: in training mode, the default after construction, the block is random and differs from the reference.",
    shown_by='''
torch.manual_seed(0)
mine, ref = TransformerBlock(16, 4, 32), spec.TransformerBlock(16, 4, 32)
H.load_block(mine, ref)
x = torch.randn(2, 5, 16)
with torch.no_grad():
    train_diff = H.maxdiff(mine(x), ref(x))
    mine.eval()
    eval_diff = H.maxdiff(mine(x), ref(x))
shown = mine.training is False and train_diff > 1e-3 and eval_diff < 1e-5
detail = f"training mode: max diff {train_diff:.3f}; eval mode: {eval_diff:.1e}"
''')

entry("block_ff_loop_over_positions", "slow", {"TransformerBlock": block('''
    def _ff_each_position(self, h):
        # the feed-forward network is applied at every position on its own
        return torch.stack([self.ff(h[:, t]) for t in range(h.shape[1])], dim=1)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self._ff_each_position(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x, mask=mask))
            x = self.norm2(x + self._ff_each_position(x))
        return x
''')}, why="Right values, but the feed-forward runs in a Python loop over positions: the operation count grows with "
          "L and it takes several times the reference's time.",
    shown_by='''
torch.manual_seed(0)
mine, ref = TransformerBlock(16, 2, 32), spec.TransformerBlock(16, 2, 32)
H.load_block(mine, ref)
few, many = H.op_count(mine, torch.randn(2, 16, 16)), H.op_count(mine, torch.randn(2, 64, 16))
ratio = H.time_ratio(mine, ref, torch.randn(1, 128, 16))
shown = many >= 2 * few and ratio > 3
detail = f"{few} ops for 16 positions, {many} for 64; {ratio:.1f}x the spec's CPU time at 128 positions"
''')

entry("block_helper_methods", "correct", {"TransformerBlock": block('''
    def _attention(self, h, mask):
        return self.attn(h, h, h, mask=mask)

    def forward(self, x, mask=None):
        if not self.norm_first:
            x = self.norm1(x + self._attention(x, mask))
            return self.norm2(x + self.ff(x))
        x = torch.add(x, self._attention(self.norm1(x), mask))
        return torch.add(x, self.ff(self.norm2(x)))
''')}, why="A helper method passes query, key and value explicitly, Post-LN returns early, and Pre-LN adds with "
          "torch.add.")

entry("block_loop_over_sublayers", "correct", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm1, self.attn = LayerNorm(d_model), MultiHeadAttention(d_model, n_heads)
        self.norm2, self.ff = LayerNorm(d_model), FeedForward(d_model, d_ff)
        self.norm_first = bool(norm_first)

    def forward(self, x, mask=None):
        steps = [(self.norm1, lambda h: self.attn(h, mask=mask)), (self.norm2, self.ff)]
        for norm, sublayer in steps:
            x = x + sublayer(norm(x)) if self.norm_first else norm(x + sublayer(x))
        return x
'''}, why="Declares the submodules in another order and runs both residual steps as one loop over (norm, sublayer) "
          "pairs, Pre-LN or Post-LN by a conditional expression.")


# ======================================================================================================================
# the pasted attention (ungraded here, but the block's "with your own parts" test uses it)
# ======================================================================================================================

entry("pasted_mha_heads_cut_from_positions", "mistake", {"MultiHeadAttention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ v, weights


class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

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
        q = self.q_proj(query).view(B, self.n_heads, Lq, self.d_head)        # an early draft, pasted by mistake
        k = self.k_proj(key).view(B, self.n_heads, key.shape[1], self.d_head)
        v = self.v_proj(value).view(B, self.n_heads, value.shape[1], self.d_head)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.reshape(B, Lq, D))
'''}, why="The pasted MultiHeadAttention views each projection directly as (B, n_heads, L, d_head), cutting the "
       "positions rather than the features into heads, so the block built from the learner's own parts no longer "
       "equals nn.TransformerEncoderLayer.",
    shown_by='''
torch.manual_seed(0)
mine = TransformerBlock(16, 4, 32)
ref = spec.TransformerBlock(16, 4, 32)
H.randomize(ref, 0.4)
H.load_block(mine, ref)
x = torch.randn(2, 8, 16)
with torch.no_grad():
    diff = H.maxdiff(mine(x), ref(x))
shown = diff > 1e-3
detail = f"block with the pasted attention: max diff {diff:.3f}"
''')
