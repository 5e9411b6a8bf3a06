"""Blind corpus, attention: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# ---------------------------------------------------------------- scaled_dot_product_attention
entry("sdpa_half_without_upcast", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    m = scores.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = (scores - m).exp()
    s = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(s == 0, torch.ones_like(s), s)
    return weights @ v, weights
'''}, "Everything in the inputs' dtype: a float16 row of exponentials is summed in float16, and the weights and the "
      "output lose far more than float16's own rounding ('compute inside in float32 where sums and exponentials in "
      "the lower dtype would lose too much, then convert the answer').",
      shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 16, 300, 32, generator=g) for _ in range(3))
q, k, v = (t.half() for t in (q, k, v))
truth_out, truth_w = spec.scaled_dot_product_attention(q.double(), k.double(), v.double())
out, w = scaled_dot_product_attention(q, k, v)
sout, sw = spec.scaled_dot_product_attention(q, k, v)
mine, theirs = H.maxdiff(out, truth_out), H.maxdiff(sout, truth_out)
shown = mine > 2 * theirs
detail = f"float16, Lk = 300: output error {mine:.2e} against float64 truth (computing in float32: {theirs:.2e})"
''')

entry("sdpa_transpose_1_2", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    out_dtype = q.dtype
    if q.dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    d = q.size(-1)
    scores = torch.matmul(q, k.transpose(1, 2)) / d ** 0.5       # (B, Lq, d) @ (B, d, Lk)
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    row_max = scores.max(dim=-1, keepdim=True).values.detach()
    row_max = row_max.masked_fill(torch.isneginf(row_max), 0.0)
    e = torch.exp(scores - row_max)
    total = e.sum(-1, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)
    weights = e / total
    return (weights @ v).to(out_dtype), weights.to(out_dtype)
'''}, "k.transpose(1, 2) is k^T only for 3-d (B, L, d) inputs, all the visible checks use: with heads, (B, H, L, d), it "
      "swaps heads and positions ('the leading dimensions ... (batch, heads)').",
      shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(3))
err = H.raises(scaled_dot_product_attention, q, k, v)
if err is None:
    d = H.maxdiff(scaled_dot_product_attention(q, k, v)[0], spec.scaled_dot_product_attention(q, k, v)[0])
    shown, detail = d > 1e-4, f"(B, H, L, d) inputs: off by {d:.3f}"
else:
    shown, detail = True, f"(B, H, L, d) = (2, 3, 5, 8) inputs: {err}"
''')

entry("sdpa_empty_rows_cpu_zeros", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(torch.isnan(weights), torch.zeros(1, dtype=work), weights)   # rows with no key
    return (weights @ v).to(dtype), weights.to(dtype)
'''}, "Replaces the NaN rows with torch.zeros(1), a one-element tensor made on the CPU: on any other device (the "
      "hidden tests use 'meta') torch.where refuses to mix it ('make new tensors with device=x.device').",
      shown_by='''
q, k, v = (torch.empty(2, 4, 8, device="meta") for _ in range(3))
err = H.raises(scaled_dot_product_attention, q, k, v)
shown = err is not None
detail = f"q, k, v on meta: {err}"
''')

entry("sdpa_max_before_mask", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    in_dtype = q.dtype
    q, k, v = (t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores - scores.amax(-1, keepdim=True).detach()      # stability first
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = scores.exp()
    z = e.sum(-1, keepdim=True)
    weights = torch.where(z > 0, e / z, torch.zeros_like(e))
    return (weights @ v).to(in_dtype), weights.to(in_dtype)
'''}, "Subtracts the row maximum before masking, so the maximum may be a masked key's: when the masked keys have the "
      "largest scores (around 1e4), every visible key's exponential underflows and the row comes out all zeros "
      "('scores around 1e4 do not overflow, with and without a mask (whose masked keys have the largest scores)').",
      shown_by='''
q = torch.tensor([[[100.0, 0.0]]])
k = torch.tensor([[[200.0, 0.0], [1.0, 0.0], [2.0, 0.0]]])       # key 0 scores ~1.4e4 but is masked
v = torch.randn(1, 3, 4)
mask = torch.tensor([False, True, True])
_, w = scaled_dot_product_attention(q, k, v, mask)
_, want = spec.scaled_dot_product_attention(q, k, v, mask)
shown = H.maxdiff(w, want) > 1e-3
detail = f"masked key with the largest score: weights {w.flatten().tolist()} vs {[round(x, 4) for x in want.flatten().tolist()]}"
''')

entry("sdpa_bmm_flattened_reshape", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    *lead, Lq, d = q.shape
    Lk, dv = k.shape[-2], v.shape[-1]
    wide = q.dtype if q.dtype in (torch.float32, torch.float64) else torch.float32
    q3 = q.to(wide).reshape(-1, Lq, d)
    k3 = k.to(wide).reshape(-1, Lk, d)
    v3 = v.to(wide).reshape(-1, Lk, dv)
    scores = torch.bmm(q3, k3.transpose(1, 2)) * (1.0 / math.sqrt(d))
    if mask is not None:
        allowed = mask.expand(*lead, Lq, Lk).reshape(-1, Lq, Lk)
        scores = scores.masked_fill(~allowed, float("-inf"))
    peak = scores.amax(2, keepdim=True).detach().nan_to_num(neginf=0.0)
    e = torch.exp(scores - peak)
    denom = e.sum(2, keepdim=True)
    w = e / torch.where(denom > 0, denom, torch.ones_like(denom))
    out = torch.bmm(w, v3)
    return out.reshape(*lead, Lq, dv).to(q.dtype), w.reshape(*lead, Lq, Lk).to(q.dtype)
'''}, "Flattens the leading dimensions with reshape and uses torch.bmm, the mask expanded and reshaped to match, the "
      "empty rows' -inf maximum turned to 0 by nan_to_num(neginf=0): the same weights and outputs.")

entry("sdpa_softmax_where_any", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dt = q.dtype
    if dt in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    s = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.shape[-1])
    if mask is None:
        w = torch.softmax(s, dim=-1)
    else:
        s = s.masked_fill(~mask, float("-inf"))
        w = torch.softmax(s, dim=-1)                       # NaN in rows with no key ...
        w = torch.where(mask.any(-1, keepdim=True), w, 0.0)   # ... which get zero weights instead
    out = torch.einsum("...ij,...jd->...id", w, v)
    return out.to(dt), w.to(dt)
'''}, "torch.softmax (which subtracts the maximum itself) and einsum; rows with no allowed key are replaced by zeros "
      "with torch.where on mask.any(-1): same values, and the gradients through where are those of the spec.")

# ---------------------------------------------------------------- causal_mask
entry("causal_triu_transposed", "correct", {"causal_mask": '''
def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    upper = torch.ones(seq_len, seq_len, device=device).triu()     # j >= i
    return upper.T.bool()                                          # transposed: j <= i
'''}, "The upper triangle of float ones, transposed, then made bool: the same lower triangle, on the device asked for.")

entry("causal_arange_to_device", "correct", {"causal_mask": '''
def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    idx = torch.arange(seq_len)
    return (idx[None, :] <= idx[:, None]).to(device)
'''}, "Built on the CPU and moved with .to(device) (a no-op for device=None): a fresh tensor every call, on the device "
      "asked for.")

# ---------------------------------------------------------------- MultiHeadAttention
entry("mha_value_defaults_to_query", "mistake", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        self.h = n_heads
        self.dk = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key=None, value=None, mask=None):
        if key is None:
            key = query
        if value is None:
            value = query
        B, Lq, D = query.shape
        Lk = key.shape[1]
        q = self.q_proj(query).reshape(B, Lq, self.h, self.dk).transpose(1, 2)
        k = self.k_proj(key).reshape(B, Lk, self.h, self.dk).transpose(1, 2)
        v = self.v_proj(value).reshape(B, Lk, self.h, self.dk).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, D))
'''}, "value defaults to query, not to key ('key defaults to query, value to key'): cross-attention called with a key "
      "and no value reads the queries' values (or fails when Lq != Lk).",
      shown_by='''
torch.manual_seed(0)
mha = MultiHeadAttention(16, 4)
ref = spec.MultiHeadAttention(16, 4)
H.load_mha(ref, mha)
x, mem = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
err = H.maxdiff(mha(x, mem), ref(x, mem))
shown = err > 1e-4
detail = f"mha(x, key) with Lq = Lk: off by {err:.3f}"
''')

entry("mha_dropout_before_out_proj", "mistake", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True, dropout=0.1):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"{n_heads} heads do not divide d_model = {d_model}")
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x):
        B, L, D = x.shape
        return x.reshape(B, L, self.n_heads, D // self.n_heads).transpose(1, 2)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        q, k, v = self._split(self.q_proj(query)), self._split(self.k_proj(key)), self._split(self.v_proj(value))
        heads, _ = scaled_dot_product_attention(q, k, v, mask)
        B, _, Lq, _ = heads.shape
        merged = heads.transpose(1, 2).reshape(B, Lq, -1)
        return self.out_proj(self.dropout(merged))
'''}, "Dropout before out_proj, as in the original Transformer: a fresh module is in training mode, so its output is "
      "random and differs from eval() ('answers the same in train() as in eval(): no dropout').",
      shown_by='''
torch.manual_seed(0)
mha = MultiHeadAttention(16, 4)
x = torch.randn(2, 5, 16)
mha.train()
a = mha(x)
mha.eval()
b = mha(x)
err = H.maxdiff(a, b)
shown = err > 1e-6
detail = f"train() vs eval(): outputs differ by {err:.3f}"
''')

entry("mha_einsum_projection_view_merge", "correct", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError("n_heads must divide d_model")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))

    def _heads(self, x, proj):
        B, L, _ = x.shape
        # the weight's rows h*d_head ... (h+1)*d_head - 1 are head h's features
        w = proj.weight.reshape(self.n_heads, self.d_head, -1)
        y = torch.einsum("bld,hed->bhle", x, w)
        if proj.bias is not None:
            y = y + proj.bias.reshape(1, self.n_heads, 1, self.d_head)
        return y

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        q = self._heads(query, self.q_proj)
        k = self._heads(key, self.k_proj)
        v = self._heads(value, self.v_proj)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        B, _, Lq, _ = out.shape
        return self.out_proj(out.transpose(1, 2).contiguous().view(B, Lq, -1))
'''}, "Projects straight into heads with one einsum over the weight reshaped to (n_heads, d_head, d_model), adds the "
      "bias per head, merges with contiguous().view: the same module, the same parameters.")

entry("mha_loop_over_heads", "slow", {"MultiHeadAttention": '''
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
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        if mask is not None and mask.dim() == 4:
            mask = mask[:, 0]                              # (B, Lq, Lk): the same for every head
        heads = []
        for h in range(self.n_heads):                      # head h owns columns h*d_head .. (h+1)*d_head - 1
            cols = slice(h * self.d_head, (h + 1) * self.d_head)
            out, _ = scaled_dot_product_attention(q[..., cols], k[..., cols], v[..., cols], mask)
            heads.append(out)
        return self.out_proj(torch.cat(heads, dim=-1))
'''}, "Right values, one head at a time in a Python loop: n_heads calls of attention where one call does every head "
      "('runs your scaled_dot_product_attention on every head at once'; at most 3x the reference's time).",
      shown_by='''
torch.manual_seed(0)
mha, ref = MultiHeadAttention(64, 32), spec.MultiHeadAttention(64, 32)
H.load_mha(mha, ref)
x = torch.randn(4, 8, 64)
r = H.time_ratio(mha, ref, x, repeats=3)
shown = r > 3
detail = f"32 heads, B = 4, L = 8: {r:.1f}x the spec's CPU time"
''')

# ---------------------------------------------------------------- blockwise_attention
entry("bw_accumulator_like_q", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, d = q.shape[-2], q.shape[-1]
    Lk = k.shape[-2]
    m = torch.full_like(q[..., :1], float("-inf"))
    l = torch.zeros_like(q[..., :1])
    acc = torch.zeros_like(q)                                   # running output, one row per query
    i = torch.arange(Lq, device=q.device).unsqueeze(-1)
    for start in range(0, Lk, block_size):
        kb = k[..., start:start + block_size, :]
        vb = v[..., start:start + block_size, :]
        s = kb.new_zeros(0) if False else q @ kb.transpose(-1, -2) / math.sqrt(d)
        if causal:
            j = torch.arange(start, start + kb.shape[-2], device=q.device)
            s = s.masked_fill(j > i, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - shift)
        c = torch.exp(m - shift)
        l = l * c + p.sum(-1, keepdim=True)
        acc = acc * c + p @ vb
        m = m_new
    return acc / l
'''}, "The running output is zeros_like(q), of q's width d: right while v's width dv equals d (every visible check), "
      "but part 4 returns part 1's out, (..., Lq, dv), and dv may differ.",
      shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = torch.randn(2, 6, 8, generator=g), torch.randn(2, 9, 8, generator=g), torch.randn(2, 9, 3, generator=g)
err = H.raises(blockwise_attention, q, k, v, block_size=4)
shown = err is not None
detail = f"d = 8, dv = 3: {err}"
''')

entry("bw_state_on_default_device", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    *lead, Lq, d = q.shape
    Lk, dv = k.shape[-2], v.shape[-1]
    scale = d ** -0.5
    run_max = torch.full((*lead, Lq, 1), float("-inf"), dtype=q.dtype)
    run_sum = torch.zeros((*lead, Lq, 1), dtype=q.dtype)
    run_out = torch.zeros((*lead, Lq, dv), dtype=q.dtype)
    for start in range(0, Lk, block_size):
        stop = min(start + block_size, Lk)
        s = (q @ k[..., start:stop, :].transpose(-2, -1)) * scale
        if causal:
            qi = torch.arange(Lq, device=q.device)[:, None]
            kj = torch.arange(start, stop, device=q.device)[None, :]
            s = s.masked_fill(kj > qi, float("-inf"))
        new_max = torch.maximum(run_max, s.amax(dim=-1, keepdim=True))
        safe = new_max.masked_fill(new_max == float("-inf"), 0.0)
        corr = torch.exp(run_max - safe)
        p = torch.exp(s - safe)
        run_sum = run_sum * corr + p.sum(dim=-1, keepdim=True)
        run_out = run_out * corr + p @ v[..., start:stop, :]
        run_max = new_max
    return run_out / run_sum
'''}, "The running max, sum and output are made with torch.full/torch.zeros and a dtype but no device: on the CPU "
      "whatever the inputs' device, so a call on 'meta' (or a GPU) fails ('A result is made on its arguments' "
      "device').",
      shown_by='''
q, k, v = (torch.empty(1, 2, 8, 4, device="meta") for _ in range(3))
err = H.raises(blockwise_attention, q, k, v, block_size=4)
shown = err is not None
detail = f"q, k, v on meta: {err}"
''')

entry("bw_triu_offset_mask_exp2", "correct", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    log2e = 1.4426950408889634
    scale2 = log2e / math.sqrt(q.shape[-1])            # scores in base 2: exp(s) = 2^(s * log2 e)
    out = None
    for start in range(0, Lk, block_size):
        if causal and start >= Lq:                     # every later key is after every query
            break
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = (q @ kb.transpose(-2, -1)) * scale2
        if causal:
            # key start + c is after query r when c - r >= 1 - start: the triangle from diagonal 1 - start
            after = torch.ones(Lq, kb.shape[-2], dtype=torch.bool, device=q.device).triu(1 - start)
            s = s.masked_fill(after, float("-inf"))
        bmax = s.amax(-1, keepdim=True)
        if out is None:
            m = bmax
            p = torch.exp2(s - m)
            l, out = p.sum(-1, keepdim=True), p @ vb
        else:
            m_new = torch.maximum(m, bmax)
            c = torch.exp2(m - m_new)
            p = torch.exp2(s - m_new)
            l = l * c + p.sum(-1, keepdim=True)
            out = out * c + p @ vb
            m = m_new
    return out / l
'''}, "Scores in base 2 with exp2 (the FlashAttention trick), the causal mask of each block as a triu with offset "
      "1 - start, the first block initialising the state: the first block always holds key 0, which every query "
      "sees, so no -inf maximum ever needs guarding.")

entry("bw_key_by_key_loop", "slow", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    rows = torch.arange(Lq, device=q.device).unsqueeze(-1)
    m = q.new_full(q.shape[:-1] + (1,), float("-inf"))
    l = torch.zeros_like(m)
    a = q.new_zeros(q.shape[:-1] + (v.shape[-1],))
    for j in range(Lk):                                   # the online softmax, one key at a time: O(Lq) memory
        s = (q * k[..., j:j + 1, :]).sum(-1, keepdim=True) * scale
        if causal:
            s = s.masked_fill(rows < j, float("-inf"))
        m_new = torch.maximum(m, s)
        safe = m_new.masked_fill(torch.isinf(m_new), 0.0)
        c, p = torch.exp(m - safe), torch.exp(s - safe)
        l = l * c + p
        a = a * c + p * v[..., j:j + 1, :]
        m = m_new
    return a / l
'''}, "Right values with even less memory, but a Python loop over every key, ignoring block_size: ~10 torch "
      "operations per key ('a loop over key blocks, not over positions'; at most 3x the reference's time).",
      shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 2, 512, 16, generator=g) for _ in range(3))
r = H.time_ratio(lambda: blockwise_attention(q, k, v, block_size=64), lambda: spec.blockwise_attention(q, k, v, block_size=64), repeats=3)
shown = r > 5
detail = f"L = 512, block_size = 64: {r:.0f}x the spec's CPU time"
''')
