"""Blind corpus for exercises/attention: scaled_dot_product_attention, causal_mask, MultiHeadAttention,
blockwise_attention.

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
# scaled_dot_product_attention
# ======================================================================================================================

entry("sdpa_scales_q_in_place", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    d = q.shape[-1]
    q /= math.sqrt(d)                                  # scale the queries first: smaller numbers to multiply
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    m = scores.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(scores - m)
    s = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(s == 0, torch.ones_like(s), s)
    return weights @ v, weights
'''}, why="Scales the queries with the in-place `q /= sqrt(d)`, so the caller's q is divided by sqrt(d) on every "
       "call (and a leaf q that requires grad raises).",
    shown_by='''
q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
before = q.clone()
out, w = scaled_dot_product_attention(q, k, v)
shown = not torch.equal(q, before) and H.maxdiff(out, spec.scaled_dot_product_attention(before, k, v)[0]) < 1e-5
detail = f"q changed by up to {H.maxdiff(q, before):.2f}"
''')

entry("sdpa_unmasks_empty_rows_in_place", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    empty = None
    if mask is not None:
        empty = ~mask.any(dim=-1, keepdim=True)       # queries with no key at all
        mask |= empty                                  # let them see every key for now (no NaN) ...
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if empty is not None:
        weights = weights.masked_fill(empty, 0.0)      # ... and give them zero weights after
    return weights @ v, weights
'''}, why="Avoids NaN on fully masked rows by switching those rows of the caller's mask to True in place "
       "(`mask |= empty`): the values are right but the mask argument is modified.",
    shown_by='''
q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
mask = torch.tensor([[True, True, False, False, False], [False] * 5, [True] * 5])
before = mask.clone()
out, w = scaled_dot_product_attention(q, k, v, mask)
want = spec.scaled_dot_product_attention(q, k, v, before)
shown = not torch.equal(mask, before) and H.maxdiff(w, want[1]) < 1e-6
detail = f"mask row 1 after the call: {mask[1].tolist()}"
''')

entry("sdpa_fill_minus_1e9", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)  # a very large negative number instead of -inf
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask.any(dim=-1, keepdim=True)   # a query with no key gets nothing
    return weights @ v, weights
'''}, why="Masks with -1e9 instead of -inf: float16 inputs raise (-1e9 does not fit in float16), and when every "
       "allowed score is below -1e9 the masked keys take the weight.",
    shown_by='''
q, k, v = (torch.randn(2, 3, 8).half(), torch.randn(2, 5, 8).half(), torch.randn(2, 5, 8).half())
mask = torch.tensor([True, True, False, True, False])
half_error = H.raises(scaled_dot_product_attention, q, k, v, mask)
spec_half = H.raises(spec.scaled_dot_product_attention, q, k, v, mask)
qb = torch.full((1, 1, 4), 1e5)                  # the allowed key's score is -2e10, far below 0
kb = torch.stack([torch.full((4,), -1e5), torch.zeros(4)])[None]
vb = torch.tensor([[[1.0], [2.0]]])
mb = torch.tensor([True, False])
w, w_ref = scaled_dot_product_attention(qb, kb, vb, mb)[1], spec.scaled_dot_product_attention(qb, kb, vb, mb)[1]
shown = half_error is not None and spec_half is None and H.maxdiff(w, w_ref) > 0.5
detail = f"float16 with a mask: {half_error}; scores -2e10: weights {w.flatten().tolist()} vs {w_ref.flatten().tolist()}"
''')

entry("sdpa_float32_internally", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    dtype = q.dtype
    scores = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])   # float32 for the softmax
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    row_max = scores.max(dim=-1, keepdim=True).values
    row_max = row_max.masked_fill(torch.isneginf(row_max), 0.0)
    e = (scores - row_max).exp()
    total = e.sum(dim=-1, keepdim=True)
    weights = (e / total.clamp(min=1e-30)).to(dtype)
    return weights @ v, weights
'''}, why="Computes scores and softmax in float32 and casts back: float64 inputs get float64 tensors with only "
       "float32 accuracy (~1e-7 instead of ~1e-16).",
    shown_by='''
q, k, v = (torch.randn(2, 13, 24, dtype=torch.float64), torch.randn(2, 97, 24, dtype=torch.float64),
           torch.randn(2, 97, 10, dtype=torch.float64))
out, w = scaled_dot_product_attention(q, k, v)
want_out, want_w = spec.scaled_dot_product_attention(q, k, v)
shown = out.dtype == torch.float64 and H.maxdiff(w, want_w) > 1e-10
detail = f"float64: weights differ by {H.maxdiff(w, want_w):.1e}"
''')

entry("sdpa_half_upcast_not_cast_back", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    if q.dtype in (torch.float16, torch.bfloat16):   # half precision: do the softmax in float32
        q, k, v = q.float(), k.float(), v.float()
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    mx = scores.amax(-1, keepdim=True)
    mx = torch.where(mx == float("-inf"), torch.zeros_like(mx), mx)
    p = torch.exp(scores - mx)
    z = p.sum(-1, keepdim=True)
    weights = p / torch.where(z > 0, z, torch.ones_like(z))
    return torch.matmul(weights, v), weights
'''}, why="Upcasts float16/bfloat16 inputs to float32 for the softmax and never casts back, so the answer is not in "
       "the dtype of q.",
    shown_by='''
q, k, v = (t.to(torch.bfloat16) for t in (torch.randn(2, 2, 5, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)))
out, w = scaled_dot_product_attention(q, k, v)
ref_out, ref_w = spec.scaled_dot_product_attention(q, k, v)
shown = out.dtype != q.dtype and ref_out.dtype == q.dtype
detail = f"bfloat16 q -> out {out.dtype}, weights {w.dtype}"
''')

entry("sdpa_d_from_axis_2", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    d_k = q.size(2)                                    # q is (batch, length, d_k)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    top = scores.amax(dim=-1, keepdim=True).nan_to_num(neginf=0.0)
    e = torch.exp(scores - top)
    weights = e / e.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)
    return torch.matmul(weights, v), weights
'''}, why="Reads d from axis 2, which is the key size only for 3-D inputs: with heads (B, H, L, d) it scales by "
       "sqrt(L) instead of sqrt(d).",
    shown_by='''
q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
w, want = scaled_dot_product_attention(q, k, v)[1], spec.scaled_dot_product_attention(q, k, v)[1]
shown = H.maxdiff(w, want) > 1e-3
detail = f"(B, H, L, d) inputs: weights differ by {H.maxdiff(w, want):.3f}"
''')

entry("sdpa_mask_after_exp", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores - scores.amax(dim=-1, keepdim=True)        # stable: subtract the row's maximum
    e = torch.exp(scores)
    if mask is not None:
        e = e * mask                                           # masked keys contribute nothing
    total = e.sum(dim=-1, keepdim=True)
    weights = torch.where(total > 0, e / total, torch.zeros_like(e))
    return weights @ v, weights
'''}, why="Subtracts the maximum over all keys, masked ones included, and masks the exponentials afterwards: when "
       "a masked key has a score far above the allowed ones (1e4 apart), the allowed keys' exponentials underflow "
       "to 0 and the query gets zero weights instead of weights summing to 1.",
    shown_by='''
q = torch.full((1, 1, 4), 100.0)
k = torch.stack([torch.full((4,), 50.0), torch.full((4,), -50.0), torch.zeros(4)])[None]   # scores 1e4, -1e4, 0
v = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]])
mask = torch.tensor([False, True, True])                  # the key with the largest score is masked
w, want = scaled_dot_product_attention(q, k, v, mask)[1], spec.scaled_dot_product_attention(q, k, v, mask)[1]
shown = H.maxdiff(w, want) > 0.5
detail = f"weights {w.flatten().tolist()} vs {want.flatten().tolist()}"
''')

entry("sdpa_sqrt_of_int_tensor", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / torch.sqrt(torch.tensor(d_k))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    max_score = scores.max(dim=-1, keepdim=True).values
    max_score = torch.where(torch.isfinite(max_score), max_score, torch.zeros_like(max_score))
    exp_scores = torch.exp(scores - max_score)
    sums = exp_scores.sum(dim=-1, keepdim=True)
    weights = exp_scores / torch.where(sums == 0, torch.ones_like(sums), sums)
    return weights @ v, weights
'''}, why="Divides by torch.sqrt(torch.tensor(d)), a float32 scalar: for float64 inputs the scale is rounded to "
       "float32 (e.g. sqrt(24) off by 4e-8 relative), so the answer misses float64 precision.",
    shown_by='''
q, k, v = (torch.randn(2, 13, 24, dtype=torch.float64), torch.randn(2, 97, 24, dtype=torch.float64),
           torch.randn(2, 97, 10, dtype=torch.float64))
w, want = scaled_dot_product_attention(q, k, v)[1], spec.scaled_dot_product_attention(q, k, v)[1]
shown = H.maxdiff(w, want) > 1e-10 and w.dtype == torch.float64
detail = f"float64, d = 24: weights differ by {H.maxdiff(w, want):.1e}"
''')

entry("sdpa_bmm_view_flatten", "mistake", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    *lead, Lq, d = q.shape
    Lk, dv = k.shape[-2], v.shape[-1]
    q3, k3, v3 = q.view(-1, Lq, d), k.view(-1, Lk, d), v.view(-1, Lk, dv)   # one batch of matrices for bmm
    scores = torch.bmm(q3, k3.transpose(1, 2)) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask.expand(*lead, Lq, Lk).reshape(-1, Lq, Lk), float("-inf"))
    m = scores.amax(dim=-1, keepdim=True)
    m = m.masked_fill(m == float("-inf"), 0.0)
    e = torch.exp(scores - m)
    total = e.sum(dim=-1, keepdim=True)
    weights = e / total.masked_fill(total == 0, 1.0)
    out = torch.bmm(weights, v3)
    return out.view(*lead, Lq, dv), weights.view(*lead, Lq, Lk)
'''}, why="Flattens the leading dimensions with .view to use torch.bmm, which raises on non-contiguous inputs such as "
       "the transposed (B, n_heads, L, d_head) heads that MultiHeadAttention passes in; the visible checks only use "
       "contiguous tensors.",
    shown_by='''
q, k, v = (torch.randn(2, L, 4, 8).transpose(1, 2) for L in (5, 7, 7))        # heads, as MultiHeadAttention makes them
err = H.raises(scaled_dot_product_attention, q, k, v)
mha_err = H.raises(MultiHeadAttention(16, 4), torch.randn(2, 5, 16))          # the notebook's MHA with this part 1
contiguous = [t.contiguous() for t in (q, k, v)]
shown = (err is not None and mha_err is not None and H.raises(spec.scaled_dot_product_attention, q, k, v) is None
         and H.maxdiff(scaled_dot_product_attention(*contiguous)[0], spec.scaled_dot_product_attention(q, k, v)[0]) < 1e-5)
detail = f"transposed heads: {err}; MultiHeadAttention with this part 1: {mha_err}"
''')

entry("sdpa_loop_over_queries", "slow", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if mask is not None:
        mask = mask.expand(*lead, Lq, Lk)
    outs, rows = [], []
    for i in range(Lq):                                # one query at a time
        s = (q[..., i:i + 1, :] @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])     # (..., 1, Lk)
        if mask is not None:
            s = s.masked_fill(~mask[..., i:i + 1, :], float("-inf"))
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        t = e.sum(-1, keepdim=True)
        w = e / torch.where(t == 0, torch.ones_like(t), t)
        rows.append(w)
        outs.append(w @ v)
    return torch.cat(outs, dim=-2), torch.cat(rows, dim=-2)
'''}, why="Right values, but a Python loop over query positions: the number of torch operations grows with Lq "
       "and it is many times slower than a vectorised version (the text allows at most 3x the reference).",
    shown_by='''
few = H.op_count(scaled_dot_product_attention, *torch.randn(3, 2, 16, 16).unbind(0))
many = H.op_count(scaled_dot_product_attention, *torch.randn(3, 2, 64, 16).unbind(0))
q, k, v = torch.randn(3, 1, 2, 128, 16).unbind(0)
ratio = H.time_ratio(scaled_dot_product_attention, spec.scaled_dot_product_attention, q, k, v)
shown = many >= 2 * few and ratio > 3
detail = f"{few} ops for 16 positions, {many} for 64; {ratio:.0f}x the spec's CPU time at 128 positions"
''')

entry("sdpa_softmax_nan_to_num", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)   # fully masked rows: NaN -> 0
    return weights @ v, weights
'''}, why="torch.softmax (which subtracts the row maximum itself) on -inf-masked scores, then nan_to_num turns the "
          "NaN rows of fully masked queries into zeros (the hint's second way).")

entry("sdpa_einsum_logsumexp", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    scores = torch.einsum("...id,...jd->...ij", q, k) * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)               # -inf for a row with no key
    lse = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    weights = torch.exp(scores - lse)
    out = torch.einsum("...ij,...jd->...id", weights, v)
    return out, weights
'''}, why="einsum for both products, torch.where for the mask, and weights = exp(scores - logsumexp) with the "
          "logsumexp of empty rows replaced by 0.")

entry("sdpa_prescaled_q_detached_max", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    q = q * (q.shape[-1] ** -0.5)                      # a new tensor, q itself is left alone
    s = torch.matmul(q, k.mT)
    if mask is not None:
        s = s.masked_fill(mask.logical_not(), -math.inf)
    shift = s.detach().amax(-1, keepdim=True)          # the shift does not change the softmax or its gradient
    shift = shift.masked_fill(shift == -math.inf, 0)
    e = (s - shift).exp()
    w = e / e.sum(-1, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)
    return torch.matmul(w, v), w
'''}, why="Scales q out of place before the product, uses .mT, detaches the row maximum (the softmax and its "
          "gradient do not depend on the shift), and divides by a sum clamped at the smallest positive float.")

entry("sdpa_with_selfcheck_and_plot", "correct", {"scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v, where mask (True = may attend) removes keys; returns (out, weights)."""
    d = q.shape[-1]
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    has_key = torch.isfinite(scores).any(dim=-1, keepdim=True)
    safe = torch.where(has_key, scores, torch.zeros_like(scores))
    weights = torch.softmax(safe, dim=-1) * has_key
    return torch.matmul(weights, v), weights


