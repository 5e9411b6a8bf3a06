"""Blind corpus, attention: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# ----------------------------------------------------------------------------------------------------------------
# Mistakes
# ----------------------------------------------------------------------------------------------------------------

entry("sdpa_shift_before_mask", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    q, k, v = (t.float() if dtype in (torch.float16, torch.bfloat16) else t for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores - scores.amax(dim=-1, keepdim=True).detach()     # no overflow: the largest exponent is 0
    e = torch.exp(scores)
    if mask is not None:
        e = e * mask                                                  # masked keys: weight exactly 0
    total = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(total == 0, torch.ones_like(total), total)   # a row with no key: zeros, not NaN
    return (weights @ v).to(dtype), weights.to(dtype)
'''}, "Subtracts the row maximum over all keys, masked ones included, then zeroes the masked keys after exp: when a "
   "masked key has the largest score (~1e4) every allowed exp underflows to 0, breaking 'scores around 1e4 do not "
   "overflow, with and without a mask (whose masked keys have the largest scores)' and 'the weights of the others "
   "still sum to 1'.",
      shown_by="""
g = torch.Generator().manual_seed(0)
q, k, v = 100 * torch.randn(2, 4, 8, generator=g), 100 * torch.randn(2, 6, 8, generator=g), torch.randn(2, 6, 3, generator=g)
s = q @ k.transpose(-2, -1)
mask = s != s.amax(-1, keepdim=True)                  # each query loses its best key
out, w = scaled_dot_product_attention(q, k, v, mask)
ref, rw = spec.scaled_dot_product_attention(q, k, v, mask)
gap = H.maxdiff(w, rw)
shown = gap > 1e-3
detail = f"masked keys with the largest scores (~1e4): weights off by {gap:.2f}, smallest row sum {w.sum(-1).min().item():.2f}"
""")

entry("sdpa_float16_computed_in_float16", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    row_max = scores.max(dim=-1, keepdim=True).values.detach()
    row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    weights = torch.exp(scores - row_max)
    total = weights.sum(dim=-1, keepdim=True)
    weights = weights / torch.where(total == 0, torch.ones_like(total), total)
    return weights @ v, weights
'''}, "Computes everything in the arguments' dtype: in float16 q k^T overflows to inf when scores are near 1e4 and "
   "d = 64, giving NaN, against 'compute inside in float32 where sums and exponentials in the lower dtype would lose "
   "too much, then convert the answer'.",
      shown_by="""
g = torch.Generator().manual_seed(1)
q, k = (100 * torch.randn(2, 5, 64, generator=g)).half(), (100 * torch.randn(2, 7, 64, generator=g)).half()
v = torch.randn(2, 7, 4, generator=g).half()
out, w = scaled_dot_product_attention(q, k, v)
ref, rw = spec.scaled_dot_product_attention(q, k, v)
shown = bool(out.isnan().any()) or H.maxdiff(out, ref) > 1e-2
detail = f"float16, d = 64, scores ~1e4: {int(out.isnan().sum())} NaN of {out.numel()} outputs (the spec: {int(ref.isnan().sum())})"
""")

entry("sdpa_empty_rows_fixed_in_mask", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    empty = None
    if mask is not None:
        empty = ~mask.any(dim=-1, keepdim=True)     # queries that may attend to no key
        mask |= empty                               # let them see every key for now: no -inf row, no NaN
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if empty is not None:
        weights = weights.masked_fill(empty, 0.0)   # ... and give them zero weights afterwards
    return (weights @ v).to(dtype), weights.to(dtype)
'''}, "Avoids NaN on fully masked rows by OR-ing them into the caller's mask in place (mask |= empty): the mask "
   "comes back with those rows all True, against 'leave every argument as it is, mask included' ('a mask with rows "
   "all False included').",
      shown_by="""
