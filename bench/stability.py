"""One notebook, one score: each known mistake (examples/variants/) and each learner of the example class graded again
and again, each grading with a seed of its own, and the distinct scores each gets.

A part's score must not depend on which of a grading's drawn inputs found its mistake: the edge calls every grading
holds (autograder.verdict.suites.contract.Promises.edges) and the fixed tests show each known mistake at every
grading, and the drawn calls only add to them. Each grading here is the grading engine nbgrader's autograde runs
(autograder.verdict.hidden.grade), on the cells the mistake can reach.

    .venv/bin/python bench/stability.py [--gradings 20] [--assignments a b] [-k substring ...] [--out FILE]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    from autograder import exercises
    from autograder.authoring import variants
    from autograder.classroom import grade_examples
    from autograder.verdict import hidden

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gradings", type=int, default=20)
    ap.add_argument("--assignments", nargs="*", default=exercises.names())
    ap.add_argument("-k", nargs="*", default=[""], help="only names containing one of these")
    ap.add_argument("--out", help="write the table here too")
    a = ap.parse_args()
    rows, differed = [], []
    started = time.time()
    for asg in a.assignments:
        cases = [(v.name, variants.submission(asg, v.cells), sorted(set(v.fails) | set(v.together)))
                 for v in variants.load(asg) if isinstance(v, variants.Bug) and any(k in v.name for k in a.k)]
        cases += [(f"learner {name}", grade_examples.example_submission(asg, answers[asg]), [])
                  for name, answers in grade_examples.roster().items()
                  if asg in answers and any(k in name for k in a.k)]
        for name, nb, only in cases:
            totals, failed = [], []
            for _ in range(a.gradings):
                g = hidden.grade(nb, asg, only=tuple(only))
                totals.append(round(sum(v.score for v in g.verdicts.values()), 2) if g.fault is None else None)
                failed.append({f"{gid}: {c.label}": c.diagnosis or "" for gid, v in g.verdicts.items()
                               for c in v.checks if not c.passed and not c.uncounted})
            distinct = sorted(set(t for t in totals if t is not None))
            rows.append((asg, name, a.gradings, distinct, totals.count(None)))
            faults = f" faults {totals.count(None)}" if None in totals else ""
            print(f"{asg:20s} {name:40s} distinct scores {distinct}{faults}", flush=True)
            if len(distinct) > 1:
                differed.append((asg, name, differing(totals, failed)))
                print(differed[-1][2], flush=True)
    lines = ["| assignment | known mistake or learner | gradings | distinct scores |", "| --- | --- | ---: | --- |"]
    lines += [f"| {asg} | {name} | {n} | {', '.join(f'{s:g}' for s in d)}{f' ({f} faults)' if f else ''} |"
              for asg, name, n, d, f in rows]
    unstable = [r for r in rows if len(r[3]) > 1]
    lines += ["", f"{len(rows) - len(unstable)} of {len(rows)} got one score at every grading "
              f"({time.time() - started:.0f} s in all)."]
    for asg, name, said in differed:
        lines += ["", f"{asg} {name}: what the gradings of each score failed that not every grading failed", "", said]
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    sys.exit(0)


def differing(totals: list, failed: list[dict]) -> str:
    """For a mistake that got more than one score: each score, how many gradings got it, and the checks they failed
    that some other grading passed (with one grading's words for each)."""
    graded = [set(f) for t, f in zip(totals, failed) if t is not None]
    common = set.intersection(*graded) if graded else set()
    out = []
    for score in sorted(set(totals), key=lambda t: (t is None, t or 0)):
        at = [f for t, f in zip(totals, failed) if t == score]
        extra = {label: f[label] for f in at for label in f if label not in common}
        out.append(f"- {score} ({len(at)} of {len(totals)}): " + ("; ".join(f"{label} ({why[:160]})" for label, why in
                                                                         sorted(extra.items())) or "nothing more"))
    return "\n".join(out)


if __name__ == "__main__":
    main()
