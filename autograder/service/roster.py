"""Who may check what, and the service's limits: the roster file the instructor writes (`python -m autograder.service
tokens`, mode 0600, by default outside the course's repository: `default_path()`), read once.

    {"learners": {"ada": "<token>", ...}, "instructors": {"prof": "<token>"},
     "assignments": {"attention": {"open": true, "until": "2026-12-15T16:00:00+00:00"}, ...},
     "rate": [20, 3600], "max_concurrent": 2, "max_bytes": 4000000,
     "max_connections": 256, "max_waiting": 64, "max_waiting_per_learner": 2, "max_bytes_held": 67108864,
     "max_anonymous": 64, "max_anonymous_per_peer": 16, "anonymous_timeout": 10, "body_timeout": 120}

An assignment not listed is not open for checks; one past its `until` (its due date) is closed.
As a JupyterHub service (`--hub`) the hub says who is asking: the learners are the hub users named in "learners"
(their tokens unused) or, without "learners", every hub user the hub lets reach the service; the instructors are
the hub users named in "instructors" (a list of names will do)."""
from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

LIMITS = ("max_concurrent", "max_bytes", "max_connections", "max_waiting", "max_waiting_per_learner",
          "max_bytes_held", "max_anonymous", "max_anonymous_per_peer", "anonymous_timeout", "body_timeout")


def default_path() -> Path:
    """Where the roster is kept unless told otherwise: the instructor's own configuration folder, never a course
    repository that might be shared."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "course-check" / "roster.json"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _find(tokens: dict[bytes, str], token: str) -> str | None:
    """The name a token belongs to (compared in constant time with every known token), None for none."""
    found = None
    digest = _digest(token)
    for known, name in tokens.items():
        if hmac.compare_digest(known, digest):
            found = name
    return found


@dataclass
class Roster:
    learners: dict[bytes, str] = field(default_factory=dict)     # sha256(token) -> learner
    instructor_tokens: dict[bytes, str] = field(default_factory=dict)   # sha256(token) -> instructor
    names: set[str] = field(default_factory=set)                  # the learners, by name (a hub's users)
    instructors: set[str] = field(default_factory=set)            # the instructors, by name (a hub's users)
    assignments: dict[str, dict] = field(default_factory=dict)
    rate: tuple[int, float] = (20, 3600.0)                        # checks per window of seconds, per learner
    max_concurrent: int = 2                                       # gradings at once on this machine
    max_bytes: int = 4_000_000                                    # the largest notebook accepted
    max_connections: int = 256                                    # open connections (past it: 503 before reading)
    max_waiting: int = 64                                         # checks admitted and not yet answered, in all
    max_waiting_per_learner: int = 2                              # ... of one learner
    max_bytes_held: int = 64 << 20                                # the bytes their notebooks hold together
    max_anonymous: int = 64                                       # connections open that have not said who, in all
    max_anonymous_per_peer: int = 16                              # ... from one address (an IPv6 /64)
    anonymous_timeout: int = 10                                   # s for headers, and a body read before who is known
    body_timeout: int = 120                                       # seconds for a known learner's notebook to arrive

    @classmethod
    def load(cls, path: Path) -> Roster:
        path = Path(path)
        if not path.exists():
            raise SystemExit(f"no roster at {path}: write one with `python -m autograder.service tokens`")
        d = json.loads(path.read_text())
        if "instructor" in d:
            raise SystemExit(f"{path}: the roster names its instructors in \"instructors\" ({{name: token}}), "
                             "not \"instructor\"")
        instructors = d.get("instructors", {})
        tokens = instructors if isinstance(instructors, dict) else {}
        rate = d.get("rate", cls.rate)
        roster = cls(learners={_digest(t): name for name, t in d.get("learners", {}).items()},
                     instructor_tokens={_digest(t): name for name, t in tokens.items()},
                     names=set(d.get("learners", {})), instructors=set(instructors),
                     assignments=dict(d.get("assignments", {})), rate=(int(rate[0]), float(rate[1])))
        for k in LIMITS:
            setattr(roster, k, int(d.get(k, getattr(cls, k))))
        return roster

    def learner(self, token: str) -> str | None:
        """The learner a token belongs to, None for no learner's."""
        return _find(self.learners, token)

    def is_instructor(self, token: str) -> bool:
        return _find(self.instructor_tokens, token) is not None

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


def new_roster(learners: list[str], assignments: list[str], instructors: tuple[str, ...] = ("instructor",)) -> dict:
    """A roster with a fresh token for each learner and each instructor (hand each learner theirs)."""
    return {"learners": {name: secrets.token_urlsafe(24) for name in learners},
            "instructors": {name: secrets.token_urlsafe(24) for name in instructors},
            "assignments": {a: {"open": True} for a in assignments}, "rate": list(Roster.rate),
            **{k: getattr(Roster, k) for k in LIMITS}}


def write_roster(roster: dict, path: Path, force: bool = False):
    """Write `roster` to `path`, readable by its owner alone (its folder made so too when new); an existing roster is
    kept (its tokens are in learners' hands) unless `force`."""
    path = Path(path)
    if path.exists() and not force:
        raise SystemExit(f"{path} exists: its tokens may be in use; pass --force to replace them")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(roster, indent=2) + "\n")
