"""Read a submitted notebook defensively, and repair what nbgrader cannot.

nbgrader restores edited locked cells and changed points itself (`OverwriteCells`), but stops on
a file that is not valid JSON, a graded cell whose `grade_id` was changed, or (for the cells it
does not re-add) a deleted cell.  Here such a submission is rebuilt from the released notebook
with the learner's answers (the sources of the solution cells found by their `grade_id`); a file
that cannot be read at all is graded as the unanswered release.  Either way the learner is told
why, in a note at the top of the notebook and in the gradebook comments.
"""
from __future__ import annotations

import copy

import nbformat

from .notebooks import is_solution, nbgrader_meta

MAX_BYTES = 64 << 20
PROBLEMS = "grader_problems"


def _shape(nb) -> dict:
    """grade_id -> the flags nbgrader keys its cells by."""
    return {m["grade_id"]: (c.get("cell_type"), bool(m.get("solution")), bool(m.get("grade")), bool(m.get("locked")))
            for c in nb.cells if (m := nbgrader_meta(c)).get("grade_id")}


def read(raw: bytes, release) -> tuple:
    """(notebook, problems): the submission as nbgrader can grade it, and what had to be repaired."""
    if len(raw) > MAX_BYTES:
        return _unanswered(release, f"your notebook file is too large ({len(raw) >> 20} MiB) to be graded")
    try:
        nb = nbformat.reads(raw.decode("utf-8", errors="replace"), as_version=4)
        nbformat.validate(nb)
    except Exception as e:  # noqa: BLE001 - any unreadable file: say so, grade it as unanswered
        return _unanswered(release, f"your notebook file could not be read ({type(e).__name__}: {str(e)[:200]}); "
                                    "it was graded as unanswered: did it get damaged when you saved or uploaded it?")
    if _shape(nb) == _shape(release):
        return nb, []
    answers = {}
    for cell in nb.cells:
        if is_solution(cell) and nbgrader_meta(cell).get("grade_id") not in answers:
            answers[nbgrader_meta(cell)["grade_id"]] = cell.get("source", "")
    rebuilt = copy.deepcopy(release)
    for cell in rebuilt.cells:
        gid = nbgrader_meta(cell).get("grade_id")
        if is_solution(cell) and gid in answers:
            cell.source = answers[gid]
    return _noted(rebuilt, "the graded cells of your notebook were changed (deleted, renamed, or their metadata "
                           "edited); it was rebuilt from the released notebook with your answers")


def _unanswered(release, problem: str):
    return _noted(copy.deepcopy(release), problem)


def _noted(nb, problem: str):
    nb.metadata[PROBLEMS] = [problem]
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"**Grader note:** {problem}."))
    return nb, [problem]
