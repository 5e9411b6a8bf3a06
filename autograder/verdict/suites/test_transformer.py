"""Hidden suite: transformer (TinyTransformer).

The model is checked by what it computes, never by what its process says it is: loaded with the
course model's weights (mapped onto its parameters through the contract's names) it must give the
course model's logits; changing a later token never changes earlier logits; the order of tokens
matters; and a short training run in the worker on a task drawn for this grading (its offset and
its sequences), scored here on held-out data made here, must learn it from an accuracy near chance.
"""
import re
from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from autograder import config
from autograder.verdict.learner import LearnerError

from . import families, judge
from .checks import (
    DRAWING_PRELOAD,
    Diagnosis,
    check,
    close,
    draw_structure,
    fast_enough,
    leaves_inputs,
    load_exact,
    tensor,
    together,
)
from .contract import Call, Draw, Part, Promises, at_call_precision, check_drawn
from .library import ATTENTION_OPS, NORM_OPS
from .oracles import random_block_state

A = "transformer"
# The library versions of every part the model is built from: proven by the static reading, refused by the
# learner's worker (autograder.verdict.static, autograder.inside.worker).
LIBRARY = r"(?i)(attention|multihead|multi_head|(layer|group|instance|batch|rms)_?norm|transformer)"
REFUSED_OPS = ATTENTION_OPS + NORM_OPS
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


def task_offset(grading) -> int:
    return OFFSETS[int(torch.randint(len(OFFSETS), (1,), generator=grading.seeded(900)))]


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


def tokens(grading, B, L, seed, low=0):
    return torch.randint(low, SMALL["vocab_size"], (B, L), generator=grading.seeded(seed))


def logits_of(model, x, what):
    B, L = x.shape
    return tensor(model(x), what, shape=(B, L, SMALL["vocab_size"]), dtype=torch.float32)


def copy_task(grading, n, k, seed):
    """Random sequences; the target at position t >= k is the token at t - k (ignored before)."""
    x = torch.randint(0, V, (n, T), generator=grading.seeded(seed))
    y = torch.full_like(x, -100)
    y[:, k:] = x[:, :-k]
    return x, y


# -- the course's weights in the learner's model ------------------------------------------------------
BLOCK_PARAM = re.compile(r"^(?P<prefix>.+)\.(?P<i>\d+)\.(?P<rest>(attn\.(q|k|v|out)_proj|ff\.linear[12]|norm[12])"
                         r"\.(weight|bias))$")
BLOCK_NAMES = {f"{m}.{p}" for m in ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj", "ff.linear1",
                                    "ff.linear2", "norm1", "norm2") for p in ("weight", "bias")}


def contract_names(mine: dict, vocab: int, d: int, n_layers: int) -> dict[str, str]:
    """The learner's parameter names -> the course model's, for every parameter of the contract, by role, never by
    the order of registration: block parameters by the TransformerBlock's contract names (under any name of the
    list, or several names of one list); the head is the (vocab, d) weight of a module that also holds a (vocab,)
    bias (an nn.Linear), the embedding the other (vocab, d) weight; the final LayerNorm is the (d,) weight and bias
    outside the blocks. Any other entry (a buffer of positions) is not the contract's."""
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
    whole = [sorted(layers) == list(range(n_layers)) and all(v == BLOCK_NAMES for v in layers.values())
             for layers in blocks.values()]
    check(bool(whole) and all(whole),
          f"TinyTransformer(..., n_layers={n_layers}) should hold {n_layers} of your TransformerBlock (attn, ff, "
          "norm1, norm2) in an nn.ModuleList, but its parameters are "
          + ", ".join(sorted({re.sub(r"\.\d+\.", ".<i>.", k) for k in mine})[:12]))
    shape = {k: tuple(mine[k].shape) for k in rest}

    def sibling(key: str, name: str) -> str:
        module = key.rpartition(".")[0]
        return f"{module}.{name}" if module else name

    matrices = [k for k in rest if shape[k] == (vocab, d) and k.endswith("weight")]
    heads = [k for k in matrices if shape.get(sibling(k, "bias")) == (vocab,)]
    embeddings = [k for k in matrices if k not in heads]
    if not heads and len(embeddings) == 2:        # a head without a bias: the embedding is the one registered first
        heads = embeddings[1:]
        embeddings = embeddings[:1]
    biases = [sibling(k, "bias") for k in heads if sibling(k, "bias") in shape]
    norm_w = [k for k in rest if shape[k] == (d,) and k.endswith("weight") and shape.get(sibling(k, "bias")) == (d,)
              and k not in heads]
    norm_b = [sibling(k, "bias") for k in norm_w]
    check(len(heads) == 1 and len(embeddings) == 1 and len(norm_w) == 1,
          "TinyTransformer should hold a token embedding nn.Embedding(vocab_size, d_model), n_layers "
          f"TransformerBlocks (in {next(iter(blocks))}), a final LayerNorm(d_model) and a head "
          f"nn.Linear(d_model, vocab_size); its other parameters are {', '.join(f'{k} {shape[k]}' for k in rest)}")
    names.update({embeddings[0]: "embed.weight", heads[0]: "head.weight", norm_w[0]: "norm.weight",
                  norm_b[0]: "norm.bias"})
    if biases:
        names[biases[0]] = "head.bias"
    return names


