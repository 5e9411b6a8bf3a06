"""`make grade`: grade the bundled example class with the real nbgrader and print the gradebook.

Each learner's notebook is built from the released notebook and the answer that
`examples/class_roster.py` names, then `nbgrader autograde` and `nbgrader generate_feedback`
run on the whole class, and the scores are read back from the gradebook.  An assignment that no
learner of the class submits is named and skipped (nbgrader's autograde would log an ERROR for it).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

from autograder import ROOT
from autograder.authoring import variants
from autograder.classroom import grade


def roster() -> dict[str, dict[str, str]]:
    spec = importlib.util.spec_from_file_location("class_roster", ROOT / "examples" / "class_roster.py")
    assert spec is not None and spec.loader is not None      # a .py file
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CLASS


def example_submission(assignment: str, answer: str):
    if answer == "reference":
        return variants.submission(assignment)
    if answer == "unanswered":
        return variants.submission(assignment, answered=False)
    by_name = {v.name: v for v in variants.load(assignment)}
    return variants.submission(assignment, by_name[answer].cells)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("assignments", nargs="+")
    p.add_argument("--grading-dir", type=Path, default=grade.DEFAULT_DIR)
    a = p.parse_args()
    t0 = time.monotonic()
    grade.prepare(a.grading_dir, a.assignments)
    submitted = {asg: [learner for learner, answers in roster().items() if asg in answers] for asg in a.assignments}
    failed = []
    for asg, learners in submitted.items():
        if not learners:
            print(f"{asg}: no learner of the example class submits it (examples/class_roster.py); not graded")
            continue
        for learner in learners:
            grade.submit(a.grading_dir, learner, asg, example_submission(asg, roster()[learner][asg]))
        if grade.autograde(a.grading_dir, asg).returncode or grade.feedback(a.grading_dir, asg).returncode:
            failed.append(asg)
    rows = grade.scores(a.grading_dir, a.assignments)
    print(f"\nGradebook ({grade.db_url(a.grading_dir)}), graded in {time.monotonic() - t0:.0f} s:\n")
    print(grade.table(rows))
    print(f"Feedback: {a.grading_dir / 'feedback'}/<learner>/<assignment>/<assignment>.html")
    if failed:
        print(f"grading failed for {', '.join(failed)}: see the errors above")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
