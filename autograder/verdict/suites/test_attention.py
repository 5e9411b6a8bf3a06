"""Hidden suite: attention (scaled_dot_product_attention, causal_mask, MultiHeadAttention, blockwise_attention).

Oracles: torch.nn.functional.scaled_dot_product_attention and torch.nn.MultiheadAttention in float64;
the plain float32 computation sets the tolerance (checks.close).
"""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from autograder.inside.worker import make_inputs
from autograder.sandbox.gpu import on_gpu
from autograder.verdict.timing import fresh_seed, peak_memory, same_outputs

from . import families
from .checks import (
    check,
    close,
    course_calls,
    equal,
    fast_enough,
    function_targets,
    leaves_inputs,
    load_exact,
    load_state,
    module_targets,
    on_device,
    raises,
    tensor,
    together,
)
from .contract import Call, Draw, Part, Promises, at_call_precision, check_drawn, scores_slack
from .library import ATTENTION_OPS
from .oracles import (
    NEG,
    oracle_attention,
    oracle_mha,
    plain_attention,
    plain_mha,
    random_mask,
    random_mha_state,
)

A = "attention"
# The library versions of this exercise's parts: the static reading proves any path through one of these names
# (autograder.verdict.static), and the learner's worker refuses these operators when they are called.
LIBRARY = r"(?i)(attention|multihead|multi_head|transformer)"
REFUSED_OPS = ATTENTION_OPS
# torch's meta kernels (a mask asked for on the "meta" device) take dynamo's modules: 1.2 s and some 70 MiB the first
# time, imported ahead by the fork server of the learners' workers and by the suite's process: no learner pays them.
WORKER_PRELOAD = ("torch._dynamo",)


# -- the contract: inputs drawn over everything the notebook allows (autograder.verdict.suites.contract) ---------
def _qkv(d: Draw, Lq: int, Lk: int, lead: tuple, dtype):
    """q, k, v with scores of order 1, around 1e3-1e4, or all far below 0 in some rows (the running max of an online
    softmax must not start at 0)."""
    dim, dv = d.size(1, 24), d.size(1, 12)
    kind = d.choice(("plain", "plain", "large", "negative"))
    scale = d.uniform(20.0, 100.0) if kind == "large" else 1.0
    q, k = d.randn(*lead, Lq, dim, dtype=dtype, scale=scale), d.randn(*lead, Lk, dim, dtype=dtype, scale=scale)
    if kind == "negative":                  # every score of these rows is about -100 * dim or less
        k = d.randn(*lead, Lk, dim, dtype=dtype, scale=0.1, shift=1.0)
        rows = d.randn(*lead, Lq, 1, dtype=torch.float64) > 0
        q = torch.where(rows, d.randn(*lead, Lq, dim, dtype=dtype, scale=5.0, shift=-100.0), q)
    v = d.randn(*lead, Lk, dv, dtype=dtype, scale=d.choice((1.0, 10.0)))
    return q, k, v, kind


def draw_sdpa(d: Draw) -> Call:
    lead = d.lead(2)
    Lq, Lk = d.size(1, 40, far=130, p_far=0.1), d.size(1, 40, far=130, p_far=0.1)
    q, k, v, kind = _qkv(d, Lq, Lk, lead, d.dtype())
    args: tuple = (q, k, v)
    about = [] if kind == "plain" else [f"scores {kind}"]
    if d.chance(0.7):
        shape = d.choice([(Lq, Lk), (*lead, Lq, Lk)] + ([(*lead[:-1], 1, Lq, Lk)] if lead else []))
        empty = d.chance(0.4)
        args = (q, k, v, d.mask(*shape, empty_rows=empty))
        about.append("a mask with rows all False" if empty else "a mask")
    return Call("scaled_dot_product_attention", args, about=", ".join(about))


def _sdpa_truth(c: Call, dtype=torch.float64):
    q, k, v, *mask = c.args
    return plain_attention(*(t.to(dtype) for t in (q, k, v)), *mask)


def _sdpa_slack(c: Call) -> float:
    """Scores known to float32's precision for float16 and bfloat16 arguments: the notebook has them computed in
    float32 ("where sums and exponentials in the lower dtype would lose too much")."""
    return scores_slack(c, torch.float32 if c.args[0].dtype in LOW else None)


def _sdpa_plain(c: Call):
    """A plain computation at the precision the notebook asks for: the arguments' own, or float32 inside for float16
    and bfloat16 ("compute inside in float32 where sums and exponentials in the lower dtype would lose too much"),
    answered in their dtype."""
    dtype = c.args[0].dtype
    if dtype in LOW:
        return tuple(t.to(dtype) for t in _sdpa_truth(c, torch.float32))
    return _sdpa_truth(c, dtype)


def draw_causal(d: Draw) -> Call:
    L = d.size(1, 40, far=600, p_far=0.3)
    device = d.choice((None, "cpu", torch.device("cpu"), "meta", "meta"))
    if device is None:
        return Call("causal_mask", (L,))
    if d.chance(0.5):
        return Call("causal_mask", (L, device))
    return Call("causal_mask", (L,), {"device": device})


def vary_causal(call: Call, d: Draw) -> Call:
    """The same size on another device."""
    device = call.kwargs.get("device", call.args[1] if len(call.args) > 1 else None)
    other = "cpu" if device == "meta" else "meta"
    return Call("causal_mask", (call.args[0],), {"device": other})


def _causal_truth(c: Call):
    return torch.ones(c.args[0], c.args[0], dtype=torch.bool).tril()


HEAD_COUNTS = (1, 2, 3, 4, 6, 8)


