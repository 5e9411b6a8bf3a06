"""The pipeline's preprocessors (autograder/pipeline), each on its own, as nbgrader tests its own: a small notebook
made with nbformat, the `resources` nbgrader gives (`{"nbgrader": {"db_url", "assignment", "notebook", "student"}}`),
`.preprocess(nb, resources)` called, and the result read back from the notebook, the resources, a real SQLite gradebook
(nbgrader's API) and the log. Each test gets a fresh copy of one empty gradebook, made once by the project's alembic.

Autograde's steps: `SaveGrades` (a reviewed score stays reviewed), `SaveDiagnoses` (the verdicts as comments, flagged
parts to grade by hand), `Progress` (its line per graded notebook) and `HiddenSuites`' refusal of an assignment that
has no hidden suite; the learner's output sanitized (`sanitize`). The feedback's steps: `OmitCheckCell`,
`FeedbackGrades` (the instructor's score and comment, the verdict rendered again, the total after the late penalty
the policy gives the scores now), `BookLinks`, `PageStyles`; and `LatePenalties`, that penalty stored.

Left to the tests that grade real notebooks (test_grading.py, test_nbgrader_commands.py, test_class.py): a notebook
run by `SandboxedExecute` (a sandboxed kernel that imports torch) and scored by `HiddenSuites` (an assignment's hidden
suite against a sandboxed worker), too slow for a unit test; the exporters `SubmissionReader`, `FeedbackHTML` and
`GradesExport` and the exchange's `ReleaseFeedback`, which are not preprocessors.
"""
import datetime
import logging
import re
import shutil
import time

import pytest
from nbconvert.exporters import NotebookExporter
from nbconvert.exporters.exporter import ResourcesDict
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from nbgrader.api import Gradebook
from nbgrader.converters import Autograde, GenerateFeedback
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from autograder.authoring.release import tools_path
from autograder.notebooks import CHECK_CELL
from autograder.pipeline import progress
from autograder.pipeline.diagnoses import SaveDiagnoses
from autograder.pipeline.feedback import TEMPLATES, BookLinks, FeedbackGrades, OmitCheckCell, PageStyles
from autograder.pipeline.grades import SaveGrades
from autograder.pipeline.late import LatePenalties
from autograder.pipeline.progress import Progress
from autograder.pipeline.sanitize import sanitize
from autograder.pipeline.score import HiddenSuites, verdict_outputs
from autograder.verdict import record
from autograder.verdict.record import FLAGGED, RECORD, Check, GraderFault, Grading, Verdict

ASG = "ps1"                  # the assignment, and its one notebook
LEARNERS = ("ada", "ben", "cleo")
DUE = datetime.datetime(2024, 3, 1, 12, 0)
POINTS = {"a_tests": 3.0, "b_tests": 2.0}
LOG = logging.getLogger("test_pipeline")
# nbgrader 0.9.6's `add_submission` under SQLAlchemy 2 (autograder.pipeline.configure silences the same in autograde)
pytestmark = pytest.mark.filterwarnings(r"ignore:Object of type <Submitted(Assignment|Notebook)> not in session"
                                        r":sqlalchemy.exc.SAWarning")

PASSED = Verdict("a_tests", 3.0, 3.0, checks=[Check("shape", 1, True)])
HALF = Verdict("b_tests", 2.0, 1.0, checks=[Check("small", 1, True),
                                            Check("large", 1, False, diagnosis="returns a list, not a tensor")])
UNMEASURED = Verdict("b_tests", 2.0, 0.0, status=FLAGGED, notes=["its time could not be measured"])


@pytest.fixture(scope="module")
def empty_gradebook(tmp_path_factory):
    path = tmp_path_factory.mktemp("gradebook") / "gradebook.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", tools_path())                # a new gradebook is made by the project's alembic
        Gradebook(f"sqlite:///{path}").close()
    return path


@pytest.fixture
def course(tmp_path, empty_gradebook):
    """A course folder (its root) whose gradebook holds the assignment: one notebook, two parts (the solution cells
    `a` and `b`, each scored by its graded cell `a_tests`, `b_tests`), three learners, no submission yet."""
    shutil.copy(empty_gradebook, tmp_path / "gradebook.db")
    with Gradebook(url(tmp_path)) as gb:
        gb.add_assignment(ASG, duedate=DUE)
        gb.add_notebook(ASG, ASG)
        for part, points in POINTS.items():
            gb.add_solution_cell(part.removesuffix("_tests"), ASG, ASG)
            gb.add_grade_cell(part, ASG, ASG, max_score=points, cell_type="code")
        for learner in LEARNERS:
            gb.add_student(learner)
    return tmp_path


