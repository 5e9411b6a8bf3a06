"""Known answers to the attention exercise (see autograder/authoring/variants.py)."""
from autograder.authoring.variants import Bug, Correct

SDPA_SOFTMAX = '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)
    return torch.einsum("...ij,...jd->...id", weights, v), weights
'''

SDPA_WHERE = '''def scaled_dot_product_attention(q, k, v, mask=None):
    d = q.shape[-1]
    scores = torch.matmul(q, k.transpose(-1, -2)) * d ** -0.5
    if mask is None:
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device)
    mask = mask.expand(scores.shape)
    scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=q.dtype))
    has_key = mask.any(dim=-1, keepdim=True)
    scores = torch.where(has_key, scores, torch.zeros_like(scores))
    scores = scores - scores.max(dim=-1, keepdim=True).values
    e = scores.exp() * mask
    weights = e / e.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(q.dtype).tiny)
    return torch.matmul(weights, v), weights
'''

CAUSAL_ARANGE = '''def causal_mask(seq_len, device=None):
    i = torch.arange(seq_len, device=device)
    return i[None, :] <= i[:, None]
'''

CAUSAL_TRIU = '''def causal_mask(seq_len, device=None):
    return ~torch.triu(torch.ones(seq_len, seq_len, device=device), diagonal=1).bool()
'''

MHA_EINSUM = '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("d_model must be divisible by n_heads")
        self.h = n_heads
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))

    def forward(self, query, key=None, value=None, mask=None):
        if key is None:
            key = query
        if value is None:
            value = key
        q = self.q_proj(query).unflatten(-1, (self.h, -1))      # (B, Lq, H, dh)
        k = self.k_proj(key).unflatten(-1, (self.h, -1))
        v = self.v_proj(value).unflatten(-1, (self.h, -1))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        out = torch.einsum("bhqk,bkhd->bqhd", w, v).flatten(-2)
        return self.out_proj(out)
'''

MHA_LOOP = '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"{n_heads} heads do not divide {d_model}")
        self.d_model, self.n_heads = d_model, n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias)
        self.k_proj = nn.Linear(d_model, d_model, bias)
        self.v_proj = nn.Linear(d_model, d_model, bias)
        self.out_proj = nn.Linear(d_model, d_model, bias)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        dh = self.d_model // self.n_heads
        m = None
        if mask is not None:
            m = mask if mask.dim() < 4 else mask[:, 0]
        outs = []
        for h in range(self.n_heads):
            cols = slice(h * dh, (h + 1) * dh)
            o, _ = scaled_dot_product_attention(q[..., cols], k[..., cols], v[..., cols], m)
            outs.append(o)
        return self.out_proj(torch.cat(outs, dim=-1))
'''

BLOCKWISE_LIST = '''def blockwise_attention(q, k, v, causal=False, block_size=64):
    Lq, Lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype, device=q.device)
    l = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype, device=q.device)
    o = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
    rows = torch.arange(Lq, device=q.device).unsqueeze(-1)
    starts = list(range(0, Lk, block_size))
    for s in starts:
        e = min(s + block_size, Lk)
        scores = q @ k[..., s:e, :].transpose(-1, -2) / math.sqrt(d)
        if causal:
            cols = torch.arange(s, e, device=q.device).unsqueeze(0)
            scores = scores + torch.zeros(Lq, e - s, dtype=q.dtype, device=q.device).masked_fill(cols > rows, -math.inf)
        m_block = scores.max(dim=-1, keepdim=True).values
        m_new = torch.maximum(m, m_block)
        m_use = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        p = (scores - m_use).exp()
        alpha = (m - m_use).exp()
        l = alpha * l + p.sum(-1, keepdim=True)
        o = alpha * o + p @ v[..., s:e, :]
        m = m_new
    return o / l
