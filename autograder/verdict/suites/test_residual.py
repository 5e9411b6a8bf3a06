"""Hidden suite: residual (LayerNorm, FeedForward, TransformerBlock).

Oracles: torch.nn.LayerNorm and torch.nn.TransformerEncoderLayer in float64, holding the same random weights as
the learner's modules; the same layers in float32 set the tolerance (checks.close).
"""

import pytest
import torch
import torch.nn.functional as F

from autograder.verdict.learner import LearnerError
from autograder.verdict.timing import fresh_seed

from . import families
from .checks import (
    DRAWING_PRELOAD,
    Diagnosis,
    allowed_error,
    check,
    close,
    course_calls,
    draw_structure,
    fast_enough,
    leaves_inputs,
    load_exact,
    load_state,
    max_error,
    module_targets,
    tensor,
    together,
    where,
)
from .contract import Call, Draw, Part, Promises, at_call_precision, check_drawn
from .library import ATTENTION_OPS, NORM_OPS
from .oracles import (
    NORM_PARAMS,
    block_baselines,
    in_float64,
    norm_baseline,
    oracle_block,
    oracle_mha,
    plain_block,
    plain_ff,
    plain_mha,
    plain_norm,
    random_block_state,
    random_ff_state,
    random_mha_state,
    random_norm_state,
    torch_norm,
)

A = "residual"
# The library versions of this exercise's parts, and of the attention it pastes: proven by the static reading,
# refused by the learner's worker (autograder.verdict.static, autograder.inside.worker).
LIBRARY = r"(?i)(attention|multihead|multi_head|(layer|group|instance|batch|rms)_?norm|transformer)"
REFUSED_OPS = ATTENTION_OPS + NORM_OPS
WORKER_PRELOAD = DRAWING_PRELOAD      # test_block_drawn traces the learner's block in its worker


# -- the contract: inputs drawn over everything the notebook allows (autograder.verdict.suites.contract) ---------
def _x(d: Draw, D: int, lead_most: int = 3):
    """Inputs with any leading dimensions, of any scale and offset, some rows nearly or exactly constant."""
    x = d.randn(*d.lead(lead_most), d.size(1, 12), D, scale=d.choice((1.0, d.uniform(0.01, 30.0))),
                shift=d.choice((0.0, d.uniform(-20.0, 20.0))))
    if d.chance(0.3) and x.numel():
        rows = d.randn(*x.shape[:-1], 1, dtype=torch.float64) > 0.5
        flat = d.randn(*x.shape[:-1], 1) + d.randn(*x.shape, scale=d.choice((0.0, 1e-3)))
        x = torch.where(rows, flat, x)
    return x


def draw_norm(d: Draw) -> Call:
    D = d.size(1, 40, far=300, p_far=0.1)
    ctor_kwargs = {"eps": d.choice((1e-6, d.uniform(1e-4, 0.5)))} if d.chance(0.4) else {}
    state = random_norm_state(D, d.g) if d.chance(0.8) else None
    return Call("LayerNorm", (_x(d, D),), ctor=(D,), ctor_kwargs=ctor_kwargs, state=state)


def _norm_plain(c: Call, dtype):
    """The plain computation at `dtype` (contract.at_call_precision chooses it from the call): float32's baseline, or
    a plain float64 computation (oracles.plain_norm)."""
    state, eps = _norm_state(c)
    return plain_norm(state, c.args[0], eps) if dtype == torch.float64 else norm_baseline(state, c.args[0], eps)


def _norm_state(c: Call) -> tuple[dict, float]:
    D = c.made[0]
    return c.state or {"weight": torch.ones(D), "bias": torch.zeros(D)}, c.ctor_kwargs.get("eps", 1e-5)


def _norm_values(c: Call, dtype):
    state, eps = _norm_state(c)
    return torch_norm(state, c.args[0], eps, dtype=dtype) if dtype == torch.float64 else norm_baseline(state,
                                                                                                      c.args[0], eps)


