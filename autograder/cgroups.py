"""A cgroup per sandbox: the kernel counts CPU time, memory and processes for everything inside.

The learner's code shares its process with the worker, so nothing the worker reports about itself
is believed.  A cgroup is measured from outside: its CPU time counts every process the sandbox
ever ran, reaped or killed; its memory counts every process and the sandbox's tmpfs folders; its
peak is reset by the trusted side only (the sandbox has no view of the cgroup files); and its
memory and process limits hold for the sandbox as a whole, root or not.

Two layouts are supported:
- cgroup v1 (separate `cpuacct`, `memory` and `pids` hierarchies, writable as root);
- cgroup v2 (one unified hierarchy) where the grader's own cgroup is delegated to it (for a
  non-root instructor, `systemd-run --user --scope -p Delegate=yes ...`).
`Cgroup.create` returns None, and `why_unavailable()` says why, where neither can be used.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
V1 = ("cpuacct", "memory", "pids")
PARENT = "grader-sandboxes"


def _own_paths() -> dict[str, str]:
    """controller -> this process's cgroup path in it ("" for the v2 hierarchy)."""
    paths = {}
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


_REASON: list[str] = []


def why_unavailable() -> str:
    """Why the last `Cgroup.create` returned None ("" when it did not)."""
    return _REASON[-1] if _REASON else ""


class Cgroup:
    """The cgroup(s) of one sandbox; `attach()` is called by the sandboxed process before it execs."""

    def __init__(self, dirs: dict[str, Path], v2: bool):
        self.dirs, self.v2 = dirs, v2

    # -- creation -------------------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, memory_limit: int, pids_max: int) -> "Cgroup | None":
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
        except OSError as e:
            cg.remove()
            _REASON.append(f"cannot set the sandbox's cgroup limits ({e.strerror or e})")
            return None
        return cg

    @classmethod
    def existing(cls, name: str) -> "Cgroup | None":
        """The cgroup `create(name)` made, where it still exists (None when it does not)."""
        own = _own_paths()
        if _is_v2_root():
            d = ROOT / own.get("", "/").lstrip("/") / PARENT / name
            return cls({c: d for c in ("cpuacct", "memory", "pids")}, v2=True) if d.is_dir() else None
        dirs = {c: ROOT / c / own[c].lstrip("/") / PARENT / name for c in V1 if c in own}
        return cls(dirs, v2=False) if len(dirs) == len(V1) and any(d.is_dir() for d in dirs.values()) else None

    @classmethod
    def _create_v1(cls, name: str) -> "Cgroup | None":
        own = _own_paths()
        dirs = {}
        for c in V1:
            base = ROOT / c
            if c not in own or not (base / "cgroup.procs").exists():
                _REASON.append(f"no cgroup v1 `{c}` hierarchy is mounted")
                return None
            dirs[c] = base / own[c].lstrip("/") / PARENT / name
        made = []
        try:
            for d in dirs.values():
                d.mkdir(parents=True)
                made.append(d)
        except OSError:
            for d in made:
                d.rmdir()
            raise
        return cls(dirs, v2=False)

    @classmethod
    def _create_v2(cls, name: str) -> "Cgroup | None":
        own = ROOT / _own_paths().get("", "/").lstrip("/")
        parent = own / PARENT
        parent.mkdir(exist_ok=True)
        # A v2 cgroup gives its children controllers only when it holds no process itself: the
        # grader's own cgroup does, so the sandboxes live one level down, in PARENT.
        have = set((parent / "cgroup.controllers").read_text().split())
        if not {"cpu", "memory", "pids"} <= have:
            (own / "cgroup.subtree_control").write_text("+cpu +memory +pids")
        (parent / "cgroup.subtree_control").write_text("+cpu +memory +pids")
        d = parent / name
        d.mkdir()
        return cls({c: d for c in ("cpuacct", "memory", "pids")}, v2=True)

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

    def memory_current(self) -> int:
        return int(self._read("memory", "memory.current" if self.v2 else "memory.usage_in_bytes"))

    def memory_peak(self) -> int:
        """Bytes: the most the sandbox held at once since the last `reset_memory_peak`."""
        return int(self._read("memory", "memory.peak" if self.v2 else "memory.max_usage_in_bytes"))

    def memory_held(self) -> int:
        """Bytes of anonymous and tmpfs memory the sandbox holds now (no file cache: the libraries' pages are
        charged to whichever sandbox read them first)."""
        stat = self._stat("memory", "memory.stat")
        return stat["anon" if self.v2 else "rss"] + stat["shmem"]

    def reset_memory_peak(self):
        self._write("memory", "memory.peak" if self.v2 else "memory.max_usage_in_bytes", "0")

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