g = torch.Generator().manual_seed(3)
q, k, v = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 6, generator=g)
mask = torch.tensor([[True, True, False, False, False], [False] * 5, [True] * 5])
before = mask.clone()
out, w = scaled_dot_product_attention(q, k, v, mask)
changed = int((mask != before).sum())
shown = changed > 0
detail = f"{changed} entries of the caller's mask turned True (its empty row)"
""")

entry("sdpa_view_to_flatten_heads", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    *lead, Lq, d = q.shape
    Lk, dv = k.shape[-2], v.shape[-1]
    q3 = q.view(-1, Lq, d).float() if dtype in (torch.float16, torch.bfloat16) else q.view(-1, Lq, d)
    k3 = k.view(-1, Lk, d).to(q3.dtype)
    v3 = v.view(-1, Lk, dv).to(q3.dtype)
    scores = torch.bmm(q3, k3.transpose(1, 2)).view(*lead, Lq, Lk) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    out = torch.bmm(weights.view(-1, Lq, Lk), v3).view(*lead, Lq, dv)
    return out.to(dtype), weights.to(dtype)
'''}, "Flattens the batch and head dimensions with view for bmm: a q that is a transposed view (as a head split "
   "gives) cannot be viewed and it raises, against 'a tensor argument may be a view that is not contiguous ... use "
   "reshape, not view'.",
      shown_by="""
g = torch.Generator().manual_seed(4)
q = torch.randn(2, 5, 3, 8, generator=g).transpose(1, 2)         # (B, H, L, d), not contiguous
k = torch.randn(2, 5, 3, 8, generator=g).transpose(1, 2)
v = torch.randn(2, 5, 3, 4, generator=g).transpose(1, 2)
err = H.raises(scaled_dot_product_attention, q, k, v)
shown = err is not None
detail = f"q, k, v of shape (2, 3, 5, d) transposed from (2, 5, 3, d): {err}"
""")

entry("sdpa_bmm_mask_tiled_in_wrong_order", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    lead, Lq, d, Lk, dv = q.shape[:-2], q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    q3 = q.reshape(-1, Lq, d).to(work)                  # every (batch, head) pair side by side
    k3 = k.reshape(-1, Lk, d).to(work)
    v3 = v.reshape(-1, Lk, dv).to(work)
    n = q3.shape[0]
    scores = torch.bmm(q3, k3.transpose(1, 2)) / math.sqrt(d)
    if mask is not None:
        m3 = mask
        if mask.dim() > 2:
            m3 = mask.reshape(-1, *mask.shape[-2:])
            if m3.shape[0] != n:
                m3 = m3.repeat(n // m3.shape[0], 1, 1)  # the same mask for every head
        scores = scores.masked_fill(~m3, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    out = torch.bmm(weights, v3)
    return out.reshape(*lead, Lq, dv).to(dtype), weights.reshape(*lead, Lq, Lk).to(dtype)
'''}, "Flattens (batch, heads) for bmm and tiles a (B, 1, Lq, Lk) padding mask with repeat, which orders it "
   "head-major while the scores are batch-major: with B > 1 and several heads each sequence gets another one's "
   "mask, against 'masks ... broadcast from (B, 1, Lq, Lk)'.",
      shown_by="""
g = torch.Generator().manual_seed(5)
q, k, v = torch.randn(2, 3, 4, 8, generator=g), torch.randn(2, 3, 6, 8, generator=g), torch.randn(2, 3, 6, 5, generator=g)
mask = torch.ones(2, 1, 4, 6, dtype=torch.bool)
mask[0, ..., 4:] = False                               # sequence 0 ends in 2 padding keys
mask[1, ..., :1] = False                               # sequence 1 starts with one
out, w = scaled_dot_product_attention(q, k, v, mask)
ref, rw = spec.scaled_dot_product_attention(q, k, v, mask)
gap = H.maxdiff(w, rw)
shown = gap > 1e-3
detail = f"B = 2, 3 heads, padding mask (B, 1, Lq, Lk): weights off by {gap:.3f}"
""")

entry("sdpa_normaliser_under_no_grad", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    with torch.no_grad():            # the shift and the normaliser are per-row constants: no gradient through them
        m = scores.amax(dim=-1, keepdim=True)
        m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    e = torch.exp(scores - m)
    with torch.no_grad():
        total = e.sum(dim=-1, keepdim=True)
        total = torch.where(total == 0, torch.ones_like(total), total)
    weights = e / total
    return (weights @ v).to(dtype), weights.to(dtype)
'''}, "Puts the softmax's denominator under torch.no_grad() along with the max shift: the forward pass is right "
   "but q and k get wrong gradients, against 'no .detach(), .data or torch.no_grad() on a path by which an input "
   "changes an output' (only the max shift may be detached).",
      shown_by="""
g = torch.Generator().manual_seed(6)
base = [torch.randn(2, 4, 8, generator=g, dtype=torch.float64), torch.randn(2, 6, 8, generator=g, dtype=torch.float64),
        torch.randn(2, 6, 3, generator=g, dtype=torch.float64)]
