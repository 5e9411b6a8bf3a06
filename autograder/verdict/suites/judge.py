"""Whether a learner's own part is right, judged on sizes drawn for this grading (and the sizes a speed test times
it at), so that no learner can predict where it is judged: a part is graded and timed with the learner's own parts
wherever they are right, and with the course's only where they are not."""
from __future__ import annotations

import torch

from autograder.verdict.learner import LearnerError

from .checks import Diagnosis, check, close, load_state
from .oracles import (
    block_baselines,
    norm_baseline,
    oracle_attention,
    oracle_block,
    oracle_mha,
    plain_attention,
    plain_ff,
    plain_mha,
    random_block_state,
    random_ff_state,
    random_mask,
    random_mha_state,
    random_norm_state,
    torch_norm,
)

HEADS = (1, 2, 3, 4, 6, 8)
_JUDGED: dict = {}


def drawn(grading, seed: int, count: int = 3) -> list[dict]:
    """`count` sets of sizes drawn for `grading`: batch, query and key lengths, heads, head size, d_ff."""
    g = grading.seeded(seed)

    def pick(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=g))

    return [{"B": pick(1, 3), "L": pick(1, 160), "Lk": pick(1, 160), "H": HEADS[pick(0, len(HEADS) - 1)],
             "dh": pick(2, 16), "d_ff": pick(4, 96)} for _ in range(count)]


def _check(learner, name: str, s: dict, seed: int, course=None):
    """Raise Diagnosis or LearnerError when `name` gives a wrong result at sizes `s` (inputs drawn for the grading
    the learner's worker serves)."""
    B, L, Lk, H, dh, d_ff = s["B"], s["L"], s["Lk"], s["H"], s["dh"], s["d_ff"]
    D = H * dh
    grading = learner.grading
    x = grading.randn(B, L, D, seed=seed)
    if name == "scaled_dot_product_attention":
        q = grading.randn(B, H, L, dh, seed=seed + 1)
        k, v = grading.randn(B, H, Lk, dh, seed=seed + 2), grading.randn(B, H, Lk, dh, seed=seed + 3)
        mask = random_mask(L, Lk, g=grading.seeded(seed + 4))
        close(learner.fn(name)(q, k, v, mask)[0], oracle_attention(q, k, v, mask), name,
              baseline=plain_attention(q, k, v, mask)[0], dtype=torch.float32)
    elif name == "causal_mask":
        check(torch.equal(learner.fn(name)(L).bool(), torch.ones(L, L, dtype=torch.bool).tril()), name)
    elif name == "sinusoidal_encoding":
        close(learner.fn(name)(L, 2 * dh), course.sinusoidal_encoding(L, 2 * dh), name, dtype=torch.float32,
              rtol=1e-5)
    else:
        made = {"MultiHeadAttention": ((D, H), random_mha_state(D, grading.seeded(seed + 5)),
                                       lambda st: oracle_mha(st, H, x), lambda st: plain_mha(st, H, x)),
                "LayerNorm": ((D,), random_norm_state(D, grading.seeded(seed + 6)), lambda st: torch_norm(st, x),
                              lambda st: norm_baseline(st, x)),
                "FeedForward": ((D, d_ff), random_ff_state(D, d_ff, grading.seeded(seed + 7)),
                                lambda st: plain_ff(st, x.double()), lambda st: plain_ff(st, x)),
                "TransformerBlock": ((D, H, d_ff), random_block_state(D, d_ff, grading.seeded(seed + 8)),
                                     lambda st: oracle_block(st, H, x),
                                     lambda st: block_baselines(st, H, x))}
        args, state, want, plain = made[name]
        proxy = learner.new(name, *args)
        load_state(proxy, state, name)
        close(proxy(x), want(state), name, baseline=plain(state), dtype=torch.float32)


def verdicts(learner, name: str, at: tuple[dict, ...] = (), course=None) -> list[bool]:
    """Whether `name` is right at each of the sizes drawn for this grading and at each of `at` (made once)."""
    key = (id(learner), name, repr(at))
    if key not in _JUDGED:
        results = []
        for i, sizes in enumerate([*drawn(learner.grading, 1000), *at]):
            try:
                _check(learner, name, sizes, seed=1100 + 10 * i, course=course)
                results.append(True)
            except (Diagnosis, LearnerError):
                results.append(False)
        _JUDGED[key] = results
    return _JUDGED[key]


def right(learner, name: str, at: tuple[dict, ...] = (), course=None) -> bool:
    return all(verdicts(learner, name, at, course))


def wrong(learner, names, at: tuple[dict, ...] = (), course=None) -> list[str]:
    """Of `names`, the learner's parts that are wrong at some of the sizes judged."""
    return [name for name in names if not right(learner, name, at, course)]


def sometimes_wrong(learner, names, at: tuple[dict, ...] = (), course=None) -> list[str]:
    """Of `names`, the parts right at some sizes and wrong at others (a part written for the sizes it expects)."""
    return [name for name in names if len(set(verdicts(learner, name, at, course))) == 2]
