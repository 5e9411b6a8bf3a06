"""Reading course notebooks: which cells are the learner's code, which are graded, the reference.

Conventions of the source notebooks in `solutions/` (checked by the project's tests):
- a solution cell's `grade_id` is the contract name it defines (`sinusoidal_encoding`);
- the graded cell that scores it is `<name>_tests`, holds no test code (the hidden suite does the
  testing), and is locked;
- code cells tagged `setup` (imports) run before the solution cells in the sandboxed worker;
- a code cell the learner added runs with them, in notebook order, when it defines a name that their code uses
  (a helper function, a constant): one that only plots or prints is the notebook's, not the graded code's;
- a cell's IPython syntax (`%timeit`, `!pip`) is turned into Python as Jupyter does (IPython's input transformer).
"""
from __future__ import annotations

import ast
from pathlib import Path

import nbformat

from autograder import ROOT

SOLUTIONS = ROOT / "solutions"
TESTS_SUFFIX = "_tests"
CHECK_CELL = "check_my_work"      # the cell id of the release's `check()` (autograder/authoring/check_client.py)
COURSE_TAG = "course"             # the tag of a plain cell the course wrote (check(), a visible training run)


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


def is_added(cell) -> bool:
    """A code cell the learner added: no nbgrader metadata, not a plain cell of the course's (tagged COURSE_TAG)."""
    return (cell.get("cell_type") == "code" and not nbgrader_meta(cell)
            and COURSE_TAG not in cell.get("metadata", {}).get("tags", []))


def as_python(source: str) -> str:
    """A cell's code as Jupyter runs it: IPython's magics and shell lines (`%timeit f(x)`, `!ls`) as the calls of
    `get_ipython()` IPython's input transformer makes of them; Python as it is."""
    try:
        ast.parse(source)
        return source
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - what IPython cannot read either stays as written: the cell fails to compile
        return source


def _bound_and_used(source: str) -> tuple[set[str], set[str]]:
    """(the names a cell binds at its top level, the names it reads anywhere)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set(), set()
    bound: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).partition(".")[0] for a in stmt.names if a.name != "*")
        else:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    bound.add(node.id)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return bound, used


def learner_cells(nb) -> list[dict]:
    """The code the worker executes, in notebook order: setup cells, solution cells, and the cells the learner added
    that define a name the others use (transitively), each as Jupyter runs it (`as_python`)."""
    cells, added = [], {}
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        if is_solution(cell) or "setup" in cell.get("metadata", {}).get("tags", []) or is_added(cell):
            cells.append({"id": cell_id(cell, i), "source": as_python(cell.source)})
            if is_added(cell):
                added[cells[-1]["id"]] = _bound_and_used(cells[-1]["source"])
    if not added:
        return cells
    used: set[str] = set()
    for c in cells:
        if c["id"] not in added:
            used |= _bound_and_used(c["source"])[1]
    keep: set[str] = set()
    grew = True
    while grew:
        grew = False
        for cid, (bound, uses) in added.items():
            if cid not in keep and bound & used:
                keep.add(cid)
                used |= uses
                grew = True
    return [c for c in cells if c["id"] not in added or c["id"] in keep]


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
        run_cell(cell["source"], f"<reference {assignment}:{cell['id']}>", ns)
    return ns


def run_cell(source: str, filename: str, ns: dict):
    """Execute course code (a cell of a solution notebook, a known answer, a mutant) in this process, its source where
    `inspect` finds it under `filename` (a traceback shows its lines; Triton's @triton.jit reads it). Another source
    already held under that name gets a name of its own (`<name #2>`): Triton's interpreter reads a kernel's source
    when it first runs it, so two namespaces sharing a name would run the last one's kernel."""
    import linecache

    lines, n, name = source.splitlines(True), 1, filename
    while name in linecache.cache and linecache.cache[name][2:3] != (lines,):
        n += 1
        name = f"{filename[:-1]} #{n}>" if filename.endswith(">") else f"{filename} #{n}"
    linecache.cache[name] = (len(source), None, lines, name)
    exec(compile(source, name, "exec"), ns)