# self-check against torch's own attention (only when the cell runs)
import matplotlib.pyplot as plt
import torch.nn.functional as F

torch.manual_seed(0)
_q, _k, _v = torch.randn(3, 2, 6, 8).unbind(0)
_causal = torch.ones(6, 6, dtype=torch.bool).tril()
_out, _w = scaled_dot_product_attention(_q, _k, _v, _causal)
assert torch.allclose(_out, F.scaled_dot_product_attention(_q, _k, _v, attn_mask=_causal), atol=1e-6)
plt.imshow(_w[0].detach(), cmap="Blues")
plt.title("causal attention weights")
plt.show()
'''}, why="Rows with no finite score are replaced by zeros before torch.softmax and multiplied by 0 after; the cell "
          "ends with a self-check against F.scaled_dot_product_attention and a matplotlib plot.")


# ======================================================================================================================
# causal_mask
# ======================================================================================================================

entry("causal_lru_cache_shared", "mistake", {"causal_mask": '''
from functools import lru_cache


@lru_cache(maxsize=None)
def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))
'''}, why="lru_cache returns the same tensor to every caller: one that combines it in place with a padding mask "
       "(mask &= ...) changes every later causal mask of that size.",
    shown_by='''
m = causal_mask(6)
m &= torch.tensor([True, True, True, True, False, False])     # the caller adds padding in place
later = causal_mask(6)
shown = not torch.equal(later, spec.causal_mask(6))
detail = f"a later causal_mask(6) has {int(later.sum())} True entries instead of {int(spec.causal_mask(6).sum())}"
''')

entry("causal_ignores_device", "mistake", {"causal_mask": '''
def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    return torch.tril(torch.ones(seq_len, seq_len)).bool()
'''}, why="Ignores the device argument: the mask is always made on the CPU.",
    shown_by='''
