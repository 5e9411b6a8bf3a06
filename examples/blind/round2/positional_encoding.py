"""Blind corpus (round 2) for exercises/positional_encoding: sinusoidal_encoding, rope, alibi_bias.

New entries only (round 1's names are not repeated). Each mistake breaks one sentence of the notebook's text, by an
input that text allows; each correct entry is another honest way to the same answer; each slow entry is correct but
far slower than the vectorised answer the notebook asks for.
"""

ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


# ----------------------------------------------------------------------------------------------------------------------
# sinusoidal_encoding: mistakes
# ----------------------------------------------------------------------------------------------------------------------

entry("sin_annotated_div_term_float32", "mistake", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even, got {d_model}")
    position = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)             # positions in float64
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(base) / d_model))  # as in the Annotated Transformer
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.float()
'''}, why="The frequencies come out of an int64 arange times a Python float, i.e. float32, so the float64 angles carry "
        "float32-rounded frequencies and are off by ~1e-4 at position 2,000: 'Compute the angles in float64 ... the "
        "tests allow a table only the error of float32's own rounding.'",
    shown_by='''
mine, want = sinusoidal_encoding(2048, 512), spec.sinusoidal_encoding(2048, 512)
err = H.maxdiff(mine, want)
shown = err > 1e-5
detail = f"2048 x 512: max diff {err:.1e} (float32 rounding alone is ~6e-8)"
''')

entry("sin_base_parameter_named_theta", "mistake", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, theta=10000.0):
    """PE[p, 2i] = sin(p * theta^(-2i/d_model)), PE[p, 2i+1] = cos(p * theta^(-2i/d_model))."""
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even, got {d_model}")
    p = torch.arange(seq_len, dtype=torch.float64)[:, None]
    freqs = theta ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = p * freqs
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(seq_len, d_model)
    return pe.float()
'''}, why="The base argument is renamed theta (RoPE's name for it), so a call with base= as a keyword raises "
        "TypeError: '`base` may be given by position or by keyword'.",
    shown_by='''
raised = H.raises(sinusoidal_encoding, 6, 4, base=100.0)
shown = raised == "TypeError"
detail = f"sinusoidal_encoding(6, 4, base=100.0) raises {raised}"
''')


# ----------------------------------------------------------------------------------------------------------------------
# sinusoidal_encoding: correct alternatives
# ----------------------------------------------------------------------------------------------------------------------

entry("sin_exp_log_div_term_float64", "correct", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 == 1:
        raise ValueError("sin/cos pairs need an even d_model")
    position = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(base) / d_model))
    pe = torch.zeros(seq_len, d_model)          # float32: the float64 sines and cosines are rounded once, here
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
'''}, why="The Annotated Transformer's exp(-2i ln(base)/d) with everything in float64, written into a float32 table "
        "(one rounding on assignment): the same table.")

entry("sin_stack_division_form_with_plot", "correct", {"sinusoidal_encoding": '''
import matplotlib.pyplot as plt


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2:
        raise ValueError(f"d_model = {d_model} is odd")
    half = d_model // 2
    wavelengths = torch.tensor(float(base), dtype=torch.float64) ** (torch.arange(half, dtype=torch.float64) / half)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), 1.0 / wavelengths)   # (seq_len, d_model/2)
    table = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1)                  # (seq_len, d/2, 2)
    return table.flatten(start_dim=1).to(torch.float32)


