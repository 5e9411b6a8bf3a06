"""The hidden suites are right in both directions, through the real grading engine (a trusted
pytest process scoring a sandboxed worker): every known correct answer gets full marks, every
known mistake loses points in exactly the cells it should, with a diagnosis that names it."""
import functools
import importlib
import os
import subprocess
import sys

import pytest
from helpers import ASSIGNMENTS, all_variants

from autograder import config
from autograder.authoring import variants
from autograder.notebooks import TESTS_SUFFIX, graded_cells, reference_namespace
from autograder.verdict import hidden, record


def _grading(asg, cells=None, answered=True, only=()):
    grading = hidden.grade(variants.submission(asg, cells, answered=answered), asg, only=tuple(sorted(only)))
    assert grading.fault is None, f"{grading.fault}\n{grading.log[-3000:]}"
    return grading


def _grade(asg, cells=None, answered=True, only=()):
    return _grading(asg, cells, answered, only).verdicts


@functools.cache
def together_cells(asg: str) -> frozenset[str]:
    """The graded cells with a test of the learner's own parts used together (`@pytest.mark.together`), read from
    the suite's marks: every other test of a cell runs the learner's code of that cell with the course's parts."""
    suite = importlib.import_module(f"autograder.verdict.suites.test_{asg}")
    return frozenset(m.args[0] for f in vars(suite).values() if callable(f)
                     and any(m.name == "together" for m in getattr(f, "pytestmark", []))
                     for m in f.pytestmark if m.name == "cell")


def reached(asg: str, variant) -> set[str]:
    """The graded cells a known answer can change: those of the cells it replaces, those it is known to cost, and
    those whose tests use the learner's parts together. The others run the reference's code of their cell with the
    course's parts, whatever the mistake: `make test-full` grades them too (test_a_known_mistake_costs_only
    _where_it_should)."""
    return ({c + TESTS_SUFFIX for c in variant.cells} | set(getattr(variant, "fails", ()))
            | set(getattr(variant, "together", ())) | together_cells(asg))


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_reference_gets_full_marks(asg):
    """Full marks, and the frame cap holds every legitimate answer with a margin: the largest frame a worker sent
    the trusted side (the grading's own count) is under half of `max_frame_bytes`."""
    grading = _grading(asg)
    for gid, v in grading.verdicts.items():
        assert v.score == v.points, f"{gid}: {v.failed}"
    largest, cap = grading.profile["largest_frame"], config.current().max_frame_bytes
    assert 0 < largest and 2 * largest <= cap, f"{asg}: a legitimate frame of {largest} bytes, the cap is {cap}"


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_unanswered_gets_zero_with_a_clear_message(asg):
    for gid, v in _grade(asg, answered=False).items():
        assert v.score == 0, gid
        assert any("not implemented yet" in d for d in v.failed), (gid, v.failed)
        assert v.unanswered, f"{gid}: the record does not say the part is unwritten"


def sampled() -> set[tuple[str, str]]:
    """The known answers `make test` grades: for each assignment its first correct alternative, for each graded cell
    the first listed mistake that it catches. `make test-full` grades every one (test_known_mistakes_cover_every_graded
    _cell: each cell has one; test_a_correct_alternative_gets_full_marks_on_a_loaded_machine)."""
    first: dict[tuple[str, str], str] = {}
    for asg, v in all_variants():
        for key in (v.fails if isinstance(v, variants.Bug) else ["correct"]):
            first.setdefault((asg, key), v.name)
    return {(asg, name) for (asg, _), name in first.items()}


SAMPLED = sampled()


# The others only in the full tier, on their whole notebooks (a mistake: test_a_known_mistake_costs_only_where_it
# _should; a correct answer: test_a_correct_alternative_gets_full_marks_on_a_loaded_machine), which checks all that
# this grading of the cells it can reach does.
@pytest.mark.parametrize("asg,variant", [(asg, v) for asg, v in all_variants() if (asg, v.name) in SAMPLED],
                         ids=lambda x: getattr(x, "name", x))
def test_variant(asg, variant):
    if isinstance(variant, variants.Correct):
        # the cells it can change (test_a_correct_alternative_gets_full_marks_on_a_loaded_machine grades them all)
        for gid, v in _grade(asg, variant.cells, only=reached(asg, variant)).items():
            assert v.score == v.points, f"correct answer '{variant.name}' lost points in {gid}: {v.failed}"
            assert v.status == record.GRADED, f"correct answer '{variant.name}' flagged in {gid}: {v.notes}"
        return
    _judge_mistake(variant, _grade(asg, variant.cells, only=reached(asg, variant)))


@pytest.mark.full
@pytest.mark.parametrize("asg,variant", [(a, v) for a, v in all_variants() if isinstance(v, variants.Bug)],
                         ids=lambda x: getattr(x, "name", x))
def test_a_known_mistake_costs_only_where_it_should(asg, variant):
    """The whole notebook graded: a mistake costs nothing in a cell it cannot reach."""
    verdicts = _grade(asg, variant.cells)
    _judge_mistake(variant, verdicts)


