"""Grade a class with nbgrader's own commands, in one grading folder.

The steps an instructor types, as functions the Makefile and the tests share:
`prepare` (generate_assignment: records the assignment in the gradebook), `submit` (put a learner's
notebook where nbgrader collects it), `autograde`, `feedback`, and `scores` (read the gradebook).
"""
from __future__ import annotations

import os
import shutil
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry

from autograder import ROOT
from autograder.authoring.release import generate, nbgrader

DEFAULT_DIR = ROOT / "_build" / "grading"
# The two kinds of a failed grading (autograder.classroom.classgrade): the grader could not grade, or nothing to grade.
GRADER_ERROR, NOT_GRADED = "grader error", "not graded"


def db_url(grading_dir: Path) -> str:
    return "sqlite:///" + str(Path(grading_dir).resolve() / "gradebook.db")


def gradebook_url(grading_dir: Path | None, url: str | None = None) -> str:
    """The gradebook nbgrader_config.py picks: `url`, else GRADEBOOK_URL, else the grading folder's SQLite file."""
    # grading_dir may be None only where a url is given
    return url or os.environ.get("GRADEBOOK_URL") or db_url(grading_dir)  # type: ignore[arg-type]


def prepare(grading_dir: Path, assignments: list[str], fresh: bool = True, url: str | None = None):
    grading_dir = Path(grading_dir)
    if fresh and grading_dir.exists():
        shutil.rmtree(grading_dir)
    grading_dir.mkdir(parents=True, exist_ok=True)
    generate(assignments, into=grading_dir / "release", grading_dir=grading_dir, url=url)


def submitted_path(grading_dir: Path, learner: str, assignment: str) -> Path:
    return Path(grading_dir) / "submitted" / learner / assignment / f"{assignment}.ipynb"


def submit(grading_dir: Path, learner: str, assignment: str, notebook) -> Path:
    """Place a submission: a notebook object, a path to copy, raw bytes (even invalid ones), or None
    for a submission folder without the notebook (which nbgrader cannot grade)."""
    path = submitted_path(grading_dir, learner, assignment)
    path.parent.mkdir(parents=True, exist_ok=True)
    if notebook is None:
        return path
    if isinstance(notebook, (bytes, str)) and not (isinstance(notebook, str) and Path(notebook).exists()):
        path.write_bytes(notebook if isinstance(notebook, bytes) else notebook.encode())
    elif isinstance(notebook, (str, Path)):
        shutil.copy(notebook, path)
    else:
        nbformat.write(notebook, str(path))
    return path


def autograde_args(assignment: str, learner: str | None = None, extra: tuple = ()) -> list[str]:
    """nbgrader's arguments to autograde `assignment` (one learner's submission when named)."""
    return ["autograde", assignment, "--force", *extra, *([f"--student={learner}"] if learner else [])]


def autograde(grading_dir: Path, assignment: str, learner: str | None = None, extra: tuple = (), **kw):
    return nbgrader(*autograde_args(assignment, learner, extra), grading_dir=grading_dir, check=False, **kw)


def feedback_args(assignment: str) -> list[str]:
    return ["generate_feedback", assignment, "--force"]


def feedback(grading_dir: Path, assignment: str, **kw):
    return nbgrader(*feedback_args(assignment), grading_dir=grading_dir, check=False, **kw)


@dataclass
class CellScore:
    learner: str
    assignment: str
    cell: str
    score: float | None
    points: float
    comment: str | None
    needs_manual_grade: bool = False
    seconds_late: float = 0.0       # of the whole submission, as nbgrader recorded it at autograde
    penalty: float = 0.0            # the late penalty of the whole submission


def scores(grading_dir: Path | None, assignments: list[str], url: str | None = None) -> list[CellScore]:
    """Every graded cell of every learner, from the gradebook (see `gradebook_url`)."""
    rows = []
    with Gradebook(gradebook_url(grading_dir, url)) as gb:
        for student in sorted(s.id for s in gb.students):
            for asg in assignments:
                try:
                    sub = gb.find_submission(asg, student)
                except MissingEntry:
                    continue
                for nb in sub.notebooks:
                    comments = {c.name: (c.auto_comment or c.manual_comment) for c in nb.comments}
                    for g in sorted(nb.grades, key=lambda g: g.name):
                        base = g.name.removesuffix("_tests")
                        # nbgrader reads a grade never scored (a failed grading) as 0: here it stays None.
                        score = None if g.auto_score is None and g.manual_score is None else g.score
                        rows.append(CellScore(student, asg, g.name, score, g.max_score, comments.get(base),
                                              bool(g.needs_manual_grade), float(sub.total_seconds_late or 0.0),
                                              float(sub.late_submission_penalty or 0.0)))
    return rows


def ordered_cells(rows: list[CellScore], order: Sequence[str] = ()) -> list[str]:
    """The graded cells of `rows`: those named in `order` first, in that order, then the others as found."""
    found = list(dict.fromkeys(r.cell for r in rows))
    return [c for c in order if c in found] + [c for c in found if c not in order]


WAITING = "waiting for manual grading"


@dataclass
class Line:
    """One learner's line of an assignment: scores by cell, the total before any late penalty, and the status:
    `graded`, `waiting for manual grading` (a flagged cell has no typed score yet: the total is provisional), or the
    failure that kept the learner from being graded (no total)."""
    learner: str
    scores: dict[str, float | None]
    total: float | None
    points: float
    status: str
    waiting: list[str] = field(default_factory=list)        # the cells still to grade by hand
    seconds_late: float = 0.0
    penalty: float = 0.0


def by_learner(rows: list[CellScore], failures: dict[str, str] | None = None, order: Sequence[str] = ()):
    """One assignment's rows as (cells, [Line]), learners sorted. Cells named in `order` come first; a learner in
    `failures` (learner -> status, e.g. `grader error: <reason>`) has no total and that status."""
    cells = ordered_cells(rows, order)
    got: dict[str, dict[str, CellScore]] = defaultdict(dict)
    for r in rows:
        got[r.learner][r.cell] = r
    failures = failures or {}
    lines = []
    for learner in sorted(set(got) | set(failures)):
        mine = got.get(learner, {})
        scores = {c: mine[c].score for c in cells if c in mine}
        points = sum(mine[c].points for c in cells if c in mine)
        waiting = [] if learner in failures else [c for c in cells if c in mine and mine[c].needs_manual_grade]
        total = None if learner in failures else sum(s or 0 for s in scores.values())
        status = failures.get(learner) or (WAITING if waiting else "graded")
        first = next(iter(mine.values()), None)
        lines.append(Line(learner, scores, total, points, status, waiting,
                          first.seconds_late if first else 0.0, first.penalty if first else 0.0))
    return cells, lines


def table(rows: list[CellScore]) -> str:
    """The gradebook as a text table: one line per learner and assignment, one column per graded cell."""
    lines = []
    for asg in dict.fromkeys(r.assignment for r in rows):
        cells, learners = by_learner([r for r in rows if r.assignment == asg])
        header = ["learner", *[c.removesuffix("_tests") for c in cells], "total"]
        data = [[x.learner, *["-" if x.scores.get(c) is None else f"{x.scores[c]:g}" for c in cells],
                 f"{x.total:g}/{x.points:g}"] for x in learners]
        widths = [max(len(str(x)) for x in col) for col in zip(header, *data)]
        lines.append(f"{asg}")
        for row in [header, *data]:
            lines.append("  " + "  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
        lines.append("")
    return "\n".join(lines)
