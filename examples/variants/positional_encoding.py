"""Known answers to the positional_encoding exercise (see autograder/authoring/variants.py)."""
from autograder.authoring.variants import Bug, Correct

SIN_EXP_LOG = '''def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    if d_model % 2 == 1:
        raise ValueError("d_model must be even")
    position = torch.arange(seq_len).unsqueeze(1).double()
    div_term = torch.exp(torch.arange(0, d_model, 2).double() * (-math.log(base) / d_model))
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.float()
'''

SIN_NUMPY = '''import numpy as np

def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError("odd d_model")
    p = np.arange(seq_len)[:, None]
    i = np.arange(d_model // 2)[None, :]
    angle = p / np.power(base, 2 * i / d_model)
    pe = np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(seq_len, d_model)
    return torch.from_numpy(pe).to(torch.float32)
'''

ROPE_COMPLEX = '''def rope(x, base=10000.0):
    L, d = x.shape[-2:]
    if d % 2:
        raise ValueError("d must be even")
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = torch.outer(torch.arange(L, dtype=torch.float64, device=x.device), freqs)
    rot = torch.polar(torch.ones_like(angles), angles)                 # (L, d/2) complex
    xc = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(xc * rot).reshape(x.shape).to(x.dtype)
'''

ROPE_MATRIX = '''def rope(x, base=10000.0):
    L, d = x.shape[-2], x.shape[-1]
    if d % 2 != 0:
        raise ValueError("odd")
    y = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x      # half precision: rotate in float32
    at = {"dtype": y.dtype, "device": x.device}
    theta = torch.arange(L, **at)[:, None] * (1.0 / base ** (torch.arange(0, d, 2, **at) / d))
    c, s = torch.cos(theta), torch.sin(theta)
    out = y.clone()
    out[..., 0::2] = y[..., 0::2] * c - y[..., 1::2] * s
    out[..., 1::2] = y[..., 0::2] * s + y[..., 1::2] * c
    return out.to(x.dtype)
'''

ALIBI_LOOP = '''def alibi_bias(n_heads, seq_len):
    def _slopes(n):
        if (n & (n - 1)) == 0:
            start = 2 ** (-8 / n)
            return [start ** (h + 1) for h in range(n)]
        m = 1 << (n.bit_length() - 1)
        return _slopes(m) + _slopes(2 * m)[::2][: n - m]
    i = torch.arange(seq_len)
    dist = (i.view(-1, 1) - i.view(1, -1)).abs().float()
    return torch.stack([-s * dist for s in _slopes(n_heads)])
'''

SIN_CACHED = '''_TABLES = {}


def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError("d_model must be even")
    if (seq_len, d_model) not in _TABLES:
        p = torch.arange(seq_len, dtype=torch.float64)[:, None]
        angles = p * base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        _TABLES[seq_len, d_model] = torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(seq_len, d_model).float()
    return _TABLES[seq_len, d_model]
'''

ROPE_ANGLES_FLOAT32 = '''def rope(x, base=10000.0):
    L, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError("odd")
    at = {"dtype": torch.float32, "device": x.device}
    theta = torch.arange(L, **at)[:, None] * base ** (-torch.arange(0, d, 2, **at) / d)
    c, s = torch.cos(theta).to(x.dtype), torch.sin(theta).to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).flatten(-2)
'''


def _sin(cause, cells, **kw):
    return Bug(cause[0], cells, {"sinusoidal_encoding_tests": cause[1]}, cause=cause[1], **kw)


def _rope(cause, cells, **kw):
    return Bug(cause[0], cells, {"rope_tests": cause[1]}, cause=cause[1], **kw)


def _alibi(cause, cells, **kw):
    return Bug(cause[0], cells, {"alibi_bias_tests": cause[1]}, cause=cause[1], **kw)