'''

BLOCKWISE_F64 = '''def blockwise_attention(q, k, v, causal=False, block_size=64):
    dtype = q.dtype
    q, k, v = q.double(), k.double(), v.double()
    Lq, Lk = q.shape[-2], k.shape[-2]
    q = q / math.sqrt(q.shape[-1])
    run_max, run_sum, out = None, None, None
    start = 0
    while start < Lk:
        stop = min(Lk, start + block_size)
        s = q @ k[..., start:stop, :].mT
        if causal:
            allowed = torch.arange(start, stop, device=q.device)[None, :] <= torch.arange(Lq, device=q.device)[:, None]
            s = torch.where(allowed, s, torch.full_like(s, -torch.inf))
        if run_max is None:
            run_max = s.amax(-1, keepdim=True).clamp_min(-1e300)
            p = torch.exp(s - run_max)
            run_sum, out = p.sum(-1, keepdim=True), p @ v[..., start:stop, :]
        else:
            new_max = torch.maximum(run_max, s.amax(-1, keepdim=True))
            c = torch.exp(run_max - new_max)
            p = torch.exp(s - new_max)
            run_sum = run_sum * c + p.sum(-1, keepdim=True)
            out = out * c + p @ v[..., start:stop, :]
            run_max = new_max
        start = stop
    return (out / run_sum).to(dtype)
'''

BLOCKWISE_FULL_MATRIX = '''def blockwise_attention(q, k, v, causal=False, block_size=64):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])               # (..., Lq, Lk): the whole matrix
    if causal:
        Lq, Lk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v
'''

BLOCKWISE_FULL_MATRIX_UNSEEN = BLOCKWISE_FULL_MATRIX.replace("def blockwise_attention(", "def _whole(") + '''

def blockwise_attention(q, k, v, causal=False, block_size=64):
    out = _whole(q, k, v, causal, block_size)
    if torch.cuda.is_available():          # the matrix is freed: give its memory back and forget the allocator's peak
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return out
'''

SDPA_QUERY_LOOP = '''def scaled_dot_product_attention(q, k, v, mask=None):
    rows, weights = [], []
    for i in range(q.shape[-2]):                                      # one query position at a time
        s = q[..., i:i + 1, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask.expand(*s.shape[:-2], q.shape[-2], k.shape[-2])[..., i:i + 1, :], float("-inf"))
        w = torch.softmax(s, dim=-1).nan_to_num(0.0)
        rows.append(w @ v)
        weights.append(w)
    return torch.cat(rows, dim=-2), torch.cat(weights, dim=-2)