r = torch.randn(2, 4, 3, generator=g, dtype=torch.float64)
grads = []
for f in (scaled_dot_product_attention, spec.scaled_dot_product_attention):
    args = [t.clone().requires_grad_() for t in base]
    (f(*args)[0] * r).sum().backward()
    grads.append(args[0].grad)
gap = H.maxdiff(grads[0], grads[1])
shown = gap > 1e-6
detail = f"gradient of q off by {gap:.3f} (float64)"
""")

entry("causal_mask_lru_cache", "mistake", {"causal_mask": '''
import functools


@functools.lru_cache(maxsize=None)
def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    # built once per (seq_len, device): a model asks for the same mask at every layer and step
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()
'''}, "Memoises the mask with functools.lru_cache, so every call with the same length hands out the same tensor: a "
   "caller who edits one mask edits the next, against 'Every result is a new tensor ... no cache that hands out the "
   "same tensor twice'.",
      shown_by="""
first = causal_mask(5)
first[0, 4] = True                                   # a caller edits its mask in place
second = causal_mask(5)
shown = not torch.equal(second, spec.causal_mask(5))
detail = f"the second causal_mask(5) has row 0 = {second[0].int().tolist()}, the same tensor: {second is first}"
""")

entry("causal_mask_slices_a_prebuilt_512", "mistake", {"causal_mask": '''
MAX_LEN = 512
_CAUSAL = torch.ones(MAX_LEN, MAX_LEN, dtype=torch.bool).tril()     # built once, like a registered buffer


def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    return _CAUSAL[:seq_len, :seq_len].to(device)
'''}, "Slices a lower triangle built once for 512 positions: 600 positions get a 512 x 512 mask, and on the CPU the "
   "result is a view of the shared tensor, against 'for sequences of any length, past a few hundred positions too' "
   "and 'every result is a new tensor'.",
      shown_by="""
long = causal_mask(600)
a = causal_mask(4)
a.fill_(False)
b = causal_mask(4)
shown = tuple(long.shape) != (600, 600) or not torch.equal(b, spec.causal_mask(4))
detail = f"causal_mask(600) has shape {tuple(long.shape)}; after a caller clears one 4 x 4 mask the next has {int(b.sum())} True (10 expected)"
""")

entry("mha_out_proj_always_biased", "mistake", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"{n_heads} heads do not divide d_model = {d_model}")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key=None, value=None, mask=None):
        if key is None:
            key = query
        if value is None:
            value = key
        B, Lq, d_model = query.shape
        Lk = key.shape[1]
        q = self.q_proj(query).reshape(B, Lq, self.n_heads, self.d_head).transpose(1, 2)
        k = self.k_proj(key).reshape(B, Lk, self.n_heads, self.d_head).transpose(1, 2)
        v = self.v_proj(value).reshape(B, Lk, self.n_heads, self.d_head).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, d_model))
'''}, "Passes bias=bias to the three input projections but builds out_proj with its default bias: with bias=False it "
   "still has a bias (and an extra state_dict entry), against 'four nn.Linear(d_model, d_model, bias=bias) layers'.",
      shown_by="""
mha = MultiHeadAttention(16, 4, bias=False)
extra = sorted(name for name, _ in mha.named_parameters() if name.endswith("bias"))
shown = bool(extra)
detail = f"MultiHeadAttention(16, 4, bias=False) still has {extra}"
""")

entry("mha_fused_weight_frozen_at_init", "mistake", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        self.d_model, self.n_heads = d_model, n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        # self-attention: one matmul for q, k and v together instead of three
        self.w_qkv = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]).detach()
        self.b_qkv = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]).detach() if bias else None

    def forward(self, query, key=None, value=None, mask=None):
        B, Lq, _ = query.shape
        if key is None and value is None:
            q, k, v = nn.functional.linear(query, self.w_qkv, self.b_qkv).chunk(3, dim=-1)
        else:
            key = query if key is None else key
            value = key if value is None else value
            q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        heads = lambda t: t.reshape(B, t.shape[1], self.n_heads, -1).transpose(1, 2)
        out, _ = scaled_dot_product_attention(heads(q), heads(k), heads(v), mask)
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, self.d_model))
'''}, "Caches a detached concatenation of the q, k, v weights in __init__ for fused self-attention: weights loaded "
   "later (state_dict, training) never reach it and no gradient reaches q_proj, k_proj, v_proj, against 'answers "
   "the same when made anew and given its state_dict()' and 'gradients reach every parameter'.",
      shown_by="""
