"""Sandboxed workers forked from a warm interpreter, each in a sandbox of its own.

The server, started once per batch from a fresh interpreter with the sandbox's environment (nothing of the course),
imports torch and then only forks; run as `python forkserver.py SOCKET MODULE...` in the socket's folder, it ends
when its stdin closes. For each request (a bubblewrap placeholder's pid, the sandbox's cgroup and limits, the
worker's pipes) a request process checks that the request comes from the host and the placeholder has namespaces
of its own in that cgroup, joins the cgroup, takes the limits, enters the placeholder's namespaces and root, becomes
user 1000 without groups or capabilities and with no_new_privs, and forks the worker, which checks its credentials
again before it runs the sandbox's own copy of worker.py. docs/how-it-works.md ("Workers forked, not started") says
more.
"""
from __future__ import annotations

import ctypes
import gc
import json
import os
import selectors
import signal
import socket
import struct
import sys

INSIDE_CODE, INSIDE_HOME, UID = "/opt/grader", "/sandbox", 1000
NAMESPACES = ("net", "ipc", "uts", "cgroup", "pid", "mnt")        # joined in this order, the user namespace last
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAPS_ZERO = {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}
MAX_REQUEST = 1 << 16

_libc = ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args):
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _namespaces(pid: int | str) -> dict[str, str]:
    return {ns: os.readlink(f"/proc/{pid}/ns/{ns}") for ns in (*NAMESPACES, "user")}