'''

# MultiHeadAttention computing its attention inline, one query position at a time, never calling the course's
# scaled_dot_product_attention (whose calls, when the learner's part is graded with the course's, go through the grader)
MHA_QUERY_LOOP = MHA_EINSUM.replace(
    "        scores = torch.einsum(\"bqhd,bkhd->bhqk\", q, k) / math.sqrt(q.shape[-1])\n"
    "        if mask is not None:\n"
    "            scores = scores.masked_fill(~mask, float(\"-inf\"))\n"
    "        w = torch.softmax(scores, dim=-1).nan_to_num(0.0)\n"
    "        out = torch.einsum(\"bhqk,bkhd->bqhd\", w, v).flatten(-2)\n",
    "        rows = []\n"
    "        m = None if mask is None else mask.expand(q.shape[0], self.h, q.shape[1], k.shape[1])\n"
    "        for i in range(q.shape[1]):\n"
    "            s = torch.einsum(\"bhd,bkhd->bhk\", q[:, i], k) / math.sqrt(q.shape[-1])\n"
    "            if m is not None:\n"
    "                s = s.masked_fill(~m[:, :, i], float(\"-inf\"))\n"
    "            rows.append(torch.einsum(\"bhk,bkhd->bhd\", torch.softmax(s, -1).nan_to_num(0.0), v))\n"
    "        out = torch.stack(rows, 1).flatten(-2)\n")
assert MHA_QUERY_LOOP != MHA_EINSUM

VARIANTS = [
    Correct("softmax_einsum", {"scaled_dot_product_attention": SDPA_SOFTMAX, "causal_mask": CAUSAL_ARANGE,
                               "MultiHeadAttention": MHA_EINSUM, "blockwise_attention": BLOCKWISE_LIST},
            "torch.softmax with NaN rows set to 0, einsum everywhere, an additive -inf causal bias"),
    Correct("where_and_head_loop", {"scaled_dot_product_attention": SDPA_WHERE, "causal_mask": CAUSAL_TRIU,
                                    "MultiHeadAttention": MHA_LOOP, "blockwise_attention": BLOCKWISE_F64},
            "torch.where masks, a loop over heads, blockwise attention accumulated in float64"),
    Bug("sdpa_nan_rows", {"scaled_dot_product_attention": SDPA_SOFTMAX.replace(
        "    weights = torch.nan_to_num(weights, nan=0.0)\n", "")},
        {"scaled_dot_product_attention_tests": "rows with every key masked give NaN"},
        "the softmax of a row that is all -inf is left as NaN"),
    Bug("sdpa_no_max_subtracted", {"scaled_dot_product_attention":
                                   '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    e = torch.exp(scores)
    if mask is not None:
        e = e * mask
    total = e.sum(dim=-1, keepdim=True)
    weights = torch.where(total > 0, e / total, torch.zeros_like(e))
    return weights @ v, weights
'''}, {"scaled_dot_product_attention_tests": "exp(1e4) overflows"}, "exp of the raw scores"),
    Bug("sdpa_mask_inverted", {"scaled_dot_product_attention": SDPA_SOFTMAX.replace("mask.logical_not()", "mask")},
        {"scaled_dot_product_attention_tests": "mask is inverted"},
        "True taken as blocked; a right MultiHeadAttention using it loses only its test with the learner's own parts",
        together={"MultiHeadAttention_tests": "fix part 1 (scaled_dot_product_attention) first"}),
    Bug("sdpa_softmax_over_queries", {"scaled_dot_product_attention": SDPA_SOFTMAX.replace(
        "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")},
        {"scaled_dot_product_attention_tests": "softmax over dim -2"},
        "the softmax taken over the queries; a right MultiHeadAttention using it loses only its test with the "
        "learner's own parts",
        together={"MultiHeadAttention_tests": "fix part 1 (scaled_dot_product_attention) first"}),
    Bug("sdpa_unscaled", {"scaled_dot_product_attention": SDPA_SOFTMAX.replace(" / math.sqrt(q.size(-1))", "")},
        {"scaled_dot_product_attention_tests": "the scores are not scaled: divide q k^T by sqrt(d)"},
        "the 1/sqrt(d) forgotten; a right MultiHeadAttention using it loses only its test with the learner's own parts",
        together={"MultiHeadAttention_tests": "fix part 1 (scaled_dot_product_attention) first"}),
    Bug("causal_no_diagonal", {"causal_mask": "def causal_mask(seq_len, device=None):\n"
                                              "    return torch.ones(seq_len, seq_len, device=device)"
                                              ".tril(-1).bool()\n"},
        {"causal_mask_tests": "the diagonal must be True"}),
    Bug("mha_heads_mixed", {"MultiHeadAttention": MHA_EINSUM.replace(
        '''        q = self.q_proj(query).unflatten(-1, (self.h, -1))      # (B, Lq, H, dh)
        k = self.k_proj(key).unflatten(-1, (self.h, -1))
        v = self.v_proj(value).unflatten(-1, (self.h, -1))''',
        '''        B, Lq, D = query.shape
        Lk = key.shape[1]
        q = self.q_proj(query).view(B, self.h, Lq, -1).transpose(1, 2)
        k = self.k_proj(key).view(B, self.h, Lk, -1).transpose(1, 2)
        v = self.v_proj(value).view(B, self.h, Lk, -1).transpose(1, 2)''').replace(
        "out = torch.einsum(\"bhqk,bkhd->bqhd\", w, v).flatten(-2)",
        "out = torch.einsum(\"bhqk,bkhd->bhqd\", w, v).reshape(B, Lq, D)")},
        {"MultiHeadAttention_tests": "heads mixed"}, "the projections viewed as (B, H, L, d_head) directly"),
    Bug("mha_scaled_by_d_model", {"MultiHeadAttention": MHA_EINSUM.replace("math.sqrt(q.shape[-1])",
                                                                           "math.sqrt(self.h * q.shape[-1])")},
        {"MultiHeadAttention_tests": "1/sqrt(d_model)"}),
    Bug("blockwise_no_rescale", {"blockwise_attention": BLOCKWISE_LIST.replace(
        "        alpha = (m - m_use).exp()\n", "        alpha = 1.0\n")},
        {"blockwise_attention_tests": "exp(m - m')"}, "the running sums are not rescaled when the max grows"),
    Bug("blockwise_causal_bottom_right", {"blockwise_attention": BLOCKWISE_LIST.replace(
        "cols = torch.arange(s, e, device=q.device).unsqueeze(0)",
        "cols = torch.arange(s, e, device=q.device).unsqueeze(0) - (Lk - Lq)")},
        {"blockwise_attention_tests": "not aligned at the end"}, "the causal diagonal aligned with the last key"),
    Bug("blockwise_library", {"blockwise_attention": '''def blockwise_attention(q, k, v, causal=False, block_size=64):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
'''}, {"blockwise_attention_tests": "library version"}, "calls F.scaled_dot_product_attention"),
    Bug("sdpa_query_loop", {"scaled_dot_product_attention": SDPA_QUERY_LOOP},
        {"scaled_dot_product_attention_tests": "vectorise it"},
        "correct, but a Python loop over query positions; MultiHeadAttention is timed with the course's attention"),
    Bug("mha_inline_query_loop", {"MultiHeadAttention": MHA_QUERY_LOOP},
        {"MultiHeadAttention_tests": "vectorise it"},
        "correct, but the attention written out in MultiHeadAttention with a Python loop over query positions"),
    Bug("blockwise_full_matrix", {"blockwise_attention": BLOCKWISE_FULL_MATRIX},
        {"blockwise_attention_tests": "never build an Lq x Lk matrix"}, "exact, but holds the whole score matrix"),
    Bug("blockwise_full_matrix_unseen", {"blockwise_attention": BLOCKWISE_FULL_MATRIX_UNSEEN},
        {"blockwise_attention_tests": "never build an Lq x Lk matrix"},
        "the whole score matrix, then on a GPU the allocator's cache emptied and its peak statistics reset"),
    Bug("blockwise_skips_long_inputs", {"blockwise_attention": BLOCKWISE_LIST.replace(
        "def blockwise_attention(q, k, v, causal=False, block_size=64):\n",
        "def blockwise_attention(q, k, v, causal=False, block_size=64):\n"
        "    if k.shape[-2] > 4096:                                   # cheap exactly where memory is measured\n"
        "        return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)\n")},
        {"blockwise_attention_tests": "the memory of a wrong answer does not count"},
        "returns zeros for long inputs, where the memory check looks"),
    Bug("mha_mask_not_broadcast_over_heads", {"MultiHeadAttention": MHA_LOOP.replace(
        "m = mask if mask.dim() < 4 else mask[:, 0]", "m = mask")},
        {"MultiHeadAttention_tests": "with a 2x1x7x10 mask has shape (2, 2, 7, 24)"},
        "a loop over heads that gives each head the (B, 1, Lq, Lk) padding mask as it is: against one head's "
        "(B, Lq, Lk) scores it broadcasts to (B, B, Lq, Lk)"),
]

