"""Read a submitted notebook defensively, and repair what nbgrader cannot.

nbgrader restores edited locked cells and changed points itself (`OverwriteCells`), but stops on
a file that is not valid JSON, a graded cell whose `grade_id` was changed or removed, a cell that
appears twice (a copied cell keeps its `grade_id`: `KeyError` in `DeduplicateIds` or
`OverwriteCells`), or (for the cells it does not re-add) a deleted cell.  Here such a submission
is rebuilt from the released notebook with the learner's answers: the sources of the solution cells
found by their `grade_id`, the copies of a copied cell joined in notebook order (what running the
notebook from the top does), and a solution cell that lost its `grade_id` matched by the name it
defines (each solution cell defines the name it is called by); a file that cannot be read at all
is graded as the unanswered release.  Either way the learner is told why, in a note at the top of
the notebook and in the gradebook comments.
"""
from __future__ import annotations

import copy
import re
from collections import Counter, defaultdict

import nbformat

from autograder.pipeline.common import markdown_text
from autograder.verdict.record import RECORD

MAX_BYTES = 64 << 20
PROBLEMS = "grader_problems"
GRADER_KEYS = (PROBLEMS, RECORD)


def _meta(cell) -> dict | None:
    """A cell's nbgrader metadata; None when it is not a dict with a string grade_id, if any (edited by hand)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    if not isinstance(meta, dict) or not isinstance(meta.get("grade_id", ""), str):
        return None
    return meta


def _key(cell) -> tuple | None:
    """What nbgrader keys a cell by: (grade_id, cell type, solution, grade, locked); None for an ordinary cell."""
    meta = _meta(cell)
    if meta is None:
        return ("(unreadable nbgrader metadata)",)
    flags = (bool(meta.get("solution")), bool(meta.get("grade")), bool(meta.get("locked")))
    if not any(flags) and not meta.get("grade_id"):
        return None
    return (meta.get("grade_id"), cell.get("cell_type"), *flags)


def _shape(nb) -> Counter:
    """How many cells of each key the notebook holds (a copied cell counts twice)."""
    return Counter(k for c in nb.cells if (k := _key(c)) is not None)


def _defines(source: str, name: str) -> bool:
    return re.search(rf"^(?:def|class)\s+{re.escape(name)}\b", source, re.M) is not None


def read(raw: bytes, release) -> tuple:
    """(notebook, problems): the submission as nbgrader can grade it, and what had to be repaired."""
    if len(raw) > MAX_BYTES:
        return _unanswered(release, f"your notebook file is too large ({len(raw) >> 20} MiB) to be graded")
    try:
        nb = nbformat.reads(raw.decode("utf-8", errors="replace"), as_version=4)
        nbformat.validate(nb)
        for key in GRADER_KEYS:            # the grader's own keys: what a submission holds there is not the grader's
            nb.metadata.pop(key, None)
    except Exception as e:  # noqa: BLE001 - any unreadable file: say so, grade it as unanswered
        return _unanswered(release, f"your notebook file could not be read ({type(e).__name__}: {str(e)[:200]}); "
                                    "it was graded as unanswered: did it get damaged when you saved or uploaded it?")
    shape, released = _shape(nb), _shape(release)
    if shape == released:
        return nb, []
    answers: dict[str, list[str]] = defaultdict(list)
    orphans: list[str] = []                   # solution cells without a grade_id
    for cell in nb.cells:
        meta = _meta(cell) or {}
        if meta.get("solution"):
            (answers[meta["grade_id"]] if meta.get("grade_id") else orphans).append(cell.get("source", ""))
    problems = []
    known = {k[0] for k in released}           # only the course's names are quoted back
    copied = sorted({k[0] for k, n in shape.items() if n > 1 and k[0] in known})
    if copied:
        joined = [gid for gid in copied if len(answers.get(gid, [])) > 1]
        problems.append(f"your notebook holds the cell {', '.join(copied)} more than once (a copied cell keeps its "
                        "grading id)" + ("; the copies of your answer were joined into one cell, in notebook order"
                                         if joined else ""))
    if any(k[0] is None for k in shape):
        problems.append("a cell of your notebook lost its grading id (the grade_id in its nbgrader metadata)")
    rebuilt = copy.deepcopy(release)
    for cell in rebuilt.cells:
        gid = (_meta(cell) or {}).get("grade_id")
        if not (_meta(cell) or {}).get("solution") or not gid:
            continue
        if not answers.get(gid):
            found = [src for src in orphans if _defines(src, gid)]
            if found:
                answers[gid] = found[-1:]
                problems.append(f"the cell that defines {gid} was graded as your answer for it")
        if answers.get(gid):
            cell.source = "\n\n".join(dict.fromkeys(answers[gid]))
    if not problems:
        problems.append("the graded cells of your notebook were changed (deleted, renamed, or their metadata "
                        "edited)")
    problems[-1] += "; it was rebuilt from the released notebook with your answers"
    return _noted(rebuilt, problems)


def _unanswered(release, problem: str):
    return _noted(copy.deepcopy(release), [problem])


def _noted(nb, problems: list[str]):
    nb.metadata[PROBLEMS] = problems
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("**Grader note:** " + markdown_text("; ".join(problems)) + "."))
    return nb, problems
