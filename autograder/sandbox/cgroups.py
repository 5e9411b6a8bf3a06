"""A cgroup per sandbox: the kernel counts CPU time, memory and processes for everything inside.

The learner's code shares its process with the worker, so nothing the worker reports about itself
is believed.  A cgroup is measured from outside: its CPU time counts every process the sandbox
ever ran, reaped or killed; its memory counts every process and the sandbox's tmpfs folders; its
peak is reset by the trusted side only (the sandbox has no view of the cgroup files); and its
memory and process limits hold for the sandbox as a whole, root or not.  Where the `cpu` controller
is given, the sandbox is also one CPU share, however many processes or sessions it makes: the
default weight (one entity among its siblings, where the kernel's autogroups would give each `setsid()`
a share of its own) and a quota of cores (`cpu.cfs_quota_us`, `cpu.max`); without it the sandbox is
made all the same and `cpu_note` says why.

Two layouts are supported:
- cgroup v1 (separate `cpuacct`, `memory`, `pids` and `cpu` hierarchies, or `cpu,cpuacct` together,
  writable as root);
- cgroup v2 (one unified hierarchy, as on current distributions): as root, under the top of the
  hierarchy; otherwise where the grader's own cgroup is delegated to it (for a non-root instructor,
  `systemd-run --user --scope -p Delegate=yes ...`).
`Cgroup.create` returns None, and `why_unavailable()` says why, where neither can be used.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
V1 = ("cpuacct", "memory", "pids")
V2_CONTROLLERS = ("memory", "pids")      # CPU time (cpu.stat) is counted in every v2 cgroup without a controller
CPU = "cpu"                              # the CPU share: wanted in both layouts, graded without where it is missing
PERIOD_US = 100_000                      # the quota's period (the kernel's default)
WEIGHT = {False: 1024, True: 100}        # v1 cpu.shares, v2 cpu.weight: the default, one equal share per sandbox
PARENT = "grader-sandboxes"


def _own_paths() -> dict[str, str]:
    """controller -> this process's cgroup path in it ("" for the v2 hierarchy)."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            paths[c] = path
    return paths


def _is_v2_root() -> bool:
    try:
        return (ROOT / "cgroup.controllers").exists()
    except OSError:
        return False


def v2_parents(root: Path = ROOT) -> list[Path]:
    """Where the sandboxes' cgroups may live in a v2 hierarchy mounted at `root`, in order of preference: as root,
    the top of the hierarchy (the only cgroup that can give its children controllers while it holds processes);
    then one level below the grader's own cgroup (a delegated one: it must hold no process but the grader's)."""
    own = root / _own_paths().get("", "/").lstrip("/")
    return list(dict.fromkeys(([root / PARENT] if os.geteuid() == 0 else []) + [own / PARENT]))


_REASON: list[str] = []


def why_unavailable() -> str:
    """Why the last `Cgroup.create` returned None ("" when it did not)."""
    return _REASON[-1] if _REASON else ""


