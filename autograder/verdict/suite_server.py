"""A warm trusted process that runs the hidden suites of a batch, one learner after another.

It imports Python's, torch's and the suites' modules once; each learner's suite runs in a process forked from it,
forked ahead (with that learner's fresh sandboxed worker started meanwhile), which never ran another learner's
suite, answers that learner's request and ends. The workers of course code a suite uses are shared, checked and
reset between learners, and replaced when they fail a check. It runs no learner code. Its requests and replies go
on a channel (autograder.verdict.channel): a request is hidden.run_suite's, with "env", "stop_at" and "more", and its
reply the outcome of that learner's process (its reply, the suite's result, or why it has none; its exit code; the
end of its log); {"op": "prepare", ...} has no reply.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import os
import secrets
import sys
import time
from typing import IO

from autograder.verdict import channel, context

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

    def __init__(self, grading):
        self.grading = grading           # the server's own: no deadline, no driver reading (NVML is not fork-safe)
        self.workers: dict = {}          # (role, assignment) -> Learner
        self.used: dict = {}             # assignment -> the roles its suite was seen to start for itself

    def expect(self, assignment: str):
        """Before the first learner of `assignment`: the roles its suite's tests ask for (see `roles_of`)."""
        self.used.setdefault(assignment, set()).update(roles_of(assignment))

    def saw(self, assignment: str, result: dict | None):
        """After a learner's suite: the roles it started workers for (it had none shared) are shared from now on."""
        try:
            roles = {role for role, _ in (result or {})["profile"]["workers"]}
        except (KeyError, TypeError, ValueError):
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
                w = Learner(learner_cells(read(source_notebook(assignment))), role=role, grading=self.grading)
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
    from autograder.verdict.measure import cpu_seconds

    if not w.alive() or w.spawned or cpu_seconds(w) > w.limits.cpu_time / 2:
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


def library(assignment: str) -> str | None:
    """The library versions a learner's worker refuses while its code runs, for `assignment`'s suite (its LIBRARY)."""
    return getattr(_suite(assignment), "LIBRARY", None)


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


def _child(requests: int, replies: int, log: IO[bytes], shared: dict, env: dict, assignment: str) -> int:
    """The process of one learner's suite: it starts that learner's worker, then answers the request, if one comes."""
    from autograder import config
    from autograder.verdict import hidden, learner

    os.setsid()
    os.environ.update(env)
    grading = context.Context()            # this learner's (with a seed of its own); it reads the GPU driver
    worker: learner.Learner | None
    worker = learner.Learner([], role="learner", preload=preload(assignment), refuse=refused(assignment),
                             library=library(assignment), grading=grading)
    try:
        worker.spawn()
    except Exception:  # noqa: BLE001 - the suite starts one itself, and says why if it cannot
        worker = None
    req = next(channel.requests(requests), None)
    if req is None:                        # discarded: no learner came for it
        if worker is not None:
            worker.close()                 # its sandbox's folder and cgroup go too
        return 0
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    if req["env"].get(config.ENV) != env.get(config.ENV) and worker is not None:
        worker.close()                     # started under other limits
        worker = None
    os.environ.update(req["env"])
    # Checked again now: one that stopped answering since is not used (the suite starts its own).
    grading.shared = {role: w for role, w in shared.items() if healthy(w)}
    grading.prestarted = worker
    hidden.limit_trusted_memory(config.current().trusted_memory)
    try:
        result = hidden.answer(req, grading)
    finally:
        if worker is not None:
            worker.close()
    channel.write(replies, result)
    return 0


def _fork(shared: dict, env: dict, assignment: str) -> channel.Child:
    return channel.Child.fork(functools.partial(_child, shared=shared, env=env, assignment=assignment), log=True)


class Server:
    """The shared workers of course code, and the next learner's process, forked ahead with its assignment and
    environment."""

    def __init__(self):
        self.shared = Shared(context.Context(driver_readings=False))
        self.ready: tuple[channel.Child, str, dict] | None = None

    def discard(self):
        """End the process forked ahead, which will not be used: it reads no request and ends at once."""
        if self.ready is not None:
            self.ready[0].close()
            self.ready = None

    def answer(self, req: dict) -> dict | None:
        if req.get("op") == "status":
            return {"shared": self.shared.pids(), "ready": self.ready and self.ready[0].proc.pid}
        asg, env = req["assignment"], req["env"]
        if self.ready is not None and self.ready[1] != asg:
            self.discard()                  # forked for another assignment
        preparing = req.get("op") == "prepare"   # no reply: the grader goes on with the notebook's run meanwhile
        ready_for(asg)
        if preparing:
            self.shared.expect(asg)
        if self.ready is None:
            self.ready = (_fork(self.shared.get(asg), env, asg), asg, env)
        if preparing:
            return None
        child, stop_at = self.ready[0], float(req["stop_at"])
        try:
            child.send(req, timeout=max(0.0, stop_at - time.time()))
        except channel.Stopped:             # it ended before its request: a fresh one takes it
            child.close()
            child = _fork(self.shared.get(asg), env, asg)
            with contextlib.suppress(channel.Stopped):
                child.send(req, timeout=max(0.0, stop_at - time.time()))
        child.done()
        # The next learner's process, forked now so that its worker starts while this learner is graded. The
        # shared workers are busy with this learner: it gets them unchecked, checks them itself when its
        # request comes, and is forked again if the check below replaces one of them.
        given = self.shared.current(asg)
        self.ready = (_fork(given, env, asg), asg, env) if req.get("more", True) else None
        out = child.outcome(stop_at)
        self.shared.saw(asg, out.get("reply"))
        checked = self.shared.get(asg)
        if self.ready is not None and checked != given:
            self.discard()
            self.ready = (_fork(checked, env, asg), asg, env)
        return out


def main():
    warm()
    # What warm() made is kept out of the forked processes' garbage collection: a collection would walk (and,
    # touching each object, copy) every page of torch's, dynamo's and pytest's objects in each learner's process.
    gc.freeze()
    server = Server()
    try:
        channel.serve(server.answer)
    finally:
        server.discard()
        server.shared.close()


if __name__ == "__main__":
    main()
