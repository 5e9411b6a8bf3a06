"""The trusted side's proxy for a learner's code running in a sandboxed worker.

`Learner(cells)` starts a worker in a sandbox that executes the cells; `learner.fn("name")`
returns a callable that sends its (plain) arguments to the worker and returns the (plain)
result; `learner.new("Class", ...)` returns a `ModuleProxy`.  When the worker dies (an
infinite loop, `os._exit`, memory exhausted), the call raises `WorkerDied` with a diagnosis
and the next call starts a fresh worker, so one bad test never sinks the others.  When the
grader itself fails (the sandbox cannot start, the worker dies before any learner code ran),
the call raises `GraderFault`: that is never the learner's zero.

What the grader measures of the worker it reads from outside it (autograder.verdict.measure).
"""
from __future__ import annotations

import collections
import contextlib
import os
import secrets
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from autograder import config
from autograder.inside.protocol import ProtocolError, read_frame, write_message
from autograder.sandbox.box import Limits, Sandbox, SandboxUnavailable, kill_tree
from autograder.sandbox.forkserver import Forked
from autograder.verdict import context, measure, policy
from autograder.verdict.record import GraderFault

MAX_CALLS = 2000           # calls of the learner's code kept for a failed check's replay (autograder.verdict.known)
MAX_KEPT = 1 << 20         # and the learner's answer to each, when it holds no more numbers than this
# what each check says once the learner's grading budget has run out (the learner's doing, not a fault)
OUT_OF_TIME = ("the time for grading your notebook ran out before this check: your code is far too slow somewhere "
               "(see the checks that did not finish in time)")


def _size(out) -> int:
    """How many numbers an answer holds (tensors in tuples, lists and dicts too)."""
    if isinstance(out, (tuple, list)):
        return sum(_size(o) for o in out)
    if isinstance(out, dict):
        return sum(_size(o) for o in out.values())
    return int(out.numel()) if hasattr(out, "numel") else 0


@dataclass
class Origin:
    """The call of the learner's code that gave a tensor back (kept on the tensor by `Learner.mark`, for a failed
    check to replay the known mistakes on it: autograder.verdict.known): the learner's calls in order, and this one's
    place among them."""

    assignment: str
    calls: list                     # the learner's calls (Learner.calls)
    position: int
    index: int | None               # the tensor's place in a tuple the call returned


ORIGIN = "_grader_origin"           # the attribute of a tensor the learner's code gave back


def origin(value) -> Origin | None:
    """The call that gave `value` back, when `value` is a tensor the learner's code gave."""
    o = getattr(value, ORIGIN, None)
    return o if isinstance(o, Origin) else None


class WorkerDied(Exception):
    """The learner's process ended or hung; the message says why, for the learner."""


class LearnerError(Exception):
    """The learner's code raised an exception (its type name, message and learner-side frames)."""

    def __init__(self, type: str, mro: list, message: str, traceback: str = ""):
        super().__init__(type, message)
        self.type, self.mro, self.message, self.traceback = type, mro, message, traceback
        self.origin: Origin | None = None     # the call that raised it, when kept

    def __str__(self):
        return f"{self.type}: {self.message}" if self.message else self.type

    def isa(self, name: str) -> bool:
        return name in self.mro


