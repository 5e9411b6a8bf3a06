"""One check: the learner's notebook graded by the real `nbgrader autograde` (and, when asked, `generate_feedback`)
in a scratch copy of a grading folder made once per assignment, so that a check never touches the class's
gradebook or another learner's files; the answer holds the learner's scores and the graded cells' verdicts. The
commands run in warm graders (autograder.service.warm), which keep the next check's kernel and suite process ready
as a batch does between learners. The answer is read from the verdict record the grading stores
(autograder.verdict.record), never from the autograded notebook's text or a log; whose fault a failed check is, from
the record and what the service itself saw: which deadline passed, whose process ended."""
from __future__ import annotations

import json
import shutil
import tempfile
import threading
from pathlib import Path

from autograder import config
from autograder.classroom import grade
from autograder.service.warm import MORE_FOLLOW, Grader, Stopped
from autograder.verdict import record


class NotANotebook(ValueError):
    """The upload is not a notebook (nothing was graded)."""


class Refused(RuntimeError):
    """The grading could not be done: `grader` says whose fault it is, the grader's (not counted against the learner)
    or the learner's notebook's (counted); it crosses a Dask worker's pickling."""

    def __init__(self, message: str, grader: bool):
        super().__init__(message, grader)
        self.grader = grader

    def __str__(self) -> str:
        return str(self.args[0])


RECYCLE = 200                 # commands a warm grader runs before it is replaced (its memory grows ~0.3 MiB a check)
GRADER_FAILED = ("the check failed on the grader's side, not because of your notebook; it was not counted: try again "
                 "later")
_ON_WORKER: dict[str, Checker] = {}


def on_worker(state: str, assignment: str, learner: str, body: bytes, html: bool) -> dict:
    """A check as a Dask task: run where the worker is (its Python the course's), in the service's state folder
    (shared with the worker), by warm graders kept on that worker; the answer says which worker graded it."""
    from distributed import get_worker

    checker = _ON_WORKER.get(state) or _ON_WORKER.setdefault(state, Checker(Path(state), [], graders=0))
    answer = checker.check(assignment, learner, body, html)
    answer["graded_by"] = get_worker().address
    return answer


class Checker:
    """Checks of a service (or a Dask worker): the assignments' grading folders prepared once, and warm graders,
    `graders` started at once and more as concurrent checks need them."""

    def __init__(self, state: Path, assignments: list[str], graders: int = 1):
        self.state = Path(state)
        self.templates = self.state / "templates"
        (self.state / "scratch").mkdir(parents=True, exist_ok=True)
        for asg in assignments:
            if not (self.templates / asg / "gradebook.db").exists():      # its own, never the class's
                grade.prepare(self.templates / asg, [asg], url=grade.db_url(self.templates / asg))
        self.timeout = config.course().learner_timeout
        self.lock = threading.Lock()
        self.idle = [Grader(ready=assignments[0] if assignments else None) for _ in range(graders)]

    def nbgrader(self, grading_dir: Path, argv: list[str]) -> int:
        """An nbgrader command on a warm grader (the one used last: the warmest); its exit code. A grader that has run
        RECYCLE commands is replaced (in the background), which bounds what a long-lived process holds. A command
        still running at the learner's deadline (`learner_timeout`: their budget and the grader's grace past it) is
        stopped and charged to the learner's notebook, which made it run so long; a grader that died is the
        grader's fault."""
        with self.lock:
            grader = self.idle.pop() if self.idle else None
        if grader is None or not grader.alive():
            grader = Grader()
        try:
            code, _ = grader.run(str(grading_dir), argv, self.timeout)
        except Stopped as e:
            if e.overran:
                raise Refused(f"your notebook's check did not finish within {self.timeout:g} s, the time one check "
                              "may take, and was stopped; it was counted (code that takes the grader this long to "
                              "run or to read, such as a very long chain of names, is the usual cause)",
                              grader=False) from None
            raise Refused(GRADER_FAILED, grader=True) from None
        finally:
            if grader.alive() and grader.runs >= RECYCLE:
                threading.Thread(target=grader.close, daemon=True).start()
                grader = Grader(ready=argv[1])
            if grader.alive():
                with self.lock:
                    self.idle.append(grader)
        return code

    def check(self, assignment: str, learner: str, body: bytes, html: bool = False) -> dict:
        try:
            nb = json.loads(body)
        except (ValueError, RecursionError):
            raise NotANotebook("the upload is not a notebook (.ipynb, JSON)") from None
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
            raise NotANotebook("the upload is not a notebook: it has no cells")
        with tempfile.TemporaryDirectory(prefix="check-", dir=self.state / "scratch") as tmp:
            d = Path(tmp) / "grading"
            shutil.copytree(self.templates / assignment, d)
            grade.submit(d, learner, assignment, body)
            code = self.nbgrader(d, grade.autograde_args(assignment, learner, (MORE_FOLLOW,)))
            graded = d / "autograded" / learner / assignment / f"{assignment}.ipynb"
            if code != 0 or not graded.exists():      # nbgrader stops on a grader fault: no score, no notebook
                raise Refused(GRADER_FAILED, grader=True)
            answer = answer_of(record.load(record.path(d, learner, assignment, assignment)))
            answer["assignment"] = assignment
            if html:
                code = self.nbgrader(d, grade.feedback_args(assignment))
                page = d / "feedback" / learner / assignment / f"{assignment}.html"
                answer["feedback_html"] = page.read_text() if code == 0 and page.exists() else None
            return answer

    def close(self):
        """End the idle graders at once, all together: killed with what they started (a warm suite server still making
        the next check ready would hold an asked grader for seconds), their sandboxes removed."""
        with self.lock:
            idle, self.idle = self.idle, []
        ending = [threading.Thread(target=grader.close, kwargs={"kill": True}, name="grader-close") for grader in idle]
        for t in ending:
            t.start()
        for t in ending:
            t.join()


def answer_of(rec: dict | None) -> dict:
    """A check's answer from its grading's stored record (autograder.verdict.record): the scores, each graded cell's
    verdict as its output says it (in the notebook's order, the record's), and the notes (what the grader repaired in
    the submission, what it could not do), as plain text. No record, one that is not gradable, or one without a
    verdict, is the grader's failure."""
    rec = rec or {}
    grading = record.Grading.from_dict(rec)
    if not grading.gradable or not grading.verdicts:
        raise Refused(GRADER_FAILED, grader=True)
    verdicts = list(grading.verdicts.values())
    return {"cells": [{"cell": v.grade_id, "text": v.text(), "score": v.score, "points": v.points} for v in verdicts],
            "notes": [str(n) for n in (*rec.get("problems", []), *grading.notes)],
            "total": round(sum(v.score for v in verdicts), 2), "points": sum(v.points for v in verdicts)}
