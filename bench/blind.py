"""The blind corpus (examples/blind/) graded by the hidden suites: how many plausible mistakes lose points, how many
correct alternatives get full marks unflagged, how many slow answers lose their speed points, and which causes the
feedback names.

The corpus was written from the released notebooks and the book alone, by someone who never read the suites, the
solutions or the known answers (examples/blind/check.py proves each entry is what it claims against an
implementation of the notebooks' text written the same way). Each entry is graded as a learner's whole notebook by
the grading engine nbgrader's autograde runs (autograder.verdict.hidden.grade), on inputs drawn afresh.

    .venv/bin/python bench/blind.py [--round N] [--assignments a b] [-k substring] --json out.json
    .venv/bin/python bench/blind.py --report before.json after.json > bench/results/blind.md
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

from autograder import exercises

ROOT = Path(__file__).resolve().parent.parent
BLIND = ROOT / "examples" / "blind"


# What a speed or memory check's failure says: its time or memory measured, or the calls of a course part the grader
# counted (a loop over heads or sequences, whose time is the course worker's)
SPEED_SAID = ("time of the reference", "memory", "the reference solution calls it once")


def corpus(round_: int) -> Path:
    """Where round `round_`'s corpus is: each round's is written afresh, by someone who read neither the suites nor
    an earlier round's corpus (round 1: examples/blind/, round N: examples/blind/roundN/)."""
    return BLIND if round_ == 1 else BLIND / f"round{round_}"


def covered(round_: int) -> list[str]:
    """The exercises a round's corpus covers, in the course's order."""
    return [n for n in exercises.names() if (corpus(round_) / f"{n}.py").exists()]


def entries(assignment: str, round_: int = 1) -> list[dict]:
    if str(corpus(round_)) not in sys.path:
        sys.path.insert(0, str(corpus(round_)))         # a corpus may build its entries on its own spec modules
    spec = importlib.util.spec_from_file_location(f"blind{round_}_{assignment}", corpus(round_) / f"{assignment}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return list(mod.ENTRIES)


def notebook(assignment: str, entry: dict):
    """The released notebook with the entry's cells in place (the reference's elsewhere) and its extra cells, which
    the learner added, before the cells they name."""
    import nbformat

    from autograder.authoring import variants
    from autograder.notebooks import nbgrader_meta

    nb = variants.submission(assignment, entry["cells"])
    for extra in entry.get("extra_cells", []):
        at = next(i for i, c in enumerate(nb.cells) if nbgrader_meta(c).get("grade_id") == extra["before"])
        nb.cells.insert(at, nbformat.v4.new_code_cell(extra["source"]))
    return nb


def grade(assignment: str, entry: dict) -> dict:
    from autograder.verdict import hidden

    started = time.time()
    g = hidden.grade(notebook(assignment, entry), assignment)
    cells = {gid: {"score": v.score, "points": v.points, "status": v.status, "causes": v.causes,
                   "failed": v.failed[:6]} for gid, v in g.verdicts.items()}
    return {"assignment": assignment, "name": entry["name"], "kind": entry["kind"], "why": entry["why"],
            "parts": sorted(entry["cells"]), "fault": g.fault, "cells": cells,
            "seconds": round(time.time() - started, 1)}


def verdict(r: dict) -> str:
    """caught / missed for a mistake or a slow answer, full / marked down / flagged for a correct one."""
    if r["fault"]:
        return "fault"
    lost = sum(c["points"] - c["score"] for c in r["cells"].values())
    flagged = any(c["status"] != "graded" for c in r["cells"].values())
    if r["kind"] == "correct":
        return "flagged" if flagged else "marked down" if lost > 1e-9 else "full"
    if r["kind"] == "slow":
        speed = any(any(said in f for said in SPEED_SAID) for c in r["cells"].values() for f in c["failed"])
        return "caught" if speed else "caught (not by speed)" if lost > 1e-9 else "missed"
    return "caught" if lost > 1e-9 else "flagged" if flagged else "missed"


def report(paths: list[str]):
    runs = [(Path(p).stem, json.loads(Path(p).read_text())) for p in paths]
    kinds = ("mistake", "correct", "slow")
    print("| run | " + " | ".join(kinds) + " |")
    print("| --- | " + " | ".join("---" for _ in kinds) + " |")
    for name, results in runs:
        cols = []
        for kind in kinds:
            rs = [r for r in results if r["kind"] == kind]
            good = "full" if kind == "correct" else "caught"
            cols.append(f"{sum(verdict(r) == good for r in rs)} / {len(rs)}")
        print(f"| {name} | " + " | ".join(cols) + " |")
    print()
    names = sorted({(r["assignment"], r["name"]) for _, results in runs for r in results})
    print("| assignment | entry | kind | " + " | ".join(n for n, _ in runs) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in runs) + " |")
    for asg, entry in names:
        row = []
        kind = ""
        for _, results in runs:
            r = next((r for r in results if (r["assignment"], r["name"]) == (asg, entry)), None)
            kind = r["kind"] if r else kind
            row.append(verdict(r) if r else "")
        print(f"| {asg} | {entry} | {kind} | " + " | ".join(row) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--round", type=int, default=1, help="which round's corpus (examples/blind/roundN/ for N > 1)")
    ap.add_argument("--assignments", nargs="*")
    ap.add_argument("-k", default="", help="only the entries whose name holds this")
    ap.add_argument("--json", help="write each entry's grading here")
    ap.add_argument("--report", nargs="+", help="tabulate gradings written by --json")
    a = ap.parse_args()
    if a.report:
        report(a.report)
        return
    out = []
    for asg in a.assignments or covered(a.round):
        for entry in entries(asg, a.round):
            if a.k not in entry["name"]:
                continue
            r = grade(asg, entry)
            out.append(r)
            print(f"{asg:20s} {entry['name']:45s} {entry['kind']:8s} {verdict(r):22s} {r['seconds']:6.1f} s",
                  flush=True)
            if a.json:
                Path(a.json).write_text(json.dumps(out, indent=1))
    sys.exit(0)


if __name__ == "__main__":
    main()
