"""Blind corpus (round 2) for exercises/residual: LayerNorm, FeedForward, TransformerBlock (and the pasted attention).

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


# A block with drawn weights (the norms' too) from the spec, loaded into the entry's block, for the shown_by cells.
BLOCK_PAIR = '''
def block_pair(d_model=16, n_heads=4, d_ff=32, norm_first=True):
    torch.manual_seed(1)
    theirs = H.randomize(spec.TransformerBlock(d_model, n_heads, d_ff, norm_first), 0.4)
    mine = TransformerBlock(d_model, n_heads, d_ff, norm_first=norm_first)
    H.load_block(mine, theirs)
    return mine, theirs
'''


# ----------------------------------------------------------------------------------------------------------------------
# LayerNorm
# ----------------------------------------------------------------------------------------------------------------------

entry("ln_in_place_divide_breaks_backward", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        centred = x - x.mean(dim=-1, keepdim=True)              # a new tensor: x itself is left alone
        var = centred.pow(2).mean(dim=-1, keepdim=True)
        normed = centred.div_(torch.sqrt(var + self.eps))       # in place, to save memory
        return normed * self.weight + self.bias
'''}, why="The in-place div_ overwrites the centred values that pow saved for its backward, so every backward pass "
        "raises: 'Gradients reach every floating argument and every parameter' (x, weight and bias).",
    shown_by='''
x = torch.randn(2, 3, 8, requires_grad=True)
ln = LayerNorm(8)
forward_ok = H.maxdiff(ln(x), spec.LayerNorm(8)(x)) < 1e-5
raised = H.raises(lambda: ln(x).sum().backward())
shown = forward_ok and raised is not None
detail = f"forward agrees; backward raises {raised}"
''')

entry("ln_upcasts_to_float32", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        dtype = x.dtype
        x = x.float()                                    # statistics in float32, as mixed-precision code does
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        out = (x - mean) * torch.rsqrt(var + self.eps)
        return (out * self.weight.float() + self.bias.float()).to(dtype)
'''}, why="Every input is normalised in float32 and cast back, so after .to(torch.float64) the module answers with "
        "float32's error: 'A module ... moves every tensor it uses with `.to(torch.float64)`' (and the graded float64 "
        "comparison with torch.nn.LayerNorm).",
    shown_by='''
torch.manual_seed(0)
theirs = H.randomize(spec.LayerNorm(97), 1.0).double()
mine = LayerNorm(97)
H.load_ln(mine, theirs)
mine = mine.to(torch.float64)
x = torch.randn(4, 5, 97, dtype=torch.float64) * 3 + 1
out = mine(x)
err = H.maxdiff(out, theirs(x))
shown = err > 1e-9
detail = f"float64 module and input: answered in {out.dtype}, max diff {err:.1e}"
''')

entry("ln_affine_through_data", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        x_hat = (x - mean) / torch.sqrt(var + self.eps)
        return x_hat * self.weight.data + self.bias.data         # the values of the parameters
'''}, why="weight.data and bias.data are the parameters' values cut from the graph, so weight and bias never get a "
        "gradient and never learn: 'no `.detach()`, `.data` or `torch.no_grad()` on the way from an input to an "
        "output'.",
    shown_by='''
ln = LayerNorm(8)
x = torch.randn(2, 3, 8, requires_grad=True)
ln(x).pow(2).sum().backward()
shown = ln.weight.grad is None and ln.bias.grad is None
detail = f"weight.grad = {ln.weight.grad}, bias.grad = {ln.bias.grad}"
''')

entry("ln_shift_before_scale", "mistake", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return ((x - mean) / torch.sqrt(var + self.eps) + self.bias) * self.weight
'''}, why="The bias is added before the scale, (x_hat + bias) * weight, which only agrees while weight is ones or bias "
        "zeros (the initial values the visible checks use): the text says 'x_hat * weight + bias', and the tests draw "
        "random weights.",
    shown_by='''
torch.manual_seed(0)
theirs = H.randomize(spec.LayerNorm(8), 1.0)
mine = LayerNorm(8)
H.load_ln(mine, theirs)
x = torch.randn(2, 3, 8)
err = H.maxdiff(mine(x), theirs(x))
shown = err > 1e-3
detail = f"drawn weight and bias: max diff {err:.2f}"
''')

entry("ln_einsum_variance_helper", "correct", {"LayerNorm": '''
def row_stats(x):
    """Each row (the last dimension) centred, and its biased variance (keeping the dimension)."""
    d = x.shape[-1]
    centred = x - x.sum(dim=-1, keepdim=True) / d
    var = torch.einsum("...i,...i->...", centred, centred).unsqueeze(-1) / d
    return centred, var


class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        centred, var = row_stats(x)
        return centred * torch.rsqrt(var + self.eps) * self.weight + self.bias


print(LayerNorm(4)(torch.tensor([0.0, 1e-3, -1e-3, 0.0])))
'''}, why="A module-level helper: the mean as a sum over d, the biased variance as an einsum of the centred row "
        "with itself, rsqrt(var + eps), and a print at the end of the cell.")

entry("ln_register_parameter_correction0", "correct", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, float(eps)
        self.register_parameter("weight", nn.Parameter(torch.ones(d_model)))
        self.register_parameter("bias", nn.Parameter(torch.zeros(d_model)))

    def extra_repr(self):
        return f"{self.d_model}, eps={self.eps}"

    def forward(self, x):
        var = torch.var(x, dim=-1, correction=0, keepdim=True)
        mean = torch.mean(x, dim=-1, keepdim=True)
        return torch.div(x - mean, torch.sqrt(var + self.eps)) * self.weight + self.bias
'''}, why="register_parameter, torch.var(correction=0) for the biased variance, and an extra_repr: the same module.")

entry("ln_loop_over_rows", "slow", {"LayerNorm": '''
class LayerNorm(nn.Module):
    """forward(x) = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1])
        out = []
        for row in rows:                               # one vector at a time, as the formula reads
            mu = row.mean()
            var = ((row - mu) ** 2).mean()
            out.append((row - mu) / torch.sqrt(var + self.eps))
        return torch.stack(out).reshape(x.shape) * self.weight + self.bias