out = causal_mask(5, device="meta")
shown = out.device.type == "cpu" and spec.causal_mask(5, device="meta").device.type == "meta"
detail = f"asked for meta, got {out.device}"
''')

entry("causal_precomputed_256", "mistake", {"causal_mask": '''
_CAUSAL = torch.ones(256, 256, dtype=torch.bool).tril()       # made once, sliced for every length


def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    mask = _CAUSAL[:seq_len, :seq_len]
    return mask if device is None else mask.to(device)
'''}, why="Slices a precomputed 256 x 256 triangle: past 256 positions the mask is too small, and without a device "
       "it returns a view of the shared table.",
    shown_by='''
out = causal_mask(300)
shown = tuple(out.shape) != (300, 300) and tuple(spec.causal_mask(300).shape) == (300, 300)
detail = f"causal_mask(300) has shape {tuple(out.shape)}"
''')

entry("causal_arange_comparison", "correct", {"causal_mask": '''
def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    i = torch.arange(seq_len, device=device)
    return i[None, :] <= i[:, None]                  # [i, j]: key j <= query i
'''}, why="Compares two aranges (j <= i) made on the device, instead of tril of ones.")

entry("causal_numpy_as_tensor", "correct", {"causal_mask": '''
import numpy as np


def causal_mask(seq_len, device=None):
    """mask[i, j] = True where key j <= query i: the lower triangle, diagonal included."""
    return torch.as_tensor(np.tril(np.ones((seq_len, seq_len), dtype=bool)), device=device)
