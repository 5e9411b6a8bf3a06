"""What the project's tests share: the course's paths and assignments, its secrets and the search for them, the
browser's settings, text full of markdown's marks, a polled measure of processes' memory, a learner's check() run in
a real kernel, and grade books read as the LMS that imports them reads them."""
import atexit
import csv
import importlib.util
import io
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import psutil

from autograder import notebooks
from autograder.authoring import variants
from autograder.classroom import grade
from autograder.verdict import hidden

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists())

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Headless, and quiet: without these Chromium calls Google's hosts (updates, sync, field trials).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-default-apps", "--disable-extensions", "--disable-dev-shm-usage",
                 "--metrics-recording-only", "--no-default-browser-check", "--disable-features=Translate"]

# The trusted processes: nbgrader's, and the hidden suite's (a warm suite server and the processes forked from it,
# or one process per learner).
SUITE = ("autograder.verdict.suite_server", "autograder.verdict.hidden")
# Markdown's special characters (escape, emphasis, code, link, heading): text read back from a rendering would come
# back escaped or changed; read from the record, it is these characters.
MARKS = r"a \ b: (c) *d* _e_ `f` [g](h) # i"


_PREPARED: dict[str, Path] = {}


def prepare(grading_dir: Path, assignments: list[str]) -> Path:
    """`grade.prepare` (nbgrader generate_assignment into a new grading folder with its own SQLite gradebook), run once
    per assignment in this test process and copied after that: what it writes names no folder, so a copy is the
    same. A check service's prepared assignments are `<state>/templates/<assignment>`."""
    grading_dir = Path(grading_dir)
    key = ",".join(assignments)
    if key not in _PREPARED:
        _PREPARED[key] = Path(tempfile.mkdtemp(prefix="prepared-")) / "grading"
        atexit.register(shutil.rmtree, _PREPARED[key].parent, True)
        grade.prepare(_PREPARED[key], assignments)
    if grading_dir.exists():
        shutil.rmtree(grading_dir)
    shutil.copytree(_PREPARED[key], grading_dir)
    return grading_dir


def prepare_service(state: Path, assignments: list[str]):
    """A check service's state folder with its assignments prepared (`prepare`), as its Checker would."""
    for asg in assignments:
        prepare(Path(state) / "templates" / asg, [asg])


def all_variants():
    return [(asg, v) for asg in ASSIGNMENTS if (variants.VARIANTS_DIR / f"{asg}.py").exists()
            for v in variants.load(asg)]


def book_module(name: str):
    """A module of the book's own code (book/NAME.py), imported from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "book" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def solution_lines():
    """Lines of the reference solutions, which must never reach a learner before grading."""
    secrets = set()
    for asg in ASSIGNMENTS:
        for cell in notebooks.read(notebooks.source_notebook(asg)).cells:
            if notebooks.is_solution(cell):
                body = re.search(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S)
                secrets |= {ln.strip() for ln in body.group(1).splitlines() if len(ln.strip()) >= 25}
    return secrets


def suite_lines():
    """Lines of the hidden suites, which must never reach a learner at all (less the lines they share
    with the solutions: a learner's own notebook may hold those)."""
    secrets = set()
    for asg in ASSIGNMENTS:
        for ln in hidden.suite_path(asg).read_text().splitlines():
            ln = ln.strip()
            if len(ln) >= 30 and not ln.startswith(("#", '"""', "import", "from")):
                secrets.add(ln)
    solutions = "\n".join(c.source for asg in ASSIGNMENTS for c in notebooks.read(notebooks.source_notebook(asg)).cells
                          if notebooks.is_solution(c))
    return {ln for ln in secrets if ln not in solutions}


def secret_lines():
    return solution_lines() | suite_lines()


def leaks(text: str, secrets: set) -> list:
    """The secret lines found in a file's text (JSON-escaped notebook text included)."""
    text = text.replace('\\"', '"').replace("\\n", "\n")
    return [s for s in secrets if s in text]


def peak_memory(run, markers: dict[str, tuple[str, ...]]) -> tuple[object, float, dict[str, int]]:
    """(what run() returns, its wall time, {name: the peak resident memory of the processes under this one whose
    command line holds one of its markers}), polled from outside (VmHWM) while it runs."""
    peak: dict[str, int] = {}
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            for p in psutil.Process().children(recursive=True):
                try:
                    cmd = " ".join(p.cmdline())
                    with open(f"/proc/{p.pid}/status") as f:
                        hwm = next(int(line.split()[1]) << 10 for line in f if line.startswith("VmHWM"))
                except (psutil.Error, OSError, StopIteration):
                    continue
                for name, found in markers.items():
                    if any(m in cmd for m in found):
                        peak[name] = max(peak.get(name, 0), hwm)
            time.sleep(0.05)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    t0 = time.monotonic()
    try:
        result = run()
    finally:
        wall = time.monotonic() - t0
        stop.set()
        t.join()
    return result, wall, peak


def run_check_cell(assignment: str, folder: Path) -> str:
    """The released notebook's own check() cell, then `check()`, run in a real kernel in `folder` beside the
    learner's saved notebook (the reference submission, written there); what it printed. The address and the
    token are the kernel's environment's, as the caller set them."""
    from nbclient import NotebookClient

    from autograder.authoring.criteria import CHECK_CELL

    released = nbformat.read(str(ROOT / "exercises" / assignment / f"{assignment}.ipynb"), as_version=4)
    cell = next(c for c in released.cells if c.get("id") == CHECK_CELL)
    nbformat.write(variants.submission(assignment), str(folder / f"{assignment}.ipynb"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell.source), nbformat.v4.new_code_cell("check()")])
    NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(folder)}}).execute()
    return "".join(o.get("text", "") for o in nb.cells[1].outputs)


CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


def canvas_import(text: str) -> dict:
    """A grade-book CSV read as Canvas's Gradebook import reads it: the columns Student, ID, SIS User ID, SIS Login
    ID and Section first, then one per assignment, `Name (id)` for an existing Canvas assignment or `Name` for a new
    one; a first row `Points Possible` may give each assignment's points; a learner is found by ID, else SIS User ID,
    else SIS Login ID; a score is a number or empty (no change). {"assignments": [(name, id)], "points": {name:
    points}, "learners": {identifier: {name: score or None}}}; an AssertionError says what Canvas would refuse."""
    rows = list(csv.reader(io.StringIO(text)))
    assert rows and rows[0][:5] == CANVAS_COLUMNS, f"Canvas needs the columns {CANVAS_COLUMNS} first: {rows[:1]}"
    assignments = [re.fullmatch(r"(.+?)(?: \((\d+)\))?", h).groups() for h in rows[0][5:]]
    names = [name for name, _ in assignments]
    assert len(set(names)) == len(names), f"an assignment twice: {names}"
    points, learners = {}, {}
    for row in rows[1:]:
        assert len(row) == len(rows[0]), f"a row of {len(row)} cells under {len(rows[0])} columns: {row}"
        if row[0].strip() == "Points Possible":
            points = {name: float(v) for name, v in zip(names, row[5:])}
            continue
        who = row[1] or row[2] or row[3]
        assert who, f"a row Canvas cannot match to a learner (no ID, SIS User ID or SIS Login ID): {row}"
        assert who not in learners, f"{who} twice"
        scores = {}
        for name, value in zip(names, row[5:]):
            assert value == "" or re.fullmatch(r"\d+(\.\d+)?", value), f"{who}: {name} = {value!r} is not a score"
            scores[name] = float(value) if value else None
        learners[who] = scores
    return {"assignments": assignments, "points": points, "learners": learners}


def moodle_import(text: str, users: set[str], identify_by: str = "Username", items: dict[str, float] | None = None,
                  maximum: float = 100.0) -> dict:
    """A grade import CSV read as Moodle's (grade/import/csv, gradeimport_csv_load_data) reads it, with the column
    `identify_by` mapped to the users' usernames and each column named in `items` (grade item -> its maximum) mapped to
    that grade item: the headers trimmed and unique; a row with an empty user field skipped; a user that does not exist
    refused; a grade `-` or empty is no grade, else a number (a point as the decimal separator), at most the grade
    point maximum (100) and the item's maximum. {username: {item: grade or None}}; an AssertionError says what Moodle
    would refuse."""
    rows = list(csv.reader(io.StringIO(text)))
    header = [h.strip() for h in rows[0]]
    assert len(set(header)) == len(header), f"duplicate column names: {header}"
    assert identify_by in header, f"no column {identify_by!r} to identify users by: {header}"
    items = items or {}
    assert set(items) <= set(header), f"grade items without a column: {sorted(set(items) - set(header))}"
    who_at = header.index(identify_by)
    out: dict[str, dict] = {}
    for row in rows[1:]:
        user = row[who_at].strip()
        if not user:
            continue
        assert user in users, f"usermappingerror: no user with username {user!r}"
        grades = {}
        for item, top in items.items():
            value = row[header.index(item)].strip()
            if value in ("", "-"):
                grades[item] = None
                continue
            assert re.fullmatch(r"-?\d+(\.\d+)?", value), f"badgrade: {user} {item} = {value!r}"
            assert float(value) <= min(maximum, top), f"gradevaluetoobig: {user} {item} = {value}"
            grades[item] = float(value)
        out[user] = grades
    return out