def draw_ff(d: Draw) -> Call:
    D, d_ff = d.size(1, 32), d.size(1, 96)
    return Call("FeedForward", (_x(d, D),), ctor=(D, d_ff), state=random_ff_state(D, d_ff, d.g))


def draw_block(d: Draw) -> Call:
    H, dh, d_ff = d.choice((1, 2, 3, 4, 6)), d.size(1, 8), d.size(1, 64)
    D = H * dh
    ctor, ctor_kwargs, norm_first = d.norm_first((D, H, d_ff))
    B, L = d.size(1, 3), d.size(1, 16)
    x = d.randn(B, L, D, scale=d.choice((1.0, d.uniform(0.1, 10.0))))
    args: tuple = (x,)
    kwargs: dict = {}
    about = "Pre-LN" if norm_first else "Post-LN"
    if d.chance(0.6):
        mask = torch.ones(L, L, dtype=torch.bool).tril() if d.chance(0.5) else d.mask(*d.choice(((L, L), (B, 1, L, L))))
        args, about = ((x, mask), about + ", a mask") if d.chance(0.5) else (args, about + ", mask by keyword")
        if len(args) == 1:
            kwargs["mask"] = mask
    return Call("TransformerBlock", args, kwargs, ctor=ctor, ctor_kwargs=ctor_kwargs,
                state=random_block_state(D, d_ff, d.g), about=about)


def _block_form(c: Call) -> tuple[bool, torch.Tensor | None]:
    """(norm_first, mask) of a TransformerBlock call."""
    norm_first = c.made[3] if len(c.made) > 3 else c.ctor_kwargs.get("norm_first", True)
    return norm_first, c.args[1] if len(c.args) > 1 else c.kwargs.get("mask")


def _block_values(c: Call, dtype):
    norm_first, mask = _block_form(c)
    if mask is None or mask.dim() == 2:         # torch's layer takes no per-batch mask
        return oracle_block(c.state, c.made[1], c.args[0], mask, norm_first, dtype=dtype)
    return plain_block(c.state, c.made[1], c.args[0].to(dtype), mask, norm_first)


# The truths by plain operations in float64, made ready to run under random rounding (checks.rounded_runs).
def _norm_rounded(c: Call):
    state, eps = _norm_state(c)
    return in_float64(plain_norm, state, c.args[0], eps=eps)


def _block_rounded(c: Call):
    norm_first, mask = _block_form(c)
    return in_float64(plain_block, c.state, c.args[0], H=c.made[1], mask=mask, norm_first=norm_first)


# -- the edges every grading holds (contract.Promises.edges) ---------------------------------------------------
def norm_edges(d: Draw) -> list[Call]:
    """A width of 1, rows that are constant, and rows far from 0 that vary little (a variance computed as
    E[x^2] - E[x]^2 loses every digit there)."""
    def norm(D, x, about=""):
        return Call("LayerNorm", (x,), ctor=(D,), state=random_norm_state(D, d.g), about=about)

    return [norm(1, d.randn(3, 1), "a width of 1"), norm(4, d.randn(2, 3, 1).expand(2, 3, 4).clone(), "constant rows"),
            norm(6, d.randn(4, 6, scale=0.01, shift=100.0), "rows near 100 that vary by 0.01")]


def norm_precise(d: Draw) -> list[Call]:
    """Rows near 10,000 that vary by 1, drawn in float64: float32 steps there are 1e-3, so a LayerNorm moved to float64
    that computes in float32 answers with errors of 1e-3, a million times float64's, whatever the draw."""
    return [Call("LayerNorm", (d.randn(3, 8, dtype=torch.float64, shift=1e4),), ctor=(8,),
                 state=random_norm_state(8, d.g), about="rows near 10,000")]


def ff_edges(d: Draw) -> list[Call]:
    def ff(D, d_ff, x):
        return Call("FeedForward", (x,), ctor=(D, d_ff), state=random_ff_state(D, d_ff, d.g))

    return [ff(1, 1, d.randn(2, 1)), ff(3, 1, d.randn(2, 3, 3))]