def draw_mha(d: Draw) -> Call:
    H, dh = d.choice(HEAD_COUNTS), d.size(1, 12)
    D, bias = H * dh, d.chance(0.7)
    if d.chance(0.05) and D > 1:
        return Call("MultiHeadAttention", ctor=(D + 1 if (D + 1) % H else D + 2, H), state=None,
                    about="n_heads does not divide d_model")
    B, Lq = d.size(1, 3), d.size(1, 24)
    Lk = Lq if d.chance(0.5) else d.size(1, 24)
    query = d.randn(B, Lq, D)
    args: list = [query]
    kwargs: dict = {}
    about = []
    if Lk != Lq or d.chance(0.3):
        args.append(d.randn(B, Lk, D))
        if d.chance(0.5):
            args.append(d.randn(B, Lk, D))
        about.append("cross-attention")
    if d.chance(0.6):
        empty = d.chance(0.3)
        kwargs["mask"] = d.mask(*d.choice(((Lq, Lk), (B, 1, Lq, Lk))), empty_rows=empty)
        about.append("a mask with rows all False" if empty else "a mask")
    state = {k: v for k, v in random_mha_state(D, d.g, bias=bias).items()}
    ctor_kwargs = {} if bias and d.chance(0.5) else {"bias": bias}
    return Call("MultiHeadAttention", tuple(args), kwargs, ctor=(D, H), ctor_kwargs=ctor_kwargs, state=state,
                about=", ".join(about))


def _mha_values(c: Call, dtype):
    state = {k: v.to(dtype) for k, v in (c.state or {}).items()}
    query, key, value = (*(a.to(dtype) for a in c.args), None, None)[:3]
    return plain_mha(state, c.made[1], query, key, value, mask=c.kwargs.get("mask"))


def draw_blockwise(d: Draw) -> Call:
    lead = d.lead(2)
    Lq, Lk = d.size(1, 48, far=160, p_far=0.15), d.size(1, 48, far=160, p_far=0.15)
    q, k, v, kind = _qkv(d, Lq, Lk, lead, d.dtype())
    kwargs: dict = {}
    if d.chance(0.6):
        kwargs["causal"] = d.chance(0.6)
    if d.chance(0.8):
        kwargs["block_size"] = d.choice((1 if Lk <= 48 else 7, d.size(1, 16), d.size(1, 80)))
    about = f"scores {kind}" if kind != "plain" else ""
    return Call("blockwise_attention", (q, k, v), kwargs, about=about)


def _blockwise_truth(c: Call, dtype=torch.float64):
    q, k, v = (t.to(dtype) for t in c.args)
    mask = causal_bool(q.shape[-2], k.shape[-2]) if c.kwargs.get("causal") else None
    return plain_attention(q, k, v, mask)[0]


# -- the edges every grading holds (contract.Promises.edges) ---------------------------------------------------
def sdpa_edges(d: Draw) -> list[Call]:
    """One key its mask removes, a mask over batch only with heads (second: the families take the first two, and a
    gradient cut only where a mask is given shows there), one query of width 1, every row masked."""
    A_ = "scaled_dot_product_attention"
    return [Call(A_, (d.randn(2, 3, 4), d.randn(2, 1, 4), d.randn(2, 1, 5), torch.zeros(3, 1, dtype=torch.bool)),
                 about="one key, masked"),
            Call(A_, (d.randn(2, 3, 5, 4), d.randn(2, 3, 6, 4), d.randn(2, 3, 6, 3),
                      d.mask(2, 1, 5, 6, empty_rows=True)), about="a mask (B, 1, Lq, Lk) over heads"),
            Call(A_, (d.randn(1, 1), d.randn(4, 1), d.randn(4, 2)), about="one query of width 1"),
            Call(A_, (d.randn(3, 4), d.randn(5, 4), d.randn(5, 2), torch.zeros(3, 5, dtype=torch.bool)),
                 about="every row masked")]


def sdpa_precise(d: Draw) -> list[Call]:
    """Where float16 loses the most: scores near 940, exact in the arguments, whose float16 products are rounded to
    steps of 2 before the exponential (the weights of float16 steps are off by 0.03)."""
    q = torch.ones(2, 3, 16)
    k = torch.cat([torch.full((2, 5, 15), 250.0), torch.arange(5.0).repeat(2, 1)[..., None] / 2], dim=-1)
    return [Call("scaled_dot_product_attention", (q, k, d.randn(2, 5, 4)), about="scores near 940")]


def causal_edges(d: Draw) -> list[Call]:
    return [Call("causal_mask", (1,)), Call("causal_mask", (1, "meta")), Call("causal_mask", (2,), {"device": "cpu"}),
            Call("causal_mask", (700,), {"device": "meta"}, about="700 positions")]


def _mha_call(d: Draw, D: int, H: int, args: list, kwargs: dict | None = None, bias: bool = True, about: str = ""):
    return Call("MultiHeadAttention", tuple(args), kwargs or {}, ctor=(D, H),
                ctor_kwargs={} if bias else {"bias": bias},
                state=random_mha_state(D, d.g, bias=bias), about=about)


def mha_edges(d: Draw) -> list[Call]:
    """One head with a mask (B, 1, Lq, Lk), heads of width 1 over one position, cross-attention with empty rows, a key
    without a value, no biases, and a causal mask (L, L) that every batch and head shares (the caller's, to leave as
    it is: not made (1, 1, L, L) in place)."""
    return [_mha_call(d, 4, 1, [d.randn(2, 3, 4)], {"mask": d.mask(2, 1, 3, 3)}, about="one head, a mask (B, 1, L, L)"),
            _mha_call(d, 4, 4, [d.randn(2, 1, 4)], about="heads of width 1, one position"),
            _mha_call(d, 6, 2, [d.randn(2, 3, 6), d.randn(2, 4, 6)], {"mask": d.mask(2, 1, 3, 4, empty_rows=True)},
                      about="cross-attention, a mask with rows all False"),
            _mha_call(d, 6, 3, [d.randn(1, 2, 6), d.randn(1, 5, 6)], about="key given, value defaults to it"),
            _mha_call(d, 4, 2, [d.randn(2, 3, 4)], bias=False, about="no biases"),
            _mha_call(d, 6, 2, [d.randn(2, 4, 6)], {"mask": torch.ones(4, 4, dtype=torch.bool).tril()},
                      about="a causal mask (L, L)")]


