"""The speed, memory and CPU measures of autograder.verdict.timing and .measure, on real sandboxed workers."""
import time

import pytest

from autograder.authoring import variants
from autograder.notebooks import learner_cells
from autograder.verdict import measure
from autograder.verdict.learner import Learner, WorkerDied
from autograder.verdict.timing import Comparison, Target, compare, peak_memory, same_outputs

SDPA = "scaled_dot_product_attention"
TINY = [{"kind": "randn", "shape": [1, 1, 8, 4]}] * 3


@pytest.fixture(scope="module")
def pair():
    cells = learner_cells(variants.submission("attention"))
    workers = Learner(cells), Learner(cells)
    yield [Target(w, SDPA) for w in workers]
    for w in workers:
        w.close()


def test_repetitions_continue_until_the_standard_error_is_small(pair):
    fixed = compare(*pair, TINY, reps=3, cpu=False, until_se=0)
    assert len(fixed.learner) == len(fixed.reference) == 3
    unreachable = compare(*pair, TINY, reps=3, cpu=False, until_se=1e-12, max_reps=8)
    assert len(unreachable.learner) == 8, "more repetitions, up to max_reps, while the error is too large"
    spent = compare(*pair, TINY, reps=3, cpu=False, until_se=1e-12, budget_s=0)
    assert len(spent.learner) == 3, "no repetition beyond reps once the time budget is spent"
    loose = compare(*pair, TINY, reps=3, cpu=False, until_se=10.0)
    assert len(loose.learner) == 3 and loose.mismatch is None


def test_a_ratio_is_clearly_under_the_limit_only_by_a_margin_of_its_errors():
    steady = Comparison(learner=[2.0, 2.04, 1.96], reference=[1.0, 1.01, 0.99])
    assert steady.clearly_under(3.0), "2x, a few per cent apart: under 3x by far more than three standard errors"
    assert not steady.clearly_under(2.05), "2x is not clearly under 2.05x"
    noisy = Comparison(learner=[1.0, 4.0, 2.0], reference=[1.0, 1.0, 1.0])
    assert not noisy.clearly_under(3.0), "a median of 2x whose runs spread from 1x to 4x may be over 3x"
    one_slow = Comparison(learner=[2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.2], reference=[1.0] * 7)
    assert not one_slow.clearly_under(3.0), "a run over the limit: the next ones may be too"


def test_peak_memory_returns_the_measured_call_s_outputs(pair):
    (extra_a, a), (extra_b, b) = (peak_memory(t, TINY, seed=5) for t in pair)
    assert extra_a >= 0 and extra_b >= 0
    assert same_outputs(a, b)
    other = peak_memory(pair[0], TINY, seed=6)[1]
    assert not same_outputs(other, b), "other inputs, other output: the comparison sees the difference"


def test_each_timed_run_has_inputs_of_its_own(pair):
    """The seed of a timed run is drawn for it: two runs with drawn seeds see different inputs."""
    from autograder.verdict.timing import fresh_seed

    a, b = (pair[0].run(fresh_seed(), TINY) for _ in range(2))
    assert not same_outputs(a, b)
    assert same_outputs(pair[0].run(7, TINY), pair[1].run(7, TINY)), "the same seed, the same inputs in both workers"


PLAIN_SDPA = '''import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    w = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    return w @ v, w
'''

MADE_AHEAD = PLAIN_SDPA + '''
_buffer = torch.ones(64 << 18)                                  # 64 MiB, every page touched
with open("/tmp/spare", "wb") as f:                             # 32 MiB in the sandbox's tmpfs
    f.write(b"x" * (32 << 20))
_plain = scaled_dot_product_attention


def scaled_dot_product_attention(q, k, v, mask=None):
    _buffer.mul_(1.0)
    return _plain(q, k, v, mask)
'''


# The 96 MiB made ahead count, less what the worker itself gave back meanwhile (measured 95.9 MiB under load).
@pytest.mark.parametrize("source, at_least, at_most", [(PLAIN_SDPA, 0, 16 << 20), (MADE_AHEAD, 90 << 20, None)],
                         ids=["plain", "made_ahead"])
