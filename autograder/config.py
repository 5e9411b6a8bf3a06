"""Every timeout and limit of trusted grading, in one place.

Set them in `nbgrader_config.py` as nbgrader traitlets (`c.Grader.call_timeout = 30`); an environment
variable `GRADER_<NAME>` (e.g. `GRADER_CALL_TIMEOUT=15`) overrides one for a single run. The nbgrader
process resolves them once and hands them to the trusted suite process (`to_env`), so every process
of one grading uses the same values.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, cast

from traitlets import Bool, Float, Integer, Unicode
from traitlets.config import Configurable

ENV = "GRADER_SETTINGS"
MIB = 1 << 20


@dataclass(frozen=True)
class Settings:
    # time
    learner_budget: float = 900.0      # seconds for one learner's whole grading: notebook run and hidden suite
    notebook_timeout: float = 300.0    # the notebook's run for the feedback (within the budget)
    cell_timeout: float = 60.0         # one cell (and a kernel's start), in the feedback run and in the worker
    call_timeout: float = 30.0         # one call of a hidden test to the learner's code
    grace: float = 60.0                # past the budget, for the trusted side's own work (then: a grader fault)
    train_timeout: float = 120.0       # the learner's model training on the task a hidden test draws
    gradebook_busy_timeout: float = 60.0  # a SQLite gradebook's writer waits this long for another's lock
    # the sandbox (autograder.sandbox.box.Limits)
    memory: int = 4096 * MIB           # all processes of one sandbox together, and its tmpfs folders
    disk: int = 128 * MIB              # each of the sandbox's writable folders, /sandbox and /tmp
    processes: int = 256               # processes and threads of one sandbox together
    cpu_time: int = 300                # CPU seconds of one process in a sandbox (RLIMIT_CPU)
    open_files: int = 256              # open files of one process in a sandbox (RLIMIT_NOFILE)
    worker_restarts: int = 12          # times a learner's code may end or hang its worker before the rest is skipped
    threads: int = 1                   # torch threads of the learner's code
    allow_unsandboxed: bool = False    # grade without bubblewrap (the feedback says what is missing)
    # fork workers from a warm fork server (autograder.sandbox.forkserver), not start each
    fork_workers: bool = True
    # the device the timed and memory-measured calls run on: "cpu", or a GPU's (autograder.sandbox.gpu: "cuda" on a
    # machine with an NVIDIA GPU)
    device: str = "cpu"
    # what the sandbox sees of the host on a GPU, besides the GPU's device nodes: the driver's files (colon-separated;
    # empty: those its vendor names, autograder.sandbox.gpu)
    gpu_paths: str = ""
    # what may come back from a sandbox
    max_notebook_bytes: int = 8 * MIB  # the executed notebook, all outputs together
    max_cell_output_chars: int = 20_000  # text kept per cell (stream, text/plain, error) in the feedback
    max_cell_output_bytes: int = 2 * MIB  # everything one cell's outputs hold (images, HTML, JSON included)
    max_outputs_per_cell: int = 50     # outputs kept per cell
    max_frame_bytes: int = 16 * MIB    # one message from a worker (the largest legitimate one: 4.0 MiB)
    # the trusted processes
    trusted_memory: int = 6144 * MIB   # address space of the trusted suite process
    suites_dir: str = ""               # the hidden suites with their conftest.py (default: autograder/verdict/suites)
    # one warm suite process per batch (autograder.verdict.suite_server), not one per learner
    warm_suite: bool = True

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def to_env(self) -> dict[str, str]:
        return {ENV: json.dumps(dataclasses.asdict(self))}

    @property
    def learner_timeout(self) -> float:
        """The longest one learner's `nbgrader autograde` may run before it is stopped
        (autograder.classroom.classgrade): the budget, the suite's grace past it, and as much again for nbgrader's own
        work."""
        return self.learner_budget + 2 * self.grace


def _override(s: Settings) -> Settings:
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        raw = os.environ.get(f"GRADER_{f.name.upper()}")
        if raw is None:
            continue
        if f.type == "bool":
            changes[f.name] = raw.strip().lower() in ("1", "true", "yes", "on")
        elif f.type == "int":
            changes[f.name] = int(float(raw))
        elif f.type == "str":
            changes[f.name] = raw
        else:
            changes[f.name] = float(raw)
    return dataclasses.replace(s, **changes)


def current() -> Settings:
    """The settings of this grading: those handed down by the nbgrader process, else the defaults,
    with GRADER_<NAME> environment overrides applied."""
    raw = os.environ.get(ENV)
    base = Settings(**{k: v for k, v in json.loads(raw).items() if k in Settings.names()}) if raw else Settings()
    return _override(base)


def course() -> Settings:
    """The settings `nbgrader_config.py` sets (`c.Grader.<name>`), with GRADER_<NAME> environment overrides: what
    every nbgrader command of this course grades with, for a process that is not one of them (classgrade)."""
    from traitlets.config.loader import PyFileConfigLoader

    from autograder import ROOT

    return Grader(config=PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()).settings()


def _trait(f: dataclasses.Field):
    kind = {"bool": Bool, "int": Integer, "float": Float, "str": Unicode}[cast(str, f.type)]  # a string: PEP 563
    return kind(f.default, help=f"autograder.config.Settings.{f.name}").tag(config=True)


class Grader(Configurable):
    """The trusted grader's limits as nbgrader configuration (`c.Grader.<name>` in nbgrader_config.py)."""

    locals().update({f.name: _trait(f) for f in dataclasses.fields(Settings)})

    def settings(self) -> Settings:
        return _override(Settings(**{name: getattr(self, name) for name in Settings.names()}))