def block_edges(d: Draw) -> list[Call]:
    """Heads of width 1 over one position, a hidden layer of one unit, Post-LN with a mask per batch."""
    def block(D, H, d_ff, x, mask=None, norm_first=True, about=""):
        return Call("TransformerBlock", (x,) if mask is None else (x, mask), ctor=(D, H, d_ff),
                    ctor_kwargs={} if norm_first else {"norm_first": False},
                    state=random_block_state(D, d_ff, d.g), about=about)

    return [block(2, 2, 1, d.randn(2, 1, 2), about="heads of width 1, one position, d_ff = 1"),
            block(3, 1, 5, d.randn(2, 4, 3), d.mask(2, 1, 4, 4), norm_first=False,
                  about="Post-LN, a mask (B, 1, L, L)"),
            block(4, 2, 8, d.randn(1, 5, 4), torch.ones(5, 5, dtype=torch.bool).tril(), about="causal")]


CONTRACT = {
    "LayerNorm": Part(draw_norm, lambda c: _norm_values(c, torch.float64), at_call_precision(_norm_plain),
                      rounded=_norm_rounded, promises=Promises(module=True, edges=norm_edges, precise=norm_precise)),
    "FeedForward": Part(draw_ff, lambda c: plain_ff(c.state, c.args[0].double()),
                        lambda c: plain_ff(c.state, c.args[0]), promises=Promises(module=True, edges=ff_edges)),
    "TransformerBlock": Part(draw_block, lambda c: _block_values(c, torch.float64), at_call_precision(_block_values),
                             rounded=_block_rounded, promises=Promises(module=True, edges=block_edges)),
}
globals().update(families.tests(CONTRACT, A))
DRAWN = 10          # calls drawn per part and grading


def drawn(grading, learner, reference, name: str, label: int):
    check_drawn(learner, vars(reference(A)), name, CONTRACT[name], grading.seeded(label).initial_seed(), DRAWN)



# -- LayerNorm -------------------------------------------------------------------------------------------
LN = pytest.mark.cell("LayerNorm_tests")


def layer_norm(grading, learner, d, seed, eps=None):
    proxy = learner.new("LayerNorm", d) if eps is None else learner.new("LayerNorm", d, eps=eps)
    state = random_norm_state(d, grading.seeded(seed))
    load_state(proxy, state, "LayerNorm")
    return proxy, state


def norm_close(proxy, state, x, what, eps=1e-5):
    """The learner's LayerNorm on x against torch.nn.LayerNorm in float64 holding the same weight and bias."""
    close(proxy(x), torch_norm(state, x, eps), f"{what} on x of shape {tuple(x.shape)}",
          baseline=norm_baseline(state, x, eps), dtype=torch.float32)


@LN
def test_ln_parameters(grading, learner):
    """parameters weight (ones) and bias (zeros) of shape (d_model,)"""
    # rows of standard deviation 100, where eps's place (inside the sqrt or not) changes no float32 answer: a check of
    # the parameters alone (drawn rows of a small variance showed eps outside the sqrt in some gradings only)
    x = grading.randn(3, 4, 12, seed=15)
    x = (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True) * 100.0 + 1.0
    norm_close(learner.new("LayerNorm", 12), {"weight": torch.ones(12), "bias": torch.zeros(12)}, x,
               "LayerNorm(12) as constructed")
    proxy = learner.new("LayerNorm", 12)
    state = random_norm_state(12, grading.seeded(16))
    load_exact(proxy, state, "LayerNorm(12)")
    norm_close(proxy, state, x, "LayerNorm(12) with another weight and bias")


@LN
@pytest.mark.weight(2)
def test_ln_values(grading, learner):
    """equals torch.nn.LayerNorm with random weight and bias (d_model = 97)"""
    proxy, state = layer_norm(grading, learner, 97, seed=1)
    norm_close(proxy, state, grading.randn(3, 7, 97, seed=2, scale=4.0) + 2.0, "LayerNorm(97)")


