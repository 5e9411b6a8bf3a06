"""Blind corpus for exercises/positional_encoding: sinusoidal_encoding, rope, alibi_bias.

The notebook's setup cell is `import math` and `import torch`; every cell below relies on nothing else.
In shown_by code the entry's definitions are in scope under their own names, the spec module as `spec`, and
the checker's helpers as `H` (see check.py). shown_by sets `shown` (and, for information, `detail`).
"""

ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# ======================================================================================================================
# sinusoidal_encoding
# ======================================================================================================================

entry("sin_hardcoded_base_10000", "mistake", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 != 0:
        raise ValueError("d_model must be even")
    position = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.float()
'''}, why="The frequencies use the constant 10000 (the tutorial's formula) instead of the base argument, so any other "
       "base, by position or keyword, is ignored.",
    shown_by='''
out, want = sinusoidal_encoding(8, 6, base=100.0), spec.sinusoidal_encoding(8, 6, base=100.0)
shown = H.maxdiff(out, want) > 1e-2
detail = f"base=100: max diff {H.maxdiff(out, want):.3f}"
''')

entry("sin_cache_ignores_base", "mistake", {"sinusoidal_encoding": '''
_tables = {}


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2:
        raise ValueError(f"d_model must be even, not {d_model}")
    if (seq_len, d_model) not in _tables:           # the table is the same every time: compute it once
        p = torch.arange(seq_len, dtype=torch.float64)[:, None]
        freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        pe = torch.empty(seq_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(p * freq)
        pe[:, 1::2] = torch.cos(p * freq)
        _tables[(seq_len, d_model)] = pe.float()
    return _tables[(seq_len, d_model)].clone()
'''}, why="A module-level cache keyed by (seq_len, d_model) only: a second call with the same sizes and another base "
       "returns the first base's table.",
    shown_by='''
first = sinusoidal_encoding(10, 8)
again = sinusoidal_encoding(10, 8, 100.0)
shown = H.maxdiff(again, spec.sinusoidal_encoding(10, 8, 100.0)) > 1e-2 and H.maxdiff(first, spec.sinusoidal_encoding(10, 8)) < 1e-6
detail = f"second call, base 100 by position: max diff {H.maxdiff(again, spec.sinusoidal_encoding(10, 8, 100.0)):.3f}"
''')

entry("sin_float32_angles", "mistake", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 == 1:
        raise ValueError("sin/cos pairs need an even d_model")
    position = torch.arange(seq_len).unsqueeze(1)                                  # (seq_len, 1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(base) / d_model))  # (d_model/2,), float32
    pe = torch.zeros(seq_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
'''}, why="The angles p * base^(-2i/d) are computed in float32, so for long sequences (2048-2500 positions) the table "
       "is off by ~1e-4, far more than float32 rounding of the exact table (~6e-8).",
    shown_by='''
out, want = sinusoidal_encoding(2500, 512), spec.sinusoidal_encoding(2500, 512)
shown = H.maxdiff(out, want) > 1e-4 and H.maxdiff(sinusoidal_encoding(50, 8), spec.sinusoidal_encoding(50, 8)) < 1e-5
detail = f"2500 x 512: max diff {H.maxdiff(out, want):.1e} (50 x 8: {H.maxdiff(sinusoidal_encoding(50, 8), spec.sinusoidal_encoding(50, 8)):.1e})"
''')

entry("sin_lru_cache_shared_table", "mistake", {"sinusoidal_encoding": '''
import functools


@functools.lru_cache(maxsize=None)
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 != 0:
        raise ValueError("d_model must be even")
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64),
                         base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model))
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(seq_len, d_model).float()
'''}, why="functools.lru_cache returns the very same tensor on every call with the same arguments: a caller that "
       "changes its table in place (pe *= ..., pe += ...) changes what every later call returns.",
    shown_by='''
pe = sinusoidal_encoding(7, 4)
pe.mul_(0.0)                                    # the caller scales its own table in place
later = sinusoidal_encoding(7, 4)
ref = spec.sinusoidal_encoding(7, 4); ref.mul_(0.0)
shown = H.maxdiff(later, spec.sinusoidal_encoding(7, 4)) > 0.5
detail = f"after the caller zeroed its table, a new call returns max |diff| {H.maxdiff(later, spec.sinusoidal_encoding(7, 4)):.2f}"
''')