class Learner:
    def __init__(self, cells: list[dict], limits: Limits | None = None, call_timeout: float | None = None,
                 settings: config.Settings | None = None, role: str = "learner", preload: tuple[str, ...] = (),
                 refuse: tuple[str, ...] | None = None, library: str | None = None, guarded: bool = True,
                 grading: context.Context | None = None):
        self.settings = settings or config.current()
        # The grading this worker serves (its deadline, what it notes and counts): given by whoever makes it (the
        # suites' fixtures hand theirs down), else one of its own with no deadline (a worker outside any grading).
        self.grading = grading if grading is not None else context.Context()
        self.role = role
        self.preload = tuple(preload)             # modules the worker imports before it waits (worker.py)
        self.refuse = refuse                      # the library operators its worker refuses (None: worker.py's own)
        # the exercise's library versions (its suite's LIBRARY), refused while its code runs; course code may use them
        self.library = library if role == "learner" else None
        # the cells compiled with the policy's guards (autograder.inside.guard); not for the grader's own probes only
        self.guarded = guarded
        # what the exercise's suite declares its workers need: modules its code may use beyond the course's
        # (ALLOWED_MODULES), environment variables (WORKER_ENV) and the course's instruments installed before learner
        # code runs (WORKER_INSTRUMENTS: autograder.inside.kernels.count_bytes)
        self.modules: tuple[str, ...] = ()
        self.env: dict[str, str] = {}
        self.instruments: tuple[str, ...] = ()
        self.cells = cells
        self.limits = limits or Limits.of(self.settings, wall_s=self.settings.learner_budget)
        self.call_timeout = call_timeout or self.settings.call_timeout
        self.sandbox: Sandbox | None = None
        self.proc: subprocess.Popen | Forked | None = None
        self.owner = os.getpid()                  # the process that started the worker (its parent)
        self.spawned = False                      # a worker waits for its cells
        self._last_death = ""
        self.last_code: int | None = None          # the exit code of the last worker that ended
        self.last_stderr = ""                     # the worker's stderr when it last ended or hung
        self.ready: dict = {}
        # The key every message between the grader and the worker carries once the worker has its cells (worker.py):
        # learner code can write bytes into the worker's pipes (a path under /proc/self/fd), but never holds this key.
        self.seal: str | None = None
        self.start_failure: str | None = None    # the worker cannot start at all
        self.broken_cells: dict[str, str] = {}   # cell id -> why loading it ended the process
        self.broken_calls: dict[str, str] = {}   # call -> why it ended or hung the process before
        self.deaths = 0
        self.deadline = self.grading.deadline     # the end of the learner's time budget, as time.time()
        self.parts: list[str] = []                # names bound to the course's parts (autograder.inside.parts)
        self.held_at_start = 0                    # bytes its sandbox held before any learner code ran (cgroup)
        self.gpu_at_start: int | None = None      # GPU bytes the worker held before any learner code ran (driver)
        self.last_poll: dict | None = None        # the driver's polls during the last GPU memory measurement
        self.parts_server: Learner | None = None  # the worker of course code that computes them
        self.assignment: str | None = None        # set by the suite: the tensors given back carry their call
        self.calls: list[dict] = []               # the calls of the learner's code, in order (autograder.verdict.known)
        self.served: collections.Counter = collections.Counter()  # the course parts' forward calls it asked for

    def _left(self, timeout: float) -> float:
        """`timeout`, cut to what is left of the learner's grading budget."""
        left = self.deadline - time.time()
        if left <= 0:
            raise WorkerDied(OUT_OF_TIME)
        return min(timeout, left)

    # -- process management ------------------------------------------------------------------------
    def spawn(self):
        """Start a sandboxed worker up to the point where it has imported torch and waits for its cells (a
        worker can be spawned before its learner is known).  No learner code has run yet, so a worker that
        cannot get this far is the grader's fault."""
        self.close()
        self.last_code = None
        self.seal = None
        self._left(0.0)
        try:
            self.sandbox = Sandbox(self.limits)
        except (SandboxUnavailable, OSError) as e:
            raise GraderFault(f"the sandbox could not be set up: {e}") from None
        self.grading.notes.update(f"missing protection: {p}" for p in self.sandbox.missing())
        with open(self.sandbox.dir / "worker.stderr", "wb") as err:   # until learner code runs (see worker.py)
            course = [] if self.role == "learner" else ["--course"]     # course code: the library is not refused
            self.proc = self.sandbox.spawn([self.sandbox.inside(self.sandbox.files / "worker.py"), *self.preload,
                                            *course], stderr=err.fileno())
        self.owner = os.getpid()
        try:
            msg = self._read(self._left(self.settings.cell_timeout), during="while the grader's worker started")
        except WorkerDied:
            if time.time() >= self.deadline:   # the budget ran out: the learner's doing, not a fault
                self._die()
                raise
            log = self.stderr_tail() or self.last_stderr
            self._die()
            raise GraderFault(f"the grader's worker ended before running any learner code ({self._ended()}); "
                              f"its stderr:\n{log}") from None
        if msg != {"waiting": True}:
            self._die()
            raise GraderFault("the grader's worker did not start as expected")
        self.spawned = True
        self.held_at_start = measure.held(self)       # torch imported, no learner code run yet
        self.gpu_at_start = measure.gpu_memory(self.sandbox.pids(), self.grading) if self.limits.gpu else None

    def _imported(self):
        """The worker imported the modules the learner's cells import (`learner_imports`), no learner code run yet:
        what its sandbox holds now is the baseline of `measure.held_since_start`, then it may run the cells."""
        try:
            msg = self._read(self._left(self.settings.cell_timeout), during="while importing your cells' modules")
        except WorkerDied as e:
            raise GraderFault(f"the grader's worker failed while importing the modules your cells import ({e})") \
                from None
        if msg != {"imported": True}:
            self._die()
            raise GraderFault(f"the grader's worker answered {str(msg)[:200]!r} where it should have imported modules")
        self.held_at_start = measure.held(self)
        assert self.proc is not None and self.proc.stdin is not None
        self._send({"go": True})

    def start(self):
        """Give a worker the cells to load (spawning one unless one waits); a cell that kills or hangs it is
        left out, and the names it defines fail with that reason, so the rest of the notebook is still graded.
        A cell marked "unfinished" (the notebook's run stopped it at the cell limit) is left out from the start."""
        started = time.monotonic()
        stopped = _unfinished_message(self.settings.cell_timeout, "when your notebook ran")
        self.broken_cells.update({c["id"]: f"{stopped}, so the grader did not run it again"
                                  for c in self.cells if c.get("unfinished")})
        while True:
            if self.start_failure:
                raise WorkerDied(self.start_failure)
            if self.deaths >= self.settings.worker_restarts:
                raise WorkerDied(f"your code ended or hung the grader's process {self.deaths} times; "
                                 "the remaining checks were not run")
            if not (self.spawned and self.alive()):
                self.spawn()
            self.spawned = False
            assert self.proc is not None and self.proc.stdin is not None     # spawned just now, with a pipe
            imports = learner_imports(self.cells, self.modules) if self.guarded else []
            self.seal = secrets.token_hex(16)
            try:
                write_message(self.proc.stdin.fileno(),
                              {"cells": [c for c in self.cells if c["id"] not in self.broken_cells], "imports": imports,
                               "seal": self.seal,
                               "refuse": None if self.refuse is None else list(self.refuse),
                               "policy": None if not self.guarded else policy.runtime(
                                   self.library or policy.COURSE_LIBRARY if self.role == "learner" else None,
                                   self.modules),
                               "env": self.env, "instruments": list(self.instruments)})
            except OSError as e:           # it ended before it read them: no learner code has run
                self._die()
                raise GraderFault(f"the grader's worker ended before it received your cells ({e})") from None
            if imports:
                self._imported()
            loading = None
            try:
                while True:
                    wall, cpu = self._cpu_limited(self.settings.cell_timeout)
                    msg = self._read(wall, during=f"while running the cell {loading or '(start)'} of your notebook",
                                     cpu=cpu)
                    if isinstance(msg, dict) and "loading" in msg:
                        loading = str(msg["loading"])
                        continue
                    break
            except WorkerDied as e:
                if time.time() >= self.deadline:   # the budget ran out: the learner's doing, not a fault
                    raise
                if loading is None:                # it ended before running any cell
                    raise GraderFault(f"the grader's worker failed while receiving your cells ({e})") from None
                self.broken_cells[loading] = str(e)
                continue
            if not isinstance(msg, dict) or not msg.get("ready"):
                self._die()
                self.start_failure = "your notebook's code interfered with the grader while it was being loaded"
                continue
            self.ready = msg
            self.grading.starts.append([self.role, round(time.monotonic() - started, 3)])
            if self.parts:
                self.request({"op": "use_parts", "names": self.parts}, what="(the course's parts)")
            return

    @property
    def cell_errors(self) -> list[dict]:
        if not self.ready:
            self.start()
        return self.ready.get("cell_errors", [])

    def alive(self) -> bool:
        """Whether the worker runs (asked of its parent, or of the kernel by a process forked from it)."""
        if self.proc is None:
            return False
        if self.owner == os.getpid():
            return self.proc.poll() is None
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError):
            return False

    def _die(self):
        if self.proc is not None:
            kill_tree(self.proc)
        if self.sandbox is not None:
            self.sandbox.close()
        self.proc = None
        self.sandbox = None
        self.spawned = False

    def close(self):
        if self.proc is not None and self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        self._die()

    def _exit_code(self):
        """The worker's exit code once it has ended, or None when it closed its pipe but lives on."""
        if self.proc is None or self.owner != os.getpid():
            return None
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def _send(self, msg: dict):
        """A message to the worker after its cells, with its seal (learner code can write into this pipe too)."""
        assert self.proc is not None and self.proc.stdin is not None
        write_message(self.proc.stdin.fileno(), {**msg, "seal": self.seal} if self.seal is not None else msg)

    def _read(self, timeout: float, during: str, cpu: tuple[float, float] | None = None):
        """The worker's next message within `timeout` seconds of the wall clock; with `cpu` (the sandbox's CPU seconds
        when the learner's code began, the CPU seconds it may use), also until it has used those (`_cpu_limited`)."""
        assert self.proc is not None and self.proc.stdout is not None       # a worker was started
        fd, end = self.proc.stdout.fileno(), time.monotonic() + timeout
        try:
            if cpu is not None:
                self._await_output(fd, end, *cpu)
            message, size = read_frame(fd, end, max_payload=self.settings.max_frame_bytes, seal=self.seal)
            self.grading.largest_frame = max(self.grading.largest_frame, size)
            return message
        except (_CpuSpent, TimeoutError) as e:
            self._log_stderr(during)
            self._die()
            self.deaths += 1
            self._last_death = (_unfinished_message(e.args[0], during, "of CPU time ") if isinstance(e, _CpuSpent)
                                else _unfinished_message(timeout, during))
        except ProtocolError as e:
            self._die()
            self.deaths += 1
            self._last_death = f"your code sent the grader something it cannot read {during} ({str(e)[:200]})"
        except (EOFError, OSError):
            code = self.last_code = self._exit_code()
            self._log_stderr(during)
            self._die()
            self.deaths += 1
            self._last_death = _death_message(code, during)
        raise WorkerDied(self._last_death) from None

    def _cpu_limited(self, seconds: float) -> tuple[float, tuple[float, float]]:
        """The wall-clock time and the CPU limit (`_read`'s `cpu`) of learner code allowed `seconds`: the limit is
        charged in the CPU time the kernel counts for its sandbox, so a busy machine stretching it costs nothing; the
        wall clock, WALL_PER_CPU times as long, stops code that waits without using the CPU."""
        return self._left(seconds * WALL_PER_CPU), (measure.sandbox_cpu_seconds(self.sandbox, self.proc), seconds)

    def _await_output(self, fd: int, end: float, base: float, seconds: float):
        """Until the worker has written to `fd`: TimeoutError past `end` (the wall clock), _CpuSpent once its sandbox
        has used `seconds` of CPU since `base` (polled every CPU_POLL_S)."""
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if select.select([fd], [], [], min(left, CPU_POLL_S))[0]:
                return
            if measure.sandbox_cpu_seconds(self.sandbox, self.proc) - base > seconds:
                raise _CpuSpent(seconds)

    def _ended(self) -> str:
        """How the worker ended, in the grader's words (not the learner's)."""
        code = self.last_code
        return ("no exit code" if code is None else f"killed by signal {-code}" if code < 0 else f"exit code {code}")

    def stderr_tail(self, limit: int = 16 << 10) -> str:
        """The end of what the worker wrote to stderr before learner code ran (its imports, its start)."""
        try:
            with open(self.sandbox.dir / "worker.stderr", "rb") as f:  # type: ignore[union-attr]  # None: caught
                f.seek(0, 2)
                f.seek(max(0, f.tell() - limit))
                return f.read().decode("utf-8", "replace")
        except (OSError, AttributeError):
            return ""

    def _log_stderr(self, during: str):
        text = self.last_stderr = self.stderr_tail().strip()      # kept: the sandbox and its file go next
        if text:
            sys.stderr.write(f"grader: the worker's stderr {during}:\n{text[-4000:]}\n")

    # -- calls ---------------------------------------------------------------------------------------
    def request(self, req: dict, timeout: float | None = None, what: str = "", remember: bool = True):
        """Send one request and return the worker's response; the course's parts it asks for on the way are
        computed by `parts_server`.  A call that ended or hung the worker fails at once the next time
        (unless `remember` is off: each call of a course part is a call of its own)."""
        if remember and what in self.broken_calls:
            raise WorkerDied(self.broken_calls[what])
        self._left(0.0)                       # past the budget, nothing more is started or sent
        if not self.alive() or self.spawned:
            self.start()
        name = req.get("name")
        if name in self.broken_cells:
            raise WorkerDied(f"the cell that defines {name} could not be loaded: {self.broken_cells[name]}")
        assert self.proc is not None and self.proc.stdin is not None        # started
        try:
            self._send(req)
        except (BrokenPipeError, OSError):
            code = self._exit_code()
            self._die()
            self.deaths += 1
            message = _death_message(code, f"while calling {what}")
            if remember:
                self.broken_calls[what] = message
            raise WorkerDied(message) from None
        wall, cpu = self._cpu_limited(timeout or self.call_timeout)
        end = time.monotonic() + wall
        try:
            resp = self._read(max(0.0, end - time.monotonic()), during=f"while calling {what}", cpu=cpu)
            while isinstance(resp, dict) and "callback" in resp:
                self._send(self._serve(resp["callback"]))
                resp = self._read(max(0.0, end - time.monotonic()), during=f"while calling {what}", cpu=cpu)
        except WorkerDied as e:
            if remember:
                self.broken_calls[what] = str(e)
            raise
        except (BrokenPipeError, OSError):
            self._die()
            self.deaths += 1
            raise WorkerDied(f"your code stopped the grader's process while calling {what}") from None
        if not isinstance(resp, dict) or not ({"ok", "error"} & set(resp)):
            self._die()
            raise WorkerDied("your code interfered with the grader's messages")
        if "error" in resp:
            err = resp["error"] if isinstance(resp["error"], dict) else {}
            message = str(err.get("message", ""))[:2000]
            if err.get("type") == "NameError":
                message += self.failed_cells()
            if err.get("refused"):              # a library version of the exercise, refused where it was called
                self.grading.refused.append(str(err["refused"])[:200])
            raise LearnerError(str(err.get("type"))[:100], [str(c)[:100] for c in list(err.get("mro", []))[:50]],
                               message, str(err.get("traceback", ""))[:4000])
        return resp

    def failed_cells(self) -> str:
        """What stopped the learner's cells when the worker ran them, and the statements it skipped (what the policy
        refused at a cell's top level), said beside a name they did not define."""
        errors = [e for e in (self.ready.get("cell_errors") or []) if isinstance(e, dict)][:3]
        skipped = [e for e in (self.ready.get("skipped") or []) if isinstance(e, dict)][:3]
        said = [f"cell {str(e.get('cell'))[:60]} stopped with {str(e.get('type'))[:60]}: {str(e.get('message'))[:300]}"
                for e in errors]
        said += [f"the statement at line {str(e.get('line'))[:10]} of cell {str(e.get('cell'))[:60]} was not run: "
                 f"{str(e.get('message'))[:300]}" for e in skipped]
        return f" (when the grader ran your notebook's code: {'; '.join(said)})" if said else ""

    @contextlib.contextmanager
    def course_parts(self, names: list[str], server: Learner):
        """While active, `names` in the learner's code are the course's parts, computed by `server` (a worker
        of course code): a part is graded on its own, whatever the parts it uses do."""
        self.parts, self.parts_server = list(names), (server if names else None)
        try:
            self.request({"op": "use_parts", "names": self.parts}, what="(the course's parts)")
            yield
        finally:
            self.parts, self.parts_server = [], None
            if self.alive():
                with contextlib.suppress(WorkerDied, LearnerError):
                    self.request({"op": "use_parts", "names": []}, what="(your own parts)")

    def _serve(self, cb) -> dict:
        """A course part that the learner's worker asks for: only those of `parts`, only what the stand-ins
        send; the course worker's own errors are not passed on (they could show its code)."""
        ops = {"part": ("name", "ctor", "ctor_kwargs", "state", "args", "kwargs", "grad", "device"),
               "part_backward": ("name", "ctor", "ctor_kwargs", "grad_id", "grads")}
        if (not isinstance(cb, dict) or cb.get("op") not in ops or cb.get("name") not in self.parts
                or self.parts_server is None):
            return {"error": "no course part is available here"}
        name = cb["name"]
        if cb["op"] == "part":
            self.served[name] += 1
        fields = {k: cb[k] for k in ops[cb["op"]] if k in cb}
        try:
            return {"ok": self.parts_server.request({"op": cb["op"], **fields}, what=f"the course's {name}",
                                                    remember=False)["ok"]}
        except LearnerError as e:
            return {"error": f"the course's {name} could not take what your code gave it ({e.type})"}
        except WorkerDied:
            return {"error": f"the course's {name} could not run on what your code gave it"}

    def record(self, call: dict) -> int:
        """Keep a call of the learner's code (part, args, kwargs; for a module its handle and how it was made), for a
        failed check to replay the known mistakes on the same calls (autograder.verdict.known); its position."""
        if self.assignment is None or len(self.calls) >= MAX_CALLS:
            return -1
        self.calls.append(call)
        return len(self.calls) - 1

    @contextlib.contextmanager
    def marking_errors(self, position: int):
        """An exception the learner's code raises in the call at `position` carries that call."""
        try:
            yield
        except LearnerError as e:
            if position >= 0:
                e.origin = Origin(self.assignment or "", self.calls, position, None)
            raise

    def mark(self, out, position: int):
        """Tag each tensor of `out`, an answer the learner's code gave to the call at `position`, with that call."""
        import torch

        if position < 0:
            return out
        if _size(out) <= MAX_KEPT:                 # the answer itself, for a replay to compare with
            self.calls[position]["answer"] = out
        items = list(out) if isinstance(out, tuple) else [out]
        for i, t in enumerate(items):
            if isinstance(t, torch.Tensor):
                setattr(t, ORIGIN, Origin(self.assignment or "", self.calls, position,
                                          i if isinstance(out, tuple) else None))
        return out

    def fn(self, name: str):
        def call(*args, **kwargs):
            position = self.record({"part": name, "args": args, "kwargs": kwargs})
            with self.marking_errors(position):
                out = self.request({"op": "call", "name": name, "args": list(args), "kwargs": kwargs},
                                   what=f"{name}()")["ok"]
            return self.mark(out, position)

        call.__name__ = name
        return call

    def twice(self, name: str, *args, handle: int | None = None, made: dict | None = None, family: str | None = None,
              last_rows: int | None = None, **kwargs) -> dict:
        """Call `name` (or a module handle's forward) twice in one request, each call on its own copies of the
        arguments, with autograd off and then on: {"first", "second", "args_after": [after the first, the second]};
        or as one `family` of checks calls it (autograder.inside.calls.call_family). `made`: how the module of
        `handle` was made (ctor, ctor_kwargs, state)."""
        req: dict[str, Any] = {"op": "call_twice", "name": name, "args": list(args), "kwargs": kwargs}
        if handle is not None:
            req["handle"] = handle
        if family is not None:
            req["family"] = family
        if last_rows:
            req["last_rows"] = int(last_rows)
        position = self.record({"part": name, "args": args, "kwargs": kwargs, "twice": True, "handle": handle,
                                "family": family, "last_rows": last_rows, **(made or {})})
        with self.marking_errors(position):
            ok = self.request(req, what=f"{name}()")["ok"]
        if not isinstance(ok, dict):
            return {}
        self.mark(ok.get("second"), position)
        self.mark(ok.get("first"), position)
        if position >= 0 and "answer" in self.calls[position]:
            self.calls[position]["answer"] = ok
        return ok

    def gradients(self, name: str, *args, grads: list, handle: int | None = None, **kwargs) -> dict:
        """The gradients of a call of `name` (or a module handle's forward) with respect to its floating arguments and
        parameters, for the output gradients `grads` (autograder.inside.calls.gradients)."""
        req: dict[str, Any] = {"op": "gradients", "name": name, "args": list(args), "kwargs": kwargs, "grads": grads}
        if handle is not None:
            req["handle"] = handle
        ok = self.request(req, what=f"{name}() with autograd")["ok"]
        return ok if isinstance(ok, dict) else {}

    def new(self, name: str, *args, **kwargs) -> ModuleProxy:
        resp = self.request({"op": "new", "name": name, "args": list(args), "kwargs": kwargs},
                            what=f"{name}(...)")
        handle = resp["ok"].get("handle") if isinstance(resp["ok"], dict) else None
        if not isinstance(handle, int):
            raise WorkerDied("your code interfered with the grader's messages")
        return ModuleProxy(self, name, handle, args, kwargs)

    def seed(self, seed: int):
        self.request({"op": "seed", "seed": seed}, what="torch.manual_seed")