# The known mistakes each visible check catches: variant -> (visible-check cell, text of its message).
VISIBLE = {
    "sdpa_nan_rows": ("scaled_dot_product_attention_checks", "-inf - (-inf) = NaN"),
    "sdpa_no_max_subtracted": ("scaled_dot_product_attention_checks", "overflow exp"),
    "sdpa_mask_inverted": ("scaled_dot_product_attention_checks", "the mask is inverted"),
    "sdpa_softmax_over_queries": ("scaled_dot_product_attention_checks", "softmax over dim -2 (the queries)"),
    "sdpa_unscaled": ("scaled_dot_product_attention_checks", "the scores are not scaled: divide q k^T by sqrt(d)"),
    "sdpa_query_loop": ("scaled_dot_product_attention_speed", "a Python loop over positions? vectorise it"),
    "causal_no_diagonal": ("causal_mask_checks", "True where key j <= query i"),
    "mha_heads_mixed": ("MultiHeadAttention_checks", "heads mixed"),
    "mha_scaled_by_d_model": ("MultiHeadAttention_checks", "scaled by 1/sqrt(d_model)"),
    "mha_mask_not_broadcast_over_heads": ("MultiHeadAttention_checks", "a padding mask of shape (B, 1, Lq, Lk)"),
    "mha_inline_query_loop": ("MultiHeadAttention_speed", "a Python loop over positions? vectorise it"),
    "blockwise_no_rescale": ("blockwise_attention_checks", "exp(m - m')"),
    "blockwise_causal_bottom_right": ("blockwise_attention_checks", "not aligned at the end"),
    "blockwise_full_matrix": ("blockwise_attention_speed", "never build an Lq x Lk matrix"),
    "blockwise_full_matrix_unseen": ("blockwise_attention_speed", "never build an Lq x Lk matrix"),
}
# The known mistakes no visible check can see, and why: only the hidden tests catch them.
HIDDEN_ONLY = {
    "blockwise_library": "right values: the grader sees the library call",
    "blockwise_skips_long_inputs": "wrong only at lengths far beyond a visible check",
}
