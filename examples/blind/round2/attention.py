"""Blind corpus (round 2) for exercises/attention: plausible mistakes, correct alternatives and slow answers, each
written from the notebook's text alone, with the input that shows it (shown_by) for mistakes and slow answers."""

ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# ----------------------------------------------------------------------------------------------------------------------
# Part 1: scaled_dot_product_attention
# ----------------------------------------------------------------------------------------------------------------------

entry("sdpa_k_transpose_1_2", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])       # (B, L, d) -> (B, d, L)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = row_max.masked_fill(torch.isinf(row_max), 0.0)
    e = torch.exp(scores - row_max)
    total = e.sum(dim=-1, keepdim=True)
    weights = e / total.masked_fill(total == 0, 1.0)
    return (weights @ v).to(dtype), weights.to(dtype)
'''}, why="k.transpose(1, 2) is the keys' transpose only for 3-d inputs (B, L, d): with heads (B, H, L, d), or none, "
          "it breaks the text's 'q (..., Lq, d) for any leading dimensions (batch, heads)'; the visible checks use "
          "3-d inputs only.",
    shown_by='''
q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 6)
err = H.raises(scaled_dot_product_attention, q, k, v)
if err is None:
    out, w = scaled_dot_product_attention(q, k, v)
    shown = H.maxdiff(w, spec.scaled_dot_product_attention(q, k, v)[1]) > 1e-4
else:
    shown = True
detail = f"q (2, 3, 4, 8) with heads: {err or 'wrong weights'}"
''')

entry("sdpa_eps_in_denominator", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(row_max == float("-inf"), torch.zeros_like(row_max), row_max)
    e = torch.exp(scores - row_max)
    weights = e / (e.sum(dim=-1, keepdim=True) + 1e-6)            # the epsilon keeps empty rows at 0 / 1e-6 = 0
    return (weights @ v).to(dtype), weights.to(dtype)
'''}, why="The 1e-6 added to every row's sum keeps empty rows finite but makes every weight too small by up to 1e-6 "
          "relative: the weights no longer sum to 1 and a float64 answer is not 'held to float64's precision' "
          "(one key gets 0.999999, not 1).",
    shown_by='''
q, k, v = (torch.randn(2, 3, L, 8, dtype=torch.float64) for L in (4, 1, 1))
out, w = scaled_dot_product_attention(q, k, v)
q2, k2, v2 = (torch.randn(2, L, 8, dtype=torch.float64) for L in (6, 9, 9))
w2 = scaled_dot_product_attention(q2, k2, v2)[1]
err = max(H.maxdiff(w, torch.ones_like(w)), H.maxdiff(w2, spec.scaled_dot_product_attention(q2, k2, v2)[1]))
shown = err > 1e-8
detail = f"float64, one key: weight {w.flatten()[0].item():.10f}; largest error {err:.1e}"
''')

entry("sdpa_max_before_mask", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    row_max = scores.amax(dim=-1, keepdim=True)                   # taken before the mask: always finite
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores - row_max)
    total = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(total == 0, torch.ones_like(total), total)
    return (weights @ v).to(dtype), weights.to(dtype)
'''}, why="The row maximum is taken over every key, masked ones included: when a masked key has the largest score "
          "(far above the others) every allowed exponential underflows to 0 and the query gets zero weights instead "
          "of a softmax, against 'scores around 1e4 ... with a mask (whose masked keys have the largest scores)'.",
    shown_by='''