def course_weights(mine: dict, ref: dict, vocab: int, d: int, n_layers: int) -> tuple[dict, dict]:
    """(a state for the learner's model holding the course model's weights, the course model's state to compare
    with). Only the contract's entries are given: any other (a buffer of positions) keeps the learner's own value."""
    names = contract_names(mine, vocab, d, n_layers)
    ref = dict(ref)
    state = {key: ref[course_key] for key, course_key in names.items()}
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


def load_course_weights(model, ref_model, g: torch.Generator):
    """Drawn weights for every parameter of the contract (the norms' too) in the course model and, mapped by role, in
    the learner's; returns the course model."""
    ref_model.load_state_dict({**ref_model.state_dict(), **random_tiny_state(
        SMALL["vocab_size"], SMALL["d_model"], SMALL["d_ff"], SMALL["n_layers"], g)})
    state, ref_state = course_weights(model.state_dict(), ref_model.state_dict(), SMALL["vocab_size"],
                                      SMALL["d_model"], SMALL["n_layers"])
    load_exact(model, state, "TinyTransformer", contract={k: v for k, v in ref_state.items() if k != "pe"})
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


# -- the contract: inputs drawn over everything the notebook allows (autograder.verdict.suites.contract) ---------
def course_model():
    """The course's TinyTransformer class (the solution notebook's code, run here)."""
    course_parts("", None)
    return _COURSE[0].TinyTransformer


def random_tiny_state(vocab: int, d: int, d_ff: int, n_layers: int, g: torch.Generator) -> dict:
    """Drawn weights from `g` for every parameter of the contract, by the course model's names (norm weights not
    ones); the head's bias is zero, since a head without one (GPT-2's) is right too."""
    state = {"embed.weight": torch.randn(vocab, d, generator=g), "norm.weight": 1 + 0.5 * torch.randn(d, generator=g),
             "norm.bias": 0.5 * torch.randn(d, generator=g),
             "head.weight": torch.randn(vocab, d, generator=g) / d ** 0.5, "head.bias": torch.zeros(vocab)}
    for i in range(n_layers):
        state.update({f"blocks.{i}.{k}": v for k, v in random_block_state(d, d_ff, g).items()})
    return state


def draw_tiny(d: Draw) -> Call:
    vocab, H, d_ff, n_layers = d.size(2, 30), d.choice((1, 2, 4)), d.size(1, 48), d.size(1, 3)
    D = H * 2 * d.size(1, 4)
    max_len = d.size(1, 40)
    ctor, ctor_kwargs, norm_first = d.norm_first((vocab, D, H, d_ff, n_layers, max_len))
    T = d.choice((max_len, d.size(1, max_len)))
    tokens = torch.randint(0, vocab, (d.size(1, 3), T), generator=d.g)
    return Call("TinyTransformer", (tokens,), ctor=ctor, ctor_kwargs=ctor_kwargs,
                state=random_tiny_state(vocab, D, d_ff, n_layers, d.g),
                about="Pre-LN" if norm_first else "Post-LN")


def _tiny_model(c: Call, dtype):
    model = course_model()(*c.made, **c.ctor_kwargs)
    model.load_state_dict(c.state)
    return model.to(dtype).eval()


def _tiny_values(c: Call, dtype):
    with torch.no_grad():
        return _tiny_model(c, dtype)(c.args[0])


def tiny_names(mine: dict, state: dict) -> dict:
    """The course-named `state` by the learner's model's own names, mapped by role (contract_names)."""
    vocab, d = state["embed.weight"].shape
    n_layers = len({k.split(".")[1] for k in state if k.startswith("blocks.")})
    return course_weights(mine, state, vocab, d, n_layers)[0]  # a head without a bias: the drawn one is zero


