"""Blind corpus, positional_encoding: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# ----------------------------------------------------------------------------------------------------------- mistakes

entry("sin_lru_cache", "mistake", {"sinusoidal_encoding": '''
import functools


@functools.lru_cache(maxsize=None)
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2:
        raise ValueError("d_model must be even")
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]
    freq = float(base) ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe.float()
'''}, "Memoises the table: the second call hands out the same tensor, so a caller who edits one result changes the "
      "next; breaks 'Every result is a new tensor ... (no cache that hands out the same tensor twice)'.",
      shown_by='''
a = sinusoidal_encoding(7, 4)
a.add_(1.0)
b = sinusoidal_encoding(7, 4)
shown = b is a or not H.same(b, spec.sinusoidal_encoding(7, 4), atol=1e-6)
detail = f"second call returns the edited table (same object: {b is a})"
''')

entry("sin_cache_ignores_base", "mistake", {"sinusoidal_encoding": '''
_TABLES = {}


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2:
        raise ValueError("d_model must be even")
    key = (seq_len, d_model)                 # a table per size, computed once
    if key not in _TABLES:
        pos = torch.arange(seq_len, dtype=torch.float64)[:, None]
        freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        pe = torch.empty(seq_len, d_model, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
        _TABLES[key] = pe.float()
    return _TABLES[key].clone()
'''}, "A cache keyed on the sizes only (it clones, so results are fresh) answers the first base forever; breaks 'each "
      "call answers for its own arguments (the hidden tests call it again with the same sizes and another base)'.",
      shown_by='''
sinusoidal_encoding(9, 6)
out = sinusoidal_encoding(9, 6, 100.0)
shown = not H.same(out, spec.sinusoidal_encoding(9, 6, 100.0), atol=1e-6)
detail = f"base=100 after base=10000 with the same sizes: off by {H.maxdiff(out, spec.sinusoidal_encoding(9, 6, 100.0)):.2f}"
''')

entry("sin_tutorial_div_term_float32", "mistake", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even, got {d_model}")
    position = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)          # angles in float64, as asked
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(base) / d_model))
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.float()
'''}, "The well-known tutorial's div_term is made in float32 (an int arange times a Python float), so the float64 "
      "angles carry float32's frequency error, ~1e-5 at 2,500 positions; breaks 'Compute the angles in float64 ... "
      "the tests allow a table only the error of float32's own rounding'.",
      shown_by='''
out, want = sinusoidal_encoding(2500, 8), spec.sinusoidal_encoding(2500, 8)
err = H.maxdiff(out, want)
shown = err > 1e-6
detail = f"2,500 x 8: max error {err:.1e} (float32 rounding: 6e-8)"
''')

entry("rope_len1_returns_input", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError("rope needs an even last dimension")
    L = x.shape[-2]
    if L == 1:
        return x                              # position 0 is not rotated: nothing to do
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    pos = torch.arange(L, device=x.device, dtype=torch.float64)[:, None]
    theta = pos * base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    cos, sin = theta.cos().to(compute), theta.sin().to(compute)
    xe, xo = x[..., 0::2].to(compute), x[..., 1::2].to(compute)
    return torch.stack((xe * cos - xo * sin, xe * sin + xo * cos), dim=-1).flatten(-2).to(x.dtype)
'''}, "A shortcut for one position returns the argument itself; breaks 'Return a new tensor ... (leave x as it is)' "
      "and 'never an argument itself', on the edge size 'one position'.",
      shown_by='''
x = torch.randn(3, 1, 4)
out = rope(x)
shown = out.data_ptr() == x.data_ptr()
detail = "rope of a length-1 sequence is x itself: editing the result edits the caller's x"
''')

entry("rope_complex_view_without_copy", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError("odd d")
    L = x.shape[-2]
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    pos = torch.arange(L, dtype=torch.float64, device=x.device)
    angles = pos[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    turn = torch.polar(torch.ones_like(angles), angles)                        # e^{i theta}, complex128
    pairs = torch.view_as_complex(x.to(compute).unflatten(-1, (d // 2, 2)))   # (x_2i + i x_2i+1)
    return torch.view_as_real(pairs * turn.to(pairs.dtype)).flatten(-2).to(x.dtype)
'''}, "view_as_complex needs a last dimension of stride 1: on a transposed or sliced x (float32/64, where .to() makes "
      "no copy) it raises; breaks 'A tensor argument may be a view that is not contiguous in memory, a slice or a "
      "transposed tensor (rope)'.",
      shown_by='''
x = torch.randn(2, 6, 16)[..., ::2]
y = torch.randn(2, 8, 5).transpose(-1, -2)
errors = (H.raises(rope, x), H.raises(rope, y))
shown = all(errors) and H.same(rope(x.contiguous()), spec.rope(x), atol=1e-5)
detail = f"sliced / transposed x raise {errors}; the same values contiguous are right"
''')

entry("rope_bf16_rotated_in_bf16", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"rope rotates pairs: d = {d} is odd")
    L = x.shape[-2]
    p = torch.arange(L, dtype=torch.float64, device=x.device)[:, None]
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    cos, sin = torch.cos(p * inv).to(x.dtype), torch.sin(p * inv).to(x.dtype)     # hint 2: cast to x.dtype
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
'''}, "Follows hint 2 literally (cos and sin cast to x.dtype) for every dtype, so bfloat16 is rotated in bfloat16 with "
      "several roundings; breaks 'A float16 or bfloat16 x is answered in its dtype, at its precision: rotate it in "
      "float32 and convert the result'.",
      shown_by='''
g = torch.Generator().manual_seed(5)
errs = {}
for dtype, bits in ((torch.bfloat16, 8), (torch.float16, 11)):
    x = (4 * torch.randn(4, 200, 32, generator=g)).to(dtype)
    truth = spec.rope(x.double())
    big = truth.abs() > 0.5

    def half_ulps(out):                      # the largest relative error, in units of 2^-precision (half an ulp)
        return ((out.double() - truth).abs() / truth.abs())[big].max().item() * 2 ** bits

    errs[dtype] = (half_ulps(rope(x)), half_ulps(spec.rope(x)))
shown = all(mine > 3 and theirs <= 1.01 for mine, theirs in errs.values())
detail = "; ".join(f"{dt}: {m:.1f} half-ulps (rotated in float32: {t:.2f})" for dt, (m, t) in errs.items())
''')

entry("rope_cache_without_device", "mistake", {"rope": '''
_COS_SIN = {}


def _cos_sin(L, d, base, dtype, device):
    key = (L, d, float(base), dtype)                                  # one table per size, base and dtype
    if key not in _COS_SIN:
        pos = torch.arange(L, dtype=torch.float64, device=device)[:, None]
        theta = pos * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)
        _COS_SIN[key] = (theta.cos().to(dtype), theta.sin().to(dtype))
    return _COS_SIN[key]


def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError("odd last dimension")
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    cos, sin = _cos_sin(x.shape[-2], d, base, compute, x.device)
    a, b = x[..., 0::2].to(compute), x[..., 1::2].to(compute)
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2).to(x.dtype)
'''}, "The cos/sin cache is keyed without the device: after a CPU call, the same sizes on another device get CPU "
      "tables; breaks 'A result is made on its arguments' device (rope) ... the tests also call with tensors on "
      "\\\"meta\\\"'.",
      shown_by='''
rope(torch.randn(2, 5, 6))
err = H.raises(rope, torch.randn(2, 5, 6, device="meta"))
fresh = H.raises(spec.rope, torch.randn(2, 5, 6, device="meta"))
shown = err is not None and fresh is None
detail = f"meta x after a CPU call of the same size: {err}"
''')

entry("rope_half_answers_float32", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()                                   # rotate low precision in float32
    L = x.shape[-2]
    pos = torch.arange(L, dtype=torch.float64, device=x.device).unsqueeze(-1)
    ang = pos * torch.pow(base, -torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    c, s = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).flatten(-2)
'''}, "Rotates float16/bfloat16 in float32 as asked but never converts back (x was rebound); breaks 'A float16 or "
      "bfloat16 x is answered in its dtype ... rotate it in float32 and convert the result'.",
      shown_by='''
x = torch.randn(2, 9, 8).to(torch.bfloat16)
out = rope(x)
shown = out.dtype != torch.bfloat16
detail = f"bfloat16 in, {out.dtype} out"
''')

entry("alibi_lru_cache", "mistake", {"alibi_bias": '''
import functools


def pow2_slopes(n):
    return [2 ** (-8 * (h + 1) / n) for h in range(n)]


@functools.lru_cache(maxsize=128)
def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    if math.log2(n_heads).is_integer():
        slopes = pow2_slopes(n_heads)
    else:
        c = 2 ** math.floor(math.log2(n_heads))
        slopes = pow2_slopes(c) + pow2_slopes(2 * c)[0::2][: n_heads - c]
    i = torch.arange(seq_len)
    distance = (i[:, None] - i[None, :]).abs().float()
    return -torch.tensor(slopes, dtype=torch.float32)[:, None, None] * distance
'''}, "lru_cache hands every caller of the same sizes the same tensor; masking it in place (as a causal model does) "
      "changes the next call; breaks 'Every result is a new tensor ... no cache that hands out the same tensor "
      "twice'.",
      shown_by='''
a = alibi_bias(4, 5)
a.masked_fill_(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
b = alibi_bias(4, 5)
shown = not H.same(b, spec.alibi_bias(4, 5), atol=1e-6)
detail = "a causal model masks its bias in place: the next call answers -inf above the diagonal"
''')

# ----------------------------------------------------------------------------------------------------------- correct

entry("sin_numpy_float64", "correct", {"sinusoidal_encoding": '''
import numpy as np


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2:
        raise ValueError(f"d_model = {d_model} is odd: sin/cos pairs need an even width")
    p = np.arange(seq_len, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
    angles = p / np.power(float(base), two_i / d_model)
    table = np.empty((seq_len, d_model))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return torch.from_numpy(table).float()
'''}, "numpy in float64, divided by base^(2i/d) rather than multiplied by its inverse, converted at the end: honours "
      "'Compute the angles in float64 and convert the table at the end' (numpy is allowed).")

entry("sin_polar_stack", "correct", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 == 1:
        raise ValueError("sinusoidal_encoding needs an even d_model")
    i = torch.arange(d_model // 2, dtype=torch.float64)
    freq = torch.exp(-(2 * i / d_model) * math.log(base))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), freq)
    z = torch.polar(torch.ones_like(angles), angles)               # cos + i sin
    return torch.stack([z.imag, z.real], dim=-1).reshape(seq_len, d_model).to(torch.float32)


assert sinusoidal_encoding(3, 4)[0].tolist() == [0.0, 1.0, 0.0, 1.0]    # my own check
'''}, "Frequencies as exp(-(2i/d) ln base) in float64, sines and cosines from one complex exponential, interleaved "
      "by stack + reshape; a self-check assert at the end of the cell (an honest idiom the text allows).")

entry("rope_complex_contiguous", "correct", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError("odd d")
    L = x.shape[-2]
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    pos = torch.arange(L, dtype=torch.float64, device=x.device)
    angles = pos[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    turn = torch.polar(torch.ones_like(angles), angles)
    pairs = torch.view_as_complex(x.to(compute).unflatten(-1, (d // 2, 2)).contiguous())
    return torch.view_as_real(pairs * turn.to(pairs.dtype)).flatten(-2).to(x.dtype)
'''}, "Rotation as a complex multiplication (pairs read as x_2i + i x_2i+1, interleaved as the text asks), with a "
      "contiguous copy before view_as_complex so strided views work; float32 inside for half inputs.")

entry("rope_empty_like_fill", "correct", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    *_, L, d = x.shape
    if d % 2:
        raise ValueError(f"d = {d} is odd")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d))
    theta = torch.arange(L, device=x.device, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = theta.cos().to(work), theta.sin().to(work)
    even, odd = x[..., 0::2].to(work), x[..., 1::2].to(work)
    out = torch.empty(x.shape, dtype=work, device=x.device)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out.to(x.dtype)
'''}, "Writes the two rotated halves into a fresh output through strided slices (never into x): 'Build the output as a "
      "new tensor; never assign into x' is honoured, and slice assignment keeps autograd.")

entry("alibi_single_formula", "correct", {"alibi_bias": '''
def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    def geometric(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    c = 1 << (n_heads.bit_length() - 1)            # the largest power of two <= n_heads
    slopes = geometric(c) + geometric(2 * c)[0::2][: n_heads - c]   # nothing appended when n_heads = c
    pos = torch.arange(seq_len, dtype=torch.float32)
    return -torch.tensor(slopes).view(-1, 1, 1) * (pos.view(1, -1) - pos.view(-1, 1)).abs()
'''}, "One formula for both cases (for a power of two the appended list is empty), a nested helper, and float32 "
      "distances: right for every head count the text allows.")

entry("alibi_repo_start_ratio_print", "correct", {"alibi_bias": '''
def get_slopes(n):
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio ** i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2])


def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    m = torch.tensor(get_slopes(n_heads), dtype=torch.float64)
    idx = torch.arange(seq_len, dtype=torch.float64)
    return (-(idx[None, :] - idx[:, None]).abs()[None] * m[:, None, None]).to(torch.float32)


print("slopes of 6 heads:", get_slopes(6))
'''}, "The reference code of Press et al. (start * ratio^i, recursion for other head counts) with a helper outside the "
      "function and a print at the end of the cell: the text's 'follow Press et al. (2021)', in its original form.")
