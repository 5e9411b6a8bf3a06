"""What the project's tests share: the course's paths and assignments, its secrets and the search for them, the
browser's settings, a polled measure of processes' memory, and a learner's check() run in a real kernel."""
import importlib.util
import os
import re
import threading
import time
from pathlib import Path

import nbformat
import psutil

from autograder import notebooks
from autograder.authoring import variants
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
