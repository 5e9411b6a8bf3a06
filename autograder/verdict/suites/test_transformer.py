"""Hidden suite: transformer (TinyTransformer).

The model is checked by what it computes, never by what its process says it is: loaded with the
course model's weights (mapped onto its parameters through the contract's names) it must give the
course model's logits; changing a later token never changes earlier logits; the order of tokens
matters; and a short training run in the worker on a task drawn for this grading (its offset and
its sequences), scored here on held-out data made here, must learn it from an accuracy near chance.
"""
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from autograder import config
from autograder.verdict.learner import LearnerError

from . import judge
from .checks import (
    DRAWING_PRELOAD,
    Diagnosis,
    check,
    close,
    draw_structure,
    fast_enough,
    leaves_inputs,
    load_exact,
    seeded,
    tensor,
    together,
)

A = "transformer"
WORKER_PRELOAD = DRAWING_PRELOAD      # test_tiny_drawn traces the learner's model in its worker

TINY = pytest.mark.cell("TinyTransformer_tests")

# The training task: repeat the token K places back.  The notebook's own example uses K = 3; the hidden
# test draws K for each grading from OFFSETS, with new sequences.
V, T = 10, 16
OFFSETS = (2, 4, 5, 6)
D_MODEL, N_HEADS, D_FF, N_LAYERS = 32, 4, 64, 2
STEPS, BATCH, LR, ACCURACY = 400, 32, 3e-3, 0.9
BEFORE = 0.3          # accuracy an untrained model stays below (chance is 1 / V)

# A small model for the other checks (vocab_size, d_model and max_len all differ: weights map by shape).
SMALL = dict(vocab_size=23, d_model=24, n_heads=3, d_ff=40, n_layers=2, max_len=32)
_MODELS: dict = {}


# -- the parts pasted from the earlier exercises --------------------------------------------------------
PASTED = ("sinusoidal_encoding", "causal_mask", "scaled_dot_product_attention", "MultiHeadAttention", "LayerNorm",
          "FeedForward", "TransformerBlock")
TINY_SPEED = dict(vocab_size=16, d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=64)


def wrong_parts(learner, course) -> list[str]:
    """The pasted parts that are missing or give wrong results on their own, at sizes drawn for this grading (no
    learner can know them): those are replaced by the course's. A part right there is used as it is everywhere,
    the speed test included, whose outputs are compared: a part wrong only at the speed test's size fails it."""
    return judge.wrong(learner, PASTED, course=course)


_COURSE: list = []


def course_parts(cell, learner):
    """TinyTransformer is graded with the course's versions of the pasted parts that are missing or wrong (and once
    with the learner's own)."""
    from types import SimpleNamespace

    from autograder.notebooks import reference_namespace

    if not _COURSE:
        _COURSE.append(SimpleNamespace(**reference_namespace(A)))
    return wrong_parts(learner, _COURSE[0]) if cell == "TinyTransformer_tests" else []


def task_offset() -> int:
    return OFFSETS[int(torch.randint(len(OFFSETS), (1,), generator=seeded(900)))]


def small_model(learner, norm_first=True):
    """The learner's TinyTransformer with the SMALL sizes (made once per suite run)."""
    key = (id(learner), norm_first)
    if key not in _MODELS:
        learner.seed(0)
        _MODELS[key] = new_model(learner, *SMALL.values(), norm_first=norm_first)
    return _MODELS[key]


def new_model(learner, *args, **kwargs):
    try:
        return learner.new("TinyTransformer", *args, **kwargs)
    except LearnerError as e:
        if e.isa("NameError"):
            raise Diagnosis(f"your code raised {e}: paste your answers to the earlier exercises into the cells under "
                            "'Your parts', and run them") from None
        raise


def tokens(B, L, seed, low=0):
    return torch.randint(low, SMALL["vocab_size"], (B, L), generator=seeded(seed))