entry("sin_complex_exponential", "correct", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 != 0:
        raise ValueError(f"d_model = {d_model} is odd: sines and cosines come in pairs")
    i2 = torch.arange(0, d_model, 2, dtype=torch.float64)
    angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * torch.exp(-math.log(base) * i2 / d_model)
    z = 1j * torch.exp(-1j * angles)            # i (cos a - i sin a) = sin a + i cos a, complex128
    return torch.view_as_real(z).reshape(seq_len, d_model).to(torch.float32)
'''}, why="Builds sin + i cos as a complex128 exponential and reads it back with view_as_real: the real and "
          "imaginary parts land interleaved in the even and odd columns.")

entry("sin_numpy_then_torch", "correct", {"sinusoidal_encoding": '''
import numpy as np


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2:
        raise ValueError("d_model must be even")
    pos = np.arange(seq_len, dtype=np.float64)[:, np.newaxis]
    freq = np.power(float(base), -np.arange(0, d_model, 2, dtype=np.float64) / d_model)
    table = np.empty((seq_len, d_model), dtype=np.float64)
    table[:, 0::2] = np.sin(pos * freq)
    table[:, 1::2] = np.cos(pos * freq)
    return torch.from_numpy(table).float()


np.random.seed(0)                               # a quick self-check of the offset property
_pe = sinusoidal_encoding(50, 16)
print("PE(3).PE(10) vs PE(20).PE(27):", float(_pe[3] @ _pe[10]), float(_pe[20] @ _pe[27]))
'''}, why="Computes the table in numpy float64 and converts it with torch.from_numpy(...).float() (a new float32 "
          "tensor each call); a printed self-check follows in the cell.")

entry("sin_lru_cache_then_clone_timeit", "correct", {"sinusoidal_encoding": '''
import functools


@functools.lru_cache(maxsize=32)
def _table(seq_len, d_model, base):
    angles = (torch.arange(seq_len, dtype=torch.float64)[:, None]
              * torch.pow(float(base), -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model))
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, ::2], pe[:, 1::2] = angles.sin(), angles.cos()
    return pe.float()


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 != 0:
        raise ValueError("d_model must be even")
    return _table(seq_len, d_model, float(base)).clone()     # a copy: callers may change theirs

%timeit sinusoidal_encoding(2048, 512)
'''}, why="Caches the float32 table per (seq_len, d_model, base) in a helper but returns a clone, so callers never "
          "share it; an IPython %timeit line is left at the end of the cell.")


# ======================================================================================================================
# rope
# ======================================================================================================================

entry("rope_float32_angles", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError("rope needs an even last dimension")
    L = x.shape[-2]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device).float() / d))
    theta = torch.arange(L, device=x.device).float()[:, None] * inv_freq      # (L, d/2)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
'''}, why="The angles are computed in float32 and only then cast to x.dtype, so a float64 x gets float32-accurate "
       "rotations (errors ~1e-5 at 1500 positions) although the text asks for float64 angles.",
    shown_by='''
x = torch.randn(1500, 8, dtype=torch.float64)
out, want = rope(x), spec.rope(x)
shown = out.dtype == torch.float64 and H.maxdiff(out, want) > 1e-8
detail = f"float64, 1500 positions: max diff {H.maxdiff(out, want):.1e}"
''')