def tiny_edges(d: Draw) -> list[Call]:
    """One token, and max_len tokens of a vocabulary of two through one Post-LN block."""
    def tiny(vocab, D, H, d_ff, n_layers, max_len, T, norm_first=True, about=""):
        return Call("TinyTransformer", (torch.randint(0, vocab, (2, T), generator=d.g),),
                    ctor=(vocab, D, H, d_ff, n_layers, max_len),
                    ctor_kwargs={} if norm_first else {"norm_first": False},
                    state=random_tiny_state(vocab, D, d_ff, n_layers, d.g), about=about)

    return [tiny(5, 4, 1, 8, 1, 6, 1, about="one token"),
            tiny(2, 8, 2, 16, 1, 12, 12, norm_first=False, about="max_len tokens, Post-LN")]


CONTRACT = {"TinyTransformer": Part(draw_tiny, lambda c: _tiny_values(c, torch.float64),
                                    at_call_precision(_tiny_values), rename=tiny_names,
                                    rounded=lambda c: partial(_tiny_model(c, torch.float64), c.args[0]),
                                    promises=Promises(module=True, takes="tensors", edges=tiny_edges))}
globals().update(families.tests(CONTRACT, A))
DRAWN = 8           # calls drawn per grading


# -- the tests ------------------------------------------------------------------------------------------
@TINY
def test_tiny_shape(grading, learner):
    """logits of shape (B, T, vocab_size) for T = 17, 1 and max_len"""
    model = small_model(learner)
    for B, L in ((3, 17), (2, 1), (2, SMALL["max_len"])):
        out = logits_of(model, tokens(grading, B, L, seed=L), f"the output for tokens of shape ({B}, {L})")
        check(torch.isfinite(out).all(), f"the logits for tokens of shape ({B}, {L}) contain inf or NaN")


@TINY
@pytest.mark.weight(2)
def test_tiny_structure(grading, learner, reference):
    """with the course model's weights (every one drawn), it computes the course model's logits (Pre-LN and Post-LN)"""
    course = reference(A).TinyTransformer
    for norm_first in (True, False):
        model = new_model(learner, *SMALL.values(), norm_first=norm_first)
        ref = load_course_weights(model, course(*SMALL.values(), norm_first=norm_first).eval(),
                                  grading.seeded(901 + norm_first))
        x = tokens(grading, 3, 19, seed=902 + norm_first)
        with torch.no_grad():
            want, plain = ref.double()(x), ref.float()(x)
        close(model(x), want, f"the logits of TinyTransformer(norm_first={norm_first}) with the course model's "
              "weights", baseline=plain, dtype=torch.float32)


@TINY
@pytest.mark.together
def test_tiny_with_your_parts(grading, learner, reference, course):
    """with the parts you pasted from the earlier exercises, it computes the course model's logits"""
    x = tokens(grading, 2, 13, seed=905)

    def run_check():                        # built here: the model's parts are those bound when it is made
        model = new_model(learner, *SMALL.values())
        ref = load_course_weights(model, reference(A).TinyTransformer(*SMALL.values()).eval(),
                                  grading.seeded(906))
        with torch.no_grad():
            want, plain = ref.double()(x), ref.float()(x)
        close(model(x), want, "the logits with the course model's weights", baseline=plain, dtype=torch.float32)

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
def test_tiny_causal(grading, learner, L, data, norm_first):
    """changing a later token never changes the logits at earlier positions (Pre-LN and Post-LN)"""
    p = data.draw(st.integers(1, L - 1), label="changed position")
    seed = data.draw(st.integers(0, 10_000), label="seed")
    model = small_model(learner, norm_first)
    x = tokens(grading, 2, L, seed)
    changed = x.clone()
    changed[:, p] = ((x[:, p] + 1 + torch.randint(0, SMALL["vocab_size"] - 1, (2,), generator=grading.seeded(seed)))
                     % SMALL["vocab_size"])
    before = logits_of(model, x, f"the output for T = {L}")
    after = logits_of(model, changed, f"the output for T = {L}")
    moved = float((before[:, :p] - after[:, :p]).abs().max())
    check(moved <= 1e-5, f"in a sequence of {L} tokens, changing the token at position {p} changed the logits at the "
                         f"positions before it by up to {moved:.3g} (norm_first={norm_first}); a causal model's "
                         "logits at a position depend only on the tokens up to it")
    check(not torch.allclose(before[:, p], after[:, p], atol=1e-6),
          f"in a sequence of {L} tokens, changing the token at position {p} did not change the logits at position "
          f"{p} (norm_first={norm_first}); they depend on the token there too")