'''}, why="np.tril of a bool array, converted with torch.as_tensor(..., device=device) (a new tensor each call).")


# ======================================================================================================================
# MultiHeadAttention
# ======================================================================================================================

entry("mha_out_proj_always_bias", "mistake", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, D = query.shape
        q = self.q_proj(query).view(B, Lq, self.n_heads, self.d_head).transpose(1, 2)
        k = self.k_proj(key).view(B, key.shape[1], self.n_heads, self.d_head).transpose(1, 2)
        v = self.v_proj(value).view(B, value.shape[1], self.n_heads, self.d_head).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, D))
'''}, why="out_proj is built without bias=bias, so MultiHeadAttention(..., bias=False) still has an output bias "
       "(an extra parameter, and a different result from nn.MultiheadAttention(bias=False) once it is not zero).",
    shown_by='''
mha = MultiHeadAttention(8, 2, bias=False)
names = sorted(n for n, _ in mha.named_parameters())
want = sorted(n for n, _ in spec.MultiHeadAttention(8, 2, bias=False).named_parameters())
shown = names != want and mha.out_proj.bias is not None
detail = f"bias=False parameters: {names}"
''')

entry("mha_value_projected_from_key", "mistake", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"{n_heads} heads do not divide d_model = {d_model}")
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _split(self, x):
        B, L, _ = x.shape
        return x.reshape(B, L, self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, query, key=None, value=None, mask=None):
        if key is None:
            key = query
        if value is None:
            value = key
        q = self._split(self.q_proj(query))
        k = self._split(self.k_proj(key))
        v = self._split(self.v_proj(key))
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        B, H, Lq, Dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, H * Dh))
'''}, why="Projects the values from key instead of value (a typo), so a value different from the key is ignored; "
       "every call in the visible checks has value = key.",
    shown_by='''
mha = MultiHeadAttention(16, 4)
ref = spec.MultiHeadAttention(16, 4)
H.load_mha(ref, mha)
x, key, value = torch.randn(2, 5, 16), torch.randn(2, 7, 16), torch.randn(2, 7, 16)
with torch.no_grad():
    diff = H.maxdiff(mha(x, key, value), ref(x, key, value))
shown = diff > 1e-3
detail = f"distinct value: max diff {diff:.3f}"
''')

entry("mha_unsqueezes_masks_below_4d", "mistake", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("d_model must be a multiple of n_heads")
        self.h = n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, D = query.shape
        Lk = key.shape[1]
        q = self.q_proj(query).reshape(B, Lq, self.h, -1).transpose(1, 2)
        k = self.k_proj(key).reshape(B, Lk, self.h, -1).transpose(1, 2)
        v = self.v_proj(value).reshape(B, Lk, self.h, -1).transpose(1, 2)
        if mask is not None and mask.dim() < 4:
            mask = mask.unsqueeze(1)                   # (B, Lq, Lk) -> (B, 1, Lq, Lk): the same for every head
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, D))
'''}, why="Inserts a head dimension at position 1 into every mask with fewer than 4 dimensions, which turns a causal "
       "(Lq, Lk) mask into (Lq, 1, Lk): it raises when Lq differs from n_heads and is silently wrong when they are equal.",
    shown_by='''
mha = MultiHeadAttention(16, 4)
ref = spec.MultiHeadAttention(16, 4)
H.load_mha(ref, mha)
x5, x4 = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
err = H.raises(mha, x5, mask=torch.ones(5, 5, dtype=torch.bool).tril())
with torch.no_grad():
    c4 = torch.ones(4, 4, dtype=torch.bool).tril()
    diff = H.maxdiff(mha(x4, mask=c4), ref(x4, mask=c4))
shown = err is not None and diff > 1e-4
detail = f"causal (5, 5) mask: {err}; with Lq = n_heads = 4: max diff {diff:.3f}"
''')