def blockwise_edges(d: Draw) -> list[Call]:
    """One key, causal with Lq > Lk (among the first two, which every family checks too: the causal branch is
    checked on every device and layout), one query, blocks of one key, a block longer than the keys, causal with
    Lq < Lk."""
    B = "blockwise_attention"

    def qkv(Lq, Lk, dim=4):
        return d.randn(Lq, dim), d.randn(Lk, dim), d.randn(Lk, 3)

    return [Call(B, qkv(5, 1), {"block_size": 4}, about="one key"),
            Call(B, qkv(9, 4), {"causal": True, "block_size": 3}, about="causal, Lq > Lk"),
            Call(B, qkv(1, 9), {"block_size": 4}), Call(B, qkv(6, 7), {"block_size": 1}),
            Call(B, qkv(6, 7), {"block_size": 100}),
            Call(B, qkv(3, 10), {"causal": True, "block_size": 4}, about="causal, Lq < Lk")]


LOW = (torch.float16, torch.bfloat16)
CONTRACT = {
    "scaled_dot_product_attention": Part(draw_sdpa, _sdpa_truth, _sdpa_plain, slack=_sdpa_slack,
                                         promises=Promises(low_precision=LOW, edges=sdpa_edges,
                                                           precise=sdpa_precise)),
    "causal_mask": Part(draw_causal, _causal_truth, vary=vary_causal,
                        promises=Promises(takes="sizes", edges=causal_edges)),
    "MultiHeadAttention": Part(draw_mha, lambda c: _mha_values(c, torch.float64), at_call_precision(_mha_values),
                               promises=Promises(module=True, edges=mha_edges)),
    "blockwise_attention": Part(draw_blockwise, _blockwise_truth, lambda c: _blockwise_truth(c, c.args[0].dtype),
                                slack=scores_slack, promises=Promises(differentiable=False, edges=blockwise_edges)),
}
globals().update(families.tests(CONTRACT, A))
DRAWN = 10          # calls drawn per part and grading


def drawn(grading, learner, reference, name: str, label: int):
    check_drawn(learner, vars(reference(A)), name, CONTRACT[name], grading.seeded(label).initial_seed(), DRAWN)



def pair(result, what):
    check(isinstance(result, (tuple, list)) and len(result) == 2,
          f"{what} should return the pair (out, weights), but it returned {type(result).__name__}")
    return result


def shape_of(t) -> str:
    return "x".join(map(str, t.shape))


# -- scaled_dot_product_attention --------------------------------------------------------------------------
SDPA = pytest.mark.cell("scaled_dot_product_attention_tests")


def sdpa(learner, *args, what="scaled_dot_product_attention(q, k, v)"):
    return pair(learner.fn("scaled_dot_product_attention")(*args), what)


def sdpa_close(learner, q, k, v, mask=None, what="", atol=None):
    """The learner's (out, weights) against softmax attention in float64, at q's own precision."""
    args = (q, k, v) if mask is None else (q, k, v, mask)
    shapes = ", ".join(f"{n} {shape_of(t)}" for n, t in zip(("q", "k", "v", "mask"), args))
    what = what or f"scaled_dot_product_attention with {shapes} ({str(q.dtype).removeprefix('torch.')})"
    out, w = sdpa(learner, *args, what=what)
    right = plain_attention(q.double(), k.double(), v.double(), mask)
    plain = plain_attention(q, k, v, mask)
    close(w, right[1], f"the weights of {what}", baseline=plain[1], dtype=q.dtype, atol=atol)
    close(out, right[0], f"the output of {what}", baseline=plain[0], dtype=q.dtype, atol=atol)
    return out, w


@SDPA
def test_sdpa_shapes(grading, learner):
    """returns (out, weights) of shapes (..., Lq, dv) and (..., Lq, Lk) with batch and head dimensions"""
    q, k, v = grading.randn(2, 3, 5, 8, seed=1), grading.randn(2, 3, 7, 8, seed=2), grading.randn(2, 3, 7, 6, seed=3)
    out, w = sdpa(learner, q, k, v,
                  what="scaled_dot_product_attention(q, k, v) with q (2, 3, 5, 8), k (2, 3, 7, 8), v (2, 3, 7, 6)")
    tensor(out, "out", shape=(2, 3, 5, 6), dtype=torch.float32)
    tensor(w, "weights", shape=(2, 3, 5, 7), dtype=torch.float32)


@SDPA
@pytest.mark.weight(2)
def test_sdpa_values(grading, learner):
    """out and weights equal PyTorch's attention (Lq = 13, Lk = 97, d = 24, dv = 10)"""
    sdpa_close(learner, grading.randn(2, 3, 13, 24, seed=4), grading.randn(2, 3, 97, 24, seed=5),
               grading.randn(2, 3, 97, 10, seed=6))


@SDPA
def test_sdpa_float64(grading, learner):
    """float64 inputs give float64 results at float64 precision"""
    sdpa_close(learner, *(grading.randn(3, 11, 6, seed=s, dtype=torch.float64) for s in (7, 8, 9)))


@SDPA
@pytest.mark.weight(2)
def test_sdpa_mask(grading, learner):
    """masks (True = may attend) broadcast from (B, 1, Lq, Lk) and (Lq, Lk); masked keys get weight 0"""
    q, k, v = (grading.randn(2, 3, 9, 8, seed=10), grading.randn(2, 3, 17, 8, seed=11),
               grading.randn(2, 3, 17, 5, seed=12))
    for mask in (random_mask(2, 1, 9, 17, g=grading.seeded(13)), random_mask(9, 17, g=grading.seeded(14))):
        sdpa_close(learner, q, k, v, mask)


@SDPA
def test_sdpa_fully_masked_rows(grading, learner):
    """a query with no allowed key gets zero weights and zero output, not NaN"""
    q, k, v = grading.randn(2, 6, 4, seed=15), grading.randn(2, 5, 4, seed=16), grading.randn(2, 5, 3, seed=17)
    mask = random_mask(2, 6, 5, g=grading.seeded(18))
    mask[:, 2] = False
    mask[1, 4] = False
    sdpa_close(learner, q, k, v, mask, what="scaled_dot_product_attention with rows of the mask all False")