entry("rope_trig_float32_not_cast", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    *_, L, d = x.shape
    if d % 2 != 0:
        raise ValueError("d must be even")
    p = torch.arange(L, dtype=torch.float64, device=x.device)[:, None]
    angle = p * torch.pow(base, -torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    cos, sin = torch.cos(angle).float(), torch.sin(angle).float()             # a float32 table
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
'''}, why="The cos/sin tables are made float32 and never cast to x.dtype: type promotion turns a bfloat16/float16 x "
       "into a float32 result, and a float64 x is rotated with float32-rounded cos/sin.",
    shown_by='''
x = torch.randn(2, 6, 8).to(torch.bfloat16)
out = rope(x)
x64 = torch.randn(300, 8, dtype=torch.float64)
shown = out.dtype != torch.bfloat16 and spec.rope(x).dtype == torch.bfloat16 and H.maxdiff(rope(x64), spec.rope(x64)) > 1e-9
detail = f"bfloat16 x -> {out.dtype}; float64 x: max diff {H.maxdiff(rope(x64), spec.rope(x64)):.1e}"
''')

entry("rope_cache_keyed_without_dtype", "mistake", {"rope": '''
_rope_tables = {}


def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    L, d = x.shape[-2], x.shape[-1]
    if d % 2 != 0:
        raise ValueError("rope rotates pairs: the last dimension must be even")
    key = (L, d, float(base), x.device)
    if key not in _rope_tables:                      # q and k of every layer share the same table
        angles = (torch.arange(L, dtype=torch.float64, device=x.device)[:, None]
                  * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
        _rope_tables[key] = (angles.cos().to(x.dtype), angles.sin().to(x.dtype))
    cos, sin = _rope_tables[key]
    xe, xo = x[..., 0::2], x[..., 1::2]
    return torch.stack([xe * cos - xo * sin, xe * sin + xo * cos], dim=-1).flatten(-2)
'''}, why="Caches cos/sin per (L, d, base, device) in the dtype of the first call: after a float32 call, a float64 x "
       "of the same size is rotated with float32-rounded tables.",
    shown_by='''
rope(torch.randn(64, 8))                          # a float32 call first
x = torch.randn(64, 8, dtype=torch.float64)
out, want = rope(x), spec.rope(x)
shown = H.maxdiff(out, want) > 1e-9
detail = f"float64 after a float32 call of the same size: max diff {H.maxdiff(out, want):.1e}"
''')

entry("rope_view_as_complex_needs_contiguous", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError("the last dimension must be even")
    L = x.shape[-2]
    angles = torch.outer(torch.arange(L, dtype=torch.float64, device=x.device),
                         base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    rotation = torch.polar(torch.ones_like(angles), angles)                 # e^{i theta}, complex128
    pairs = torch.view_as_complex(x.view(*x.shape[:-1], d // 2, 2))        # (x_2i + i x_2i+1)
    return torch.view_as_real(pairs * rotation.to(pairs.dtype)).flatten(-2)
'''}, why="view_as_complex needs a last dimension of stride 1, so a non-contiguous x (a transposed tensor, as "
       "q.transpose(-1, -2).transpose(...) or a strided slice) raises instead of being rotated.",
    shown_by='''
x = torch.randn(2, 8, 5).transpose(-1, -2)       # shape (2, 5, 8), last dimension not contiguous
shown = H.raises(rope, x) is not None and H.raises(spec.rope, x) is None and H.maxdiff(rope(x.contiguous()), spec.rope(x)) < 1e-5
detail = f"transposed x: {H.raises(rope, x)}"
''')

entry("rope_returns_x_for_one_position", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    L, d = x.shape[-2:]
    if d % 2:
        raise ValueError("odd last dimension")
    if L == 1:
        return x                                    # position 0 is not rotated: nothing to do
    theta = (torch.arange(L, dtype=torch.float64, device=x.device)[:, None]
             * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    c, s = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    x0, x1 = x[..., ::2], x[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).flatten(-2)
'''}, why="With a single position it returns x itself rather than a new tensor, so the output aliases the input "
       "(changing one changes the other).",
    shown_by='''
x = torch.randn(3, 1, 8)
out = rope(x)
out.mul_(2.0)                                    # the caller scales the rotated queries in place
shown = out.data_ptr() == x.data_ptr() and spec.rope(x).data_ptr() != x.data_ptr()
detail = "seq_len = 1: output is x itself"
''')

entry("rope_positions_on_default_device", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError("d must be even")
    positions = torch.arange(x.shape[-2], dtype=torch.float64)
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions[:, None] * freqs[None, :]
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([x_even * cos - x_odd * sin, x_even * sin + x_odd * cos], dim=-1).flatten(-2)
'''}, why="The positions and frequencies are made on the default device (CPU), not x.device, so x on another "
       "device (a GPU, or 'meta') raises instead of giving a result on x's device.",
    shown_by='''
x = torch.randn(2, 5, 4, device="meta")
shown = H.raises(rope, x) is not None and spec.rope(x).device.type == "meta"
detail = f"x on meta: {H.raises(rope, x)}"
''')

entry("rope_complex_polar", "correct", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"rope needs an even last dimension, got {d}")
    L = x.shape[-2]
    real = torch.float64 if x.dtype == torch.float64 else torch.float32
    cplx = torch.complex128 if real == torch.float64 else torch.complex64
    pos = torch.arange(L, dtype=torch.float64, device=x.device)
    inv_freq = 1.0 / (float(base) ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    rot = torch.polar(torch.ones(L, d // 2, dtype=torch.float64, device=x.device), torch.outer(pos, inv_freq))
    pairs = x.to(real).reshape(*x.shape[:-1], d // 2, 2).contiguous()       # a copy with stride 1 pairs
    out = torch.view_as_real(torch.view_as_complex(pairs) * rot.to(cplx))
    return out.flatten(-2).to(x.dtype)
'''}, why="Rotates with complex multiplication (view_as_complex on a contiguous reshaped copy, polar rotations in "
          "complex128 cast to the working precision), half-precision inputs done in float32 and cast back.")

entry("rope_rotation_matrices_einsum", "correct", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError("rope: the last dimension must be even")
    L = x.shape[-2]
    theta = (torch.arange(L, device=x.device, dtype=torch.float64).unsqueeze(-1)
             * torch.exp(torch.arange(0, d, 2, device=x.device, dtype=torch.float64) * (-math.log(base) / d)))
    c, s = torch.cos(theta), torch.sin(theta)
    R = torch.stack([torch.stack([c, -s], dim=-1), torch.stack([s, c], dim=-1)], dim=-2).to(x.dtype)  # (L, d/2, 2, 2)
    pairs = x.unflatten(-1, (d // 2, 2))                                    # (..., L, d/2, 2)
    return torch.einsum("lpij,...lpj->...lpi", R, pairs).flatten(-2)
'''}, why="Builds one 2x2 rotation matrix per (position, pair) and applies them all with einsum over unflattened "
          "pairs.")

entry("rope_empty_like_helper_timeit", "correct", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError("odd d")
    cos, sin = _rope_cos_sin(x.shape[-2], d, base, x.device)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    xe, xo = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)                       # a new tensor: x is never written
    out[..., 0::2] = xe * cos - xo * sin
    out[..., 1::2] = xe * sin + xo * cos
    return out

%timeit rope(torch.randn(8, 128, 64))
'''}, extra_cells=[{"before": "rope", "source": '''
def _rope_cos_sin(L, d, base, device):
    """cos and sin of p * base^(-2i/d), float64, shape (L, d/2)."""
    p = torch.arange(L, dtype=torch.float64, device=device)
    w = torch.tensor(float(base), dtype=torch.float64, device=device) ** (
        -torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)
    a = p[:, None] * w[None, :]
    return a.cos(), a.sin()
'''}], why="Angles come from a helper defined in a cell above; the result is written into the even and odd columns "
          "of torch.empty_like(x); a %timeit line is left in the cell.")

entry("rope_rotate_half_on_deinterleaved", "correct", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError("d must be even")
    h = d // 2
    pos = torch.arange(x.shape[-2], dtype=torch.float64, device=x.device)
    ang = torch.outer(pos, base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    cos = torch.cat([ang.cos(), ang.cos()], dim=-1).to(x.dtype)             # (L, d)
    sin = torch.cat([ang.sin(), ang.sin()], dim=-1).to(x.dtype)
    halves = torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)                # interleaved pairs -> two halves
    turned = torch.cat([-halves[..., h:], halves[..., :h]], dim=-1)         # rotate-half
    y = halves * cos + turned * sin
    return torch.stack([y[..., :h], y[..., h:]], dim=-1).flatten(-2)       # back to interleaved pairs
'''}, why="Reorders the interleaved pairs into two halves, applies the rotate-half formula there, and interleaves "
          "the result again: the same rotations on the interleaved pairs the text asks for.")


# ======================================================================================================================
# alibi_bias
# ======================================================================================================================

entry("alibi_lru_cache_shared", "mistake", {"alibi_bias": '''
import functools


@functools.lru_cache(maxsize=None)
def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    def pow2(n):
        return [2 ** (-8 * (h + 1) / n) for h in range(n)]

    if math.log2(n_heads).is_integer():
        slopes = pow2(n_heads)
    else:
        c = 2 ** math.floor(math.log2(n_heads))
        slopes = pow2(c) + pow2(2 * c)[0::2][: n_heads - c]
    pos = torch.arange(seq_len)
    distance = (pos[:, None] - pos[None, :]).abs()
    return -torch.tensor(slopes)[:, None, None] * distance
'''}, why="lru_cache hands every caller the same tensor: a causal model that masks its bias in place "
       "(bias.masked_fill_(~causal, -inf)) changes what later calls return.",
    shown_by='''
b = alibi_bias(4, 5)
b.masked_fill_(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))    # the caller masks its copy
later = alibi_bias(4, 5)
shown = bool(torch.isinf(later).any()) and not bool(torch.isinf(spec.alibi_bias(4, 5)).any())
detail = "a later call returns -inf entries"
''')

entry("alibi_extra_slopes_from_8_heads", "mistake", {"alibi_bias": '''
def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    def slopes_pow2(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    closest = 2 ** int(math.log2(n_heads))
    if closest == n_heads:
        slopes = slopes_pow2(n_heads)
    else:                                            # then every other slope of the 8 heads
        slopes = slopes_pow2(closest) + slopes_pow2(8)[0::2][: n_heads - closest]
    i = torch.arange(seq_len)
    dist = (i.view(-1, 1) - i.view(1, -1)).abs().float()
    return -torch.tensor(slopes, dtype=torch.float32).view(-1, 1, 1) * dist
'''}, why="The extra slopes for a head count that is not a power of two are taken from 8 heads (the text's n = 6 "
       "example) instead of 2c heads: right for 5-7 heads, wrong for 3, 9-15, 17-31 or 33-40 heads.",
    shown_by='''
got, want = -alibi_bias(12, 2)[:, 0, 1], -spec.alibi_bias(12, 2)[:, 0, 1]
shown = H.maxdiff(got, want) > 1e-3 and H.maxdiff(alibi_bias(6, 4), spec.alibi_bias(6, 4)) < 1e-6
detail = f"12 heads: slopes {[round(s, 4) for s in got.tolist()[8:]]} vs {[round(s, 4) for s in want.tolist()[8:]]}"
''')

entry("alibi_log2_of_n_minus_1", "mistake", {"alibi_bias": '''
def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    def pow2(n):
        return [2 ** (-8 * (h + 1) / n) for h in range(n)]

    c = 2 ** math.floor(math.log2(n_heads - 1))      # the largest power of two below n_heads
    if 2 * c == n_heads:                             # n_heads is itself a power of two
        slopes = pow2(n_heads)
    else:
        slopes = pow2(c) + pow2(2 * c)[0::2][: n_heads - c]
    distance = torch.arange(seq_len)[None, :] - torch.arange(seq_len)[:, None]
    return -torch.tensor(slopes).reshape(n_heads, 1, 1) * distance.abs()
'''}, why="Finds the largest power of two below n with log2(n - 1), which is right for every n >= 2 but raises "
       "ValueError (math domain error) for a single head.",
    shown_by='''
shown = H.raises(alibi_bias, 1, 4) is not None and H.raises(spec.alibi_bias, 1, 4) is None
detail = f"n_heads = 1: {H.raises(alibi_bias, 1, 4)}"
''')

entry("alibi_press_recursive_cdist", "correct", {"alibi_bias": '''
def _get_slopes(n):
    """Press et al.'s own recipe."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _get_slopes(2 * closest)[0::2][: n - closest]


def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    positions = torch.arange(seq_len, dtype=torch.float32).unsqueeze(-1)       # (L, 1)
    distance = torch.cdist(positions, positions, p=1)                         # |i - j|, (L, L)
    slopes = torch.tensor(_get_slopes(n_heads), dtype=torch.float32)
    return -(slopes[:, None, None] * distance)
'''}, why="Press et al.'s original recursive slope recipe (start * ratio^i) and distances from torch.cdist with p=1.")

entry("alibi_numpy_broadcast", "correct", {"alibi_bias": '''
import numpy as np


def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    def pow2(n):
        return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)

    n = n_heads
    if n & (n - 1) == 0:
        m = pow2(n)
    else:
        c = 1 << (n.bit_length() - 1)
        m = np.concatenate([pow2(c), pow2(2 * c)[::2][: n - c]])
    i = np.arange(seq_len)
    bias = -m[:, None, None] * np.abs(i[:, None] - i[None, :])
    return torch.tensor(bias, dtype=torch.float32)


assert torch.allclose(-alibi_bias(6, 2)[:, 0, 1], torch.tensor([1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]))
'''}, why="Slopes and distances in numpy float64, converted with torch.tensor(..., dtype=float32); a self-check "
          "assert follows in the cell.")