entry("mha_mask_unsqueeze_in_place", "mistake", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"n_heads = {n_heads} does not divide d_model = {d_model}")
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, d_model = query.shape
        heads = lambda t: t.reshape(B, t.shape[1], self.n_heads, -1).transpose(1, 2)
        q, k, v = heads(self.q_proj(query)), heads(self.k_proj(key)), heads(self.v_proj(value))
        if mask is not None:
            while mask.dim() < 4:
                mask.unsqueeze_(0)                     # (Lq, Lk) -> (1, 1, Lq, Lk)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, d_model))
'''}, why="Adds the missing leading dimensions to the mask with the in-place unsqueeze_, so the caller's (Lq, Lk) "
       "mask becomes (1, 1, Lq, Lk) after the call.",
    shown_by='''
mha = MultiHeadAttention(16, 4)
mask = torch.ones(5, 5, dtype=torch.bool).tril()
with torch.no_grad():
    mha(torch.randn(2, 5, 16), mask=mask)
shown = tuple(mask.shape) != (5, 5)
detail = f"the caller's mask now has shape {tuple(mask.shape)}"
''')

entry("mha_loop_over_batch_and_heads", "slow", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
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
        for b in range(B):                             # each sequence, each head on its own
            heads = []
            for h in range(self.n_heads):
                cols = slice(h * self.d_head, (h + 1) * self.d_head)
                m = None if mask is None else mask[b, h]
                out, _ = scaled_dot_product_attention(q[b, :, cols], k[b, :, cols], v[b, :, cols], m)
                heads.append(out)
            rows.append(torch.cat(heads, dim=-1))
        return self.out_proj(torch.stack(rows))
'''}, why="Right values, but one scaled_dot_product_attention call per sequence and head in Python loops instead "
       "of all heads at once: several times the reference's time on small inputs.",
    shown_by='''
torch.manual_seed(0)
mine, ref = MultiHeadAttention(48, 8), spec.MultiHeadAttention(48, 8)
H.load_mha(ref, mine)
x = torch.randn(8, 16, 48)
ratio = H.time_ratio(mine, ref, x)
shown = ratio > 3 and H.op_count(mine, torch.randn(16, 4, 48)) > 4 * H.op_count(ref, torch.randn(16, 4, 48))
detail = f"{ratio:.1f}x the spec's CPU time (B = 8, 8 heads, L = 16)"
''')

entry("mha_unflatten_expanded_mask", "correct", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        d_head, rest = divmod(d_model, n_heads)
        if rest:
            raise ValueError(f"n_heads = {n_heads} does not divide d_model = {d_model}")
        self.n_heads, self.d_head = n_heads, d_head
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))

    def forward(self, query, key=None, value=None, mask=None):
        if key is None:
            key = query
        if value is None:
            value = key
        B, Lq, Lk = query.shape[0], query.shape[1], key.shape[1]
        q = self.q_proj(query).unflatten(-1, (self.n_heads, self.d_head)).transpose(1, 2)
        k = self.k_proj(key).unflatten(-1, (self.n_heads, self.d_head)).transpose(1, 2)
        v = self.v_proj(value).unflatten(-1, (self.n_heads, self.d_head)).transpose(1, 2)
        if mask is not None:
            mask = mask.expand(B, self.n_heads, Lq, Lk)          # a view: the caller's mask is untouched
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.transpose(1, 2).flatten(2))
'''}, why="Builds the four projections with setattr in a loop, splits heads with unflatten, expands the mask to "
          "(B, n_heads, Lq, Lk) explicitly, and merges heads with flatten(2).")

entry("mha_per_head_einsum_helper", "correct", {"MultiHeadAttention": '''
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

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        q = project_heads(query, self.q_proj, self.n_heads)
        k = project_heads(key, self.k_proj, self.n_heads)
        v = project_heads(value, self.v_proj, self.n_heads)
        out, _ = scaled_dot_product_attention(q, k, v, mask)            # (B, H, Lq, d_head)
        W = self.out_proj.weight.view(self.d_model, self.n_heads, -1)  # out_proj applied per head and summed
        y = torch.einsum("bhle,dhe->bld", out, W)
        return y if self.out_proj.bias is None else y + self.out_proj.bias
'''}, extra_cells=[{"before": "MultiHeadAttention", "source": '''
def project_heads(x, linear, n_heads):
    """linear(x) cut into heads: (B, L, d_model) -> (B, n_heads, L, d_head), with one einsum."""
    d_model = linear.weight.shape[0]
    W = linear.weight.view(n_heads, d_model // n_heads, -1)              # rows h*d_head ... belong to head h
    y = torch.einsum("bld,hed->bhle", x, W)
    if linear.bias is not None:
        y = y + linear.bias.view(n_heads, 1, -1)
    return y
'''}], why="Projects straight into heads with einsum over per-head views of each weight (a helper in a cell above) "
          "and applies out_proj as a sum over heads of per-head slices of its weight.")

entry("mha_split_cat_heads", "correct", {"MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError(f"cannot cut d_model = {d_model} into {n_heads} heads")
        self.d_head = d_model // n_heads
        self.q_proj, self.k_proj = nn.Linear(d_model, d_model, bias), nn.Linear(d_model, d_model, bias)
        self.v_proj, self.out_proj = nn.Linear(d_model, d_model, bias), nn.Linear(d_model, d_model, bias)

    def forward(self, query, key=None, value=None, mask=None):
        key = key if key is not None else query
        value = value if value is not None else key
        split = lambda t: torch.stack(t.split(self.d_head, dim=-1), dim=1)     # (B, H, L, d_head)
        out, _ = scaled_dot_product_attention(split(self.q_proj(query)), split(self.k_proj(key)),
                                              split(self.v_proj(value)), mask=mask)
        return self.out_proj(torch.cat(out.unbind(dim=1), dim=-1))
'''}, why="Cuts heads with split + stack and puts them back with cat over unbind, passing bias positionally to "
          "nn.Linear.")


