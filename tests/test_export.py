"""Grades out: `nbgrader export`, plain (the course's `GradesExport`) and with the course's Canvas and Moodle plugins,
on a gradebook made with nbgrader's own API, read back as a spreadsheet and as each LMS reads its import
(tests/helpers.py); the late penalty as nbgrader's policy gives the scores now, in the exports and the class report.

The gradebook holds a past assignment, a future one, a draft (generated, never released: no due date, no submission),
four learners (one whose name reads as a spreadsheet formula, one with a comma in it), a manual score, a learner who
submitted nothing, and a learner a day late whose score was raised in the gradebook after autograde stored the `zero`
policy's penalty for the score before. The README's round (tests/test_instructor_guide.py) exports a real graded class
too.
"""
import csv
import datetime
import io
import os
import shutil
import subprocess

import pytest
from helpers import ROOT, canvas_import, moodle_import
from nbgrader.api import Gradebook

from autograder.authoring.release import BIN, tools_path
from autograder.classroom import report

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
        gb.add_student("dan", first_name="Dan", last_name="Lee, Jr.", email="@dan")
        gb.add_submission("week1", "ann", timestamp=NOW - datetime.timedelta(days=8))
        gb.add_submission("week2", "ann")
        gb.add_submission("week1", "bob", timestamp=NOW - datetime.timedelta(days=6))       # a day late
        scores = {("ann", "week1"): (4.0, 1.0), ("ann", "week2"): (2.0, 0.5), ("bob", "week1"): (1.0, 3.5)}
        for (learner, asg), (a, b) in scores.items():
            nb = gb.find_submission_notebook(asg, asg, learner)
            for g in nb.grades:
                g.auto_score = a if g.name == "a_tests" else b
        gb.find_grade("b_tests", "week1", "week1", "ann").manual_score = 2.0        # typed in formgrader
        # bob's autograde under the `zero` policy stored his score then, 4.5, as the penalty; then a manual score
        gb.find_submission_notebook("week1", "week1", "bob").late_submission_penalty = 4.5
        gb.find_grade("a_tests", "week1", "week1", "bob").manual_score = 4.0
        gb.db.commit()
    shutil.copy(d / "gradebook.db", d / "as-made.db")           # an export stores the penalties it gives
    return d


def _export(d, plugin: str | None, *extra: str) -> str:
    """`nbgrader export` with the course's `plugin` (None: plain, the course's default; "nbgrader": nbgrader's own)."""
    env = {k: v for k, v in os.environ.items() if k != "GRADEBOOK_URL"}
    env.update(GRADING_DIR=str(d), PATH=tools_path())
    out = d / f"{plugin or 'grades'}.csv"
    exporter = {None: [], "nbgrader": ["--exporter=nbgrader.plugins.CsvExportPlugin"]}.get(
        plugin, [f"--exporter=autograder.pipeline.export.{plugin}"])
    r = subprocess.run([str(BIN / "nbgrader"), "export", *exporter, f"--to={out}", *extra], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return out.read_text()


ZERO = "--LateSubmissionPlugin.penalty_method=zero"
COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email", "raw_score",
           "late_submission_penalty", "score", "max_score"]


def _rows(text: str, whole: bool = True) -> dict[tuple[str, str], dict]:
    """A CSV export read as a spreadsheet reads it: {(assignment, learner): row}; `whole`: every row has every column
    and no more (nbgrader's own export splits a name with a comma)."""
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == COLUMNS, rows[0]
    if whole:
        assert all(len(row) == len(COLUMNS) for row in rows), [row for row in rows if len(row) != len(COLUMNS)]
    return {(row[0], row[3]): dict(zip(COLUMNS, row)) for row in rows[1:] if not whole or len(row) == len(COLUMNS)}


@pytest.fixture
def copy(gradebook, tmp_path):
    """A copy of the gradebook as it was made, before any export stored a penalty in it."""
    shutil.copy(gradebook / "as-made.db", tmp_path / "gradebook.db")
    return tmp_path


def test_canvas_imports_the_released_assignments_of_the_class(gradebook):
    """Canvas finds every learner by the SIS Login ID (bob by his Canvas ID too), reads one column per released
    assignment (the draft is left out) with its points, and each score after the late penalty, with the manual score
    in it; a submission never made is 0 after the due date and empty (no grade) before it."""
    got = canvas_import(_export(gradebook, "CanvasExport"))
    assert got["assignments"] == [("week1", None), ("week2", None)]
    assert got["points"] == {"week1": 7.5, "week2": 7.5}
    assert got["learners"] == {"ann": {"week1": 6.0, "week2": 2.5}, "4711": {"week1": 7.5, "week2": None},
                               "dan": {"week1": 0.0, "week2": None}, "eve": {"week1": 0.0, "week2": None}}


def test_canvas_fills_the_assignments_it_names_and_no_name_is_a_formula(gradebook):
    text = _export(gradebook, "CanvasExport", '--CanvasExport.assignment_ids={"week1": "1234"}',
                   "--CanvasExport.section=Group A")
    got = canvas_import(text)
    assert got["assignments"] == [("week1", "1234"), ("week2", None)]
    rows = text.splitlines()
    assert rows[0] == "Student,ID,SIS User ID,SIS Login ID,Section,week1 (1234),week2"
    assert "\"'+Eve, =HYPERLINK(\"\"http://x\"\")\",,,eve,Group A,0," in rows, rows
    assert rows[2].startswith("\"Lee, Ann\",,,ann,Group A,")
    assert "\"Lee, Jr., Dan\",,,dan,Group A,0," in rows, rows


