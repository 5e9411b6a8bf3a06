"""Blind corpus, positional_encoding: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# ----------------------------------------------------------------------------------------------------------------------
# sinusoidal_encoding: mistakes
# ----------------------------------------------------------------------------------------------------------------------

entry("sin_float32_frequencies", "mistake", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 != 0:
        raise ValueError("d_model must be even")
    position = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)           # positions in float64, as asked
    div_term = base ** (-torch.arange(0, d_model, 2) / d_model)                   # int / int: a float32 tensor
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.float()
'''}, "The positions are float64 but the frequencies are not: `torch.arange(0, d_model, 2) / d_model` divides an "
      "integer tensor and gives float32, so every frequency carries float32's rounding, which p multiplies. The text "
      "says \"Compute the angles in float64 and convert the table at the end: a float32 angle at position 2,000 is "
      "already off by 10^-4, and the tests allow a table only the error of float32's own rounding.\"",
      shown_by="""
pe, want = sinusoidal_encoding(2048, 512), spec.sinusoidal_encoding(2048, 512)
gap = H.maxdiff(pe, want)
shown = gap > 1e-5
detail = f"2048 x 512: max error {gap:.2e} (float32 rounding of a table entry is at most 6e-8)"
""")

entry("sin_float32_everything", "mistake", {"sinusoidal_encoding": '''
import math


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError(f"d_model = {d_model} is odd")
    pos = torch.arange(seq_len).float()[:, None]
    inv_freq = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(base) / d_model))
    angles = pos * inv_freq
    pe = torch.empty(seq_len, d_model)
    pe[:, 0::2] = angles.sin()
    pe[:, 1::2] = angles.cos()
    return pe
'''}, "The usual PyTorch-tutorial code, all in float32: the angles p * base^(-2i/d) are rounded to float32 before "
      "sin and cos. The text: \"Compute the angles in float64 and convert the table at the end: a float32 angle at "
      "position 2,000 is already off by 10^-4\" (and the graded cell: \"long sequences (2048 x 512) within float32 "
      "error\").",
      shown_by="""
pe, want = sinusoidal_encoding(2500, 8), spec.sinusoidal_encoding(2500, 8)
gap = H.maxdiff(pe, want)
shown = gap > 1e-5
detail = f"2500 positions: max error {gap:.2e}"
""")

entry("sin_halves_side_by_side", "mistake", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError("odd d_model")
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]
    freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = pos * freq
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1).float()
'''}, "Sines in the first half of the columns and cosines in the second: the same numbers, in the wrong columns. The "
      "formula puts them at PE[p, 2i] and PE[p, 2i+1], and the hint: \"Write the sines into the even columns and the "
      "cosines into the odd ones (pe[:, 0::2] and pe[:, 1::2]), interleaved, not as two halves side by side.\"",
      shown_by="""
gap = H.maxdiff(sinusoidal_encoding(6, 4), spec.sinusoidal_encoding(6, 4))
shown = gap > 0.5
detail = f"6 x 4: off by {gap:.2f}; row 0 is {sinusoidal_encoding(6, 4)[0].tolist()}"
""")

entry("sin_lru_cache_shared_table", "mistake", {"sinusoidal_encoding": '''
import functools


@functools.lru_cache(maxsize=None)
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """Cached: the table only depends on its arguments."""
    if d_model % 2:
        raise ValueError("d_model must be even")
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]
    freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe.float()
'''}, "functools.lru_cache hands the same tensor to every call with the same arguments, so a caller who adds to "
      "it changes every later answer. The promises: \"Every result is a new tensor: a caller who changes it in place "
      "changes no argument and no later result (no cache that hands out the same tensor twice ...)\".",
      shown_by="""
a = sinusoidal_encoding(7, 4)
a.add_(1.0)                                  # the caller adds something to its table
gap = H.maxdiff(sinusoidal_encoding(7, 4), spec.sinusoidal_encoding(7, 4))
shown = gap > 0.5
detail = f"after the caller changed its result, the next call is off by {gap:.2f}"
""")

entry("sin_cache_keyed_by_size", "mistake", {"sinusoidal_encoding": '''
_tables = {}


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError("d_model must be even")
    if (seq_len, d_model) not in _tables:                     # computed once per size
        pos = torch.arange(seq_len, dtype=torch.float64)[:, None]
        freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        pe = torch.empty(seq_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(pos * freq)
        pe[:, 1::2] = torch.cos(pos * freq)
        _tables[(seq_len, d_model)] = pe.float()
    return _tables[(seq_len, d_model)].clone()                 # a fresh copy every time
'''}, "The cache hands out copies (so the table is a new tensor every time) but its key forgets `base`: a second call "
      "with the same sizes and another base answers for the first base. The text: \"each call answers for its own "
      "arguments (the hidden tests call it again with the same sizes and another base).\"",
      shown_by="""
