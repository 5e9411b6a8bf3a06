"""One learner's grading in a trusted suite process: the seed its inputs are drawn from, its deadline, the learner's
cells, what could not be measured from outside (notes), its workers' starts, the workers made for it ahead (the warm
suite server's shared workers of course code, the learner's own worker prestarted), and whether this process reads
the GPU driver. It is handed down, never looked up: the suite process makes one per learner and gives it to the
hidden suite's run (autograder.verdict.hidden.answer), whose `grading` fixture gives it to the suites' fixtures and
tests, which give it to each worker they make (autograder.verdict.learner.Learner) and each input they draw.
"""
from __future__ import annotations

import hashlib
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

    def note(self, text: str):
        """Say, with this grading's verdict, what it could not measure from outside or which protection it lacked."""
        self.notes.add(text)

    def seeded(self, n: int):
        """A torch generator for a test's input number `n` in this grading: the same `n` draws other inputs in
        another grading, and the same in a replay of this one (GRADER_SEED)."""
        import torch

        digest = hashlib.blake2b(f"{self.seed}:{n}".encode(), digest_size=8).digest()
        return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)

    def randn(self, *shape, seed: int, dtype=None, scale: float = 1.0):
        """Normal values of `shape` (float32 unless `dtype` says), drawn in float64 from input number `seed`."""
        import torch

        return (torch.randn(*shape, generator=self.seeded(seed), dtype=torch.float64) * scale).to(
            dtype or torch.float32)