torch.manual_seed(7)
mine, ref = MultiHeadAttention(16, 4), spec.MultiHeadAttention(16, 4)
H.randomize(ref)
mine.load_state_dict(ref.state_dict())
x = torch.randn(2, 5, 16)
gap = H.maxdiff(mine(x), ref(x))
shown = gap > 1e-4
detail = f"given another module's state_dict, self-attention differs from it by {gap:.3f}"
""")

entry("blockwise_no_running_max", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    l = torch.zeros_like(q[..., :1])                                  # running sum of exp(s)
    a = q.new_zeros(*q.shape[:-1], v.shape[-1])                       # running sum of exp(s) v
    i = torch.arange(Lq, device=q.device).unsqueeze(1)
    for start in range(0, Lk, block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(d)
        if causal:
            j = torch.arange(start, start + kb.shape[-2], device=q.device)
            s = s.masked_fill(j > i, float("-inf"))
        p = torch.exp(s)                  # every term relative to 0, so no rescaling between blocks is needed
        l = l + p.sum(-1, keepdim=True)
        a = a + p @ vb
    return a / l
'''}, "Drops the running maximum altogether (exp(s) relative to 0, so no rescaling): right for small scores, but "
   "scores near 1e4 overflow to inf and give NaN, against 'scores around 1e4 do not overflow'.",
      shown_by="""
g = torch.Generator().manual_seed(8)
q, k, v = 100 * torch.randn(1, 6, 8, generator=g), 100 * torch.randn(1, 20, 8, generator=g), torch.randn(1, 20, 4, generator=g)
out = blockwise_attention(q, k, v, block_size=8)
ref = spec.blockwise_attention(q, k, v, block_size=8)
shown = H.maxdiff(out, ref) > 1e-3
detail = f"scores ~1e4: {int(out.isnan().sum())} NaN of {out.numel()} outputs"
""")

entry("blockwise_running_max_starts_at_zero", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5
    m = torch.zeros(*q.shape[:-1], 1, dtype=q.dtype, device=q.device)    # running max (0: no -inf - -inf = NaN)
    l = torch.zeros_like(m)
    a = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    rows = torch.arange(Lq, device=q.device)[:, None]
    for start in range(0, Lk, block_size):
        s = (q @ k[..., start:start + block_size, :].transpose(-2, -1)) * scale
        if causal:
            cols = torch.arange(start, start + s.shape[-1], device=q.device)
            s = s.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        c = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ v[..., start:start + block_size, :]
        m = m_new
    return a / l
'''}, "Starts the running maximum at 0 instead of -inf to dodge -inf - (-inf): when every score of a row is far "
   "below 0 all its exponentials underflow, l = 0 and the output is NaN, against 'rows whose every score is far "
   "below 0 do not underflow'.",
      shown_by="""
g = torch.Generator().manual_seed(9)
q = torch.full((1, 3, 4), 50.0)
k = -50.0 - 50.0 * torch.rand(1, 10, 4, generator=g)           # every score between -1e4 and -5e3
v = torch.randn(1, 10, 2, generator=g)
out = blockwise_attention(q, k, v, block_size=4)
ref = spec.blockwise_attention(q, k, v, block_size=4)
shown = H.maxdiff(out, ref) > 1e-4
detail = f"every score ~ -7e3: {int(out.isnan().sum())} NaN of {out.numel()} outputs"
""")

entry("blockwise_state_made_on_cpu", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    *lead, Lq, d = q.shape
    Lk, dv = k.shape[-2], v.shape[-1]
    m = torch.full((*lead, Lq, 1), float("-inf"), dtype=q.dtype)
    l = torch.zeros((*lead, Lq, 1), dtype=q.dtype)
    a = torch.zeros((*lead, Lq, dv), dtype=q.dtype)
    for start in range(0, Lk, block_size):
        end = min(start + block_size, Lk)
        s = q @ k[..., start:end, :].transpose(-2, -1) / math.sqrt(d)
        if causal:
            s = s.masked_fill(torch.arange(start, end)[None, :] > torch.arange(Lq)[:, None], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        c = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe)
        l = c * l + p.sum(-1, keepdim=True)
        a = c * a + p @ v[..., start:end, :]
        m = m_new
    return a / l
'''}, "Creates the running max, sum and output with torch.full / torch.zeros without device=: they live on the CPU "
   "whatever q's device, so a call on 'meta' (or a GPU) fails, against 'make new tensors with device=x.device'.",
      shown_by="""