def large_scores(grading, Lq: int, Lk: int, seed: int):
    """float32 q, k, v whose scores are around 1e4 (inputs numbered from `seed`), and in every grading one query
    whose weights such scores do not saturate: the first query's scaled scores are 1e4 for key 0, 1e4 - 1 for key 1
    and 0 for every other key of its sequence, and those two keys' values differ by 1. A correct answer gives them
    0.73 and 0.27 of its weight there, an unscaled one 0.98 and 0.02; where every row saturates, a wrong scale is
    right to within 1e-11, and the scale mistakes lost these points in 1 of 20 gradings, whichever drew close
    scores."""
    q, k, v = (grading.randn(2, Lq, 16, seed=seed, scale=100.0), grading.randn(2, Lk, 16, seed=seed + 1, scale=100.0),
               grading.randn(2, Lk, 4, seed=seed + 2))
    first = q[0, 0].double()
    along = first / first.norm()
    keys = k[0].double()
    keys -= (keys @ along)[:, None] * along                  # every key of the first sequence scores 0 ...
    for j, score in enumerate((1e4, 1e4 - 1.0)):             # ... but the first two
        keys[j] += score * math.sqrt(q.shape[-1]) / first.norm() * along
    k[0] = keys.float()
    v[0, 1] = v[0, 0] + 1.0
    return q, k, v


def large_scores_atol(q, k, v) -> float:
    """A float32 score around 1e4 is only known to eps * |score| (about 1e-3), and so each weight: a correct answer
    computed in any order may err by that much times |v| (besides twice the error of the plain computation)."""
    scores = (q.double() @ k.double().transpose(-2, -1)).abs().max() / math.sqrt(q.shape[-1])
    return torch.finfo(torch.float32).eps * float(scores) * float(v.abs().max())


def close_at_large_scores(out, q, k, v, what: str, mask=None):
    """`out` is softmax attention of float32 q, k, v whose scores are around 1e4."""
    close(out, plain_attention(q.double(), k.double(), v.double(), mask)[0], what,
          baseline=plain_attention(q, k, v, mask)[0], atol=large_scores_atol(q, k, v), dtype=torch.float32)


@SDPA
def test_sdpa_large_scores(grading, learner):
    """scores around 1e4 do not overflow, with and without a mask (whose masked keys have the largest scores)"""
    q, k, v = large_scores(grading, 7, 9, seed=19)
    close_at_large_scores(sdpa(learner, q, k, v)[0], q, k, v, "the output for scores around 1e4")
    scores = q @ k.transpose(-2, -1)
    mask = scores < scores.amax(-1, keepdim=True)                  # each row's largest score masked
    mask |= ~mask.any(-1, keepdim=True)
    close_at_large_scores(sdpa(learner, q, k, v, mask)[0], q, k, v,
                          "the output for scores around 1e4 whose largest ones are masked", mask)


@SDPA
def test_sdpa_single_key(grading, learner):
    """seq_len = 1: the only key gets weight 1"""
    sdpa_close(learner, grading.randn(3, 1, 5, seed=22), grading.randn(3, 1, 5, seed=23),
               grading.randn(3, 1, 2, seed=24))


@SDPA
def test_sdpa_leaves_inputs(grading, learner):
    """does not modify q, k, v or mask (a mask with rows all False included)"""
    q, k, v = grading.randn(2, 4, 8, seed=25), grading.randn(2, 6, 8, seed=26), grading.randn(2, 6, 8, seed=27)
    mask = random_mask(4, 6, g=grading.seeded(28))
    mask[1] = False
    leaves_inputs(learner.twice("scaled_dot_product_attention", q, k, v, mask), [q, k, v, mask],
                  "scaled_dot_product_attention", names=["q", "k", "v", "mask"])


@SDPA
@given(Lq=st.integers(1, 9), Lk=st.integers(1, 9), d=st.integers(1, 8), seed=st.integers(0, 10_000))
def test_sdpa_weights_are_distributions(grading, learner, Lq, Lk, d, seed):
    """each query's weights are >= 0 and sum to 1 over the keys"""
    q, k, v = (grading.randn(2, Lq, d, seed=seed, scale=2.0), grading.randn(2, Lk, d, seed=seed + 1, scale=2.0),
               grading.randn(2, Lk, 3, seed=seed + 2))
    mask = random_mask(2, Lq, Lk, g=grading.seeded(seed + 3))
    _, w = sdpa(learner, q, k, v, mask, what=f"scaled_dot_product_attention with Lq = {Lq}, Lk = {Lk}")
    w = tensor(w, "weights", shape=(2, Lq, Lk)).double()
    check((w >= 0).all(), f"with Lq = {Lq}, Lk = {Lk} and a mask, a weight is {float(w.min()):.3g}, below 0")
    sums = w.sum(-1)
    worst = float((sums - 1).abs().max())
    check(worst <= 1e-5, f"with Lq = {Lq}, Lk = {Lk} and a mask that leaves every query a key, a query's weights "
                         f"sum to {float(sums.flatten()[(sums - 1).abs().flatten().argmax()]):.6g}, not 1")


@SDPA
@given(Lq=st.integers(1, 8), Lk=st.integers(2, 8), seed=st.integers(0, 10_000))
def test_sdpa_permutation(grading, learner, Lq, Lk, seed):
    """permuting keys and values together changes nothing; permuting queries permutes the output"""
    q, k, v = (grading.randn(2, n, 4, seed=seed + i, dtype=torch.float64) for i, n in enumerate((Lq, Lk, Lk)))
    pk, pq = torch.randperm(Lk, generator=grading.seeded(seed)), torch.randperm(Lq, generator=grading.seeded(seed + 9))
    out = tensor(sdpa(learner, q, k, v)[0], "out", shape=(2, Lq, 4))
    out_k = tensor(sdpa(learner, q, k[:, pk], v[:, pk])[0], "out", shape=(2, Lq, 4))
    out_q = tensor(sdpa(learner, q[:, pq], k, v)[0], "out", shape=(2, Lq, 4))
    # float32's tolerance though the inputs are float64: a softmax summed in another order (a float32 one, say) is a
    # matter of precision, which the value checks charge once; a key that loses its value differs by far more
    check(torch.allclose(out_k, out, atol=1e-5),
          f"with Lq = {Lq}, Lk = {Lk}, permuting the keys and values together changed the output by up to "
          f"{float((out_k - out).abs().max()):.3g}; attention takes the keys as a set, each with its value")
    check(torch.allclose(out_q, out[:, pq], atol=1e-5),
          f"with Lq = {Lq}, Lk = {Lk}, permuting the queries changed the output rows by up to "
          f"{float((out_q - out[:, pq]).abs().max()):.3g} beyond permuting them; query i's output depends on q[i] "
          "alone")