# ======================================================================================================================
# blockwise_attention
# ======================================================================================================================

entry("bw_no_max_subtraction", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    l = torch.zeros(*q.shape[:-1], 1, dtype=q.dtype)
    a = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    i = torch.arange(Lq)[:, None]
    for start in range(0, Lk, block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) * scale
        if causal:
            j = torch.arange(start, start + s.shape[-1])[None, :]
            s = s.masked_fill(j > i, float("-inf"))
        p = torch.exp(s)                                # the sums are exact without any rescaling
        l = l + p.sum(-1, keepdim=True)
        a = a + p @ v[..., start:start + block_size, :]
    return a / l
'''}, why="Accumulates plain exponentials without a running maximum: exact for moderate scores, but scores around "
       "1e4 overflow to inf and the output is NaN.",
    shown_by='''
q, k, v = 100 * torch.randn(1, 4, 8), 100 * torch.randn(1, 9, 8), torch.randn(1, 9, 3)
out, want = blockwise_attention(q, k, v, block_size=4), spec.blockwise_attention(q, k, v, block_size=4)
shown = not bool(torch.isfinite(out).all()) and bool(torch.isfinite(want).all())
detail = f"scores ~1e4: {int((~torch.isfinite(out)).sum())} non-finite outputs"
''')

entry("bw_first_block_max_only", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    scale = q.shape[-1] ** -0.5
    Lq, Lk = q.shape[-2], k.shape[-2]
    rows = torch.arange(Lq, device=q.device).unsqueeze(-1)
    m = None
    for start in range(0, Lk, block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = torch.matmul(q, kb.transpose(-2, -1)) * scale
        if causal:
            cols = torch.arange(start, start + kb.shape[-2], device=q.device)
            s = s.masked_fill(cols > rows, float("-inf"))
        if m is None:                                   # the first block's maximum serves as the shift
            m = s.amax(-1, keepdim=True)
            l = torch.zeros_like(m)
            a = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        p = torch.exp(s - m)
        l = l + p.sum(-1, keepdim=True)
        a = a + torch.matmul(p, vb)
    return a / l
'''}, why="Shifts every block by the first block's maximum and never updates it: exact while later scores stay close, "
       "but a later block whose scores are ~1e4 higher overflows to inf.",
    shown_by='''
q = torch.full((1, 2, 4), 10.0)
k = torch.cat([torch.full((1, 4, 4), -100.0), torch.full((1, 4, 4), 100.0)], dim=1)   # scores -2000, then +2000
v = torch.randn(1, 8, 3)
out, want = blockwise_attention(q, k, v, block_size=4), spec.blockwise_attention(q, k, v, block_size=4)
shown = not bool(torch.isfinite(out).all()) and bool(torch.isfinite(want).all())
detail = f"second block 4000 above the first: output {out[0, 0].tolist()}"
''')

entry("bw_running_max_starts_at_zero", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    m = torch.zeros(*q.shape[:-1], 1, dtype=q.dtype, device=q.device)   # 0 rather than -inf: no -inf - -inf
    l = torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    for start in range(0, Lk, block_size):
        end = min(start + block_size, Lk)
        s = q @ k[..., start:end, :].transpose(-2, -1) / math.sqrt(d)
        if causal:
            visible = torch.arange(start, end, device=q.device)[None, :] <= torch.arange(Lq, device=q.device)[:, None]
            s = s.masked_fill(~visible, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        c = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = l * c + p.sum(-1, keepdim=True)
        acc = acc * c + p @ v[..., start:end, :]
        m = m_new
    return acc / l
'''}, why="Starts the running maximum at 0 instead of -inf: rows whose every score is far below 0 (about -1e3 or "
       "less) underflow to exp(...) = 0 and give 0/0 = NaN.",
    shown_by='''
q = torch.full((1, 3, 4), 30.0)
k = torch.full((1, 7, 4), -30.0) + torch.randn(1, 7, 4)          # every score about -1800
v = torch.randn(1, 7, 2)
out, want = blockwise_attention(q, k, v, block_size=3), spec.blockwise_attention(q, k, v, block_size=3)
shown = not bool(torch.isfinite(out).all()) and bool(torch.isfinite(want).all())
detail = f"scores ~ -1800: output {out[0, 0].tolist()}"
''')

entry("bw_block_max_not_running", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    a = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    qi = torch.arange(Lq, device=q.device)[:, None]
    for start in range(0, Lk, block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = (q @ kb.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(start, start + kb.shape[-2], device=q.device) > qi, float("-inf"))
        m_new = s.amax(-1, keepdim=True)                          # this block's maximum
        m_new = torch.where(torch.isinf(m_new), m, m_new)        # a fully masked block keeps the old one
        c = torch.exp(m - m_new)                                  # move the old terms to the new reference
        p = torch.exp(s - m_new)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ vb
        m = m_new
    return a / l
'''}, why="Re-references the sums to each block's own maximum instead of the running maximum: exact in exact "
       "arithmetic, but when a later block's scores are ~1e4 below an earlier block's, exp(m - m_new) overflows and "
       "the output is NaN.",
    shown_by='''
q = torch.full((1, 2, 4), 10.0)
k = torch.cat([torch.full((1, 4, 4), 100.0), torch.full((1, 4, 4), -100.0)], dim=1)   # scores +2000, then -2000
v = torch.randn(1, 8, 3)
out, want = blockwise_attention(q, k, v, block_size=4), spec.blockwise_attention(q, k, v, block_size=4)
shown = not bool(torch.isfinite(out).all()) and bool(torch.isfinite(want).all())
detail = f"second block 4000 below the first: output {out[0, 0].tolist()}"
''')