'''}, why="Correct, but a Python loop over every position's vector: thousands of small torch operations where a "
        "reduction over dim=-1 does it in a handful (Hint 1: reduce over the last dimension).",
    shown_by='''
ln, ref = LayerNorm(32), spec.LayerNorm(32)
x = torch.randn(16, 128, 32)
ratio = H.time_ratio(ln, ref, x, repeats=3)
shown = ratio > 20
detail = f"(16, 128, 32): {ratio:.0f}x the spec's CPU time"
''')


# ----------------------------------------------------------------------------------------------------------------------
# FeedForward
# ----------------------------------------------------------------------------------------------------------------------

entry("ff_view_flattens_positions", "mistake", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        shape = x.shape
        h = torch.relu(self.linear1(x.view(-1, shape[-1])))     # (positions, d_model): every position on its own
        return self.linear2(h).view(*shape[:-1], -1)
'''}, why="x.view(-1, d_model) fails on a transposed x: 'A tensor argument may be a view that is not contiguous in "
        "memory, a slice or a transposed tensor (... `FeedForward` ...): where you reshape an argument, use "
        "`reshape`, not `view`.'",
    shown_by='''
ff = FeedForward(8, 32)
x = torch.randn(2, 8, 3).transpose(1, 2)              # (2, 3, 8), not contiguous
raised = H.raises(ff, x)
shown = raised is not None
detail = f"FeedForward on a transposed (2, 3, 8) raises {raised}"
''')