@SDPA
@pytest.mark.weight(2)
@pytest.mark.drawn
def test_sdpa_on_drawn_inputs(grading, learner, reference):
    """on inputs drawn for this grading: any shapes and dtypes, masks with empty rows, scores near 1e4 or far below 0"""
    drawn(grading, learner, reference, "scaled_dot_product_attention", 9011)


# -- causal_mask -----------------------------------------------------------------------------------------
CAUSAL = pytest.mark.cell("causal_mask_tests")


def causal_right(learner, L):
    equal(learner.fn("causal_mask")(L), torch.ones(L, L, dtype=torch.bool).tril(), f"causal_mask({L})")


@CAUSAL
def test_causal_dtype_shape(learner):
    """a bool tensor of shape (seq_len, seq_len)"""
    m = tensor(learner.fn("causal_mask")(6), "causal_mask(6)", shape=(6, 6))
    check(m.dtype == torch.bool, f"causal_mask(6) has dtype {str(m.dtype).removeprefix('torch.')}; the mask is bool "
                                 "(True = may attend), not 0/1 numbers or an additive -inf/0 mask")


@CAUSAL
@pytest.mark.weight(2)
def test_causal_values(learner):
    """True exactly where key j <= query i (5, 97 and 300 positions)"""
    for L in (5, 97, 300):
        causal_right(learner, L)


@CAUSAL
def test_causal_single(learner):
    """seq_len = 1 gives [[True]]"""
    causal_right(learner, 1)


@CAUSAL
def test_causal_device(learner):
    """made on the device asked for, by keyword or position ("meta", whose tensors hold no data, included)"""
    for args, kwargs, shown in (((4,), {"device": "cpu"}, 'device="cpu"'), ((4, "meta"), {}, '"meta"'),
                                ((4,), {"device": torch.device("meta")}, 'device=torch.device("meta")')):
        m = tensor(learner.fn("causal_mask")(*args, **kwargs), f"causal_mask(4, {shown})", shape=(4, 4))
        want = str(kwargs.get("device", args[-1]))
        check(m.device.type == torch.device(want).type,
              f"causal_mask(4, {shown}) is on the device {m.device.type!r}; it is made on the device asked for")


@CAUSAL
@pytest.mark.drawn
def test_causal_on_drawn_inputs(grading, learner, reference):
    """on inputs drawn for this grading: up to 600 positions, on the device asked for ("meta" too)"""
    drawn(grading, learner, reference, "causal_mask", 9012)


# -- MultiHeadAttention ----------------------------------------------------------------------------------------
MHA = pytest.mark.cell("MultiHeadAttention_tests")


def course_parts(cell, learner):
    """MultiHeadAttention is graded with the course's scaled_dot_product_attention (and once with the learner's)."""
    return ["scaled_dot_product_attention"] if cell == "MultiHeadAttention_tests" else []


def mha(grading, learner, d_model, n_heads, bias=True, seed=0):
    """The learner's MultiHeadAttention holding random weights; returns (proxy, state)."""
    proxy = learner.new("MultiHeadAttention", d_model, n_heads, bias=bias)
    state = random_mha_state(d_model, grading.seeded(seed), bias=bias)
    load_state(proxy, state, "MultiHeadAttention")
    return proxy, state


def mha_close(proxy, state, H, *args, mask=None, bias=True):
    """The learner's module on (query[, key[, value]], mask) against torch.nn.MultiheadAttention in float64."""
    D = args[0].shape[-1]
    shown = ", ".join([*(f"{n} {shape_of(a)}" for n, a in zip(("query", "key", "value"), args)),
                       *([f"mask {shape_of(mask)}"] if mask is not None else [])])
    if mask is not None and not mask.any(-1).all():
        right = plain_mha({k: v.double() for k, v in state.items()}, H, *(a.double() for a in args), mask=mask)
    else:
        right = oracle_mha(state, H, *args, mask=mask, bias=bias)
    close(proxy(*args, mask=mask) if mask is not None else proxy(*args), right,
          f"MultiHeadAttention({D}, {H}{'' if bias else ', bias=False'}) on {shown}",
          baseline=plain_mha(state, H, *args, mask=mask), dtype=torch.float32)


@MHA
def test_mha_structure(grading, learner):
    """q_proj, k_proj, v_proj, out_proj are nn.Linear(d_model, d_model), with bias only when bias=True"""
    x = grading.randn(2, 5, 48, seed=29)
    for bias in (True, False):
        proxy = learner.new("MultiHeadAttention", 48, 6, bias=bias)
        state = random_mha_state(48, grading.seeded(7 + bias), bias=bias)
        load_exact(proxy, state, f"MultiHeadAttention(48, 6, bias={bias})", forbidden=None if bias else r"bias$")
        mha_close(proxy, state, 6, x, bias=bias)


@MHA
def test_mha_value_error(learner):
    """raises ValueError when n_heads does not divide d_model"""
    raises(lambda: learner.new("MultiHeadAttention", 50, 6), "ValueError",
           "MultiHeadAttention(50, 6) did not raise ValueError; the specification: 6 heads do not divide d_model = 50, "
           "which raises ValueError")


@MHA
@pytest.mark.weight(2)
def test_mha_self_attention(grading, learner):
    """self-attention equals torch.nn.MultiheadAttention (B = 3, L = 11, d_model = 48, 6 heads)"""
    proxy, state = mha(grading, learner, 48, 6, seed=1)
    mha_close(proxy, state, 6, grading.randn(3, 11, 48, seed=30))


