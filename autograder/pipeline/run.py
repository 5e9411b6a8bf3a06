"""`SandboxedExecute`, in place of nbgrader's `Execute`: the notebook runs in the sandbox (kernel and client both),
only to record its outputs for the feedback; what comes back is capped, validated and sanitized again here. The next
learner's kernel is made ready in a sandbox of its own while this one is graded."""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import time
import weakref
from pathlib import Path
from typing import Any

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool

from autograder import config
from autograder.inside import execute
from autograder.notebooks import cell_id
from autograder.pipeline.common import DEADLINE, LAST, STARTED, UNFINISHED, note, quoted, settings_of
from autograder.pipeline.sanitize import sanitize
from autograder.sandbox.box import Limits, Sandbox, SandboxUnavailable
from autograder.verdict import hidden
from autograder.verdict.record import RECORD, GraderFault


class _Kernels:
    """The next learner's notebook kernel, made ready in its own sandbox (torch imported, waiting for a notebook)
    while this one's is graded: each learner gets a fresh one, never used before."""

    def __init__(self):
        self.ready = None                     # (settings, wall, Sandbox, Popen)
        atexit.register(self.discard)

    @staticmethod
    def _start(s: config.Settings, wall: float):
        try:
            sb = Sandbox(Limits.of(s, wall_s=wall))
        except (SandboxUnavailable, OSError) as e:
            raise GraderFault(f"the sandbox could not be set up: {e}") from None
        return sb, sb.start([sb.inside(sb.files / "execute.py"), str(s.cell_timeout), str(s.max_cell_output_chars),
                             str(s.max_cell_output_bytes), str(s.max_outputs_per_cell)], preload=execute.PRELOAD)

    def take(self, s: config.Settings, wall: float):
        ready, self.ready = self.ready, None
        if ready is not None and ready[:2] == (s, wall) and ready[3].poll() is None:
            return ready[2], ready[3]
        if ready is not None:
            ready[2].close()
        return self._start(s, wall)

    def prepare(self, s: config.Settings, wall: float):
        self.discard()
        with contextlib.suppress(GraderFault):
            self.ready = (s, wall, *self._start(s, wall))

    def discard(self):
        if self.ready is not None:
            self.ready[2].close()
            self.ready = None


_kernels = _Kernels()


def _wall(s: config.Settings) -> float:
    return min(s.notebook_timeout, s.learner_budget)


def make_ready(assignment: str, s: config.Settings):
    """Before any submission: the first learner's kernel and suite process made ready, as each learner's grading
    makes them ready for the next (the check service's warm grader, autograder.service.warm)."""
    hidden.prepare(assignment, s)
    _kernels.prepare(s, _wall(s))


# converter -> the submissions its run grades, read at its first notebook, when the others are as the run found them
_GRADED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _graded(converter, assignment_id: str, student_id: str) -> bool:
    """Whether the converter's run grades this submission, as its `init_destination` decides (read, not done: that
    removes what it will write again): no autograded notebook yet, `--force`, or a submission newer than it."""
    cd = converter.coursedir
    dest = os.path.normpath(converter._format_dest(assignment_id, student_id))
    if cd.notebook_id == "*" and not os.path.exists(dest):
        return True
    if cd.notebook_id != "*" and any(not os.path.exists(os.path.join(dest, Path(nb).stem + ".ipynb"))
                                     for nb in converter.notebooks):
        return True
    if converter.force:
        return True
    new = cd.get_existing_timestamp(converter._format_source(assignment_id, student_id))
    old = cd.get_existing_timestamp(dest)
    return new is not None and old is not None and new > old


def position(pre, resources) -> tuple[int, int] | None:
    """(which, of how many): this submission's place among those this nbgrader run grades, which the converter (the
    preprocessor's exporter's parent) grades in sorted order, learners it excludes and submissions it skips (graded
    before, without `--force`) left out. None when that cannot be read."""
    converter: Any = getattr(getattr(pre, "parent", None), "parent", None)
    try:
        cd = converter.coursedir
        pattern = cd.format_path(cd.submitted_directory, "(?P<student_id>.*)", "(?P<assignment_id>.*)", escape=True)
        excluded = set(filter(None, (cd.student_id_exclude or "").split(",")))
        ids = [m.groupdict() for m in (re.match(pattern, f) for f in sorted(converter.assignments))
               if m and m.group("student_id") not in excluded]
        ours = {"assignment_id": resources["nbgrader"]["assignment"], "student_id": resources["nbgrader"]["student"]}
        if ours not in ids:
            return None
        if converter not in _GRADED:
            _GRADED[converter] = [x for x in ids if x == ours or _graded(converter, **x)]
        graded = _GRADED[converter]
        return (graded.index(ours) + 1, len(graded)) if ours in graded else None
    except (AttributeError, KeyError, TypeError, ValueError, OSError, re.error):
        return None


def last_learner(pre, resources) -> bool:
    """Whether nbgrader grades no submission after this one in this run (False when that cannot be read)."""
    where = position(pre, resources)
    return where is not None and where[0] == where[1]


