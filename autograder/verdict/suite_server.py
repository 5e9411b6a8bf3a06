"""A warm trusted process that runs the hidden suites of a batch, one learner after another.

It imports Python's, torch's and the suites' modules once; each learner's suite runs in a process forked from it,
forked ahead (with that learner's fresh sandboxed worker started meanwhile), which never ran another learner's
suite and ends with it. The workers of course code a suite uses are shared, checked and reset between learners,
and replaced when they fail a check. It runs no learner code. One JSON line per request on stdin
({"assignment", "out", "log", "env", "more"}, or {"op": "prepare", ...} with no reply), one per reply on stdout
({"exit": code}, null when the suite's process was killed at its deadline).
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import secrets
import signal
import sys
import time

ROLES = ("reference", "course parts")
CHECK_S = 1.0                 # a shared worker answers its check within this, or is replaced


def warm():
    """Import what every suite process needs, once."""
    import hypothesis  # noqa: F401
    import pytest  # noqa: F401
    import safetensors.torch  # noqa: F401
    import torch  # noqa: F401

    from autograder import graph  # noqa: F401
    from autograder.verdict import hidden
    from autograder.verdict.suites import conftest  # noqa: F401

    for path in sorted(hidden.SUITES.glob("test_*.py")):
        __import__(f"autograder.verdict.suites.{path.stem}")


class Shared:
    """The workers of course code shared by the learners of a batch, kept in this (the server's) process."""

    def __init__(self):
        self.workers: dict = {}          # (role, assignment) -> Learner
        self.used: dict = {}             # assignment -> the roles its suite was seen to start for itself

    def expect(self, assignment: str):
        """Before the first learner of `assignment`: the roles its suite's tests ask for (see `roles_of`)."""
        self.used.setdefault(assignment, set()).update(roles_of(assignment))

    def saw(self, assignment: str, out: str):
        """After a learner's suite: the roles it started workers for (it had none shared) are shared from now on."""
        try:
            with open(out) as f:
                roles = {role for role, _ in json.load(f)["profile"]["workers"]}
        except (OSError, ValueError, KeyError, TypeError):
            return
        self.used.setdefault(assignment, set()).update(roles & set(ROLES))

    def get(self, assignment: str) -> dict:
        """The healthy shared workers of `assignment`, by role, started or replaced as needed."""
        from autograder.notebooks import learner_cells, read, source_notebook
        from autograder.verdict.learner import Learner

        for role in sorted(self.used.get(assignment, ())):
            w = self.workers.get((role, assignment))
            if w is not None and not healthy(w):
                w.close()
                w = None
            if w is None:
                w = Learner(learner_cells(read(source_notebook(assignment))), role=role)
                w.start()
                self.workers[(role, assignment)] = w
        return self.current(assignment)

    def current(self, assignment: str) -> dict:
        """The shared workers of `assignment` that exist now, by role, unchecked (`get` checks them)."""
        return {role: self.workers[(role, assignment)] for role in self.used.get(assignment, ())
                if (role, assignment) in self.workers}

    def pids(self) -> dict:
        return {f"{role}/{asg}": w.proc.pid for (role, asg), w in self.workers.items() if w.proc is not None}

    def close(self):
        for w in self.workers.values():
            w.close()


def healthy(w) -> bool:
    """A shared worker answers its check in turn and in time, and forgets the last learner's leftovers; it has
    used less than half the CPU time its processes may (so that it never reaches that limit during a grading)."""
    from autograder.verdict.learner import LearnerError, WorkerDied

    if not w.alive() or w.spawned or w.cpu_seconds() > w.limits.cpu_time / 2:
        return False
    token = secrets.token_hex(8)
    try:
        ok = w.request({"op": "echo", "token": token}, timeout=CHECK_S, what="(check)", remember=False)["ok"] == token
        return ok and w.request({"op": "forget"}, timeout=CHECK_S, what="(forget)", remember=False)["ok"] is None
    except (WorkerDied, LearnerError, KeyError, TypeError):
        return False


def _suite(assignment: str):
    """The module of `assignment`'s hidden suite, as warm() imported it (None when there is none)."""
    return sys.modules.get(f"autograder.verdict.suites.test_{assignment}")


def roles_of(assignment: str) -> set[str]:
    """The workers of course code that `assignment`'s suite asks for: the reference where a test takes the
    `reference_worker` or `timed_reference` fixture, the course's parts where one takes `course` or the suite
    binds course parts (conftest)."""
    import inspect

    module = _suite(assignment)
    params = {p for name, f in vars(module or object).items() if name.startswith("test_") and callable(f)
              for p in inspect.signature(f).parameters}
    roles = {"reference"} if params & {"reference_worker", "timed_reference"} else set()
    return roles | ({"course parts"} if "course" in params or hasattr(module, "course_parts") else set())


def refused(assignment: str) -> tuple[str, ...] | None:
    """The library operators a learner's worker refuses for `assignment`'s suite (its REFUSED_OPS)."""
    from autograder.verdict.suites.conftest import refusals

    return refusals([_suite(assignment)] if hasattr(_suite(assignment), "REFUSED_OPS") else [])


def preload(assignment: str) -> tuple[str, ...]:
    """The modules a learner's worker imports ahead for `assignment`'s suite (its WORKER_PRELOAD)."""
    return tuple(getattr(_suite(assignment), "WORKER_PRELOAD", ()))


def ready_for(assignment: str):
    """Import here what `assignment`'s suite also needs on the course's side: torch's modules its learners' workers
    import ahead (torch.export's tracer: a structure drawing traces the course's module in the suite's process;
    dynamo: torch's meta kernels),
    once, kept out of the forked processes' collections like warm()'s imports; and start the fork server of its
    workers here, before the processes are forked that will ask it for workers."""
    from autograder import config
    from autograder.sandbox import box as sandbox

    sandbox.prepare_fork_server(config.current(), preload(assignment))
    new = [m for m in preload(assignment) if m.startswith("torch.") and m not in sys.modules]
    for name in new:
        importlib.import_module(name)
    if new:
        gc.freeze()


def _child(read_fd: int, shared: dict, env: dict, assignment: str):
    """The process of one learner's suite: it starts that learner's worker, then waits for the request."""
    from autograder import config
    from autograder.verdict import context, hidden, learner

    os.setsid()
    os.environ.update({k: v for k, v in env.items() if k != "GRADER_DEADLINE"})
    os.environ.pop("GRADER_DEADLINE", None)
    grading = context.begin()              # this learner's (with a seed of its own); it reads the GPU driver
    worker: learner.Learner | None
    worker = learner.Learner([], role="learner", preload=preload(assignment), refuse=refused(assignment))
    try:
        worker.spawn()
    except Exception:  # noqa: BLE001 - the suite starts one itself, and says why if it cannot
        worker = None
    with os.fdopen(read_fd) as f:
        line = f.readline()
    if not line:                           # discarded: no learner came for it
        if worker is not None:
            worker.close()                 # its sandbox's folder and cgroup go too
        os._exit(0)
    req = json.loads(line)
    log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    if req["env"].get(config.ENV) != env.get(config.ENV) and worker is not None:
        worker.close()                     # started under other limits
        worker = None
    os.environ.update(req["env"])
    # Checked again now: one that stopped answering since is not used (the suite starts its own).
    grading.shared = {role: w for role, w in shared.items() if healthy(w)}
    grading.prestarted = worker
    hidden.limit_trusted_memory(config.current().trusted_memory)
    try:
        code = hidden._suite_main(req["assignment"], req["out"])
    finally:
        if worker is not None:
            worker.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _fork(shared: dict, env: dict, assignment: str) -> tuple[int, int]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        try:
            _child(r, shared, env, assignment)
        except BaseException:  # noqa: BLE001 - said in the learner's suite log (or the server's), then ended
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(70)
    os.close(r)
    return pid, w


def _discard(ready: tuple):
    """End a process forked ahead that will not be used: it reads no request and ends at once."""
    os.close(ready[1])
    _wait(ready[0], time.time() + 30)


def _wait(pid: int, deadline: float) -> int | None:
    """The exit code of a learner's process (None: killed at `deadline`); what its sandboxes left is removed."""
    from autograder.sandbox.box import sweep

    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            sweep(pid)
            return os.waitstatus_to_exitcode(status)
        if time.time() > deadline:
            for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    kill()
                except ProcessLookupError:
                    pass
            os.waitpid(pid, 0)
            sweep(pid)
            return None
        time.sleep(0.02)


def main():
    from autograder.verdict import context

    context.begin(context.Context(driver_readings=False))   # NVML is not fork-safe: the learners' processes read it
    warm()
    # What warm() made is kept out of the forked processes' garbage collection: a collection would walk (and,
    # touching each object, copy) every page of torch's, dynamo's and pytest's objects in each learner's process.
    gc.freeze()
    shared = Shared()
    ready = None                            # (pid, pipe, assignment, env) of the next learner's process
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    try:
        for line in sys.stdin:
            req = json.loads(line)
            if req.get("op") == "status":
                reply.write(json.dumps({"shared": shared.pids(), "ready": ready and ready[0]}) + "\n")
                reply.flush()
                continue
            asg, env = req["assignment"], req["env"]
            if ready is not None and ready[2] != asg:
                _discard(ready)             # forked for another assignment
                ready = None
            preparing = req.get("op") == "prepare"   # no reply: the grader goes on with the notebook's run meanwhile
            ready_for(asg)
            if preparing:
                shared.expect(asg)
            if ready is None:
                ready = (*_fork(shared.get(asg), env, asg), asg, env)
            if preparing:
                continue
            pid, pipe = ready[0], ready[1]
            try:
                os.write(pipe, (json.dumps(req) + "\n").encode())
            except OSError:                 # it ended before its request: a fresh one takes it
                _wait(pid, time.time() + 30)
                pid, pipe = _fork(shared.get(asg), env, asg)
                os.write(pipe, (json.dumps(req) + "\n").encode())
            os.close(pipe)
            # The next learner's process, forked now so that its worker starts while this learner is graded. The
            # shared workers are busy with this learner: it gets them unchecked, checks them itself when its
            # request comes, and is forked again if the check below replaces one of them.
            given = shared.current(asg)
            ready = (*_fork(given, env, asg), asg, env) if req.get("more", True) else None
            code = _wait(pid, float(req["deadline"]))
            shared.saw(asg, req["out"])
            checked = shared.get(asg)
            if ready is not None and checked != given:
                _discard(ready)
                ready = (*_fork(checked, env, asg), asg, env)
            reply.write(json.dumps({"exit": code}) + "\n")
            reply.flush()
    finally:
        if ready is not None:
            _discard(ready)
        shared.close()


if __name__ == "__main__":
    main()