def logits_of(model, x, what):
    B, L = x.shape
    out = model(x)
    if isinstance(out, torch.Tensor) and L != SMALL["vocab_size"] and tuple(out.shape) == (B, SMALL["vocab_size"], L):
        raise Diagnosis(f"{what} has shape (B, vocab_size, T); return (B, T, vocab_size): the head is applied at "
                        "every position")
    return tensor(out, what, shape=(B, L, SMALL["vocab_size"]), dtype=torch.float32)


def copy_task(n, k, seed):
    """Random sequences; the target at position t >= k is the token at t - k (ignored before)."""
    x = torch.randint(0, V, (n, T), generator=seeded(seed))
    y = torch.full_like(x, -100)
    y[:, k:] = x[:, :-k]
    return x, y


# -- the course's weights in the learner's model ------------------------------------------------------
BLOCK_PARAM = re.compile(r"^(?P<prefix>.+)\.(?P<i>\d+)\.(?P<rest>(attn\.(q|k|v|out)_proj|ff\.linear[12]|norm[12])"
                         r"\.(weight|bias))$")
BLOCK_NAMES = {f"{m}.{p}" for m in ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj", "ff.linear1",
                                    "ff.linear2", "norm1", "norm2") for p in ("weight", "bias")}


def contract_names(mine: dict, vocab: int, d: int, n_layers: int) -> dict[str, str]:
    """The learner's parameter names -> the course model's, for every parameter of the contract: block parameters
    by the TransformerBlock's contract names, the rest by role (the embedding is the first (vocab, d) parameter, the
    head the last, the final LayerNorm's weight and bias the (d,) ones, a (vocab,) bias the head's). Any other entry
    (a buffer of positions, a parameter of the learner's own) is not the contract's."""
    if not isinstance(mine, dict) or not all(isinstance(v, torch.Tensor) for v in mine.values()):
        raise Diagnosis("TinyTransformer.state_dict() must map names to tensors")
    blocks: dict[str, dict[int, set]] = {}
    names, rest = {}, []
    for key in mine:
        m = BLOCK_PARAM.match(key)
        if m:
            blocks.setdefault(m["prefix"], {}).setdefault(int(m["i"]), set()).add(m["rest"])
            names[key] = f"blocks.{m['i']}.{m['rest']}"
        else:
            rest.append(key)
    layers = next(iter(blocks.values()), {})
    check(len(blocks) == 1 and sorted(layers) == list(range(n_layers))
          and all(v == BLOCK_NAMES for v in layers.values()),
          f"TinyTransformer(..., n_layers={n_layers}) should hold {n_layers} of your TransformerBlock (attn, ff, "
          "norm1, norm2) in one nn.ModuleList, but its parameters are "
          + ", ".join(sorted({re.sub(r"\.\d+\.", ".<i>.", k) for k in mine})[:12]))
    matrices = [k for k in rest if tuple(mine[k].shape) == (vocab, d)]
    norms = [k for k in rest if tuple(mine[k].shape) == (d,)]
    biases = [k for k in rest if tuple(mine[k].shape) == (vocab,)]
    norm_w = [k for k in norms if k.endswith("weight")]
    norm_b = [k for k in norms if k.endswith("bias")]
    check(len(matrices) == 2 and len(norm_w) == 1 and len(norm_b) == 1 and len(biases) <= 1,
          "TinyTransformer should hold a token embedding nn.Embedding(vocab_size, d_model), n_layers "
          f"TransformerBlocks (in {next(iter(blocks))}), a final LayerNorm(d_model) and a head "
          "nn.Linear(d_model, vocab_size)")
    names.update({matrices[0]: "embed.weight", matrices[1]: "head.weight", norm_w[0]: "norm.weight",
                  norm_b[0]: "norm.bias"})
    if biases:
        names[biases[0]] = "head.bias"
    return names


