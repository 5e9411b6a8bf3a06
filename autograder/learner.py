"""The trusted side's proxy for a learner's code running in a sandboxed worker.

`Learner(cells)` starts a worker in a sandbox that executes the cells; `learner.fn("name")`
returns a callable that sends its (plain) arguments to the worker and returns the (plain)
result; `learner.new("Class", ...)` returns a `ModuleProxy`.  When the worker dies (an
infinite loop, `os._exit`, memory exhausted), the call raises `WorkerDied` with a diagnosis
and the next call starts a fresh worker, so one bad test never sinks the others.
"""
from __future__ import annotations

import json
import os
import subprocess
import time

from .protocol import ProtocolError, read_message, write_message
from .sandbox import Limits, Sandbox, kill_tree

CELL_TIMEOUT = float(os.environ.get("GRADER_CELL_TIMEOUT", "60"))   # loading one cell
MAX_DEATHS = 12


def on_gpu() -> bool:
    """Whether workers compute on a GPU (GRADER_DEVICE, read when asked: a test may set it)."""
    return os.environ.get("GRADER_DEVICE", "cpu") != "cpu"


class WorkerDied(Exception):
    """The learner's process ended or hung; the message says why, for the learner."""


class LearnerError(Exception):
    """The learner's code raised an exception (its type name, message and learner-side frames)."""

    def __init__(self, type: str, mro: list, message: str, traceback: str = ""):
        super().__init__(type, message)
        self.type, self.mro, self.message, self.traceback = type, mro, message, traceback

    def __str__(self):
        return f"{self.type}: {self.message}" if self.message else self.type

    def isa(self, name: str) -> bool:
        return name in self.mro