def test_moodle_imports_the_released_assignments_of_the_class(gradebook):
    text = _export(gradebook, "MoodleExport")
    assert text.splitlines()[0] == "Username,Email address,week1,week2"
    assert "dan,'@dan,0," in text.splitlines()
    got = moodle_import(text, {"ann", "bob", "dan", "eve"}, items={"week1": 7.5, "week2": 7.5})
    assert got == {"ann": {"week1": 6.0, "week2": 2.5}, "bob": {"week1": 7.5, "week2": None},
                   "dan": {"week1": 0.0, "week2": None}, "eve": {"week1": 0.0, "week2": None}}
    with pytest.raises(AssertionError, match="usermappingerror"):
        moodle_import(text, {"ann", "bob", "eve"})            # a learner the LMS does not know is refused, not lost


def test_nbgrader_s_own_narrowing_applies(gradebook):
    got = moodle_import(_export(gradebook, "MoodleExport", "--assignment=['week1']", "--student=['ann']"),
                        {"ann"}, items={"week1": 7.5})
    assert got == {"ann": {"week1": 6.0}}


def test_plain_export_writes_nbgrader_s_columns_as_csv_and_no_formula(gradebook):
    """Plain `nbgrader export` is the course's: nbgrader's columns, a row per assignment (the draft too) and learner,
    read back whole by a spreadsheet: a name with a comma stays one cell, one that reads as a formula (= + - @) is text,
    a score stays a number. nbgrader's own exporter, on the same gradebook, writes them raw: a row one cell too long,
    a formula."""
    rows = _rows(_export(gradebook, None))
    assert len(rows) == 3 * 4
    assert (rows[("week1", "eve")]["first_name"], rows[("week1", "eve")]["last_name"]) == \
        ("'=HYPERLINK(\"http://x\")", "'+Eve")
    assert (rows[("week1", "dan")]["last_name"], rows[("week1", "dan")]["email"]) == ("Lee, Jr.", "'@dan")
    ann = rows[("week1", "ann")]
    assert (ann["raw_score"], ann["late_submission_penalty"], ann["score"], ann["max_score"]) == \
        ("6.0", "0.0", "6.0", "7.5")
    assert ann["timestamp"].startswith(str(NOW - datetime.timedelta(days=8))[:16]) and ann["duedate"]
    never = rows[("draft", "ann")]
    assert (never["timestamp"], never["duedate"], never["score"]) == ("", "", "0.0")

    raw = list(csv.reader(io.StringIO(_export(gradebook, "nbgrader"))))
    assert raw[0] == COLUMNS
    assert [row for row in raw if "dan" in row and len(row) == len(COLUMNS) + 1], "nbgrader's own CSV split a name"
    assert [row for row in raw if "eve" in row and row[5].startswith("=HYPERLINK")], "nbgrader's own wrote a formula"


def test_a_late_total_is_the_policy_s_for_the_scores_now(copy):
    """bob is a day late; autograde, under the `zero` policy, stored his score then (4.5) as his penalty, and a manual
    score set in the gradebook since has raised it to 7.5. nbgrader's own export reads the stored penalty: 3.0, not
    the policy's 0. Every export of the course, and the class report, gives the penalty the policy gives 7.5, and
    stores it (nbgrader's own export then agrees); under the default policy, `none`, there is no penalty."""
    assert _rows(_export(copy, "nbgrader"), whole=False)[("week1", "bob")]["score"] == "3.0"     # 7.5 - 4.5: stale

    bob = _rows(_export(copy, None, ZERO))[("week1", "bob")]
    assert (bob["raw_score"], bob["late_submission_penalty"], bob["score"]) == ("7.5", "7.5", "0.0")
    assert _rows(_export(copy, "nbgrader"), whole=False)[("week1", "bob")]["score"] == "0.0"     # stored now
    assert canvas_import(_export(copy, "CanvasExport", ZERO))["learners"]["4711"]["week1"] == 0.0
    moodle = moodle_import(_export(copy, "MoodleExport", ZERO), {"ann", "bob", "dan", "eve"}, items={"week1": 7.5})
    assert moodle["bob"]["week1"] == 0.0 and moodle["ann"]["week1"] == 6.0               # ann was on time

    bob = _rows(_export(copy, None))[("week1", "bob")]                                  # `none`: only recorded
    assert (bob["raw_score"], bob["late_submission_penalty"], bob["score"]) == ("7.5", "0.0", "7.5")
    with Gradebook(f"sqlite:///{copy / 'gradebook.db'}") as gb:
        assert gb.find_submission_notebook("week1", "week1", "bob").late_submission_penalty is None


def test_the_class_report_shows_the_policy_s_penalty(copy, monkeypatch):
    """The class report, run where an nbgrader_config.py sets the `zero` policy, gives bob the penalty of his score
    now, 7.5, not the 4.5 autograde stored; ann, on time, none."""
    (copy / "course").mkdir()
    (copy / "course" / "nbgrader_config.py").write_text(
        'c = get_config()  # noqa: F821\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    monkeypatch.chdir(copy / "course")
    monkeypatch.delenv("GRADEBOOK_URL", raising=False)
    out = report.build(copy, "week1")
    with open(out["scores"]) as f:
        rows = {row["learner"]: row for row in csv.DictReader(f)}
    assert (rows["bob"]["total"], rows["bob"]["late penalty"], rows["bob"]["hours late"]) == ("7.5", "7.5", "24.00")
    assert (rows["ann"]["late penalty"], rows["ann"]["hours late"]) == ("", "")
