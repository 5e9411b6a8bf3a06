"""Where one notebook's grading time goes (`make bench`): numbers, not pass/fail.

For each assignment, the reference solution is graded by the real `nbgrader autograde` in a fresh grading
folder; the table splits the command's wall time with what the grading record holds: the notebook's run in
the sandbox (for the feedback), the trusted suite process (its start, its imports and collection, each
worker's start by role, each graded cell's tests), and the rest (nbgrader itself: reading, the gradebook).

    python bench/profile.py [ASSIGNMENT...] [--repeat N]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from autograder.authoring import variants
from autograder.classroom import grade  # noqa: E402
from autograder.verdict import record  # noqa: E402


def profile_once(assignment: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="profile-") as tmp:
        d = Path(tmp)
        grade.prepare(d, [assignment])
        grade.submit(d, "reference", assignment, variants.submission(assignment))
        t0 = time.perf_counter()
        r = grade.autograde(d, assignment, capture_output=True, text=True)
        total = time.perf_counter() - t0
        if r.returncode:
            raise SystemExit(f"{assignment}: autograde failed:\n{r.stderr[-3000:]}")
        rec = record.load(record.path(d, "reference", assignment, assignment)) or {}
    p = rec.get("profile", {})
    row = {"total": total, "notebook run": rec.get("execute_s", 0.0), "suite": p.get("suite_s", 0.0),
           "suite start": p.get("process_start_s", 0.0), "imports+collect": p.get("collect_s", 0.0)}
    workers = defaultdict(float)
    for role, seconds in p.get("workers", []):
        workers[role] += seconds
    row.update({f"start {role}": s for role, s in workers.items()})
    row.update({f"tests {cell.removesuffix('_tests')}": s for cell, s in p.get("cells_s", {}).items()})
    row["nbgrader rest"] = total - row["notebook run"] - row["suite"]
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("assignments", nargs="*")
    p.add_argument("--repeat", type=int, default=1)
    a = p.parse_args()
    root = Path(__file__).resolve().parent.parent
    assignments = a.assignments or sorted(d.name for d in (root / "solutions").iterdir())
    for asg in assignments:
        rows = [profile_once(asg) for _ in range(a.repeat)]
        print(f"\n{asg}: one notebook graded by nbgrader autograde, seconds (median of {a.repeat})")
        for key in rows[0]:
            values = [r.get(key, 0.0) for r in rows]
            print(f"  {key:<34} {statistics.median(values):7.2f}")


if __name__ == "__main__":
    main()