@TINY
def test_tiny_order_matters(grading, learner):
    """the order of earlier tokens changes later logits: positions are added"""
    model = small_model(learner)
    x = tokens(grading, 3, 12, seed=5, low=3)
    x[:, 0], x[:, 1] = 1, 2
    swapped = x.clone()
    swapped[:, 0], swapped[:, 1] = 2, 1
    a, b = logits_of(model, x, "the output"), logits_of(model, swapped, "the output")
    check(not torch.allclose(a[:, 2:], b[:, 2:], atol=1e-5),
          "swapping the first two tokens of a sequence left the logits at every later position unchanged: the model "
          "does not tell the order of earlier tokens apart")


@TINY
@pytest.mark.weight(2)
@pytest.mark.drawn
def test_tiny_on_drawn_inputs(grading, learner, reference):
    """on inputs drawn for this grading: Pre-LN and Post-LN, 1 to 3 layers, any sizes, every weight drawn"""
    check_drawn(learner, vars(reference(A)), "TinyTransformer", CONTRACT["TinyTransformer"],
                grading.seeded(9031).initial_seed(), DRAWN)


@TINY
def test_tiny_leaves_input(grading, learner):
    """does not modify tokens"""
    x = tokens(grading, 2, 7, seed=6)
    leaves_inputs(small_model(learner).twice(x), [x], "TinyTransformer.forward", names=["tokens"])


def accuracy(logits, y, k) -> float:
    return float((logits.argmax(-1) == y)[:, k:].float().mean())


@TINY
@pytest.mark.weight(3)
def test_tiny_trains(grading, learner, reference):
    """learns to repeat the token a few places back (an offset drawn for this grading): accuracy >= 0.9 on new
    sequences after 400 training steps, from near chance before, measured in the course's model holding the weights
    your training left in the contract's parameters"""
    k = task_offset(grading)
    learner.seed(int(torch.randint(1 << 30, (1,), generator=grading.seeded(903))))
    model = new_model(learner, V, D_MODEL, N_HEADS, D_FF, N_LAYERS, T)
    xe, ye = copy_task(grading, 1024, k, seed=13)
    untrained = accuracy(tensor(model(xe), "the output of the untrained model", shape=(1024, T, V)), ye, k)
    check(untrained < BEFORE, f"before any training your model already repeats the token {k} places back with accuracy "
                              f"{untrained:.2f}: the hidden task is drawn when grading, and the model must learn it "
                              "from the data, not know it")
    x, y = copy_task(grading, 4096, k, seed=11)
    model.train(x, y, steps=STEPS, batch_size=BATCH, lr=LR,
                seed=int(torch.randint(1 << 30, (1,), generator=grading.seeded(904))),
                timeout=config.current().train_timeout)
    # What training left in the contract's weights, judged in the course's model: nothing the learner's model
    # holds outside them (a parameter of its own, a hook, a tensor subclass) reaches this accuracy.
    course = course_model_holding(model.state_dict(), reference(A).TinyTransformer(V, D_MODEL, N_HEADS, D_FF,
                                                                                   N_LAYERS, T), V, D_MODEL, N_LAYERS)
    with torch.no_grad():
        want, plain = course.double()(xe), course.float()(xe)
    check(torch.isfinite(plain).all(), "after training, the logits contain NaN or inf")
    acc = accuracy(plain, ye, k)
    check(acc >= ACCURACY,
          f"after {STEPS} steps of training, the model repeats the token {k} places back with accuracy {acc:.2f} "
          f"on new sequences (at least {ACCURACY} expected; the course's model reaches 1.0)")
    close(tensor(model(xe), "the output of the trained model", shape=(1024, T, V)), want,
          "the trained model's logits against the course's model holding its trained weights (nothing outside the "
          "contract's parameters may change them)", baseline=plain, dtype=torch.float32)


@TINY
@pytest.mark.feedback
@pytest.mark.together
def test_tiny_drawn(request, learner, reference):
    """your TinyTransformer drawn beside the course's, with the differences in structure named"""
    draw_structure(request, learner, vars(reference(A)), "TinyTransformer")


@TINY
@pytest.mark.measured
def test_tiny_speed(learner, timed_reference):
    """the forward pass runs about as fast as the reference solution"""
    from autograder.verdict.timing import Target

    worker = timed_reference
    sizes = TINY_SPEED
    ref, mine = worker.new("TinyTransformer", *sizes.values()), new_model(learner, *sizes.values())
    state, ref_state = course_weights(mine.state_dict(), ref.state_dict(), 16, 64, 2)
    load_exact(mine, state, "TinyTransformer", contract=ref_state)
    ref.load_state_dict(ref_state)
    fast_enough(Target(learner, "TinyTransformer", mine.handle), Target(worker, "TinyTransformer", ref.handle),
                [{"kind": "tokens", "shape": [2, 64], "high": 16}], "TinyTransformer forward", calls=10)