plt.figure(figsize=(6, 3))
plt.imshow(sinusoidal_encoding(64, 32).T, aspect="auto", cmap="RdBu")
plt.xlabel("position")
plt.ylabel("column")
plt.close()
'''}, why="Wavelengths base^(i/(d/2)) (i/(d/2) = 2i/d exactly), angles as a division via torch.outer, sines and "
        "cosines interleaved by stack + flatten, and a plot at the end of the cell.")


# ----------------------------------------------------------------------------------------------------------------------
# sinusoidal_encoding: slow
# ----------------------------------------------------------------------------------------------------------------------

entry("sin_python_double_loop", "slow", {"sinusoidal_encoding": '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    """PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(p * base^(-2i/d_model))."""
    if d_model % 2 != 0:
        raise ValueError("d_model must be even")
    rows = []
    for p in range(seq_len):
        row = []
        for i in range(d_model // 2):
            angle = p * base ** (-2 * i / d_model)      # Python floats: double precision
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32)
'''}, why="Exact (Python floats are float64) but one math.sin and math.cos per entry: a Python loop over every "
        "position and pair instead of one broadcast (Hint 1: 'No loop is needed').",
    shown_by='''
ratio = H.time_ratio(sinusoidal_encoding, spec.sinusoidal_encoding, 512, 128, repeats=3)
shown = ratio > 10
detail = f"512 x 128: {ratio:.0f}x the spec's CPU time"
''')


# ----------------------------------------------------------------------------------------------------------------------
# rope: mistakes
# ----------------------------------------------------------------------------------------------------------------------

entry("rope_view_flattens_leading_dims", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    *lead, L, d = x.shape
    if d % 2 != 0:
        raise ValueError(f"the last dimension must be even, got {d}")
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    flat = work.view(-1, L, d)                                   # (N, L, d): any leading dimensions in one
    pos = torch.arange(L, dtype=torch.float64, device=x.device)[:, None]
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = pos * freqs
    cos, sin = angles.cos().to(work.dtype), angles.sin().to(work.dtype)
    a, b = flat[..., 0::2], flat[..., 1::2]
    out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return out.view(x.shape).to(x.dtype)
'''}, why="x.view(-1, L, d) cannot merge the leading dimensions of heads made by transpose(1, 2), the way attention "
        "makes them: 'A tensor argument may be a view that is not contiguous in memory ... use `reshape`, not `view`.'",
    shown_by='''
q = torch.randn(2, 7, 3, 8).transpose(1, 2)          # (B, H, L, d) heads cut from (B, L, H, d)
raised = H.raises(rope, q)
shown = raised is not None
detail = f"rope on (B, L, H, d).transpose(1, 2) raises {raised}"
''')

entry("rope_half_upcast_not_converted_back", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()                       # rotate half precision in float32
    d, L = x.shape[-1], x.shape[-2]
    if d % 2 != 0:
        raise ValueError(f"the last dimension must be even, got {d}")
    pos = torch.arange(L, dtype=torch.float64, device=x.device)[:, None]
    angles = pos * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
'''}, why="float16 and bfloat16 inputs are rotated in float32 but never converted back, so they are answered in "
        "float32: 'A float16 or bfloat16 x is answered in its dtype ... rotate it in float32 and convert the result.'",
    shown_by='''
dts = [rope(torch.randn(2, 9, 8).to(dt)).dtype for dt in (torch.float16, torch.bfloat16)]
shown = dts != [torch.float16, torch.bfloat16]
detail = f"float16 / bfloat16 inputs answered in {dts}"
''')

entry("rope_always_float32_then_cast", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"the last dimension must be even, got {d}")
    xf = x.float()                                            # rotate in float32, whatever x is
    pos = torch.arange(x.shape[-2], dtype=torch.float64, device=x.device)[:, None]
    angles = pos * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    cos, sin = angles.cos().float(), angles.sin().float()
    even, odd = xf[..., 0::2], xf[..., 1::2]
    out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    return out.to(x.dtype)
'''}, why="Every input is rotated in float32, float64 ones too, so a float64 x comes back with float32's error: "
        "'A `float64` `x` is held to float64's precision: compute its angles in float64 too.'",
    shown_by='''