q = torch.ones(1, 3, 4)
k = torch.tensor([[[500.0] * 4, [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]])
v = torch.randn(1, 4, 5)
mask = torch.tensor([False, True, True, True])                  # the key with score 1000 is masked
out, w = scaled_dot_product_attention(q, k, v, mask)
want = spec.scaled_dot_product_attention(q, k, v, mask)[1]
shown = H.maxdiff(w, want) > 0.1
detail = f"masked key with score 1000: weights sum to {w.sum(-1).flatten().tolist()}, not 1"
''')

entry("sdpa_casts_back_with_half", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    low = q.dtype in (torch.float16, torch.bfloat16)
    if low:                                                       # float16 steps lose too much: work in float32
        q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)
    e = torch.exp(scores - row_max)
    total = e.sum(dim=-1, keepdim=True)
    weights = e / total.masked_fill(total == 0, 1.0)
    out = weights @ v
    if low:
        out, weights = out.half(), weights.half()                 # back to half precision
    return out, weights
'''}, why="It casts back with .half(), float16, whatever the input was: bfloat16 arguments get float16 answers, "
          "against 'float16 and bfloat16 ... answers in their dtype'.",
    shown_by='''
q, k, v = (torch.randn(2, L, 8).to(torch.bfloat16) for L in (5, 7, 7))
out, w = scaled_dot_product_attention(q, k, v)
shown = out.dtype != torch.bfloat16 or w.dtype != torch.bfloat16
detail = f"bfloat16 arguments: out {out.dtype}, weights {w.dtype}"
''')

entry("sdpa_mask_under_no_grad", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        with torch.no_grad():                                     # the mask is a constant: no gradient through it
            scores = scores.masked_fill(~mask, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)
    e = torch.exp(scores - row_max)
    total = e.sum(dim=-1, keepdim=True)
    weights = e / total.masked_fill(total == 0, 1.0)
    return (weights @ v).to(dtype), weights.to(dtype)
'''}, why="Masking under torch.no_grad() cuts the scores from q and k whenever a mask is given: no gradient reaches "
          "q or k, against 'gradients reach every floating argument ... no torch.no_grad() on the way'.",
    shown_by='''
q, k, v = (torch.randn(2, L, 8, requires_grad=True) for L in (4, 6, 6))
mask = torch.ones(4, 6, dtype=torch.bool).tril()
out, w = scaled_dot_product_attention(q, k, v, mask)
out.sum().backward()
shown = q.grad is None or k.grad is None or float(q.grad.abs().sum()) == 0.0
detail = f"with a mask: q.grad is {'None' if q.grad is None else 'zero'}"
''')

entry("sdpa_zeros_without_device", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    zeros = torch.zeros(row_max.shape, dtype=row_max.dtype)       # for the rows with no key to attend to
    row_max = torch.where(torch.isinf(row_max), zeros, row_max)
    e = torch.exp(scores - row_max)
    total = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(total == 0, torch.ones_like(total), total)
    return (weights @ v).to(dtype), weights.to(dtype)
'''}, why="The zeros that replace the maximum of empty rows are made on the default device, not the arguments': on "
          "'meta' (or a GPU) the call fails, against 'a result is made on its arguments' device ... device=x.device'.",
    shown_by='''
q, k, v = (torch.randn(2, 3, L, 8, device="meta") for L in (5, 7, 7))
err = H.raises(scaled_dot_product_attention, q, k, v)
shown = err is not None
detail = f"on 'meta': {err}"
''')

entry("sdpa_half_no_upcast", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])     # in q's dtype, whatever it is
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)
    e = torch.exp(scores - row_max)
    total = e.sum(dim=-1, keepdim=True)
    weights = e / total.masked_fill(total == 0, 1.0)
    return weights @ v, weights
'''}, why="Every step runs in float16 when the arguments are float16: scores around 1e3 are rounded to float16's "
          "spacing (2 for q . k near 3750) before the exponential, so the weights are off by far more than float16's precision, "
          "against 'compute in float32 where the float16 steps would lose too much'.",
    shown_by='''
q = torch.ones(1, 2, 16).half()                                 # scores 937.5 + x / 4: float16 steps of 0.5 there
x = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0])
k = torch.cat([torch.full((5, 15), 250.0), x[:, None]], dim=1)[None].half()
v = torch.randn(1, 5, 4).half()
out, w = scaled_dot_product_attention(q, k, v)
exact_out, exact_w = spec.scaled_dot_product_attention(q.double(), k.double(), v.double())
mine, theirs = H.maxdiff(w, exact_w), H.maxdiff(spec.scaled_dot_product_attention(q, k, v)[1], exact_w)
shown = mine > 0.02 and theirs < 2e-3
detail = f"float16, scores 937.5 .. 938: weights {[round(t, 3) for t in w[0, 0].tolist()]}, exact " \
         f"{[round(t, 3) for t in exact_w[0, 0].tolist()]} (float32 inside: off by {theirs:.1e})"