class Cgroup:
    """The cgroup(s) of one sandbox; `attach()` is called by the sandboxed process before it execs."""

    def __init__(self, dirs: dict[str, Path], v2: bool, cpu_note: str = ""):
        self.dirs, self.v2 = dirs, v2
        self.cpu_note = cpu_note               # why the sandbox has no CPU share ("" when it has one)
        self._peak_fd: int | None = None       # v2: the memory.peak file whose reset this sandbox's readings use

    # -- creation -------------------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, memory_limit: int, pids_max: int, cpus: float = 0.0) -> Cgroup | None:
        """The cgroup of a sandbox, with its memory and process limits, and its CPU share where the controller is
        given: the default weight and, with `cpus`, a quota of that many cores (`share_cpu`)."""
        _REASON.clear()
        try:
            cg = cls._create_v2(name) if _is_v2_root() else cls._create_v1(name)
        except OSError as e:
            _REASON.append(f"cannot create a cgroup ({e.strerror or e}): run as root, or in a delegated cgroup")
            return None
        if cg is None:
            return None
        try:
            cg._write("memory", "memory.max" if cg.v2 else "memory.limit_in_bytes", str(memory_limit))
            cg._write("pids", "pids.max", str(pids_max))
            if cg.v2 and cg._path("memory", "memory.swap.max").exists():
                cg._write("memory", "memory.swap.max", "0")      # the limit is not stretched by swapping out
        except OSError as e:
            cg.remove()
            _REASON.append(f"cannot set the sandbox's cgroup limits ({e.strerror or e})")
            return None
        cg.share_cpu(cpus)
        return cg

    @classmethod
    def existing(cls, name: str) -> Cgroup | None:
        """The cgroup `create(name)` made, where it still exists (None when it does not)."""
        own = _own_paths()
        if _is_v2_root():
            for parent in v2_parents():
                d = parent / name
                if d.is_dir():
                    cpu = [CPU] if (d / "cpu.max").exists() else []
                    return cls({c: d for c in ("cpuacct", "memory", "pids", *cpu)}, v2=True)
            return None
        dirs = {c: _v1_dir(c, own, name) for c in V1 if c in own}
        if len(dirs) != len(V1) or not any(d.is_dir() for d in dirs.values()):
            return None
        if CPU in own and _v1_dir(CPU, own, name).is_dir():
            dirs[CPU] = _v1_dir(CPU, own, name)
        return cls(dirs, v2=False)

    @classmethod
    def _create_v1(cls, name: str) -> Cgroup | None:
        own = _own_paths()
        dirs = {}
        for c in V1:
            if c not in own or not (ROOT / c / "cgroup.procs").exists():
                _REASON.append(f"no cgroup v1 `{c}` hierarchy is mounted")
                return None
            dirs[c] = _v1_dir(c, own, name)
        cpu_note = ""
        if CPU in own and (ROOT / CPU / "cpu.shares").exists():
            dirs[CPU] = _v1_dir(CPU, own, name)       # the same folder as cpuacct's where they are mounted together
        else:
            cpu_note = "no cgroup v1 `cpu` hierarchy is mounted"
        made: list[Path] = []
        try:
            for d in dict.fromkeys(dirs.values()):
                d.mkdir(parents=True)
                made.append(d)
        except OSError:
            for d in made:
                d.rmdir()
            raise
        return cls(dirs, v2=False, cpu_note=cpu_note)

    @classmethod
    def _create_v2(cls, name: str, root: Path = ROOT) -> Cgroup:
        """A cgroup with the memory and pids controllers in the v2 hierarchy at `root` (see `v2_parents`)."""
        errors = []
        for parent in v2_parents(root):
            try:
                _give_controllers(parent)
            except OSError as e:
                errors.append(f"{parent}: {e.strerror or e}")
                continue
            cpu_note = _give_cpu(parent)
            d = parent / name
            d.mkdir()
            return cls({c: d for c in ("cpuacct", "memory", "pids", *([] if cpu_note else [CPU]))}, v2=True,
                       cpu_note=cpu_note)
        raise OSError(f"no cgroup v2 folder gives the {' and '.join(V2_CONTROLLERS)} controllers ({'; '.join(errors)})")

    def share_cpu(self, cpus: float = 0.0):
        """Make the sandbox one CPU share: the default weight, which the kernel gives the cgroup as one entity among
        its siblings whatever it holds (so its processes' own sessions, the autogroups, count no more), and with
        `cpus` a quota of that many cores per period, all processes together. Where the `cpu` controller is not
        given, or refuses the values, the sandbox goes on without them and `cpu_note` says why."""
        if not self.has_cpu_share:
            self.cpu_note = self.cpu_note or "the cgroup `cpu` controller is not given to the sandboxes"
            return
        quota = max(1000, round(cpus * PERIOD_US)) if cpus > 0 else -1
        try:
            if self.v2:
                self._write(CPU, "cpu.weight", str(WEIGHT[True]))
                self._write(CPU, "cpu.max", f"{quota if quota > 0 else 'max'} {PERIOD_US}")
            else:
                self._write(CPU, "cpu.shares", str(WEIGHT[False]))
                self._write(CPU, "cpu.cfs_period_us", str(PERIOD_US))
                self._write(CPU, "cpu.cfs_quota_us", str(quota))
        except OSError as e:          # (its folder stays in `dirs`, to be removed with the others)
            self.cpu_note = f"cannot set the sandbox's CPU share ({e.strerror or e})"

    @property
    def has_cpu_share(self) -> bool:
        return CPU in self.dirs and not self.cpu_note

    def cpu_share(self) -> tuple[int, float | None] | None:
        """(weight, quota in cores or None for no quota), read back from the cgroup; None without a CPU share."""
        if not self.has_cpu_share:
            return None
        if self.v2:
            quota, period = self._read(CPU, "cpu.max").split()
            weight = int(self._read(CPU, "cpu.weight"))
        else:
            quota, period = self._read(CPU, "cpu.cfs_quota_us"), self._read(CPU, "cpu.cfs_period_us")
            weight = int(self._read(CPU, "cpu.shares"))
        return weight, (None if quota.strip() in ("max", "-1") else int(quota) / int(period))

    def throttled(self) -> int:
        """How many periods the quota held the sandbox back (0 without a CPU share)."""
        return self._stat(CPU, "cpu.stat").get("nr_throttled", 0) if self.has_cpu_share else 0

    # -- use ----------------------------------------------------------------------------------------
    def _path(self, controller: str, file: str) -> Path:
        return self.dirs[controller] / file

    def _read(self, controller: str, file: str) -> str:
        return self._path(controller, file).read_text()

    def _stat(self, controller: str, file: str) -> dict[str, int]:
        """A `key value` file of the cgroup (cpu.stat, memory.stat)."""
        return {k: int(v) for k, v in (line.split() for line in self._read(controller, file).splitlines())}

    def _write(self, controller: str, file: str, value: str):
        self._path(controller, file).write_text(value)

    def attach(self):
        """Move the calling process into the cgroup (every process it starts stays there)."""
        pid = str(os.getpid())
        for path in self.procs_files():
            Path(path).write_text(pid)

    def procs_files(self) -> list[str]:
        """The `cgroup.procs` file of each hierarchy: writing a pid there moves that process into the cgroup."""
        return [str(d / "cgroup.procs") for d in dict.fromkeys(self.dirs.values())]

    def cpu_seconds(self) -> float:
        """CPU time of every process the sandbox ever ran (kernel accounting, nanosecond resolution)."""
        if self.v2:
            return self._stat("cpuacct", "cpu.stat")["usage_usec"] / 1e6
        return int(self._read("cpuacct", "cpuacct.usage")) / 1e9

    def cpu_split(self) -> tuple[float, float]:
        """(user, system) CPU seconds of every process the sandbox ever ran: where its CPU time went."""
        if self.v2:
            stat = self._stat("cpuacct", "cpu.stat")
            return stat["user_usec"] / 1e6, stat["system_usec"] / 1e6
        user, system = (int(self._read("cpuacct", f"cpuacct.usage_{k}")) / 1e9 for k in ("user", "sys"))
        return user, system

    def memory_current(self) -> int:
        return int(self._read("memory", "memory.current" if self.v2 else "memory.usage_in_bytes"))

    def memory_peak(self) -> int:
        """Bytes: the most the sandbox held at once since the last `reset_memory_peak`."""
        if self._peak_fd is not None:
            return int(os.pread(self._peak_fd, 64, 0))
        return int(self._read("memory", "memory.peak" if self.v2 else "memory.max_usage_in_bytes"))

    def memory_held(self) -> int:
        """Bytes of anonymous and tmpfs memory the sandbox holds now (no file cache: the libraries' pages are
        charged to whichever sandbox read them first)."""
        stat = self._stat("memory", "memory.stat")
        return stat["anon" if self.v2 else "rss"] + stat["shmem"]

    def reset_memory_peak(self):
        """Start a new peak. On v2 the reset holds for the open file it was written to (Linux 6.12 and later), which
        is kept for `memory_peak`; an older kernel cannot reset it, and says so (OSError)."""
        if not self.v2:
            self._write("memory", "memory.max_usage_in_bytes", "0")
            return
        self._close_peak()
        fd = os.open(self._path("memory", "memory.peak"), os.O_RDWR)
        try:
            os.write(fd, b"reset")
        except OSError as e:
            os.close(fd)
            raise OSError(e.errno,
                          "this kernel cannot reset a cgroup v2 memory peak (it needs Linux 6.12 or later)") from e
        self._peak_fd = fd

    def _close_peak(self):
        if self._peak_fd is not None:
            os.close(self._peak_fd)
            self._peak_fd = None

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in self._read("pids", "cgroup.procs").split()]
        except OSError:
            return []

    def kill(self, timeout: float = 10.0):
        """SIGKILL every process in the cgroup, whatever session or namespace it moved to."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids or time.monotonic() > deadline:
                return
            if self.v2 and self._path("pids", "cgroup.kill").exists():
                self._write("pids", "cgroup.kill", "1")
            else:
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            time.sleep(0.01)

    def remove(self):
        self._close_peak()
        self.kill()
        for d in dict.fromkeys(self.dirs.values()):
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:      # a killed process not yet gone
                    time.sleep(0.01)


def _v1_dir(controller: str, own: dict[str, str], name: str) -> Path:
    """The v1 folder of sandbox `name` in `controller`'s hierarchy (its mount's real path: `cpu` and `cpuacct`
    mounted together give one folder)."""
    return (ROOT / controller).resolve() / own[controller].lstrip("/") / PARENT / name


def _give_cpu(parent: Path) -> str:
    """Give `parent`'s children the v2 `cpu` controller where the hierarchy delegates it; why not ("" when given)."""
    try:
        if CPU not in (parent / "cgroup.controllers").read_text().split():
            if CPU not in (parent.parent / "cgroup.controllers").read_text().split():
                return f"the cgroup v2 `cpu` controller is not given to {parent.parent}"
            (parent.parent / "cgroup.subtree_control").write_text(f"+{CPU}")
        if CPU not in (parent / "cgroup.subtree_control").read_text().split():
            (parent / "cgroup.subtree_control").write_text(f"+{CPU}")
    except OSError as e:
        return f"cannot give the sandboxes the cgroup v2 `cpu` controller ({e.strerror or e})"
    return ""


def _give_controllers(parent: Path):
    """Make `parent` (a folder of sandboxes' cgroups) and give it, and through it its children, the v2 controllers."""
    parent.mkdir(exist_ok=True)
    need = set(V2_CONTROLLERS)
    if not need <= set((parent / "cgroup.controllers").read_text().split()):
        (parent.parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in V2_CONTROLLERS))
    if not need <= set((parent / "cgroup.subtree_control").read_text().split()):
        (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in V2_CONTROLLERS))
