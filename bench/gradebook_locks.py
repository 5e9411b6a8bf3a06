"""Concurrent writers to one SQLite gradebook: how often does "database is locked" happen?

    .venv/bin/python bench/gradebook_locks.py [--procs 8 16 32] [--learners 4] [--timeouts default 60]

Each of `--procs` processes records `--learners` learners into one fresh SQLite gradebook, with the
same nbgrader `Gradebook` calls and commits that one `nbgrader autograde --student=...` makes
(`Autograde.init_assignment`, `SaveAutoGrades`, then `autograder.pipeline.diagnoses.SaveDiagnoses`),
all processes starting together, without the minutes of notebook execution in between: the worst
case for lock contention.  It runs once with the URL nbgrader gets by default (Python's 5 s busy
timeout) and once per `--timeouts` value (`sqlite:///...?timeout=N`), and prints how many learners
failed with a lock error.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
import traceback

from autograder.authoring.release import tools_path  # noqa: E402

os.environ["PATH"] = tools_path()      # a new gradebook runs alembic, which `make bench` does not put on PATH

ASG, NB = "bench_assignment", "bench_assignment"
CELLS = ["sinusoidal_encoding", "rope", "alibi_bias"]
POINTS = {"sinusoidal_encoding_tests": 4.0, "rope_tests": 4.0, "alibi_bias_tests": 3.0}


def make_gradebook(url: str):
    from nbgrader.api import Gradebook

    with Gradebook(url):                      # both course rows exist, as after generate_assignment
        pass
    with Gradebook(url, "bench") as gb:
        gb.add_assignment(ASG)
        gb.add_notebook(NB, ASG)
        for name in CELLS:
            gb.add_solution_cell(name, NB, ASG)
            gb.add_source_cell(name, NB, ASG, cell_type="code", source="# YOUR CODE HERE", checksum="x")
            gb.add_grade_cell(f"{name}_tests", NB, ASG, max_score=POINTS[f"{name}_tests"], cell_type="code")
            gb.add_source_cell(f"{name}_tests", NB, ASG, cell_type="code", source="", checksum="y", locked=True)
        gb.db.commit()


def autograde_writes(url: str, student: str):
    """The gradebook traffic of one learner's autograde, in nbgrader's order."""
    from nbgrader.api import Gradebook

    with Gradebook(url, "bench") as gb:                      # init_assignment
        gb.update_or_create_student(student)
    with Gradebook(url, "bench") as gb:
        gb.find_assignment(ASG)
    with Gradebook(url, "bench") as gb:
        gb.update_or_create_submission(ASG, student)
    with Gradebook(url, "bench") as gb:
        gb.find_notebook(NB, ASG)
    with Gradebook(url) as gb:                               # OverwriteCells / OverwriteKernelspec read
        gb.find_notebook(NB, ASG)
    with Gradebook(url) as gb:                               # SaveAutoGrades: one commit per cell
        for name in CELLS:
            g = gb.find_grade(f"{name}_tests", NB, ASG, student)
            g.auto_score = POINTS[f"{name}_tests"] / 2
            g.needs_manual_grade = False
            gb.db.commit()
            c = gb.find_comment(name, NB, ASG, student)
            c.auto_comment = None
            gb.db.commit()
    with Gradebook(url) as gb:                               # SaveDiagnoses
        for name in CELLS:
            c = gb.find_comment(name, NB, ASG, student)
            c.auto_comment = "a diagnosis"
        gb.db.commit()


def worker(url: str, proc: int, learners: int, start_at: float, results):
    import warnings

    from sqlalchemy.exc import SAWarning

    warnings.filterwarnings("ignore", category=SAWarning)   # nbgrader's own, on every submission
    while time.time() < start_at:
        time.sleep(0.001)
    for i in range(learners):
        student = f"p{proc:03d}l{i:02d}"
        try:
            autograde_writes(url, student)
            results.put((student, None))
        except Exception as e:  # noqa: BLE001 - counted and reported
            msg = f"{type(e).__name__}: {e}".splitlines()[0]
            results.put((student, msg if "locked" in msg else msg + "\n" + traceback.format_exc()[-500:]))


def run(procs: int, learners: int, timeout: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="locks-") as tmp:
        url = f"sqlite:///{tmp}/gradebook.db"
        make_gradebook(url)
        if timeout != "default":
            url += f"?timeout={timeout}"
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        start_at = time.time() + 3.0 + procs * 0.1
        ps = [ctx.Process(target=worker, args=(url, p, learners, start_at, results)) for p in range(procs)]
        for p in ps:
            p.start()
        got = [results.get(timeout=600) for _ in range(procs * learners)]
        t = time.time() - start_at
        for p in ps:
            p.join()
        errors = [e for _, e in got if e]
        return {"procs": procs, "learners": procs * learners, "timeout": timeout, "seconds": round(t, 1),
                "locked": sum("locked" in e for e in errors), "other": [e for e in errors if "locked" not in e]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, nargs="+", default=[8, 16, 32])
    p.add_argument("--learners", type=int, default=4, help="learners per process")
    p.add_argument("--timeouts", nargs="+", default=["default", "60"],
                   help="'default' (nbgrader's URL as it is) and/or busy timeouts in seconds")
    a = p.parse_args()
    print(f"{'processes':>9} {'learners':>8} {'busy timeout':>12} {'seconds':>8} {'locked':>6}  other errors")
    for procs in a.procs:
        for timeout in a.timeouts:
            r = run(procs, a.learners, timeout)
            shown = "5 s (default)" if timeout == "default" else f"{timeout} s"
            print(f"{r['procs']:>9} {r['learners']:>8} {shown:>12} {r['seconds']:>8} {r['locked']:>6}  "
                  f"{len(r['other'])}", flush=True)
            for e in r["other"][:3]:
                print("   ", e, file=sys.stderr)


if __name__ == "__main__":
    main()
