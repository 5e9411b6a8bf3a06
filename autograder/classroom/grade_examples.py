"""`make grade`: grade the bundled example class with the real nbgrader, print the gradebook, write the class reports.

    python -m autograder.classroom.grade_examples [ASSIGNMENT...] [--grading-dir DIR]

The example class is graded apart from the course's own: in its own grading folder and gradebook, `_build/examples`
(its SQLite file, whatever GRADEBOOK_URL says), never the course's grading folder (`_build/grading`, or GRADING_DIR)
that the instructor's nbgrader commands use, which it refuses. Each learner's notebook is built from the released
notebook and the answer that `examples/class_roster.py` names, then `nbgrader autograde` and
`nbgrader generate_feedback` run on the whole class, the scores are read back from the gradebook and each
assignment's class report is written into `<grading-dir>/report/<assignment>/`. Only the assignments the class submits
are recorded in its gradebook; another one asked for is named and skipped.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

from autograder import ROOT
from autograder.authoring import variants
from autograder.classroom import grade, report

EXAMPLES_DIR = ROOT / "_build" / "examples"


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


def course_grading_dir() -> Path:
    """The grading folder of the course's own class, as nbgrader_config.py picks it."""
    return Path(os.environ.get("GRADING_DIR", grade.DEFAULT_DIR)).resolve()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder.classroom.grade_examples",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("assignments", nargs="*", help="default: every assignment the example class submits")
    p.add_argument("--grading-dir", type=Path, default=EXAMPLES_DIR)
    a = p.parse_args(argv)
    a.grading_dir = a.grading_dir.resolve()           # nbgrader runs from the course's root, wherever this runs
    if a.grading_dir == course_grading_dir():
        p.error(f"{a.grading_dir} is the course's own grading folder: the example class is graded apart "
                f"(default {EXAMPLES_DIR.relative_to(ROOT)})")
    os.environ.pop("GRADEBOOK_URL", None)            # the example class's gradebook is its folder's SQLite file
    t0 = time.monotonic()
    submitted = {asg: [learner for learner, answers in roster().items() if asg in answers]
                 for asg in a.assignments or sorted({asg for answers in roster().values() for asg in answers})}
    for asg in [asg for asg, learners in submitted.items() if not learners]:
        print(f"{asg}: no learner of the example class submits it (examples/class_roster.py); not graded")
    graded = [asg for asg, learners in submitted.items() if learners]
    if not graded:
        return 0
    grade.prepare(a.grading_dir, graded)
    failed = []
    for asg in graded:
        for learner in submitted[asg]:
            grade.submit(a.grading_dir, learner, asg, example_submission(asg, roster()[learner][asg]))
        if grade.autograde(a.grading_dir, asg).returncode or grade.feedback(a.grading_dir, asg).returncode:
            failed.append(asg)
    rows = grade.scores(a.grading_dir, graded)
    print(f"\nThe example class's gradebook ({grade.db_url(a.grading_dir)}), "
          f"graded in {time.monotonic() - t0:.0f} s:\n")
    print(grade.table(rows))
    print(f"Feedback: {a.grading_dir / 'feedback'}/<learner>/<assignment>/<assignment>.html")
    for asg in graded:
        print(f"Class report: {report.build(a.grading_dir, asg)['html']}")
    if failed:
        print(f"grading failed for {', '.join(failed)}: see the errors above")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
