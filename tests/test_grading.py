"""A class graded end to end with the real `nbgrader autograde` and `generate_feedback`: the example class as
`make` grades it, notebooks that nbgrader alone cannot grade, and nbgrader's commands on a fresh grading folder."""
import copy
import os
import re
import subprocess
import sys

import nbformat
import pytest
from helpers import ROOT, leaks, prepare, suite_lines

from autograder.authoring import release, variants
from autograder.classroom import grade
from autograder.classroom.grade_examples import roster
from autograder.verdict import hidden

ASG = "positional_encoding"
pytestmark = pytest.mark.xdist_group("class")
POINTS = {"sinusoidal_encoding_tests": 4.0, "rope_tests": 4.0, "alibi_bias_tests": 3.0}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """`make grade`'s own step, for the example class's assignment and for one nobody in it submits."""
    d = tmp_path_factory.mktemp("grading") / "fresh"
    r = subprocess.run([sys.executable, "-m", "autograder.classroom.grade_examples", ASG, "attention",
                        "--grading-dir", str(d)],
                       cwd=ROOT, capture_output=True, text=True)
    return d, r, r


def test_make_grade_prints_no_error(graded_class):
    _, r, _ = graded_class
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert not [line for line in out.splitlines() if "ERROR" in line], out[-3000:]
    assert "attention: no learner of the example class submits it" in out


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
        # The math is typeset in the page, no script runs, nothing comes from another host.
        assert not re.search(r'<(script|link|img)\b[^>]*(src|href)="(https?:)?//', html), learner
        assert "<script" not in html and "<mjx-container" in html
        if answers[ASG] not in ("reference", "unanswered"):
            bug = {v.name: v for v in variants.load(ASG)}[answers[ASG]]
            for diagnosis in bug.fails.values():
                assert diagnosis in html, (learner, diagnosis)


def test_no_hidden_test_name_reaches_a_learner(graded_class):
    """Neither the autograded notebook (its metadata included) nor the feedback page names a hidden test."""
    d, _, _ = graded_class
    names = set(re.findall(r"^def (test_\w+)", hidden.suite_path(ASG).read_text(), re.M))
    assert len(names) > 10
    for learner in roster():
        for page in (d / "autograded" / learner / ASG / f"{ASG}.ipynb", d / "feedback" / learner / ASG / f"{ASG}.html"):
            text = page.read_text()
            assert not [n for n in names if n in text], (learner, page.name)


def test_the_record_says_what_was_applied(graded_class):
    """Each grading's stored record holds the protections its sandbox applied, read while the sandbox existed: on a
    machine that gives them all, every one is there, and no note says a grading went without one."""
    from autograder.sandbox import box
    from autograder.verdict import record

    if box.missing_protections():
        pytest.skip(f"this machine lacks {box.missing_protections()}")
    d, _, _ = graded_class
    for learner in roster():
        rec = record.load(record.path(d, learner, ASG, ASG))
        assert rec is not None and rec["gradable"], learner
        assert rec["protections"] and all(rec["protections"].values()), (learner, rec["protections"])
        assert not [n for n in rec.get("notes", []) if "graded without" in n], (learner, rec.get("notes"))


def test_regrading_gives_the_same_grades(graded_class):
    d, _, _ = graded_class
    before = {(r.learner, r.cell): r.score for r in grade.scores(d, [ASG])}
    learner = next(iter(roster()))
    r = grade.autograde(d, ASG, learner=learner, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    after = {(r.learner, r.cell): r.score for r in grade.scores(d, [ASG])}
    assert after == before


# -- notebooks nbgrader alone cannot grade (a KeyError in DeduplicateIds or OverwriteCells) ----------------
def _copied_cell():
    """An honest learner who copied the solution cell of sinusoidal_encoding: a wrong first try above, the
    answer in the copy below it (in notebook order, the copy is what the notebook defines)."""
    nb = variants.submission(ASG)
    i, cell = next((i, c) for i, c in enumerate(nb.cells)
                   if c.metadata.get("nbgrader", {}).get("grade_id") == "sinusoidal_encoding")
    first = copy.deepcopy(cell)
    first.id = "copy-of-the-solution"
    first.source = ("def sinusoidal_encoding(seq_len, d_model, base=10000.0):\n"
                    "    return torch.zeros(seq_len, d_model)\n")
    nb.cells.insert(i, first)
    return nb


def _lost_grade_ids():
    """The solution cell of rope and the graded cell of alibi_bias without their grade_id."""
    nb = variants.submission(ASG)
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") in ("rope", "alibi_bias_tests"):
            del c.metadata["nbgrader"]["grade_id"]
    return nb


@pytest.fixture(scope="module")
def repaired(tmp_path_factory):
    d = tmp_path_factory.mktemp("repaired")
    prepare(d, [ASG])
    grade.submit(d, "copycat", ASG, _copied_cell())
    grade.submit(d, "nameless", ASG, _lost_grade_ids())
    r = grade.autograde(d, ASG, capture_output=True, text=True)
    return d, r, _by_learner(grade.scores(d, [ASG]))


@pytest.mark.parametrize("learner, note", [("copycat", "holds the cell sinusoidal_encoding more than once"),
                                           ("nameless", "lost its grading id")])
def test_a_repaired_notebook_keeps_its_score(repaired, learner, note):
    d, r, rows = repaired
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "KeyError" not in r.stdout + r.stderr
    assert {c: rows[learner][c].score for c in POINTS} == POINTS, {c: rows[learner][c].comment for c in POINTS}
    assert all(note in (rows[learner][c].comment or "") for c in POINTS), rows[learner]["rope_tests"].comment
    graded = nbformat.read(str(d / "autograded" / learner / ASG / f"{ASG}.ipynb"), as_version=4)
    assert any(note in c.source.replace("\\", "") for c in graded.cells if c.cell_type == "markdown")   # as text


# -- nbgrader's commands right after `make install` or `make clean` ----------------------------------------
def test_nbgrader_commands_work_on_a_fresh_grading_folder(tmp_path):
    """No grading folder yet: nbgrader_config.py makes it, so the gradebook can be created in it."""
    fresh = tmp_path / "not" / "made" / "yet"
    env = {k: v for k, v in os.environ.items() if k != "GRADEBOOK_URL"}
    env.update(GRADING_DIR=str(fresh), PATH=release.tools_path())
    nbgrader = str(release.BIN / "nbgrader")
    out = {}
    for args in (["generate_assignment", ASG, "--force", f"--CourseDirectory.release_directory={tmp_path / 'release'}"],
                 ["db", "student", "add", "ada"], ["db", "assignment", "list"], ["db", "student", "list"]):
        r = subprocess.run([nbgrader, *args], cwd=ROOT, env=env, capture_output=True, text=True)
        out[" ".join(args[:3])] = text = r.stdout + r.stderr
        assert r.returncode == 0 and "ERROR" not in text, (args, text[-2000:])
    assert ASG in out["db assignment list"] and "ada" in out["db student list"]
    assert (fresh / "gradebook.db").is_file()
    assert (tmp_path / "release" / ASG / f"{ASG}.ipynb").is_file()
