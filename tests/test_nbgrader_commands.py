"""nbgrader's own commands as the course configures them (autograder.pipeline.configure): `release_feedback` for a
class not all of whom came through the exchange, run for real on feedback folders as generate_feedback leaves them;
the one SQLAlchemy warning nbgrader's gradebook gives at each new submission, silenced, and no other. The README's
round (tests/test_instructor_guide.py) runs both commands on a graded class too.
"""
import os
import subprocess
import warnings
from pathlib import Path

import pytest
from nbgrader.api import Gradebook
from nbgrader.utils import notebook_hash
from sqlalchemy.exc import SAWarning
from traitlets.config import Config

from autograder.authoring.release import BIN, tools_path
from autograder.pipeline import configure

ROOT = Path(__file__).resolve().parent.parent
ASG = "positional_encoding"
COURSE = "inside-the-transformer"
SECRET = "c0ffee" * 8
SILENCED = ("Object of type <SubmittedAssignment> not in session, add operation along 'Assignment.submissions' will "
            "not proceed")


@pytest.fixture
def graded(tmp_path) -> Path:
    """A grading folder whose feedback generate_feedback wrote: ada submitted through the exchange (her secret and
    time travel with it), ben came from an LMS's zip (a time, no secret), cleo's notebook was put in place by hand."""
    for learner, files in (("ada", ("timestamp.txt", "submission_secret.txt")), ("ben", ("timestamp.txt",)),
                           ("cleo", ())):
        folder = tmp_path / "grading" / "feedback" / learner / ASG
        folder.mkdir(parents=True)
        (folder / f"{ASG}.html").write_text(f"<p>feedback for {learner}</p>")
        for name in files:
            (folder / name).write_text(SECRET if name == "submission_secret.txt" else "2026-12-15 15:00:00.000000 UTC")
    (tmp_path / "exchange").mkdir()
    (tmp_path / "exchange").chmod(0o777)              # as release_assignment makes it
    return tmp_path


def _release_feedback(d: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GRADEBOOK_URL"}
    env.update(GRADING_DIR=str(d / "grading"), PATH=tools_path())
    return subprocess.run([str(BIN / "nbgrader"), "release_feedback", ASG, f"--Exchange.root={d / 'exchange'}",
                           *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _released(d: Path) -> list[str]:
    return sorted(p.name for p in (d / "exchange" / COURSE / "feedback").glob("*"))


def test_release_feedback_names_who_did_not_come_through_the_exchange(graded):
    """Before releasing anything, one error names every learner without the exchange's secret and gives the command
    that leaves them out (with those already left out); no traceback."""
    r = _release_feedback(graded)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "FileNotFoundError" not in r.stderr, r.stderr[-3000:]
    assert "ben, cleo did not submit through the exchange" in r.stderr, r.stderr[-3000:]
    assert "Nothing was released" in r.stderr
    assert f"nbgrader release_feedback {ASG} --CourseDirectory.student_id_exclude=ben,cleo\n" in r.stderr
    assert _released(graded) == []

    r = _release_feedback(graded, "--CourseDirectory.student_id_exclude=ben")
    assert r.returncode != 0 and "cleo did not submit through the exchange" in r.stderr, r.stderr[-3000:]
    assert "--CourseDirectory.student_id_exclude=ben,cleo\n" in r.stderr
    assert _released(graded) == []


def test_release_feedback_releases_the_others_once_they_are_left_out(graded):
    r = _release_feedback(graded, "--CourseDirectory.student_id_exclude=ben,cleo")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Releasing feedback for student 'ada'" in r.stderr
    assert _released(graded) == [notebook_hash(secret=SECRET, notebook_id=ASG) + ".html"]


def test_a_new_submission_warns_only_without_the_course_s_configuration(tmp_path, monkeypatch):
    """nbgrader 0.9.6's `add_submission` (autograde's, for each new submission) makes SQLAlchemy 2 warn three times;
    once the course's configuration is loaded those three are silenced, and any other SQLAlchemy warning still shows."""
    monkeypatch.setenv("PATH", tools_path())              # a new gradebook is made by the project's alembic
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        gb.add_assignment(ASG)
        gb.add_notebook(ASG, ASG)
        gb.add_grade_cell("a_tests", ASG, ASG, max_score=1.0, cell_type="code")
        gb.add_student("ada")
        gb.add_student("ben")
        with warnings.catch_warnings(record=True) as plain:
            warnings.simplefilter("always")
            gb.add_submission(ASG, "ada")
        with warnings.catch_warnings(record=True) as configured:
            warnings.simplefilter("always")
            configure(Config())
            gb.add_submission(ASG, "ben")
            for module, what in (("nbgrader.api", "Object of type <Grade> not in session, add operation along "
                                                  "'Notebook.grades' will not proceed"),
                                 ("elsewhere", SILENCED)):
                warnings.warn_explicit(what, SAWarning, "api.py", 1, module=module)
        assert len(gb.find_submission(ASG, "ben").notebooks[0].grades) == 1       # nothing of it was lost
    said = [str(w.message) for w in plain if issubclass(w.category, SAWarning)]
    assert len(said) == 3 and [s for s in said if s.startswith(SILENCED)], said
    assert [str(w.message) for w in configured] == ["Object of type <Grade> not in session, add operation along "
                                                    "'Notebook.grades' will not proceed", SILENCED]