''')

# ----------------------------------------------------------------------------------------------------------------------
# Part 2: causal_mask
# ----------------------------------------------------------------------------------------------------------------------

entry("causal_eye_without_device", "mistake", {"causal_mask": '''
def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    below = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril(-1)
    return below | torch.eye(seq_len, dtype=torch.bool)            # the diagonal: query i sees itself
'''}, why="The diagonal comes from torch.eye on the default device: asked for 'meta' (or a GPU) it fails or lands on "
          "the wrong device, against 'on device (the hidden tests ask for \"cpu\" and \"meta\")'.",
    shown_by='''
err = H.raises(causal_mask, 5, device="meta")
dev = None if err else causal_mask(5, device="meta").device.type
shown = err is not None or dev != "meta"
detail = f"causal_mask(5, device='meta'): {err or dev}"
''')

entry("causal_triu_transposed", "correct", {"causal_mask": '''
def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    upper = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu()   # key j >= query i
    return upper.T                                                 # transposed: key j <= query i
'''}, why="The transpose of the upper triangle (diagonal included) is the lower triangle; a transposed view of a "
          "fresh tensor is still a new result at every call.")

entry("causal_python_lists", "slow", {"causal_mask": '''
def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    return torch.tensor([[j <= i for j in range(seq_len)] for i in range(seq_len)], dtype=torch.bool,
                        device=device)
'''}, why="Right, but it builds seq_len^2 Python booleans one by one: at 600 positions (the text's 'past a few hundred "
          "positions') hundreds of times the time of one tril.",
    shown_by='''
ratio = H.time_ratio(lambda: causal_mask(600), lambda: spec.causal_mask(600), repeats=3)
shown = ratio > 30
detail = f"600 positions: {ratio:.0f}x the spec's time"
''')

# ----------------------------------------------------------------------------------------------------------------------
# Part 3: MultiHeadAttention
# ----------------------------------------------------------------------------------------------------------------------

MHA_INIT = '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"{n_heads} heads do not divide d_model = {d_model}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
'''

entry("mha_dropout_in_train", "mistake", {"MultiHeadAttention": MHA_INIT + '''        self.dropout = nn.Dropout(0.1)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, _ = query.shape
        Lk = key.shape[1]
        q = self.q_proj(query).reshape(B, Lq, self.n_heads, self.d_head).transpose(1, 2)
        k = self.k_proj(key).reshape(B, Lk, self.n_heads, self.d_head).transpose(1, 2)
        v = self.v_proj(value).reshape(B, Lk, self.n_heads, self.d_head).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        out = out.transpose(1, 2).reshape(B, Lq, self.d_model)
        return self.out_proj(self.dropout(out))                   # regularise, as the Transformer paper does
'''}, why="A dropout before out_proj makes train() answer differently from eval() (and every call differently), "
          "against 'answers the same in train() as in eval(): no dropout'.",
    shown_by='''
torch.manual_seed(0)
mha = MultiHeadAttention(16, 4)
x = torch.randn(2, 5, 16)
train_out = mha.train()(x)
eval_out = mha.eval()(x)
shown = H.maxdiff(train_out, eval_out) > 1e-4
detail = f"train() vs eval(): max diff {H.maxdiff(train_out, eval_out):.2f}"
''')