q, k, v = (torch.empty(2, 9, 8, device="meta") for _ in range(3))
err = H.raises(blockwise_attention, q, k, v, False, 4)
shown = err is not None
detail = f"q, k, v on 'meta': {err}"
""")

entry("blockwise_scales_q_in_place_and_back", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    scale = math.sqrt(q.shape[-1])
    q.div_(scale)                          # scale q once, in place: no extra copy of q for long sequences
    Lq, Lk = q.shape[-2], k.shape[-2]
    m = torch.full_like(q[..., :1], float("-inf"))
    l = torch.zeros_like(q[..., :1])
    a = q.new_zeros(*q.shape[:-1], v.shape[-1])
    qi = torch.arange(Lq, device=q.device).view(-1, 1)
    for start in range(0, Lk, block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1)
        if causal:
            kj = torch.arange(start, start + s.shape[-1], device=q.device)
            s = s.masked_fill(kj > qi, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_ok = m_new.masked_fill(m_new == float("-inf"), 0.0)
        c = torch.exp(m - m_ok)
        p = torch.exp(s - m_ok)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ v[..., start:start + block_size, :]
        m = m_new
    q.mul_(scale)                          # ... and put it back
    return a / l
'''}, "Scales q in place to save a copy and multiplies it back at the end: the round trip is not exact in floating "
   "point, so the caller's q comes back changed in its last bits, against 'does not modify q, k or v'.",
      shown_by="""
g = torch.Generator().manual_seed(10)
q, k, v = torch.randn(2, 16, 7, generator=g), torch.randn(2, 20, 7, generator=g), torch.randn(2, 20, 3, generator=g)
before = q.clone()
blockwise_attention(q, k, v, block_size=8)
changed = int((q != before).sum())
shown = changed > 0
detail = f"{changed} of {q.numel()} entries of q changed (largest change {H.maxdiff(q, before):.1e})"
""")

entry("blockwise_float32_scores", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    qf = q.float() / math.sqrt(d)                    # float32 is plenty for scores and running sums
    m = torch.full((*q.shape[:-1], 1), float("-inf"), device=q.device)
    l = torch.zeros((*q.shape[:-1], 1), device=q.device)
    a = torch.zeros((*q.shape[:-1], v.shape[-1]), device=q.device)
    rows = torch.arange(Lq, device=q.device)[:, None]
    for start in range(0, Lk, block_size):
        kb = k[..., start:start + block_size, :].float()
        vb = v[..., start:start + block_size, :].float()
        s = qf @ kb.transpose(-2, -1)
        if causal:
            s = s.masked_fill(torch.arange(start, start + kb.shape[-2], device=q.device) > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
        c, p = torch.exp(m - shift), torch.exp(s - shift)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ vb
        m = m_new
    return (a / l).to(q.dtype)
'''}, "Works in float32 whatever the inputs and converts the answer back: float64 inputs get a float64 tensor with "
   "only float32's precision, against 'block_size = 1, = Lk and > Lk, in float64' and 'float32 or float64'.",
      shown_by="""
g = torch.Generator().manual_seed(11)
q, k, v = (torch.randn(2, 13, 8, generator=g, dtype=torch.float64), torch.randn(2, 29, 8, generator=g, dtype=torch.float64),
           torch.randn(2, 29, 5, generator=g, dtype=torch.float64))