x = torch.randn(2, 50, 8, dtype=torch.float64)
out = rope(x)
err = H.maxdiff(out, spec.rope(x))
shown = out.dtype == torch.float64 and err > 1e-9
detail = f"float64 input: answered in {out.dtype}, max diff {err:.1e}"
''')

entry("rope_new_tensor_detaches", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"the last dimension must be even, got {d}")
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    theta = torch.arange(x.shape[-2], dtype=torch.float64, device=x.device)[:, None] * \\
        base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    c, s = theta.cos().to(work.dtype), theta.sin().to(work.dtype)
    e, o = work[..., 0::2], work[..., 1::2]
    rotated = torch.stack([e * c - o * s, e * s + o * c], dim=-1).flatten(-2)
    return x.new_tensor(rotated)                   # a new tensor on x's device, in x's dtype
'''}, why="x.new_tensor(...) copies the data and cuts it from the graph, so no gradient reaches x: 'Gradients reach "
        "every floating argument ... no `.detach()`, `.data` or `torch.no_grad()` on the way from an input to an "
        "output.'",
    shown_by='''
x = torch.randn(2, 5, 4, requires_grad=True)
out = rope(x)
shown = not out.requires_grad
detail = f"rope(x).requires_grad = {out.requires_grad} for x with requires_grad=True"
''')

entry("rope_positions_in_x_dtype", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    L, d = x.shape[-2], x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"the last dimension must be even, got {d}")
    pos = torch.arange(L, dtype=x.dtype, device=x.device)              # positions like x
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = torch.outer(pos.double(), inv_freq)                       # angles in float64
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    cos, sin = angles.cos().to(work.dtype), angles.sin().to(work.dtype)
    a, b = work[..., 0::2], work[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2).to(x.dtype)
'''}, why="The positions are made in x's dtype, where bfloat16 cannot count past 256 (257 becomes 256) and float16 "
        "past 2048, so later rows turn by the wrong angle: 'the position p of a row is its index along dimension -2', "
        "for float16 and bfloat16 inputs and long sequences alike.",
    shown_by='''
x = torch.randn(1, 300, 8).to(torch.bfloat16)
err = H.maxdiff(rope(x), spec.rope(x))
shown = err > 0.3
detail = f"bfloat16, 300 positions: max diff {err:.2f}"
''')

entry("rope_seq_len_from_dim_1", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"the last dimension must be even, got {d}")
    L = x.shape[1] if x.dim() > 2 else x.shape[0]          # x is (B, L, d) or (L, d)
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    pos = torch.arange(L, dtype=torch.float64, device=x.device)[:, None]
    angles = pos * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    cos, sin = angles.cos().to(work.dtype), angles.sin().to(work.dtype)
    xe, xo = work[..., 0::2], work[..., 1::2]
    return torch.stack([xe * cos - xo * sin, xe * sin + xo * cos], -1).flatten(-2).to(x.dtype)
'''}, why="The sequence length is read from dimension 1, so queries of shape (B, H, L, d) take their positions from "
        "the heads: '`x` has shape `(..., seq_len, d)` ... the position p of a row is its index along dimension -2'.",
    shown_by='''
x = torch.randn(2, 3, 7, 8)
raised = H.raises(rope, x)
shown = raised is not None or H.maxdiff(rope(x), spec.rope(x)) > 1e-3
detail = f"(B, H, L, d) = (2, 3, 7, 8): raises {raised}"
''')

entry("rope_base_not_passed_to_helper", "mistake", {"rope": '''
def rope_angles(seq_len, d, device=None, base=10000.0):
    """(seq_len, d/2) angles p * base^(-2i/d), in float64."""
    pos = torch.arange(seq_len, dtype=torch.float64, device=device)[:, None]
    return pos * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)


def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"the last dimension must be even, got {d}")
    angles = rope_angles(x.shape[-2], d, x.device)
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    cos, sin = angles.cos().to(work.dtype), angles.sin().to(work.dtype)
    x0, x1 = work[..., 0::2], work[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2).to(x.dtype)
'''}, why="rope's base is never handed to the helper, whose own default 10000 is used for every call: the angle is "
        "'p * base^(-2i/d)' for the base given ('the base argument' is graded).",
    shown_by='''
x = torch.randn(2, 6, 8)
err = H.maxdiff(rope(x, 500.0), spec.rope(x, 500.0))
shown = err > 1e-3
detail = f"rope(x, 500.0): max diff {err:.2f}"
''')