class ModuleProxy:
    def __init__(self, learner: Learner, name: str, handle: int, ctor: tuple = (), ctor_kwargs: dict | None = None):
        self.learner, self.name, self.handle = learner, name, handle
        self.ctor, self.ctor_kwargs = tuple(ctor), dict(ctor_kwargs or {})
        self.contract: dict | None = None       # the contract's state it was given (by the contract's names)

    def made(self) -> dict:
        return {"ctor": self.ctor, "ctor_kwargs": self.ctor_kwargs, "state": self.contract}

    def __call__(self, *args, **kwargs):
        position = self.learner.record({"part": self.name, "args": args, "kwargs": kwargs, "handle": self.handle,
                                        **self.made()})
        with self.learner.marking_errors(position):
            out = self.learner.request({"op": "method", "handle": self.handle, "method": "forward",
                                        "args": list(args), "kwargs": kwargs}, what=f"{self.name}.forward()")["ok"]
        return self.learner.mark(out, position)

    def twice(self, *args, family: str | None = None, last_rows: int | None = None, **kwargs) -> dict:
        return self.learner.twice(self.name, *args, handle=self.handle, made=self.made(), family=family,
                                  last_rows=last_rows, **kwargs)

    def gradients(self, *args, grads: list, **kwargs) -> dict:
        """autograder.inside.calls.gradients of this module's forward."""
        return self.learner.gradients(self.name, *args, grads=grads, handle=self.handle, **kwargs)

    def state_dict(self) -> dict:
        return self.learner.request({"op": "state_dict", "handle": self.handle}, what=f"{self.name}.state_dict()")["ok"]

    def load_state_dict(self, state: dict, strict: bool = True, contract: dict | None = None):
        """Load `state` (`contract`: the same by the contract's names, when the learner's names differ)."""
        self.learner.request({"op": "load_state_dict", "handle": self.handle, "state": state, "strict": strict},
                             what=f"{self.name}.load_state_dict()")
        self.contract = state if contract is None else contract

    def backward(self, *args, grad, **kwargs) -> dict:
        return self.learner.request({"op": "backward", "handle": self.handle, "args": list(args),
                                     "kwargs": kwargs, "grad": grad}, what=f"{self.name} backward")["ok"]

    def train(self, x, y, steps: int, batch_size: int, lr: float, seed: int, timeout: float):
        self.contract = None                    # its weights are its training's from now on: no replay follows them
        self.learner.request({"op": "train", "handle": self.handle, "x": x, "y": y, "steps": steps,
                              "batch_size": batch_size, "lr": lr, "seed": seed},
                             timeout=timeout, what=f"training {self.name}")