@LN
def test_ln_near_constant_rows(grading, learner):
    """nearly constant rows, where eps inside the sqrt matters"""
    proxy, state = layer_norm(grading, learner, 16, seed=3)
    x = grading.randn(4, 6, 1, seed=4, scale=3.0) + grading.randn(4, 6, 16, seed=5, scale=1e-3)      # variance ~ 1e-6
    x[0, 0] = 1.5                                                                     # an exactly constant row
    norm_close(proxy, state, x, "LayerNorm(16) with nearly constant rows")


@LN
def test_ln_custom_eps(grading, learner):
    """the eps argument is used"""
    proxy, state = layer_norm(grading, learner, 10, seed=6, eps=1e-2)
    norm_close(proxy, state, grading.randn(5, 10, seed=7, scale=0.1), "LayerNorm(10, eps=1e-2)", eps=1e-2)


@LN
def test_ln_leading_dims(grading, learner):
    """any number of leading dimensions (none, one, three), each row as in a tensor of rows"""
    # The learner's own rows are the reference: the promise is the leading dimensions, and values wrong in every shape
    # are the values tests' to charge (a mistake near its tolerance would fail here in some gradings only).
    proxy, _ = layer_norm(grading, learner, 6, seed=8)
    for shape in ((6,), (9, 6), (2, 3, 1, 6)):
        x = grading.randn(*shape, seed=9, scale=2.0)
        n = x.numel() // 6
        rows = tensor(proxy(x.reshape(n, 6)), f"LayerNorm(6) on x of shape ({n}, 6)", shape=(n, 6))
        what = f"LayerNorm(6) on x of shape {shape}, against your LayerNorm(6) on its rows as a ({n}, 6) tensor,"
        got = tensor(proxy(x), what, shape=shape, dtype=rows.dtype)
        err, allowed = max_error(got, rows.reshape(shape)), allowed_error(rows.reshape(shape).double(), torch.float32)
        check(err <= allowed, f"{what} is wrong: largest error {err:.3g} (allowed {allowed:.3g})"
                              f"{where(got, rows.reshape(shape))}")


@LN
def test_ln_gradients(grading, learner):
    """gradients for x, weight and bias equal torch.nn.LayerNorm's"""
    proxy, state = layer_norm(grading, learner, 20, seed=10)
    x, g = grading.randn(3, 5, 20, seed=11, scale=2.0), grading.randn(3, 5, 20, seed=12)
    res = proxy.backward(x, grad=g)
    xd = x.double().requires_grad_(True)
    w, b = (state[n].double().requires_grad_(True) for n in NORM_PARAMS)
    ref_x, ref_w, ref_b = torch.autograd.grad(F.layer_norm(xd, (20,), w, b, 1e-5), (xd, w, b), g.double())
    grads = res.get("input_grads") or [None]
    check(isinstance(grads[0], torch.Tensor), "LayerNorm(20) on x of shape (3, 5, 20): no gradient reaches x, so "
                                              "its output does not depend on x through autograd")
    close(grads[0], ref_x, "the gradient of LayerNorm(20) for x", rtol=1e-4, atol=1e-5, dtype=torch.float32)
    for name, ref in zip(NORM_PARAMS, (ref_w, ref_b)):
        check(name in res.get("param_grads", {}), f"LayerNorm(20): no gradient reaches `{name}`, so the output "
                                                  f"does not depend on the parameter `{name}`")
        close(res["param_grads"][name], ref, f"the gradient of LayerNorm(20) for {name}", rtol=1e-4, atol=1e-5,
              dtype=torch.float32)


@LN
def test_ln_leaves_input(grading, learner):
    """does not modify x"""
    proxy, _ = layer_norm(grading, learner, 8, seed=13)
    x = grading.randn(2, 3, 8, seed=14, scale=3.0)
    leaves_inputs(proxy.twice(x), [x], "LayerNorm.forward", names=["x"])


@LN
@pytest.mark.weight(2)
@pytest.mark.drawn
def test_ln_on_drawn_inputs(grading, learner, reference):
    """on inputs drawn for this grading: any shapes, scales and eps, nearly constant rows, drawn or initial weights"""
    drawn(grading, learner, reference, "LayerNorm", 9021)