class Learner:
    def __init__(self, cells: list[dict], limits: Limits | None = None, call_timeout: float = 60.0):
        self.cells = cells
        self.limits = limits or Limits()
        self.call_timeout = call_timeout
        self.sandbox: Sandbox | None = None
        self.proc: subprocess.Popen | None = None
        self.ready: dict = {}
        self.last_worker_seconds = 0.0
        self.start_failure: str | None = None    # the worker cannot start at all
        self.broken_cells: dict[str, str] = {}   # cell id -> why loading it ended the process
        self.broken_calls: dict[str, str] = {}   # call -> why it ended or hung the process before
        self.deaths = 0
        self.forbidden_seen: dict[str, int] = {}

    # -- process management ------------------------------------------------------------
    def start(self):
        """Start a worker that loads the cells; a cell that kills or hangs it is left out, and the
        names it defines fail with that reason, so the rest of the notebook is still graded."""
        while True:
            if self.start_failure:
                raise WorkerDied(self.start_failure)
            if self.deaths >= MAX_DEATHS:
                raise WorkerDied(f"your code ended or hung the grader's process {self.deaths} times; "
                                 "the remaining checks were not run")
            self.close()
            self.sandbox = Sandbox(self.limits)
            cells_path = self.sandbox.home / "cells.json"
            cells_path.write_text(json.dumps([c for c in self.cells if c["id"] not in self.broken_cells]))
            self.proc = self.sandbox.popen([self.sandbox.inside(self.sandbox.code / "worker.py"),
                                            self.sandbox.inside(cells_path)],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            loading = None
            try:
                while True:
                    msg = self._read(CELL_TIMEOUT, during=f"while running the cell {loading or '(start)'} of your notebook")
                    if isinstance(msg, dict) and "loading" in msg:
                        loading = str(msg["loading"])
                        continue
                    break
            except WorkerDied as e:
                if loading is None:
                    self.start_failure = str(e)
                else:
                    self.broken_cells[loading] = str(e)
                continue
            if not isinstance(msg, dict) or not msg.get("ready"):
                self._die()
                self.start_failure = "your notebook's code interfered with the grader while it was being loaded"
                continue
            self.ready = msg
            return

    @property
    def cell_errors(self) -> list[dict]:
        if not self.ready:
            self.start()
        return self.ready.get("cell_errors", [])

    def _die(self):
        if self.proc is not None:
            kill_tree(self.proc)
        if self.sandbox is not None:
            self.sandbox.close()
        self.proc = None
        self.sandbox = None

    def close(self):
        if self.proc is not None and self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        self._die()

    def _read(self, timeout: float, during: str):
        try:
            return read_message(self.proc.stdout.fileno(), time.monotonic() + timeout)
        except TimeoutError:
            self._die()
            self.deaths += 1
            raise WorkerDied(f"your code did not finish within {timeout:g} s {during} "
                             "(an infinite loop, or far too slow?)") from None
        except (EOFError, ProtocolError, OSError):
            code = self.proc.wait(timeout=10) if self.proc else None
            self._die()
            self.deaths += 1
            raise WorkerDied(_death_message(code, during)) from None

    def cpu_seconds(self) -> float:
        """CPU time used so far by the worker's whole process tree, from the kernel's accounting: a
        clock the learner's code cannot change.  Live threads are read in nanoseconds
        (/proc/<pid>/task/<tid>/schedstat); the 10 ms-tick totals, which also hold threads and
        children that have ended, are used instead when they show more."""
        import psutil

        if self.proc is None:
            return 0.0
        precise = ticks = 0.0
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                ticks += t.user + t.system + t.children_user + t.children_system
                for task in os.listdir(f"/proc/{p.pid}/task"):
                    with open(f"/proc/{p.pid}/task/{task}/schedstat") as f:
                        precise += int(f.read().split()[0]) / 1e9
            except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
                pass
        return ticks if ticks > precise + 0.02 else precise

    def _worker_process(self):
        import psutil

        root = psutil.Process(self.proc.pid)
        for p in [root, *root.children(recursive=True)]:
            if any(arg.endswith("worker.py") for arg in p.cmdline()[1:2]):
                return p
        raise WorkerDied("the grader could not find your code's process")

    def reset_peak_memory(self):
        """Start a new peak-memory measurement of the worker: the kernel's VmHWM on the CPU, the
        caching allocator's peak on a GPU."""
        if self.proc is None:
            self.start()
        if on_gpu():
            self.request({"op": "device_memory", "reset": True}, what="(GPU memory)")
            return
        with open(f"/proc/{self._worker_process().pid}/clear_refs", "w") as f:
            f.write("5")

    def peak_memory(self) -> int:
        """Bytes: the worker's peak memory since the last reset (resident memory read from the kernel
        on the CPU; tensor memory on a GPU)."""
        if on_gpu():
            return int(self.request({"op": "device_memory"}, what="(GPU memory)")["ok"]["peak"])
        with open(f"/proc/{self._worker_process().pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    # -- calls -----------------------------------------------------------------------------
    def request(self, req: dict, timeout: float | None = None, what: str = ""):
        if what in self.broken_calls:
            raise WorkerDied(self.broken_calls[what])
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        name = req.get("name")
        if name in self.broken_cells:
            raise WorkerDied(f"the cell that defines {name} could not be loaded: {self.broken_cells[name]}")
        try:
            write_message(self.proc.stdin.fileno(), req)
        except (BrokenPipeError, OSError):
            code = self.proc.wait(timeout=10)
            self._die()
            self.deaths += 1
            self.broken_calls[what] = _death_message(code, f"while calling {what}")
            raise WorkerDied(self.broken_calls[what]) from None
        try:
            resp = self._read(timeout or self.call_timeout, during=f"while calling {what}")
        except WorkerDied as e:
            self.broken_calls[what] = str(e)
            raise
        if not isinstance(resp, dict):
            self._die()
            raise WorkerDied("your code interfered with the grader's messages")
        forbidden = resp.get("forbidden", {})
        for name, count in (forbidden.items() if isinstance(forbidden, dict) else ()):
            self.forbidden_seen[str(name)] = self.forbidden_seen.get(str(name), 0) + 1
        self.last_worker_seconds = resp.get("worker_seconds", 0.0)
        if "error" in resp:
            e = resp["error"]
            raise LearnerError(str(e.get("type")), list(e.get("mro", [])), str(e.get("message", "")),
                               str(e.get("traceback", "")))
        return resp

    def names(self, names: list[str]) -> dict[str, str]:
        return self.request({"op": "names", "names": list(names)}, what="(looking up names)")["ok"]

    def fn(self, name: str, return_args: bool = False):
        def call(*args, **kwargs):
            resp = self.request({"op": "call", "name": name, "args": list(args), "kwargs": kwargs,
                                 "return_args": return_args}, what=f"{name}()")
            return (resp["ok"], resp["args_after"]) if return_args else resp["ok"]

        call.__name__ = name
        return call

    def new(self, name: str, *args, **kwargs) -> "ModuleProxy":
        resp = self.request({"op": "new", "name": name, "args": list(args), "kwargs": kwargs},
                            what=f"{name}(...)")
        return ModuleProxy(self, name, resp["ok"]["handle"], resp["ok"]["info"])

    def seed(self, seed: int):
        self.request({"op": "seed", "seed": seed}, what="torch.manual_seed")


class ModuleProxy:
    def __init__(self, learner: Learner, name: str, handle: int, info: dict):
        self.learner, self.name, self.handle, self.info = learner, name, handle, info

    def __call__(self, *args, return_args: bool = False, **kwargs):
        resp = self.learner.request({"op": "method", "handle": self.handle, "method": "forward",
                                     "args": list(args), "kwargs": kwargs, "return_args": return_args},
                                    what=f"{self.name}.forward()")
        return (resp["ok"], resp["args_after"]) if return_args else resp["ok"]

    def state_dict(self) -> dict:
        return self.learner.request({"op": "state_dict", "handle": self.handle}, what=f"{self.name}.state_dict()")["ok"]

    def load_state_dict(self, state: dict):
        self.learner.request({"op": "load_state_dict", "handle": self.handle, "state": state},
                             what=f"{self.name}.load_state_dict()")

    def backward(self, *args, grad, **kwargs) -> dict:
        return self.learner.request({"op": "backward", "handle": self.handle, "args": list(args),
                                     "kwargs": kwargs, "grad": grad}, what=f"{self.name} backward")["ok"]

    def train(self, x, y, steps: int, batch_size: int, lr: float, seed: int, timeout: float) -> list:
        return self.learner.request({"op": "train", "handle": self.handle, "x": x, "y": y, "steps": steps,
                                     "batch_size": batch_size, "lr": lr, "seed": seed},
                                    timeout=timeout, what=f"training {self.name}")["ok"]


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
