"""Run an assignment's hidden suite against one submission and score its graded cells.

The suite runs in a trusted Python process that never executes learner code (forked by the warm suite server, or
`python -m autograder.verdict.hidden`): its `learner` fixture talks to a sandboxed worker.  The process is sent the
learner's cells in one request and replies with one record per test (graded cell, weight, outcome, diagnosis, or a
grader fault) and what it could not measure from outside (autograder.verdict.channel); `grade()` adds the static
reading of the learner's source (autograder.verdict.static) and returns one `Verdict` per graded cell: the single
record from which the graded cell's output, the gradebook comment, the feedback and the class report are all rendered.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import os
import resource
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from autograder import config
from autograder.notebooks import TESTS_SUFFIX, graded_cells, learner_cells
from autograder.verdict import channel, context, static
from autograder.verdict.record import DRAWN, FAMILY, FIXED, FLAGGED, MEASURED, Check, GraderFault, Grading, Verdict

SUITES = Path(__file__).parent / "suites"
def suite_path(assignment: str, settings: config.Settings | None = None) -> Path:
    folder = (settings or config.current()).suites_dir
    return (Path(folder) if folder else SUITES) / f"test_{assignment}.py"


# -- inside the suite process -----------------------------------------------------------------
@dataclass
class Finding:
    """What one failed test found: what the learner reads, whether it is a grader fault, the causes the evidence
    names and those it rules out, and whether the part is not written yet (the release's stub raised)."""

    diagnosis: str
    fault: bool = False
    causes: list[str] = field(default_factory=list)
    ruled_out: list[str] = field(default_factory=list)
    unanswered: bool = False


def diagnose(excinfo) -> Finding:
    from autograder.verdict.learner import LearnerError, WorkerDied
    from autograder.verdict.suites.checks import NOT_IMPLEMENTED, Diagnosis

    e = excinfo.value
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    if isinstance(e, Diagnosis):
        return Finding(str(e), False, e.causes, e.ruled_out, e.unanswered)
    if isinstance(e, GraderFault):
        return Finding(str(e), fault=True)
    if isinstance(e, LearnerError):
        if e.isa("NotImplementedError"):
            return Finding(NOT_IMPLEMENTED, unanswered=True)
        where = f" at {e.traceback.strip().splitlines()[0].strip()}" if e.traceback.strip() else ""
        hint = ""
        if "same device" in e.message:      # a GPU grading: the timed calls' inputs are on the GPU
            hint = ("; the timed calls run on a GPU: make every new tensor on the device of the inputs "
                    "(device=q.device, torch.zeros_like, q.new_zeros), and keep constant tensors in buffers "
                    "(register_buffer) so that .to(device) moves them")
        return Finding(f"your code raised {e}{where}{hint}")
    if isinstance(e, WorkerDied):
        return Finding(str(e))
    sys.stderr.write("grader: unexpected error in a hidden test:\n" + "".join(
        traceback.format_exception(type(e), e, e.__traceback__)))
    return Finding(f"the grader could not check your answer (it led to {type(e).__name__}); check what your code "
                   "returns")


def _cause_ids(assignment: str, causes: list[str]) -> list[str]:
    """The known mistakes' names for `causes` (imported here: the suite process has torch; nbgrader's need not)."""
    if not causes:
        return []
    from autograder.verdict import known

    return known.cause_ids(assignment, causes)


class Recorder:
    def __init__(self, grading: context.Context, only=(), assignment: str = ""):
        self.grading = grading                   # the learner's grading, which the suite's tests are given
        self.assignment = assignment
        self.only = set(only)                    # the graded cells whose tests run (all when empty)
        self.records: list[dict] = []
        self.collection_errors: list[str] = []
        self.seconds: dict[str, float] = {}       # graded cell -> seconds its tests took (fixtures included)
        self.first_test: float | None = None
        self.structure: dict[str, dict] = {}      # graded cell -> the learner's module drawn beside the course's
        self.learner = None                        # the learner's worker, whose recorded calls settle the causes

    def _label(self, item) -> str:
        doc = (getattr(item, "function", None).__doc__ or "").strip() if hasattr(item, "function") else ""
        return doc.splitlines()[0] if doc else item.name

    def pytest_collection_modifyitems(self, config, items):
        """Only the tests of the graded cells `only` names, when it names any (the suites' mutation testing grades
        one part at a time: autograder.authoring.mutation)."""
        if self.only:
            items[:] = [i for i in items if (m := i.get_closest_marker("cell")) is not None and m.args[0] in self.only]

    def pytest_collectreport(self, report):
        if report.failed:
            self.collection_errors.append(str(report.longrepr)[-4000:])

    def pytest_runtest_setup(self, item):
        """Past the learner's budget no check starts: each would fail at its first call of the learner's code, after
        the trusted side's own work for it (drawn inputs, the course's answers), which the grace past the budget is
        too short for on a slow machine."""
        if time.time() >= self.grading.deadline:
            from autograder.verdict.learner import OUT_OF_TIME, WorkerDied

            raise WorkerDied(OUT_OF_TIME)

    def settle_causes(self):
        """A cause a failed test named is dropped when that known mistake answered some call of the learner's code
        otherwise, before or after the test: a test asks of the calls made so far, and a cache that hands out one mask
        twice was told its mask was cut from a table made for 128 positions, which a later call of 300 positions
        rules out (autograder.verdict.known)."""
        named = {c for r in self.records for c in r["causes"]}
        calls = getattr(self.learner, "calls", None)
        if not named or not calls or not self.assignment:
            return
        from autograder.verdict import known

        last = {c["part"]: i for i, c in enumerate(calls)}
        gone = {bug.cause for i in last.values() for bug, theirs in known.replay(self.assignment, calls, i)
                if theirs["differed"]} & named
        for r in self.records:
            if gone & set(r["causes"]):
                r["causes"] = [c for c in r["causes"] if c not in gone]
                r["ruled_out"] = sorted(set(r["ruled_out"]) | gone)
                r["cause_ids"] = _cause_ids(self.assignment, r["causes"])

    def pytest_runtest_makereport(self, item, call):
        marker = item.get_closest_marker("cell")
        self.learner = getattr(item, "funcargs", {}).get("learner", self.learner)
        if self.first_test is None:
            self.first_test = call.start
        cell = marker.args[0] if marker else "(none)"
        self.seconds[cell] = self.seconds.get(cell, 0.0) + call.duration
        for key, value in item.user_properties:
            if key == "structure" and marker:
                self.structure[cell] = value
        if item.get_closest_marker("feedback") or call.when not in ("setup", "call") or (
                call.when == "setup" and call.excinfo is None):
            return
        refused = list(dict.fromkeys(self.grading.refused))
        self.grading.refused.clear()
        weight = item.get_closest_marker("weight")
        found = diagnose(call.excinfo) if call.excinfo is not None else None
        if found is not None and found.fault:  # the whole grading is the grader's fault: no later test can change that
            item.session.shouldfail = "a grader fault"
        self.records.append({
            "cell": marker.args[0] if marker else None,
            "weight": float(weight.args[0]) if weight else 1.0,
            "label": self._label(item),
            "passed": call.excinfo is None,
            "diagnosis": found and found.diagnosis,
            "fault": bool(found and found.fault),
            "unanswered": bool(found and found.unanswered),
            "together": item.get_closest_marker("together") is not None,
            "kind": next((k for k in (DRAWN, MEASURED, FAMILY) if item.get_closest_marker(k)), FIXED),
            "causes": found.causes if found else [],
            "ruled_out": found.ruled_out if found else [],
            "refused": refused if call.excinfo is not None else [],
            "cause_ids": _cause_ids(self.assignment, found.causes if found else []),
            "test": item.nodeid,
        })


def given(grading: context.Context):
    """A pytest plugin whose session fixture `grading` is this grading: how the suites are handed it."""
    import pytest

    class Given:
        @pytest.fixture(scope="session", name="grading")
        def the_grading(self) -> context.Context:
            return grading

    return Given()


def answer(req: dict, grading: context.Context) -> dict:
    """The hidden suite's result for one request ({"assignment", "cells", "deadline", "launched", "only",
    "first_failure"}), run in this process for `grading`, which takes the request's cells and deadline."""
    import pytest

    grading.cells, grading.deadline = list(req["cells"]), float(req["deadline"])
    assignment, seed = req["assignment"], grading.seed
    sys.stderr.write(f"grader: inputs drawn from grading seed {seed} (GRADER_SEED={seed} replays them)\n")
    main_started = time.time()
    recorder = Recorder(grading, req.get("only") or (), assignment)
    path = suite_path(assignment)
    first = ["-x"] if req.get("first_failure") else []   # whether, not how much, is asked
    code = pytest.main([str(path), "-q", "-p", "no:cacheprovider", "--assert=plain",
                        "-o", "console_output_style=classic", "--no-header", "-rN", *first,
                        "--rootdir", str(path.parent), "-c", os.devnull], plugins=[recorder, given(grading)])
    recorder.settle_causes()
    launched = float(req.get("launched") or main_started)
    profile = {"process_start_s": main_started - launched,
               "collect_s": (recorder.first_test or time.time()) - main_started,
               "cells_s": recorder.seconds, "workers": grading.starts, "largest_frame": grading.largest_frame}
    module = next((m for n, m in list(sys.modules.items()) if n.rpartition(".")[2] == f"test_{assignment}"
                   and getattr(m, "A", None) == assignment), None)
    return {"exit": int(code), "records": recorder.records, "library": getattr(module, "LIBRARY", None),
            "modules": list(getattr(module, "ALLOWED_MODULES", ())),
            "collection_errors": recorder.collection_errors, "notes": sorted(grading.notes), "profile": profile,
            "structure": recorder.structure}


# -- the trusted grader's side -------------------------------------------------------------------
def limit_trusted_memory(memory: int):
    """Cap the address space of a trusted suite process (its own, or one the warm suite server forked)."""
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def _trusted_env(extra: dict) -> dict:
    """The environment of a trusted suite process: this one's (the course is installed in its Python)."""
    return {**os.environ, **extra, "PYTHONDONTWRITEBYTECODE": "1"}


_SERVERS: list[channel.Child] = []


def suite_server(settings: config.Settings) -> channel.Child:
    """The warm suite process (autograder.verdict.suite_server), started on first use, ended with this process."""
    if not _SERVERS or not _SERVERS[0].alive():
        server = channel.Child("autograder.verdict.suite_server", _trusted_env(settings.to_env()), log=True)
        atexit.register(server.close)
        _SERVERS[:] = [server]
    return _SERVERS[0]


def prepare(assignment: str, settings: config.Settings):
    """Have the warm suite server ready for `assignment` while the first notebook runs: its imports, the shared
    workers of course code and the first learner's process (a no-op once it is)."""
    if settings.warm_suite and not settings.suites_dir and suite_path(assignment, settings).exists():
        with contextlib.suppress(channel.Stopped):      # gone: the grading starts a new one
            suite_server(settings).send({"op": "prepare", "assignment": assignment, "env": settings.to_env()})


def run_suite(assignment: str, cells: list[dict], settings: config.Settings, deadline: float,
              more: bool = True, only: tuple[str, ...] = (), first_failure: bool = False) -> dict:
    """Run the hidden suite in a trusted process (the warm suite server's, or one of its own); {"error": ...} when
    it did not complete (a grader fault)."""
    req = {"assignment": assignment, "cells": cells, "deadline": deadline, "launched": time.time(),
           "only": list(only), "first_failure": first_failure}
    # The suite stops calling the learner's code at the deadline; past it and its grace, the suite itself hangs.
    stop_at = time.time() + max(1.0, deadline - time.time()) + settings.grace
    out = None
    if settings.warm_suite and not settings.suites_dir:
        with contextlib.suppress(channel.Stopped):      # gone: a process of its own takes the request
            out = suite_server(settings).ask({**req, "env": settings.to_env(), "stop_at": stop_at, "more": more})
    if out is None:
        child = channel.Child("autograder.verdict.hidden", _trusted_env(settings.to_env()), log=True,
                              preexec=functools.partial(limit_trusted_memory, settings.trusted_memory))
        with contextlib.suppress(channel.Stopped):      # it ended before it read the request: said by its outcome
            child.send(req, timeout=max(0.0, stop_at - time.time()))
        child.done()
        out = child.outcome(stop_at)
    text, result = out.get("log", ""), out.get("reply")
    if result is None:
        stopped, code = out.get("stopped"), out.get("exit")
        why = ("the hidden suite did not finish in time" if stopped == channel.OVERRAN
               else f"the hidden suite process sent results the grader cannot read (exit code {code})"
               if stopped == channel.GARBLED
               else f"the hidden suite process ended without results (exit code {code})")
        return {"error": why, "log": text[-8000:]}
    result["log"] = text[-8000:]
    if result.get("collection_errors") or result.get("exit") not in (0, 1):
        errors = "\n".join(result.get("collection_errors") or [])
        return {"error": f"the hidden suite could not be collected (pytest exit code {result.get('exit')})",
                "log": (errors + "\n" + text)[-8000:]}
    return result


def _uncount_drawn(v: Verdict):
    """One notebook, one score: where a check of the part's values on calls every grading makes failed (not a
    measure, not a family's own promise, not the learner's parts together), its values are wrong, so its checks of the
    values on calls drawn for this grading are not counted as met even where this grading's draws did not show the
    mistake: the part's score does not depend on which draws found it."""
    charged = any(not c.passed and c.kind == FIXED and not c.together for c in v.checks)
    for c in v.checks:
        c.uncounted = charged and c.passed and c.kind == DRAWN


def score(records: list[dict], graded: dict[str, float], findings: static.Report | None = None) -> dict[str, Verdict]:
    verdicts = {gid: Verdict(gid, pts) for gid, pts in graded.items()}
    for rec in records:
        v = verdicts.get(rec.get("cell"))  # type: ignore[arg-type]  # no cell: no verdict
        if v is not None:
            v.checks.append(Check(rec["label"], rec["weight"], rec["passed"], rec.get("diagnosis"),
                                  bool(rec.get("together")), list(rec.get("causes") or []),
                                  list(rec.get("ruled_out") or []), list(rec.get("refused") or []),
                                  list(rec.get("cause_ids") or []), rec.get("kind", FIXED),
                                  unanswered=bool(rec.get("unanswered"))))
    findings = findings or static.Report()
    for gid, v in verdicts.items():
        _uncount_drawn(v)
        total = sum(c.weight for c in v.checks)
        got = sum(c.weight for c in v.checks if c.passed and not c.uncounted)
        name = gid.removesuffix(TESTS_SUFFIX)
        library = findings.library.get(name, [])
        refused = sorted({r for c in v.checks if not c.passed for r in c.refused})
        if total == 0:
            v.notes.append("no hidden tests are linked to this cell (a course configuration error)")
        elif library:
            uses = ", ".join(dict.fromkeys(f"{f.what} ({f.where()})" for f in library))
            v.notes.append(f"your code uses {uses}: the library version of what this exercise asks you to write, so "
                           "no points for this part")
        elif refused:
            v.notes.append(f"your code called {', '.join(refused)}, the library version of what this exercise asks you "
                           "to write (the grader refuses it when it is called), so no points for this part")
        else:
            v.score = min(max(round(v.points * got / total, 2), 0.0), v.points)
    # Code the reading cannot follow can change what a part's tests see: the parts that reach it are flagged (all of
    # them for code that runs when a cell runs), and nbgrader asks the instructor for their scores.
    for gid, v in verdicts.items():
        name = gid.removesuffix(TESTS_SUFFIX)
        if findings.too_large:
            v.status = FLAGGED
            v.notes.append("flagged for your instructor to read: your notebook's code is too large for the grader "
                           f"to read within {static.DEADLINE_S:g} s, so your instructor decides this cell's score")
            continue
        elsewhere = [f for f in findings.notes.get(name, [])]
        if elsewhere:
            uses = "; ".join(dict.fromkeys(f"{f.what} ({f.where()})" for f in elsewhere))
            v.notes.append(f"the code that runs when your cell runs (not your {name}): {uses}. Fine for a "
                           f"self-check, but {name} itself must not")
        flagged = findings.suspicious.get(name, [])
        if flagged:
            v.status = FLAGGED
            reasons = "; ".join(dict.fromkeys(f"{f.what} ({f.where()})" for f in flagged))
            v.notes.append(f"flagged for your instructor to read: {reasons}; a reading of the code cannot follow where "
                           "this leads, so your instructor decides this cell's score")
    return verdicts


def grade(nb, assignment: str, settings: config.Settings | None = None, deadline: float | None = None,
          more: bool = True, unfinished=(), only: tuple[str, ...] = (), first_failure: bool = False) -> Grading:
    """Score every graded cell of a (sanitized) submitted notebook with the hidden suite. `more`: another learner may
    follow (the warm suite server makes that learner's process ready meanwhile). `unfinished`: the ids of cells the
    notebook's run stopped at the cell limit, which the worker does not run again. `only`: the graded cells whose
    tests run and which the grading scores (all when empty); `first_failure`: stop at the first failed test (the
    suites' mutation testing asks whether a cell loses points, not how many)."""
    settings = settings or config.current()
    deadline = deadline or time.time() + settings.learner_budget
    graded = graded_cells(nb)
    scored = {gid: pts for gid, pts in graded.items() if not only or gid in only}
    cells = learner_cells(nb)
    for cell in cells:
        if cell["id"] in unfinished:
            cell["unfinished"] = True
    started = time.time()
    result = run_suite(assignment, cells, settings, deadline, more, only, first_failure)
    profile = {**result.get("profile", {}), "suite_s": time.time() - started}
    if "error" in result:
        return Grading({gid: Verdict(gid, pts) for gid, pts in scored.items()}, fault=result["error"],
                       log=result.get("log", ""))
    faults = [r for r in result["records"] if r.get("fault")]
    findings = static.analyse(cells, {gid.removesuffix(TESTS_SUFFIX) for gid in graded}, result.get("library"),
                              deadline_s=min(static.DEADLINE_S, max(1.0, deadline - time.time())),
                              modules=tuple(str(m) for m in result.get("modules") or ()))
    verdicts = score(result["records"], scored, findings)
    fault = f"a grader fault in a hidden test: {faults[0]['diagnosis']}" if faults else None
    return Grading(verdicts, notes=result.get("notes", []), fault=fault, log=result.get("log", ""), profile=profile,
                   structure={c: s for c, s in result.get("structure", {}).items() if c in scored})


if __name__ == "__main__":
    channel.serve(lambda req: answer(req, context.Context()))     # each request a grading of its own