def url(root) -> str:
    return f"sqlite:///{root / 'gradebook.db'}"


def resources(root, learner: str = "ben", **more) -> dict:
    return {"nbgrader": {"db_url": url(root), "assignment": ASG, "notebook": ASG, "student": learner}, **more}


def submit(root, learner: str, scores: dict, late: bool = False, penalty: float | None = None):
    """`learner`'s submission graded: each part's automatic score, as autograde stores it (and the late penalty it
    stored)."""
    with Gradebook(url(root)) as gb:
        gb.add_submission(ASG, learner, timestamp=DUE + datetime.timedelta(days=1 if late else -1))
        for part, score in scores.items():
            grade = gb.find_grade(part, ASG, ASG, learner)
            grade.auto_score, grade.needs_manual_grade = score, False
        gb.find_submission_notebook(ASG, ASG, learner).late_submission_penalty = penalty
        gb.db.commit()


def cell(kind: str, source: str = "", **nbgrader):
    c = new_code_cell(source) if kind == "code" else new_markdown_cell(source)
    if nbgrader:
        c.metadata["nbgrader"] = {"grade": False, "solution": False, "locked": False, "task": False,
                                  "schema_version": 3, **nbgrader}
    return c


def graded_notebook(*verdicts: Verdict):
    """The autograded notebook: each part's solution cell, then its graded cell holding the verdict's outputs."""
    cells = [cell("markdown", "# Problem set 1", locked=True, grade_id="intro")]
    for v in verdicts:
        part = v.grade_id.removesuffix("_tests")
        cells.append(cell("code", "def f(x):\n    return x\n", solution=True, grade_id=part))
        tests = cell("code", "# hidden tests", grade=True, locked=True, grade_id=v.grade_id, points=v.points)
        tests.outputs = verdict_outputs(v)
        cells.append(tests)
    return new_notebook(cells=cells)


def grade_of(root, part: str, learner: str = "ben"):
    """(auto score, manual score, needs manual grade) of a part in the gradebook."""
    with Gradebook(url(root)) as gb:
        g = gb.find_grade(part, ASG, ASG, learner)
        return g.auto_score, g.manual_score, g.needs_manual_grade


def comment_of(root, part: str, learner: str = "ben"):
    with Gradebook(url(root)) as gb:
        return gb.find_comment(part, ASG, ASG, learner).auto_comment


def set_grade(root, part: str, learner: str = "ben", **fields):
    with Gradebook(url(root)) as gb:
        grade = gb.find_grade(part, ASG, ASG, learner)
        for name, value in fields.items():
            setattr(grade, name, value)
        gb.db.commit()


# -- autograde ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("before,typed,needs,now,expected", [
    (1.0, 2.0, False, 1.0, False),        # reviewed, its automatic score unchanged: stays reviewed
    (1.0, 2.0, False, 0.5, True),         # reviewed, then the learner's answer scores otherwise: review it again
    (1.0, 2.0, True, 1.0, True),          # typed, not yet marked reviewed: still to review
    (1.0, None, False, 0.5, False),       # no score typed: the automatic one counts, nothing to review
], ids=["reviewed-unchanged", "reviewed-changed", "typed-unreviewed", "automatic"])
def test_save_grades_keeps_a_reviewed_grade_reviewed_while_its_automatic_score_is_unchanged(
        course, before, typed, needs, now, expected):
    """SaveGrades stores each graded cell's automatic score, keeps the score the instructor typed, and leaves a grade
    the instructor reviewed off formgrader's list to grade by hand unless its automatic score changed."""
    submit(course, "ben", {"a_tests": 3.0, "b_tests": before})
    set_grade(course, "b_tests", manual_score=typed, needs_manual_grade=needs)
    half_now = Verdict("b_tests", 2.0, now)
    SaveGrades().preprocess(graded_notebook(PASSED, half_now), resources(course))
    assert grade_of(course, "b_tests") == (now, typed, expected)
    assert grade_of(course, "a_tests") == (3.0, None, False)


