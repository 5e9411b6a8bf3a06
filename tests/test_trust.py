"""No trick of a learner's holding the grader's source gains points, through the real `nbgrader autograde`.

For the assignments with speed, memory and library checks, a class of attackers (tests/trust_attacks.py)
is graded beside a control learner who submits the same code without the tricks.  Each part of each
attacker scores no more than the control's, or scores 0 for a library version, named (proven by the reading, or
refused where it ran: autograder.inside.guard). A graded part whose own code reaches what a reading cannot follow is
flagged for the instructor with the reason (needs manual grading), and only there may a part's provisional score pass
the control's; code that runs when its cell runs is refused where it runs and noted on the parts of its cell, never
flagged.
"""
import json

import nbformat
import pytest
import torch
from helpers import prepare
from trust_attacks import (
    BIG_COMMENT,
    CLASSES,
    FLAGGED,
    FORGED,
    FOUND_NOTHING,
    LIBRARY,
    NOTED,
    PROVISIONAL,
    SEARCHER,
)

from autograder.authoring import variants
from autograder.classroom import grade
from autograder.notebooks import learner_cells, read, source_notebook
from autograder.verdict.learner import Learner, LearnerError

FAST = {"GRADER_CELL_TIMEOUT": "30", "GRADER_CALL_TIMEOUT": "30"}


def _graded(tmp_path_factory, group):
    """A class of attackers (`group`: an assignment, or assignment/class) graded in one run."""
    asg = group.split("/")[0]
    d = tmp_path_factory.mktemp(f"trust-{group.replace('/', '-')}")
    prepare(d, [asg])
    control = CLASSES[group]["control"]
    learners = {name: {**control, **tricks} for name, tricks in CLASSES[group].items()}
    if asg == "attention":
        learners["honest"], learners["searcher"], learners["big_comment"] = {}, SEARCHER, BIG_COMMENT
    for learner, cells in learners.items():
        grade.submit(d, learner, asg, _notebook(asg, cells))
    r = grade.autograde(d, asg, capture_output=True, text=True, env_extra=FAST)
    rows = {}
    for row in grade.scores(d, [asg]):
        rows.setdefault(row.learner, {})[row.cell] = row
    return r, rows, d


def _notebook(asg, cells: dict):
    """The learner's notebook: the release with these solution cells, and a cell of its own tagged `setup` (the
    `__setup__` entry) after the course's setup cell."""
    cells = dict(cells)
    added = cells.pop("__setup__", None)
    nb = variants.submission(asg, cells)
    if added:
        at = next(i for i, c in enumerate(nb.cells) if "setup" in c.metadata.get("tags", []))
        nb.cells.insert(at + 1, nbformat.v4.new_code_cell(added, metadata={"tags": ["setup"]}))
    return nb


@pytest.fixture(scope="module")
def attention(tmp_path_factory):
    return _graded(tmp_path_factory, "attention")


@pytest.fixture(scope="module")
def others(tmp_path_factory):
    return {group: _graded(tmp_path_factory, group)
            for group in ("residual", "residual/data", "transformer", "transformer/pasted")}


def _check(asg, r, rows):
    assert set(rows) >= set(CLASSES[asg]), (sorted(rows), r.stderr[-3000:])
    rows = {learner: cells for learner, cells in rows.items() if learner in CLASSES[asg]}
    control = rows["control"]
    print(f"\n{asg}: learner, total score (control's {sum(c.score or 0 for c in control.values()):g}), flagged")
    for attacker, cells in rows.items():
        print(f"  {attacker:34s} {sum(c.score or 0 for c in cells.values()):6.2f} / "
              f"{sum(c.points for c in cells.values()):g}  {any(c.needs_manual_grade for c in cells.values())}")
    for attacker in CLASSES[asg]:
        if attacker == "control":
            continue
        for cell, row in rows[attacker].items():
            assert row.points == control[cell].points
            proven = LIBRARY.get(attacker, {}).get(cell)
            if proven:
                assert row.score == 0 and proven in (row.comment or ""), (attacker, cell, row)
            elif cell not in PROVISIONAL.get(attacker, ()):
                assert row.score is not None and row.score <= control[cell].score, (attacker, cell, row, control[cell])
            said, cells = FLAGGED.get(attacker, (None, set()))
            if said and cell in cells:
                assert row.needs_manual_grade and said in (row.comment or ""), (attacker, cell, row)
            else:
                assert not row.needs_manual_grade, (attacker, cell, row)
            noted, cells = NOTED.get(attacker, (None, set()))
            if noted and cell in cells:
                assert noted in (row.comment or ""), (attacker, cell, row)