# -- FeedForward -----------------------------------------------------------------------------------------
FF = pytest.mark.cell("FeedForward_tests")


def feed_forward(grading, learner, d, d_ff, seed):
    proxy = learner.new("FeedForward", d, d_ff)
    state = random_ff_state(d, d_ff, grading.seeded(seed))
    load_state(proxy, state, "FeedForward")
    return proxy, state


def ff_close(proxy, state, x, what):
    close(proxy(x), plain_ff(state, x.double()), f"{what} on x of shape {tuple(x.shape)}",
          baseline=plain_ff(state, x), dtype=torch.float32)


@FF
def test_ff_structure(grading, learner):
    """linear1 is nn.Linear(d_model, d_ff), linear2 is nn.Linear(d_ff, d_model), both with bias"""
    proxy = learner.new("FeedForward", 12, 40)
    state = random_ff_state(12, 40, grading.seeded(26))
    load_exact(proxy, state, "FeedForward(12, 40)")
    ff_close(proxy, state, grading.randn(2, 3, 12, seed=27), "FeedForward(12, 40)")


@FF
@pytest.mark.weight(2)
def test_ff_values(grading, learner):
    """linear2(relu(linear1(x))) with random weights (d_model = 24, d_ff = 97)"""
    proxy, state = feed_forward(grading, learner, 24, 97, seed=20)
    ff_close(proxy, state, grading.randn(3, 11, 24, seed=21), "FeedForward(24, 97)")


@FF
def test_ff_leading_dims(grading, learner):
    """any number of leading dimensions, each position on its own"""
    proxy, state = feed_forward(grading, learner, 8, 20, seed=22)
    for shape in ((5, 8), (2, 3, 4, 8)):
        ff_close(proxy, state, grading.randn(*shape, seed=23), "FeedForward(8, 20)")


@FF
def test_ff_leaves_input(grading, learner):
    """does not modify x"""
    proxy, _ = feed_forward(grading, learner, 8, 16, seed=24)
    x = grading.randn(2, 5, 8, seed=25)
    leaves_inputs(proxy.twice(x), [x], "FeedForward.forward", names=["x"])


@FF
@pytest.mark.weight(2)
@pytest.mark.drawn
def test_ff_on_drawn_inputs(grading, learner, reference):
    """on inputs drawn for this grading: any sizes and leading dimensions"""
    drawn(grading, learner, reference, "FeedForward", 9022)


# -- TransformerBlock ------------------------------------------------------------------------------------------
BLOCK = pytest.mark.cell("TransformerBlock_tests")
BLOCK_CELL = BLOCK.args[0]


def new_block(learner, *args):
    try:
        return learner.new("TransformerBlock", *args)
    except LearnerError as e:
        if e.isa("NameError"):
            raise Diagnosis(f"your code raised {e}: paste your scaled_dot_product_attention and MultiHeadAttention "
                            "from the attention exercise into the first cell, and run it") from None
        raise


def block(grading, learner, d, H, d_ff, seed, norm_first=None):
    args = (d, H, d_ff) if norm_first is None else (d, H, d_ff, norm_first)
    proxy = new_block(learner, *args)
    state = random_block_state(d, d_ff, grading.seeded(seed))
    load_state(proxy, state, "TransformerBlock")
    return proxy, state


def block_close(proxy, state, H, x, mask=None, norm_first=True, what="TransformerBlock"):
    """The learner's block against torch.nn.TransformerEncoderLayer in float64 holding the same weights."""
    shown = f"{what} ({'Pre-LN' if norm_first else 'Post-LN'}) on x of shape {tuple(x.shape)}" + (
        "" if mask is None else f" with a {'x'.join(map(str, mask.shape))} mask")
    close(proxy(x) if mask is None else proxy(x, mask), oracle_block(state, H, x, mask, norm_first), shown,
          baseline=block_baselines(state, H, x, mask, norm_first), dtype=torch.float32)


_PARTS: dict = {}


