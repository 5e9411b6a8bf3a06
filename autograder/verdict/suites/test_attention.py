"""Hidden suite: attention (scaled_dot_product_attention, causal_mask, MultiHeadAttention, blockwise_attention).

Oracles: torch.nn.functional.scaled_dot_product_attention and torch.nn.MultiheadAttention in float64;
the plain float32 computation sets the tolerance (checks.close).
"""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from autograder.verdict.timing import fresh_seed, peak_memory, same_outputs

from .checks import (
    Diagnosis,
    check,
    close,
    fast_enough,
    function_targets,
    leaves_inputs,
    load_exact,
    load_state,
    module_targets,
    on_device,
    raises,
    randn,
    seeded,
    tensor,
    together,
)
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



def pair(result, what):
    check(isinstance(result, (tuple, list)) and len(result) == 2,
          f"{what} should return the pair (out, weights), but it returned {type(result).__name__}")
    return result


# -- scaled_dot_product_attention --------------------------------------------------------------------------
SDPA = pytest.mark.cell("scaled_dot_product_attention_tests")


def sdpa(learner, *args, what="scaled_dot_product_attention(q, k, v)"):
    return pair(learner.fn("scaled_dot_product_attention")(*args), what)


@SDPA
def test_sdpa_shapes(learner):
    """returns (out, weights) of shapes (..., Lq, dv) and (..., Lq, Lk) with batch and head dimensions"""
    q, k, v = randn(2, 3, 5, 8, seed=1), randn(2, 3, 7, 8, seed=2), randn(2, 3, 7, 6, seed=3)
    out, w = sdpa(learner, q, k, v,
                  what="scaled_dot_product_attention(q, k, v) with q (2, 3, 5, 8), k (2, 3, 7, 8), v (2, 3, 7, 6)")
    tensor(out, "out", shape=(2, 3, 5, 6), dtype=torch.float32)
    tensor(w, "weights", shape=(2, 3, 5, 7), dtype=torch.float32)


@SDPA
@pytest.mark.weight(2)
def test_sdpa_values(learner):
    """out and weights equal PyTorch's attention (Lq = 13, Lk = 97, d = 24, dv = 10)"""
    q, k, v = randn(2, 3, 13, 24, seed=4), randn(2, 3, 97, 24, seed=5), randn(2, 3, 97, 10, seed=6)
    out, w = sdpa(learner, q, k, v)
    d = q.shape[-1]
    mistakes = {
        "the scores are not scaled: divide q k^T by sqrt(d)": plain_attention(q, k, v, scale=1.0),
        "the scores are divided by d; divide by sqrt(d)": plain_attention(q, k, v, scale=1 / d),
        "the scale comes from the size of the values; use d = q.shape[-1], the size of queries and keys":
            plain_attention(q, k, v, scale=1 / math.sqrt(v.shape[-1])),
        "softmax over dim -2 (the queries)? Each query's weights over the keys (dim -1) must sum to 1":
            plain_attention(q, k, v, dim=-2),
    }
    close(w, plain_attention(q.double(), k.double(), v.double())[1], "weights",
          "weights = softmax(q k^T / sqrt(d)) over the keys", baseline=plain_attention(q, k, v)[1],
          dtype=torch.float32, mistakes={m: ref[1] for m, ref in mistakes.items()})
    close(out, oracle_attention(q, k, v), "out", "out = weights @ v", baseline=plain_attention(q, k, v)[0],
          dtype=torch.float32, mistakes={m: ref[0] for m, ref in mistakes.items()})


@SDPA
def test_sdpa_float64(learner):
    """float64 inputs give float64 results at float64 precision"""
    q, k, v = (randn(3, 11, 6, seed=s, dtype=torch.float64) for s in (7, 8, 9))
    out, w = sdpa(learner, q, k, v, what="scaled_dot_product_attention(q, k, v) in float64")
    close(out, oracle_attention(q, k, v), "out in float64", "compute in the dtype of q (no float32 constants "
          "or casts)", dtype=torch.float64)
    close(w, plain_attention(q, k, v)[1], "weights in float64", dtype=torch.float64)


