"""One channel per request: a warm child process answers one JSON request at a time, one line each way (the cells in
the request, the result in the reply), and nothing else goes on the channel. The parent's end (`Child`, a process it
started or forked) tells apart a child that ran past its deadline (it is ended then), one that ended without a reply,
and one that sent something that is not a reply (`Stopped`); the child's end is `serve`, or `requests` and `write`.
Used by the hidden suite's processes (autograder.verdict.hidden, suite_server) and by the check service's warm
graders (autograder.service.warm).
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from typing import IO

from autograder import ROOT

OVERRAN, DIED, GARBLED = "overran", "died", "garbled"
END_S = 30.0                # a child asked to end (its requests closed) has this long before it is killed


class Stopped(Exception):
    """A child gave no reply: it was still at work at its deadline (OVERRAN), it ended (DIED), or what it sent is not a
    reply (GARBLED)."""

    def __init__(self, why: str):
        super().__init__({OVERRAN: "it ran past its deadline", DIED: "it died",
                          GARBLED: "it sent something that is not a reply"}[why])
        self.why = why

    @property
    def overran(self) -> bool:
        return self.why == OVERRAN


def write(fd: int, message: dict, timeout: float | None = None):
    """One request or reply, as one line; TimeoutError when the reader took no more of it for `timeout` seconds."""
    data = (json.dumps(message) + "\n").encode()
    end = None if timeout is None else time.monotonic() + timeout
    while data:
        if end is not None and not select.select([], [fd], [], max(0.0, end - time.monotonic()))[1]:
            raise TimeoutError
        data = data[os.write(fd, data[:select.PIPE_BUF] if end is not None else data):]


def requests(fd: int = 0) -> Iterator[dict]:
    """The requests a child reads on `fd` (its stdin), one at a time, until they end."""
    with os.fdopen(fd, "rb", closefd=fd != 0) as lines:
        for line in lines:
            yield json.loads(line)


def serve(answer: Callable[[dict], dict | None]):
    """Answer each request on stdin with `answer(request)` (None: that request has no reply) until they end. The
    replies go to the stdout this process was started with; anything else it prints goes to its stderr."""
    replies = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for req in requests():
        reply = answer(req)
        if reply is not None:
            write(replies, reply)


class _Forked:
    """A child forked from this process, as much of a subprocess.Popen as `Child` uses."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.02)
        return code

    def kill(self):
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


PF_EXITING = 0x4            # a task's flag (/proc/<pid>/stat) from the moment it begins to exit


