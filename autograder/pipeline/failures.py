"""What an nbgrader command failed on, recorded where it failed: `ErrorLog`, a logging handler of nbgrader's own
logger (`configure` registers it through traitlets' `logging_config`), writes each error nbgrader logs as one JSON
line to the file `GRADER_ERRORS` names: the message, and the exception being handled (its type, its first line, the
database's own error code: sqlite's `sqlite_errorcode`, PostgreSQL's SQLSTATE). classgrade reads these
(`read`, `is_lock`, `reason`) to retry a lock and to say why a run failed, never the log's text, where a learner's
notebook can write too.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

ENV = "GRADER_ERRORS"
SQLITE_LOCKS = {5, 6}                       # SQLITE_BUSY, SQLITE_LOCKED (extended codes keep them in the low byte)
PG_LOCKS = {"40P01", "40001", "55P03"}      # deadlock_detected, serialization_failure, lock_not_available
# nbgrader's applications, by class: each logs to a logger of its class's name (traitlets' Application.log)
APPS = ("NbGraderApp", "AutogradeApp", "GenerateFeedbackApp", "GenerateAssignmentApp", "ReleaseFeedbackApp",
        "ZipCollectApp", "ExportApp", "DbApp")


def _chain(exc: BaseException | None):
    """The exception, what it wraps (SQLAlchemy's `orig`) and what caused it, each once."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [getattr(e, "orig", None), e.__cause__, e.__context__]


def _qualname(e: BaseException) -> str:
    module = type(e).__module__
    return type(e).__qualname__ if module == "builtins" else f"{module}.{type(e).__qualname__}"


def event(message: str, exc: BaseException | None) -> dict:
    """One error as `ErrorLog` writes it."""
    out: dict = {"logged": (message.strip().splitlines() or [""])[-1][:300]}
    if exc is None:
        return out
    out["type"] = _qualname(exc)
    out["message"] = (str(exc).strip().splitlines() or [""])[0][:300]
    for e in _chain(exc):
        code = getattr(e, "sqlite_errorcode", None)
        state = getattr(e, "pgcode", None) or getattr(e, "sqlstate", None)
        if isinstance(code, int):
            out.setdefault("sqlite_errorcode", code)
        if isinstance(state, str):
            out.setdefault("sqlstate", state)
    return out


class ErrorLog(logging.Handler):
    """Appends each record of ERROR or above, with the exception being handled when it was logged, to the file
    `GRADER_ERRORS` names (nothing without it)."""

    def __init__(self, level=logging.ERROR):
        super().__init__(level)
        self.path = os.environ.get(ENV)

    def emit(self, record: logging.LogRecord):
        if not self.path:
            return
        exc = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
        try:
            with open(self.path, "a") as f:
                f.write(json.dumps(event(record.getMessage(), exc)) + "\n")
        except (OSError, TypeError, ValueError):
            self.handleError(record)


def configure(c):
    """Every nbgrader application's logger gets an `ErrorLog` beside its console."""
    handler = {"class": f"{__name__}.ErrorLog", "level": "ERROR"}
    c.Application.logging_config = {"handlers": {"errors": handler},
                                    "loggers": {app: {"handlers": ["console", "errors"]} for app in APPS}}


def read(path: Path) -> list[dict]:
    """The errors an nbgrader run recorded at `path` (none when it recorded nothing)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict):
            out.append(e)
    return out


def is_lock(errors: list[dict]) -> bool:
    """Whether the database refused a write for a lock another writer held (sqlite busy or locked, PostgreSQL's
    deadlock, serialization or lock failure): the run may be tried again."""
    return any((isinstance(e.get("sqlite_errorcode"), int) and (e["sqlite_errorcode"] & 0xFF) in SQLITE_LOCKS)
               or e.get("sqlstate") in PG_LOCKS for e in errors)


def reason(errors: list[dict]) -> tuple[str, list[str]]:
    """(what stopped the run, the last few distinct errors): its last exception, else its first error logged."""
    each = [(f"{e['type']}: {e.get('message', '')}" if e.get("type") else str(e.get("logged", "")), bool(e.get("type")))
            for e in errors]
    said = [s for s in dict.fromkeys(s for s, _ in each) if s]
    raised = [s for s, typed in each if typed and s]
    return (raised[-1] if raised else said[0] if said else ""), said[-5:]