@SDPA
@pytest.mark.weight(2)
def test_sdpa_mask(learner):
    """masks (True = may attend) broadcast from (B, 1, Lq, Lk) and (Lq, Lk); masked keys get weight 0"""
    q, k, v = randn(2, 3, 9, 8, seed=10), randn(2, 3, 17, 8, seed=11), randn(2, 3, 17, 5, seed=12)
    for mask in (random_mask(2, 1, 9, 17, seed=13), random_mask(9, 17, seed=14)):
        shape = "x".join(map(str, mask.shape))
        out, w = sdpa(learner, q, k, v, mask, what=f"scaled_dot_product_attention(q, k, v, mask) with a {shape} mask")
        tensor(w, "weights", shape=(2, 3, 9, 17))
        check(not torch.isnan(w).any(), f"weights with a {shape} mask contain NaN, though every query may attend "
                                        "to some key")
        inverted = plain_attention(q, k, v, ~mask)
        inverted_msg = "the mask is inverted: True must mean the query MAY attend to the key"
        zeroed_after = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), -1) * mask
        check((w.double().masked_fill(mask, 0) == 0).all() or torch.allclose(w, inverted[1], atol=1e-5),
              f"with a {shape} mask, masked keys must get weight exactly 0: set their scores to -inf before the "
              "softmax")
        close(w, plain_attention(q.double(), k.double(), v.double(), mask)[1], f"weights with a {shape} mask",
              "set masked scores to -inf before the softmax, so the allowed keys' weights still sum to 1",
              baseline=plain_attention(q, k, v, mask)[1], dtype=torch.float32,
              mistakes={inverted_msg: inverted[1],
                        "the weights are zeroed after the softmax, so they no longer sum to 1: mask the scores "
                        "(-inf) before the softmax": zeroed_after})
        close(out, oracle_attention(q, k, v, mask), f"out with a {shape} mask",
              baseline=plain_attention(q, k, v, mask)[0], dtype=torch.float32, mistakes={inverted_msg: inverted[0]})


@SDPA
def test_sdpa_fully_masked_rows(learner):
    """a query with no allowed key gets zero weights and zero output, not NaN"""
    q, k, v = randn(2, 6, 4, seed=15), randn(2, 5, 4, seed=16), randn(2, 5, 3, seed=17)
    mask = random_mask(2, 6, 5, seed=18)
    mask[:, 2] = False
    mask[1, 4] = False
    out, w = sdpa(learner, q, k, v, mask, what="scaled_dot_product_attention with rows of the mask all False")
    tensor(w, "weights", shape=(2, 6, 5))
    tensor(out, "out", shape=(2, 6, 3))
    empty = ~mask.any(-1)                                          # (2, 6)
    check(not torch.isnan(w[empty]).any() and not torch.isnan(out[empty]).any(),
          "rows with every key masked give NaN (softmax of all -inf is 0/0): give such a query zero weights and "
          "zero output, e.g. by replacing NaN with 0 or by setting its row's max to 0 before exp")
    check(torch.allclose(w[empty].double(), torch.zeros(1, dtype=torch.float64)),
          "a query with every key masked must get zero weights, not uniform ones (filling masked scores with a "
          "large finite number instead of -inf lets them through when nothing else is left)")
    check(torch.allclose(out[empty].double(), torch.zeros(1, dtype=torch.float64)),
          "a query with every key masked must get a zero output")
    close(out, plain_attention(q.double(), k.double(), v.double(), mask)[0], "out for the rows that have keys",
          baseline=plain_attention(q, k, v, mask)[0], dtype=torch.float32)


def large_scores(Lq: int, Lk: int, seed: int):
    """float32 q, k, v whose scores are around 1e4 (inputs numbered from `seed`)."""
    return (randn(2, Lq, 16, seed=seed, scale=100.0), randn(2, Lk, 16, seed=seed + 1, scale=100.0),
            randn(2, Lk, 4, seed=seed + 2))


def close_at_large_scores(out, q, k, v, what: str):
    """`out` is softmax attention of float32 q, k, v whose scores are around 1e4.

    A float32 score that large is only known to eps * |score| (about 1e-3), so each weight is only known to about
    that fraction and a correct answer computed in any order may err by that much times |v|: the allowed error
    includes it, besides twice the error of the plain computation (which alone failed the reference's blockwise answer
    in its worker on a few draws in a few hundred). Forgetting to rescale errs by the size of v, hundreds of times more.
    """
    scores = (q.double() @ k.double().transpose(-2, -1)).abs().max() / math.sqrt(q.shape[-1])
    atol = torch.finfo(torch.float32).eps * float(scores) * float(v.abs().max())
    close(out, oracle_attention(q, k, v), what, baseline=plain_attention(q, k, v)[0], atol=atol, dtype=torch.float32)