entry("mha_heads_into_default_zeros", "mistake", {"MultiHeadAttention": MHA_INIT + '''
    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, _ = query.shape
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        if mask is not None and mask.dim() == 4:
            mask = mask[:, 0]                                     # (B, 1, Lq, Lk) -> (B, Lq, Lk): one head at a time
        out = torch.zeros(B, Lq, self.d_model)                    # the heads side by side
        for h in range(self.n_heads):                             # a few heads: a short loop
            cols = slice(h * self.d_head, (h + 1) * self.d_head)
            out[..., cols] = scaled_dot_product_attention(q[..., cols], k[..., cols], v[..., cols], mask)[0]
        return self.out_proj(out)
'''}, why="The heads are gathered into torch.zeros(B, Lq, d_model), float32 on the default device: after "
          ".to(torch.float64) (or .to('meta')) the module fails, against 'a module moves every tensor it uses with "
          ".to(torch.float64) and .to(\"meta\")'.",
    shown_by='''
torch.manual_seed(0)
mha = MultiHeadAttention(16, 4).to(torch.float64)
x = torch.randn(2, 5, 16, dtype=torch.float64)
err = H.raises(mha, x)
if err is None:
    ref = spec.MultiHeadAttention(16, 4).double()
    H.load_mha(ref, mha)
    shown = H.maxdiff(mha(x), ref(x)) > 1e-10 or mha(x).dtype != torch.float64
else:
    shown = True
detail = f"after .to(torch.float64): {err or 'float32 precision'}"
''')

entry("mha_mask_repeat_order", "mistake", {"MultiHeadAttention": MHA_INIT + '''
    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, _ = query.shape
        Lk = key.shape[1]
        H, dh = self.n_heads, self.d_head

        def heads(x, L):                                          # (B, L, d_model) -> (B * H, L, d_head)
            return x.reshape(B, L, H, dh).transpose(1, 2).reshape(B * H, L, dh)

        q, k, v = heads(self.q_proj(query), Lq), heads(self.k_proj(key), Lk), heads(self.v_proj(value), Lk)
        if mask is not None and mask.dim() == 4:                  # a padding mask (B, 1, Lq, Lk): one per head
            mask = mask.repeat(H, 1, 1, 1).reshape(B * H, Lq, Lk)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        out = out.reshape(B, H, Lq, dh).transpose(1, 2).reshape(B, Lq, self.d_model)
        return self.out_proj(out)
'''}, why="The heads are folded into the batch b-major (b * H + h) but the padding mask is repeated h-major "
          "(h * B + b): with B > 1 each head reads another sequence's padding, against 'a padding mask (B, 1, Lq, "
          "Lk) that is the same for every head'.",
    shown_by='''
torch.manual_seed(0)
mha, ref = MultiHeadAttention(16, 4), spec.MultiHeadAttention(16, 4)
H.load_mha(ref, mha)
x = torch.randn(2, 5, 16)
pad = torch.ones(2, 1, 5, 5, dtype=torch.bool)
pad[0, ..., 3:] = False
with torch.no_grad():
    diff = H.maxdiff(mha(x, mask=pad), ref(x, mask=pad))
shown = diff > 1e-4
detail = f"B = 2, 4 heads, padding mask that differs by sequence: max diff {diff:.3f}"
''')

entry("mha_unflatten_flatten", "correct", {"MultiHeadAttention": MHA_INIT + '''
    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        q, k, v = (proj(x).unflatten(-1, (self.n_heads, self.d_head)).transpose(-3, -2)
                   for proj, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        out, _ = scaled_dot_product_attention(q, k, v, mask)      # (B, H, Lq, d_head)
        return self.out_proj(out.transpose(-3, -2).flatten(-2))
'''}, why="unflatten(-1, (H, d_head)) gives head h the columns h * d_head ... (h + 1) * d_head - 1 as the text says, "
          "and flatten(-2) puts them back side by side; no view of a non-contiguous tensor.")

# ----------------------------------------------------------------------------------------------------------------------
# Part 4: blockwise_attention
# ----------------------------------------------------------------------------------------------------------------------