sinusoidal_encoding(9, 6)
gap = H.maxdiff(sinusoidal_encoding(9, 6, 100.0), spec.sinusoidal_encoding(9, 6, 100.0))
shown = gap > 1e-2
detail = f"(9, 6) with base 100 after (9, 6) with the default base: off by {gap:.2f}"
""")

# ----------------------------------------------------------------------------------------------------------------------
# rope: mistakes
# ----------------------------------------------------------------------------------------------------------------------

entry("rope_rotate_half", "mistake", {"rope": '''
def rope(x, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("rope needs an even last dimension")
    L = x.shape[-2]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    pos = torch.arange(L, dtype=torch.float64, device=x.device)[:, None]
    freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = torch.cat([pos * freq, pos * freq], dim=-1)                      # (L, d)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    rotated = torch.cat([-x2, x1], dim=-1)
    out = x.to(work) * angles.cos().to(work) + rotated.to(work) * angles.sin().to(work)
    return out.to(x.dtype)
'''}, "The rotate-half convention of many libraries (column i paired with column i + d/2). The text: \"This exercise "
      "and its tests use the interleaved pairs\": pair i is \"the two neighbouring columns (2i, 2i+1)\".",
      shown_by="""
x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
gap = H.maxdiff(rope(x), spec.rope(x))
shown = gap > 1e-2
detail = f"(2, 5, 8): off by {gap:.2f}"
""")

entry("rope_view_flatten_batch", "mistake", {"rope": '''
def rope(x, base=10000.0):
    *lead, L, d = x.shape
    if d % 2:
        raise ValueError("odd d")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    flat = x.view(-1, L, d // 2, 2).to(work)                 # (N, L, d/2, 2): every leading dimension in one
    theta = torch.arange(L, dtype=torch.float64, device=x.device)[:, None] * \\
        base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    c, s = theta.cos().to(work), theta.sin().to(work)
    a, b = flat[..., 0], flat[..., 1]
    out = torch.stack([a * c - b * s, a * s + b * c], dim=-1)
    return out.reshape(x.shape).to(x.dtype)
'''}, "`x.view(-1, L, d/2, 2)` merges the leading dimensions, which needs them laid out one after the other in "
      "memory: heads cut from (B, L, H, d) by transpose(1, 2) are not, and view raises. The promises: \"A tensor "
      "argument may be a view that is not contiguous in memory, a slice or a transposed tensor (rope): where you "
      "reshape an argument, use reshape, not view.\"",
      shown_by="""
x = torch.randn(2, 7, 3, 8).transpose(1, 2)                   # (B, H, L, d) from (B, L, H, d)
err = H.raises(rope, x)
shown = err is not None
detail = f"heads cut by transpose(1, 2): {err}"
""")

entry("rope_one_position_returns_x", "mistake", {"rope": '''
def rope(x, base=10000.0):
    d = x.shape[-1]
    if d % 2 == 1:
        raise ValueError("d must be even")
    L = x.shape[-2]
    if L == 1:
        return x                                   # position 0 is not rotated: nothing to do
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    theta = torch.outer(torch.arange(L, dtype=torch.float64, device=x.device),
                        base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    cos, sin = theta.cos().to(work), theta.sin().to(work)
    even, odd = x[..., 0::2].to(work), x[..., 1::2].to(work)
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2).to(x.dtype)
'''}, "A shortcut for one position returns x itself, so a caller who changes the result changes its argument. The "
      "text: \"Return a new tensor of the same shape, dtype and device as x\", and the promises: \"Every result is a "
      "new tensor ... never an argument itself or a view of one\".",
      shown_by="""