@SDPA
def test_sdpa_large_scores(learner):
    """scores around 1e4 do not overflow"""
    q, k, v = large_scores(7, 9, seed=19)
    out, w = sdpa(learner, q, k, v, what="scaled_dot_product_attention(q, k, v) with scores around 1e4")
    tensor(w, "weights", shape=(2, 7, 9))
    check(torch.isfinite(w).all() and torch.isfinite(out).all(),
          "scores around 1e4 give inf or NaN: exp(1e4) overflows; subtract each row's max score before exp "
          "(or use torch.softmax, which does)")
    close_at_large_scores(out, q, k, v, "out with scores around 1e4")


@SDPA
def test_sdpa_single_key(learner):
    """seq_len = 1: the only key gets weight 1"""
    q, k, v = randn(3, 1, 5, seed=22), randn(3, 1, 5, seed=23), randn(3, 1, 2, seed=24)
    out, w = sdpa(learner, q, k, v, what="scaled_dot_product_attention with Lq = Lk = 1")
    close(w, torch.ones(3, 1, 1, dtype=torch.float64), "weights with one key", dtype=torch.float32)
    close(out, v.double(), "out with one key", "with one key, out is its value", dtype=torch.float32)


@SDPA
def test_sdpa_leaves_inputs(learner):
    """does not modify q, k, v or mask"""
    q, k, v = randn(2, 4, 8, seed=25), randn(2, 6, 8, seed=26), randn(2, 6, 8, seed=27)
    mask = random_mask(4, 6, seed=28)
    leaves_inputs(learner.twice("scaled_dot_product_attention", q, k, v, mask), [q, k, v, mask],
                  "scaled_dot_product_attention")


@SDPA
@given(Lq=st.integers(1, 9), Lk=st.integers(1, 9), d=st.integers(1, 8), seed=st.integers(0, 10_000))
def test_sdpa_weights_are_distributions(learner, Lq, Lk, d, seed):
    """each query's weights are >= 0 and sum to 1 over the keys"""
    q, k, v = (randn(2, Lq, d, seed=seed, scale=2.0), randn(2, Lk, d, seed=seed + 1, scale=2.0),
               randn(2, Lk, 3, seed=seed + 2))
    mask = random_mask(2, Lq, Lk, seed=seed + 3)
    _, w = sdpa(learner, q, k, v, mask, what=f"scaled_dot_product_attention with Lq = {Lq}, Lk = {Lk}")
    w = tensor(w, "weights", shape=(2, Lq, Lk)).double()
    check((w >= 0).all(), "weights must be >= 0: they come out of a softmax")
    sums = w.sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-5) and Lq > 1 and torch.allclose(
            w.sum(-2), torch.ones_like(w.sum(-2)), atol=1e-5):
        raise Diagnosis("the weights sum to 1 along the query axis: softmax over dim -2? Each query's weights over "
                        "the keys (dim -1) must sum to 1")
    check(torch.allclose(sums, torch.ones_like(sums), atol=1e-5),
          f"each query's weights over its allowed keys must sum to 1 (Lq = {Lq}, Lk = {Lk}, with a mask)")


@SDPA
@given(Lq=st.integers(1, 8), Lk=st.integers(2, 8), seed=st.integers(0, 10_000))
def test_sdpa_permutation(learner, Lq, Lk, seed):
    """permuting keys and values together changes nothing; permuting queries permutes the output"""
    q, k, v = (randn(2, n, 4, seed=seed + i, dtype=torch.float64) for i, n in enumerate((Lq, Lk, Lk)))
    pk, pq = torch.randperm(Lk, generator=seeded(seed)), torch.randperm(Lq, generator=seeded(seed + 9))
    out = tensor(sdpa(learner, q, k, v)[0], "out", shape=(2, Lq, 4))
    out_k = tensor(sdpa(learner, q, k[:, pk], v[:, pk])[0], "out", shape=(2, Lq, 4))
    out_q = tensor(sdpa(learner, q[:, pq], k, v)[0], "out", shape=(2, Lq, 4))
    check(torch.allclose(out_k, out, atol=1e-9),
          "permuting the keys and values together changed the output: attention treats the keys as a set, "
          "each key paired with the value at the same index")
    check(torch.allclose(out_q, out[:, pq], atol=1e-9),
          "permuting the queries did not permute the output rows the same way: query i's output depends only on q[i]")


# -- causal_mask -----------------------------------------------------------------------------------------
CAUSAL = pytest.mark.cell("causal_mask_tests")