entry("bw_float32_working_copy", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    q, k, v = q.float(), k.float(), v.float()          # float32 is enough and halves the memory
    Lq, Lk = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), -math.inf)
    l = torch.zeros(q.shape[:-1] + (1,))
    a = torch.zeros(q.shape[:-1] + (v.shape[-1],))
    for start in range(0, Lk, block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-1, -2) * scale
        if causal:
            j = torch.arange(start, start + s.shape[-1])
            s = s.masked_fill(j[None, :] > torch.arange(Lq)[:, None], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        c, p = torch.exp(m - shift), torch.exp(s - shift)
        l = c * l + p.sum(-1, keepdim=True)
        a = c * a + p @ v[..., start:start + block_size, :]
        m = m_new
    return a / l
'''}, why="Converts q, k and v to float32 to save memory, so float64 inputs give a float32 answer with float32 "
       "precision (the text asks for softmax attention in both dtypes).",
    shown_by='''
q, k, v = (torch.randn(2, 10, 8, dtype=torch.float64), torch.randn(2, 37, 8, dtype=torch.float64),
           torch.randn(2, 37, 8, dtype=torch.float64))
out = blockwise_attention(q, k, v, block_size=16)
shown = out.dtype != torch.float64 and spec.blockwise_attention(q, k, v, block_size=16).dtype == torch.float64
detail = f"float64 inputs -> {out.dtype}"
''')

entry("bw_scale_from_value_size", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    *lead, Lq, _ = q.shape
    Lk, dv = v.shape[-2], v.shape[-1]
    scale = 1.0 / math.sqrt(dv)
    m = q.new_full((*lead, Lq, 1), float("-inf"))
    l = q.new_zeros((*lead, Lq, 1))
    acc = q.new_zeros((*lead, Lq, dv))
    for start in range(0, Lk, block_size):
        stop = min(start + block_size, Lk)
        s = torch.matmul(q, k[..., start:stop, :].transpose(-2, -1)) * scale
        if causal:
            later = torch.arange(start, stop, device=q.device)[None, :] > torch.arange(Lq, device=q.device)[:, None]
            s = s.masked_fill(later, float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        ref = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
        corr = torch.exp(m - ref)
        p = torch.exp(s - ref)
        l = l * corr + p.sum(dim=-1, keepdim=True)
        acc = acc * corr + torch.matmul(p, v[..., start:stop, :])
        m = m_new
    return acc / l
'''}, why="Scales the scores by 1/sqrt(dv), the size of the values, instead of 1/sqrt(d): right only when the values "
       "have the size of queries and keys, as in every visible check.",
    shown_by='''
q, k, v = torch.randn(1, 50, 8), torch.randn(1, 97, 8), torch.randn(1, 97, 3)
out, want = blockwise_attention(q, k, v, block_size=32), spec.blockwise_attention(q, k, v, block_size=32)
shown = H.maxdiff(out, want) > 1e-3
detail = f"d = 8, dv = 3: max diff {H.maxdiff(out, want):.3f}"
''')

entry("bw_sum_not_rescaled", "mistake", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    a = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    i = torch.arange(Lq, device=q.device)[:, None]
    for start in range(0, Lk, block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(start, start + kb.shape[-2], device=q.device)[None, :] > i, float("-inf"))
        m = torch.maximum(m, s.amax(-1, keepdim=True))
        m_safe = m.masked_fill(m == float("-inf"), 0.0)
        p = torch.exp(s - m_safe)
        l = l + p.sum(-1, keepdim=True)
        a = a + p @ vb
    return a / l
'''}, why="Updates the running maximum but never multiplies the running sum and output by exp(m - m_new), so terms "
       "from earlier blocks keep the old reference (the classic online-softmax slip; the visible check names it).",
    shown_by='''
q, k, v = torch.randn(2, 10, 8), torch.randn(2, 37, 8), torch.randn(2, 37, 8)
out, want = blockwise_attention(q, k, v, block_size=16), spec.blockwise_attention(q, k, v, block_size=16)
shown = H.maxdiff(out, want) > 1e-3
detail = f"max diff {H.maxdiff(out, want):.3f}"
''')

entry("bw_full_score_matrix", "slow", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])            # (..., Lq, Lk)
    if causal:
        Lq, Lk = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    # online softmax over the blocks of the score matrix
    m = torch.full_like(scores[..., :1], float("-inf"))
    l = torch.zeros_like(m)
    a = torch.zeros(*scores.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    for start in range(0, scores.shape[-1], block_size):
        s = scores[..., start:start + block_size]
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = m_new.masked_fill(torch.isinf(m_new), 0.0)
        c = torch.exp(m - safe)
        p = torch.exp(s - safe)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ v[..., start:start + block_size, :]
        m = m_new
    return a / l
'''}, why="Runs the online softmax over blocks of a score matrix it has computed in full: right values, but the "
       "Lq x Lk matrix is exactly the memory the exercise is meant to avoid.",
    shown_by='''
q, k, v = torch.randn(3, 1024, 16).unbind(0)
mine = H.largest_bytes(blockwise_attention, q, k, v, block_size=64)
ref = H.largest_bytes(spec.blockwise_attention, q, k, v, block_size=64)
scores = 1024 * 1024 * 4
shown = mine >= scores / 4 and ref < scores / 4
detail = f"largest tensor {mine / 2**10:.0f} KiB (spec {ref / 2**10:.0f} KiB; score matrix {scores / 2**10:.0f} KiB)"
''')

