"""Blind corpus, positional_encoding: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# ---------------------------------------------------------------- sinusoidal_encoding
entry("sin_base_keyword_only", "mistake", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, *, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 != 0:
        raise ValueError("d_model must be even")
    pos = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq)
    return pe.float()
'''}, "base is keyword-only (a habit for options): `base may be given by position or by keyword`, and the hidden "
      "tests call it again with another base by position: TypeError.",
      shown_by='''
err = H.raises(sinusoidal_encoding, 10, 8, 100.0)
shown = err is not None
detail = f"sinusoidal_encoding(10, 8, 100.0): {err}"
''')

entry("sin_squeezed_result", "mistake", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2:
        raise ValueError(f"odd d_model {d_model}")
    p = torch.arange(seq_len, dtype=torch.float64)[:, None]
    i2 = torch.arange(0, d_model, 2, dtype=torch.float64)[None, :]
    angle = p / base ** (i2 / d_model)
    pe = torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(seq_len, d_model)
    return pe.squeeze().float()          # drop the stray dims of the stack
'''}, "A defensive .squeeze() drops the row dimension when seq_len = 1 (and d_model = 2 gives a column): the text "
      "promises shape (seq_len, d_model), 'seq_len = 1 gives one row'.",
      shown_by='''
pe = sinusoidal_encoding(1, 8)
shown = tuple(pe.shape) != (1, 8)
detail = f"sinusoidal_encoding(1, 8) has shape {tuple(pe.shape)}"
''')

entry("sin_stack_flatten_exp_log", "correct", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 == 1:
        raise ValueError("sin/cos pairs need an even d_model")
    half = d_model // 2
    # base^(-2i/d) = exp(-2i * ln(base) / d), all in float64
    freqs = torch.exp(torch.arange(half, dtype=torch.float64) * (-2.0 * math.log(base) / d_model))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), freqs)
    return torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).flatten(1).to(torch.float32)
'''}, "Frequencies as exp(-2i ln(base)/d) in float64, an outer product, and stack + flatten to interleave: the same "
      "table within float32 rounding.")

# ---------------------------------------------------------------- rope
entry("rope_bf16_rotated_in_bf16", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    L, d = x.shape[-2:]
    if d % 2:
        raise ValueError("d must be even")
    pos = torch.arange(L, dtype=torch.float64, device=x.device)
    theta = pos[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)     # rotate in x's own dtype
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)
'''}, "Casts cos/sin to x's dtype and rotates there: right for float32/float64, but a bfloat16 x is rotated in bfloat16 "
      "(two roundings per product and one per sum) where the text says 'rotate it in float32 and convert the result'.",
      shown_by='''
g = torch.Generator().manual_seed(0)
x = torch.randn(4, 64, 32, generator=g).to(torch.bfloat16)
truth = spec.rope(x.double())
mine = H.maxdiff(rope(x), truth)
theirs = H.maxdiff(spec.rope(x), truth)
shown = mine > 2 * theirs
detail = f"bfloat16, 64 x 32: error {mine:.3g} against float64 truth (rotating in float32: {theirs:.3g})"
''')

entry("rope_rotation_under_no_grad", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    seq_len, d = x.shape[-2], x.shape[-1]
    if d % 2 != 0:
        raise ValueError("odd dimension")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    with torch.no_grad():            # positions are constants: no graph needed
        ang = torch.arange(seq_len, device=x.device, dtype=torch.float64)[:, None] \\
            * base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
        c, s = ang.cos().to(work), ang.sin().to(work)
        xe, xo = x[..., ::2].to(work), x[..., 1::2].to(work)
        out = torch.stack((xe * c - xo * s, xe * s + xo * c), dim=-1).reshape(x.shape)
    return out.to(x.dtype)
'''}, "The no_grad block meant for the angles also covers the rotation: the output has no graph, so no gradient reaches "
      "x ('Gradients reach every floating argument ... no torch.no_grad() on a path by which an input changes an "
      "output').",
      shown_by='''
x = torch.randn(2, 5, 8, requires_grad=True)
out = rope(x)
shown = not out.requires_grad
detail = f"rope(x).requires_grad = {out.requires_grad} for x that requires grad"
''')

entry("rope_float64_rotated_in_float32", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.size(-1)
    if d % 2:
        raise ValueError(f"rope needs an even last dimension, got {d}")
    pos = torch.arange(x.size(-2), dtype=torch.float64, device=x.device)
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    ang = torch.outer(pos, inv)
    cos, sin = ang.cos().float(), ang.sin().float()    # float32 is enough for a rotation
    xf = x.float()
    a, b = xf[..., 0::2], xf[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2).to(x.dtype)
'''}, "Always rotates in float32, also for float64 x: 'A float64 x is held to float64's precision: compute its angles "
      "in float64 too' (and rotate in float64).",
      shown_by='''
g = torch.Generator().manual_seed(0)
x = torch.randn(3, 200, 16, generator=g, dtype=torch.float64)
err = H.maxdiff(rope(x), spec.rope(x))
shown = err > 1e-10
detail = f"float64 x: off by {err:.1e} (float64 rounding ~1e-16)"
''')

entry("rope_cache_ignores_base", "mistake", {"rope": '''
_rope_tables = {}


def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    L, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    key = (L, d, x.dtype, str(x.device))
    if key not in _rope_tables:                       # cos/sin are the same at every call: compute them once
        theta = torch.arange(L, dtype=torch.float64, device=x.device)[:, None] \\
            * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        _rope_tables[key] = (theta.cos().to(work), theta.sin().to(work))
    cos, sin = _rope_tables[key]
    xw = x.to(cos.dtype)
    a, b = xw[..., 0::2], xw[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2).to(x.dtype)
'''}, "A cache of cos/sin keyed by size, dtype and device but not by base: a later call with the same sizes and "
      "another base reuses the first base's angles (the hidden tests check 'the base argument').",
      shown_by='''
x = torch.randn(2, 7, 8)
first = rope(x)
other = rope(x, 100.0)
err = H.maxdiff(other, spec.rope(x, 100.0))
shown = err > 1e-4
detail = f"rope(x, 100.0) after rope(x): off by {err:.3f}"
''')

entry("rope_pairs_reshape", "correct", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    *lead, L, d = x.shape
    if d % 2:
        raise ValueError("rope rotates pairs: d must be even")
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    i = torch.arange(d // 2, device=x.device, dtype=torch.float64)
    p = torch.arange(L, device=x.device, dtype=torch.float64)
    theta = p.unsqueeze(-1) * torch.pow(torch.tensor(float(base), dtype=torch.float64, device=x.device), -2 * i / d)
    c, s = torch.cos(theta).to(wide), torch.sin(theta).to(wide)
    pairs = x.to(wide).reshape(*lead, L, d // 2, 2)            # (..., L, d/2, (even, odd))
    even, odd = pairs.unbind(-1)
    rotated = torch.stack((even * c - odd * s, even * s + odd * c), dim=-1)
    return rotated.reshape(x.shape).to(x.dtype)
'''}, "Pairs taken apart with a reshape to (..., L, d/2, 2) and unbind instead of strided slices, the frequency as a "
      "tensor power: the same rotation, at the same precision.")

# ---------------------------------------------------------------- alibi_bias
entry("alibi_floor_division_exponent", "mistake", {"alibi_bias": '''
def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    def pow2(n):
        return [2 ** (-8 * (h + 1) // n) for h in range(n)]

    if math.log2(n_heads).is_integer():
        slopes = pow2(n_heads)
    else:
        c = 2 ** math.floor(math.log2(n_heads))
        slopes = pow2(c) + pow2(2 * c)[0::2][: n_heads - c]
    m = torch.tensor(slopes, dtype=torch.float32)
    idx = torch.arange(seq_len)
    dist = (idx[:, None] - idx[None, :]).abs().float()
    return -m[:, None, None] * dist
'''}, "Integer floor division in the exponent, -8(h+1)//n: exact while n divides 8(h+1) (4, 6 and 8 heads, all the "
      "visible checks use), but 16 heads get slopes 2^-1, 2^-1, 2^-2, 2^-2, ... instead of 2^-0.5, 2^-1, ...",
      shown_by='''
got = -alibi_bias(16, 2)[:, 0, 1]
want = -spec.alibi_bias(16, 2)[:, 0, 1]
err = H.maxdiff(got, want)
shown = err > 1e-6
detail = f"16 heads: slopes {[round(s, 4) for s in got[:4].tolist()]} vs {[round(s, 4) for s in want[:4].tolist()]}"
''')

entry("alibi_press_start_ratio", "correct", {"alibi_bias": '''
def get_slopes(n):
    """Press et al.'s own recipe: a geometric sequence that starts at 2^(-8/n) with that same ratio."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + get_slopes(2 * closest)[0::2][: n - closest]


def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    slopes = torch.tensor(get_slopes(n_heads)).view(n_heads, 1, 1)
    pos = torch.arange(seq_len, dtype=torch.float32)
    return -slopes * (pos.view(1, -1) - pos.view(-1, 1)).abs()
'''}, "The slopes by Press et al.'s start/ratio recursion (2^(-2^-(log2 n - 3)) = 2^(-8/n)), the distances from two "
      "views of one arange: the same float32 bias within rounding.")