@CAUSAL
def test_causal_dtype_shape(learner):
    """a bool tensor of shape (seq_len, seq_len)"""
    m = learner.fn("causal_mask")(6)
    tensor(m, "causal_mask(6)", shape=(6, 6))
    check(m.dtype == torch.bool, f"causal_mask(6) has dtype {m.dtype}: the mask is bool (True = may attend), "
                                 "not 0/1 numbers or an additive -inf/0 mask")


@CAUSAL
@pytest.mark.weight(2)
def test_causal_values(learner):
    """True exactly where key j <= query i"""
    for L in (5, 97):
        m = tensor(learner.fn("causal_mask")(L), f"causal_mask({L})", shape=(L, L))
        expected = torch.ones(L, L, dtype=torch.bool).tril()
        if torch.equal(m.bool(), expected.tril(-1)):
            raise Diagnosis("the diagonal must be True: a position may attend to itself (key j <= query i)")
        if torch.equal(m.bool(), expected.T) or torch.equal(m.bool(), expected.T.triu(1)):
            raise Diagnosis("the mask is the upper triangle: mask[i, j] (query i, key j) is True where j <= i, "
                            "the lower triangle, diagonal included")
        if torch.equal(m.bool(), ~expected):
            raise Diagnosis("the mask is inverted: True must mean may attend (key j <= query i)")
        check(torch.equal(m.bool(), expected), f"causal_mask({L}) must be True exactly where key j <= query i")


@CAUSAL
def test_causal_single(learner):
    """seq_len = 1 gives [[True]]"""
    m = tensor(learner.fn("causal_mask")(1), "causal_mask(1)", shape=(1, 1))
    check(bool(m.bool().all()), "causal_mask(1) must be [[True]]: the only position may attend to itself")


@CAUSAL
def test_causal_device(learner):
    """accepts device, by keyword or position"""
    for call, what in ((lambda: learner.fn("causal_mask")(4, device="cpu"), 'causal_mask(4, device="cpu")'),
                       (lambda: learner.fn("causal_mask")(4, "cpu"), 'causal_mask(4, "cpu")')):
        tensor(call(), what, shape=(4, 4))


# -- MultiHeadAttention ----------------------------------------------------------------------------------------
MHA = pytest.mark.cell("MultiHeadAttention_tests")


def course_parts(cell, learner):
    """MultiHeadAttention is graded with the course's scaled_dot_product_attention (and once with the learner's)."""
    return ["scaled_dot_product_attention"] if cell == "MultiHeadAttention_tests" else []
PROJ = ("q_proj", "k_proj", "v_proj", "out_proj")


def mha(learner, d_model, n_heads, bias=True, seed=0):
    """The learner's MultiHeadAttention holding random weights; returns (proxy, state)."""
    proxy = learner.new("MultiHeadAttention", d_model, n_heads, bias=bias)
    state = random_mha_state(d_model, bias=bias, seed=seed)
    load_state(proxy, state, "MultiHeadAttention")
    return proxy, state


@MHA
def test_mha_structure(learner):
    """q_proj, k_proj, v_proj, out_proj are nn.Linear(d_model, d_model), with bias only when bias=True"""
    x = randn(2, 5, 48, seed=29)
    for bias in (True, False):
        proxy = learner.new("MultiHeadAttention", 48, 6, bias=bias)
        state = random_mha_state(48, bias=bias, seed=7 + bias)
        load_exact(proxy, state, f"MultiHeadAttention(48, 6, bias={bias})")
        close(proxy(x), oracle_mha(state, 6, x, bias=bias), f"MultiHeadAttention(48, 6, bias={bias})(x)",
              "each projection is x @ weight.T + bias, an nn.Linear(d_model, d_model): all heads share one projection",
              baseline=plain_mha(state, 6, x), dtype=torch.float32)


@MHA
def test_mha_value_error(learner):
    """raises ValueError when n_heads does not divide d_model"""
    raises(lambda: learner.new("MultiHeadAttention", 50, 6), "ValueError",
           "MultiHeadAttention(50, 6) must raise ValueError: 6 heads do not divide d_model = 50")