def test_save_diagnoses_writes_each_verdict_as_the_comment_of_the_part_it_scores(course):
    """SaveDiagnoses writes each verdict's comment (its failed checks with their cost, or that all passed) as the
    gradebook comment of the solution cell its graded cell scores; a verdict of a part the notebook has no solution
    cell of writes nothing, and raises nothing."""
    submit(course, "ben", {"a_tests": 3.0, "b_tests": 1.0})
    rec = Grading({"a_tests": PASSED, "b_tests": HALF, "c_tests": Verdict("c_tests", 1.0, 1.0)}).to_dict()
    SaveDiagnoses().preprocess(graded_notebook(PASSED, HALF), resources(course, **{RECORD: rec}))
    assert comment_of(course, "a") == "all hidden tests passed (3/3)"
    assert comment_of(course, "b") == "returns a list, not a tensor (-1 points)"
    assert grade_of(course, "b_tests")[2] is False          # graded, not flagged: nothing to grade by hand


def test_save_diagnoses_flags_a_part_for_manual_grading_unless_a_score_was_typed(course):
    """A flagged verdict (the grader could not score the part) puts its grade on formgrader's list to grade by hand,
    for each learner whose grade holds no score the instructor typed; a typed score stands as SaveGrades left it."""
    rec = Grading({"a_tests": PASSED, "b_tests": UNMEASURED}).to_dict()
    for learner, typed in (("ada", None), ("ben", 1.5)):
        submit(course, learner, {"a_tests": 3.0, "b_tests": 0.0})
        set_grade(course, "b_tests", learner, manual_score=typed)
        SaveDiagnoses().preprocess(graded_notebook(PASSED, UNMEASURED),
                                   resources(course, learner, **{RECORD: rec}))
    assert grade_of(course, "b_tests", "ada") == (0.0, None, True)
    assert grade_of(course, "b_tests", "ben") == (0.0, 1.5, False)
    assert grade_of(course, "a_tests", "ada")[2] is False
    assert comment_of(course, "b", "ada") == "its time could not be measured"


def test_save_diagnoses_keeps_no_response_unless_reading_the_submission_found_problems(course):
    """An unanswered part keeps nbgrader's "No response." as its comment; when reading the submission found problems
    (a cell missing, restored from the release), they come first in every part's comment, then the verdict's."""
    problems = ["cell b was missing: restored from the release", "a cell of yours was out of place"]
    for learner, found in (("ada", []), ("ben", problems)):
        submit(course, learner, {"a_tests": 3.0, "b_tests": 0.0})
        with Gradebook(url(course)) as gb:          # as SaveGrades leaves a solution cell the learner left as released
            gb.find_comment("b", ASG, ASG, learner).auto_comment = "No response."
            gb.db.commit()
        rec = {**Grading({"a_tests": PASSED, "b_tests": HALF}).to_dict(), "problems": found}
        SaveDiagnoses().preprocess(graded_notebook(PASSED, HALF), resources(course, learner, **{RECORD: rec}))
    assert comment_of(course, "b", "ada") == "No response."
    assert comment_of(course, "a", "ada") == "all hidden tests passed (3/3)"
    assert comment_of(course, "b", "ben") == ("cell b was missing: restored from the release; a cell of yours was "
                                              "out of place. returns a list, not a tensor (-1 points)")
    assert comment_of(course, "a", "ben") == ("cell b was missing: restored from the release; a cell of yours was "
                                              "out of place. all hidden tests passed (3/3)")


@pytest.fixture
def submitted(course):
    """The course with each learner's notebook in nbgrader's submitted folder, as autograde finds them."""
    for learner in LEARNERS:
        folder = course / "submitted" / learner / ASG
        folder.mkdir(parents=True)
        (folder / f"{ASG}.ipynb").write_text("{}")
    return course


@pytest.fixture
def run_so_far(monkeypatch):
    """This process's run as Progress counts it, fresh for each test."""
    monkeypatch.setattr(progress, "_run", {"began": 0.0, "done": 0, "at": 0})


def progress_line(root, caplog, learner: str, seconds: float, force: bool = False, **coursedir) -> str:
    """The line Progress logs for `learner`'s notebook, begun `seconds` ago, in an autograde run of the assignment
    (nbgrader's converter, the submissions it found, its exporter: Progress's parent)."""
    converter = Autograde(coursedir=CourseDirectory(root=str(root), assignment_id=ASG, **coursedir), log=LOG,
                          force=force)
    converter.init_notebooks()
    pre = Progress(parent=NotebookExporter(parent=converter, config=converter.config))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOG.name):
        pre.preprocess(new_notebook(), resources(root, learner, **{progress.STARTED: time.monotonic() - seconds}))
    return "\n".join(r.getMessage() for r in caplog.records)


