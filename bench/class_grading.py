"""A synthetic class graded by `autograder.classroom.classgrade` (and, with `--serial`, by one serial
`nbgrader autograde`).

    .venv/bin/python bench/class_grading.py [ASSIGNMENT ...] [--learners 30] [--workers N]
                                            [--serial] [--serial-sample M] [--out FILE]

For each assignment (default: every one under solutions/ that has a hidden suite), a class of
`--learners` synthetic learners: the reference answer, the known correct and buggy answers of
`examples/variants/<assignment>.py`, the unanswered release, and three broken submissions — a
solution cell that never ends (`while True: pass`), a file that is not JSON, and a submission
folder without the notebook (nbgrader cannot grade it: a failed learner).  The class is graded

- in parallel, with `python -m autograder.classroom.classgrade` on a LocalCluster (`--workers`, default one
  per core), feedback and class report included;
- with `--serial`, also with the plain `nbgrader autograde ASSIGNMENT` + `nbgrader generate_feedback`,
  one learner after another in one process (with `--serial-sample M`, only the first M learners, and
  the serial time for the whole class is extrapolated from them, and said to be);

each into a fresh grading folder with its own SQLite gradebook, with the same shortened sandbox
time limits (so the never-ending cell costs 20 s, not minutes).  It prints the wall times, their
ratio and the time per notebook, checks that both gradebooks hold the same scores, and writes the
figures as JSON (`--out`, default `_build/bench/class_grading.json`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from autograder.authoring import variants
from autograder.authoring.release import nbgrader
from autograder.classroom import classgrade, grade
from autograder.notebooks import is_solution
from autograder.verdict import hidden

ROOT = Path(__file__).resolve().parent.parent

# The same limits for both runs: a never-ending cell is stopped after 20 s, in the notebook run and
# in the hidden suite's worker (autograder.config, through its environment overrides).
EXTRA = ()
ENV = {"GRADER_CELL_TIMEOUT": "20", "GRADER_CALL_TIMEOUT": "15", "GRADER_NOTEBOOK_TIMEOUT": "120"}
NOT_JSON = b'{"cells": [ {"cell_type": "code", this is not json'


def default_assignments() -> list[str]:
    return sorted(p.name for p in (ROOT / "solutions").iterdir()
                  if (p / f"{p.name}.ipynb").exists() and hidden.suite_path(p.name).exists())


def spinning(assignment: str):
    nb = variants.submission(assignment)
    first = next(c for c in nb.cells if is_solution(c))
    first.source = "while True:\n    pass\n"
    return nb


def synthetic_class(assignment: str, n: int) -> dict:
    """learner -> a notebook, raw bytes, or None (a submission folder without the notebook)."""
    answers = [("reference", lambda: variants.submission(assignment)),
               ("unanswered", lambda: variants.submission(assignment, answered=False))]
    if (variants.VARIANTS_DIR / f"{assignment}.py").exists():
        answers += [(v.name, lambda v=v: variants.submission(assignment, v.cells)) for v in variants.load(assignment)]
    broken = [("infinite_loop", lambda: spinning(assignment)), ("invalid_json", lambda: NOT_JSON),
              ("no_notebook", lambda: None)]
    if n <= len(broken):
        broken = broken[:max(0, n - 1)]
    plain = [answers[i % len(answers)] for i in range(n - len(broken))]
    # The broken ones spread through the class, not all at its end.
    order, step = list(plain), len(plain) // (len(broken) + 1)
    for j, b in enumerate(broken):
        order.insert((j + 1) * step + j, b)
    return {f"l{i:02d}_{name}": make() for i, (name, make) in enumerate(order)}


def submit_class(d: Path, assignment: str, learners: dict):
    for learner, nb in learners.items():
        grade.submit(d, learner, assignment, nb)


def scores(d: Path, assignment: str) -> dict:
    return {(r.learner, r.cell): r.score for r in grade.scores(d, [assignment], grade.db_url(d))}


def serial(d: Path, assignment: str, learners: dict) -> dict:
    grade.prepare(d, [assignment])
    submit_class(d, assignment, learners)
    t0 = time.monotonic()
    r = grade.autograde(d, assignment, extra=EXTRA, env_extra={**ENV, "GRADEBOOK_URL": grade.db_url(d)},
                        capture_output=True, text=True)
    autograde_s = time.monotonic() - t0
    f = nbgrader("generate_feedback", assignment, "--force", grading_dir=d, check=False, capture_output=True,
                 text=True, env_extra={"GRADEBOOK_URL": grade.db_url(d)})
    total_s = time.monotonic() - t0
    return {"learners": len(learners), "autograde_s": round(autograde_s, 1), "total_s": round(total_s, 1),
            "autograde_exit": r.returncode, "feedback_exit": f.returncode, "scores": scores(d, assignment)}


def parallel(d: Path, assignment: str, learners: dict, workers: int | None) -> dict:
    grade.prepare(d, [assignment])
    submit_class(d, assignment, learners)
    t0 = time.monotonic()
    res = classgrade.grade_class(assignment, d, workers=workers, extra=EXTRA, env=ENV,
                                 url=grade.db_url(d))
    total_s = time.monotonic() - t0
    return {"learners": len(learners), "autograde_s": round(res.grading_s, 1), "total_s": round(total_s, 1),
            "workers": res.workers, "failed": {o.learner: o.reason for o in res.failed},
            "retried": {o.learner: o.attempts for o in res.outcomes if o.attempts > 1},
            "mean_learner_s": round(sum(o.seconds for o in res.outcomes) / max(1, len(res.outcomes)), 1),
            "scores": scores(d, assignment)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("assignments", nargs="*")
    p.add_argument("--learners", type=int, default=30)
    p.add_argument("--workers", type=int, help="local Dask workers (default: one per core)")
    p.add_argument("--serial", action="store_true", help="also grade the class serially, with one nbgrader autograde")
    p.add_argument("--serial-sample", type=int, help="grade only this many learners serially and extrapolate")
    p.add_argument("--out", type=Path, default=ROOT / "_build" / "bench" / "class_grading.json")
    a = p.parse_args()
    assignments = a.assignments or default_assignments()
    results = {"cpus": os.cpu_count(), "load_before": os.getloadavg(), "assignments": {}}
    for asg in assignments:
        learners = synthetic_class(asg, a.learners)
        row = {}
        with tempfile.TemporaryDirectory(prefix=f"bench-{asg}-") as tmp:
            par = parallel(Path(tmp) / "parallel", asg, learners, a.workers)
            row["parallel"] = par
            if a.serial:
                sample = dict(list(learners.items())[: a.serial_sample or len(learners)])
                ser = serial(Path(tmp) / "serial", asg, sample)
                per_nb = ser["autograde_s"] / len(sample)
                ser["per_notebook_s"] = round(per_nb, 1)
                ser["extrapolated"] = len(sample) < len(learners)
                ser["autograde_s_class"] = round(per_nb * len(learners), 1)
                ser["total_s_class"] = round(ser["total_s"] / len(sample) * len(learners), 1)
                same = {k: v for k, v in par["scores"].items() if k[0] in sample}
                ser["scores_differ"] = sorted(f"{k[0]}:{k[1]} serial {ser['scores'].get(k)} parallel {v}"
                                              for k, v in same.items() if ser["scores"].get(k) != v)
                ser["scores_differ"] += sorted(f"{k[0]}:{k[1]} only serial" for k in ser["scores"] if k not in same)
                row["serial"] = ser
        results["assignments"][asg] = row
        print_row(asg, row)
    results["load_after"] = os.getloadavg()
    total = sum(r["parallel"]["total_s"] for r in results["assignments"].values())
    n = sum(r["parallel"]["learners"] for r in results["assignments"].values())
    print(f"\nthe whole class: {n} notebooks in {total:.0f} s ({total / 60:.1f} min) with feedback and reports, "
          f"{total / n:.1f} s per notebook")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for row in results["assignments"].values():
        for part in row.values():
            part.pop("scores", None)
    a.out.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nload average before {results['load_before'][0]:.1f}, after {results['load_after'][0]:.1f} "
          f"on {results['cpus']} cores; figures in {a.out}")
    return 0 if all(not r.get("serial", {}).get("scores_differ") for r in results["assignments"].values()) else 1


def print_row(asg: str, row: dict):
    par, ser = row["parallel"], row.get("serial")
    n = par["learners"]
    print(f"\n{asg}: {n} learners, {len(par['failed'])} not gradable ({', '.join(par['failed']) or 'none'})")
    print(f"  parallel, classgrade on {par['workers']} workers: autograde {par['autograde_s']:.1f} s, "
          f"with feedback and report {par['total_s']:.1f} s; {par['mean_learner_s']:.1f} s per learner's task")
    if par["retried"]:
        print(f"  graded again after a lock error: {par['retried']}")
    if ser:
        how = (f"measured on {ser['learners']} learners, extrapolated to {n}" if ser["extrapolated"]
               else "measured")
        print(f"  serial, nbgrader autograde: {ser['per_notebook_s']:.1f} s per notebook; autograde "
              f"{ser['autograde_s_class']:.1f} s, with feedback {ser['total_s_class']:.1f} s ({how})")
        print(f"  speed-up: autograde x{ser['autograde_s_class'] / par['autograde_s']:.2f}, "
              f"with feedback x{ser['total_s_class'] / par['total_s']:.2f}")
        if ser["scores_differ"]:
            print("  SCORES DIFFER between serial and parallel grading:\n    " + "\n    ".join(ser["scores_differ"]))
        else:
            print("  the serial and parallel gradebooks hold the same scores")


if __name__ == "__main__":
    sys.exit(main())
