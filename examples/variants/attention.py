"""Known answers to the attention exercise (see autograder/authoring/variants.py)."""
from autograder.authoring.variants import Bug, Correct

SDPA_SOFTMAX = '''def scaled_dot_product_attention(q, k, v, mask=None):
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):                      # float32 inside, as the notebook asks
        q, k, v = q.float(), k.float(), v.float()
    scores = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)
    return torch.einsum("...ij,...jd->...id", weights, v).to(dtype), weights.to(dtype)
'''

SDPA_WHERE = '''def scaled_dot_product_attention(q, k, v, mask=None):
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):                      # float32 inside, as the notebook asks
        q, k, v = q.float(), k.float(), v.float()
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
    return torch.matmul(weights, v).to(dtype), weights.to(dtype)
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
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):                      # float32 inside, as the notebook asks
        q, k, v = q.float(), k.float(), v.float()
    rows, weights = [], []
    for i in range(q.shape[-2]):                                      # one query position at a time
        s = q[..., i:i + 1, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask.expand(*s.shape[:-2], q.shape[-2], k.shape[-2])[..., i:i + 1, :], float("-inf"))
        w = torch.softmax(s, dim=-1).nan_to_num(0.0)
        rows.append(w @ v)
        weights.append(w)
    return torch.cat(rows, dim=-2).to(dtype), torch.cat(weights, dim=-2).to(dtype)
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

BLOCKWISE_LSE = """def blockwise_attention(q, k, v, causal=False, block_size=64):
    Lq, Lk = q.shape[-2], k.shape[-2]
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)   # log of the running sum
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    rows = torch.arange(Lq, device=q.device)[:, None]
    for start in range(0, Lk, block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            cols = torch.arange(start, start + s.shape[-1], device=q.device)[None, :]
            s = s.masked_fill(cols > rows, float("-inf"))
        block_lse = torch.logsumexp(s, dim=-1)
        new_lse = torch.logaddexp(lse, block_lse)
        safe = torch.where(torch.isfinite(new_lse), new_lse, torch.zeros_like(new_lse))
        vb = v[..., start:start + block_size, :]
        out = out * torch.exp(lse - safe)[..., None] + torch.exp(s - safe[..., None]) @ vb
        lse = new_lse
    return out
"""


def changed(source: str, old: str, new: str) -> str:
    """`source` with `old` replaced by `new` (which must be there: a variant that changes nothing is no variant)."""
    assert old in source, old
    return source.replace(old, new)


def bug(name: str, cells: dict, cause: str, cell: str | None = None, together: dict | None = None, about: str = ""):
    """A known mistake whose graded cell names `cause` (the cell of the first part it changes unless `cell`)."""
    gid = f"{cell or next(iter(cells))}_tests"
    return Bug(name, cells, {gid: cause}, about, together=together or {}, cause=cause)


# Right everywhere, slow where the speed check's inputs hold many short heads: one small product per (batch, head).
SDPA_BATCH_HEAD_LOOP = '''def scaled_dot_product_attention(q, k, v, mask=None):
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):                      # float32 inside, as the notebook asks
        q, k, v = q.float(), k.float(), v.float()
    lead, Lq, Lk, dv = q.shape[:-2], q.shape[-2], k.shape[-2], v.shape[-1]
    qs, ks, vs = q.reshape(-1, Lq, q.shape[-1]), k.reshape(-1, Lk, k.shape[-1]), v.reshape(-1, Lk, dv)
    m = None if mask is None else mask.expand(*lead, Lq, Lk).reshape(-1, Lq, Lk)
    outs, weights = [q.new_zeros(0, Lq, dv)], [q.new_zeros(0, Lq, Lk)]
    for i in range(qs.shape[0]):                                      # one (batch, head) at a time
        s = qs[i] @ ks[i].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if m is not None:
            s = s.masked_fill(~m[i], float("-inf"))
        w = torch.softmax(s, dim=-1).nan_to_num(0.0)
        outs.append((w @ vs[i]).unsqueeze(0))
        weights.append(w.unsqueeze(0))
    out, w = torch.cat(outs).reshape(*lead, Lq, dv), torch.cat(weights).reshape(*lead, Lq, Lk)
    return out.to(dtype), w.to(dtype)
