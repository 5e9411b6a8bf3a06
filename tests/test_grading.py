"""A class graded end to end with the real `nbgrader autograde` and `generate_feedback`."""
import re

import pytest

from autograder import grade, variants
from autograder.grade_examples import example_submission, roster
from test_release import leaks, suite_lines

ASG = "positional_encoding"
pytestmark = pytest.mark.xdist_group("class")
POINTS = {"sinusoidal_encoding_tests": 4.0, "rope_tests": 4.0, "alibi_bias_tests": 3.0}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    d = tmp_path_factory.mktemp("grading")
    grade.prepare(d, [ASG])
    for learner, answers in roster().items():
        grade.submit(d, learner, ASG, example_submission(ASG, answers[ASG]))
    r = grade.autograde(d, ASG, capture_output=True, text=True)
    f = grade.feedback(d, ASG, capture_output=True, text=True)
    return d, r, f


def _by_learner(rows):
    out = {}
    for r in rows:
        out.setdefault(r.learner, {})[r.cell] = r
    return out


def test_gradebook_holds_the_expected_scores(graded_class):
    d, r, _ = graded_class
    assert r.returncode == 0, r.stderr[-3000:]
    rows = _by_learner(grade.scores(d, [ASG]))
    assert set(rows) == set(roster())
    for learner, answers in roster().items():
        got = rows[learner]
        assert {c: got[c].points for c in got} == POINTS
        answer = answers[ASG]
        for cell, points in POINTS.items():
            score = got[cell].score
            if answer == "reference":
                assert score == points, (learner, cell, got[cell].comment)
            elif answer == "unanswered":
                assert score == 0, (learner, cell)
            else:
                bug = {v.name: v for v in variants.load(ASG)}[answer]
                if cell in bug.fails:
                    assert 0 <= score < points, (learner, cell)
                    assert bug.fails[cell] in (got[cell].comment or ""), got[cell].comment
                else:
                    assert score == points, (learner, cell, got[cell].comment)


def test_feedback_names_the_mistake_and_hides_the_tests(graded_class):
    d, _, f = graded_class
    assert f.returncode == 0, f.stderr[-3000:]
    secrets = suite_lines()   # learners' own notebooks may hold solution code
    for learner, answers in roster().items():
        page = d / "feedback" / learner / ASG / f"{ASG}.html"
        html = page.read_text()
        assert not leaks(html, secrets), learner
        # MathJax comes from the grading folder itself, nothing from another host.
        assert not re.search(r'<(script|link|img)\b[^>]*(src|href)="(https?:)?//', html), learner
        assert 'src="../../mathjax/tex-chtml.js"' in html
        assert (page.parent / "../../mathjax/tex-chtml.js").resolve().is_file()
        if answers[ASG] not in ("reference", "unanswered"):
            bug = {v.name: v for v in variants.load(ASG)}[answers[ASG]]
            for diagnosis in bug.fails.values():
                assert diagnosis in html, (learner, diagnosis)


def test_regrading_gives_the_same_grades(graded_class):
    d, _, _ = graded_class
    before = {(r.learner, r.cell): r.score for r in grade.scores(d, [ASG])}
    learner = next(iter(roster()))
    r = grade.autograde(d, ASG, learner=learner, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    after = {(r.learner, r.cell): r.score for r in grade.scores(d, [ASG])}
    assert after == before