def _drop_capabilities():
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        _call("prctl", PR_CAPBSET_DROP, cap, 0, 0, 0)
    _call("prctl", PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("Ii", 0x20080522, 0)            # _LINUX_CAPABILITY_VERSION_3, this process
    data = ctypes.create_string_buffer(24)                # two all-zero {effective, permitted, inheritable}
    _call("capset", ctypes.c_char_p(header), data)
    _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def credentials_problem() -> str:
    """What is wrong with this process's credentials for a worker ("" when nothing): seen from inside."""
    with open("/proc/self/status") as f:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    wrong = [k for k in CAPS_ZERO if int(status.get(k, "1"), 16) != 0]
    if status.get("NoNewPrivs") != "1":
        wrong.append("NoNewPrivs")
    if status.get("Uid", "").split() != [str(UID)] * 4 or status.get("Gid", "").split() != [str(UID)] * 4:
        wrong.append("Uid/Gid")
    if status.get("Groups", "").strip():
        wrong.append("Groups")
    if not os.path.isfile(os.path.join(INSIDE_CODE, "worker.py")) or os.getcwd() != INSIDE_HOME:
        wrong.append("root")
    return ", ".join(wrong)


def _check(req: dict, conn: socket.socket) -> int:
    """The placeholder's pid, once the requester and the placeholder are what a request must come from and go to."""
    own = _namespaces("self")
    peer, _, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    peer_ns = _namespaces(peer)
    if any(peer_ns[ns] != own[ns] for ns in ("user", "pid", "mnt", "net")):
        raise PermissionError("the request does not come from a process of the host")
    target = int(req["target"])
    theirs = _namespaces(target)
    if any(theirs[ns] == own[ns] for ns in (*NAMESPACES, "user")):
        raise PermissionError("the placeholder does not have namespaces of its own")
    procs = [str(p) for p in req["cgroup"]]
    if not procs or any(not p.startswith("/sys/fs/cgroup/") or not p.endswith("/cgroup.procs") or ".." in p
                        for p in procs):
        raise PermissionError("not a sandbox's cgroup")
    for path in procs:
        with open(path) as f:
            if str(target) not in f.read().split():
                raise PermissionError("the placeholder is not in the sandbox's cgroup")
    return target


def _enter(req: dict, target: int):
    """Steps 2 and 3: become a process of the sandbox, with nothing of root left."""
    import resource

    os.setsid()
    for path in req["cgroup"]:
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    for res, value in req["rlimits"]:
        try:
            resource.setrlimit(res, (value, value))
        except (ValueError, OSError):
            pass
    fds = {ns: os.open(f"/proc/{target}/ns/{ns}", os.O_RDONLY) for ns in (*NAMESPACES, "user")}
    root = os.open(f"/proc/{target}/root", os.O_RDONLY | os.O_DIRECTORY)
    os.setgroups([])
    for ns in NAMESPACES:
        _call("setns", fds[ns], 0)
    os.fchdir(root)
    os.chroot(".")
    os.chdir(INSIDE_HOME)
    _call("setns", fds["user"], 0)
    os.setresgid(UID, UID, UID)
    os.setresuid(UID, UID, UID)
    _drop_capabilities()
    for fd in (*fds.values(), root):
        os.close(fd)


def _worker(req: dict, stdio: list[int]):
    """Step 4, in the worker: worker.py, run as a fresh interpreter would run it."""
    os.setsid()
    _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    for i, fd in enumerate(stdio):
        os.dup2(fd, i)
    for entry in os.listdir("/proc/self/fd"):    # the sandbox's /proc: this process is in its PID namespace
        if int(entry) > 2:
            try:
                os.close(int(entry))
            except OSError:
                pass
    problem = credentials_problem()
    if problem:
        os.write(2, f"forkserver: the worker's credentials are wrong ({problem}); it does not start\n".encode())
        os._exit(71)
    os.environ["PWD"] = INSIDE_HOME                 # as bubblewrap's --chdir sets it
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    sys.argv = [str(a) for a in req["argv"]]
    sys.path[0] = INSIDE_CODE
    sys.path_importer_cache.clear()            # what the host's folders held is not what the sandbox's hold
    import importlib
    import runpy

    importlib.invalidate_caches()

    code = 0
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported as an interpreter would
        import traceback

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _serve(conn: socket.socket):
    """The request process (steps 1 to 4)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    msg, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 4)
    if len(fds) != 4:
        os._exit(2)
    *stdio, status = fds
    try:
        req = json.loads(msg)
        target = _check(req, conn)
        conn.close()
        holder = os.pidfd_open(target)
        _enter(req, target)
        pid = os.fork()
    except Exception as e:  # noqa: BLE001 - said to the grader, which fails the worker's start
        os.write(status, f"error {type(e).__name__}: {e}\n".encode())
        os._exit(1)
    if pid == 0:
        os.close(status)
        _worker(req, stdio)
    for fd in stdio:
        os.close(fd)
    os.write(status, f"pid {pid}\n".encode())
    _, st = os.waitpid(pid, 0)
    try:                   # the placeholder ends, and with it the PID namespace and all the worker left running
        signal.pidfd_send_signal(holder, signal.SIGKILL)
    except OSError:
        pass
    os.write(status, f"exit {os.waitstatus_to_exitcode(st)}\n".encode())
    os._exit(0)


def main():
    path, modules = os.path.basename(sys.argv[1]), sys.argv[2:]      # in its folder, the working directory
    import torch

    torch.set_num_threads(int(os.environ.get("GRADER_THREADS", "1")))
    for name in modules:
        __import__(name)
    gc.collect()
    gc.freeze()           # a collection in a worker would touch, and copy, every page of these objects
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    listener.bind(path)
    os.umask(old)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)          # request processes are reaped by the kernel
    os.write(1, b"ready\n")
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(0, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj == 0:
                if not os.read(0, 1 << 12):                # the grader that started it is gone
                    os.unlink(path)
                    os._exit(0)
                continue
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            if os.fork() == 0:
                try:
                    sel.close()
                    listener.close()
                    for fd in (0, 1):
                        os.close(fd)
                    _serve(conn)
                finally:
                    os._exit(1)
            conn.close()


# -- the grader's side -------------------------------------------------------------------------------------------
class Forked:
    """A worker forked by the server, seen by the grader that asked for it like a subprocess.Popen: `pid` (on the
    host), `stdin`, `stdout`, `poll`, `wait`, `kill`.  Its exit status comes on the status pipe; when that closes
    without one, the request process was killed with the sandbox, and so was the worker."""

    args: list
    returncode: int | None
    stderr: object                                  # None, or what the sandbox reads its stderr from
    _pidfd: int | None

    def __init__(self, pid: int, stdin, stdout, status: int):
        self.pid, self.stdin, self.stdout, self.stderr = pid, stdin, stdout, None
        self.args, self.returncode, self._status, self._buf = [], None, status, b""
        try:
            self._pidfd = os.pidfd_open(pid)     # signals reach this process, never a later one with its pid
        except ProcessLookupError:
            self._pidfd = None

    def _read(self, timeout: float):
        import select

        if self.returncode is not None or not select.select([self._status], [], [], max(0.0, timeout))[0]:
            return
        chunk = os.read(self._status, 1 << 12)
        self._buf += chunk
        for line in self._buf.decode(errors="replace").splitlines():
            if line.startswith("exit "):
                self.returncode = int(line.split()[1])
        if not chunk and self.returncode is None:
            self.returncode = -signal.SIGKILL
        if self.returncode is not None:
            os.close(self._status)
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None

    def poll(self):
        self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None):
        import subprocess
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]  # set with the deadline
            self._read(min(left, 1.0))
        return self.returncode

    def kill(self):
        if self.returncode is None and self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass


def first_line(fd: int, timeout: float) -> str:
    """The first line read from `fd` within `timeout` ("" when none came), read a byte at a time so that nothing
    after it is taken from the pipe (a worker's exit status may follow its pid at once)."""
    import select
    import time

    data, deadline = b"", time.monotonic() + timeout
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        byte = os.read(fd, 1)
        if not byte:
            break
        data += byte
    return data.rstrip(b"\n").decode(errors="replace")


def _connect(conn: socket.socket, path: str):
    """Connect to the socket at `path`, through a descriptor of its folder where the path is too long for a Unix
    socket's address (108 bytes: a grader's temporary folder can be deep)."""
    if len(path.encode()) < 100:
        return conn.connect(path)
    folder = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        conn.connect(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
    finally:
        os.close(folder)


class ForkServer:
    """A fork server started by this process (`python forkserver.py`), with the sandbox's environment `env`."""

    def __init__(self, python: str, env: dict, modules: tuple, folder, timeout: float = 120.0):
        import subprocess
        import uuid

        self.path = str(folder / f"forkserver-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock")
        self.proc = subprocess.Popen([python, os.path.abspath(__file__), self.path, *modules], env=env, cwd=folder,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        assert self.proc.stdout is not None             # a pipe
        if first_line(self.proc.stdout.fileno(), timeout) != "ready":
            self.close()
            raise OSError("the fork server did not start (its stderr is in the grading log)")

    def fork(self, target: int, cgroup: list[str], rlimits: list, argv: list[str], stderr: int,
             timeout: float = 30.0) -> Forked:
        """A worker in the sandbox whose placeholder is `target`, running `argv`, its stderr going to `stderr`."""
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        status_r, status_w = os.pipe()
        ours, theirs = (stdin_w, stdout_r, status_r), (stdin_r, stdout_w, status_w)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                _connect(conn, self.path)
                req = {"target": target, "cgroup": cgroup, "rlimits": rlimits, "argv": argv}
                socket.send_fds(conn, [json.dumps(req).encode()], [stdin_r, stdout_w, stderr, status_w])
        except OSError:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        reply = first_line(status_r, timeout)
        if not reply.startswith("pid "):
            for fd in (stdin_w, stdout_r, status_r):
                os.close(fd)
            raise OSError(f"the fork server could not start a worker: {reply or 'no answer'}")
        return Forked(int(reply.split()[1]), os.fdopen(stdin_w, "wb"), os.fdopen(stdout_r, "rb"), status_r)

    def close(self):
        try:
            assert self.proc.stdin is not None          # a pipe
            self.proc.stdin.close()
            self.proc.wait(10)
        except Exception:  # noqa: BLE001 - it is killed instead
            self.proc.kill()


if __name__ == "__main__":
    main()