entry("rope_reuses_sinusoidal_table", "mistake", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"the last dimension must be even, got {d}")
    table = sinusoidal_encoding(x.shape[-2], d, base)        # part 1: sin in the even columns, cos in the odd
    sin, cos = table[:, 0::2].to(x.dtype), table[:, 1::2].to(x.dtype)
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    sin, cos = sin.to(work.dtype), cos.to(work.dtype)
    e, o = work[..., 0::2], work[..., 1::2]
    return torch.stack((e * cos - o * sin, e * sin + o * cos), dim=-1).flatten(-2).to(x.dtype)
'''}, why="Part 1's table holds the same sines and cosines, but in float32 and on the CPU, so a float64 x gets float32 "
        "angles and a tensor on 'meta' fails: 'A `float64` `x` is held to float64's precision' and 'A result is made "
        "on its arguments' device (`rope`)'.",
    shown_by='''
x = torch.randn(2, 1000, 8, dtype=torch.float64)
err = H.maxdiff(rope(x), spec.rope(x))
raised = H.raises(rope, torch.randn(2, 5, 6, device="meta"))
shown = err > 1e-9 and raised is not None
detail = f"float64, 1000 positions: max diff {err:.1e}; on meta: raises {raised}"
''')


# ----------------------------------------------------------------------------------------------------------------------
# rope: correct alternatives
# ----------------------------------------------------------------------------------------------------------------------

entry("rope_pairs_reshape_unbind", "correct", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"rope needs an even last dimension, got {d}")
    half = d // 2
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    inv = 1.0 / base ** (torch.arange(half, dtype=torch.float64, device=x.device) / half)
    theta = torch.arange(x.shape[-2], dtype=torch.float64, device=x.device)[:, None] * inv     # (L, d/2)
    cos, sin = theta.cos().to(work.dtype), theta.sin().to(work.dtype)
    a, b = work.reshape(*work.shape[:-1], half, 2).unbind(-1)                                  # the pairs
    out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return out.reshape(x.shape).to(x.dtype)
'''}, why="Pairs taken apart by reshape(..., d/2, 2).unbind(-1), frequencies as 1 / base^(i/(d/2)), float16 and "
        "bfloat16 rotated in float32: the same rotation.")

entry("rope_rotate_pairs_sign_trick", "correct", {"rope": '''
def rotate_pairs(x):
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): each pair turned by 90 degrees."""
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError("odd last dimension: rope rotates pairs")
    dtype = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    xc = x.to(dtype)
    pos = torch.arange(x.shape[-2], device=x.device, dtype=torch.float64)
    freqs = torch.pow(float(base), -torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    ang = torch.einsum("p,f->pf", pos, freqs).repeat_interleave(2, dim=-1)     # (L, d): each angle twice
    out = xc * ang.cos().to(dtype) + rotate_pairs(xc) * ang.sin().to(dtype)
    return out.to(x.dtype)
'''}, why="x cos(theta) + rot90(x) sin(theta) with each angle repeated for both columns of its pair (einsum for the "
        "outer product): the same formulas, interleaved.")


# ----------------------------------------------------------------------------------------------------------------------
# rope: slow
# ----------------------------------------------------------------------------------------------------------------------

entry("rope_loop_over_positions", "slow", {"rope": '''
def rope(x, base=10000.0):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"the last dimension must be even, got {d}")
    work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    rows = []
    for p in range(x.shape[-2]):                              # one position at a time
        c, s = torch.cos(p * freqs).to(work.dtype), torch.sin(p * freqs).to(work.dtype)
        e, o = work[..., p, 0::2], work[..., p, 1::2]
        rows.append(torch.stack((e * c - o * s, e * s + o * c), dim=-1).flatten(-2))
    return torch.stack(rows, dim=-2).to(x.dtype)
'''}, why="Correct, but a Python loop over positions: about ten torch operations per position, so 1,024 positions "
        "cost hundreds of times the vectorised answer's operations (Hint 1: the angles, of shape (L, d/2), "
        "broadcast).",
    shown_by='''
x = torch.randn(2, 1024, 16)
mine, theirs = H.op_count(rope, x), H.op_count(spec.rope, x)
shown = mine > 50 * theirs
detail = f"1024 positions: {mine} torch operations against the spec's {theirs}"
''')