@pytest.mark.xdist_group("trust-attention")
def test_no_attention_trick_gains_anything(attention):
    r, rows, _ = attention
    assert all(row.score == row.points for row in rows["honest"].values()), rows["honest"]
    control = rows["control"]
    assert 4 < control["scaled_dot_product_attention_tests"].score < 5, "a loop over queries loses the speed points"
    assert control["blockwise_attention_tests"].score < 5, "the whole score matrix loses the memory points"
    _check("attention", r, rows)


@pytest.mark.xdist_group("trust-attention")
def test_every_grade_is_recorded_and_no_line_of_the_notebook_s_run_is_forged(attention):
    """A learner whose code kills the shared worker of the course's parts during its timed runs is graded (no
    fault); the kernel that writes results into its parent's pipe reaches nothing, and no forged line is kept; an
    honest solution cell with a 1.3 MB comment gets full marks."""
    r, rows, d = attention
    assert "GraderFault" not in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    assert all(row.score is not None for cells in rows.values() for row in cells.values())
    assert all(row.score == row.points for row in rows["big_comment"].values()), rows["big_comment"]
    nb = nbformat.read(str(d / "autograded" / "kills_the_parts_forges_feedback" / "attention" / "attention.ipynb"),
                       as_version=4)
    shown = json.dumps([cell.get("outputs", []) for cell in nb.cells])
    assert FORGED not in shown and "the grader's pipe could not be reached" in shown, shown[-3000:]


@pytest.mark.xdist_group("trust-attention")
def test_the_course_code_never_enters_the_learner_s_process(attention):
    """A part graded with the course's parts searches its own process for the course's code, and finds none. Graded,
    the search is refused where it runs (no files, no garbage collector: the learner is told so); so it runs as the
    grader's own probes do, in a worker without the guards, the course's parts serving it as they serve a grading."""
    _, rows, _ = attention
    comment = rows["searcher"]["MultiHeadAttention_tests"].comment or ""
    assert "is not allowed in the course's code" in comment and rows["searcher"]["MultiHeadAttention_tests"].score \
        < rows["control"]["MultiHeadAttention_tests"].score, comment
    learner = Learner(learner_cells(variants.submission("attention", SEARCHER)), guarded=False)
    course = Learner(learner_cells(read(source_notebook("attention"))), role="course parts")
    try:
        mha = learner.new("MultiHeadAttention", 4, 1)
        with learner.course_parts(["scaled_dot_product_attention"], course), \
                pytest.raises(LearnerError, match="searched the process") as found:
            mha(torch.randn(2, 3, 4))
        assert FOUND_NOTHING in str(found.value), found.value
    finally:
        learner.close()
        course.close()


@pytest.mark.xdist_group("trust-others")
def test_no_residual_or_model_trick_gains_anything(others):
    for asg, (r, rows, _) in others.items():
        if asg != "residual/data":
            _check(asg, r, rows)
    residual, transformer = others["residual"][1], others["transformer"][1]
    assert residual["control"]["TransformerBlock_tests"].score < residual["control"]["TransformerBlock_tests"].points
    pasted = others["transformer/pasted"][1]["right_where_looked"]["TinyTransformer_tests"].comment or ""
    assert "scaled_dot_product_attention" in pasted and "wrong at sizes drawn for this grading" in pasted, pasted
    r, _, d = others["transformer"]
    assert "GraderFault" not in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    heavy = (d / "autograded" / "heavy_drawing" / "transformer" / "transformer.ipynb").read_text()
    assert "not drawn: your traced module has" in heavy, "a graph heavy only while traced is not laid out"
    fake = transformer["knows_the_task"]["TinyTransformer_tests"]
    assert fake.score < fake.points / 2, ("a model that knows the task instead of learning it keeps under half the "
                                          "points")


@pytest.mark.xdist_group("trust-others")
def test_a_block_that_changes_its_input_only_under_autograd_gains_nothing(others):
    """The caller's tensor changed only when autograd is on, beside the same write at every call: every check that
    compares the arguments after a call makes one with autograd on."""
    r, rows, _ = others["residual/data"]
    _check("residual/data", r, rows)
