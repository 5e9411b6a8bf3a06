"""Run an assignment's hidden suite against one submission and score its graded cells.

The suite runs in a fresh trusted Python process (`python -m autograder.hidden ...`) that never
executes learner code: its `learner` fixture talks to a sandboxed worker.  The process writes
one record per test (graded cell, weight, outcome, diagnosis); `grade()` turns them into a
score per graded cell, a plain float in [0, points].
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from . import ROOT
from .notebooks import graded_cells, learner_cells

SUITES = Path(__file__).parent / "suites"
SUITE_TIMEOUT = float(os.environ.get("GRADER_SUITE_TIMEOUT", "900"))


@dataclass
class Verdict:
    grade_id: str
    points: float
    score: float = 0.0
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)     # diagnoses

    def text(self) -> str:
        lines = [f"{self.grade_id}: {self.score:g} / {self.points:g} points"]
        lines += [f"  passed: {p}" for p in self.passed]
        lines += [f"  FAILED: {d}" for d in self.failed]
        return "\n".join(lines)


def suite_path(assignment: str) -> Path:
    return SUITES / f"test_{assignment}.py"


# -- inside the suite process -----------------------------------------------------------------
def diagnose(excinfo) -> str:
    from autograder.learner import LearnerError, WorkerDied
    from autograder.suites.checks import Diagnosis

    e = excinfo.value
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    if isinstance(e, Diagnosis):
        return str(e)
    if isinstance(e, LearnerError):
        if e.isa("NotImplementedError"):
            return "not implemented yet (it raises NotImplementedError)"
        where = f" at {e.traceback.strip().splitlines()[0].strip()}" if e.traceback.strip() else ""
        return f"your code raised {e}{where}"
    if isinstance(e, WorkerDied):
        return str(e)
    sys.stderr.write("grader: unexpected error in a hidden test:\n" + "".join(
        traceback.format_exception(type(e), e, e.__traceback__)))
    return f"the grader could not check your answer (it led to {type(e).__name__}); check what your code returns"


class Recorder:
    def __init__(self):
        self.records: list[dict] = []

    def _label(self, item) -> str:
        doc = (getattr(item, "function", None).__doc__ or "").strip() if hasattr(item, "function") else ""
        return doc.splitlines()[0] if doc else item.name

    def pytest_runtest_makereport(self, item, call):
        if call.when == "teardown":      # after the fixtures' teardown, which records library calls
            self._library_calls(item)
            return
        if call.when not in ("setup", "call"):
            return
        if call.when == "setup" and call.excinfo is None:
            return
        marker = item.get_closest_marker("cell")
        weight = item.get_closest_marker("weight")
        self.records.append({
            "cell": marker.args[0] if marker else None,
            "weight": float(weight.args[0]) if weight else 1.0,
            "label": self._label(item),
            "passed": call.excinfo is None,
            "diagnosis": None if call.excinfo is None else diagnose(call.excinfo),
            "test": item.nodeid,
        })

    def _library_calls(self, item):
        for name, value in item.user_properties:
            if name == "forbidden":
                for rec in self.records:
                    if rec["test"] == item.nodeid:
                        rec["forbidden"] = value


def _suite_main(assignment: str, out: str) -> int:
    import pytest

    recorder = Recorder()
    code = pytest.main([str(suite_path(assignment)), "-q", "-p", "no:cacheprovider", "--assert=plain",
                        "-o", "console_output_style=classic", "--no-header", "-rN",
                        "--rootdir", str(SUITES), "-c", os.devnull], plugins=[recorder])
    Path(out).write_text(json.dumps({"exit": int(code), "records": recorder.records}))
    return 0


# -- the trusted grader's side -------------------------------------------------------------------
def run_suite(assignment: str, cells: list[dict]) -> dict:
    with tempfile.TemporaryDirectory(prefix="grader-suite-") as tmp:
        cells_path, out = Path(tmp) / "cells.json", Path(tmp) / "out.json"
        cells_path.write_text(json.dumps(cells))
        env = {**os.environ, "GRADER_CELLS": str(cells_path), "PYTHONPATH": str(ROOT),
               "PYTHONDONTWRITEBYTECODE": "1"}
        log = Path(tmp) / "log.txt"
        with open(log, "wb") as logf:
            try:
                subprocess.run([sys.executable, "-m", "autograder.hidden", assignment, str(out)], cwd=ROOT,
                               env=env, stdout=logf, stderr=subprocess.STDOUT, timeout=SUITE_TIMEOUT,
                               stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                pass
        if not out.exists():
            tail = log.read_text(errors="replace")[-4000:]
            return {"error": "the hidden suite did not complete", "log": tail}
        result = json.loads(out.read_text())
        result["log"] = log.read_text(errors="replace")[-8000:]
        return result


def score(records: list[dict], graded: dict[str, float]) -> dict[str, Verdict]:
    verdicts = {gid: Verdict(gid, pts) for gid, pts in graded.items()}
    weights: dict[str, list[float]] = {gid: [0.0, 0.0] for gid in graded}
    forbidden: dict[str, set] = {gid: set() for gid in graded}
    for rec in records:
        gid = rec.get("cell")
        if gid not in verdicts:
            continue
        weights[gid][1] += rec["weight"]
        if rec["passed"]:
            weights[gid][0] += rec["weight"]
            verdicts[gid].passed.append(rec["label"])
        elif rec["diagnosis"] not in verdicts[gid].failed:
            verdicts[gid].failed.append(rec["diagnosis"])
        forbidden[gid] |= set(rec.get("forbidden", {}))
    for gid, v in verdicts.items():
        got, total = weights[gid]
        if total == 0:
            v.failed.append("no hidden tests are linked to this cell (a course configuration error)")
            v.score = 0.0
        elif forbidden[gid]:
            names = ", ".join(sorted(forbidden[gid]))
            v.failed.insert(0, f"your code calls {names}, the library version of what this exercise asks you "
                               "to write: no points for this part")
            v.score = 0.0
        else:
            v.score = round(v.points * got / total, 2)
        v.score = min(max(v.score, 0.0), v.points)
    return verdicts


def grade(nb, assignment: str) -> dict[str, Verdict]:
    """Score every graded cell of a (sanitized) submitted notebook with the hidden suite."""
    graded = graded_cells(nb)
    result = run_suite(assignment, learner_cells(nb))
    if "error" in result:
        sys.stderr.write(f"grader: {result['error']}\n{result.get('log', '')}\n")
        verdicts = {gid: Verdict(gid, pts) for gid, pts in graded.items()}
        for v in verdicts.values():
            v.failed.append("grading did not complete (a grader problem, not your code): ask your instructor")
        return verdicts
    return score(result["records"], graded)


if __name__ == "__main__":
    sys.exit(_suite_main(sys.argv[1], sys.argv[2]))