def ended(p) -> bool:
    """Whether the psutil process `p` has ended: gone, a zombie, or exiting. A killed process is a zombie until its
    parent reaps it, an orphan until the first process of the machine (or container) does, which may be seconds later
    or never; the first process of a PID namespace (a sandbox's bwrap) exits only once every process of its namespace
    is reaped. None of them runs any code of its own again."""
    import psutil

    try:
        if not p.is_running():
            return True
        with open(f"/proc/{p.pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError, psutil.NoSuchProcess):
        return True
    fields = stat[stat.rindex(b")") + 2:].split()
    return fields[0] in (b"Z", b"X", b"x") or bool(int(fields[6]) & PF_EXITING)


def wait_dead(procs: list, timeout: float) -> list:
    """Wait until each of `procs` (psutil processes) has `ended`, for at most `timeout` seconds; those that have not.
    (psutil's `wait_procs` waits for each to be reaped.)"""
    end = time.monotonic() + timeout
    left = [p for p in procs if not ended(p)]
    while left and time.monotonic() < end:
        time.sleep(0.01)
        left = [p for p in left if not ended(p)]
    return left


class Child:
    """The parent's end of a warm child started as `python -m module` in the course's folder (`fork` makes one forked
    from this process). `log`: what it prints goes to an unnamed file (`log_tail`), else where this process's goes;
    `session`: it leads a session of its own; `preexec`: run in it before it starts (its limits)."""

    proc: subprocess.Popen | _Forked
    log: IO[bytes] | None
    requests_fd: int | None                # None once it is sent no more requests
    replies_fd: int | None

    def __init__(self, module: str, env: dict, log: bool = False, session: bool = False,
                 preexec: Callable[[], None] | None = None):
        self.log = tempfile.TemporaryFile() if log else None
        (theirs, self.requests_fd), (self.replies_fd, own) = os.pipe(), os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module], cwd=ROOT, env=env, stdin=theirs, stdout=own, stderr=self.log,
                start_new_session=session, preexec_fn=preexec)
        except BaseException:
            self._close_fds()
            raise
        finally:
            os.close(theirs)
            os.close(own)
        self.pending = b""

    @classmethod
    def fork(cls, run: Callable[[int, int, IO[bytes] | None], int], log: bool = False) -> Child:
        """A child forked from this process: `run(requests, replies, log)` reads its requests and writes its replies on
        those file descriptors (and what it prints to `log`, when it makes its stdout and stderr that file), and returns
        its exit code (70 when it raised, said on its stderr)."""
        self = cls.__new__(cls)
        self.log = tempfile.TemporaryFile() if log else None
        (theirs, self.requests_fd), (self.replies_fd, own) = os.pipe(), os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                os.close(self.requests_fd)
                os.close(self.replies_fd)
                code = run(theirs, own, self.log)
            except BaseException:  # noqa: BLE001 - said on its stderr, then ended
                with contextlib.suppress(OSError):
                    os.write(2, traceback.format_exc().encode())
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(theirs)
        os.close(own)
        self.proc, self.pending = _Forked(pid), b""
        return self

    # -- one request at a time -----------------------------------------------------------------------------
    def send(self, req: dict, timeout: float | None = None):
        """Send one request; Stopped when the child reads no more (DIED), or did not read it within `timeout` seconds
        (OVERRAN: the child is not ended here)."""
        if self.requests_fd is None:
            raise Stopped(DIED)
        try:
            write(self.requests_fd, req, timeout)
        except TimeoutError:
            raise Stopped(OVERRAN) from None
        except OSError:
            raise Stopped(DIED) from None

    def reply(self, timeout: float | None = None) -> dict:
        """The next reply; Stopped when none came within `timeout` seconds (OVERRAN: the child is not ended here),
        when the child closed its end (DIED), or when what came is not a reply (GARBLED)."""
        end = None if timeout is None else time.monotonic() + timeout
        seen = 0
        while b"\n" not in self.pending[seen:]:
            seen = len(self.pending)
            left = None if end is None else max(0.0, end - time.monotonic())
            if self.replies_fd is None or not select.select([self.replies_fd], [], [], left)[0]:
                raise Stopped(OVERRAN if self.replies_fd is not None else DIED)
            chunk = os.read(self.replies_fd, 1 << 16)
            if not chunk:
                raise Stopped(DIED)
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise Stopped(GARBLED)
        return reply

    def ask(self, req: dict, timeout: float | None = None) -> dict:
        """Send one request and return its reply (see `send`, `reply`)."""
        self.send(req)
        return self.reply(timeout)

    def done(self):
        """Send no more requests: the child's stdin ends."""
        if self.requests_fd is not None:
            os.close(self.requests_fd)
            self.requests_fd = None

    def outcome(self, deadline: float, log_limit: int = 8000) -> dict:
        """The end of a child that answers one request (sent, and `done`): {"reply": its reply} or {"stopped": why}
        (`Stopped`), "exit": its exit code (None: it was killed at `deadline`, a time.time()), "log": the end of what it
        printed. It has ended, and what its sandboxes left is removed."""
        try:
            out: dict = {"reply": self.reply(max(0.0, deadline - time.time()))}
        except Stopped as e:
            out = {"stopped": e.why}
        out["exit"] = self.wait(0.0 if out.get("stopped") == OVERRAN else max(0.0, deadline - time.time()))
        out["log"] = self.log_tail(log_limit)
        self.close()
        return out

    # -- its life ------------------------------------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float) -> int | None:
        """Its exit code once it ended, within `timeout` seconds; past them it is killed (`kill`) and the code is None.
        What its sandboxes left on the host is removed."""
        from autograder.sandbox.box import sweep

        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        sweep(self.proc.pid)
        return code

    def kill(self):
        """Kill it with every process it started (its group, and its tree as it is now), and remove what their
        sandboxes left on the host. A process of the tree counts as ended once it is a zombie: it is dead, and its
        reaping is its parent's, for an orphan the first process of the machine or container (`wait_dead`)."""
        import psutil

        from autograder.sandbox.box import sweep

        try:
            tree = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.Error:
            tree = []
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.kill()
        for p in tree[1:]:
            with contextlib.suppress(psutil.Error):
                p.kill()
        wait_dead(tree[1:], timeout=10)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        for pid in {self.proc.pid, *(p.pid for p in tree)}:
            sweep(pid)

    def close(self, kill: bool = False):
        """End it: asked (its requests end; it ends what it started on its way out, within END_S, else it is killed),
        or killed at once (`kill`)."""
        if kill and self.alive():
            self.kill()
        self.done()
        self.wait(END_S)
        self._close_fds()

    def log_tail(self, limit: int) -> str:
        """The last `limit` characters (about) of what it printed, when it has a log."""
        if self.log is None or self.log.closed:
            return ""
        self.log.seek(0, os.SEEK_END)
        self.log.seek(max(0, self.log.tell() - 4 * limit))
        return self.log.read().decode("utf-8", "replace")[-limit:]

    def _close_fds(self):
        self.done()
        if self.replies_fd is not None:
            os.close(self.replies_fd)
            self.replies_fd = None
        if self.log is not None:
            self.log.close()