entry("bw_full_causal_mask", "slow", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    visible = torch.ones(Lq, Lk, device=q.device).tril().bool() if causal else None   # j <= i
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    a = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
    for start in range(0, Lk, block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(~visible[:, start:start + block_size], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m0 = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        c = torch.exp(m - m0)
        p = torch.exp(s - m0)
        l = c * l + p.sum(-1, keepdim=True)
        a = c * a + p @ vb
        m = m_new
    return a / l
'''}, why="Processes keys block by block but builds the whole Lq x Lk causal mask up front (as float ones, then "
       "bool): with causal=True the extra memory is O(Lq * Lk), not O(Lq * block_size).",
    shown_by='''
q, k, v = torch.randn(3, 1024, 16).unbind(0)
causal_mine = H.largest_bytes(blockwise_attention, q, k, v, causal=True, block_size=64)
plain_mine = H.largest_bytes(blockwise_attention, q, k, v, causal=False, block_size=64)
causal_ref = H.largest_bytes(spec.blockwise_attention, q, k, v, causal=True, block_size=64)
scores = 1024 * 1024 * 4
shown = causal_mine >= scores / 4 and causal_ref < scores / 4 and plain_mine < scores / 4
detail = f"causal: largest tensor {causal_mine / 2**10:.0f} KiB (not causal {plain_mine / 2**10:.0f} KiB, spec {causal_ref / 2**10:.0f} KiB)"
''')

entry("bw_split_zip_where", "correct", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq = q.shape[-2]
    q = q / math.sqrt(q.shape[-1])
    out_shape = torch.broadcast_shapes(q.shape[:-2], v.shape[:-2]) + (Lq, v.shape[-1])
    m = torch.full(out_shape[:-1] + (1,), -math.inf, dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    a = torch.zeros(out_shape, dtype=q.dtype, device=q.device)
    i = torch.arange(Lq, device=q.device).view(-1, 1)
    start = 0
    for kb, vb in zip(k.split(block_size, dim=-2), v.split(block_size, dim=-2)):
        s = q @ kb.mT
        if causal:
            j = torch.arange(start, start + kb.shape[-2], device=q.device).view(1, -1)
            s = torch.where(j <= i, s, torch.full_like(s, -math.inf))
        start += kb.shape[-2]
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        base = torch.where(m_new > -math.inf, m_new, torch.zeros_like(m_new))
        scale_old = torch.exp(m - base)
        p = torch.exp(s - base)
        l = l * scale_old + p.sum(-1, keepdim=True)
        a = a * scale_old + p @ vb
        m = m_new
    return a / l
'''}, why="Scales q once (out of place), walks the key and value blocks with zip(split(...)), and masks with "
          "torch.where.")

entry("bw_running_logsumexp", "correct", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    lse = None                                   # running log of the sum of exp(scores)
    out = None                                   # running normalised output
    rows = torch.arange(Lq, device=q.device)[:, None]
    for start in range(0, Lk, block_size):
        kb = k[..., start:start + block_size, :]
        vb = v[..., start:start + block_size, :]
        s = torch.matmul(q, kb.transpose(-2, -1)) * scale
        if causal:
            cols = torch.arange(start, start + kb.shape[-2], device=q.device)[None, :]
            s = s.masked_fill(cols > rows, float("-inf"))
        block_lse = torch.logsumexp(s, dim=-1, keepdim=True)
        if lse is None:
            new_lse = block_lse
        else:
            new_lse = torch.logaddexp(lse, block_lse)
        safe = torch.where(torch.isinf(new_lse), torch.zeros_like(new_lse), new_lse)
        p = torch.exp(s - safe)
        block_out = torch.matmul(p, vb)
        out = block_out if out is None else out * torch.exp(lse - safe) + block_out
        lse = new_lse
    return out
'''}, why="Keeps a running log-sum-exp (torch.logaddexp) and an already normalised output instead of (m, l, a): the "
          "same online softmax in another form.")

entry("bw_causal_early_stop_triu", "correct", {"blockwise_attention": '''
def blockwise_attention(q, k, v, causal=False, block_size=64):
    """softmax(q k^T / sqrt(d)) v, one block of keys at a time with an online softmax."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros((*q.shape[:-1], 1), dtype=q.dtype, device=q.device)
    a = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    for start in range(0, Lk, block_size):
        if causal and start > Lq - 1:
            break                                  # no query sees these keys, nor any later ones
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:                                 # key start + c is hidden from query r when c - r >= 1 - start
            hidden = torch.ones(Lq, kb.shape[-2], dtype=torch.bool, device=q.device).triu(1 - start)
            s = s.masked_fill(hidden, float("-inf"))
        # every row sees key 0 in the first block, so m is finite from then on: no -inf - -inf
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        c = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = l * c + p.sum(-1, keepdim=True)
        a = a * c + p @ vb
        m = m_new
    return a / l
'''}, why="With causal=True stops at the first block no query can see, builds each block's mask with triu(1 - start), "
          "and needs no -inf guard because key 0 is visible to every query.")
