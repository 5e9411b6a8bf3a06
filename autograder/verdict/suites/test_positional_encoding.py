"""Hidden suite: positional_encoding (sinusoidal_encoding, rope, alibi_bias)."""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from .checks import Diagnosis, check, close, leaves_inputs, raises, randn, tensor

A = "positional_encoding"


# -- trusted baselines: the plain float32 computation, and known mistakes ----------------------
def plain_sinusoidal(L, d, base=10000.0, dtype=torch.float32, swap=False, halves=False, i_not_2i=False):
    p = torch.arange(L, dtype=dtype)[:, None]
    k = torch.arange(0, d, 2, dtype=dtype) if not i_not_2i else torch.arange(d // 2, dtype=dtype)
    ang = p * base ** (-k / d)
    s, c = (ang.cos(), ang.sin()) if swap else (ang.sin(), ang.cos())
    if halves:
        return torch.cat([s, c], dim=-1)
    return torch.stack([s, c], dim=-1).reshape(L, d)


def plain_rope(x, base=10000.0, halves=False, backwards=False, start=0):
    L, d = x.shape[-2], x.shape[-1]
    dtype = x.dtype
    ang = torch.arange(start, start + L, dtype=dtype)[:, None] * base ** (-torch.arange(0, d, 2, dtype=dtype) / d)
    cos, sin = ang.cos(), ang.sin()
    if backwards:
        sin = -sin
    if halves:
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def slopes(n):
    def pow2(m):
        return [2 ** (-8 * (h + 1) / m) for h in range(m)]
    if math.log2(n).is_integer():
        return pow2(n)
    c = 2 ** math.floor(math.log2(n))
    return pow2(c) + pow2(2 * c)[0::2][: n - c]


def plain_alibi(H, L, slope_list=None, signed=False):
    m = torch.tensor(slope_list or slopes(H), dtype=torch.float64)
    pos = torch.arange(L, dtype=torch.float64)
    dist = pos[:, None] - pos[None, :]
    return (-m[:, None, None] * (dist if signed else dist.abs())).float()


# -- sinusoidal_encoding ---------------------------------------------------------------------------
SIN = pytest.mark.cell("sinusoidal_encoding_tests")


@SIN
def test_sinusoidal_shape(learner):
    """returns a float32 tensor of shape (seq_len, d_model)"""
    tensor(learner.fn("sinusoidal_encoding")(7, 16), "sinusoidal_encoding(7, 16)", shape=(7, 16), dtype=torch.float32)


@SIN
def test_sinusoidal_position_zero(learner):
    """position 0 is [sin 0, cos 0, ...] = [0, 1, 0, 1, ...]"""
    pe = tensor(learner.fn("sinusoidal_encoding")(4, 8), "sinusoidal_encoding(4, 8)", shape=(4, 8))
    expected = torch.tensor([0.0, 1.0] * 4)
    if pe[0].double().sub(torch.tensor([1.0, 0.0] * 4, dtype=torch.float64)).abs().max() < 1e-5:
        raise Diagnosis("at position 0 the even columns must be sin(0) = 0 and the odd columns cos(0) = 1: "
                        "sin and cos are swapped")
    close(pe[0], expected, "row 0 (position 0)", "even columns are sin(0) = 0, odd columns cos(0) = 1",
          mistakes={"positions must start at 0, not 1": plain_sinusoidal(5, 8)[1]})


@SIN
@pytest.mark.weight(2)
def test_sinusoidal_values(learner, reference):
    """every entry is sin/cos of p * base^(-2i/d_model), interleaved"""
    L, d = 50, 32
    close(learner.fn("sinusoidal_encoding")(L, d), reference(A).sinusoidal_encoding(L, d).double(),
          f"sinusoidal_encoding({L}, {d})", "PE[p, 2i] = sin(p * base^(-2i/d_model)), PE[p, 2i+1] = cos(...)",
          baseline=plain_sinusoidal(L, d), dtype=torch.float32,
          mistakes={
              "sin and cos are swapped: column 2i is the sine, column 2i+1 the cosine":
                  plain_sinusoidal(L, d, swap=True),
              "sines and cosines must be interleaved (column 2i sin, 2i+1 cos), not concatenated halves":
                  plain_sinusoidal(L, d, halves=True),
              "the frequency of pair i is base^(-2i/d_model): use the even index 2i, not i":
                  plain_sinusoidal(L, d, i_not_2i=True),
          })


def exact_sinusoidal(L, d, base=10000.0):
    return plain_sinusoidal(L, d, base, dtype=torch.float64)


@SIN
def test_sinusoidal_odd_sizes_and_base(learner):
    """awkward sizes (97 positions, d_model = 6) and a different base"""
    close(learner.fn("sinusoidal_encoding")(97, 6, base=100.0), exact_sinusoidal(97, 6, 100.0),
          "sinusoidal_encoding(97, 6, base=100.0)", baseline=plain_sinusoidal(97, 6, 100.0), dtype=torch.float32,
          mistakes={"the `base` argument is ignored": plain_sinusoidal(97, 6)})


@SIN
def test_sinusoidal_long(learner):
    """long sequences (2048 x 512) within float32 error"""
    close(learner.fn("sinusoidal_encoding")(2048, 512), exact_sinusoidal(2048, 512),
          "sinusoidal_encoding(2048, 512)", "check the formula at large positions",
          baseline=plain_sinusoidal(2048, 512), dtype=torch.float32)


@SIN
def test_sinusoidal_single_position(learner):
    """seq_len = 1 gives one row"""
    close(learner.fn("sinusoidal_encoding")(1, 4), exact_sinusoidal(1, 4), "sinusoidal_encoding(1, 4)",
          dtype=torch.float32)


@SIN
def test_sinusoidal_odd_d_model(learner):
    """an odd d_model raises ValueError"""
    raises(lambda: learner.fn("sinusoidal_encoding")(10, 7), "ValueError",
           "sinusoidal_encoding(10, 7) must raise ValueError: sin/cos pairs need an even d_model")


@SIN
@given(L=st.integers(4, 40), half=st.integers(1, 12), shift=st.integers(1, 3))
def test_sinusoidal_dot_depends_on_offset(learner, L, half, shift):
    """PE(p) . PE(p + k) depends only on the offset k"""
    pe = tensor(learner.fn("sinusoidal_encoding")(L, 2 * half), f"sinusoidal_encoding({L}, {2 * half})",
                shape=(L, 2 * half)).double()
    dots = (pe[:-shift] * pe[shift:]).sum(-1)
    check(float(dots.max() - dots.min()) < 1e-3 * half + 1e-4,
          f"PE(p) . PE(p + {shift}) changes with p; for true sinusoids it depends only on the offset")


# -- rope ----------------------------------------------------------------------------------------
ROPE = pytest.mark.cell("rope_tests")


@ROPE
def test_rope_shape_dtype(learner):
    """keeps the shape and dtype of x, with any leading dimensions"""
    x = randn(2, 3, 5, 8, seed=1)
    tensor(learner.fn("rope")(x), "rope(x) for x of shape (2, 3, 5, 8)", shape=x.shape, dtype=torch.float32)
    x64 = randn(5, 4, seed=2, dtype=torch.float64)
    tensor(learner.fn("rope")(x64), "rope(x) for a float64 x of shape (5, 4)", shape=x64.shape, dtype=torch.float64)


@ROPE
def test_rope_position_zero(learner):
    """position 0 is not rotated"""
    x = randn(6, 8, seed=3)
    out = tensor(learner.fn("rope")(x), "rope(x)", shape=x.shape)
    close(out[0], x[0].double(), "rope(x)[0] (position 0)",
          "position p is the index along dim -2, counted from 0; the angle at position 0 is 0",
          mistakes={"positions must start at 0, not 1": plain_rope(x, start=1)[0]})


@ROPE
@pytest.mark.weight(2)
def test_rope_values(learner):
    """pairs (x[2i], x[2i+1]) rotated by p * base^(-2i/d)"""
    x = randn(2, 3, 17, 8, seed=4)
    close(learner.fn("rope")(x), plain_rope(x.double()), "rope(x) for x of shape (2, 3, 17, 8)",
          "out[2i] = x[2i] cos - x[2i+1] sin, out[2i+1] = x[2i] sin + x[2i+1] cos",
          baseline=plain_rope(x), dtype=torch.float32,
          mistakes={
              "the pairs are (x[2i], x[2i+1]), interleaved, not the two halves (x[i], x[i + d/2])":
                  plain_rope(x, halves=True),
              "the rotation goes the wrong way: out[2i] = x[2i] cos - x[2i+1] sin": plain_rope(x, backwards=True),
          })


@ROPE
def test_rope_base_and_float64(learner):
    """the base argument, and float64 inputs computed in float64"""
    x = randn(3, 33, 6, seed=5, dtype=torch.float64)
    close(learner.fn("rope")(x, base=500.0), plain_rope(x, base=500.0), "rope(x, base=500.0) in float64",
          dtype=torch.float64, mistakes={"the `base` argument is ignored": plain_rope(x)})


@ROPE
def test_rope_long(learner):
    """1024 positions within float32 error"""
    x = randn(1024, 64, seed=6)
    close(learner.fn("rope")(x), plain_rope(x.double()), "rope(x) for 1024 positions",
          "check the angles at large positions", baseline=plain_rope(x), dtype=torch.float32)


@ROPE
def test_rope_leaves_input(learner):
    """does not modify its input"""
    x = randn(2, 9, 8, seed=7)
    leaves_inputs(learner.twice("rope", x), [x], "rope")


@ROPE
def test_rope_odd_d(learner):
    """an odd last dimension raises ValueError"""
    raises(lambda: learner.fn("rope")(randn(4, 5, seed=8)), "ValueError",
           "rope(x) with an odd last dimension must raise ValueError: it rotates pairs")


@ROPE
@given(L=st.integers(2, 24), half=st.integers(1, 8), seed=st.integers(0, 10_000))
def test_rope_keeps_norms(learner, L, half, seed):
    """rotations keep the norm of every vector"""
    x = randn(L, 2 * half, seed=seed, dtype=torch.float64)
    out = tensor(learner.fn("rope")(x), "rope(x)", shape=x.shape)
    check(torch.allclose(out.double().norm(dim=-1), x.norm(dim=-1), rtol=1e-6, atol=1e-9),
          "rope changes the length of vectors: each pair must be rotated (cos and sin of the same angle)")


@ROPE
@given(shift=st.integers(1, 20), seed=st.integers(0, 10_000))
def test_rope_relative(learner, shift, seed):
    """q . k after rope depends only on the offset between their positions"""
    q, k = randn(1, 8, seed=seed, dtype=torch.float64), randn(1, 8, seed=seed + 1, dtype=torch.float64)
    L = shift + 6
    qs, ks = q.expand(L, 8).clone(), k.expand(L, 8).clone()
    rq, rk = learner.fn("rope")(qs), learner.fn("rope")(ks)
    tensor(rq, "rope(q)", shape=qs.shape)
    tensor(rk, "rope(k)", shape=ks.shape)
    dots = (rq.double()[:-shift] * rk.double()[shift:]).sum(-1)   # positions p and p + shift
    check(float(dots.max() - dots.min()) < 1e-6 * (1 + float(dots.abs().max())),
          "rope(q)[p] . rope(k)[p + k] must not depend on p: the angle must be proportional to the position")


# -- alibi_bias ----------------------------------------------------------------------------------
ALIBI = pytest.mark.cell("alibi_bias_tests")


@ALIBI
def test_alibi_shape(learner):
    """returns a float32 tensor of shape (n_heads, seq_len, seq_len)"""
    tensor(learner.fn("alibi_bias")(4, 6), "alibi_bias(4, 6)", shape=(4, 6, 6), dtype=torch.float32)


@ALIBI
def test_alibi_penalty(learner):
    """zero on the diagonal, a penalty growing with distance |i - j|"""
    b = tensor(learner.fn("alibi_bias")(4, 9), "alibi_bias(4, 9)", shape=(4, 9, 9)).double()
    check(torch.diagonal(b, dim1=-2, dim2=-1).abs().max() < 1e-6, "bias[h, i, i] must be 0: no penalty at distance 0")
    check(b.max() <= 1e-6, "every bias must be <= 0: -m_h * |i - j| is a penalty (is the sign flipped?)")
    check(torch.allclose(b, b.transpose(-1, -2), atol=1e-6),
          "bias[h, i, j] must depend on the distance |i - j|: is it one-sided (i - j) or not symmetric?")


@ALIBI
@pytest.mark.weight(2)
def test_alibi_slopes_power_of_two(learner):
    """geometric slopes 2^(-8(h+1)/n) for 8 heads"""
    close(learner.fn("alibi_bias")(8, 12), plain_alibi(8, 12).double(), "alibi_bias(8, 12)",
          "slopes for n heads are m_h = 2^(-8(h+1)/n): 1/2, 1/4, ..., 1/256 for 8 heads", dtype=torch.float32,
          mistakes={
              "the first head's slope is 2^(-8/n), not 1: use h + 1 in the exponent":
                  plain_alibi(8, 12, [2 ** (-8 * h / 8) for h in range(8)]),
              "the bias is -m_h * |i - j|, with the absolute distance": plain_alibi(8, 12, signed=True),
          })


@ALIBI
def test_alibi_slopes_other_heads(learner):
    """head counts that are not a power of two (6, 12) follow Press et al."""
    for H in (6, 12):
        close(learner.fn("alibi_bias")(H, 5), plain_alibi(H, 5).double(), f"alibi_bias({H}, 5)",
              "for n heads not a power of two, take the slopes of the power of two below n, then every "
              "other slope of the next power of two (Press et al. 2021)", dtype=torch.float32,
              mistakes={"the rule 2^(-8(h+1)/n) is for a power of two n only; other head counts follow "
                        "Press et al. 2021": plain_alibi(H, 5, [2 ** (-8 * (h + 1) / H) for h in range(H)])})


@ALIBI
def test_alibi_single_position(learner):
    """seq_len = 1 gives zeros"""
    close(learner.fn("alibi_bias")(3, 1), torch.zeros(3, 1, 1, dtype=torch.float64), "alibi_bias(3, 1)",
          dtype=torch.float32)
