"""One learner's grading in a trusted suite process: the seed its inputs are drawn from, its deadline, the learner's
cells, what could not be measured from outside (notes), its workers' starts, the workers made for it ahead (the warm
suite server's shared workers of course code, the learner's own worker prestarted), and whether this process reads
the GPU driver. A suite process begins one per learner (`begin`) before anything of that learner's grading runs; the
proxy (autograder.verdict.learner), the suites' fixtures and checks read it through `current()`.
"""
from __future__ import annotations

import math
import os
import secrets
from dataclasses import dataclass, field
from typing import Any


def draw_seed() -> int:
    """A seed drawn afresh, so that no submission can know a grading's inputs in advance. GRADER_SEED (set by an
    instructor, never by a learner) replays a grading."""
    return int(os.environ.get("GRADER_SEED") or secrets.randbits(62))


@dataclass
class Context:
    cells: list[dict] = field(default_factory=list)              # the learner's cells, as the grader sent them
    deadline: float = math.inf                                   # the end of the learner's budget, as time.time()
    seed: int = field(default_factory=draw_seed)                 # every input a test makes comes from it
    # What this grading could not measure from outside, or which protections its sandboxes lacked: reported with the
    # verdict, so the feedback, the log and the class report can say so.
    notes: set[str] = field(default_factory=set)
    starts: list = field(default_factory=list)                   # [role, seconds until its cells were loaded]
    # The library versions the learner's code reached while a test ran (autograder.inside.guard.RefusedError, by
    # name): the test's record takes them (autograder.verdict.hidden.Recorder), and a failed test of a part that
    # met one scores that part 0.
    refused: list[str] = field(default_factory=list)
    largest_frame: int = 0                                       # bytes of the largest frame a worker sent it
    # The workers made for it ahead (autograder.verdict.learner.Learner, which reads this context: named here by
    # what they are, not by their type, so that this module stays below it).
    shared: dict[str, Any] = field(default_factory=dict)         # role -> a worker of course code shared with it
    prestarted: Any = None                                       # the learner's worker, waiting for its cells
    # NVML is not safe in a process forked after it was initialised: the warm suite server, which forks each
    # learner's process, does not read the driver (its shared workers go without a reading at their start); each
    # learner's process, which measures, does.
    driver_readings: bool = True


_CURRENT = [Context()]


def current() -> Context:
    """The grading of this process now (outside one: a context of its own, with no deadline)."""
    return _CURRENT[0]


def begin(grading: Context | None = None) -> Context:
    """Make `grading` (by default a new one, with a seed of its own) the current one, and return it."""
    _CURRENT[0] = grading if grading is not None else Context()
    return _CURRENT[0]


def note(text: str):
    """Say, with the current grading's verdict, what it could not measure from outside or which protection it lacked."""
    current().notes.add(text)