@MHA
def test_mha_cross_attention(grading, learner):
    """cross-attention with Lq != Lk, and value defaulting to key"""
    proxy, state = mha(grading, learner, 36, 4, seed=2)
    query, key, value = (grading.randn(2, 5, 36, seed=31), grading.randn(2, 9, 36, seed=32),
                         grading.randn(2, 9, 36, seed=33))
    mha_close(proxy, state, 4, query, key, value)
    mha_close(proxy, state, 4, query, key)


@MHA
def test_mha_mask(grading, learner):
    """masks broadcast from (Lq, Lk) and (B, 1, Lq, Lk), True = may attend"""
    proxy, state = mha(grading, learner, 24, 6, seed=3)
    query, key = grading.randn(2, 7, 24, seed=34), grading.randn(2, 10, 24, seed=35)
    for mask in (random_mask(7, 10, g=grading.seeded(36)), random_mask(2, 1, 7, 10, g=grading.seeded(37))):
        mha_close(proxy, state, 6, query, key, mask=mask)


@MHA
def test_mha_no_bias(grading, learner):
    """bias=False matches torch.nn.MultiheadAttention(bias=False)"""
    proxy, state = mha(grading, learner, 30, 3, bias=False, seed=4)
    mha_close(proxy, state, 3, grading.randn(2, 8, 30, seed=38), bias=False)


@MHA
def test_mha_single_position(grading, learner):
    """seq_len = 1 works"""
    proxy, state = mha(grading, learner, 16, 4, seed=5)
    mha_close(proxy, state, 4, grading.randn(3, 1, 16, seed=39))


@MHA
def test_mha_leaves_inputs(grading, learner):
    """does not modify query, key, value or mask (a mask with rows all False included)"""
    proxy, _ = mha(grading, learner, 16, 2, seed=6)
    args = [grading.randn(2, 4, 16, seed=40), grading.randn(2, 5, 16, seed=41), grading.randn(2, 5, 16, seed=42)]
    mask = random_mask(4, 5, g=grading.seeded(43))
    mask[0] = False
    leaves_inputs(proxy.twice(*args, mask=mask), args, "MultiHeadAttention.forward", names=["query", "key", "value"])


@MHA
@given(L=st.integers(2, 9), seed=st.integers(0, 10_000))
def test_mha_permutation_equivariant(grading, learner, L, seed):
    """without a mask, permuting the positions permutes the output the same way"""
    proxy = learner.new("MultiHeadAttention", 12, 3)
    x = grading.randn(2, L, 12, seed=seed)
    perm = torch.randperm(L, generator=grading.seeded(seed))
    out, out_p = proxy(x), proxy(x[:, perm].contiguous())
    tensor(out, "MultiHeadAttention(12, 3)(x)", shape=(2, L, 12))
    tensor(out_p, "MultiHeadAttention(12, 3)(x)", shape=(2, L, 12))
    check(torch.allclose(out_p, out[:, perm], atol=1e-5),
          f"MultiHeadAttention(12, 3) on x of shape (2, {L}, 12): permuting the positions of x changed the output by "
          f"up to {float((out_p - out[:, perm]).abs().max()):.3g} beyond permuting it; without positions or a mask "
          "attention does not depend on the order")


@MHA
@pytest.mark.together
def test_mha_with_your_attention(grading, learner, course):
    """with your own scaled_dot_product_attention, it still equals torch.nn.MultiheadAttention"""
    proxy, state = mha(grading, learner, 32, 4, seed=8)
    x, key = grading.randn(2, 6, 32, seed=44), grading.randn(2, 9, 32, seed=45)
    mask = random_mask(6, 9, g=grading.seeded(46))
    together(learner, course(A), ["scaled_dot_product_attention"],
             lambda: mha_close(proxy, state, 4, x, key, mask=mask),
             "MultiHeadAttention", "fix part 1 (scaled_dot_product_attention) first")


@MHA
@pytest.mark.weight(2)
@pytest.mark.drawn
def test_mha_on_drawn_inputs(grading, learner, reference):
    """on inputs drawn for this grading: 1 to 8 heads, with and without bias, cross-attention, masks with empty rows"""
    drawn(grading, learner, reference, "MultiHeadAttention", 9013)


# -- blockwise_attention ---------------------------------------------------------------------------------
BLOCK = pytest.mark.cell("blockwise_attention_tests")


def causal_bool(Lq, Lk):
    """Key j is visible to query i when j <= i, counted from the start of both (F.scaled_dot_product_attention's
    is_causal)."""
    return torch.arange(Lk)[None, :] <= torch.arange(Lq)[:, None]


