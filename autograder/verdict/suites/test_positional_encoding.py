"""Hidden suite: positional_encoding (sinusoidal_encoding, rope, alibi_bias)."""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from . import families
from .checks import check, close, leaves_inputs, raises, tensor
from .contract import Call, Draw, Part, Promises, check_drawn

A = "positional_encoding"
# The library versions of this exercise's parts (autograder.verdict.static): torch has none of them.
LIBRARY = r"(?!)"
REFUSED_OPS: tuple[str, ...] = ()


# -- trusted baselines: the plain computation at the learner's precision ----------------------
def plain_sinusoidal(L, d, base=10000.0, dtype=torch.float32):
    """The table with its angles in float64, as the notebook asks (a float32 angle at position 2,000 is already off by
    1e-4), returned in `dtype`."""
    ang = torch.arange(L, dtype=torch.float64)[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    return torch.stack([ang.sin(), ang.cos()], dim=-1).reshape(L, d).to(dtype)


LOW = (torch.float16, torch.bfloat16)


def plain_rope(x, base=10000.0):
    """The rotation at x's precision; a float16 or bfloat16 x is rotated in float32 and returned in its dtype."""
    if x.dtype in LOW:
        return plain_rope(x.float(), base).to(x.dtype)
    L, d = x.shape[-2], x.shape[-1]
    ang = torch.arange(L, dtype=x.dtype)[:, None] * base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def slopes(n):
    def pow2(m):
        return [2 ** (-8 * (h + 1) / m) for h in range(m)]
    if math.log2(n).is_integer():
        return pow2(n)
    c = 2 ** math.floor(math.log2(n))
    return pow2(c) + pow2(2 * c)[0::2][: n - c]


def plain_alibi(H, L, dtype=torch.float32):
    m = torch.tensor(slopes(H), dtype=torch.float64)
    pos = torch.arange(L, dtype=torch.float64)
    return (-m[:, None, None] * (pos[:, None] - pos[None, :]).abs()).to(dtype)


# -- the contract: inputs drawn over everything the notebook allows (autograder.verdict.suites.contract) ---------
def _base(d: Draw, args: list, kwargs: dict):
    """The base left at its default, or given by position or by keyword."""
    if d.chance(0.5):
        base = d.choice((d.uniform(2.0, 100.0), d.uniform(100.0, 1e5)))
        if d.chance(0.5):
            args.append(base)
        else:
            kwargs["base"] = base


def _base_of(call: Call) -> float:
    return float(call.kwargs.get("base", call.args[-1] if len(call.args) > (1 if call.part == "rope" else 2)
                                 else 10000.0))


def draw_sinusoidal(d: Draw) -> Call:
    L = d.size(1, 64, far=2500)
    dm = 2 * d.size(1, 16, far=256 if L <= 64 else 32) + (1 if d.chance(0.05) else 0)
    args: list = [L, dm]
    kwargs: dict = {}
    _base(d, args, kwargs)
    return Call("sinusoidal_encoding", tuple(args), kwargs)


def angle_slack(L: int, dtype) -> float:
    """An angle up to L - 1 radians is only known to eps * (L - 1) at the output's precision, and so each sin and cos
    of it, whatever the order of computation."""
    return 4 * torch.finfo(dtype).eps * max(L - 1, 0)


def vary_sinusoidal(call: Call, d: Draw) -> Call:
    """The same sizes with another base (a table kept by size gives the first answer again)."""
    return Call("sinusoidal_encoding", call.args[:2], {"base": d.uniform(2.0, 1e5)})


def draw_rope(d: Draw) -> Call:
    dtype, L, dm = d.dtype(), d.size(1, 48, far=1500, p_far=0.1), 2 * d.size(1, 16) + (1 if d.chance(0.05) else 0)
    lead = d.lead(3) if L <= 48 else d.lead(1)
    x = d.randn(*lead, L, dm, dtype=dtype, scale=d.choice((1.0, d.uniform(0.01, 100.0))))
    args: list = [x]
    kwargs: dict = {}
    _base(d, args, kwargs)
    return Call("rope", tuple(args), kwargs)


def rope_slack(call: Call) -> float:
    """Angles known to float32's precision for float16 and bfloat16 x (the notebook rotates those in float32), to x's
    own otherwise."""
    x = call.args[0]
    at = torch.float32 if x.dtype in LOW else x.dtype
    return angle_slack(x.shape[-2], at) * float(x.double().abs().max()) if x.numel() else 0.0


def vary_rope(call: Call, d: Draw) -> Call:
    """The same shape with other values and another base."""
    x = d.randn(*call.args[0].shape, dtype=call.args[0].dtype)
    return Call("rope", (x,), {"base": d.uniform(2.0, 1e5)})


def draw_alibi(d: Draw) -> Call:
    H = d.choice((d.choice((1, 2, 4, 8, 16, 32)), d.size(1, 40)))
    return Call("alibi_bias", (H, d.size(1, 40, far=150)))


# -- the edges every grading holds (contract.Promises.edges) ---------------------------------------------------
def sinusoidal_edges(d: Draw) -> list[Call]:
    """One position, one pair, and 5,000 positions (where float32 angles are off by 4e-4)."""
    return [Call("sinusoidal_encoding", (1, 2)), Call("sinusoidal_encoding", (3, 2), {"base": 2.0}),
            Call("sinusoidal_encoding", (5000, 8), about="5,000 positions")]


def rope_edges(d: Draw) -> list[Call]:
    """One position (the rotation by 0: still a new tensor), one pair, and 3,000 positions."""
    return [Call("rope", (d.randn(1, 2),), about="one position"),
            Call("rope", (d.randn(2, 3, 1, 6, dtype=torch.float64),), about="one position"),
            Call("rope", (d.randn(5, 2),)), Call("rope", (d.randn(2, 3000, 4),), about="3,000 positions")]


def rope_precise(d: Draw) -> list[Call]:
    """Where float16 and bfloat16 lose the most: positions past 256 (bfloat16 counts no further in steps of 1) and
    past 2,048 (float16), as the positions of a long sequence."""
    return [Call("rope", (d.randn(1, 2100, 4),), about="2,100 positions")]


def alibi_edges(d: Draw) -> list[Call]:
    """One head, one position, and 4,500 positions (read at its last rows: a distance of 4,000 in float32 is exact,
    a float32 distance computed through squares is not)."""
    return [Call("alibi_bias", (1, 1)), Call("alibi_bias", (6, 1)), Call("alibi_bias", (5, 3)),
            Call("alibi_bias", (1, 4500), about="4,500 positions", last_rows=4)]


CONTRACT = {
    "sinusoidal_encoding": Part(draw_sinusoidal,
                                lambda c: plain_sinusoidal(c.args[0], c.args[1], _base_of(c), torch.float64),
                                lambda c: plain_sinusoidal(c.args[0], c.args[1], _base_of(c)), vary_sinusoidal,
                                promises=Promises(takes="sizes", edges=sinusoidal_edges)),
    "rope": Part(draw_rope, lambda c: plain_rope(c.args[0].double(), _base_of(c)),
                 lambda c: plain_rope(c.args[0], _base_of(c)), vary_rope, slack=rope_slack,
                 promises=Promises(low_precision=LOW, rounded_once=True, edges=rope_edges,
                                   precise=rope_precise)),
    "alibi_bias": Part(draw_alibi, lambda c: plain_alibi(c.args[0], c.args[1], dtype=torch.float64),
                       promises=Promises(takes="sizes", edges=alibi_edges)),
}
globals().update(families.tests(CONTRACT, A))
DRAWN = 10          # calls drawn per part and grading


def drawn(grading, learner, reference, name: str, label: int):
    check_drawn(learner, vars(reference(A)), name, CONTRACT[name], grading.seeded(label).initial_seed(), DRAWN)


# -- sinusoidal_encoding ---------------------------------------------------------------------------
SIN = pytest.mark.cell("sinusoidal_encoding_tests")


def exact_sinusoidal(L, d, base=10000.0):
    return plain_sinusoidal(L, d, base, dtype=torch.float64)


def sinusoidal(learner, L, d, *args, **kwargs):
    """The learner's sinusoidal_encoding(L, d, ...) against the exact table, at float32's own error."""
    base = float(kwargs.get("base", args[0] if args else 10000.0))
    shown = ", ".join([str(L), str(d), *map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
    close(learner.fn("sinusoidal_encoding")(L, d, *args, **kwargs), exact_sinusoidal(L, d, base),
          f"sinusoidal_encoding({shown})", baseline=plain_sinusoidal(L, d, base), dtype=torch.float32)


@SIN
def test_sinusoidal_shape(learner):
    """returns a float32 tensor of shape (seq_len, d_model)"""
    tensor(learner.fn("sinusoidal_encoding")(7, 16), "sinusoidal_encoding(7, 16)", shape=(7, 16), dtype=torch.float32)


@SIN
def test_sinusoidal_position_zero(learner):
    """a small table: position 0 is [sin 0, cos 0, ...] = [0, 1, 0, 1, ...]"""
    sinusoidal(learner, 4, 8)


@SIN
@pytest.mark.weight(2)
def test_sinusoidal_values(learner):
    """every entry is sin/cos of p * base^(-2i/d_model), interleaved"""
    sinusoidal(learner, 50, 32)


@SIN
def test_sinusoidal_odd_sizes_and_base(learner):
    """awkward sizes (97 positions, d_model = 6) and a different base"""
    sinusoidal(learner, 97, 6, base=100.0)


@SIN
def test_sinusoidal_same_sizes_other_base(learner):
    """called again with the same sizes and another base (by position), it answers for that base"""
    sinusoidal(learner, 21, 10, 37.5)
    sinusoidal(learner, 21, 10, 500.0)


@SIN
def test_sinusoidal_long(learner):
    """long sequences (2048 x 512) within float32 error"""
    sinusoidal(learner, 2048, 512)


@SIN
def test_sinusoidal_single_position(learner):
    """seq_len = 1 gives one row"""
    sinusoidal(learner, 1, 4)


@SIN
def test_sinusoidal_odd_d_model(learner):
    """an odd d_model raises ValueError"""
    raises(lambda: learner.fn("sinusoidal_encoding")(10, 7), "ValueError",
           "sinusoidal_encoding(10, 7) did not raise ValueError; the specification: an odd d_model raises ValueError")


@SIN
@given(L=st.integers(4, 40), half=st.integers(1, 12), shift=st.integers(1, 3))
def test_sinusoidal_dot_depends_on_offset(learner, L, half, shift):
    """PE(p) . PE(p + k) depends only on the offset k"""
    pe = tensor(learner.fn("sinusoidal_encoding")(L, 2 * half), f"sinusoidal_encoding({L}, {2 * half})",
                shape=(L, 2 * half)).double()
    dots = (pe[:-shift] * pe[shift:]).sum(-1)
    check(float(dots.max() - dots.min()) < 1e-3 * half + 1e-4,
          f"in sinusoidal_encoding({L}, {2 * half}), PE(p) . PE(p + {shift}) ranges from {float(dots.min()):.4g} to "
          f"{float(dots.max()):.4g} as p changes; for sinusoids of the positions it depends only on the offset")


@SIN
@pytest.mark.weight(2)
@pytest.mark.drawn
def test_sinusoidal_on_drawn_inputs(grading, learner, reference):
    """on inputs drawn for this grading: up to 2,500 positions, other bases by position or keyword, calls repeated"""
    drawn(grading, learner, reference, "sinusoidal_encoding", 9001)


# -- rope ----------------------------------------------------------------------------------------
ROPE = pytest.mark.cell("rope_tests")


def rope(learner, x, *args, **kwargs):
    """The learner's rope(x, ...) against the rotation computed in float64, at x's own precision."""
    base = float(kwargs.get("base", args[0] if args else 10000.0))
    shown = ", ".join([f"x of shape {tuple(x.shape)} ({str(x.dtype).removeprefix('torch.')})", *map(repr, args),
                       *(f"{k}={v!r}" for k, v in kwargs.items())])
    close(learner.fn("rope")(x, *args, **kwargs), plain_rope(x.double(), base), f"rope({shown})",
          baseline=plain_rope(x, base), dtype=x.dtype)


@ROPE
def test_rope_shape_dtype(grading, learner):
    """keeps the shape and dtype of x, with any leading dimensions"""
    x = grading.randn(2, 3, 5, 8, seed=1)
    tensor(learner.fn("rope")(x), "rope(x) for x of shape (2, 3, 5, 8)", shape=x.shape, dtype=torch.float32)
    x64 = grading.randn(5, 4, seed=2, dtype=torch.float64)
    tensor(learner.fn("rope")(x64), "rope(x) for a float64 x of shape (5, 4)", shape=x64.shape, dtype=torch.float64)


@ROPE
def test_rope_position_zero(grading, learner):
    """a short sequence: position 0 is not rotated"""
    rope(learner, grading.randn(6, 8, seed=3))


@ROPE
@pytest.mark.weight(2)
def test_rope_values(grading, learner):
    """pairs (x[2i], x[2i+1]) rotated by p * base^(-2i/d)"""
    rope(learner, grading.randn(2, 3, 17, 8, seed=4))


@ROPE
def test_rope_base_and_float64(grading, learner):
    """the base argument, and float64 inputs computed at float64's precision"""
    rope(learner, grading.randn(3, 33, 6, seed=5, dtype=torch.float64), base=500.0)


@ROPE
def test_rope_long(grading, learner):
    """1024 positions within float32 error"""
    rope(learner, grading.randn(1024, 64, seed=6))


@ROPE
def test_rope_leaves_input(grading, learner):
    """does not modify its input"""
    x = grading.randn(2, 9, 8, seed=7)
    leaves_inputs(learner.twice("rope", x), [x], "rope")


@ROPE
def test_rope_odd_d(grading, learner):
    """an odd last dimension raises ValueError"""
    raises(lambda: learner.fn("rope")(grading.randn(4, 5, seed=8)), "ValueError",
           "rope(x) with an odd last dimension (5) did not raise ValueError; the specification: it rotates pairs, an "
           "odd last dimension raises ValueError")


@ROPE
@given(L=st.integers(2, 24), half=st.integers(1, 8), seed=st.integers(0, 10_000))
def test_rope_keeps_norms(grading, learner, L, half, seed):
    """rotations keep the norm of every vector"""
    x = grading.randn(L, 2 * half, seed=seed, dtype=torch.float64)
    out = tensor(learner.fn("rope")(x), "rope(x)", shape=x.shape)
    err = float((out.double().norm(dim=-1) - x.norm(dim=-1)).abs().max())
    check(torch.allclose(out.double().norm(dim=-1), x.norm(dim=-1), rtol=1e-6, atol=1e-9),
          f"rope(x) for a float64 x of shape {tuple(x.shape)} changes the length of a vector by {err:.3g}; a "
          "rotation keeps lengths")


@ROPE
@given(shift=st.integers(1, 20), seed=st.integers(0, 10_000))
def test_rope_relative(grading, learner, shift, seed):
    """q . k after rope depends only on the offset between their positions"""
    q, k = grading.randn(1, 8, seed=seed, dtype=torch.float64), grading.randn(1, 8, seed=seed + 1, dtype=torch.float64)
    L = shift + 6
    qs, ks = q.expand(L, 8).clone(), k.expand(L, 8).clone()
    rq, rk = learner.fn("rope")(qs), learner.fn("rope")(ks)
    tensor(rq, "rope(q)", shape=qs.shape)
    tensor(rk, "rope(k)", shape=ks.shape)
    dots = (rq.double()[:-shift] * rk.double()[shift:]).sum(-1)   # positions p and p + shift
    check(float(dots.max() - dots.min()) < 1e-6 * (1 + float(dots.abs().max())),
          f"the same q and k at positions p and p + {shift} give rope(q) . rope(k) from {float(dots.min()):.6g} to "
          f"{float(dots.max()):.6g} as p changes; with angles proportional to the position it depends only on the "
          "offset")


@ROPE
@pytest.mark.weight(2)
@pytest.mark.drawn
def test_rope_on_drawn_inputs(grading, learner, reference):
    """on inputs drawn for this grading: float32 and float64 at their own precision, 1,500 positions, other bases"""
    drawn(grading, learner, reference, "rope", 9002)


# -- alibi_bias ----------------------------------------------------------------------------------
ALIBI = pytest.mark.cell("alibi_bias_tests")


def alibi(learner, H, L):
    close(learner.fn("alibi_bias")(H, L), plain_alibi(H, L, dtype=torch.float64), f"alibi_bias({H}, {L})",
          dtype=torch.float32)


@ALIBI
def test_alibi_shape(learner):
    """returns a float32 tensor of shape (n_heads, seq_len, seq_len)"""
    tensor(learner.fn("alibi_bias")(4, 6), "alibi_bias(4, 6)", shape=(4, 6, 6), dtype=torch.float32)


@ALIBI
def test_alibi_penalty(learner):
    """zero on the diagonal, a penalty growing with distance |i - j|"""
    b = tensor(learner.fn("alibi_bias")(4, 9), "alibi_bias(4, 9)", shape=(4, 9, 9)).double()
    diagonal = torch.diagonal(b, dim1=-2, dim2=-1).abs().max()
    check(diagonal < 1e-6, f"alibi_bias(4, 9)[h, i, i] is {float(diagonal):.3g} somewhere; at distance 0 the bias "
                           "is 0")
    check(b.max() <= 1e-6, f"alibi_bias(4, 9) holds {float(b.max()):.3g}, above 0; each bias is a penalty, "
                           "-m_h * |i - j| <= 0")
    asym = float((b - b.transpose(-1, -2)).abs().max())
    check(asym < 1e-6, f"alibi_bias(4, 9)[h, i, j] and [h, j, i] differ by up to {asym:.3g}; the bias depends on "
                       "the distance |i - j| alone")


@ALIBI
@pytest.mark.weight(2)
def test_alibi_slopes_power_of_two(learner):
    """geometric slopes 2^(-8(h+1)/n) for 8 heads"""
    alibi(learner, 8, 12)


@ALIBI
def test_alibi_slopes_other_heads(learner):
    """head counts that are not a power of two (6, 12) follow Press et al."""
    for H in (6, 12):
        alibi(learner, H, 5)


@ALIBI
def test_alibi_single_position(learner):
    """seq_len = 1 gives zeros"""
    alibi(learner, 3, 1)


@ALIBI
@pytest.mark.drawn
def test_alibi_on_drawn_inputs(grading, learner, reference):
    """on inputs drawn for this grading: 1 to 40 heads, up to 150 positions"""
    drawn(grading, learner, reference, "alibi_bias", 9003)