def mha_mistakes(state, H, *args, **kw):
    return {
        "heads mixed: reshape the projections to (B, L, n_heads, d_head), then transpose to (B, n_heads, L, d_head)":
            plain_mha(state, H, *args, split="mixed", merge="mixed", **kw),
        "heads mixed when they are put back: transpose (B, n_heads, Lq, d_head) to (B, Lq, n_heads, d_head) "
        "before reshaping to (B, Lq, d_model)": plain_mha(state, H, *args, merge="mixed", **kw),
        "the scores are scaled by 1/sqrt(d_model); each head scales by 1/sqrt(d_head)":
            plain_mha(state, H, *args, scale_by="d_model", **kw),
        "out_proj is not applied to the heads put side by side": plain_mha(state, H, *args, out_proj=False, **kw),
        "the input is not split into n_heads heads": plain_mha(state, 1, *args, scale_by="d_model", **kw),
    }


@MHA
@pytest.mark.weight(2)
def test_mha_self_attention(learner):
    """self-attention equals torch.nn.MultiheadAttention (B = 3, L = 11, d_model = 48, 6 heads)"""
    proxy, state = mha(learner, 48, 6, seed=1)
    x = randn(3, 11, 48, seed=30)
    close(proxy(x), oracle_mha(state, 6, x), "MultiHeadAttention(48, 6)(x)",
          "compare with torch.nn.MultiheadAttention: project, split into heads, attend, put the heads side by side, "
          "out_proj", baseline=plain_mha(state, 6, x), dtype=torch.float32, mistakes=mha_mistakes(state, 6, x))


@MHA
def test_mha_cross_attention(learner):
    """cross-attention with Lq != Lk, and value defaulting to key"""
    proxy, state = mha(learner, 36, 4, seed=2)
    query, key, value = randn(2, 5, 36, seed=31), randn(2, 9, 36, seed=32), randn(2, 9, 36, seed=33)
    close(proxy(query, key, value), oracle_mha(state, 4, query, key, value),
          "MultiHeadAttention(36, 4)(query, key, value)",
          "queries come from `query`, keys from `key`, values from `value`",
          baseline=plain_mha(state, 4, query, key, value),
          dtype=torch.float32, mistakes={
              **mha_mistakes(state, 4, query, key, value),
              "keys and values are projected from `query`; use `key` and `value` when they are given":
                  plain_mha(state, 4, query)})
    close(proxy(query, key), oracle_mha(state, 4, query, key, key), "MultiHeadAttention(36, 4)(query, key)",
          "when value is None, value = key", baseline=plain_mha(state, 4, query, key, key), dtype=torch.float32)


@MHA
def test_mha_mask(learner):
    """masks broadcast from (Lq, Lk) and (B, 1, Lq, Lk), True = may attend"""
    proxy, state = mha(learner, 24, 6, seed=3)
    query, key = randn(2, 7, 24, seed=34), randn(2, 10, 24, seed=35)
    for mask in (random_mask(7, 10, seed=36), random_mask(2, 1, 7, 10, seed=37)):
        shape = "x".join(map(str, mask.shape))
        close(proxy(query, key, mask=mask), oracle_mha(state, 6, query, key, mask=mask),
              f"MultiHeadAttention with a {shape} mask", "pass the mask to every head's attention",
              baseline=plain_mha(state, 6, query, key, mask=mask), dtype=torch.float32,
              mistakes={"the mask is inverted: True must mean may attend": plain_mha(state, 6, query, key, mask=~mask),
                        "the mask is ignored: pass it to scaled_dot_product_attention":
                            plain_mha(state, 6, query, key)})


@MHA
def test_mha_no_bias(learner):
    """bias=False matches torch.nn.MultiheadAttention(bias=False)"""
    proxy, state = mha(learner, 30, 3, bias=False, seed=4)
    x = randn(2, 8, 30, seed=38)
    close(proxy(x), oracle_mha(state, 3, x, bias=False), "MultiHeadAttention(30, 3, bias=False)(x)",
          baseline=plain_mha(state, 3, x), dtype=torch.float32, mistakes=mha_mistakes(state, 3, x))


@MHA
def test_mha_single_position(learner):
    """seq_len = 1 works"""
    proxy, state = mha(learner, 16, 4, seed=5)
    x = randn(3, 1, 16, seed=39)
    close(proxy(x), oracle_mha(state, 4, x), "MultiHeadAttention(16, 4)(x) for one position",
          baseline=plain_mha(state, 4, x), dtype=torch.float32)


@MHA
def test_mha_leaves_inputs(learner):
    """does not modify query, key, value or mask"""
    proxy, _ = mha(learner, 16, 2, seed=6)
    args = [randn(2, 4, 16, seed=40), randn(2, 5, 16, seed=41), randn(2, 5, 16, seed=42)]
    mask = random_mask(4, 5, seed=43)
    leaves_inputs(proxy.twice(*args, mask=mask), args, "MultiHeadAttention.forward")


