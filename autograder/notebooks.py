"""Reading course notebooks: which cells are the learner's code, which are graded, the reference.

Conventions of the source notebooks in `solutions/` (checked by the project's tests):
- a solution cell's `grade_id` is the contract name it defines (`sinusoidal_encoding`);
- the graded cell that scores it is `<name>_tests`, holds no test code (the hidden suite does the
  testing), and is locked;
- code cells tagged `setup` (imports) run before the solution cells in the sandboxed worker.
"""
from __future__ import annotations

from pathlib import Path

import nbformat

from autograder import ROOT

SOLUTIONS = ROOT / "solutions"
TESTS_SUFFIX = "_tests"
CHECK_CELL = "check_my_work"      # the cell id of the release's `check()` (autograder/authoring/check_client.py)


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def is_solution(cell) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))


def is_graded_test(cell) -> bool:
    m = nbgrader_meta(cell)
    return cell.get("cell_type") == "code" and bool(m.get("grade")) and not m.get("solution")


def cell_id(cell, index: int) -> str:
    """How the worker and its errors name the code cell at `index`: its grade_id, else its position."""
    return nbgrader_meta(cell).get("grade_id") or f"cell-{index}"


def learner_cells(nb) -> list[dict]:
    """The code the worker executes: setup cells and solution cells, in notebook order."""
    cells = []
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        if is_solution(cell) or "setup" in cell.get("metadata", {}).get("tags", []):
            cells.append({"id": cell_id(cell, i), "source": cell.source})
    return cells


def graded_cells(nb) -> dict[str, float]:
    """grade_id -> points of every graded test cell."""
    return {nbgrader_meta(c)["grade_id"]: float(nbgrader_meta(c).get("points", 0)) for c in nb.cells
            if is_graded_test(c)}


def source_notebook(assignment: str) -> Path:
    return SOLUTIONS / assignment / f"{assignment}.ipynb"


def read(path: Path):
    return nbformat.read(str(path), as_version=4)


def reference_namespace(assignment: str) -> dict:
    """Execute the solution notebook's own code (trusted: written by the course) and return its names."""
    nb = read(source_notebook(assignment))
    ns: dict = {"__name__": f"reference_{assignment}"}
    for cell in learner_cells(nb):
        exec(compile(cell["source"], f"<reference {assignment}:{cell['id']}>", "exec"), ns)
    return ns