VARIANTS = [
    Correct("exp_log_frequencies", {"sinusoidal_encoding": SIN_EXP_LOG},
            "frequencies as exp(-2i log(base) / d), the tutorial form, with its angles in float64"),
    Correct("numpy_then_converted", {"sinusoidal_encoding": SIN_NUMPY, "rope": ROPE_COMPLEX, "alibi_bias": ALIBI_LOOP},
            "numpy for the encoding, complex numbers for RoPE, a list of heads for ALiBi"),
    Correct("rope_in_dtype", {"rope": ROPE_MATRIX}, "RoPE computed at the input's precision with slicing (float32 for "
                                                    "half precision)"),
    _sin(("sin_angles_float32", "the angles are computed in float32: past a few thousand positions they are off by "
                                "1e-4 and more; compute them in float64 and return the table as float32"),
         {"sinusoidal_encoding": SIN_EXP_LOG.replace(".double()", ".float()").replace("dtype=torch.float64",
                                                                                       "dtype=torch.float32")}),
    _sin(("sin_cos_swapped", "sin and cos are swapped: column 2i is the sine, column 2i+1 the cosine"),
         {"sinusoidal_encoding": SIN_EXP_LOG.replace("torch.sin(position", "torch.COS(position")
          .replace("torch.cos(position", "torch.sin(position").replace("COS", "cos")}),
    _sin(("halves_concatenated", "the sines and cosines are concatenated halves; they are interleaved: column 2i "
                                 "the sine, 2i+1 the cosine"),
         {"sinusoidal_encoding": SIN_EXP_LOG.replace(
             "    pe[:, 0::2] = torch.sin(position * div_term)\n    pe[:, 1::2] = torch.cos(position * div_term)\n",
             "    pe = torch.cat([torch.sin(position * div_term), torch.cos(position * div_term)], dim=1)\n")}),
    _sin(("frequency_index_i", "the frequency of pair i is base^(-2i/d_model): use the even index 2i, not i"),
         {"sinusoidal_encoding": SIN_EXP_LOG.replace("torch.arange(0, d_model, 2).double()",
                                                     "torch.arange(d_model // 2).double()")}),
    _sin(("no_value_error", "an odd d_model does not raise ValueError: sin/cos pairs need an even d_model"),
         {"sinusoidal_encoding": SIN_EXP_LOG.replace(
             '    if d_model % 2 == 1:\n        raise ValueError("d_model must be even")\n', "")}),
    _sin(("sin_positions_from_one", "the positions are counted from 1; they count from 0"),
         {"sinusoidal_encoding": SIN_EXP_LOG.replace("torch.arange(seq_len)", "torch.arange(1, seq_len + 1)")}),
    _sin(("sin_base_ignored", "the `base` argument is ignored: 10000 is used whatever it is"),
         {"sinusoidal_encoding": SIN_EXP_LOG.replace("math.log(base)", "math.log(10000.0)")}),
    _sin(("sin_cached_by_size", "a table kept from an earlier call with the same sizes is returned, whatever the "
                                "base: compute the table for the arguments of each call"),
         {"sinusoidal_encoding": SIN_CACHED}),
    _rope(("rope_halves", "the pairs are the two halves (x[i], x[i + d/2]); they are the neighbours (x[2i], "
                          "x[2i+1]), interleaved"), {"rope": '''def rope(x, base=10000.0):
    L, d = x.shape[-2:]
    if d % 2:
        raise ValueError("odd")
    at = {"dtype": torch.float64, "device": x.device}
    theta = torch.arange(L, **at)[:, None] * base ** (-torch.arange(0, d, 2, **at) / d)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
'''}),
    _rope(("rope_backwards", "the rotation goes the wrong way (clockwise): out[2i] = x[2i] cos - x[2i+1] sin"),
          {"rope": ROPE_MATRIX.replace("c, s = torch.cos(theta), torch.sin(theta)",
                                       "c, s = torch.cos(theta), -torch.sin(theta)")}),
    _rope(("rope_in_place", "rope writes its result into x: compute on a copy or out of place"),
          {"rope": ROPE_MATRIX.replace("out = y.clone()", "out = y").replace(
              "    out[..., 0::2] = y[..., 0::2] * c - y[..., 1::2] * s\n"
              "    out[..., 1::2] = y[..., 0::2] * s + y[..., 1::2] * c\n",
              "    a, b = y[..., 0::2].clone(), y[..., 1::2].clone()\n"
              "    out[..., 0::2] = a * c - b * s\n    out[..., 1::2] = a * s + b * c\n")}),
    _rope(("rope_positions_from_one", "row p is turned by the angles of position p + 1: positions count from 0"),
          {"rope": ROPE_MATRIX.replace("torch.arange(L, **at)", "torch.arange(1, L + 1, **at)")}),
    _rope(("rope_base_ignored", "the angles ignore the `base` argument: 10000 is used whatever it is"),
          {"rope": ROPE_MATRIX.replace("(1.0 / base **", "(1.0 / 10000.0 **")}),
    _rope(("rope_angles_float32", "the angles are computed in float32: for a float64 x compute them in float64 (its "
                                  "answer is held to float64's precision)"), {"rope": ROPE_ANGLES_FLOAT32}),
    _alibi(("alibi_slope_from_one", "the first head's slope is 1; it is 2^(-8/n): use h + 1 in the exponent"),
           {"alibi_bias": ALIBI_LOOP.replace("start ** (h + 1)", "start ** h")}),
    _alibi(("alibi_naive_slopes", "the rule 2^(-8(h+1)/n) is used for every head count; it holds for a power of "
                                  "two n only, other head counts follow Press et al. 2021"),
           {"alibi_bias": '''def alibi_bias(n_heads, seq_len):
    slopes = torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)])
    i = torch.arange(seq_len)
    dist = (i[:, None] - i[None, :]).abs().float()
    return -slopes[:, None, None] * dist
'''}),
    _alibi(("alibi_signed_distance", "the bias uses the signed distance i - j; it is -m_h * |i - j|, a penalty in "
                                     "both directions"),
           {"alibi_bias": ALIBI_LOOP.replace(".abs().float()", ".float()")}),
]