def course_weights(mine: dict, ref: dict, vocab: int, d: int, n_layers: int) -> tuple[dict, dict]:
    """(a state for the learner's model holding the course model's weights, the course model's state to compare
    with). Any entry outside the contract (a buffer of positions) keeps the learner's own value."""
    names = contract_names(mine, vocab, d, n_layers)
    state, ref = dict(mine), dict(ref)
    for key, course_key in names.items():
        state[key] = ref[course_key]
    if "head.bias" not in names.values():
        ref["head.bias"] = torch.zeros_like(ref["head.bias"])
    return state, ref


def course_model_holding(trained: dict, course, vocab: int, d: int, n_layers: int):
    """The course model `course` holding the contract's weights of the learner's trained state (the reverse of
    `course_weights`): its own buffers, and nothing of what the learner's model holds outside the contract."""
    names = contract_names(trained, vocab, d, n_layers)
    state = course.state_dict()
    for key, course_key in names.items():
        check(tuple(trained[key].shape) == tuple(state[course_key].shape) and trained[key].is_floating_point(),
              f"after training, {key} has shape {tuple(trained[key].shape)} ({trained[key].dtype})")
        state[course_key] = trained[key].to(state[course_key].dtype)
    if "head.bias" not in names.values():
        state["head.bias"] = torch.zeros_like(state["head.bias"])
    course.load_state_dict(state)
    return course.eval()


def load_course_weights(model, ref_model, norm_first: bool = True):
    """Put the course model's weights into the learner's model; returns the course model holding the same."""
    state, ref_state = course_weights(model.state_dict(), ref_model.state_dict(), SMALL["vocab_size"],
                                      SMALL["d_model"], SMALL["n_layers"])
    load_exact(model, state, "TinyTransformer")
    shared_blocks(model.state_dict(), state)
    ref_model.load_state_dict(ref_state)
    return ref_model


def shared_blocks(back: dict, loaded: dict):
    """Layers given different weights that read back the same hold one block: say so."""
    firsts: dict[str, list[str]] = {}
    for key in loaded:
        m = BLOCK_PARAM.match(key)
        if m:
            firsts.setdefault(m["rest"], []).append(key)
    same = [keys for keys in firsts.values()
            if len(keys) > 1 and all(isinstance(back.get(k), torch.Tensor) and torch.equal(back[k], back[keys[0]])
                                     for k in keys)]
    check(not same or len(same) < len(firsts),
          "one TransformerBlock is shared by all layers: the layers were given different weights and all hold the "
          "same ones; build n_layers separate TransformerBlocks (nn.ModuleList(TransformerBlock(...) for _ in "
          "range(n_layers)))")


# -- the tests ------------------------------------------------------------------------------------------
@TINY
def test_tiny_shape(learner):
    """logits of shape (B, T, vocab_size) for T = 17, 1 and max_len"""
    model = small_model(learner)
    for B, L in ((3, 17), (2, 1), (2, SMALL["max_len"])):
        out = logits_of(model, tokens(B, L, seed=L), f"the output for tokens of shape ({B}, {L})")
        check(torch.isfinite(out).all(), f"the logits for tokens of shape ({B}, {L}) contain inf or NaN")


@TINY
@pytest.mark.weight(2)
def test_tiny_structure(learner, reference):
    """with the course model's weights, it computes the course model's logits (Pre-LN and Post-LN)"""
    course = reference(A).TinyTransformer
    for norm_first in (True, False):
        torch.manual_seed(int(torch.randint(1 << 30, (1,), generator=seeded(901 + norm_first))))
        ref = course(*SMALL.values(), norm_first=norm_first).eval()
        model = new_model(learner, *SMALL.values(), norm_first=norm_first)
        ref = load_course_weights(model, ref, norm_first)
        x = tokens(3, 19, seed=902 + norm_first)
        with torch.no_grad():
            want = ref.double()(x)
            plain = ref.float()(x)
        close(logits_of(model, x, "the output"), want, f"the logits with the course model's weights (norm_first="
              f"{norm_first})", "embed the tokens, add the sinusoidal encoding of the positions, apply the blocks in "
              "order with the causal mask, then the final LayerNorm and the head", baseline=plain, dtype=torch.float32)