out = blockwise_attention(q, k, v, block_size=8)
ref = spec.blockwise_attention(q, k, v, block_size=8)
gap = H.maxdiff(out, ref)
shown = gap > 1e-10
detail = f"float64 inputs: {out.dtype}, off by {gap:.1e}"
""")

# ----------------------------------------------------------------------------------------------------------------
# Correct answers written another way
# ----------------------------------------------------------------------------------------------------------------

entry("sdpa_einsum_where_nan_to_num", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    out_dtype = q.dtype
    if out_dtype in (torch.float16, torch.bfloat16):      # exp and sums in float32, answer in the input's dtype
        q, k, v = q.float(), k.float(), v.float()
    scores = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)          # rows with no key: 0/0 -> 0
    out = torch.einsum("...ij,...jd->...id", weights, v)
    return out.to(out_dtype), weights.to(out_dtype)
'''}, "einsum for both products, torch.where for the mask and torch.nan_to_num for rows with no key (the notebook's "
   "second hint); torch.softmax already subtracts each row's maximum.")

entry("sdpa_logsumexp", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    low = q.dtype in (torch.float16, torch.bfloat16)
    qf, kf, vf = (t.float() for t in (q, k, v)) if low else (q, k, v)
    scores = torch.matmul(qf, kf.transpose(-1, -2)) / math.sqrt(qf.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)            # log of the softmax's denominator, stable
    lse = lse.masked_fill(torch.isneginf(lse), 0.0)                # a row with no key: every exp is 0 anyway
    weights = torch.exp(scores - lse)
    out = torch.matmul(weights, vf)
    return out.to(q.dtype), weights.to(q.dtype)


# my own quick check against the formula
_q, _k, _v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
_o, _w = scaled_dot_product_attention(_q, _k, _v)
print("max |weights - softmax| =", (_w - (_q @ _k.transpose(-1, -2) / 2).softmax(-1)).abs().max().item())
'''}, "Normalises with torch.logsumexp (weights = exp(scores - lse)), with lse = -inf of an empty row replaced by 0, "
   "and ends the cell with a small self-check print.")

entry("sdpa_bmm_on_flattened_heads", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    lead, (Lq, d), (Lk, dv) = q.shape[:-2], q.shape[-2:], v.shape[-2:]
    q3 = q.to(work).reshape(-1, Lq, d)               # (N, Lq, d), N = all the leading dimensions together
    k3 = k.to(work).reshape(-1, Lk, d)
    v3 = v.to(work).reshape(-1, Lk, dv)
    scores = torch.bmm(q3, k3.transpose(1, 2)) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask.expand(*lead, Lq, Lk).reshape(-1, Lq, Lk), float("-inf"))
    m = scores.max(dim=-1, keepdim=True).values.detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(scores - m)
    s = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(s > 0, s, torch.ones_like(s))
    out = torch.bmm(weights, v3)
    return out.reshape(*lead, Lq, dv).to(dtype), weights.reshape(*lead, Lq, Lk).to(dtype)
'''}, "Flattens the leading dimensions with reshape and uses bmm, expanding the mask to the full leading shape "
   "before flattening it the same way (so a (B, 1, Lq, Lk) mask lines up with each sequence's heads).")

entry("causal_mask_arange_comparison", "correct", {"causal_mask": '''
def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    pos = torch.arange(seq_len, device=device)
    return pos.unsqueeze(0) <= pos.unsqueeze(1)          # [i, j]: j <= i


print(causal_mask(4).int())
'''}, "Compares two aranges (key j <= query i) made on the device, and prints a small mask at the end of the cell.")

entry("mha_unflatten_permute_helpers", "correct", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads != 0:
            raise ValueError(f"n_heads ({n_heads}) must divide d_model ({d_model})")
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))

    def split_heads(self, x):
        """(B, L, d_model) -> (B, n_heads, L, d_head): columns h*d_head ... belong to head h."""
        return x.unflatten(-1, (self.n_heads, self.d_head)).permute(0, 2, 1, 3)

    def merge_heads(self, x):
        """(B, n_heads, L, d_head) -> (B, L, d_model)."""
        return x.permute(0, 2, 1, 3).flatten(-2)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        q = self.split_heads(self.q_proj(query))
        k = self.split_heads(self.k_proj(key))
        v = self.split_heads(self.v_proj(value))
        heads, _ = scaled_dot_product_attention(q, k, v, mask=mask)
        return self.out_proj(self.merge_heads(heads))
'''}, "Builds the four projections with setattr in a loop and splits/merges heads with unflatten/permute/flatten "
   "helper methods; the mask goes to scaled_dot_product_attention by keyword.")

entry("blockwise_logsumexp_state", "correct", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    inv_sqrt_d = 1.0 / math.sqrt(q.shape[-1])
    # State: the log of the running sum of exp(scores) and the output already normalised by it.
    lse = torch.full((*q.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)
    out = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    qi = torch.arange(Lq, device=q.device).unsqueeze(-1)
    for start in range(0, Lk, block_size):
        stop = min(start + block_size, Lk)
        s = torch.matmul(q, k[..., start:stop, :].transpose(-1, -2)) * inv_sqrt_d
        if causal:
            s = torch.where(torch.arange(start, stop, device=q.device) <= qi, s, -math.inf)
        new_lse = torch.logaddexp(lse, torch.logsumexp(s, dim=-1, keepdim=True))
        safe = new_lse.masked_fill(torch.isneginf(new_lse), 0.0)
        out = out * torch.exp(lse - safe) + torch.exp(s - safe) @ v[..., start:stop, :]
        lse = new_lse
    return out
'''}, "Keeps the running log-sum-exp and an already normalised output (logaddexp per block, torch.where for the "
   "causal mask) instead of m, l and a; no final division.")

entry("blockwise_float64_blocks", "correct", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    out_dtype = q.dtype
    qd = q.double() * (1.0 / math.sqrt(q.shape[-1]))         # the running statistics in float64, to be safe
    Lq, Lk = q.shape[-2], k.shape[-2]
    m = qd.new_full((*q.shape[:-1], 1), -math.inf)
    l = qd.new_zeros((*q.shape[:-1], 1))
    acc = qd.new_zeros((*q.shape[:-1], v.shape[-1]))
    i = torch.arange(Lq, device=q.device)
    start = 0
    while start < Lk:
        kb = k[..., start:start + block_size, :].double()
        vb = v[..., start:start + block_size, :].double()
        s = qd @ kb.transpose(-2, -1)
        if causal:
            j = torch.arange(start, start + kb.shape[-2], device=q.device)
            s = s.masked_fill(j.unsqueeze(0) > i.unsqueeze(1), -math.inf)
        block_max = s.amax(dim=-1, keepdim=True)
        m_new = torch.maximum(m, block_max)
        ref = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        factor = torch.exp(m - ref)
        p = torch.exp(s - ref)
        l = factor * l + p.sum(dim=-1, keepdim=True)
        acc = factor * acc + p @ vb
        m = m_new
        start += block_size
    return (acc / l).to(out_dtype)
'''}, "Runs the blocks in float64 whatever the input dtype (a while loop over key blocks) and converts the answer "
   "back to q's dtype.")

entry("blockwise_skips_future_blocks", "correct", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    last = min(Lk, Lq) if causal else Lk        # causal: key j >= Lq is visible to no query, skip those blocks
    m = q.new_full(q.shape[:-1] + (1,), float("-inf"))
    l = q.new_zeros(q.shape[:-1] + (1,))
    a = q.new_zeros(q.shape[:-1] + (v.shape[-1],))
    for start in range(0, last, block_size):
        end = min(start + block_size, last)
        s = q @ k[..., start:end, :].transpose(-2, -1) / math.sqrt(d)
        if causal:
            future = torch.ones(Lq, end - start, dtype=torch.bool, device=q.device).triu(1 - start)
            s = s.masked_fill(future, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        c = torch.exp(m - m_new)                 # m_new is finite: key 0 is visible to every query
        p = torch.exp(s - m_new)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ v[..., start:end, :]
        m = m_new
    return a / l
'''}, "With causal=True stops at key min(Lk, Lq) (no query sees later keys) and builds each block's mask with "
   "triu(1 - start); since key 0 is visible to every query, the running max is finite after the first block.")

# ----------------------------------------------------------------------------------------------------------------
# Slow or memory-hungry
# ----------------------------------------------------------------------------------------------------------------

entry("sdpa_loop_over_queries", "slow", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    Lq, Lk = q.shape[-2], k.shape[-2]
    full = None if mask is None else mask.expand(*q.shape[:-2], Lq, Lk)
    outs, rows = [], []
    for i in range(Lq):                                     # one query at a time, as in the formula
        s = (q[..., i:i + 1, :] @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])     # (..., 1, Lk)
        if full is not None:
            s = s.masked_fill(~full[..., i:i + 1, :], float("-inf"))
        w = torch.softmax(s, dim=-1).nan_to_num(0.0)
        rows.append(w)
        outs.append(w @ v)
    return torch.cat(outs, dim=-2).to(dtype), torch.cat(rows, dim=-2).to(dtype)
'''}, "Loops over query positions in Python, one row of scores at a time: right, but far over 'at most 3x the "
   "reference solution's time' ('no Python loop over positions').",
      shown_by="""
