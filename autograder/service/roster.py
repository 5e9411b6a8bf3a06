"""Who may check what: the roster file the instructor writes (`python -m autograder.service tokens`), read once.

    {"learners": {"ada": "<token>", ...}, "instructor": "<token>",
     "assignments": {"attention": {"open": true, "until": "2026-12-15T16:00:00+00:00"}, ...},
     "rate": [20, 3600], "max_concurrent": 2, "max_bytes": 4000000}

An assignment not listed is not open for checks; one past its `until` (its due date) is closed.
As a JupyterHub service (`--hub`) the hub says who is asking: the learners are the hub users named in "learners"
(their tokens unused) or, without "learners", every hub user the hub lets reach the service; the instructors are
the hub users named in "instructors": ["..."]."""
from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass
class Roster:
    learners: dict[bytes, str] = field(default_factory=dict)     # sha256(token) -> learner
    instructor: bytes = b""
    names: set[str] = field(default_factory=set)                  # the learners, by name (a hub's users)
    instructors: set[str] = field(default_factory=set)            # the instructors, by the hub's names
    assignments: dict[str, dict] = field(default_factory=dict)
    rate: tuple[int, float] = (20, 3600.0)                        # checks per window of seconds, per learner
    max_concurrent: int = 2                                       # gradings at once on this machine
    max_bytes: int = 4_000_000                                    # the largest notebook accepted

    @classmethod
    def load(cls, path: Path) -> Roster:
        d = json.loads(Path(path).read_text())
        rate = d.get("rate", [20, 3600])
        return cls(learners={_digest(t): name for name, t in d.get("learners", {}).items()},
                   instructor=_digest(d["instructor"]) if d.get("instructor") else b"",
                   names=set(d.get("learners", {})), instructors=set(d.get("instructors", [])),
                   assignments=dict(d.get("assignments", {})), rate=(int(rate[0]), float(rate[1])),
                   max_concurrent=int(d.get("max_concurrent", 2)), max_bytes=int(d.get("max_bytes", 4_000_000)))

    def learner(self, token: str) -> str | None:
        """The learner a token belongs to (compared in constant time), None for no learner's."""
        found = None
        digest = _digest(token)
        for known, name in self.learners.items():
            if hmac.compare_digest(known, digest):
                found = name
        return found

    def is_instructor(self, token: str) -> bool:
        return bool(self.instructor) and hmac.compare_digest(self.instructor, _digest(token))

    def closed(self, assignment: str, now: dt.datetime | None = None) -> str | None:
        """Why checks of `assignment` are refused now, or None when they are open."""
        a = self.assignments.get(assignment)
        if a is None:
            return f"checks are not open for {assignment!r}"
        if not a.get("open", True):
            return f"your instructor has switched checks of {assignment!r} off"
        until = a.get("until")
        if until and (now or dt.datetime.now(dt.UTC)) > dt.datetime.fromisoformat(until):
            return f"checks of {assignment!r} closed at its due date ({until})"
        return None


def new_roster(learners: list[str], assignments: list[str]) -> dict:
    """A roster with a fresh token for each learner and for the instructor (hand each learner theirs)."""
    return {"learners": {name: secrets.token_urlsafe(24) for name in learners},
            "instructor": secrets.token_urlsafe(24), "assignments": {a: {"open": True} for a in assignments},
            "rate": [20, 3600], "max_concurrent": 2, "max_bytes": 4_000_000}