# ----------------------------------------------------------------------------------------------------------------------
# alibi_bias
# ----------------------------------------------------------------------------------------------------------------------

entry("alibi_floor_division_in_exponent", "mistake", {"alibi_bias": '''
def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    def pow2(n):
        return [2 ** (-8 * (h + 1) // n) for h in range(n)]

    c = 2 ** math.floor(math.log2(n_heads))
    slopes = pow2(c) if c == n_heads else pow2(c) + pow2(2 * c)[0::2][: n_heads - c]
    m = torch.tensor(slopes, dtype=torch.float32).reshape(n_heads, 1, 1)
    pos = torch.arange(seq_len)
    return -m * (pos[:, None] - pos[None, :]).abs()
'''}, why="-8 * (h + 1) // n floors the exponent, exact for 4 and 8 heads (the visible checks) but not for 16: the "
        "slopes are the geometric sequence 'm_h = 2^{-8(h+1)/n}' for any power of two n (and 1 to 40 heads are drawn).",
    shown_by='''
mine, want = alibi_bias(16, 3), spec.alibi_bias(16, 3)
err = H.maxdiff(mine, want)
shown = err > 1e-3
detail = f"16 heads: slopes {(-mine[:4, 0, 1]).tolist()} instead of {(-want[:4, 0, 1]).tolist()}"
''')

entry("alibi_press_start_ratio", "correct", {"alibi_bias": '''
def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    def slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))           # 2^(-8/n)
        ratio = start
        return [start * ratio ** i for i in range(n)]

    def get_slopes(n):
        if math.log2(n).is_integer():
            return slopes_power_of_2(n)
        closest = 2 ** math.floor(math.log2(n))
        return slopes_power_of_2(closest) + get_slopes(2 * closest)[0::2][: n - closest]

    m = torch.tensor(get_slopes(n_heads)).view(n_heads, 1, 1)
    ctx = torch.arange(seq_len)
    return -(m * (ctx[None, :] - ctx[:, None]).abs())
'''}, why="Press et al.'s own code: the slopes as start * ratio^i with start = ratio = 2^(-8/n), recursion for other "
        "head counts, slopes rounded to float32 before the product: equal within float32 rounding.")

entry("alibi_cached_slopes_fresh_bias", "correct", {"alibi_bias": '''
import functools


@functools.lru_cache(maxsize=None)
def alibi_slopes(n):
    """The slopes of n heads, as a tuple (cached: a tuple cannot be changed by a caller)."""
    if (n & (n - 1)) == 0:
        return tuple(2.0 ** (-8.0 * (h + 1) / n) for h in range(n))
    c = 1
    while 2 * c < n:
        c *= 2
    return alibi_slopes(c) + alibi_slopes(2 * c)[0::2][: n - c]


def alibi_bias(n_heads, seq_len):
    """bias[h, i, j] = -m_h * |i - j|, with the slopes m_h of Press et al. (2021)."""
    slopes = torch.tensor(alibi_slopes(n_heads), dtype=torch.float64)
    i = torch.arange(seq_len, dtype=torch.float64)
    distance = (i.unsqueeze(1) - i.unsqueeze(0)).abs()
    return torch.einsum("h,ij->hij", -slopes, distance).to(torch.float32)


print(alibi_bias(6, 3)[:, 0, 1])
'''}, why="Slopes cached as immutable tuples (the bias itself is new at every call), c found by doubling, the product "
        "by einsum, and a print at the end of the cell.")