class SandboxedExecute(NbGraderPreprocessor):
    """Execute the notebook inside the sandbox and keep only the outputs it produced, capped and sanitized."""

    more_follow = Bool(False, help="Another nbgrader command follows in this process (the check service's warm "
                       "grader, autograder.service.warm): the next learner's kernel and suite process are made ready "
                       "after the last submission too.").tag(config=True)

    def preprocess(self, nb, resources):
        s = settings_of(self)
        started = time.time()
        resources[STARTED] = time.monotonic()
        resources[DEADLINE] = started + s.learner_budget
        resources[LAST] = not self.more_follow and last_learner(self, resources)
        if resources[LAST]:
            self.log.info("%s is the last submission of this run: no kernel or suite process is made ready after it",
                          resources["nbgrader"].get("student"))
        wall = _wall(s)
        hidden.prepare(resources["nbgrader"]["assignment"], s)
        sb, proc = _kernels.take(s, wall)
        with sb:
            missing = sb.missing()
            if missing:
                self.log.warning("sandbox: this grading lacks %s", "; ".join(missing))
            key = secrets.token_hex(32).encode()       # signs every line of this run (autograder.inside.execute)
            run = sb.finish(proc, s.max_notebook_bytes, key + b"\n" + nbformat.writes(nb).encode(),
                            last=execute.signed(key, execute.DONE).encode() + b"\n")
        if not resources[LAST]:
            _kernels.prepare(s, wall)           # the next learner's kernel, while this one is graded
        lines = run.stdout.splitlines()
        if not lines or _json(lines[0]) != {"ready": True}:
            # Nothing of the learner's had run: the sandbox or its kernel could not start.
            self.log.error("the sandbox's notebook run ended before its kernel was ready (%s); its stderr:\n%s",
                           _ended(run, wall), quoted(run.stderr))
            raise GraderFault(f"the notebook's kernel did not start in the sandbox ({_ended(run, wall)}); "
                              "the sandbox's stderr is in the log")
        ran = self._apply(nb, _verified(lines[1:], key), s)
        resources[UNFINISHED] = unfinished(nb, s)
        problem = None
        if run.timed_out:
            problem = f"your notebook did not finish running within {wall:g} s"
        elif run.over_limit:
            problem = f"your notebook's outputs passed {s.max_notebook_bytes >> 20} MiB; the rest were not kept"
        elif ran < sum(c.cell_type == "code" for c in nb.cells):
            problem = "your notebook could not be run to the end (it ended the Python process or used too much memory)"
        if problem:
            self.log.warning("%s (%s); the sandbox's stderr:\n%s", problem, _ended(run, wall), quoted(run.stderr))
            first_code = next((c for c in nb.cells if c.cell_type == "code"), None)
            if first_code is not None:
                first_code.outputs.insert(0, note(f"[grader] {problem}; the outputs below are those recorded "
                                                  "before.\n"))
        resources[RECORD] = {"protections": {name: ok for name, ok in sb.protections.items()},
                             "execute_s": round(time.time() - started, 3)}
        sanitize(nb)
        return nb, resources

    def _apply(self, nb, lines: list[bytes], s: config.Settings) -> int:
        """Put the outputs of each line the sandbox wrote into its code cell, checked and capped again here; the
        number of code cells that reported.  Only the first line for each code cell counts, and a line longer
        than a cell's outputs may be is not parsed."""
        from autograder.inside.execute import cap_outputs

        code = {i for i, c in enumerate(nb.cells) if c.cell_type == "code"}
        done: set[int] = set()
        longest = s.max_cell_output_bytes + s.max_cell_output_chars + (64 << 10)
        for line in lines:
            if done == code:
                break
            msg: Any = _json(line) if len(line) <= longest else None
            try:
                index, raw = int(msg["index"]), msg["outputs"]
                if index not in code or index in done or not isinstance(raw, list):
                    continue
                outputs = [nbformat.from_dict(o) for o in raw[:s.max_outputs_per_cell]]
                probe = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=outputs)])
                nbformat.validate(probe)
                outputs = [_joined(o) for o in outputs]
            except Exception:  # noqa: BLE001 - whatever the sandbox wrote, it is only untrusted data
                continue
            nb.cells[index].outputs = cap_outputs(outputs, s.max_cell_output_chars, s.max_cell_output_bytes,
                                                  s.max_outputs_per_cell, total=len(raw))
            done.add(index)
        return len(done)


def _verified(lines: list[bytes], key: bytes) -> list[bytes]:
    """The lines the run signed with its key, without their signature; any other line is dropped (the kernel, the
    learner's code, cannot reach the run's pipe or key, and whatever reached them cannot sign)."""
    kept = []
    for line in lines:
        mac, _, text = line.partition(b" ")
        expected = hmac.new(key, text, hashlib.sha256).hexdigest().encode()
        if hmac.compare_digest(mac, expected):
            kept.append(text)
    return kept


def unfinished(nb, s: config.Settings) -> list[str]:
    """The code cells (by `cell_id`) that the notebook's run stopped at the cell limit: the hidden suite's worker does
    not run them again, and the names they define fail as a cell that could not be loaded. Only the sandbox says a
    cell was stopped, and so can a cell of the learner's raising the same error: believing it can only cost the
    learner what that cell defines, and it saves the cell limit's time (60 s by default) a second time."""
    from autograder.inside.execute import UNFINISHED as STOPPED

    said = STOPPED.format(int(s.cell_timeout))
    return [cell_id(cell, i) for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and any(
        o.get("output_type") == "error" and o.get("ename") == "TimeoutError" and o.get("evalue") == said
        for o in cell.outputs)]


def _joined(out):
    """An output whose texts are strings: nbformat also allows lists of lines, which the sanitizer cannot read."""
    if isinstance(out.get("text"), list):
        out["text"] = "".join(out["text"])
    for key, value in out.get("data", {}).items():
        if isinstance(value, list) and not key.endswith("json"):
            out["data"][key] = "".join(value)
    return out


def _json(line: bytes):
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _ended(run, wall: float) -> str:
    if run.timed_out:
        return f"stopped after {wall:g} s"
    if run.returncode is None:
        return "killed"
    return f"killed by signal {-run.returncode}" if run.returncode < 0 else f"exit code {run.returncode}"