# Learner code is allowed its limits in CPU seconds (`Learner._cpu_limited`), and this many times as long on the wall
# clock: the 2-core machine at a load of 8 gives one process a quarter of a core.
WALL_PER_CPU = 5.0
CPU_POLL_S = 0.1                 # how often a wait for learner code reads its sandbox's CPU time


class _CpuSpent(Exception):
    """Learner code used the CPU time it was allowed (the seconds, its argument)."""


def _unfinished_message(seconds: float, during: str, unit: str = "") -> str:
    return f"your code did not finish within {seconds:.3g} s {unit}{during} (an infinite loop, or far too slow?)"


def _death_message(code, during: str) -> str:
    if code is None:
        return f"your code stopped the grader's process {during}"
    if code == -9 or code == 137:
        return (f"your code was killed {during}: it used more memory or CPU time than allowed "
                "(a huge tensor, or an endless loop?)")
    if code < 0:
        return f"your code crashed the process {during} (signal {-code})"
    return (f"your code ended the process {during} (exit code {code}): remove calls to sys.exit, "
            "os._exit or quit() from your solution")


IMPORTS_AHEAD = 16     # modules at most that a worker imports for the learner before its baseline memory is read


def learner_imports(cells: list[dict], modules: tuple[str, ...] = ()) -> list[str]:
    """The modules the policy allows that the learner's cells import, as their source names them (read here, with
    `ast`): the worker imports them before its baseline memory is read, so a module's own memory (matplotlib's, some
    25 MiB) is not counted as the learner's, while everything their code makes still is."""
    import ast

    from autograder.notebooks import as_python

    found: dict[str, None] = {}
    for cell in cells:
        try:
            tree = ast.parse(as_python(cell["source"]))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found.update((n, None) for n in names if policy.allowed(n, modules))
    return list(found)[:IMPORTS_AHEAD]