def broken_parts(grading, learner) -> list:
    """The learner's own parts (MultiHeadAttention, LayerNorm, FeedForward) that give wrong results on their own."""
    if id(learner) not in _PARTS:
        broken = []
        x = grading.randn(2, 5, 12, seed=99)
        x[0] = grading.randn(5, 1, seed=95) + grading.randn(5, 12, seed=94, scale=1e-3)         # nearly constant rows
        for name, args, state, expected, baseline in (
                ("MultiHeadAttention", (12, 3), random_mha_state(12, grading.seeded(97)),
                 lambda st: oracle_mha(st, 3, x), lambda st: plain_mha(st, 3, x)),
                ("LayerNorm", (12,), random_norm_state(12, grading.seeded(98)), lambda st: torch_norm(st, x),
                 lambda st: norm_baseline(st, x)),
                ("FeedForward", (12, 20), random_ff_state(12, 20, grading.seeded(96)),
                 lambda st: plain_ff(st, x.double()), lambda st: plain_ff(st, x))):
            try:
                proxy = learner.new(name, *args)
                load_state(proxy, state, name)
                close(proxy(x), expected(state), name, baseline=baseline(state), dtype=torch.float32)
            except (Diagnosis, LearnerError):
                broken.append(name)
        _PARTS[id(learner)] = broken
    return _PARTS[id(learner)]


def course_parts(cell, learner):
    """TransformerBlock is graded with the course's MultiHeadAttention, FeedForward and LayerNorm (and once with
    the learner's own)."""
    return ["MultiHeadAttention", "FeedForward", "LayerNorm"] if cell == "TransformerBlock_tests" else []


@BLOCK
def test_block_structure(grading, learner):
    """submodules attn (MultiHeadAttention), ff (FeedForward), norm1 and norm2 (LayerNorm)"""
    proxy = new_block(learner, 24, 6, 40)
    state = random_block_state(24, 40, grading.seeded(28))
    load_exact(proxy, state, "TransformerBlock(24, 6, 40): attn = MultiHeadAttention(d_model, n_heads), "
                             "ff = FeedForward(d_model, d_ff), norm1 and norm2 = LayerNorm(d_model); it")
    block_close(proxy, state, 6, grading.randn(2, 7, 24, seed=29),
                what="TransformerBlock(24, 6, 40) with drawn weights")


@BLOCK
@pytest.mark.weight(2)
def test_block_pre_ln(grading, learner):
    """Pre-LN (the default) equals nn.TransformerEncoderLayer(norm_first=True), d_model = 48, 6 heads"""
    proxy, state = block(grading, learner, 48, 6, 80, seed=30)
    block_close(proxy, state, 6, grading.randn(3, 13, 48, seed=31), what="TransformerBlock(48, 6, 80)")


@BLOCK
@pytest.mark.weight(2)
def test_block_post_ln(grading, learner):
    """norm_first=False equals nn.TransformerEncoderLayer(norm_first=False)"""
    proxy, state = block(grading, learner, 36, 4, 50, seed=32, norm_first=False)
    block_close(proxy, state, 4, grading.randn(2, 9, 36, seed=33), norm_first=False,
                what="TransformerBlock(36, 4, 50, norm_first=False)")


@BLOCK
def test_block_mask(grading, learner):
    """the mask reaches the attention (a causal mask, Pre-LN and Post-LN)"""
    mask = torch.ones(11, 11, dtype=torch.bool).tril()
    x = grading.randn(2, 11, 24, seed=34)
    for norm_first in (True, False):
        proxy, state = block(grading, learner, 24, 3, 40, seed=35, norm_first=norm_first)
        block_close(proxy, state, 3, x, mask, norm_first, what=f"TransformerBlock(24, 3, 40, {norm_first})")


@BLOCK
def test_block_single_position(grading, learner):
    """seq_len = 1 works"""
    proxy, state = block(grading, learner, 16, 2, 24, seed=36)
    block_close(proxy, state, 2, grading.randn(4, 1, 16, seed=37), what="TransformerBlock(16, 2, 24)")