def online_without_rescale(q, k, v, block_size):
    """An online softmax that forgets to rescale what it has summed when the running max grows."""
    top = q.new_full((*q.shape[:-1], 1), NEG)
    total, acc = q.new_zeros((*q.shape[:-1], 1)), q.new_zeros((*q.shape[:-1], v.shape[-1]))
    for s0 in range(0, k.shape[-2], block_size):
        s = q @ k[..., s0:s0 + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        top = torch.maximum(top, s.amax(-1, keepdim=True))
        p = torch.exp(s - top)
        total, acc = total + p.sum(-1, keepdim=True), acc + p @ v[..., s0:s0 + block_size, :]
    return acc / total


def check_blockwise(learner, q, k, v, causal, block_size, what, atol=None):
    Lq, Lk = q.shape[-2], k.shape[-2]
    mask = causal_bool(Lq, Lk) if causal else None
    out = learner.fn("blockwise_attention")(q, k, v, causal=causal, block_size=block_size)
    close(out, plain_attention(q.double(), k.double(), v.double(), mask)[0], what,
          baseline=plain_attention(q, k, v, mask)[0], dtype=q.dtype, atol=atol)


@BLOCK
@pytest.mark.weight(2)
def test_blockwise_values(grading, learner):
    """equals softmax attention with Lk = 97 (not a multiple of block_size = 32) and Lq = 50"""
    q, k, v = (grading.randn(2, 3, 50, 16, seed=50), grading.randn(2, 3, 97, 16, seed=51),
               grading.randn(2, 3, 97, 12, seed=52))
    k[..., 90:, :] *= 3.0                                     # the last keys raise the running max
    check_blockwise(learner, q, k, v, False, 32, "blockwise_attention(q, k, v, block_size=32), Lq = 50, Lk = 97")


@BLOCK
def test_blockwise_causal(grading, learner):
    """causal=True equals F.scaled_dot_product_attention(is_causal=True), Lq = Lk = 97"""
    q, k, v = grading.randn(2, 97, 8, seed=53), grading.randn(2, 97, 8, seed=54), grading.randn(2, 97, 8, seed=55)
    check_blockwise(learner, q, k, v, True, 16, "blockwise_attention(q, k, v, causal=True, block_size=16)")


@BLOCK
def test_blockwise_causal_rectangular(grading, learner):
    """causal=True with Lq != Lk: key j is visible to query i iff j <= i"""
    for Lq, Lk in ((40, 97), (97, 40)):
        q, k, v = grading.randn(2, Lq, 8, seed=56), grading.randn(2, Lk, 8, seed=57), grading.randn(2, Lk, 8, seed=58)
        check_blockwise(learner, q, k, v, True, 16, f"blockwise_attention(causal=True) with Lq = {Lq}, Lk = {Lk}")


@BLOCK
def test_blockwise_large_scores(grading, learner):
    """scores around 1e4 do not overflow, and rows whose every score is far below 0 do not underflow"""
    q, k, v = large_scores(grading, 20, 45, seed=59)
    check_blockwise(learner, q, k, v, False, 8, "blockwise_attention(block_size=8) for scores around 1e4",
                    atol=large_scores_atol(q, k, v))
    k = grading.randn(2, 45, 16, seed=60, scale=0.1) + 1.0
    q = grading.randn(2, 20, 16, seed=61, scale=5.0) - 100.0                  # every score about -1,600
    check_blockwise(learner, q, k, v, False, 8, "blockwise_attention(block_size=8) for scores all around -1600",
                    atol=large_scores_atol(q, k, v))


@BLOCK
def test_blockwise_block_sizes(grading, learner):
    """block_size = 1, = Lk and > Lk, in float64"""
    q, k, v = (grading.randn(3, n, 6, seed=62 + i, dtype=torch.float64) for i, n in enumerate((11, 23, 23)))
    for bs in (1, 23, 64):
        for causal in (False, True):
            check_blockwise(learner, q, k, v, causal, bs,
                            f"blockwise_attention(q, k, v, causal={causal}, block_size={bs}) in float64")


@BLOCK
def test_blockwise_long(grading, learner):
    """a 4096 x 4096 problem (float32, block_size = 64) runs and is right"""
    q, k, v = grading.randn(4096, 32, seed=65), grading.randn(4096, 32, seed=66), grading.randn(4096, 32, seed=67)
    check_blockwise(learner, q, k, v, True, 64, "blockwise_attention for Lq = Lk = 4096, causal=True")


@BLOCK
def test_blockwise_leaves_inputs(grading, learner):
    """does not modify q, k or v"""
    args = [grading.randn(2, 9, 8, seed=68), grading.randn(2, 13, 8, seed=69), grading.randn(2, 13, 8, seed=70)]
    leaves_inputs(learner.twice("blockwise_attention", *args, causal=True, block_size=4), args, "blockwise_attention",
                  names=["q", "k", "v"])


@BLOCK
@given(Lq=st.integers(1, 30), Lk=st.integers(1, 30), bs=st.integers(1, 12), causal=st.booleans(),
       seed=st.integers(0, 10_000))
def test_blockwise_any_sizes(grading, learner, Lq, Lk, bs, causal, seed):
    """any Lq, Lk and block_size give softmax attention"""
    q, k, v = (grading.randn(2, n, 5, seed=seed + i, dtype=torch.float64) for i, n in enumerate((Lq, Lk, Lk)))
    check_blockwise(learner, q, k, v, causal, bs,
                    f"blockwise_attention(q, k, v, causal={causal}, block_size={bs}) with Lq = {Lq}, Lk = {Lk}")


@BLOCK
@pytest.mark.weight(2)
@pytest.mark.drawn
def test_blockwise_on_drawn_inputs(grading, learner, reference):
    """on inputs drawn for this grading: any shapes and block sizes, causal or not, float32 or float64, huge scores"""
    drawn(grading, learner, reference, "blockwise_attention", 9014)


# -- speed and memory (autograder.verdict.timing: a clock and a memory measure the learner cannot touch) -------
# The speed check's inputs, two of them, each timed as its own check. A long sequence, where a loop over query
# positions costs most against whole-tensor operations (16-44x), and so do scores made by products broadcast over the
# head and summed (d times the work of a matrix product: 13-15x; at 128 positions the timed run's fixed costs hid them,
# at 2-5x in a grading's warm worker).
SDPA_SPEED_SHAPE, SDPA_SPEED_CALLS = [1, 2, 256, 32], 8
# Many short heads, where a loop over batch and heads makes one small product each (7-10x; 1.2x on the long sequence,
# 4-5x at heads of 32 positions). Every known correct answer, 16 of them (torch.where masks, float64 blocks, einsum,
# bmm over flattened heads, logsumexp, a self-check and a plot in the cell), measured at most 2.2x on either input in
# a warmed-up worker, quiet or beside two CPU hogs (bench/sdpa_speed_inputs.py, bench/results/sdpa-speed-inputs.md).
SDPA_HEADS_SPEED_SHAPE, SDPA_HEADS_SPEED_CALLS = [8, 8, 16, 16], 32
SDPA_GPU_SPEED_SHAPE, SDPA_GPU_SPEED_CALLS = [8, 16, 1024, 64], 5


@SDPA
@pytest.mark.measured
def test_sdpa_speed(learner, reference_worker):
    """runs about as fast as the reference solution (no Python loop over positions, heads or the batch)"""
    inputs = on_device([(SDPA_SPEED_SHAPE, SDPA_SPEED_CALLS), (SDPA_HEADS_SPEED_SHAPE, SDPA_HEADS_SPEED_CALLS)],
                       [(SDPA_GPU_SPEED_SHAPE, SDPA_GPU_SPEED_CALLS)])
    for shape, calls in inputs:
        fast_enough(*function_targets(learner, reference_worker(A), "scaled_dot_product_attention"),
                    [{"kind": "randn", "shape": shape}] * 3,
                    f"scaled_dot_product_attention on q, k, v of shape {tuple(shape)}", calls=calls)


# MultiHeadAttention is timed with the course's scaled_dot_product_attention (`timed_reference`: the reference goes
# the same way), whose every call goes through the grader to a worker of course code; the clock is the CPU time of
# each side's own worker, so the course's share is not in it and the learner's own computation is what is timed: a
# loop over heads makes one call per head, a loop over query positions, through the course's attention or written
# out in MultiHeadAttention itself, costs what it costs.
MHA_SPEED_SHAPE, MHA_SPEED_CALLS = [2, 128, 64], 8
# ... and its calls of the course's scaled_dot_product_attention, counted by the grader as it serves them: every head
# at once is one call, whatever the number of heads (a loop over heads or sequences is one call each, whose time is
# the course worker's, not on the learner's clock)
MHA_HEADS_COUNTED = 8


@MHA
@pytest.mark.measured
def test_mha_speed(learner, timed_reference):
    """runs about as fast as the reference solution (all heads at once)"""
    counted = learner.new("MultiHeadAttention", 64, MHA_HEADS_COUNTED)
    x = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(fresh_seed()))
    n = course_calls(learner, "scaled_dot_product_attention", lambda: counted(x))
    check(n <= 1, f"MultiHeadAttention(64, {MHA_HEADS_COUNTED}) called scaled_dot_product_attention {n} times in one "
                  "forward pass on a batch of 2, where the reference solution calls it once: run it on every head "
                  "at once (q of shape (B, n_heads, L, d_head)), not once per head or per sequence")
    mine, ref = module_targets(learner, timed_reference, "MultiHeadAttention", 64, 4)
    fast_enough(mine, ref, [{"kind": "randn", "shape": MHA_SPEED_SHAPE}], "MultiHeadAttention", calls=MHA_SPEED_CALLS)


