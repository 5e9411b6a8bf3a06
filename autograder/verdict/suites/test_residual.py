"""Hidden suite: residual (LayerNorm, FeedForward, TransformerBlock).

Oracles: torch.nn.LayerNorm and torch.nn.TransformerEncoderLayer in float64, holding the same random weights as
the learner's modules; the same layers in float32 set the tolerance (checks.close).
"""

import pytest
import torch
import torch.nn.functional as F

from autograder.verdict.learner import LearnerError

from .checks import (
    DRAWING_PRELOAD,
    Diagnosis,
    check,
    close,
    draw_structure,
    fast_enough,
    leaves_inputs,
    load_exact,
    load_state,
    module_targets,
    randn,
    together,
)
from .oracles import (
    NORM_PARAMS,
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
WORKER_PRELOAD = DRAWING_PRELOAD      # test_block_drawn traces the learner's block in its worker



# -- known mistakes ------------------------------------------------------------------------------------------------

BLOCK_MISTAKES = {
    "placement swapped": "Pre-LN/Post-LN placement swapped: with norm_first=True, x = x + attn(norm1(x)) then "
                         "x = x + ff(norm2(x)); with norm_first=False, x = norm1(x + attn(x)) then "
                         "x = norm2(x + ff(x))",
    "no attention residual": "the residual is missing around the attention: add its output to x (x = x + ...)",
    "no feed-forward residual": "the residual is missing around the feed-forward: add its output to x (x = x + ...)",
    "norms swapped": "norm1 and norm2 are swapped: norm1 goes with the attention, norm2 with the feed-forward",
    "stream normalised": "the residual stream itself is normalised: in Pre-LN only what the sublayer reads is, "
                         "x = x + attn(norm1(x)), and x is carried on unnormalised",
}


def block_mistakes(state, H, x, mask=None, norm_first=True):
    names = [m for m in BLOCK_MISTAKES if norm_first or m != "stream normalised"]
    return {BLOCK_MISTAKES[m]: plain_block(state, H, x, mask, norm_first, m) for m in names}


# -- LayerNorm -------------------------------------------------------------------------------------------
LN = pytest.mark.cell("LayerNorm_tests")


def layer_norm(learner, d, seed, eps=None):
    proxy = learner.new("LayerNorm", d) if eps is None else learner.new("LayerNorm", d, eps=eps)
    state = random_norm_state(d, seed)
    load_state(proxy, state, "LayerNorm")
    return proxy, state


def ln_mistakes(state, x, eps=1e-5):
    wrong = {
        "the variance is unbiased (divided by d_model - 1): LayerNorm divides by d_model":
            plain_norm(state, x, eps, unbiased=True),
        "eps is outside the sqrt: divide by sqrt(var + eps), not sqrt(var) + eps":
            plain_norm(state, x, eps, eps_outside=True),
        "weight and bias are not applied: out = normalised x * weight + bias": plain_norm(state, x, eps, affine=False),
    }
    if eps != 1e-5:
        wrong["the eps argument is ignored"] = plain_norm(state, x, 1e-5)
    return wrong


@LN
def test_ln_parameters(learner):
    """parameters weight (ones) and bias (zeros) of shape (d_model,)"""
    x = randn(3, 4, 12, seed=15, scale=3.0) + 1.0
    ones = {"weight": torch.ones(12), "bias": torch.zeros(12)}
    close(learner.new("LayerNorm", 12)(x), torch_norm(ones, x), "a new LayerNorm(12)(x)",
          "LayerNorm starts as the plain normalisation: weight = ones, bias = zeros",
          baseline=norm_baseline(ones, x), dtype=torch.float32)
    proxy = learner.new("LayerNorm", 12)
    state = random_norm_state(12, seed=16)
    load_exact(proxy, state, "LayerNorm(12)")
    close(proxy(x), torch_norm(state, x), "LayerNorm(12)(x) with other weight and bias",
          "weight and bias are nn.Parameters of shape (d_model,), used as normalised x * weight + bias",
          baseline=norm_baseline(state, x), dtype=torch.float32)


@LN
@pytest.mark.weight(2)
def test_ln_values(learner):
    """equals torch.nn.LayerNorm with random weight and bias (d_model = 97)"""
    proxy, state = layer_norm(learner, 97, seed=1)
    x = randn(3, 7, 97, seed=2, scale=4.0) + 2.0
    close(proxy(x), torch_norm(state, x), "LayerNorm(97)(x)", "normalise over the last dimension, then * weight + bias",
          baseline=norm_baseline(state, x), dtype=torch.float32, mistakes={
              **ln_mistakes(state, x),
              "the mean and variance are taken over the wrong dimension: normalise each vector (dim -1)":
                  ((x - x.mean(-2, keepdim=True)) / (x.var(-2, keepdim=True, unbiased=False) + 1e-5).sqrt()
                   * state["weight"] + state["bias"]),
          })


@LN
def test_ln_near_constant_rows(learner):
    """nearly constant rows, where eps inside the sqrt matters"""
    proxy, state = layer_norm(learner, 16, seed=3)
    x = randn(4, 6, 1, seed=4, scale=3.0) + randn(4, 6, 16, seed=5, scale=1e-3)      # variance ~ 1e-6
    x[0, 0] = 1.5                                                                     # an exactly constant row
    close(proxy(x), torch_norm(state, x), "LayerNorm(16)(x) for nearly constant rows",
          "divide by sqrt(var + eps), which is not 0 for a constant row", baseline=norm_baseline(state, x),
          dtype=torch.float32, mistakes=ln_mistakes(state, x))


@LN
def test_ln_custom_eps(learner):
    """the eps argument is used"""
    proxy, state = layer_norm(learner, 10, seed=6, eps=1e-2)
    x = randn(5, 10, seed=7, scale=0.1)
    close(proxy(x), torch_norm(state, x, eps=1e-2), "LayerNorm(10, eps=1e-2)(x)",
          baseline=norm_baseline(state, x, eps=1e-2), dtype=torch.float32,
          mistakes=ln_mistakes(state, x, eps=1e-2))


@LN
def test_ln_leading_dims(learner):
    """any number of leading dimensions (none, one, three)"""
    proxy, state = layer_norm(learner, 6, seed=8)
    for shape in ((6,), (9, 6), (2, 3, 1, 6)):
        x = randn(*shape, seed=9, scale=2.0)
        close(proxy(x), torch_norm(state, x), f"LayerNorm(6)(x) for x of shape {shape}", "normalise over dim -1 only",
              baseline=norm_baseline(state, x), dtype=torch.float32)


@LN
def test_ln_gradients(learner):
    """gradients for x, weight and bias equal torch.nn.LayerNorm's"""
    proxy, state = layer_norm(learner, 20, seed=10)
    x, g = randn(3, 5, 20, seed=11, scale=2.0), randn(3, 5, 20, seed=12)
    res = proxy.backward(x, grad=g)
    xd = x.double().requires_grad_(True)
    w, b = (state[n].double().requires_grad_(True) for n in NORM_PARAMS)
    F.layer_norm(xd, (20,), w, b, 1e-5).backward(g.double())
    grads = res.get("input_grads") or [None]
    check(isinstance(grads[0], torch.Tensor), "no gradient reaches x: compute with differentiable tensor "
                                              "operations (no .detach(), .item() or torch.no_grad())")
    close(grads[0], xd.grad, "the gradient for x", "the mean and variance are part of the computation: do not detach "
          "them", rtol=1e-4, atol=1e-5, dtype=torch.float32)
    for name, ref in zip(NORM_PARAMS, (w.grad, b.grad)):
        check(name in res.get("param_grads", {}), f"no gradient reaches `{name}`: it must be an nn.Parameter used "
                                                  "in forward")
        close(res["param_grads"][name], ref, f"the gradient for {name}", rtol=1e-4, atol=1e-5, dtype=torch.float32)


@LN
def test_ln_leaves_input(learner):
    """does not modify x"""
    proxy, _ = layer_norm(learner, 8, seed=13)
    x = randn(2, 3, 8, seed=14, scale=3.0)
    leaves_inputs(proxy.twice(x), [x], "LayerNorm.forward")


# -- FeedForward -----------------------------------------------------------------------------------------
FF = pytest.mark.cell("FeedForward_tests")


def feed_forward(learner, d, d_ff, seed):
    proxy = learner.new("FeedForward", d, d_ff)
    state = random_ff_state(d, d_ff, seed)
    load_state(proxy, state, "FeedForward")
    return proxy, state


@FF
def test_ff_structure(learner):
    """linear1 is nn.Linear(d_model, d_ff), linear2 is nn.Linear(d_ff, d_model), both with bias"""
    proxy = learner.new("FeedForward", 12, 40)
    state = random_ff_state(12, 40, seed=26)
    load_exact(proxy, state, "FeedForward(12, 40)")
    x = randn(2, 3, 12, seed=27)
    close(proxy(x), plain_ff(state, x.double()), "FeedForward(12, 40)(x)",
          "linear1 maps d_model -> d_ff, linear2 maps d_ff -> d_model, both nn.Linear with a bias",
          baseline=plain_ff(state, x), dtype=torch.float32)


@FF
@pytest.mark.weight(2)
def test_ff_values(learner):
    """linear2(relu(linear1(x))) with random weights (d_model = 24, d_ff = 97)"""
    proxy, state = feed_forward(learner, 24, 97, seed=20)
    x = randn(3, 11, 24, seed=21)
    close(proxy(x), plain_ff(state, x.double()), "FeedForward(24, 97)(x)", "linear2(relu(linear1(x)))",
          baseline=plain_ff(state, x), dtype=torch.float32, mistakes={
              "the ReLU is missing between linear1 and linear2": plain_ff(state, x, act=lambda h: h),
              "the activation is GELU; this exercise uses ReLU": plain_ff(state, x, act=F.gelu),
              "a ReLU is applied after linear2 too: the output of the block is linear2(...) as it is":
                  plain_ff(state, x, act_after=True),
          })


@FF
def test_ff_leading_dims(learner):
    """any number of leading dimensions, each position on its own"""
    proxy, state = feed_forward(learner, 8, 20, seed=22)
    for shape in ((5, 8), (2, 3, 4, 8)):
        x = randn(*shape, seed=23)
        close(proxy(x), plain_ff(state, x.double()), f"FeedForward(8, 20)(x) for x of shape {shape}",
              "apply the layers to the last dimension, whatever the leading ones", baseline=plain_ff(state, x),
              dtype=torch.float32)


@FF
def test_ff_leaves_input(learner):
    """does not modify x"""
    proxy, _ = feed_forward(learner, 8, 16, seed=24)
    x = randn(2, 5, 8, seed=25)
    leaves_inputs(proxy.twice(x), [x], "FeedForward.forward")


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


def block(learner, d, H, d_ff, seed, norm_first=None):
    args = (d, H, d_ff) if norm_first is None else (d, H, d_ff, norm_first)
    proxy = new_block(learner, *args)
    state = random_block_state(d, d_ff, seed)
    load_state(proxy, state, "TransformerBlock")
    return proxy, state


_PARTS: dict = {}


def broken_parts(learner) -> list:
    """The learner's own parts (MultiHeadAttention, LayerNorm, FeedForward) that give wrong results on their own."""
    if id(learner) not in _PARTS:
        broken = []
        x = randn(2, 5, 12, seed=99)
        x[0] = randn(5, 1, seed=95) + randn(5, 12, seed=94, scale=1e-3)         # nearly constant rows
        for name, args, state, expected, baseline in (
                ("MultiHeadAttention", (12, 3), random_mha_state(12, seed=97), lambda st: oracle_mha(st, 3, x),
                 lambda st: plain_mha(st, 3, x)),
                ("LayerNorm", (12,), random_norm_state(12, seed=98), lambda st: torch_norm(st, x),
                 lambda st: norm_baseline(st, x)),
                ("FeedForward", (12, 20), random_ff_state(12, 20, seed=96), lambda st: plain_ff(st, x.double()),
                 lambda st: plain_ff(st, x))):
            try:
                proxy = learner.new(name, *args)
                load_state(proxy, state, name)
                close(proxy(x), expected(state), name, baseline=baseline(state), dtype=torch.float32)
            except (Diagnosis, LearnerError):
                broken.append(name)
        _PARTS[id(learner)] = broken
    return _PARTS[id(learner)]


def block_close(actual, expected, what, diagnosis, baseline, mistakes):
    close(actual, expected, what, diagnosis, baseline=baseline, dtype=torch.float32, mistakes=mistakes)


def course_parts(cell, learner):
    """TransformerBlock is graded with the course's MultiHeadAttention, FeedForward and LayerNorm (and once with
    the learner's own)."""
    return ["MultiHeadAttention", "FeedForward", "LayerNorm"] if cell == "TransformerBlock_tests" else []


@BLOCK
def test_block_structure(learner):
    """submodules attn (MultiHeadAttention), ff (FeedForward), norm1 and norm2 (LayerNorm)"""
    proxy = new_block(learner, 24, 6, 40)
    state = random_block_state(24, 40, seed=28)
    load_exact(proxy, state, "TransformerBlock(24, 6, 40): attn = MultiHeadAttention(d_model, n_heads), "
                             "ff = FeedForward(d_model, d_ff), norm1 and norm2 = LayerNorm(d_model); it")
    x = randn(2, 7, 24, seed=29)
    block_close(proxy(x), oracle_block(state, 6, x), "TransformerBlock(24, 6, 40)(x) with the course's weights",
                "Pre-LN: x = x + attn(norm1(x)), then x = x + ff(norm2(x))",
                baseline=oracle_block(state, 6, x, dtype=torch.float32), mistakes=block_mistakes(state, 6, x))


@BLOCK
@pytest.mark.weight(2)
def test_block_pre_ln(learner):
    """Pre-LN (the default) equals nn.TransformerEncoderLayer(norm_first=True), d_model = 48, 6 heads"""
    proxy, state = block(learner, 48, 6, 80, seed=30)
    x = randn(3, 13, 48, seed=31)
    block_close(proxy(x), oracle_block(state, 6, x), "TransformerBlock(48, 6, 80)(x)",
                "Pre-LN: x = x + attn(norm1(x)), then x = x + ff(norm2(x))",
                baseline=oracle_block(state, 6, x, dtype=torch.float32), mistakes=block_mistakes(state, 6, x))


@BLOCK
@pytest.mark.weight(2)
def test_block_post_ln(learner):
    """norm_first=False equals nn.TransformerEncoderLayer(norm_first=False)"""
    proxy, state = block(learner, 36, 4, 50, seed=32, norm_first=False)
    x = randn(2, 9, 36, seed=33)
    block_close(proxy(x), oracle_block(state, 4, x, norm_first=False),
                "TransformerBlock(36, 4, 50, norm_first=False)(x)",
                "Post-LN: x = norm1(x + attn(x)), then x = norm2(x + ff(x))",
                baseline=oracle_block(state, 4, x, norm_first=False, dtype=torch.float32),
                mistakes=block_mistakes(state, 4, x, norm_first=False))


@BLOCK
def test_block_mask(learner):
    """the mask reaches the attention (a causal mask, Pre-LN and Post-LN)"""
    mask = torch.ones(11, 11, dtype=torch.bool).tril()
    x = randn(2, 11, 24, seed=34)
    for norm_first in (True, False):
        proxy, state = block(learner, 24, 3, 40, seed=35, norm_first=norm_first)
        block_close(proxy(x, mask), oracle_block(state, 3, x, mask, norm_first),
                    f"TransformerBlock(norm_first={norm_first})(x, mask) with a causal mask", "pass mask to self.attn",
                    baseline=oracle_block(state, 3, x, mask, norm_first, dtype=torch.float32),
                    mistakes={"the mask is not passed to the attention: self.attn(..., mask=mask)":
                              plain_block(state, 3, x, mask, norm_first, "mask ignored"),
                              **block_mistakes(state, 3, x, mask, norm_first)})


@BLOCK
def test_block_single_position(learner):
    """seq_len = 1 works"""
    proxy, state = block(learner, 16, 2, 24, seed=36)
    x = randn(4, 1, 16, seed=37)
    block_close(proxy(x), oracle_block(state, 2, x), "TransformerBlock(16, 2, 24)(x) for one position", "",
                baseline=oracle_block(state, 2, x, dtype=torch.float32), mistakes=None)


@BLOCK
def test_block_leaves_input(learner):
    """does not modify x (x = x + ..., not x += ...)"""
    for norm_first in (True, False):
        proxy, _ = block(learner, 16, 4, 32, seed=38, norm_first=norm_first)
        x = randn(2, 6, 16, seed=39)
        leaves_inputs(proxy.twice(x), [x], f"TransformerBlock(norm_first={norm_first}).forward",
                      "x += ... writes into the caller's tensor; write x = x + ...", names=["x"])


@BLOCK
@pytest.mark.together
def test_block_with_your_parts(learner, course):
    """with your own MultiHeadAttention, FeedForward and LayerNorm, it still equals nn.TransformerEncoderLayer"""
    mask = torch.ones(9, 9, dtype=torch.bool).tril()
    x = randn(2, 9, 24, seed=40)

    def run_check():                 # built here: the block's parts are those bound when it is made
        proxy, state = block(learner, 24, 3, 40, seed=41)
        block_close(proxy(x, mask), oracle_block(state, 3, x, mask), "TransformerBlock(24, 3, 40)(x, mask)", "",
                    baseline=oracle_block(state, 3, x, mask, dtype=torch.float32), mistakes=None)

    broken = broken_parts(learner)
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


@BLOCK
def test_block_speed(learner, timed_reference):
    """runs about as fast as the reference solution"""
    mine, ref = module_targets(learner, timed_reference, "TransformerBlock", 64, 4, 128)
    fast_enough(mine, ref, [{"kind": "randn", "shape": BLOCK_SPEED_SHAPE}], "TransformerBlock",
                calls=BLOCK_SPEED_CALLS)
