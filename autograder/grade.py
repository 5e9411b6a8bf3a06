"""Grade a class with nbgrader's own commands, in one grading folder.

The steps an instructor types, as functions the Makefile and the tests share:
`prepare` (generate_assignment: records the assignment in the gradebook), `submit` (put a learner's
notebook where nbgrader collects it), `autograde`, `feedback`, and `scores` (read the gradebook).
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry

from .release import generate, nbgrader

DEFAULT_DIR = Path(__file__).resolve().parent.parent / "_build" / "grading"


def db_url(grading_dir: Path) -> str:
    return "sqlite:///" + str(Path(grading_dir).resolve() / "gradebook.db")


def gradebook_url(grading_dir: Path | None, url: str | None = None) -> str:
    """The gradebook nbgrader_config.py picks: `url`, else GRADEBOOK_URL, else the grading folder's SQLite file."""
    return url or os.environ.get("GRADEBOOK_URL") or db_url(grading_dir)


def prepare(grading_dir: Path, assignments: list[str], fresh: bool = True):
    grading_dir = Path(grading_dir)
    if fresh and grading_dir.exists():
        shutil.rmtree(grading_dir)
    grading_dir.mkdir(parents=True, exist_ok=True)
    generate(assignments, into=grading_dir / "release", grading_dir=grading_dir)


def submitted_path(grading_dir: Path, learner: str, assignment: str) -> Path:
    return Path(grading_dir) / "submitted" / learner / assignment / f"{assignment}.ipynb"


def submit(grading_dir: Path, learner: str, assignment: str, notebook) -> Path:
    """Place a submission: a notebook object, a path to copy, or raw bytes (even invalid ones)."""
    path = submitted_path(grading_dir, learner, assignment)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(notebook, (bytes, str)) and not (isinstance(notebook, str) and Path(notebook).exists()):
        path.write_bytes(notebook if isinstance(notebook, bytes) else notebook.encode())
    elif isinstance(notebook, (str, Path)):
        shutil.copy(notebook, path)
    else:
        nbformat.write(notebook, str(path))
    return path


def autograde(grading_dir: Path, assignment: str, learner: str | None = None, extra: tuple = (), **kw):
    args = ["autograde", assignment, "--force", *extra]
    if learner:
        args.append(f"--student={learner}")
    return nbgrader(*args, grading_dir=grading_dir, check=False, **kw)


def feedback(grading_dir: Path, assignment: str, **kw):
    return nbgrader("generate_feedback", assignment, "--force", grading_dir=grading_dir, check=False, **kw)


@dataclass
class CellScore:
    learner: str
    assignment: str
    cell: str
    score: float | None
    points: float
    comment: str | None


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
                        rows.append(CellScore(student, asg, g.name, g.score, g.max_score, comments.get(base)))
    return rows


def table(rows: list[CellScore]) -> str:
    """The gradebook as a text table: one line per learner and assignment, one column per graded cell."""
    cells: dict[str, list[str]] = {}
    for r in rows:
        cells.setdefault(r.assignment, [])
        if r.cell not in cells[r.assignment]:
            cells[r.assignment].append(r.cell)
    lines = []
    for asg, names in cells.items():
        header = ["learner", *[n.removesuffix("_tests") for n in names], "total"]
        data = []
        by_learner: dict[str, dict[str, CellScore]] = {}
        for r in rows:
            if r.assignment == asg:
                by_learner.setdefault(r.learner, {})[r.cell] = r
        for learner, rs in by_learner.items():
            vals = [rs[n].score if n in rs else None for n in names]
            pts = sum(rs[n].points for n in names if n in rs)
            total = sum(v or 0 for v in vals)
            data.append([learner, *["-" if v is None else f"{v:g}" for v in vals], f"{total:g}/{pts:g}"])
        widths = [max(len(str(x)) for x in col) for col in zip(header, *data)]
        lines.append(f"{asg}")
        for row in [header, *data]:
            lines.append("  " + "  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
        lines.append("")
    return "\n".join(lines)
