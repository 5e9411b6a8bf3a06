"""One check: the learner's notebook graded by the real `nbgrader autograde` (and, when asked, `generate_feedback`)
in a scratch copy of a grading folder made once per assignment, so that a check never touches the class's
gradebook or another learner's files; the answer holds the learner's scores and the graded cells' verdicts. The
commands run in warm graders (autograder.service.warm), which keep the next check's kernel and suite process ready
as a batch does between learners."""
from __future__ import annotations

import json
import shutil
import tempfile
import threading
from pathlib import Path

import nbformat

from autograder import config
from autograder.classroom import classgrade, grade
from autograder.notebooks import is_graded_test, nbgrader_meta
from autograder.service.warm import MORE_FOLLOW, Grader


class NotANotebook(ValueError):
    """The upload is not a notebook (nothing was graded)."""


class Refused(RuntimeError):
    """The grading could not be done: `grader` says whose fault it is (it crosses a Dask worker's pickling)."""

    def __init__(self, message: str, grader: bool):
        super().__init__(message, grader)
        self.grader = grader

    def __str__(self) -> str:
        return str(self.args[0])


RECYCLE = 200                 # commands a warm grader runs before it is replaced (its memory grows ~0.3 MiB a check)
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

    def nbgrader(self, grading_dir: Path, argv: list[str]) -> tuple[int, str]:
        """An nbgrader command on a warm grader (the one used last: the warmest); its exit code and log. A grader
        that has run RECYCLE commands is replaced (in the background), which bounds what a long-lived process holds."""
        with self.lock:
            grader = self.idle.pop() if self.idle else None
        if grader is None or not grader.alive():
            grader = Grader()
        try:
            got = grader.run(str(grading_dir), argv, self.timeout)
        finally:
            if grader.alive() and grader.runs >= RECYCLE:
                threading.Thread(target=grader.close, daemon=True).start()
                grader = Grader(ready=argv[1])
            if grader.alive():
                with self.lock:
                    self.idle.append(grader)
        if got is None:
            raise Refused("the check failed on the grader's side (its grading process stopped or overran), not "
                          "because of your notebook; it was not counted: try again later", grader=True)
        return got

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
            code, log = self.nbgrader(d, grade.autograde_args(assignment, learner, (MORE_FOLLOW,)))
            rows = grade.scores(d, [assignment], url=grade.db_url(d)) if code == 0 else []
            if not rows:
                grader = classgrade.failure_kind(log, stopped=False) == classgrade.GRADER
                raise Refused("the check failed on the grader's side, not because of your notebook; it was not "
                              "counted: try again later" if grader else
                              "your notebook could not be graded: nbgrader found nothing to grade in it", grader)
            answer = verdicts(d / "autograded" / learner / assignment / f"{assignment}.ipynb")
            scored = {x.cell: x for x in rows}
            for c in answer["cells"]:
                c.update(score=scored[c["cell"]].score, points=scored[c["cell"]].points)
            answer.update(assignment=assignment, total=round(sum(x.score or 0 for x in rows), 2),
                          points=sum(x.points for x in rows))
            if html:
                code, _ = self.nbgrader(d, grade.feedback_args(assignment))
                page = d / "feedback" / learner / assignment / f"{assignment}.html"
                answer["feedback_html"] = page.read_text() if code == 0 and page.exists() else None
            return answer

    def close(self):
        with self.lock:
            idle, self.idle = self.idle, []
        for grader in idle:
            grader.close()


def verdicts(path: Path) -> dict:
    """What the autograded notebook says to the learner: each graded cell's verdict (its output) and the notes."""
    nb = nbformat.read(str(path), as_version=4)
    cells = []
    for cell in nb.cells:
        if is_graded_test(cell):
            text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
            cells.append({"cell": nbgrader_meta(cell)["grade_id"], "text": text.rstrip("\n")})
    notes = [c.source for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("**Grader note:**")]
    return {"cells": cells, "notes": notes}