entry("bw_state_on_default_device", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    *lead, Lq, d = q.shape
    Lk = k.shape[-2]
    m = torch.full((*lead, Lq, 1), float("-inf"), dtype=q.dtype)
    l = torch.zeros(*lead, Lq, 1, dtype=q.dtype)
    a = torch.zeros(*lead, Lq, v.shape[-1], dtype=q.dtype)
    i = torch.arange(Lq)[:, None]
    for start in range(0, Lk, block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) / math.sqrt(d)
        if causal:
            j = torch.arange(start, start + s.shape[-1])[None, :]
            s = s.masked_fill(j > i, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_safe = torch.where(m_new == float("-inf"), 0.0, m_new)
        c, p = torch.exp(m - m_safe), torch.exp(s - m_safe)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ v[..., start:start + block_size, :]
        m = m_new
    return a / l
'''}, why="The running max, sum and output (and the positions for causal) are made on the default device: with "
          "arguments on 'meta' (or a GPU) the call fails, against 'a result is made on its arguments' device'.",
    shown_by='''
q, k, v = (torch.randn(2, L, 8, device="meta") for L in (37, 37, 37))
err = H.raises(blockwise_attention, q, k, v, block_size=16)
shown = err is not None
detail = f"on 'meta': {err}"
''')

entry("bw_max_of_unscaled_scores", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk, scale = q.shape[-2], k.shape[-2], 1.0 / math.sqrt(q.shape[-1])
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    l = q.new_zeros((*q.shape[:-1], 1))
    a = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    rows = torch.arange(Lq, device=q.device)[:, None]
    for start in range(0, Lk, block_size):
        raw = q @ k[..., start:start + block_size, :].transpose(-2, -1)          # q . k, scaled in the exponential
        if causal:
            cols = torch.arange(start, start + raw.shape[-1], device=q.device)[None, :]
            raw = raw.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, raw.amax(-1, keepdim=True))
        m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)
        c = torch.exp(m - m_safe)
        p = torch.exp(raw * scale - m_safe)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ v[..., start:start + block_size, :]
        m = m_new
    return a / l
'''}, why="The running max is of the unscaled scores q . k while the exponentials use the scaled ones: any common "
          "shift cancels, but with scores around 1e4 the shift is sqrt(d) times too large, every exponential "
          "underflows and the output is NaN, against 'scores around 1e4 do not overflow' (the max must be of the "
          "scores themselves).",
    shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, L, 16, generator=g) for L in (10, 37, 37))
q, k = 40 * q, 40 * k
out = blockwise_attention(q, k, v, block_size=16)
diff = H.maxdiff(out, spec.blockwise_attention(q, k, v, False, 16))
shown = diff > 1e-3
detail = f"scores around 1e4: {'NaN' if diff == float('inf') else f'max diff {diff:.2e}'}"
''')

entry("bw_q_scaled_in_place", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    q *= 1.0 / math.sqrt(q.shape[-1])                             # scale the queries once, not every block
    Lq, Lk = q.shape[-2], k.shape[-2]
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    l = q.new_zeros((*q.shape[:-1], 1))
    a = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    rows = torch.arange(Lq, device=q.device)[:, None]
    for start in range(0, Lk, block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1)
        if causal:
            cols = torch.arange(start, start + s.shape[-1], device=q.device)[None, :]
            s = s.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)
        c, p = torch.exp(m - m_safe), torch.exp(s - m_safe)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ v[..., start:start + block_size, :]
        m = m_new
    return a / l
'''}, why="q *= scale on the argument is in place: the caller's q is scaled by 1/sqrt(d) at every call, against 'do "
          "not modify your inputs in place' (and a second call with the same q answers differently).",
    shown_by='''
q, k, v = (torch.randn(2, L, 8) for L in (10, 37, 37))
before = q.clone()
first = blockwise_attention(q, k, v, block_size=16)
changed = not torch.equal(q, before)
shown = changed
detail = f"q changed by the call: {changed}; max change {H.maxdiff(q, before):.2f}"
''')