def test_progress_says_which_of_how_many_the_learner_the_seconds_and_the_score(submitted, caplog, run_so_far):
    """Progress logs one line per graded notebook: its place among the submissions this run grades, in nbgrader's
    order (learners left out not counted), the learner, the seconds it took, its score, the time left."""
    submit(submitted, "ben", {"a_tests": 3.0, "b_tests": 1.5})
    line = progress_line(submitted, caplog, "ben", 12.3)
    assert re.fullmatch(r"graded 2 of 3: ben, 12\.[34] s, 4\.5 / 5 points; about 12 s left", line), line
    line = progress_line(submitted, caplog, "ben", 12.3, student_id_exclude="ada")
    assert re.fullmatch(r"graded 1 of 2: ben, 12\.[34] s, 4\.5 / 5 points; about 12 s left", line), line


def test_progress_counts_only_the_submissions_the_run_grades(submitted, caplog, run_so_far):
    """Without `--force`, nbgrader skips a submission it graded before (its autograded notebook is there, and the
    submission is no newer): the run's count leaves it out, and the last notebook graded is the last (run.last_learner:
    no kernel is made ready for a learner after it); with `--force` every submission is graded again."""
    from autograder.pipeline import run

    for learner in ("ben", "cleo"):
        folder = submitted / "autograded" / learner / ASG
        folder.mkdir(parents=True)
        (folder / f"{ASG}.ipynb").write_text("{}")
    assert progress_line(submitted, caplog, "ada", 10.0) == "graded 1 of 1: ada, 10.0 s"
    assert progress_line(submitted, caplog, "ada", 10.0, force=True).startswith("graded 1 of 3: ada")
    converter = Autograde(coursedir=CourseDirectory(root=str(submitted), assignment_id=ASG), log=LOG)
    converter.init_notebooks()
    assert run.last_learner(Progress(parent=NotebookExporter(parent=converter)), resources(submitted, "ada"))


def test_progress_says_the_late_penalty_and_a_manual_grade_still_to_give(submitted, caplog, run_so_far):
    """The line says the late penalty the gradebook holds for the notebook and that its score is provisional while a
    part waits for a manual grade; the last learner's says no time left."""
    submit(submitted, "cleo", {"a_tests": 3.0, "b_tests": 0.0}, late=True, penalty=3.0)
    set_grade(submitted, "b_tests", "cleo", needs_manual_grade=True)
    line = progress_line(submitted, caplog, "cleo", 2.0)
    assert re.fullmatch(r"graded 3 of 3: cleo, 2\.[01] s, 3 / 5 points \(late: 3 points off\) \(provisional: a part "
                        r"waits for your manual grade\)", line), line


def test_progress_estimates_the_time_left_from_the_run_so_far(submitted, caplog, run_so_far):
    """The time left is the run's seconds per notebook so far (since its first notebook began) times the notebooks
    left, in minutes from 90 s on; a run that starts again from the first submission is a new run."""
    for learner in LEARNERS:
        submit(submitted, learner, {"a_tests": 3.0, "b_tests": 2.0})
    assert progress_line(submitted, caplog, "ada", 40.0).endswith("; about 80 s left")
    assert progress_line(submitted, caplog, "ben", 5.0).endswith("; about 20 s left")    # 40 s for 2 notebooks
    assert progress_line(submitted, caplog, "ada", 60.0).endswith("; about 2.0 min left")   # a new run