# The known mistakes each visible check catches: variant -> (visible-check cell, text of its message).
VISIBLE = {
    "sin_cos_swapped": ("sinusoidal_encoding_checks", "sines in the even columns"),
    "halves_concatenated": ("sinusoidal_encoding_checks", "sines in the even columns"),
    "frequency_index_i": ("sinusoidal_encoding_checks", "with the column index 2i"),
    "no_value_error": ("sinusoidal_encoding_checks", "an odd d_model must raise ValueError"),
    "rope_halves": ("rope_checks", "two neighbouring columns (2i, 2i+1)"),
    "rope_backwards": ("rope_checks", "counter-clockwise"),
    "rope_in_place": ("rope_checks", "modified x in place"),
    "alibi_slope_from_one": ("alibi_bias_checks", "head 0 of 4 has slope"),
    "alibi_naive_slopes": ("alibi_bias_checks", "then every other slope of 8 heads"),
    "alibi_signed_distance": ("alibi_bias_checks", "is a penalty"),
}
# The known mistakes no visible check can see, and why: only the hidden tests catch them.
HIDDEN_ONLY = {
    "sin_positions_from_one": "the visible checks test position 0 only through the table at base 10000",
    "sin_base_ignored": "the visible checks call it with the default base only",
    "sin_cached_by_size": "the visible checks never call it twice with the same sizes",
    "sin_angles_float32": "float32 angles are off by about 1e-4 only past a few thousand positions; the visible "
                          "checks' tables are short",
    "rope_positions_from_one": "the visible checks do not isolate position 0",
    "rope_base_ignored": "the visible checks call it with the default base only",
    "rope_angles_float32": "the visible checks use float32 inputs, where float32 angles are right",
}