entry("bw_no_inf_guard", "correct", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5
    m = torch.full_like(q[..., :1], float("-inf"))
    l = torch.zeros_like(q[..., :1])
    a = torch.zeros_like(q[..., :1]) * v[..., :1, :]              # (..., Lq, dv), zeros
    rows = torch.arange(Lq, device=q.device).unsqueeze(1)
    for start in range(0, Lk, block_size):
        s = (q @ k[..., start:start + block_size, :].mT) * scale
        if causal:
            cols = torch.arange(start, start + s.shape[-1], device=q.device)
            s = torch.where(cols <= rows, s, float("-inf"))
        # no guard against m_new = -inf: the first block holds key 0, which every query may attend to (also with
        # causal), so after it every row's maximum is finite
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        c, p = torch.exp(m - m_new), torch.exp(s - m_new)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ v[..., start:start + block_size, :]
        m = m_new
    return a / l
'''}, why="Going forward through the keys, block 0 holds key 0, visible to every query (j = 0 <= i), so no row's "
          "running max is -inf after the first block and the -inf guard of hint 2 is never needed.")

entry("bw_base2_online_softmax", "correct", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scale = math.log2(math.e) / math.sqrt(q.shape[-1])            # e^x = 2^(x log2 e): scores in base 2
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    l = q.new_zeros((*q.shape[:-1], 1))
    a = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    rows = torch.arange(Lq, device=q.device)[:, None]
    for start in range(0, Lk, block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) * scale
        if causal:
            cols = torch.arange(start, start + s.shape[-1], device=q.device)[None, :]
            s = s.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_safe = m_new.masked_fill(torch.isneginf(m_new), 0.0)
        c, p = torch.exp2(m - m_safe), torch.exp2(s - m_safe)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ v[..., start:start + block_size, :]
        m = m_new
    return a / l
'''}, why="The online softmax in base 2 (FlashAttention's exp2 with the scale times log2 e) is the same softmax: "
          "2^(x log2 e) = e^x, and the common shift still cancels.")

# ----------------------------------------------------------------------------------------------------------------------
# Part 1 again: correct alternatives and a slow answer
# ----------------------------------------------------------------------------------------------------------------------

entry("sdpa_softmax_then_where_any", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)                       # subtracts each row's max itself
    if mask is not None:                                          # rows with no allowed key: NaN -> 0
        weights = torch.where(mask.any(dim=-1, keepdim=True), weights, weights.new_zeros(()))
    out = torch.matmul(weights, v)
    return out.to(dtype), weights.to(dtype)
'''}, why="torch.softmax is stable for large scores, and the rows whose mask allows no key (the only ones softmax "
          "makes NaN) are set to 0 with torch.where, whose gradient there is 0.")

entry("sdpa_fourth_root_scaling", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    r = q.shape[-1] ** -0.25                                      # (q r) . (k r) = q . k / sqrt(d)
    scores = (q * r) @ (k * r).transpose(-2, -1)
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True).nan_to_num(neginf=0.0)
    e = (scores - row_max).exp()
    total = e.sum(dim=-1, keepdim=True)
    weights = e / total.clamp(min=torch.finfo(total.dtype).tiny)
    return (weights @ v).to(dtype), weights.to(dtype)
'''}, why="Scaling q and k each by d^-1/4 gives the same scores (as some implementations do to keep them in "
          "range); an empty row has total 0 and e = 0, so dividing by the tiniest positive float gives exactly 0.")

entry("sdpa_broadcast_product_sum", "slow", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(-1) / math.sqrt(q.shape[-1])   # s_ij = sum_c q_ic k_jc
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)
    e = torch.exp(scores - row_max)
    total = e.sum(dim=-1, keepdim=True)
    weights = e / total.masked_fill(total == 0, 1.0)
    out = (weights.unsqueeze(-1) * v.unsqueeze(-3)).sum(-2)                      # sum_j w_ij v_j
    return out.to(dtype), weights.to(dtype)
'''}, why="Right, but the scores and the output are products broadcast to (..., Lq, Lk, d) and summed: d times the "
          "memory of the score matrix and several times the spec's time, against 'at most 3x the reference's time'.",
    shown_by='''
q, k, v = torch.randn(3, 2, 4, 256, 64).unbind(0)
ratio = H.time_ratio(scaled_dot_product_attention, spec.scaled_dot_product_attention, q, k, v, repeats=3)
mem = H.largest_bytes(scaled_dot_product_attention, q, k, v) / H.largest_bytes(spec.scaled_dot_product_attention, q, k, v)
shown = ratio > 3 and mem > 16
detail = f"(2, 4, 256, 64): {ratio:.1f}x the spec's time, largest tensor {mem:.0f}x"
''')