def test_progress_outside_a_run_says_what_it_knows(course, caplog, run_so_far):
    """Made outside an nbgrader command (no converter: no place in a run) and for a notebook the gradebook does not
    hold, Progress logs the learner and the seconds only, and fails nothing."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOG.name):
        Progress(log=LOG).preprocess(new_notebook(), resources(course, "ada"))
    assert [r.getMessage() for r in caplog.records] == ["graded: ada, 0.0 s"]


def test_hidden_suites_refuses_an_assignment_without_a_hidden_suite(course):
    """HiddenSuites raises a GraderFault (nbgrader records nothing: never the learner's zero) for an assignment that
    has no hidden suite, and says which."""
    res = resources(course)
    res["nbgrader"]["assignment"] = "no_such_assignment"
    with pytest.raises(GraderFault, match="no hidden suite for assignment 'no_such_assignment'"):
        HiddenSuites().preprocess(graded_notebook(PASSED), res)


def test_sanitize_makes_learner_output_and_markdown_inert():
    """The learner's outputs and markdown keep their text and harmless markup, and no script, event handler or
    javascript: link; the course's own (locked) markdown is left as released."""
    html = "<b>ok</b><script>alert(1)</script><img src=x onerror=alert(1)>"
    course_md = '<details><summary onclick="hint()">Hint</summary>use `a<b`</details>'
    nb = new_notebook(cells=[
        cell("markdown", course_md, locked=True, grade_id="hint"),
        cell("markdown", "[x](javascript:alert(1)) and `a<b` <script>bad()</script> <em onclick=\"x()\">hi</em>",
             solution=True, grade_id="notes"),
        new_code_cell("show()", outputs=[new_output("display_data", data={"text/html": html, "text/plain": "ok"})]),
    ])
    sanitize(nb)
    assert nb.cells[0].source == course_md
    assert nb.cells[1].source == ("[x]\u200b(javascript:alert(1)) and `a<\u200bb` &lt;script&gt;bad()&lt;/script&gt; "
                                  "<em>hi</em>")
    out = nb.cells[2].outputs[0].data
    assert out["text/plain"] == "ok"
    assert out["text/html"].startswith("<b>ok</b>")
    assert "<script" not in out["text/html"] and "<img" not in out["text/html"]


# -- the feedback ------------------------------------------------------------------------------------------------------

def test_omit_check_cell_leaves_out_only_the_check_cell():
    """OmitCheckCell leaves out the release's `check()` cell, found by its cell id, and keeps every other cell in
    order (a learner's cell that calls check() too)."""
    nb = new_notebook(cells=[new_markdown_cell("# Problem set 1", id="intro"),
                             new_code_cell("def f(x):\n    return x", id="answer"),
                             new_code_cell("from course import check\ncheck()", id=CHECK_CELL),
                             new_code_cell("check()", id="mine")])
    nb, _ = OmitCheckCell().preprocess(nb, {})
    assert [c.id for c in nb.cells] == ["intro", "answer", "mine"]


@pytest.mark.parametrize("url,expected", [
    ("https://example.org/course", "See [Attention](https://example.org/course/book/attention.html#scaled) and "
                                   "[the paper](https://arxiv.org/abs/1706.03762)."),
    ("https://example.org/course/", "See [Attention](https://example.org/course/book/attention.html#scaled) and "
                                    "[the paper](https://arxiv.org/abs/1706.03762)."),
    ("", "See *Attention* (in the book) and [the paper](https://arxiv.org/abs/1706.03762)."),
], ids=["published", "published-slash", "unpublished"])
def test_book_links_point_to_the_published_book_or_name_the_chapter(url, expected):
    """BookLinks makes a markdown link to the book in a clone of the course (../../_build/html/) point to where the book
    is published, or, with no `url`, plain text naming the chapter; other links and code cells stay as they are."""
    code = 'open("../../_build/html/book/attention.html")'
    nb = new_notebook(cells=[new_markdown_cell("See [Attention](../../_build/html/book/attention.html#scaled) and "
                                               "[the paper](https://arxiv.org/abs/1706.03762)."),
                             new_code_cell(code)])
    nb, _ = BookLinks(url=url).preprocess(nb, {})
    assert nb.cells[0].source == expected
    assert nb.cells[1].source == code


def test_page_styles_inline_pygments_rules_then_the_wrapping_of_long_lines():
    """PageStyles inlines nbconvert's style (pygments' rules for highlighted code) and, after it, the course's rule
    that wraps long lines inside their box."""
    _, res = PageStyles().preprocess(new_notebook(), ResourcesDict())      # as nbconvert's exporter gives them
    css = res["inlining"]["css"]
    assert css[-1] == (TEMPLATES / "course_feedback" / "wrap.css").read_text()
    assert any(".highlight" in part for part in css[:-1])


def feedback_grades(root, config: Config | None = None) -> FeedbackGrades:
    """FeedbackGrades as generate_feedback makes it: the exporter's preprocessor, in nbgrader's converter."""
    converter = GenerateFeedback(coursedir=CourseDirectory(root=str(root)), config=config or Config(), log=LOG)
    return FeedbackGrades(parent=NotebookExporter(parent=converter, config=converter.config))


def test_feedback_grades_shows_the_instructor_s_score_and_comment_not_the_grader_s_again(course):
    """FeedbackGrades puts under the learner's answer the score and comment the instructor gave, and nothing for a
    part the instructor left alone (the grader's diagnosis is said in the graded cell's output); a graded cell the
    instructor scored has its verdict rendered again from the grading's record with that score, what the grader drew
    kept; the total counts the instructor's score."""
    submit(course, "ben", {"a_tests": 3.0, "b_tests": 1.0})
    set_grade(course, "b_tests", manual_score=2.0)
    with Gradebook(url(course)) as gb:
        gb.find_comment("a", ASG, ASG, "ben").auto_comment = PASSED.comment()
        gb.find_comment("b", ASG, ASG, "ben").manual_comment = "Mind the batch dimension."
        gb.db.commit()
    record.store(record.path(course, "ben", ASG, ASG), Grading({"a_tests": PASSED, "b_tests": HALF}).to_dict())
    nb = graded_notebook(PASSED, HALF)
    drawn = new_output("display_data", data={"text/plain": "Your f has the course's structure."})
    nb.cells[4].outputs.append(drawn)
    a_outputs = [dict(o) for o in nb.cells[2].outputs]

    nb, res = feedback_grades(course).preprocess(nb, resources(course))
    assert nb.cells[1].metadata.nbgrader["comment"] is None
    assert nb.cells[3].metadata.nbgrader["comment"] == (
        "**Your instructor gave this part 2 / 2 points** (the grader's automatic score: 1).\n\n"
        "**Your instructor:** Mind the batch dimension.")
    assert [dict(o) for o in nb.cells[2].outputs] == a_outputs
    b = nb.cells[4]
    assert (b.metadata.nbgrader["score"], b.metadata.nbgrader["points"]) == (2.0, 2.0)
    assert b.outputs[0].text == HALF.text(2.0) + "\n"
    assert b.outputs[0].text.startswith("b_tests: 2 / 2 points (given by your instructor; the grader's automatic")
    assert b.outputs[1].data["text/plain"] == "2.0"
    assert b.outputs[2] == drawn
    assert (res["nbgrader"]["score"], res["nbgrader"]["max_score"], res["nbgrader"]["late_penalty"]) == (5.0, 5.0, 0)


def test_feedback_grades_takes_the_late_penalty_the_policy_gives_the_scores_now(course):
    """A day late under the `zero` policy, with a score typed since autograde stored its penalty (for the score then):
    FeedbackGrades' total is after the penalty the policy gives the score now, and the gradebook stores it."""
    submit(course, "ben", {"a_tests": 3.0, "b_tests": 1.0}, late=True, penalty=4.0)
    set_grade(course, "b_tests", manual_score=2.0)
    record.store(record.path(course, "ben", ASG, ASG), Grading({"a_tests": PASSED, "b_tests": HALF}).to_dict())
    config = Config()
    config.LateSubmissionPlugin.penalty_method = "zero"
    _, res = feedback_grades(course, config).preprocess(graded_notebook(PASSED, HALF), resources(course))
    assert (res["nbgrader"]["score"], res["nbgrader"]["late_penalty"]) == (0.0, 5.0)
    with Gradebook(url(course)) as gb:
        assert gb.find_submission_notebook(ASG, ASG, "ben").late_submission_penalty == 5.0


def test_late_penalties_are_the_policy_s_for_the_scores_now(course):
    """LatePenalties.refresh gives each notebook of a submission the penalty nbgrader's configured policy gives its
    score now, between 0 and that score, stored in the gradebook (none when on time, or under the `none` policy)."""
    submit(course, "ben", {"a_tests": 3.0, "b_tests": 1.0}, late=True, penalty=4.0)
    submit(course, "ada", {"a_tests": 3.0, "b_tests": 1.0}, penalty=4.0)
    set_grade(course, "b_tests", manual_score=1.5)
    penalties = {}
    for policy in ("zero", "none"):
        config = Config()
        config.LateSubmissionPlugin.penalty_method = policy
        with Gradebook(url(course)) as gb:
            for learner in ("ben", "ada"):
                total = LatePenalties(config=config, log=LOG).refresh(gb, gb.find_submission(ASG, learner))
                stored = gb.find_submission_notebook(ASG, ASG, learner).late_submission_penalty
                penalties[policy, learner] = total, stored
    assert penalties == {("zero", "ben"): (4.5, 4.5), ("zero", "ada"): (0.0, None),
                         ("none", "ben"): (0.0, None), ("none", "ada"): (0.0, None)}