entry("ff_einsum_three_dims", "mistake", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = torch.einsum("bld,fd->blf", x, self.linear1.weight) + self.linear1.bias
        h = torch.relu(h)
        return torch.einsum("blf,df->bld", h, self.linear2.weight) + self.linear2.bias
'''}, why="The einsum names exactly three dimensions (batch, length, d), so a vector, a (L, d) input or a 4-D one "
        "fails: '`forward(x)` ... any number of leading dimensions' is graded ('each position on its own').",
    shown_by='''
ff = FeedForward(8, 32)
raised = [H.raises(ff, torch.randn(*shape)) for shape in ((8,), (3, 8), (1, 2, 3, 8))]
shown = all(r is not None for r in raised)
detail = f"inputs (8,), (3, 8), (1, 2, 3, 8) raise {raised}"
''')

entry("ff_relu_by_bool_multiply", "correct", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = self.linear1(x)
        return self.linear2(h * (h > 0))          # ReLU: keep the positive units
'''}, why="ReLU written as h * (h > 0): the same values and the same gradient (0 where h <= 0).")

entry("ff_sequential_sharing_named_layers", "correct", {"FeedForward": '''
class FeedForward(nn.Module):
    """forward(x) = linear2(relu(linear1(x))), at every position on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.linear1, nn.ReLU(), self.linear2)    # the same two layers, in order

    def forward(self, x):
        return self.net(x)
'''}, why="An nn.Sequential built from the very layers named linear1 and linear2 (the text allows other names for "
        "the same layers): loading linear1 / linear2 loads the Sequential.")


# ----------------------------------------------------------------------------------------------------------------------
# TransformerBlock
# ----------------------------------------------------------------------------------------------------------------------

entry("block_postln_ff_reads_original_x", "mistake", {"TransformerBlock": '''
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
            return x
        h = self.norm1(x + self.attn(x, mask=mask))
        return self.norm2(h + self.ff(x))
'''}, why="In Post-LN the feed-forward reads the block's input x instead of the stream after attention: 'x <- "
        "norm1(x + attn(x)), x <- norm2(x + ff(x))' updates x before the second line.",
    shown_by=BLOCK_PAIR + '''
mine, theirs = block_pair(norm_first=False)
x = torch.randn(2, 5, 16)
err = H.maxdiff(mine(x), theirs(x))
shown = err > 1e-3
detail = f"Post-LN with drawn weights: max diff {err:.2f}"
''')

entry("block_preln_parallel_sublayers", "mistake", {"TransformerBlock": '''
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
            return x + self.attn(self.norm1(x), mask=mask) + self.ff(self.norm2(x))
        x = self.norm1(x + self.attn(x, mask=mask))
        return self.norm2(x + self.ff(x))
'''}, why="Pre-LN written in one line runs the two sublayers side by side (GPT-J's parallel block): the feed-forward "
        "reads norm2 of the block's input, not of the stream after attention ('x <- x + attn(norm1(x)), then x <- x + "
        "ff(norm2(x))').",
    shown_by=BLOCK_PAIR + '''
mine, theirs = block_pair(norm_first=True)
x = torch.randn(2, 5, 16)
err = H.maxdiff(mine(x), theirs(x))
shown = err > 1e-3
detail = f"Pre-LN with drawn weights: max diff {err:.2f}"
''')

entry("block_postln_residual_skips_norm1", "mistake", {"TransformerBlock": '''
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
            return x + self.ff(self.norm2(x))
        stream = x + self.attn(x, mask=mask)                    # the residual stream
        return self.norm2(stream + self.ff(self.norm1(stream)))
'''}, why="In Post-LN the un-normalised sum is carried on as the stream and norm1 only feeds the feed-forward: the "
        "text's first line replaces x by norm1(x + attn(x)), which is what the second residual adds to.",
    shown_by=BLOCK_PAIR + '''
mine, theirs = block_pair(norm_first=False)
x = torch.randn(2, 5, 16)
err = H.maxdiff(mine(x), theirs(x))
shown = err > 1e-3
detail = f"Post-LN with drawn weights: max diff {err:.2f}"
''')