def test_memory_made_ahead_of_the_measured_call_counts(source, at_least, at_most):
    """A buffer the learner's cell made when it loaded, in memory or in the sandbox's tmpfs, and the call uses:
    the call's own rise is small, the measure is not."""
    worker = Learner([{"id": "cell", "source": source}], guarded=False)   # a tmpfs file: the measure's case
    try:
        extra = peak_memory(Target(worker, SDPA), TINY)[0]
    finally:
        worker.close()
    assert at_least <= extra and (at_most is None or extra <= at_most), f"{extra / 2**20:.1f} MiB"


# Tensors of growing size each freed before the next, and a small one kept at each step: a heap that keeps freed
# memory for reuse cannot fit each in the last one's place and grows (158 MiB measured); the call holds
# at most 21 MiB at once (measured 21 MiB alone, 52 MiB in a worker of a loaded make test; the bound sits between
# those and the holes).
FRAGMENTING = PLAIN_SDPA + '''
_plain = scaled_dot_product_attention


def scaled_dot_product_attention(q, k, v, mask=None):
    kept = []
    for i in range(64):
        step = torch.ones((4 << 18) + (i << 14))                # 4 MiB and more at each step, freed at the next
        kept.append(torch.ones(1 << 16) + step[0])              # 256 KiB kept
    return _plain(q, k, v, mask)
'''


def test_memory_is_what_a_call_holds_at_once_not_how_the_heap_fragments():
    """The heap reuses freed memory for speed; while memory is measured, each tensor has pages of its own (worker
    op_release), so a call is charged what it holds at once, not the holes the heap could not fill."""
    worker = Learner([{"id": "cell", "source": FRAGMENTING}])
    try:
        extra = peak_memory(Target(worker, SDPA), TINY)[0]
    finally:
        worker.close()
    assert 16 << 20 <= extra < 100 << 20, f"{extra / 2**20:.1f} MiB"


NAP_AND_SPIN = """import time


def nap():
    time.sleep(3)
    return 1


def spin():
    while True:
        pass
"""


def test_a_cpu_limit_charges_the_cpu_a_call_uses_not_the_wall_time_it_takes():
    """measure.CpuLimit stops a call that used more CPU than it allows, counted by the sandbox's cgroup, and leaves
    alone a call that takes longer than the limit in wall time without using the CPU (a loaded machine's slowness)."""
    w = Learner([{"id": "c", "source": NAP_AND_SPIN}], guarded=False, call_timeout=60)
    try:
        w.start()
        with measure.CpuLimit(w, 1.0) as napping:
            assert w.fn("nap")() == 1
        assert not napping.hit, "3 s asleep is not 1 s of CPU"
        started = time.monotonic()
        with measure.CpuLimit(w, 1.0) as spinning, pytest.raises(WorkerDied):
            w.fn("spin")()
        assert spinning.hit and time.monotonic() - started < 30, "stopped after about 1 s of CPU, not the call's 60 s"
    finally:
        w.close()


def test_a_call_s_limit_is_cpu_time_with_the_wall_clock_as_a_backstop():
    """A learner's call is held to its limit in the CPU time its sandbox uses: 3 s asleep under a 1 s limit finishes
    (a loaded machine stretches the wall clock, not the CPU), a spinning call stops after about 1 s of CPU, and one
    that waits without computing stops at WALL_PER_CPU times the limit, each saying which clock stopped it."""
    from autograder.verdict import learner

    w = Learner([{"id": "c", "source": NAP_AND_SPIN + "\n\ndef sleep(s):\n    time.sleep(s)\n"}], guarded=False,
                call_timeout=1.0)
    try:
        w.start()
        assert w.fn("nap")() == 1, "3 s asleep is not 1 s of CPU"
        started = time.monotonic()
        with pytest.raises(WorkerDied, match=r"did not finish within 1 s of CPU time while calling spin\(\)"):
            w.fn("spin")()
        assert time.monotonic() - started < learner.WALL_PER_CPU, "stopped by its CPU time, before the wall clock"
        with pytest.raises(WorkerDied, match=rf"did not finish within {learner.WALL_PER_CPU:g} s while calling sleep"):
            w.fn("sleep")(60)
    finally:
        w.close()