@MHA
@given(L=st.integers(2, 9), seed=st.integers(0, 10_000))
def test_mha_permutation_equivariant(learner, L, seed):
    """without a mask, permuting the positions permutes the output the same way"""
    proxy = learner.new("MultiHeadAttention", 12, 3)
    x = randn(2, L, 12, seed=seed)
    perm = torch.randperm(L, generator=seeded(seed))
    out, out_p = proxy(x), proxy(x[:, perm].contiguous())
    tensor(out, "MultiHeadAttention(12, 3)(x)", shape=(2, L, 12))
    check(torch.allclose(out_p, out[:, perm], atol=1e-5),
          "permuting the positions of x did not permute the output the same way: without positions or a mask, "
          "attention must not depend on the order (is a sequence dimension mixed with the heads or the batch?)")


@MHA
@pytest.mark.together
def test_mha_with_your_attention(learner, course):
    """with your own scaled_dot_product_attention, it still equals torch.nn.MultiheadAttention"""
    proxy, state = mha(learner, 32, 4, seed=8)
    x, key = randn(2, 6, 32, seed=44), randn(2, 9, 32, seed=45)
    mask = random_mask(6, 9, seed=46)
    together(learner, course(A), ["scaled_dot_product_attention"],
             lambda: close(proxy(x, key, mask=mask), oracle_mha(state, 4, x, key, mask=mask),
                           "MultiHeadAttention(32, 4)(query, key, mask)",
                           baseline=plain_mha(state, 4, x, key, mask=mask),
                           dtype=torch.float32),
             "MultiHeadAttention", "fix part 1 (scaled_dot_product_attention) first")


# -- blockwise_attention ---------------------------------------------------------------------------------
BLOCK = pytest.mark.cell("blockwise_attention_tests")


def causal_bool(Lq, Lk, bottom_right=False, strict=False):
    i, j = torch.arange(Lq)[:, None], torch.arange(Lk)[None, :]
    j = j - (Lk - Lq) if bottom_right else j
    return j < i if strict else j <= i


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


