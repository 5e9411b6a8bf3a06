"""Hidden suite: transformer (TinyTransformer).

The model is checked by what it must do: logits of the right shape, causality (changing a later token never
changes earlier logits), dependence on the order of the tokens, and a short seeded training run in the worker on a
task that needs attention and positions, scored here on held-out data made here.
"""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from autograder.learner import LearnerError

from .checks import Diagnosis, check, fast_enough, module_targets, seeded, tensor

A = "transformer"

TINY = pytest.mark.cell("TinyTransformer_tests")

# The training task, as the notebook states it: repeat the token K places back.
V, T, K = 10, 16, 3
D_MODEL, N_HEADS, D_FF, N_LAYERS = 32, 4, 64, 2
STEPS, BATCH, LR, ACCURACY = 400, 32, 3e-3, 0.9
TRAIN_TIMEOUT = 120.0

# A small model for the other checks.
SMALL = dict(vocab_size=23, d_model=24, n_heads=3, d_ff=40, n_layers=2, max_len=32)
_MODELS: dict = {}


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


def copy_task(n, seed):
    """Random sequences; the target at position t >= K is the token at t - K (ignored before)."""
    x = torch.randint(0, V, (n, T), generator=seeded(seed))
    y = torch.full_like(x, -100)
    y[:, K:] = x[:, :-K]
    return x, y


@TINY
def test_tiny_shape(learner):
    """logits of shape (B, T, vocab_size) for T = 17, 1 and max_len"""
    model = small_model(learner)
    for B, L in ((3, 17), (2, 1), (2, SMALL["max_len"])):
        out = logits_of(model, tokens(B, L, seed=L), f"the output for tokens of shape ({B}, {L})")
        check(torch.isfinite(out).all(), f"the logits for tokens of shape ({B}, {L}) contain inf or NaN")


@TINY
def test_tiny_structure(learner):
    """built from n_layers TransformerBlocks and a final LayerNorm"""
    info = small_model(learner).info
    kinds = [c["mro"] for c in info["children"].values()]
    blocks = sum("TransformerBlock" in mro for mro in kinds)
    check(blocks == SMALL["n_layers"], f"TinyTransformer(..., n_layers={SMALL['n_layers']}) holds {blocks} "
                                       "TransformerBlock modules: build n_layers of your TransformerBlock "
                                       "(in an nn.ModuleList, so that their parameters are registered)")
    top_norms = [n for n, c in info["children"].items() if "LayerNorm" in c["mro"] and "." not in n]
    check(top_norms, "TinyTransformer needs a final LayerNorm (a submodule of the model itself) before the head")


@TINY
@given(L=st.integers(2, 20), data=st.data(), norm_first=st.booleans())
def test_tiny_causal(learner, L, data, norm_first):
    """changing a later token never changes the logits at earlier positions (Pre-LN and Post-LN)"""
    p = data.draw(st.integers(1, L - 1), label="changed position")
    seed = data.draw(st.integers(0, 10_000), label="seed")
    model = small_model(learner, norm_first)
    x = tokens(2, L, seed)
    changed = x.clone()
    changed[:, p] = (x[:, p] + 1 + torch.randint(0, SMALL["vocab_size"] - 1, (2,), generator=seeded(seed))) % SMALL["vocab_size"]
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
    model = small_model(learner)
    x = tokens(2, 7, seed=6)
    _, after = model(x, return_args=True)
    check(isinstance(after[0], torch.Tensor) and torch.equal(after[0], x), "TinyTransformer.forward modifies its "
                                                                           "tokens in place")


@TINY
@pytest.mark.weight(3)
def test_tiny_trains(learner):
    """learns to repeat the token 3 places back: accuracy >= 0.9 on new sequences after 400 training steps"""
    learner.seed(1)
    model = new_model(learner, V, D_MODEL, N_HEADS, D_FF, N_LAYERS, T)
    x, y = copy_task(4096, seed=11)
    losses = model.train(x, y, steps=STEPS, batch_size=BATCH, lr=LR, seed=12, timeout=TRAIN_TIMEOUT)
    check(all(loss == loss for loss in losses), "the training loss became NaN: look for a division by zero or a "
                                                "-inf that reaches the output (a row of the mask that is all False?)")
    xe, ye = copy_task(1024, seed=13)
    logits = tensor(model(xe), "the output of the trained model", shape=(1024, T, V))
    acc = float((logits.argmax(-1) == ye)[:, K:].float().mean())
    check(acc >= ACCURACY,
          f"after {STEPS} steps of training, the model repeats the token {K} places back with accuracy {acc:.2f} on new "
          f"sequences (at least {ACCURACY} expected; the course's model reaches 1.0). It stays near 0.3 when the model "
          "cannot tell positions apart: add the sinusoidal encoding to the token embeddings (unscaled: multiplied by "
          "sqrt(d_model), the embeddings drown the positions), and give every block the same causal mask")


@TINY
def test_tiny_speed(learner, reference_worker):
    """the forward pass runs about as fast as the reference solution"""
    mine, ref = module_targets(learner, reference_worker(A), "TinyTransformer", 16, 64, 4, 128, 2, 64,
                               same_weights=False)
    fast_enough(mine, ref, [{"kind": "tokens", "shape": [2, 64], "high": 16}], "TinyTransformer forward", calls=10,
                same_output=False)