x = torch.randn(3, 1, 4)
out = rope(x)
shown = out.data_ptr() == x.data_ptr()
detail = "seq_len = 1: rope(x) is x"
""")

entry("rope_angles_in_x_dtype", "mistake", {"rope": '''
def rope(x, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    L = x.shape[-2]
    # everything in x's dtype and on x's device, so nothing needs converting afterwards
    pos = torch.arange(L, device=x.device, dtype=x.dtype)
    freq = base ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    theta = pos[:, None] * freq[None, :]
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
'''}, "The positions and angles are made in x's dtype: in bfloat16 the positions themselves are rounded (257 is "
      "256) and the angles are off by whole radians. The text: \"A float16 or bfloat16 x is answered in its dtype, at "
      "its precision: rotate it in float32 and convert the result\" (and the hint: \"Compute cos and sin in "
      "float64\").",
      shown_by="""
x = torch.randn(1, 600, 8, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
gap = H.maxdiff(rope(x), spec.rope(x))
shown = gap > 0.2
detail = f"bfloat16, 600 positions: off by {gap:.2f} (bfloat16's rounding of a value near 3 is 0.016)"
""")

entry("rope_float32_for_float64", "mistake", {"rope": '''
def rope(x, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    L = x.shape[-2]
    theta = torch.arange(L, dtype=torch.float64, device=x.device)[:, None] * \\
        (base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    cos, sin = theta.cos().float(), theta.sin().float()        # the rotation in float32, then back to x's dtype
    a, b = x[..., 0::2].float(), x[..., 1::2].float()
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2).to(x.dtype)
'''}, "Every input is rotated in float32, float64 ones too, which then carry float32's rounding. The text: \"A "
      "float64 x is held to float64's precision: compute its angles in float64 too\" (and the hint: \"rotate in x's "
      "dtype, or in float32 for a float16 or bfloat16 x\").",
      shown_by="""
x = torch.randn(2, 64, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
gap = H.maxdiff(rope(x), spec.rope(x))
shown = gap > 1e-9
detail = f"float64 input: off by {gap:.1e}"
""")

entry("rope_positions_on_cpu", "mistake", {"rope": '''
def rope(x, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    L = x.shape[-2]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    i = torch.arange(0, d, 2, dtype=torch.float64)
    theta = torch.arange(L, dtype=torch.float64)[:, None] * base ** (-i / d)
    cos, sin = theta.cos().to(work), theta.sin().to(work)
    a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2).to(x.dtype)
'''}, "The angles are made on the CPU, whatever x's device: on the \"meta\" device (or a GPU) the rotation mixes "
      "devices. The promises: \"A result is made on its arguments' device (rope): the tests also call with tensors "
      "on \"meta\" ... so make new tensors with device=x.device\".",
      shown_by="""
x = torch.randn(2, 5, 6, device="meta")
try:
    out = rope(x)
    shown = out.device.type != "meta"
    detail = f"answered on {out.device}"
except Exception as e:
    shown, detail = True, f"x on meta: {type(e).__name__}"
""")

entry("rope_detached_copy", "mistake", {"rope": '''
def rope(x, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    x = x.detach().clone()                     # work on a copy, so that x itself is left as it is
    L = x.shape[-2]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    theta = torch.arange(L, dtype=torch.float64, device=x.device)[:, None] * \\
        base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    cos, sin = theta.cos().to(work), theta.sin().to(work)
    a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2).to(x.dtype)
'''}, "To leave x as it is, the learner works on `x.detach().clone()`: the values are right but no gradient reaches "
      "x (a clone alone was enough). The promises: \"Gradients reach every floating argument ... no .detach(), .data "
      "or torch.no_grad() on a path by which an input changes an output\".",
      shown_by="""
x = torch.randn(2, 5, 4, requires_grad=True)
out = rope(x)
shown = not out.requires_grad
detail = f"rope(x).requires_grad = {out.requires_grad} for x with requires_grad"
""")

entry("rope_length_from_dim1", "mistake", {"rope": '''
def rope(x, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    L = x.shape[1] if x.dim() > 2 else x.shape[0]          # (B, L, d) or (L, d)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    theta = torch.arange(L, dtype=torch.float64, device=x.device)[:, None] * \\
        base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    cos, sin = theta.cos().to(work), theta.sin().to(work)
    a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2).to(x.dtype)
'''}, "The length is read from dimension 1, which is the positions only for (L, d) and (B, L, d): with heads, "
      "(B, H, L, d), it is the number of heads. The text: \"x has shape (..., seq_len, d) ...; the position p of a row "
      "is its index along dimension -2.\"",
      shown_by="""
x = torch.randn(2, 3, 7, 8)                      # (B, H, L, d)
err = H.raises(rope, x)
gap = float("inf") if err else H.maxdiff(rope(x), spec.rope(x))
shown = gap > 1e-3
detail = f"(B, H, L, d) = (2, 3, 7, 8): {err or f'off by {gap:.2f}'}"
""")

# ----------------------------------------------------------------------------------------------------------------------
# alibi_bias: mistakes
# ----------------------------------------------------------------------------------------------------------------------

entry("alibi_consecutive_extra_slopes", "mistake", {"alibi_bias": '''
import math


def alibi_bias(n_heads, seq_len):
    def pow2(n):
        return [2 ** (-8 * (h + 1) / n) for h in range(n)]

    if math.log2(n_heads).is_integer():
        slopes = pow2(n_heads)
    else:
        c = 2 ** math.floor(math.log2(n_heads))
        slopes = pow2(c) + pow2(2 * c)[: n_heads - c]          # the next ones of 2c heads
    m = torch.tensor(slopes, dtype=torch.float32)[:, None, None]
    pos = torch.arange(seq_len)
    return -m * (pos[None, :] - pos[:, None]).abs()
'''}, "For a head count that is not a power of two the extra slopes are the first ones of 2c heads (1/2, 1/4 for 6 "
      "heads) instead of every other one. The text: \"then append the slopes of 2c heads at h = 0, 2, 4, ... (every "
      "other one, starting with the first) until there are n ... head 4 has slope 1/2 and head 5 has 1/8.\"",
      shown_by="""
gap = H.maxdiff(alibi_bias(6, 3), spec.alibi_bias(6, 3))
shown = gap > 1e-3
detail = f"6 heads: slopes {(-alibi_bias(6, 2)[:, 0, 1]).tolist()}"
""")

entry("alibi_dict_cache", "mistake", {"alibi_bias": '''
import math

_cache = {}


def _slopes(n):
    def pow2(k):
        return [2.0 ** (-8.0 * (h + 1) / k) for h in range(k)]

    if n & (n - 1) == 0:
        return pow2(n)
    c = 2 ** int(math.log2(n))
    return pow2(c) + pow2(2 * c)[0::2][: n - c]


def alibi_bias(n_heads, seq_len):
    key = (n_heads, seq_len)
    if key not in _cache:                      # the bias is the same for every batch: compute it once
        i = torch.arange(seq_len, dtype=torch.float32)
        dist = (i[:, None] - i[None, :]).abs()
        _cache[key] = -torch.tensor(_slopes(n_heads))[:, None, None] * dist
    return _cache[key]
'''}, "A dictionary cache hands the same tensor to every call: a caller who masks it in place "
      "(bias.masked_fill_(..., -inf), as a causal model might) changes every later answer. The promises: \"Every "
      "result is a new tensor ... (no cache that hands out the same tensor twice ...)\".",
      shown_by="""
b = alibi_bias(4, 5)
b.masked_fill_(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
again = alibi_bias(4, 5)
shown = bool(torch.isinf(again).any())
detail = "the next call's bias holds the -inf a caller wrote into an earlier one"
""")

# ----------------------------------------------------------------------------------------------------------------------
# correct alternatives
# ----------------------------------------------------------------------------------------------------------------------

entry("sin_exp_log_columns", "correct", {"sinusoidal_encoding": '''
import math


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 != 0:
        raise ValueError(f"sinusoidal_encoding needs an even d_model, got {d_model}")
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    inv_freq = torch.exp(two_i * (-math.log(base) / d_model))                # base^(-2i/d) as exp(-2i ln(base) / d)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = angles.sin()
    pe[:, 1::2] = angles.cos()
    return pe.to(torch.float32)
'''}, "base^(-2i/d) written as exp(-2i ln(base)/d), torch.outer for the angles, all in float64 and converted at the "
      "end: the same table.")

entry("sin_python_frequencies", "correct", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError("d_model must be even: sin/cos come in pairs")
    p = torch.arange(seq_len, dtype=torch.float64)
    columns = []
    for i in range(d_model // 2):                      # one pair of columns per frequency (a loop over d/2 only)
        w = float(base) ** (-2 * i / d_model)          # a Python float: float64
        columns += [torch.sin(p * w), torch.cos(p * w)]
    if not columns:
        return torch.zeros(seq_len, 0)
    return torch.stack(columns, dim=1).float()
'''}, "The frequencies as Python floats (float64) in a loop over the d/2 pairs, not over positions; columns stacked "
      "in order sin, cos, sin, cos: the same table.")

entry("rope_complex_numbers", "correct", {"rope": '''
def rope(x, base=10000.0):
    """Pairs as complex numbers: (x_2i + i x_2i+1) * e^(i theta) is the rotation by theta."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"rope needs an even last dimension, got {d}")
    L = x.shape[-2]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    theta = torch.arange(L, dtype=torch.float64, device=x.device)[:, None] * \\
        torch.pow(float(base), -torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    turn = torch.polar(torch.ones_like(theta), theta).to(torch.complex128 if work == torch.float64 else torch.complex64)
    z = torch.view_as_complex(x.to(work).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * turn).flatten(-2).to(x.dtype)
'''}, "The rotation as a complex product, z * e^(i theta), with view_as_complex / view_as_real (on a contiguous "
      "copy, so any layout works); float64 stays in complex128.")

entry("rope_write_into_empty", "correct", {"rope": '''
def rope(x, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("odd last dimension")
    L = x.shape[-2]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    inv = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d))
    theta = torch.arange(L, device=x.device, dtype=torch.float64).unsqueeze(-1) * inv
    cos, sin = theta.cos().to(work), theta.sin().to(work)
    xe, xo = x[..., ::2].to(work), x[..., 1::2].to(work)
    out = x.new_empty(x.shape, dtype=work)                # a new tensor, written column by column
    out[..., ::2] = xe * cos - xo * sin
    out[..., 1::2] = xe * sin + xo * cos
    return out.to(x.dtype)
'''}, "A new tensor from x.new_empty filled through the two strided slices (autograd follows the writes into a "
      "fresh tensor); the inverse frequencies as 1 / base^(2i/d).")

entry("alibi_press_recursive", "correct", {"alibi_bias": '''
import math


def get_slopes(n):
    """Press et al.'s own recursion."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + get_slopes(2 * closest)[0::2][: n - closest]


def alibi_bias(n_heads, seq_len):
    m = torch.tensor(get_slopes(n_heads), dtype=torch.float64).view(-1, 1, 1)
    j = torch.arange(seq_len, dtype=torch.float64)
    distance = (j.view(1, -1) - j.view(-1, 1)).abs()
    return (-(m * distance)).float()
'''}, "The slopes by the recursion of Press et al.'s code (start = 2^(-8/n), then powers of it), distances from two "
      "views of one arange: the same bias.")

# ----------------------------------------------------------------------------------------------------------------------
# slow answers
# ----------------------------------------------------------------------------------------------------------------------

entry("sin_python_double_loop", "slow", {"sinusoidal_encoding": '''
import math


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError("d_model must be even")
    table = []
    for p in range(seq_len):
        row = []
        for i in range(d_model // 2):
            angle = p * base ** (-2 * i / d_model)
            row += [math.sin(angle), math.cos(angle)]
        table.append(row)
    return torch.tensor(table, dtype=torch.float32).reshape(seq_len, d_model)
'''}, "Right values (math.sin in float64), but two Python loops over every entry: the hint says \"No loop is needed\"; "
      "a 2048 x 512 table takes a second instead of milliseconds.",
      shown_by="""
ratio = H.time_ratio(sinusoidal_encoding, spec.sinusoidal_encoding, 512, 256, repeats=3)
shown = ratio > 10
detail = f"512 x 256: {ratio:.0f}x the time of the vectorised table"
""")

entry("rope_loop_over_positions", "slow", {"rope": '''
def rope(x, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    rows = []
    for p in range(x.shape[-2]):                          # one position at a time
        theta = p * freq
        c, s = theta.cos().to(work), theta.sin().to(work)
        a, b = x[..., p, 0::2].to(work), x[..., p, 1::2].to(work)
        rows.append(torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2))
    return torch.stack(rows, dim=-2).to(x.dtype)
'''}, "Right values, but a Python loop over positions: about ten torch operations per position, so a 1024-position "
      "input makes ten thousand calls (the book's \"Why a Python loop over tokens is slow\").",
      shown_by="""
x = torch.randn(2, 256, 16)
mine, theirs = H.op_count(rope, x), H.op_count(spec.rope, x)
ratio = H.time_ratio(rope, spec.rope, x, repeats=3)
shown = mine > 20 * theirs and ratio > 5
detail = f"256 positions: {mine} torch operations against {theirs}, {ratio:.0f}x the time"
""")