torch.manual_seed(12)
q, k, v = torch.randn(3, 1, 2, 256, 16).unbind(0)          # the book's graded size
r = H.time_ratio(scaled_dot_product_attention, spec.scaled_dot_product_attention, q, k, v)
shown = r > 3
detail = f"(1, 2, 256, 16): {r:.1f}x the spec's CPU time"
""")

entry("sdpa_scores_by_broadcast_product", "slow", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    # s_ij = sum_c q_ic k_jc, written as in the formula: (..., Lq, 1, d) * (..., 1, Lk, d), summed over d
    scores = (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(dim=-1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    out = (weights.unsqueeze(-1) * v.unsqueeze(-3)).sum(dim=-2)       # sum_j w_ij v_j
    return out.to(dtype), weights.to(dtype)
'''}, "Builds the scores and the output from broadcast products summed over a dimension, materialising "
   "(..., Lq, Lk, d) and (..., Lq, Lk, dv) tensors: vectorised but several times the reference's time.",
      shown_by="""
torch.manual_seed(13)
q, k, v = torch.randn(3, 1, 2, 256, 32).unbind(0)
r = H.time_ratio(scaled_dot_product_attention, spec.scaled_dot_product_attention, q, k, v)
shown = r > 3
detail = f"(1, 2, 256, 32): {r:.1f}x the spec's CPU time"
""")

entry("sdpa_loop_over_batch_and_heads", "slow", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    lead, Lq, Lk = q.shape[:-2], q.shape[-2], k.shape[-2]
    q3 = q.reshape(-1, Lq, q.shape[-1])
    k3 = k.reshape(-1, Lk, k.shape[-1])
    v3 = v.reshape(-1, Lk, v.shape[-1])
    m3 = None if mask is None else mask.expand(*lead, Lq, Lk).reshape(-1, Lq, Lk)
    outs, ws = [], []
    for n in range(q3.shape[0]):                    # one (sequence, head) matrix at a time
        qn, kn, vn = q3[n].float(), k3[n].float(), v3[n].float()
        if dtype == torch.float64:
            qn, kn, vn = q3[n], k3[n], v3[n]
        s = qn @ kn.T / math.sqrt(q.shape[-1])
        if m3 is not None:
            s = s.masked_fill(~m3[n], float("-inf"))
        w = torch.softmax(s, dim=-1).nan_to_num(0.0)
        ws.append(w)
        outs.append(w @ vn)
    out = torch.stack(outs).reshape(*lead, Lq, v.shape[-1])
    return out.to(dtype), torch.stack(ws).reshape(*lead, Lq, Lk).to(dtype)
'''}, "Loops in Python over every (sequence, head) pair and attends one matrix at a time: with many short sequences "
   "the per-call overhead makes it several times the reference's time (the text grades 'batches and heads').",
      shown_by="""