def blockwise_mistakes(q, k, v, block_size, causal=False):
    Lq, Lk = q.shape[-2], k.shape[-2]
    full = (Lk // block_size) * block_size
    wrong = {}
    if causal:
        wrong["causal=True is ignored"] = plain_attention(q, k, v)[0]
        wrong["with causal=True, query i sees key j when j <= i: the diagonal must be visible"] = \
            plain_attention(q, k, v, causal_bool(Lq, Lk, strict=True))[0]
        if Lq != Lk:
            wrong["with causal=True, key j is visible to query i when j <= i, counted from the start of both "
                  "(as F.scaled_dot_product_attention(is_causal=True)), not aligned at the end"] = \
                plain_attention(q, k, v, causal_bool(Lq, Lk, bottom_right=True))[0]
    elif full not in (0, Lk):
        wrong["the last, shorter block of keys is dropped: Lk need not be a multiple of block_size"] = \
            plain_attention(q, k[..., :full, :], v[..., :full, :])[0]
    if not causal:
        wrong["when a block raises the running max from m to m', multiply the running sum and output by "
              "exp(m - m') before adding the block's terms"] = online_without_rescale(q, k, v, block_size)
    return wrong


def check_blockwise(learner, q, k, v, causal, block_size, what, mistakes=True):
    Lq, Lk = q.shape[-2], k.shape[-2]
    out = learner.fn("blockwise_attention")(q, k, v, causal=causal, block_size=block_size)
    mask = causal_bool(Lq, Lk) if causal else None
    close(out, oracle_attention(q, k, v, is_causal=causal), what,
          "online softmax: keep the running max m, sum l and output a; rescale l and a by exp(m - m') when the max "
          "grows; return a / l", baseline=plain_attention(q, k, v, mask)[0], dtype=q.dtype,
          mistakes=blockwise_mistakes(q, k, v, block_size, causal) if mistakes else None)


@BLOCK
@pytest.mark.weight(2)
def test_blockwise_values(learner):
    """equals softmax attention with Lk = 97 (not a multiple of block_size = 32) and Lq = 50"""
    q, k, v = randn(2, 3, 50, 16, seed=50), randn(2, 3, 97, 16, seed=51), randn(2, 3, 97, 12, seed=52)
    k[..., 90:, :] *= 3.0                                     # the last keys raise the running max
    check_blockwise(learner, q, k, v, False, 32, "blockwise_attention(q, k, v, block_size=32), Lq = 50, Lk = 97")


@BLOCK
def test_blockwise_causal(learner):
    """causal=True equals F.scaled_dot_product_attention(is_causal=True), Lq = Lk = 97"""
    q, k, v = randn(2, 97, 8, seed=53), randn(2, 97, 8, seed=54), randn(2, 97, 8, seed=55)
    check_blockwise(learner, q, k, v, True, 16, "blockwise_attention(q, k, v, causal=True, block_size=16)")


@BLOCK
def test_blockwise_causal_rectangular(learner):
    """causal=True with Lq != Lk: key j is visible to query i iff j <= i"""
    for Lq, Lk in ((40, 97), (97, 40)):
        q, k, v = randn(2, Lq, 8, seed=56), randn(2, Lk, 8, seed=57), randn(2, Lk, 8, seed=58)
        check_blockwise(learner, q, k, v, True, 16, f"blockwise_attention(causal=True) with Lq = {Lq}, Lk = {Lk}")


@BLOCK
def test_blockwise_large_scores(learner):
    """scores around 1e4 do not overflow"""
    q, k, v = large_scores(20, 45, seed=59)
    out = learner.fn("blockwise_attention")(q, k, v, block_size=8)
    tensor(out, "blockwise_attention with scores around 1e4", shape=(2, 20, 4))
    check(torch.isfinite(out).all(), "scores around 1e4 give inf or NaN: exponentiate each score minus the running "
                                     "max, never a raw score")
    close_at_large_scores(out, q, k, v, "blockwise_attention with scores around 1e4")


@BLOCK
def test_blockwise_block_sizes(learner):
    """block_size = 1, = Lk and > Lk, in float64"""
    q, k, v = (randn(3, n, 6, seed=62 + i, dtype=torch.float64) for i, n in enumerate((11, 23, 23)))
    for bs in (1, 23, 64):
        for causal in (False, True):
            check_blockwise(learner, q, k, v, causal, bs,
                            f"blockwise_attention(q, k, v, causal={causal}, block_size={bs}) in float64")


@BLOCK
def test_blockwise_long(learner):
    """a 4096 x 4096 problem (float32, block_size = 64) runs and is right"""
    q, k, v = randn(4096, 32, seed=65), randn(4096, 32, seed=66), randn(4096, 32, seed=67)
    check_blockwise(learner, q, k, v, True, 64, "blockwise_attention for Lq = Lk = 4096, causal=True", mistakes=False)


@BLOCK
def test_blockwise_leaves_inputs(learner):
    """does not modify q, k or v"""
    args = [randn(2, 9, 8, seed=68), randn(2, 13, 8, seed=69), randn(2, 13, 8, seed=70)]
    leaves_inputs(learner.twice("blockwise_attention", *args, causal=True, block_size=4), args, "blockwise_attention")


@BLOCK
@given(Lq=st.integers(1, 30), Lk=st.integers(1, 30), bs=st.integers(1, 12), causal=st.booleans(),
       seed=st.integers(0, 10_000))
def test_blockwise_any_sizes(learner, Lq, Lk, bs, causal, seed):
    """any Lq, Lk and block_size give softmax attention"""
    q, k, v = (randn(2, n, 5, seed=seed + i, dtype=torch.float64) for i, n in enumerate((Lq, Lk, Lk)))
    check_blockwise(learner, q, k, v, causal, bs,
                    f"blockwise_attention(q, k, v, causal={causal}, block_size={bs}) with Lq = {Lq}, Lk = {Lk}")



# -- speed and memory (autograder.verdict.timing: a clock and a memory measure the learner cannot touch) -------
# The speed check's input: short sequences, where a loop over query positions costs most against whole-tensor
# operations (about 10x the reference under load) and a correct answer with more passes than the reference
# (torch.where masks) about 1.5x; at 256 positions memory traffic brought that one to 3x under load.
SDPA_SPEED_SHAPE, SDPA_SPEED_CALLS = [1, 2, 64, 16], 40
# On a GPU: a batch large enough that the time is the GPU's work, not its kernel launches (a 512 MiB score matrix).
SDPA_GPU_SPEED_SHAPE, SDPA_GPU_SPEED_CALLS = [8, 16, 1024, 64], 5


@SDPA
def test_sdpa_speed(learner, reference_worker):
    """runs about as fast as the reference solution (no Python loop over positions)"""
    shape, calls = on_device((SDPA_SPEED_SHAPE, SDPA_SPEED_CALLS), (SDPA_GPU_SPEED_SHAPE, SDPA_GPU_SPEED_CALLS))
    fast_enough(*function_targets(learner, reference_worker(A), "scaled_dot_product_attention"),
                [{"kind": "randn", "shape": shape}] * 3, "scaled_dot_product_attention", calls=calls)


# MultiHeadAttention is timed with the course's scaled_dot_product_attention (`timed_reference`: the reference goes
# the same way), whose every call goes through the grader to a worker of course code; the clock is the CPU time of
# each side's own worker, so the course's share is not in it and the learner's own computation is what is timed: a
# loop over heads makes one call per head, a loop over query positions, through the course's attention or written
# out in MultiHeadAttention itself, costs what it costs.
MHA_SPEED_SHAPE, MHA_SPEED_CALLS = [2, 128, 64], 8


@MHA
def test_mha_speed(learner, timed_reference):
    """runs about as fast as the reference solution (all heads at once)"""
    mine, ref = module_targets(learner, timed_reference, "MultiHeadAttention", 64, 4)
    fast_enough(mine, ref, [{"kind": "randn", "shape": MHA_SPEED_SHAPE}], "MultiHeadAttention", calls=MHA_SPEED_CALLS)


BLOCKWISE_SPEED_SHAPE, BLOCKWISE_SPEED_CALLS = [1, 2, 512, 16], 10
BLOCKWISE_GPU_SPEED_SHAPE, BLOCKWISE_GPU_SPEED_CALLS = [2, 8, 2048, 64], 3


@BLOCK
def test_blockwise_speed(learner, reference_worker):
    """runs about as fast as the reference solution (a loop over key blocks, not over positions)"""
    shape, calls = on_device((BLOCKWISE_SPEED_SHAPE, BLOCKWISE_SPEED_CALLS),
                             (BLOCKWISE_GPU_SPEED_SHAPE, BLOCKWISE_GPU_SPEED_CALLS))
    fast_enough(*function_targets(learner, reference_worker(A), "blockwise_attention"),
                [{"kind": "randn", "shape": shape}] * 3, "blockwise_attention", calls=calls)


# The memory check: one call on q, k, v of MEMORY_SHAPE (B, heads, L, d) may use this share of the float32 score
# matrix. On a GPU, longer sequences and more heads: the driver counts memory in the allocator's segments, and a
# CUDA worker holds some tens of MiB more once its kernels are loaded.
MEMORY_SHAPE, MEMORY_GPU_SHAPE, MEMORY_FRACTION = [1, 1, 8192, 16], [1, 4, 16384, 64], 0.25
MEMORY_SEQ_LEN = MEMORY_SHAPE[2]


def score_matrix_bytes(shape) -> int:
    """Bytes of the float32 Lq x Lk score matrices of q, k, v of this shape (every batch and head)."""
    B, H, L, _ = shape
    return B * H * L * L * 4


@BLOCK
@pytest.mark.weight(2)
def test_blockwise_memory(learner, reference_worker):
    """extra memory O(Lq * block_size): never the whole Lq x Lk score matrix"""
    shape = on_device(MEMORY_SHAPE, MEMORY_GPU_SHAPE)
    L = shape[2]
    inputs, kwargs = [{"kind": "randn", "shape": shape}] * 3, {"block_size": 64}
    # a warm-up like a call at L, in half the time
    warmup = [{"kind": "randn", "shape": [*shape[:2], 256, shape[3]]}] * 3
    mine, ref = function_targets(learner, reference_worker(A), "blockwise_attention")
    seed = fresh_seed()
    extra, got = peak_memory(mine, inputs, kwargs, seed=seed, warmup=warmup)
    want = ref.run(seed, inputs, kwargs, timeout=120.0)            # the reference's outputs only
    check(same_outputs(got, want), f"blockwise_attention at Lq = Lk = {L} returns a wrong output: the memory "
                                     "of a wrong answer does not count")
    matrix = score_matrix_bytes(shape)
    check(extra < matrix * MEMORY_FRACTION,
          f"blockwise_attention at Lq = Lk = {L} used {extra / 2**20:.0f} MiB of extra memory, while the whole "
          f"score matrix is {matrix / 2**20:.0f} MiB: process one block of keys at a time and never build an "
          "Lq x Lk matrix")