@BLOCK
def test_block_leaves_input(grading, learner):
    """does not modify x (x = x + ..., not x += ...)"""
    for norm_first in (True, False):
        proxy, _ = block(grading, learner, 16, 4, 32, seed=38, norm_first=norm_first)
        x = grading.randn(2, 6, 16, seed=39)
        leaves_inputs(proxy.twice(x), [x], f"TransformerBlock(norm_first={norm_first}).forward",
                      "x += ... writes into the caller's tensor; write x = x + ...", names=["x"])


@BLOCK
@pytest.mark.weight(2)
@pytest.mark.drawn
def test_block_on_drawn_inputs(grading, learner, reference):
    """on inputs drawn for this grading: Pre-LN and Post-LN, masks of both shapes, by position or keyword"""
    drawn(grading, learner, reference, "TransformerBlock", 9023)


@BLOCK
@pytest.mark.together
def test_block_with_your_parts(grading, learner, course):
    """with your own MultiHeadAttention, FeedForward and LayerNorm, it still equals nn.TransformerEncoderLayer"""
    mask = torch.ones(9, 9, dtype=torch.bool).tril()
    x = grading.randn(2, 9, 24, seed=40)

    def run_check():                 # built here: the block's parts are those bound when it is made
        proxy, state = block(grading, learner, 24, 3, 40, seed=41)
        block_close(proxy, state, 3, x, mask, what="TransformerBlock(24, 3, 40)")

    broken = broken_parts(grading, learner)
    fix = (f"your {' and '.join(broken)} give{'s' if len(broken) == 1 else ''} wrong results on "
           f"{'its' if len(broken) == 1 else 'their'} own (see {'its' if len(broken) == 1 else 'their'} tests): "
           f"fix {'it' if len(broken) == 1 else 'them'} first") if broken else "fix the parts it uses first"
    # A part wrong on its own (on nearly constant rows, say) fails this test, whatever the block gives at these inputs.
    together(learner, course(A), course_parts(BLOCK_CELL, learner), run_check, "TransformerBlock",
             f"your TransformerBlock is right with the course's parts; with yours it is not: {fix}" if broken else fix,
             known_wrong=bool(broken))


@BLOCK
@pytest.mark.feedback
@pytest.mark.together
def test_block_drawn(request, learner, reference):
    """your TransformerBlock drawn beside the course's, with the differences in structure named"""
    draw_structure(request, learner, vars(reference(A)), "TransformerBlock")


# TransformerBlock is timed with the course's parts (`timed_reference`: the reference goes the same way), each part's
# call a round trip through the grader to a worker of course code; the clock is the CPU time of each side's own worker,
# so what is timed is the block's own computation and its calls: a loop over positions makes one call per position.
BLOCK_SPEED_SHAPE, BLOCK_SPEED_CALLS = [2, 64, 64], 5
# ... and its calls of the course's MultiHeadAttention, counted by the grader as it serves them: the whole batch is one
# call (a loop over the sequences of a batch is one call each, whose time is the course worker's, not on the learner's
# clock, and many times the reference's where sequences are short)
BLOCK_BATCH_COUNTED = 4


@BLOCK
@pytest.mark.measured
def test_block_speed(learner, timed_reference):
    """runs about as fast as the reference solution (the whole batch at once)"""
    counted = learner.new("TransformerBlock", 64, 4, 128)
    x = torch.randn(BLOCK_BATCH_COUNTED, 5, 64, generator=torch.Generator().manual_seed(fresh_seed()))
    n = course_calls(learner, "MultiHeadAttention", lambda: counted(x))
    check(n <= 1, f"TransformerBlock(64, 4, 128) called MultiHeadAttention {n} times in one forward pass on a batch "
                  f"of {BLOCK_BATCH_COUNTED}, where the reference solution calls it once: call it on the whole batch, "
                  "not once per sequence")
    mine, ref = module_targets(learner, timed_reference, "TransformerBlock", 64, 4, 128)
    fast_enough(mine, ref, [{"kind": "randn", "shape": BLOCK_SPEED_SHAPE}], "TransformerBlock",
                calls=BLOCK_SPEED_CALLS)