'''

# Right everywhere, slow on long sequences: the scores and the output are products broadcast to (..., Lq, Lk, d) and
# summed, d times the work and the memory of a matrix product.
SDPA_BROADCAST_PRODUCTS = '''def scaled_dot_product_attention(q, k, v, mask=None):
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):                      # float32 inside, as the notebook asks
        q, k, v = q.float(), k.float(), v.float()
    scores = (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(-1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    out = (w.unsqueeze(-1) * v.unsqueeze(-3)).sum(-2)
    return out.to(dtype), w.to(dtype)
'''


def observed(name: str, cells: dict, text: str, about: str = "", kind: str = "value"):
    """A known mistake only a measurement sees (time, memory, the library ban, a size no drawn call reaches): it names
    no cause."""
    return Bug(name, cells, {f"{next(iter(cells))}_tests": text}, about, kind=kind)


MHA_FIRST = {"MultiHeadAttention_tests": "fix part 1 (scaled_dot_product_attention) first"}
SLOW = "the time of the reference solution"
CALLED_PER_HEAD = "the reference solution calls it once"
MEMORY = "of extra memory, while the whole score matrix"
SDPA = "scaled_dot_product_attention"
MHA = "MultiHeadAttention"
BLOCK = "blockwise_attention"

SELF_CHECK_AND_PLOT = """

# a self-check against torch's own attention, and a look at the weights (only when the cell runs)
import matplotlib.pyplot as plt
import torch.nn.functional as F

_q, _k, _v = torch.randn(3, 2, 6, 8).unbind(0)
_causal = torch.ones(6, 6, dtype=torch.bool).tril()
_out, _w = scaled_dot_product_attention(_q, _k, _v, _causal)
assert torch.allclose(_out, F.scaled_dot_product_attention(_q, _k, _v, attn_mask=_causal), atol=1e-6)
plt.imshow(_w[0], cmap="Blues")
plt.title("causal attention weights")
plt.show()
"""
MHA_HONEST_IDIOMS = """import functools
import operator
import types

DEBUG = False


class MultiHeadAttention(nn.Module):
    \"\"\"Heads side by side, written with the idioms of a careful learner.\"\"\"

    def __init__(self, d_model: int, n_heads: int, bias: bool = True) -> None:
        nn.Module.__init__(self)
        if d_model % n_heads:
            raise ValueError(f"{n_heads} heads do not divide d_model = {d_model}")
        self.cfg = types.SimpleNamespace(d_model=d_model, n_heads=n_heads, d_head=d_model // n_heads)
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model, bias=bias)
                                                                for _ in range(4))
        self.split = lambda t: t.unflatten(-1, (n_heads, -1)).transpose(1, 2)
        self.calls = {"attention": 0}

    @classmethod
    def like(cls, other: "MultiHeadAttention") -> "MultiHeadAttention":
        return cls(other.cfg.d_model, other.cfg.n_heads)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        self.calls["attention"] += 1
        if DEBUG:
            print("attention", functools.reduce(operator.mul, query.shape, 1))
        q, k, v = self.split(self.q_proj(query)), self.split(self.k_proj(key)), self.split(self.v_proj(value))
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.transpose(1, 2).flatten(-2))
"""

VARIANTS = [
    Correct("softmax_einsum", {SDPA: SDPA_SOFTMAX, "causal_mask": CAUSAL_ARANGE, MHA: MHA_EINSUM,
                               BLOCK: BLOCKWISE_LIST},
            "torch.softmax with NaN rows set to 0, einsum everywhere, an additive -inf causal bias"),
    Correct("where_and_float64_blocks", {SDPA: SDPA_WHERE, "causal_mask": CAUSAL_TRIU, BLOCK: BLOCKWISE_F64},
            "torch.where masks, a causal mask negated from torch.triu, blockwise attention accumulated in float64"),
    Correct("log_sum_exp_state", {BLOCK: BLOCKWISE_LSE}, "an online softmax that keeps the log of the running sum"),
    Correct("self_check_and_plot", {SDPA: SDPA_SOFTMAX + SELF_CHECK_AND_PLOT},
            "the cell ends with a self-check against torch's attention and a matplotlib plot of the weights: "
            "matplotlib's own memory is not the blockwise part's"),
    Correct("honest_idioms", {MHA: MHA_HONEST_IDIOMS},
            "a forward-reference type hint, a dict key 'attention', nn.Module.__init__(self) with a lambda, "
            "functools.reduce(operator.mul, ...), types.SimpleNamespace, print under `if DEBUG:`"),
    bug("sdpa_nan_rows", {SDPA: changed(SDPA_SOFTMAX, "    weights = torch.nan_to_num(weights, nan=0.0)\n", "")},
        "the softmax of a row whose keys are all masked is NaN (0/0): such a query gets zero weights and a zero "
        "output"),
    bug("sdpa_no_max_subtracted", {SDPA: """def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    e = torch.exp(scores)
    if mask is not None:
        e = e * mask
    total = e.sum(dim=-1, keepdim=True)
    weights = torch.where(total > 0, e / total, torch.zeros_like(e))
    return weights @ v, weights
"""}, "the exponential of the raw scores overflows for large scores: subtract each row's largest score before exp"),
    bug("sdpa_mask_inverted", {SDPA: changed(SDPA_SOFTMAX, "mask.logical_not()", "mask")},
        "the mask is inverted: True means the query may attend to the key", together=MHA_FIRST),
    bug("sdpa_softmax_over_queries", {SDPA: changed(SDPA_SOFTMAX, "torch.softmax(scores, dim=-1)",
                                                    "torch.softmax(scores, dim=-2)")},
        "the softmax is taken over the queries (dim -2); each query's weights over the keys (dim -1) sum to 1",
        together=MHA_FIRST),
    bug("sdpa_unscaled", {SDPA: changed(SDPA_SOFTMAX, " / math.sqrt(q.size(-1))", "")},
        "the scores are not scaled: divide q k^T by sqrt(d)", together=MHA_FIRST),
    bug("sdpa_scaled_by_d", {SDPA: changed(SDPA_SOFTMAX, "math.sqrt(q.size(-1))", "q.size(-1)")},
        "the scores are divided by d; divide by sqrt(d)", together=MHA_FIRST),
    bug("sdpa_scale_from_values", {SDPA: changed(SDPA_SOFTMAX, "math.sqrt(q.size(-1))", "math.sqrt(v.size(-1))")},
        "the scale comes from the size of the values; it is sqrt(d), d = q.shape[-1], the size of queries and keys"),
    bug("sdpa_mask_after_softmax", {SDPA: """def scaled_dot_product_attention(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    if mask is not None:
        weights = weights * mask
    return weights @ v, weights
"""}, "the weights are zeroed after the softmax, so the allowed keys' weights no longer sum to 1: mask the scores "
      "(-inf) before the softmax", together=MHA_FIRST),
    bug("sdpa_softmax_float32", {SDPA: changed(SDPA_SOFTMAX, "torch.softmax(scores, dim=-1)",
                                               "torch.softmax(scores.float(), dim=-1).to(q.dtype)")},
        "the softmax is computed in float32: compute in the dtype of q (a float64 answer is held to float64's "
        "precision)"),
    bug("sdpa_writes_mask", {SDPA: """def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        empty = ~mask.any(dim=-1, keepdim=True)
        mask |= empty                            # rows with no key may see every key; their weights are zeroed below
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).masked_fill(empty, 0.0)
    return weights @ v, weights
"""}, "the mask is written into: it comes back changed where a row was all False; compute on a copy"),
    bug("sdpa_max_before_mask", {SDPA: """def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))      # the largest score, masked or not
    if mask is not None:
        e = e * mask
    total = e.sum(dim=-1, keepdim=True)
    weights = e / total.clamp_min(torch.finfo(q.dtype).tiny)
    return weights @ v, weights
"""}, "each row's largest score is taken before masking: when a masked key has the largest score the allowed keys' "
      "exponentials underflow to 0; take the maximum over the allowed keys"),
    bug("causal_no_diagonal", {"causal_mask": "def causal_mask(seq_len, device=None):\n"
                                              "    return torch.ones(seq_len, seq_len, device=device)"
                                              ".tril(-1).bool()\n"},
        "the diagonal is False: a position may attend to itself (key j <= query i)"),
    bug("causal_upper", {"causal_mask": changed(CAUSAL_ARANGE, "i[None, :] <= i[:, None]",
                                                "i[None, :] >= i[:, None]")},
        "the mask is the upper triangle: mask[i, j] (query i, key j) is True where j <= i, the lower triangle"),
    bug("causal_inverted", {"causal_mask": changed(CAUSAL_ARANGE, "i[None, :] <= i[:, None]",
                                                   "i[None, :] > i[:, None]")},
        "the mask is inverted: True (may attend) where key j <= query i"),
    bug("causal_ignores_device", {"causal_mask": changed(CAUSAL_ARANGE, "torch.arange(seq_len, device=device)",
                                                         "torch.arange(seq_len)")},
        "the mask is made on the default device, whatever `device` asks for"),
    bug("causal_table_128", {"causal_mask": """_TABLE = torch.ones(128, 128, dtype=torch.bool).tril()


def causal_mask(seq_len, device=None):
    return _TABLE[:seq_len, :seq_len].to(device)
"""}, "the mask is cut from a table made ahead for a fixed number of positions: a longer sequence needs a larger mask"),
    observed("causal_mask_cached", {"causal_mask": """import functools


@functools.lru_cache(maxsize=None)
def causal_mask(seq_len, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()
"""}, "a result must not share memory with an argument or with another call",
        "right values, but one mask handed out to every caller of a size (a blind corpus's: it was told its mask was "
        "cut from a table made for 128 positions, which its 300-position answer rules out)", kind="promise"),
    bug("mha_heads_mixed", {MHA: changed(changed(MHA_EINSUM,
        """        q = self.q_proj(query).unflatten(-1, (self.h, -1))      # (B, Lq, H, dh)
        k = self.k_proj(key).unflatten(-1, (self.h, -1))
        v = self.v_proj(value).unflatten(-1, (self.h, -1))""",
        """        B, Lq, D = query.shape
        Lk = key.shape[1]
        q = self.q_proj(query).view(B, self.h, Lq, -1).transpose(1, 2)
        k = self.k_proj(key).view(B, self.h, Lk, -1).transpose(1, 2)
        v = self.v_proj(value).view(B, self.h, Lk, -1).transpose(1, 2)"""),
        "out = torch.einsum(\"bhqk,bkhd->bqhd\", w, v).flatten(-2)",
        "out = torch.einsum(\"bhqk,bkhd->bhqd\", w, v).reshape(B, Lq, D)")},
        "the heads are cut from the positions: reshape each projection to (B, L, n_heads, d_head), then transpose to "
        "(B, n_heads, L, d_head)"),
    bug("mha_merge_mixed", {MHA: changed(MHA_EINSUM, "out = torch.einsum(\"bhqk,bkhd->bqhd\", w, v).flatten(-2)",
                                         "out = torch.einsum(\"bhqk,bkhd->bhqd\", w, v)"
                                         ".reshape(q.shape[0], q.shape[1], -1)")},
        "the heads are put back without transposing: (B, n_heads, Lq, d_head) goes to (B, Lq, n_heads, d_head) "
        "before the reshape to (B, Lq, d_model)"),
    bug("mha_scaled_by_d_model", {MHA: changed(MHA_EINSUM, "math.sqrt(q.shape[-1])",
                                               "math.sqrt(self.h * q.shape[-1])")},
        "the scores are scaled by 1/sqrt(d_model); each head scales by 1/sqrt(d_head)"),
    bug("mha_no_out_proj", {MHA: changed(MHA_EINSUM, "        return self.out_proj(out)\n", "        return out\n")},
        "out_proj is not applied to the heads put side by side"),
    bug("mha_keys_from_query", {MHA: changed(changed(MHA_EINSUM, "self.k_proj(key)", "self.k_proj(query)"),
                                             "self.v_proj(value)", "self.v_proj(query)")},
        "the keys and values are projected from `query`; they come from `key` and `value` when those are given"),
    bug("mha_mask_ignored", {MHA: changed(MHA_EINSUM, "        if mask is not None:\n"
                                          "            scores = scores.masked_fill(~mask, float(\"-inf\"))\n", "")},
        "the mask is not used: it goes to the attention of every head"),
    bug("mha_mask_not_broadcast_over_heads", {MHA: changed(MHA_LOOP, "m = mask if mask.dim() < 4 else mask[:, 0]",
                                                           "m = mask")},
        "a (B, 1, Lq, Lk) mask given as it is to each head's attention, whose scores are (B, Lq, Lk), broadcasts "
        "over the batch: drop its head dimension for one head, or run the heads together"),
    bug("blockwise_no_rescale", {BLOCK: changed(BLOCKWISE_LIST, "        alpha = (m - m_use).exp()\n",
                                                "        alpha = 1.0\n")},
        "when a block raises the running max from m to m', the running sum and output are not multiplied by "
        "exp(m - m') before the block's terms are added"),
    bug("blockwise_causal_bottom_right", {BLOCK: changed(BLOCKWISE_LIST,
                                                         "cols = torch.arange(s, e, device=q.device).unsqueeze(0)",
                                                         "cols = torch.arange(s, e, device=q.device)"
                                                         ".unsqueeze(0) - (Lk - Lq)")},
        "with causal=True and Lq != Lk the diagonal is aligned at the end; key j is visible to query i when j <= i, "
        "counted from the start of both (as F.scaled_dot_product_attention(is_causal=True))"),
    bug("blockwise_causal_ignored", {BLOCK: changed(BLOCKWISE_LIST, "        if causal:\n", "        if False:\n")},
        "causal=True is ignored"),
    bug("blockwise_causal_strict", {BLOCK: changed(BLOCKWISE_LIST, "cols > rows", "cols >= rows")},
        "with causal=True the diagonal is hidden: query i sees key j when j <= i, itself included"),
    bug("blockwise_drops_last_block", {BLOCK: changed(BLOCKWISE_LIST, "starts = list(range(0, Lk, block_size))",
                                                      "starts = list(range(0, Lk - block_size + 1, block_size))")},
        "the last, shorter block of keys is dropped: Lk need not be a multiple of block_size"),
    bug("blockwise_max_starts_at_zero", {BLOCK: changed(BLOCKWISE_LIST,
        "m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype, device=q.device)",
        "m = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype, device=q.device)")},
        "the running maximum starts at 0, not -inf: in a row whose every score is far below 0 each exp underflows "
        "and the row is 0/0"),
    observed("blockwise_library", {BLOCK: """def blockwise_attention(q, k, v, causal=False, block_size=64):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
"""}, "library version", "calls F.scaled_dot_product_attention", kind="library"),
    observed("sdpa_query_loop", {SDPA: SDPA_QUERY_LOOP}, SLOW,
             "correct, but a Python loop over query positions; MultiHeadAttention is timed with the course's "
             "attention", kind="speed"),
    observed("sdpa_batch_head_loop", {SDPA: SDPA_BATCH_HEAD_LOOP}, SLOW,
             "correct, but a Python loop over batch and heads: slow where there are many short heads", kind="speed"),
    observed("sdpa_broadcast_products", {SDPA: SDPA_BROADCAST_PRODUCTS}, SLOW,
             "correct, but scores and output made by broadcast products summed over d: slow on long sequences",
             kind="speed"),
    observed("mha_head_loop", {MHA: MHA_LOOP}, CALLED_PER_HEAD,
             "right values, but a Python loop over heads: one call of scaled_dot_product_attention per head, where "
             "the text runs it on every head at once", kind="speed"),
    observed("mha_inline_query_loop", {MHA: MHA_QUERY_LOOP}, SLOW,
             "correct, but the attention written out in MultiHeadAttention with a Python loop over query positions",
             kind="speed"),
    observed("blockwise_full_matrix", {BLOCK: BLOCKWISE_FULL_MATRIX}, MEMORY,
             "exact, but holds the whole score matrix", kind="memory"),
    observed("blockwise_full_matrix_unseen", {BLOCK: BLOCKWISE_FULL_MATRIX_UNSEEN}, MEMORY,
             "the whole score matrix, then on a GPU the allocator's cache emptied and its peak statistics reset",
             kind="memory"),
    observed("blockwise_causal_full_mask", {BLOCK: changed(BLOCKWISE_LIST, "    for s in starts:\n",
        "    if causal:                                               # the whole additive mask, made once\n"
        "        full = torch.zeros(Lq, Lk, dtype=q.dtype, device=q.device)\n"
        "        full = full.masked_fill(torch.arange(Lk, device=q.device)[None, :] > rows, -math.inf)\n"
        "    for s in starts:\n").replace(
        "            scores = scores + torch.zeros(Lq, e - s, dtype=q.dtype, device=q.device)"
        ".masked_fill(cols > rows, -math.inf)",
        "            scores = scores + full[:, s:e]")}, MEMORY,
        "exact, but with causal=True an additive Lq x Lk mask is built first", kind="memory"),
    observed("blockwise_skips_long_inputs", {BLOCK: changed(BLOCKWISE_LIST,
        "def blockwise_attention(q, k, v, causal=False, block_size=64):\n",
        "def blockwise_attention(q, k, v, causal=False, block_size=64):\n"
        "    if k.shape[-2] > 4096:                                   # cheap exactly where memory is measured\n"
        "        return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)\n")},
        "the memory of a wrong answer does not count", "returns zeros for long inputs, where the memory check looks",
        kind="memory"),
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
    "mha_head_loop": ("MultiHeadAttention_speed", "run it once, on every head at once"),
    "sdpa_scaled_by_d": ("scaled_dot_product_attention_checks", "the scores are divided by d"),
    "sdpa_scale_from_values": ("scaled_dot_product_attention_checks", "the scale comes from the size of the values"),
    "sdpa_mask_after_softmax": ("scaled_dot_product_attention_checks", "mask the scores (-inf) before the softmax"),
    "causal_upper": ("causal_mask_checks", "yours is the upper triangle"),
    "causal_inverted": ("causal_mask_checks", "yours is inverted"),
    "mha_merge_mixed": ("MultiHeadAttention_checks", "heads mixed"),
    "mha_no_out_proj": ("MultiHeadAttention_checks", "out_proj is not applied"),
    "mha_mask_ignored": ("MultiHeadAttention_checks", "the mask is ignored"),
    "blockwise_causal_ignored": ("blockwise_attention_checks", "causal=True is ignored"),
    "blockwise_causal_strict": ("blockwise_attention_checks", "query i sees the keys j <= i"),
    "blockwise_drops_last_block": ("blockwise_attention_checks", "the last, shorter block of keys is dropped"),
    "causal_ignores_device": ("causal_mask_checks", "made on the device asked for"),
    "blockwise_no_rescale": ("blockwise_attention_checks", "exp(m - m')"),
    "blockwise_causal_bottom_right": ("blockwise_attention_checks", "not aligned at the end"),
    "blockwise_full_matrix": ("blockwise_attention_speed", "never build an Lq x Lk matrix"),
    "blockwise_full_matrix_unseen": ("blockwise_attention_speed", "never build an Lq x Lk matrix"),
}
# The known mistakes no visible check can see, and why: only the hidden tests catch them.
HIDDEN_ONLY = {
    "blockwise_library": "right values: the grader sees the library call",
    "sdpa_batch_head_loop": "the visible self-check times one sequence of two heads, where a loop over them costs "
                            "nothing",
    "sdpa_broadcast_products": "the visible self-check's heads are 16 wide, where broadcast products cost a few times "
                               "torch's own attention, under its limit",
    "blockwise_skips_long_inputs": "wrong only at lengths far beyond a visible check",
    "sdpa_softmax_float32": "the visible checks use float32 inputs, where a float32 softmax is right",
    "sdpa_writes_mask": "the visible checks do not look at the mask after a call",
    "sdpa_max_before_mask": "wrong only when a masked key holds a row's largest score by far",
    "causal_table_128": "the visible checks stay within 128 positions",
    "causal_mask_cached": "the visible checks never change a mask they were given",
    "mha_keys_from_query": "the visible cross-attention check ends in a shape error, not a named failed check",
    "blockwise_max_starts_at_zero": "wrong only for rows whose every score is far below 0",
    "blockwise_causal_full_mask": "exact values: only the memory of a causal call shows it",
}

# The book's section that teaches each mistake, where it is not the one section its part's description names (the
# class report's re-teach link): `<page>#<id>`, book/<page>.md and the id Sphinx gives the heading.
SECTIONS = {
    "sdpa_nan_rows": "attention#rows-with-nothing-to-attend-to",
    "sdpa_no_max_subtracted": "attention#blockwise-attention-and-the-online-softmax",
    "sdpa_mask_inverted": "attention#masks",
    "sdpa_softmax_over_queries": "attention#a-soft-dictionary-lookup",
    "sdpa_unscaled": "attention#why-divide-by-sqrt-d",
    "sdpa_scaled_by_d": "attention#why-divide-by-sqrt-d",
    "sdpa_scale_from_values": "attention#why-divide-by-sqrt-d",
    "sdpa_mask_after_softmax": "attention#masks",
    "sdpa_softmax_float32": "attention#a-soft-dictionary-lookup",
    "sdpa_writes_mask": "attention#masks",
    "sdpa_max_before_mask": "attention#masks",
}