def _judge_mistake(variant, verdicts):
    for gid, v in verdicts.items():
        if gid in variant.fails:
            assert v.score < v.points, f"mistake '{variant.name}' was not caught in {gid}"
            assert any(variant.fails[gid] in d for d in v.failed), (
                f"mistake '{variant.name}' in {gid}: expected a diagnosis with {variant.fails[gid]!r}, got {v.failed}")
            if not v.notes:
                assert v.causes == ([variant.cause] if variant.cause else []), (
                    f"mistake '{variant.name}' in {gid}: the evidence should name its own cause and no other, "
                    f"{variant.cause!r}; named {v.causes}")
        elif gid in variant.together:
            own = [c for c in v.checks if not c.together]
            assert all(c.passed for c in own), (
                f"mistake '{variant.name}' in another part cost {gid} points in its own tests: {v.failed}")
            assert any(c.together and not c.passed and variant.together[gid] in (c.diagnosis or "")
                       for c in v.checks), (
                f"mistake '{variant.name}': {gid}'s test with the learner's own parts should say "
                f"{variant.together[gid]!r}, got {v.failed}")
        else:
            assert v.score == v.points, f"mistake '{variant.name}' should not cost points in {gid}: {v.failed}"


@pytest.fixture
def cpu_hog():
    """A busy process per core for as long as the test runs: every core shared with the grading (two per core slowed
    the tests of the other worker threefold as well)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    yield
    for h in hogs:
        h.kill()
        h.wait()


# In the full tier: the hogs would slow every test running beside them in make test. On the book's worker: the book's
# pages measure speed while they build, and make no claim about a machine loaded on purpose beside them.
@pytest.mark.full
@pytest.mark.xdist_group("book")
@pytest.mark.parametrize("asg,variant", [(asg, v) for asg, v in all_variants() if isinstance(v, variants.Correct)],
                         ids=lambda x: getattr(x, "name", x))
@pytest.mark.usefixtures("cpu_hog")
def test_a_correct_alternative_gets_full_marks_on_a_loaded_machine(asg, variant):
    """The same verdict under load: speed, memory and output checks included, a correct answer graded beside busy
    processes gets full marks, unflagged, as on a quiet machine."""
    for gid, v in _grade(asg, variant.cells).items():
        assert v.score == v.points, f"correct answer '{variant.name}' lost points under load in {gid}: {v.failed}"
        assert v.status == record.GRADED, f"correct answer '{variant.name}' flagged under load in {gid}: {v.notes}"


@pytest.mark.full     # too long for make test (docs/testing.md)
def test_a_fused_attention_kernel_that_never_ends_costs_its_part_alone():
    """A kernel whose loop over the key blocks never ends loses its part after one call limit
    (KERNEL_CALL_S) and a restart of the worker, each of the part's checks saying why, and compiles still; the other
    part gets full marks. Not a known mistake of examples/variants/: the course runs those in its own processes."""
    from autograder.verdict.suites import test_fused_attention as suite

    kernel = variants.reference_sources("fused_attention")["attention_kernel"]
    loop = "    for start_n in range(0, Lk, BLOCK_N):\n"
    assert loop in kernel
    endless = kernel.replace(loop, "    start_n = 0\n    while start_n < Lk:           # start_n never advances\n")
    grading = _grading("fused_attention", {"attention_kernel": endless})
    part, other = grading.verdicts["attention_kernel_tests"], grading.verdicts["causal_attention_kernel_tests"]
    said = f"did not finish within {suite.KERNEL_CALL_S:g} s of CPU time while calling flash_attention()"
    assert other.score == other.points, other.failed
    assert 0 < part.score < part.points and part.failed and all(said in d for d in part.failed), part.failed
    spent = grading.profile["cells_s"]["attention_kernel_tests"]
    print(f"the endless kernel's part took {spent:.1f} s, the grading {grading.profile['suite_s']:.1f} s")
    # the learner's worker, one per kernel compiled, and one restart after the call that hung: the part's later checks
    # failed at once (the limit is CPU time, so the wall clock cannot say it on a loaded machine)
    started = [role for role, _ in grading.profile["workers"]]
    assert started == ["learner"] * (1 + len(suite.SIGNATURES) + 1), f"{started}: its later checks hung again"


def test_known_mistakes_cover_every_graded_cell():
    """Every graded cell has at least one known mistake that it catches."""
    for asg in ASSIGNMENTS:
        caught = {gid for v in variants.load(asg) if isinstance(v, variants.Bug) for gid in v.fails}
        graded = set(graded_cells(variants.submission(asg)))
        assert graded <= caught, f"{asg}: no known mistake for {sorted(graded - caught)}"
        assert sum(isinstance(v, variants.Correct) for v in variants.load(asg)) >= 2, asg


def test_the_large_score_tolerance_over_many_gradings():
    """Both attention large-score tests, on the inputs of 300 gradings: the reference's answers pass every time, an
    online softmax that forgets to rescale fails every time, and so does a wrong scale (it failed in 1 of 20 gradings
    while every row's softmax could saturate). The rule in-process, without a worker, to afford 300."""
    from autograder.verdict import context
    from autograder.verdict.suites import checks
    from autograder.verdict.suites import test_attention as suite
    ns = reference_namespace("attention")
    scaled_by_d = variants.executed("attention", next(v for v in variants.load("attention")
                                                      if v.name == "sdpa_scaled_by_d").cells)
    for seed in range(300):
        grading = context.Context(seed=seed)
        q, k, v = suite.large_scores(grading, 7, 9, seed=19)
        suite.close_at_large_scores(ns["scaled_dot_product_attention"](q, k, v)[0], q, k, v, "sdpa")
        with pytest.raises(checks.Diagnosis, match="is wrong"):
            suite.close_at_large_scores(scaled_by_d["scaled_dot_product_attention"](q, k, v)[0], q, k, v, "by d")
        q, k, v = suite.large_scores(grading, 20, 45, seed=59)
        suite.close_at_large_scores(ns["blockwise_attention"](q, k, v, block_size=8), q, k, v, "blockwise")
        with pytest.raises(checks.Diagnosis, match="is wrong"):
            suite.close_at_large_scores(suite.online_without_rescale(q, k, v, 8), q, k, v, "no rescale")
