"""Grades out to an LMS: `nbgrader export` with the course's Canvas and Moodle plugins, on a gradebook made with
nbgrader's own API, read back as each LMS reads its import (tests/helpers.py).

The gradebook holds a past assignment, a future one, a draft (generated, never released: no due date, no submission),
three learners (one whose name reads as a spreadsheet formula), a submission with a late penalty, a manual score, and
a learner who submitted nothing. The README's round (tests/test_instructor_guide.py) exports a real graded class too.
"""
import datetime
import os
import subprocess

import pytest
from helpers import ROOT, canvas_import, moodle_import
from nbgrader.api import Gradebook

from autograder.authoring.release import BIN, tools_path

NOW = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", tools_path())                # a new gradebook is made by the project's alembic
        Gradebook(f"sqlite:///{d / 'gradebook.db'}").close()
    with Gradebook(f"sqlite:///{d / 'gradebook.db'}") as gb:
        for name, due in (("week1", NOW - datetime.timedelta(days=7)), ("week2", NOW + datetime.timedelta(days=7)),
                          ("draft", None)):
            gb.add_assignment(name, duedate=due)
            gb.add_notebook(name, name)
            for cell, points in (("a_tests", 4.0), ("b_tests", 3.5)):
                gb.add_grade_cell(cell, name, name, max_score=points, cell_type="code")
        gb.add_student("ann", first_name="Ann", last_name="Lee", email="ann@example.org")
        gb.add_student("bob", lms_user_id="4711")
        gb.add_student("eve", first_name="=HYPERLINK(\"http://x\")", last_name="+Eve")
        gb.add_submission("week1", "ann")
        gb.add_submission("week2", "ann")
        gb.add_submission("week1", "bob")
        scores = {("ann", "week1"): (4.0, 1.0), ("ann", "week2"): (2.0, 0.5), ("bob", "week1"): (1.0, 3.5)}
        for (learner, asg), (a, b) in scores.items():
            nb = gb.find_submission_notebook(asg, asg, learner)
            for g in nb.grades:
                g.auto_score = a if g.name == "a_tests" else b
        gb.find_grade("b_tests", "week1", "week1", "ann").manual_score = 2.0        # typed in formgrader
        gb.find_submission_notebook("week1", "week1", "bob").late_submission_penalty = 1.5
        gb.db.commit()
    return d


def _export(d, plugin: str, *extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "GRADEBOOK_URL"}
    env.update(GRADING_DIR=str(d), PATH=tools_path())
    out = d / f"{plugin}.csv"
    r = subprocess.run([str(BIN / "nbgrader"), "export", f"--exporter=autograder.pipeline.export.{plugin}",
                        f"--to={out}", *extra], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return out.read_text()


def test_canvas_imports_the_released_assignments_of_the_class(gradebook):
    """Canvas finds every learner by the SIS Login ID (bob by his Canvas ID too), reads one column per released
    assignment (the draft is left out) with its points, and each score after the late penalty, with the manual score
    in it; a submission never made is 0 after the due date and empty (no grade) before it."""
    got = canvas_import(_export(gradebook, "CanvasExport"))
    assert got["assignments"] == [("week1", None), ("week2", None)]
    assert got["points"] == {"week1": 7.5, "week2": 7.5}
    assert got["learners"] == {"ann": {"week1": 6.0, "week2": 2.5}, "4711": {"week1": 3.0, "week2": None},
                               "eve": {"week1": 0.0, "week2": None}}


def test_canvas_fills_the_assignments_it_names_and_no_name_is_a_formula(gradebook):
    text = _export(gradebook, "CanvasExport", '--CanvasExport.assignment_ids={"week1": "1234"}',
                   "--CanvasExport.section=Group A")
    got = canvas_import(text)
    assert got["assignments"] == [("week1", "1234"), ("week2", None)]
    rows = text.splitlines()
    assert rows[0] == "Student,ID,SIS User ID,SIS Login ID,Section,week1 (1234),week2"
    assert "\"'+Eve, =HYPERLINK(\"\"http://x\"\")\",,,eve,Group A,0," in rows, rows
    assert rows[2].startswith("\"Lee, Ann\",,,ann,Group A,")


def test_moodle_imports_the_released_assignments_of_the_class(gradebook):
    text = _export(gradebook, "MoodleExport")
    assert text.splitlines()[0] == "Username,Email address,week1,week2"
    got = moodle_import(text, {"ann", "bob", "eve"}, items={"week1": 7.5, "week2": 7.5})
    assert got == {"ann": {"week1": 6.0, "week2": 2.5}, "bob": {"week1": 3.0, "week2": None},
                   "eve": {"week1": 0.0, "week2": None}}
    with pytest.raises(AssertionError, match="usermappingerror"):
        moodle_import(text, {"ann", "bob"})                   # a learner the LMS does not know is refused, not lost


def test_nbgrader_s_own_narrowing_applies(gradebook):
    got = moodle_import(_export(gradebook, "MoodleExport", "--assignment=['week1']", "--student=['ann']"),
                        {"ann"}, items={"week1": 7.5})
    assert got == {"ann": {"week1": 6.0}}