@TINY
@pytest.mark.together
def test_tiny_with_your_parts(learner, reference, course):
    """with the parts you pasted from the earlier exercises, it computes the course model's logits"""
    x = tokens(2, 13, seed=905)

    def run_check():                 # built here: the model's parts are those bound when it is made
        model = new_model(learner, *SMALL.values())
        ref = load_course_weights(model, reference(A).TinyTransformer(*SMALL.values()).eval())
        with torch.no_grad():
            want, plain = ref.double()(x), ref.float()(x)
        close(logits_of(model, x, "the output"), want, "the logits with the course model's weights", baseline=plain,
              dtype=torch.float32)

    wrong = course_parts("TinyTransformer_tests", learner)
    if not wrong:
        together(learner, course(A), ["TransformerBlock"], run_check, "TinyTransformer",
                 "your pasted TransformerBlock is wrong: paste your corrected answer from the residual exercise")
        return
    # A pasted part wrong at the sizes drawn for this grading fails this test, whatever the model gives at this one.
    odd = judge.sometimes_wrong(learner, wrong, course=_COURSE[0])
    together(learner, course(A), wrong, run_check, "TinyTransformer",
             f"your pasted {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} missing or wrong at sizes drawn for "
             "this grading (the other tests used the course's)"
             + (f"; {', '.join(odd)} gave right answers at some of those sizes and wrong ones at others" if odd else "")
             + ": paste your corrected answers from the earlier exercises", known_wrong=True)


@TINY
@given(L=st.integers(2, 20), data=st.data(), norm_first=st.booleans())
def test_tiny_causal(learner, L, data, norm_first):
    """changing a later token never changes the logits at earlier positions (Pre-LN and Post-LN)"""
    p = data.draw(st.integers(1, L - 1), label="changed position")
    seed = data.draw(st.integers(0, 10_000), label="seed")
    model = small_model(learner, norm_first)
    x = tokens(2, L, seed)
    changed = x.clone()
    changed[:, p] = ((x[:, p] + 1 + torch.randint(0, SMALL["vocab_size"] - 1, (2,), generator=seeded(seed)))
                     % SMALL["vocab_size"])
    before = logits_of(model, x, f"the output for T = {L}")
    after = logits_of(model, changed, f"the output for T = {L}")
    check(torch.allclose(before[:, :p], after[:, :p], atol=1e-5),
          f"changing the token at position {p} changed the logits at earlier positions (norm_first={norm_first}): "
          "the model looks ahead; give every block the causal mask (True where key j <= query i)")
    check(not torch.allclose(before[:, p], after[:, p], atol=1e-6),
          f"changing the token at position {p} did not change the logits at position {p}: each position must see "
          "its own token (is the causal mask shifted, or inverted?)")


@TINY
def test_tiny_order_matters(learner):
    """the order of earlier tokens changes later logits: positions are added"""
    model = small_model(learner)
    x = tokens(3, 12, seed=5, low=3)
    x[:, 0], x[:, 1] = 1, 2
    swapped = x.clone()
    swapped[:, 0], swapped[:, 1] = 2, 1
    a, b = logits_of(model, x, "the output"), logits_of(model, swapped, "the output")
    check(not torch.allclose(a[:, 2:], b[:, 2:], atol=1e-5),
          "swapping the first two tokens leaves the logits at later positions unchanged: without positions, causal "
          "attention sees the earlier tokens as an unordered set; add the sinusoidal encoding to the embeddings")


@TINY
def test_tiny_leaves_input(learner):
    """does not modify tokens"""
    x = tokens(2, 7, seed=6)
    leaves_inputs(small_model(learner).twice(x), [x], "TinyTransformer.forward", names=["tokens"])


