"""Blind corpus, attention: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# ------------------------------------------------------------------------------------------------------------- sdpa

entry("sdpa_sqrt_of_torch_tensor", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    d_k = q.size(-1)
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = torch.matmul(q, k.transpose(-2, -1)) / torch.sqrt(torch.tensor(d_k))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    e = torch.exp(scores - row_max)
    s = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(s == 0, torch.ones_like(s), s)
    return torch.matmul(weights, v).to(dtype), weights.to(dtype)
'''}, "torch.sqrt(torch.tensor(d)) is a float32 scalar, so float64 scores are divided by a float32-rounded sqrt(d); "
      "breaks 'a float64 answer is held to float64's precision'.",
      shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 5, 24, generator=g, dtype=torch.float64) for _ in range(3))
out, w = scaled_dot_product_attention(q, k, v)
want_out, want_w = spec.scaled_dot_product_attention(q, k, v)
err = H.maxdiff(w, want_w)
shown = err > 1e-10
detail = f"float64, d = 24: weights off by {err:.1e}"
''')

entry("sdpa_half_scores_overflow", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    m = scores.max(dim=-1, keepdim=True).values
    m = m.masked_fill(m == float("-inf"), 0.0)
    e = (scores - m).exp()
    z = e.sum(dim=-1, keepdim=True)
    weights = e / z.masked_fill(z == 0, 1.0)
    return weights @ v, weights
'''}, "Everything in the input's dtype: for float16, q k^T overflows to inf before the division by sqrt(d) when the "
      "scaled scores are around 1e4, giving NaN; breaks 'compute in float32 where the float16 steps would lose too "
      "much' with 'Scores can be large (think 1e4)'.",
      shown_by='''
g = torch.Generator().manual_seed(1)
q = (40 + torch.randn(1, 3, 64, generator=g)).half()
k = (40 + torch.randn(1, 4, 64, generator=g)).half()
v = torch.randn(1, 4, 8, generator=g).half()
out, w = scaled_dot_product_attention(q, k, v)
want_out, want_w = spec.scaled_dot_product_attention(q, k, v)
shown = bool(torch.isnan(out).any()) and bool(torch.isfinite(want_out).all())
detail = f"float16, scaled scores ~1.3e4: NaN in out ({torch.isnan(out).sum().item()} entries); float32 inside is finite"
''')

entry("sdpa_additive_minus_1e4", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    out_dtype = q.dtype
    if q.dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + (~mask).to(scores.dtype) * -10000.0      # as in BERT: a large negative bias
    scores = scores - scores.amax(-1, keepdim=True)
    weights = scores.exp()
    weights = weights / weights.sum(-1, keepdim=True)
    if mask is not None:                                           # queries that see no key: zero weights
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return (weights @ v).to(out_dtype), weights.to(out_dtype)
'''}, "An additive -1e4 mask instead of -inf: when scores are around 1e4 a masked key keeps weight; breaks 'A masked "
      "key gets weight exactly 0' together with 'Scores can be large (think 1e4)'.",
      shown_by='''
g = torch.Generator().manual_seed(2)
q = torch.randn(2, 3, 16, generator=g).abs() + 10
k = torch.randn(2, 5, 16, generator=g).abs() * 0.1 - 5
k[:, 4] = 300.0                                  # the masked key has the largest score (~1.2e4)
v = torch.randn(2, 5, 4, generator=g)
mask = torch.tensor([True, True, True, True, False])
out, w = scaled_dot_product_attention(q, k, v, mask)
shown = bool((w[..., 4] > 0).any())
detail = f"weight of the masked key: {w[..., 4].max().item():.3f} (must be 0)"
''')

entry("sdpa_mask_or_in_place", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(q.shape[-1]))
    empty = None
    if mask is not None:
        empty = ~mask.any(dim=-1, keepdim=True)      # queries with no key at all
        mask |= empty                                # let them see every key for now: no row of -inf, no NaN
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if empty is not None:
        weights = weights.masked_fill(empty, 0.0)    # ... and give them zero weights
    return (weights @ v).to(dtype), weights.to(dtype)
'''}, "Unmasks the empty rows with an in-place `|=` on the caller's mask; breaks 'leave every argument as it is, mask "
      "included' (only masks with rows all False show it).",
      shown_by='''
q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
mask = torch.tensor([[True, True, False, False, False], [False] * 5, [True] * 5])
saved = mask.clone()
scaled_dot_product_attention(q, k, v, mask)
shown = not torch.equal(mask, saved)
detail = f"mask row 1 after the call: {mask[1].tolist()}"
''')

entry("sdpa_weights_detached", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    orig = q.dtype
    if orig in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    mx = s.amax(-1, keepdim=True)
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    p = torch.exp(s - mx)
    tot = p.sum(-1, keepdim=True)
    weights = p / torch.where(tot > 0, tot, torch.ones_like(tot))
    out = weights @ v
    return out.to(orig), weights.detach().to(orig)        # the weights are only for looking at
'''}, "Returns the weights detached ('only for looking at'); breaks 'Gradients reach every floating argument ... no "
      ".detach() ... on the way from an input to an output': a loss on the weights gives q and k no gradient.",
      shown_by='''
q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
k = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
v = torch.randn(2, 5, 6, dtype=torch.float64)
out, w = scaled_dot_product_attention(q, k, v)
shown = not w.requires_grad and spec.scaled_dot_product_attention(q, k, v)[1].requires_grad
detail = "weights.requires_grad is False: (weights * r).sum().backward() cannot reach q and k"
''')

entry("sdpa_mask_unsqueezed_for_heads", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dt = q.dtype
    if dt in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        if mask.dim() == 3:                    # a padding mask (B, Lq, Lk): add the head dimension
            mask = mask.unsqueeze(1)
        scores = scores.masked_fill(~mask, float("-inf"))
    top = scores.amax(-1, keepdim=True).nan_to_num(0.0, neginf=0.0)
    e = (scores - top).exp()
    weights = e / e.sum(-1, keepdim=True).clamp_min(1e-300 if e.dtype == torch.float64 else 1e-30)
    return (weights @ v).to(dt), weights.to(dt)
'''}, "Assumes a 3-D mask is a (B, Lq, Lk) padding mask for 4-D heads and adds a head axis; with 3-D q (B, Lq, d) "
      "the same mask broadcasts to (B, B, Lq, Lk); breaks '`mask` ... broadcasts to (..., Lq, Lk)' for ... = (B,).",
      shown_by='''
q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3)
mask = torch.rand(2, 5, 7) > 0.3
out, w = scaled_dot_product_attention(q, k, v, mask)
shown = tuple(out.shape) != (2, 5, 3)
detail = f"q (2, 5, 8) with mask (2, 5, 7): out {tuple(out.shape)}, not (2, 5, 3)"
''')

entry("sdpa_loop_over_queries", "slow", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    q, k, v = q.to(work), k.to(work), v.to(work)
    Lq = q.shape[-2]
    kt = k.transpose(-2, -1)
    outs, rows = [], []
    for i in range(Lq):                                         # one query at a time
        s = q[..., i:i + 1, :] @ kt / math.sqrt(q.shape[-1])    # (..., 1, Lk)
        if mask is not None:
            row_mask = mask if mask.dim() < 2 or mask.shape[-2] == 1 else mask[..., i:i + 1, :]
            s = s.masked_fill(~row_mask, float("-inf"))
        top = s.amax(-1, keepdim=True)
        top = torch.where(top == float("-inf"), torch.zeros_like(top), top)
        e = torch.exp(s - top)
        z = e.sum(-1, keepdim=True)
        w = e / torch.where(z == 0, torch.ones_like(z), z)
        rows.append(w)
        outs.append(w @ v)
    return torch.cat(outs, dim=-2).to(dtype), torch.cat(rows, dim=-2).to(dtype)
'''}, "Right everywhere but loops over the queries in Python: many more torch operations for longer sequences; breaks "
      "'runs about as fast as the reference solution (no Python loop over positions); at most 3x'.",
      shown_by='''
q, k, v = torch.randn(3, 2, 256, 16).unbind(0)
ratio = H.time_ratio(scaled_dot_product_attention, spec.scaled_dot_product_attention, q, k, v)
ops = (H.op_count(scaled_dot_product_attention, *torch.randn(3, 2, 16, 16).unbind(0)),
       H.op_count(scaled_dot_product_attention, *torch.randn(3, 2, 64, 16).unbind(0)))
shown = ratio > 3 and ops[1] > 2 * ops[0]
detail = f"{ratio:.1f}x the spec's CPU time at L = 256; {ops[0]} ops for 16 queries, {ops[1]} for 64"
''')

entry("sdpa_softmax_nan_to_num", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    out_dtype = q.dtype
    if out_dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)     # empty rows: NaN -> 0 (hint 2)
    return (weights @ v).to(out_dtype), weights.to(out_dtype)
'''}, "torch.softmax (stable on its own) and nan_to_num for the rows with no key, the second route of hint 2; the "
      "gradients through nan_to_num are those of the spec.")

entry("sdpa_max_detached", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = q.matmul(k.transpose(-2, -1)).div(math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    with torch.no_grad():                       # the shift is a constant: softmax does not depend on it
        shift = scores.amax(-1, keepdim=True)
        shift = torch.where(torch.isneginf(shift), torch.zeros_like(shift), shift)
    e = torch.exp(scores - shift)
    total = e.sum(-1, keepdim=True)
    weights = e / total.masked_fill(total == 0, 1.0)
    return (weights @ v).to(dtype), weights.to(dtype)
'''}, "Takes the row maximum under no_grad: the softmax does not depend on the shift, so the gradients are autograd's "
      "through the spec; honours 'gradients ... as autograd gives them' though it uses torch.no_grad() in the "
      "function (see the report: the promise's wording forbids it literally).")

# ------------------------------------------------------------------------------------------------------ causal_mask

entry("causal_slice_of_global_table", "mistake", {"causal_mask": '''
_LOWER = torch.ones(512, 512, dtype=torch.bool).tril()       # made once


def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    return _LOWER[:seq_len, :seq_len].to(device)
'''}, "Slices one precomputed table: the result is a view of it (a caller who edits one mask edits the next), and "
      "past 512 positions it is silently too small; breaks 'no cache that hands out the same tensor twice' and 'for "
      "sequences of any length, past a few hundred positions too'.",
      shown_by='''
big = causal_mask(600)
a = causal_mask(6)
a[:, 0] = False
again = causal_mask(6)
shown = tuple(big.shape) != (600, 600) and not torch.equal(again, spec.causal_mask(6))
detail = f"causal_mask(600) has shape {tuple(big.shape)}; an edited mask comes back at the next call"
''')

entry("causal_arange_compare", "correct", {"causal_mask": '''
def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    i = torch.arange(seq_len, device=device)
    return i[None, :] <= i[:, None]          # column (key) j <= row (query) i
'''}, "The comparison of two aranges made on `device` (hint 2's other route): bool, (L, L), on the device asked for, "
      "fresh at every call.")

# --------------------------------------------------------------------------------------------------------------- MHA

MHA_HEAD = '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
'''

entry("mha_dropout_on_heads", "mistake", {"MultiHeadAttention": MHA_HEAD + '''
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(0.1)                       # as in the Transformer paper

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, D = query.shape
        q = self.q_proj(query).reshape(B, Lq, self.n_heads, self.d_head).transpose(1, 2)
        k = self.k_proj(key).reshape(B, -1, self.n_heads, self.d_head).transpose(1, 2)
        v = self.v_proj(value).reshape(B, -1, self.n_heads, self.d_head).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        out = self.dropout(out.transpose(1, 2).reshape(B, Lq, D))
        return self.out_proj(out)
'''}, "Adds dropout as the paper does; breaks 'answers the same in train() as in eval(): no dropout' (a fresh module "
      "is in training mode).",
      shown_by='''
torch.manual_seed(0)
m = MultiHeadAttention(16, 4)
x = torch.randn(2, 5, 16)
with torch.no_grad():
    a = m.train()(x)
    b = m.eval()(x)
shown = not torch.allclose(a, b)
detail = f"train() and eval() differ by {H.maxdiff(a, b):.2f}"
''')

entry("mha_mask_unsqueeze_in_place", "mistake", {"MultiHeadAttention": MHA_HEAD + '''
        if d_model % n_heads:
            raise ValueError(f"{n_heads} heads do not divide d_model = {d_model}")
        self.h = n_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model, bias=bias)
                                                                for _ in range(4))

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, D = query.shape

        def split(t):
            return t.reshape(B, t.shape[1], self.h, D // self.h).transpose(1, 2)

        if mask is not None and mask.dim() == 2:
            mask.unsqueeze_(0).unsqueeze_(0)              # (Lq, Lk) -> (1, 1, Lq, Lk), for every batch and head
        out, _ = scaled_dot_product_attention(split(self.q_proj(query)), split(self.k_proj(key)),
                                              split(self.v_proj(value)), mask)
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, D))
'''}, "Reshapes the caller's causal mask with unsqueeze_ (in place): the caller's (Lq, Lk) mask becomes (1, 1, Lq, Lk); "
      "breaks 'does not modify query, key, value or mask'.",
      shown_by='''
m = MultiHeadAttention(16, 4)
mask = torch.ones(5, 5, dtype=torch.bool).tril()
m(torch.randn(2, 5, 16), mask=mask)
shown = tuple(mask.shape) != (5, 5)
detail = f"the caller's mask now has shape {tuple(mask.shape)}"
''')

entry("mha_bias_flag_ignored", "mistake", {"MultiHeadAttention": MHA_HEAD + '''
        if d_model % n_heads:
            raise ValueError("n_heads must divide d_model")
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.bias = bias

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, D = query.shape
        Lk = key.shape[1]
        dh = D // self.n_heads
        q = self.q_proj(query).view(B, Lq, self.n_heads, dh).transpose(1, 2)
        k = self.k_proj(key).view(B, Lk, self.n_heads, dh).transpose(1, 2)
        v = self.v_proj(value).view(B, Lk, self.n_heads, dh).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, D))
'''}, "Stores `bias` but builds the four layers with their default bias=True; breaks 'four nn.Linear(d_model, "
      "d_model, bias=bias) layers' (bias=False, drawn less often).",
      shown_by='''
m = MultiHeadAttention(8, 2, bias=False)
shown = m.q_proj.bias is not None and m.out_proj.bias is not None
detail = "MultiHeadAttention(8, 2, bias=False).q_proj has a bias"
''')

entry("mha_loop_over_batch_and_heads", "slow", {"MultiHeadAttention": MHA_HEAD + '''
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
        B, Lq, _ = query.shape
        Lk = key.shape[1]
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        if mask is not None:
            mask = mask.expand(B, self.n_heads, Lq, Lk)
        rows = []
        for b in range(B):                           # one sequence and one head at a time: easy to follow
            heads = []
            for h in range(self.n_heads):
                cols = slice(h * self.d_head, (h + 1) * self.d_head)
                out, _ = scaled_dot_product_attention(q[b, :, cols], k[b, :, cols], v[b, :, cols],
                                                      None if mask is None else mask[b, h])
                heads.append(out)
            rows.append(torch.cat(heads, dim=-1))
        return self.out_proj(torch.stack(rows))
'''}, "Right, but one attention call per sequence and head; breaks 'runs about as fast as the reference solution (all "
      "heads at once); at most 3x'.",
      shown_by='''
torch.manual_seed(0)
mine, ref = MultiHeadAttention(64, 8), spec.MultiHeadAttention(64, 8)
H.load_mha(mine, ref)
x = torch.randn(8, 16, 64)
ratio = H.time_ratio(mine, ref, x)
shown = ratio > 3
detail = f"{ratio:.1f}x the spec's CPU time (B = 8, 8 heads, L = 16)"
''')

entry("mha_unflatten_flatten_selfcheck", "correct", {"MultiHeadAttention": MHA_HEAD + '''
        if d_model % n_heads:
            raise ValueError(f"n_heads = {n_heads} must divide d_model = {d_model}")
        self.n_heads = n_heads
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))

    def _heads(self, t):                                       # (B, L, d_model) -> (B, n_heads, L, d_head)
        return t.unflatten(-1, (self.n_heads, -1)).transpose(1, 2)

    def forward(self, query, key=None, value=None, mask=None):
        if key is None:
            key = query
        if value is None:
            value = key
        out, _ = scaled_dot_product_attention(self._heads(self.q_proj(query)), self._heads(self.k_proj(key)),
                                              self._heads(self.v_proj(value)), mask=mask)
        return self.out_proj(out.transpose(1, 2).flatten(-2))


_m = MultiHeadAttention(12, 3)
assert _m(torch.randn(2, 4, 12), torch.randn(2, 6, 12)).shape == (2, 4, 12)       # my own check
'''}, "unflatten/flatten instead of reshape with explicit sizes, layers made by setattr under the four names, a "
      "helper method, and a self-check at the end of the cell: the same computation the text describes.")

# ------------------------------------------------------------------------------------------------------- blockwise

entry("bw_running_max_starts_at_zero", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5
    m = q.new_zeros(*q.shape[:-1], 1)                 # running max
    l = q.new_zeros(*q.shape[:-1], 1)                 # running sum
    acc = q.new_zeros(*q.shape[:-1], v.shape[-1])     # running output
    i = torch.arange(Lq, device=q.device)[:, None]
    for start in range(0, Lk, block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) * scale
        if causal:
            j = torch.arange(start, start + s.shape[-1], device=q.device)[None, :]
            s = s.masked_fill(j > i, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        c = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = l * c + p.sum(-1, keepdim=True)
        acc = acc * c + p @ v[..., start:start + block_size, :]
        m = m_new
    return acc / l
'''}, "Starts the running maximum at 0 instead of -inf: when every score of a row is far below 0, exp(s - 0) "
      "underflows and out = 0/0; breaks 'rows whose every score is far below 0 do not underflow' (the text's 'the "
      "largest score m').",
      shown_by='''
g = torch.Generator().manual_seed(3)
q = torch.randn(2, 6, 8, generator=g, dtype=torch.float64).abs() + 30
k = -(torch.randn(2, 9, 8, generator=g, dtype=torch.float64).abs() + 30)
v = torch.randn(2, 9, 4, generator=g, dtype=torch.float64)
out = blockwise_attention(q, k, v, block_size=4)
shown = bool(torch.isnan(out).any()) and not bool(torch.isnan(spec.blockwise_attention(q, k, v, block_size=4)).any())
detail = f"scores ~ -3e3: {torch.isnan(out).sum().item()} NaN in out"
''')

entry("bw_causal_break_off_by_one", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    a = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    qi = torch.arange(Lq, device=q.device).unsqueeze(-1)
    for start in range(0, Lk, block_size):
        if causal and start >= Lq - 1:                 # no query sees these keys: stop early
            break
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        if causal:
            kj = torch.arange(start, start + kb.shape[-2], device=q.device)
            s = s.masked_fill(kj > qi, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = m_new.masked_fill(m_new == float("-inf"), 0.0)
        corr = torch.exp(m - safe)
        p = torch.exp(s - safe)
        l = l * corr + p.sum(-1, keepdim=True)
        a = a * corr + p @ vb
        m = m_new
    return a / l
'''}, "Stops the causal loop one block early when a block starts exactly at the last query's own key (start == Lq - "
      "1), which that query may see; breaks 'key j is visible to query i when j <= i' on the sizes that put a block "
      "boundary there.",
      shown_by='''
g = torch.Generator().manual_seed(4)
q, k, v = torch.randn(1, 5, 4, generator=g), torch.randn(1, 9, 4, generator=g), torch.randn(1, 9, 3, generator=g)
out = blockwise_attention(q, k, v, causal=True, block_size=4)
want = spec.blockwise_attention(q, k, v, causal=True, block_size=4)
shown = not H.same(out, want, atol=1e-5)
detail = f"Lq = 5, Lk = 9, block_size = 4: last query off by {H.maxdiff(out, want):.2f}"
''')

entry("bw_one_key_returns_view_of_v", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    if Lk == 1:                                       # one key: every query gives it weight 1
        return v.expand(*q.shape[:-1], v.shape[-1])
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    a = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    rows = torch.arange(Lq, device=q.device)[:, None]
    for start in range(0, Lk, block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) * scale
        if causal:
            s = s.masked_fill(torch.arange(start, start + s.shape[-1], device=q.device) > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_safe = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
        c, p = torch.exp(m - m_safe), torch.exp(s - m_safe)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ v[..., start:start + block_size, :]
        m = m_new
    return a / l
'''}, "A shortcut for one key returns an expanded view of v: the result is the argument's memory; breaks 'Every "
      "result is a new tensor ... never an argument itself' on the edge size 'one key'.",
      shown_by='''
q, k, v = torch.randn(2, 4, 8), torch.randn(2, 1, 8), torch.randn(2, 1, 8)
out = blockwise_attention(q, k, v)
shown = out.data_ptr() == v.data_ptr() and H.same(out, spec.blockwise_attention(q, k, v), atol=1e-6, dtype=False)
detail = "Lk = 1: the answer's values are right but it is v's memory (an expanded view of v)"
''')

entry("bw_scales_q_in_place", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    q *= 1.0 / math.sqrt(q.shape[-1])              # scale the queries once, not every block
    Lq, Lk = q.shape[-2], k.shape[-2]
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
    for start in range(0, Lk, block_size):
        stop = min(start + block_size, Lk)
        s = q @ k[..., start:stop, :].transpose(-2, -1)
        if causal:
            s = s.masked_fill(torch.arange(start, stop, device=q.device) > torch.arange(Lq, device=q.device)[:, None],
                              float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_ok = torch.where(m_new.isneginf(), torch.zeros_like(m_new), m_new)
        alpha = (m - m_ok).exp()
        p = (s - m_ok).exp()
        l = alpha * l + p.sum(-1, keepdim=True)
        acc = alpha * acc + p @ v[..., start:stop, :]
        m = m_new
    return acc / l
'''}, "`q *= scale` rescales the caller's tensor in place; breaks 'does not modify q, k or v' (and 'do not modify your "
      "inputs in place').",
      shown_by='''
q, k, v = torch.randn(2, 6, 8), torch.randn(2, 9, 8), torch.randn(2, 9, 8)
saved = q.clone()
blockwise_attention(q, k, v, block_size=4)
shown = not torch.equal(q, saved)
detail = f"q changed by the call (max change {H.maxdiff(q, saved):.2f})"
''')

entry("bw_causal_positions_on_cpu", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full_like(q[..., :1], float("-inf"))
    l = torch.zeros_like(q[..., :1])
    a = torch.zeros_like(q[..., :1]) * torch.zeros_like(v[..., :1, :])
    a = a.expand(*q.shape[:-1], v.shape[-1]).clone()
    for start in range(0, Lk, block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = torch.matmul(q, kb.transpose(-2, -1)) * scale
        if causal:
            future = torch.arange(start, start + kb.shape[-2])[None, :] > torch.arange(Lq)[:, None]
            s = s.masked_fill(future, float("-inf"))
        m_new = torch.maximum(m, s.max(-1, keepdim=True).values)
        shift = torch.where(m_new > float("-inf"), m_new, torch.zeros_like(m_new))
        c = torch.exp(m - shift)
        p = torch.exp(s - shift)
        l = c * l + p.sum(-1, keepdim=True)
        a = c * a + p @ vb
        m = m_new
    return a / l
'''}, "The causal positions come from torch.arange without device=: on another device the mask is on the CPU; breaks "
      "'A result is made on its arguments' device (... blockwise_attention) ... \\\"meta\\\"', with causal=True only.",
      shown_by='''
meta = [torch.randn(2, 37, 8, device="meta") for _ in range(3)]
plain = H.raises(blockwise_attention, *meta, causal=False, block_size=16)
err = H.raises(blockwise_attention, *meta, causal=True, block_size=16)
shown = plain is None and err is not None
detail = f"meta inputs: causal=False works, causal=True raises {err}"
''')

entry("bw_full_scores_then_blocks", "slow", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])      # all the scores, then blocks of them
    if causal:
        future = torch.arange(Lk, device=q.device)[None, :] > torch.arange(Lq, device=q.device)[:, None]
        scores = scores.masked_fill(future, float("-inf"))
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    a = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    for start in range(0, Lk, block_size):
        s = scores[..., start:start + block_size]
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_safe = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
        c, p = torch.exp(m - m_safe), torch.exp(s - m_safe)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ v[..., start:start + block_size, :]
        m = m_new
    return a / l
'''}, "The online softmax is right, but it is run over slices of the whole Lq x Lk score matrix; breaks 'the extra "
      "memory is O(Lq * block_size)' ('never the whole Lq x Lk score matrix').",
      shown_by='''
q, k, v = torch.randn(3, 1024, 16).unbind(0)
mine, ref = H.largest_bytes(blockwise_attention, q, k, v, block_size=64), H.largest_bytes(spec.blockwise_attention, q, k, v, block_size=64)
shown = mine >= 1024 * 1024 * 4 and ref < 1024 * 1024
detail = f"largest tensor {mine / 2**20:.1f} MiB (the spec's {ref / 2**10:.0f} KiB)"
''')

entry("bw_merge_block_logsumexp", "correct", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    rows = torch.arange(Lq, device=q.device)[:, None]
    out = lse = None
    for start in range(0, Lk, block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        if causal:
            cols = torch.arange(start, start + kb.shape[-2], device=q.device)[None, :]
            s = s.masked_fill(cols > rows, float("-inf"))
        mb = s.amax(-1, keepdim=True)
        mb = torch.where(torch.isneginf(mb), torch.zeros_like(mb), mb)
        e = torch.exp(s - mb)
        z = e.sum(-1, keepdim=True)
        out_b = (e @ vb) / torch.where(z == 0, torch.ones_like(z), z)      # this block's own attention
        lse_b = mb + torch.log(z)                                           # and its log-sum-exp (-inf: no key)
        if out is None:
            out, lse = out_b, lse_b
            continue
        new = torch.logaddexp(lse, lse_b)
        new_safe = torch.where(torch.isneginf(new), torch.zeros_like(new), new)
        out = out * torch.exp(lse - new_safe) + out_b * torch.exp(lse_b - new_safe)
        lse = new
    return out
'''}, "Keeps a normalised output and its log-sum-exp per query and merges each block's own attention with logaddexp "
      "(the FlashAttention-2 / split-K form): the same online softmax, O(Lq * block_size) memory.")
