"""Execute a learner's notebook inside the sandbox, to record its outputs for the feedback.

Runs as `python execute.py CELL_TIMEOUT MAX_CHARS MAX_BYTES MAX_OUTPUTS`.  The kernel and this
client both live inside the sandbox.  Once the kernel is ready (torch imported), before any of the
learner's code runs, it writes `{"ready": true}` to its stdout and reads a key and the notebook from its stdin,
so that a kernel can be made ready before its learner is known; after each code cell, one line,
`{"index": i, "outputs": [...]}` signed with the key (`signed`), so the trusted side keeps what ran before a kill
or a limit, reads no more than it allows, and never reads a file the sandbox wrote; `{"done": true}` last, after
which it reads nothing more and kills the sandbox. This process is not dumpable: the kernel (the learner's code)
can neither open its pipe to the grader nor read its key, and a line it could write otherwise is not signed.
A cell that raises, hangs past its timeout, or kills its kernel gets an error output that says so; execution goes
on with a fresh kernel where it can. Each cell keeps at most MAX_OUTPUTS outputs, MAX_CHARS characters of text and
MAX_BYTES of everything its outputs hold (`cap_outputs`). Nothing here decides a grade: the trusted side checks
every line again.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import runpy
import signal
import sys
import time

import nbformat
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync

CUT = "\n[output cut: too long]\n"
UNFINISHED = "this cell did not finish within {} s"     # the error output of a cell stopped at the cell limit
DONE = {"done": True}                                      # the last line of a run
# What the fork server imports for this process and its first kernel (autograder.sandbox.box.Sandbox.start).
PRELOAD = ("torch", "ipykernel.kernelapp", "nbclient", "nbformat")


def size(out) -> int:
    """The characters an output holds, every field included."""
    return len(json.dumps(out, separators=(",", ":"), default=str))


def _text(value) -> str:
    return "".join(map(str, value)) if isinstance(value, list) else str(value)


def _text_of(out) -> str | None:
    """The text an output shows (stream, error, text/plain); None for any other output."""
    if out.get("output_type") == "stream":
        return _text(out.get("text", ""))
    if out.get("output_type") == "error":
        return "\n".join([f"{out.get('ename', '')}: {out.get('evalue', '')}", *map(str, out.get("traceback") or [])])
    plain = out.get("data", {}).get("text/plain")
    return None if plain is None else _text(plain)


def _note(text: str):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def cap_outputs(outputs: list, max_chars: int, max_bytes: int, max_outputs: int, total: int | None = None) -> list:
    """At most `max_outputs` outputs, their text at most `max_chars` characters together and everything they hold
    at most `max_bytes`: a text past its budget is cut and ends the cell's outputs, any other output too large is
    replaced by a note.  `total`: how many outputs there were before an earlier cut (default: `len(outputs)`)."""
    total = max(total or 0, len(outputs))
    kept: list
    kept, chars, held = [], 0, 0
    for i, out in enumerate(outputs):
        if len(kept) >= max_outputs or held >= max_bytes:
            kept.append(_note(f"[{total - i} more outputs cut]\n"))
            return kept
        n, text = size(out), _text_of(out)
        if text is not None and chars + len(text) > max_chars or held + n > max_bytes:
            if text is None:
                kinds = ", ".join(out.get("data", {})) or str(out.get("output_type"))
                kept.append(_note(f"[an output of {n} characters ({kinds[:200]}) cut: too large]\n"))
                held += size(kept[-1])
                continue
            kept.append(_note(text[:max(0, min(max_chars - chars, max_bytes - held))] + CUT))
            if total > i + 1:
                kept.append(_note(f"[{total - i - 1} more outputs cut]\n"))
            return kept
        kept.append(out)
        chars, held = chars + len(text or ""), held + n
    if total > len(outputs):
        kept.append(_note(f"[{total - len(outputs)} more outputs cut]\n"))
    return kept


def error_output(name: str, message: str):
    return nbformat.v4.new_output("error", ename=name, evalue=message, traceback=[f"{name}: {message}"])


class Client(NotebookClient):
    """Drops outputs past the caps while the cell runs, so a cell printing gigabytes or displaying a million
    outputs cannot exhaust this process."""

    max_outputs = max_bytes = 0            # set by main() from the grader's settings (autograder.config)
    dropped: dict[int, int]                # outputs dropped per cell index, set by main()

    def output(self, outs, msg, display_id, cell_index):
        if len(outs) > self.max_outputs or sum(size(o) for o in outs[-self.max_outputs:]) > 2 * self.max_bytes:
            self.dropped[cell_index] = self.dropped.get(cell_index, 0) + 1
            return None
        return super().output(outs, msg, display_id, cell_index)


class Child:
    """The kernel forked by `fork_kernel`, seen by jupyter_client like the Popen it would have started."""

    def __init__(self, pid: int, pipe: int):
        self.pid, self.pipe = pid, pipe
        self.returncode: int | None = None
        self.stdin = self.stdout = self.stderr = None

    def launch(self, cmd: list[str], env: dict, cwd: str):
        os.write(self.pipe, json.dumps({"cmd": cmd, "env": env, "cwd": cwd}).encode())
        os.close(self.pipe)

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None):
        import subprocess

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("kernel", timeout)  # type: ignore[arg-type]  # set with the deadline
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, signum: int):
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)


def fork_kernel() -> Child:
    """The notebook's first kernel, forked now, before this process makes a thread or a socket: with torch and
    ipykernel already imported (by the fork server, autograder.sandbox.forkserver), it is ready in a fraction of a
    second instead of seconds. It waits for the command, environment and folder jupyter_client would have started it
    with, then runs that command's module as `python -m` would; a kernel started again after a crash is started as
    usual."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(r)
        return Child(pid, w)
    try:
        os.close(w)
        os.setsid()                        # as jupyter_client starts a kernel: interrupts go to its group
        data = b""
        while chunk := os.read(r, 1 << 16):
            data += chunk
        req = json.loads(data) if data else None
        if req is None:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):                  # not the grader's pipes (stderr, the sandbox's log, is kept)
            os.dup2(devnull, fd)
        for entry in os.listdir("/proc/self/fd"):
            if int(entry) > 2:
                with contextlib.suppress(OSError):
                    os.close(int(entry))
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = req["cmd"][2:]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    finally:
        os._exit(0)