torch.manual_seed(14)
q, k, v = torch.randn(3, 8, 8, 16, 16).unbind(0)           # 8 sequences, 8 heads, 16 positions
r = H.time_ratio(scaled_dot_product_attention, spec.scaled_dot_product_attention, q, k, v)
shown = r > 3
detail = f"(8, 8, 16, 16): {r:.1f}x the spec's CPU time"
""")

entry("blockwise_full_scores_first", "slow", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])      # all the scores once, then the online softmax
    if causal:
        scores = scores.masked_fill(torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    l = q.new_zeros((*q.shape[:-1], 1))
    a = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    for start in range(0, Lk, block_size):
        s = scores[..., start:start + block_size]
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = m_new.masked_fill(m_new == float("-inf"), 0.0)
        c = torch.exp(m - safe)
        p = torch.exp(s - safe)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ v[..., start:start + block_size, :]
        m = m_new
    return a / l
'''}, "Computes the whole Lq x Lk matrix of scores up front and only runs the online softmax over its column "
   "blocks: the right output, but 'never the whole Lq x Lk score matrix; extra memory O(Lq * block_size)' is broken.",
      shown_by="""
torch.manual_seed(15)
q, k, v = torch.randn(3, 1024, 16).unbind(0)
mine = H.largest_bytes(blockwise_attention, q, k, v)
ref = H.largest_bytes(spec.blockwise_attention, q, k, v)
shown = mine >= 1024 * 1024 * 4 and mine > 4 * ref
detail = f"Lq = Lk = 1024: largest tensor {mine / 2**20:.1f} MiB against the spec's {ref / 2**20:.2f} MiB"
""")
