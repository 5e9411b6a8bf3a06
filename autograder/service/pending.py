"""Checks answered later. A client that asks for it (`Prefer: respond-async`), and every upload from the page, is
answered as soon as its check is received, with the check's id; the client then asks how it goes (`GET checks/<id>`,
the page `upload/<id>`): while it waits, its place in the queue and the seconds since it was received; then its
answer, kept `KEPT` seconds after it was given, and at most `KEPT_PER_LEARNER` of one learner's (the oldest answered
first forgotten). Only the learner who sent a check is told of it."""
from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field

KEPT = 600.0                  # seconds an answer is kept once given, for its client to fetch (again)
KEPT_PER_LEARNER = 4          # answers kept of one learner's checks at most


@dataclass
class Pending:
    """One check received: whose, of which assignment, when (monotonic), its turn in the fair queue, then its answer
    (the check's HTTP status and its JSON) and when it was given."""

    id: str
    learner: str
    assignment: str
    received: float
    turn: asyncio.Future | None = None
    status: int | None = None
    answer: dict | None = None
    answered: float | None = None
    task: asyncio.Future | None = field(default=None, repr=False)

    def state(self) -> str:
        """"done" once answered, "grading" once its turn came, else "queued"."""
        if self.answer is not None:
            return "done"
        return "grading" if self.turn is not None and self.turn.done() else "queued"


class Checks:
    """The checks answered later, by id: each learner's, until their answer has been kept long enough."""

    def __init__(self, kept: float = KEPT, per_learner: int = KEPT_PER_LEARNER):
        self.kept, self.per_learner = kept, per_learner
        self.checks: dict[str, Pending] = {}

    def new(self, learner: str, assignment: str, now: float | None = None) -> Pending:
        now = time.monotonic() if now is None else now
        self.forget(now)
        p = Pending(secrets.token_urlsafe(16), learner, assignment, now)
        self.checks[p.id] = p
        return p

    def get(self, check_id: str, learner: str, now: float | None = None) -> Pending | None:
        """`learner`'s check of this id; None when there is none, it is another learner's, or its answer was
        forgotten."""
        self.forget(time.monotonic() if now is None else now)
        p = self.checks.get(check_id)
        return p if p is not None and p.learner == learner else None

    def done(self, p: Pending, status: int, answer: dict, now: float | None = None):
        """`p` is answered: kept, and the oldest answers of its learner's past `per_learner` forgotten."""
        p.status, p.answer, p.answered = status, answer, time.monotonic() if now is None else now
        answered = sorted((q for q in self.checks.values() if q.learner == p.learner and q.answered is not None),
                          key=lambda q: q.answered or 0.0)
        for q in answered[:max(0, len(answered) - self.per_learner)]:
            del self.checks[q.id]

    def forget(self, now: float):
        """Forget the answers given more than `kept` seconds ago."""
        for q in [q for q in self.checks.values() if q.answered is not None and now - q.answered > self.kept]:
            del self.checks[q.id]