def adopt(first: Child):
    """jupyter_client's first kernel launch takes `first` instead of starting a process."""
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    launch = LocalProvisioner.launch_kernel
    waiting = [first]

    async def launch_kernel(self, cmd: list[str], **kwargs):
        if not (waiting and cmd[1:3] == ["-m", "ipykernel_launcher"]):
            return await launch(self, cmd, **kwargs)
        child = waiting.pop()
        env = dict(kwargs.get("env") or os.environ, JPY_PARENT_PID=str(os.getpid()))
        child.launch(cmd, env, os.path.abspath(kwargs.get("cwd") or "."))
        self.process, self.pid, self.pgid = child, child.pid, child.pid
        self.cwd = kwargs.get("cwd") or os.getcwd()
        return self.connection_info

    LocalProvisioner.launch_kernel = launch_kernel  # type: ignore[method-assign]


def kernel(client: NotebookClient) -> tuple[AsyncKernelManager, AsyncKernelClient]:
    """The client's kernel manager and kernel client, once its kernel is started: nbclient's are asynchronous."""
    km, kc = client.km, client.kc
    assert isinstance(km, AsyncKernelManager) and isinstance(kc, AsyncKernelClient), (km, kc)
    return km, kc


def signed(key: bytes, msg: dict) -> str:
    """A line of the run's output: the message's JSON after its HMAC under the run's key (`sign` and check)."""
    text = json.dumps(msg)
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest() + " " + text


def not_dumpable():
    """No other process of the sandbox (the kernel: learner code, with this process's user) may open this one's
    files through /proc/<pid>/fd, read its memory or trace it."""
    import ctypes

    PR_SET_DUMPABLE = 4
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def main():
    adopt(fork_kernel())
    not_dumpable()                         # the kernel is forked above, before this process holds its key
    timeout, max_chars, max_bytes, max_outputs = (int(float(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3]),
                                                  int(sys.argv[4]))
    out = os.fdopen(os.dup(1), "w")        # private: the kernel (learner code) inherits /dev/null as stdout
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)

    key = b""                             # the grader's, for this run: it signs every line after the first

    def send(msg: dict):
        out.write((signed(key, msg) if key else json.dumps(msg)) + "\n")
        out.flush()

    client = Client(nbformat.v4.new_notebook(), timeout=timeout, startup_timeout=timeout, allow_errors=True,
                    interrupt_on_timeout=True, kernel_name="python3", record_timing=False,
                    resources={"metadata": {"path": "."}})
    client.max_bytes, client.max_outputs, client.dropped = max_bytes, max_outputs, {}
    with client.setup_kernel():            # returns once the kernel is ready
        # Made ready ahead of its learner: torch imported before any notebook is known (the course's setup
        # cells import it first anyway), then the notebook arrives on stdin.
        km, kc = kernel(client)
        run_sync(kc.execute_interactive)("import torch", silent=True, store_history=False, timeout=timeout)
        send({"ready": True})
        key = sys.stdin.readline().strip().encode()
        nb = client.nb = nbformat.reads(sys.stdin.read(), as_version=4)
        os.dup2(devnull, 0)                # nothing more comes in: the grader's pipe is closed here
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            ended, started = None, time.monotonic()
            try:
                client.execute_cell(cell, index)
                if time.monotonic() - started >= timeout:       # interrupted at the timeout
                    ended = error_output("TimeoutError", UNFINISHED.format(timeout))
            except CellTimeoutError:
                ended = error_output("TimeoutError", UNFINISHED.format(timeout))
            except DeadKernelError:
                ended = error_output("DeadKernelError", "this cell ended the Python process (sys.exit, os._exit, "
                                                        "or out of memory); the cells after it ran in a fresh one")
                run_sync(km.restart_kernel)(now=True)
                kc.stop_channels()
                client.kc = km.client()
                km, kc = kernel(client)
                kc.start_channels()
                run_sync(kc.wait_for_ready)(timeout=timeout)
            total = len(cell.outputs) + client.dropped.get(index, 0)
            outputs = cap_outputs(cell.outputs, max_chars, max_bytes, max_outputs, total)
            send({"index": index, "outputs": outputs + ([ended] if ended else [])})
        send(DONE)                         # the grader stops reading here, without waiting for the kernel to end


if __name__ == "__main__":
    main()