BLOCKWISE_SPEED_SHAPE, BLOCKWISE_SPEED_CALLS = [1, 2, 512, 16], 10
BLOCKWISE_GPU_SPEED_SHAPE, BLOCKWISE_GPU_SPEED_CALLS = [2, 8, 2048, 64], 3


@BLOCK
@pytest.mark.measured
def test_blockwise_speed(learner, reference_worker):
    """runs about as fast as the reference solution (a loop over key blocks, not over positions)"""
    shape, calls = on_device((BLOCKWISE_SPEED_SHAPE, BLOCKWISE_SPEED_CALLS),
                             (BLOCKWISE_GPU_SPEED_SHAPE, BLOCKWISE_GPU_SPEED_CALLS))
    fast_enough(*function_targets(learner, reference_worker(A), "blockwise_attention"),
                [{"kind": "randn", "shape": shape}] * 3, "blockwise_attention", calls=calls)


# The memory check: one call on q, k, v of MEMORY_SHAPE (B, heads, L, d) may use this share of the float32 score
# matrix. On a GPU, longer sequences and more heads: the driver counts memory in the allocator's segments, and a
# CUDA worker holds some tens of MiB more once its kernels are loaded. The share leaves room for a correct answer
# that computes its blocks in float64 (twice float32's bytes): one measured 64-70 MiB at L = 8192, over a quarter of the
# 256 MiB matrix in two of three gradings; an answer that holds the matrix, in any dtype of two bytes or more, uses at
# least half of it.
MEMORY_SHAPE, MEMORY_GPU_SHAPE, MEMORY_FRACTION = [1, 1, 8192, 16], [1, 4, 16384, 64], 0.4
MEMORY_SEQ_LEN = MEMORY_SHAPE[2]


def score_matrix_bytes(shape) -> int:
    """Bytes of the float32 Lq x Lk score matrices of q, k, v of this shape (every batch and head)."""
    B, H, L, _ = shape
    return B * H * L * L * 4


@BLOCK
@pytest.mark.weight(2)
@pytest.mark.measured
def test_blockwise_memory(learner, reference_worker):
    """extra memory O(Lq * block_size), causal or not: never the whole Lq x Lk score matrix"""
    shape = on_device(MEMORY_SHAPE, MEMORY_GPU_SHAPE)
    L = shape[2]
    matrix = score_matrix_bytes(shape)
    # a warm-up like a call at L, in half the time
    warmup = [{"kind": "randn", "shape": [*shape[:2], 256, shape[3]]}] * 3
    mine, ref = function_targets(learner, reference_worker(A), "blockwise_attention")
    for causal in (False, True):
        inputs, kwargs = [{"kind": "randn", "shape": shape}] * 3, {"block_size": 64, "causal": causal}
        seed = fresh_seed()
        extra, got = peak_memory(mine, inputs, kwargs, seed=seed, warmup=warmup)
        # what the outputs must be: on the CPU computed here (torch's attention in float64, on the inputs the
        # learner's worker made from the same seed), on a GPU the reference's run there (a GPU run sends projections)
        if on_gpu():
            want = ref.run(seed, inputs, kwargs, timeout=120.0)
        else:
            q, k, v = make_inputs(inputs, seed)
            want = [oracle_attention(q, k, v, is_causal=causal)]
        what = f"blockwise_attention at Lq = Lk = {L}, causal={causal}"
        check(same_outputs(got, want), f"{what} returns a wrong output: the memory of a wrong answer does not count")
        check(extra < matrix * MEMORY_FRACTION,
              f"{what} used {extra / 2**20:.0f} MiB of extra memory, while the whole score matrix is "
              f"{matrix / 2**20:.0f} MiB (allowed: under {MEMORY_FRACTION:g} of it; one block of keys at a time "
              "needs far less)")