entry("block_causal_when_no_mask", "mistake", {"TransformerBlock": '''
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
        if mask is None:                              # a decoder block: never look at later positions
            L = x.shape[1]
            mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x, mask=mask))
            x = self.norm2(x + self.ff(x))
        return x
'''}, why="Without a mask the block makes itself causal, so mask=None no longer means 'attend everywhere': the "
        "block 'passes `mask` (True = may attend) to the attention' and equals nn.TransformerEncoderLayer unmasked.",
    shown_by=BLOCK_PAIR + '''
mine, theirs = block_pair(norm_first=True)
x = torch.randn(2, 5, 16)
err = H.maxdiff(mine(x), theirs(x))
shown = err > 1e-3
detail = f"no mask: max diff {err:.2f}"
''')

entry("block_forward_arg_named_src_mask", "mistake", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def forward(self, x, src_mask=None):              # the name nn.TransformerEncoderLayer uses
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=src_mask)
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self.attn(x, mask=src_mask))
            x = self.norm2(x + self.ff(x))
        return x
'''}, why="The mask argument is called src_mask, so block(x, mask=m) raises TypeError: '`forward(x, mask=None)`', "
        "and the tests pass masks 'by position or keyword'.",
    shown_by=BLOCK_PAIR + '''
mine, theirs = block_pair()
x = torch.randn(2, 5, 16)
raised = H.raises(mine, x, mask=torch.ones(5, 5, dtype=torch.bool).tril())
shown = raised == "TypeError"
detail = f"block(x, mask=causal) raises {raised}"
''')

entry("pasted_mha_merge_without_transpose", "mistake", {"MultiHeadAttention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v with mask (True = may attend); returns (out, weights)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)          # a row with no allowed key
    return weights @ v, weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, _ = query.shape
        Lk = key.shape[1]
        q = self.q_proj(query).reshape(B, Lq, self.n_heads, self.d_head).transpose(1, 2)
        k = self.k_proj(key).reshape(B, Lk, self.n_heads, self.d_head).transpose(1, 2)
        v = self.v_proj(value).reshape(B, Lk, self.n_heads, self.d_head).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v, mask)          # (B, H, Lq, d_head)
        return self.out_proj(out.reshape(B, Lq, self.d_model))        # heads merged without moving them back
'''}, why="The pasted attention merges (B, H, L, d_head) straight into (B, L, d_model) without transposing the heads "
        "back, mixing positions (right only for one head or one position); the block 'with your own "
        "MultiHeadAttention ... still equals nn.TransformerEncoderLayer' is graded.",
    shown_by=BLOCK_PAIR + '''
mine, theirs = block_pair(norm_first=True)
x = torch.randn(2, 5, 16)
err = H.maxdiff(mine(x), theirs(x))
shown = err > 1e-3
detail = f"4 heads, 5 positions: max diff {err:.2f}"
''')

entry("block_norm_placement_by_functions", "correct", {"TransformerBlock": '''
def unchanged(t):
    return t


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
        # Pre-LN normalises what a sublayer reads; Post-LN normalises the sum: one pair of lines serves both
        before1, after1 = (self.norm1, unchanged) if self.norm_first else (unchanged, self.norm1)
        before2, after2 = (self.norm2, unchanged) if self.norm_first else (unchanged, self.norm2)
        x = after1(x + self.attn(before1(x), mask=mask))
        x = after2(x + self.ff(before2(x)))
        return x
'''}, why="Each norm's place chosen in forward (before the sublayer or after the sum, the other side a plain "
        "identity function): both arrangements from one pair of lines.")

entry("block_attn_called_with_explicit_kv", "correct", {"TransformerBlock": '''
class TransformerBlock(nn.Module):
    """forward(x, mask=None): attention, then feed-forward, each added to the residual stream x."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.norm_first = bool(norm_first)

    def _self_attention(self, h, mask):
        return self.attn(h, h, h, mask)              # query, key and value all the same tensor; mask by position

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            y = torch.add(x, self._self_attention(h, mask))
            return torch.add(y, self.ff(self.norm2(y)))
        y = self.norm1(torch.add(x, self._self_attention(x, mask)))
        return self.norm2(torch.add(y, self.ff(y)))
'''}, why="Self-attention called with query, key and value given explicitly and the mask by position, torch.add "
        "for the residuals, a helper method: the same block.")
