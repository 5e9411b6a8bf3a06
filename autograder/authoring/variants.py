"""Known versions of learners' answers, used to test the hidden suites and to build example classes.

Each assignment has `examples/variants/<assignment>.py` defining `VARIANTS`: correct answers
written differently from the reference (`Correct`), which must get full marks, and typical
mistakes (`Bug`), which must lose points in the graded cells they name, with a diagnosis that
contains the given text, and full marks everywhere else, except that a later part using the wrong
one may lose its `together` test (the parts graded together), named in `Bug.together`.  A variant replaces the code of
some solution cells (by grade_id); the other solution cells hold the reference solution.
"""
from __future__ import annotations

import copy
import re

import nbformat

from autograder import ROOT
from autograder.notebooks import is_solution, learner_cells, nbgrader_meta, read, run_cell, source_notebook
from autograder.verdict import known
from autograder.verdict.known import VARIANTS_DIR, Bug, Correct

__all__ = ["Bug", "Correct", "load", "placed", "reference_sources", "submission", "write"]
RELEASE_DIR = ROOT / "exercises"
_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)


def _module(assignment: str):
    mod = known.module(assignment)
    if mod is None:
        raise FileNotFoundError(VARIANTS_DIR / f"{assignment}.py")
    return mod


def load(assignment: str) -> list:
    return list(_module(assignment).VARIANTS)


def placed(assignment: str) -> tuple[dict, dict]:
    """Where each known mistake is caught: VISIBLE, variant -> (the visible-check cell, text of its message), and
    HIDDEN_ONLY, variant -> why no visible check can see it."""
    mod = _module(assignment)
    return dict(getattr(mod, "VISIBLE", {})), dict(getattr(mod, "HIDDEN_ONLY", {}))


def reference_sources(assignment: str) -> dict[str, str]:
    """grade_id -> the reference code of each solution cell, without the solution markers."""
    nb = read(source_notebook(assignment))
    return {nbgrader_meta(c)["grade_id"]: _MARKER.sub("", c.source) for c in nb.cells if is_solution(c)}


def submission(assignment: str, cells: dict[str, str] | None = None, answered: bool = True):
    """A learner's notebook: the released notebook with its solution cells filled in.

    `answered=False` leaves the stubs (an unanswered submission); otherwise each solution cell holds
    `cells[grade_id]` if given, else the reference code.
    """
    nb = read(RELEASE_DIR / assignment / f"{assignment}.ipynb")
    nb = copy.deepcopy(nb)
    ref = reference_sources(assignment) if answered else {}
    cells = cells or {}
    for cell in nb.cells:
        if is_solution(cell):
            gid = nbgrader_meta(cell)["grade_id"]
            if gid in cells:
                cell.source = cells[gid]
            elif answered:
                cell.source = ref[gid]
    return nb


def executed(assignment: str, cells: dict[str, str]) -> dict:
    """The names of the notebook's code with `cells` in place of the reference's, executed in this process (course
    code, a known answer or a mutant: never a learner's)."""
    ns: dict = {"__name__": f"executed_{assignment}"}
    for cell in learner_cells(submission(assignment, cells)):
        run_cell(cell["source"], f"<{cell['id']}>", ns)
    return ns


def write(nb, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