def accuracy(logits, y, k) -> float:
    return float((logits.argmax(-1) == y)[:, k:].float().mean())


@TINY
@pytest.mark.weight(3)
def test_tiny_trains(learner, reference):
    """learns to repeat the token a few places back (an offset drawn for this grading): accuracy >= 0.9 on new
    sequences after 400 training steps, from near chance before, measured in the course's model holding the weights
    your training left in the contract's parameters"""
    k = task_offset()
    learner.seed(int(torch.randint(1 << 30, (1,), generator=seeded(903))))
    model = new_model(learner, V, D_MODEL, N_HEADS, D_FF, N_LAYERS, T)
    xe, ye = copy_task(1024, k, seed=13)
    untrained = accuracy(tensor(model(xe), "the output of the untrained model", shape=(1024, T, V)), ye, k)
    check(untrained < BEFORE, f"before any training your model already repeats the token {k} places back with accuracy "
                              f"{untrained:.2f}: the hidden task is drawn when grading, and the model must learn it "
                              "from the data, not know it")
    x, y = copy_task(4096, k, seed=11)
    model.train(x, y, steps=STEPS, batch_size=BATCH, lr=LR,
                seed=int(torch.randint(1 << 30, (1,), generator=seeded(904))),
                timeout=config.current().train_timeout)
    # What training left in the contract's weights, judged in the course's model: nothing the learner's model
    # holds outside them (a parameter of its own, a hook, a tensor subclass) reaches this accuracy.
    course = course_model_holding(model.state_dict(), reference(A).TinyTransformer(V, D_MODEL, N_HEADS, D_FF,
                                                                                   N_LAYERS, T), V, D_MODEL, N_LAYERS)
    with torch.no_grad():
        want, plain = course.double()(xe), course.float()(xe)
    check(torch.isfinite(plain).all(), "after training, the logits contain NaN or inf: look for a division by zero or "
                                       "a -inf that reaches the output (a row of the mask that is all False?)")
    acc = accuracy(plain, ye, k)
    check(acc >= ACCURACY,
          f"after {STEPS} steps of training, the model repeats the token {k} places back with accuracy {acc:.2f} "
          f"on new sequences (at least {ACCURACY} expected; the course's model reaches 1.0). It stays near 0.3 when "
          "the model cannot tell positions apart: add the sinusoidal encoding to the token embeddings (unscaled: "
          "multiplied by sqrt(d_model), the embeddings drown the positions), and give every block the same causal mask")
    close(tensor(model(xe), "the output of the trained model", shape=(1024, T, V)), want,
          "the trained model's logits against the course's model holding its trained weights",
          "after training, your model must still compute what the course's model computes with the same weights: "
          "nothing outside the contract's parameters (no parameter of its own, hook or changed output) may change "
          "its logits", baseline=plain, dtype=torch.float32)


@TINY
@pytest.mark.feedback
@pytest.mark.together
def test_tiny_drawn(request, learner, reference):
    """your TinyTransformer drawn beside the course's, with the differences in structure named"""
    draw_structure(request, learner, vars(reference(A)), "TinyTransformer")


@TINY
def test_tiny_speed(learner, timed_reference):
    """the forward pass runs about as fast as the reference solution"""
    from autograder.verdict.timing import Target

    worker = timed_reference
    sizes = TINY_SPEED
    ref, mine = worker.new("TinyTransformer", *sizes.values()), new_model(learner, *sizes.values())
    state, ref_state = course_weights(mine.state_dict(), ref.state_dict(), 16, 64, 2)
    load_exact(mine, state, "TinyTransformer")
    ref.load_state_dict(ref_state)
    fast_enough(Target(learner, "TinyTransformer", mine.handle), Target(worker, "TinyTransformer", ref.handle),
                [{"kind": "tokens", "shape": [2, 64], "high": 16}], "TinyTransformer forward", calls=10)
