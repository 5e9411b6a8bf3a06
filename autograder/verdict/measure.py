"""What the grader reads of a learner's worker from outside it, never from the worker itself: the CPU time and the
memory of its sandbox, from the sandbox's cgroup (v2 or v1: autograder.sandbox.cgroups), polled during a measured
call; on a GPU, the driver's count of what the sandbox's processes hold (autograder.sandbox.gpu). Without a cgroup,
the fallbacks (the process tree's CPU time, the worker's /proc status) are readings of processes the learner
controls, and the grading's notes say so (autograder.verdict.context).
"""
from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from autograder import config
from autograder.sandbox import gpu
from autograder.sandbox.box import Sandbox, kill_tree
from autograder.sandbox.forkserver import Forked
from autograder.verdict import context
from autograder.verdict.record import GraderFault


class Worker(Protocol):
    """What the readers need of a learner's worker (autograder.verdict.learner.Learner, which calls them): its
    sandbox and process once started, what it held before any learner code ran, and its requests."""

    sandbox: Sandbox | None
    proc: subprocess.Popen | Forked | None
    held_at_start: int
    gpu_at_start: int | None
    last_poll: dict | None
    grading: context.Context        # the grading it serves: where what could not be measured is noted

    def start(self): ...

    def request(self, req: dict, timeout: float | None = None, what: str = "", remember: bool = True): ...


# -- CPU time --------------------------------------------------------------------------------------------------------
def cpu_seconds(proxy: Worker) -> float:
    """CPU time used so far by every process of the worker's sandbox, from the kernel's cgroup accounting (processes
    that ended or were killed included)."""
    if proxy.proc is None:
        proxy.start()
    assert proxy.proc is not None and proxy.sandbox is not None           # started
    cpu = proxy.sandbox.cpu_seconds()
    if cpu is not None:
        return cpu
    proxy.grading.notes.add("speed measured on the worker's process tree (no cgroup): a learner's code can hide CPU "
                            "time in processes that end")
    return _tree_cpu_seconds(proxy.proc.pid)


def sandbox_cpu_seconds(sandbox, proc) -> float:
    """CPU seconds of a worker's sandbox (its cgroup's count), else of its process tree as it is now, noting nothing:
    for limits, where `cpu_seconds` is for measures."""
    cpu = sandbox.cpu_seconds() if sandbox is not None else None
    return cpu if cpu is not None else _tree_cpu_seconds(proc.pid)


def _tree_cpu_seconds(pid: int) -> float:
    """CPU time of a live process tree (fallback without cgroups: ended children may be missing)."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


class _Polling:
    """`_poll` run in a daemon thread from `_begin()` until `_end()`, which it checks with `self.stop` (the pollers
    below)."""

    def _poll(self):
        raise NotImplementedError

    def _begin(self):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _end(self):
        self.stop.set()
        self.thread.join()


class CpuLimit(_Polling):
    """Stops a worker's request once its sandbox has used `seconds` of CPU since the limit began (the kernel's count,
    polled from here every `interval`): work the grader does on the learner's behalf (compiling their kernel) is
    charged in the CPU it takes, not in the wall time a loaded machine stretches it to. `hit` says it stopped it."""

    def __init__(self, proxy: Worker, seconds: float, interval: float = 0.1):
        self.proxy, self.seconds, self.interval = proxy, seconds, interval
        self.hit = False

    def _used(self) -> float:
        """CPU seconds of the worker's sandbox, read from the sandbox and process taken at the start (the worker
        object may be reset meanwhile by the thread that waits for it)."""
        return sandbox_cpu_seconds(self.sandbox, self.proc)

    def _poll(self):
        while not self.stop.wait(self.interval):
            with contextlib.suppress(OSError, ValueError, KeyError):
                if self._used() - self.base > self.seconds:
                    self.hit = True
                    kill_tree(self.proc)
                    return

    def __enter__(self):
        self.base = cpu_seconds(self.proxy)          # starts the worker if needed, notes a missing cgroup
        assert self.proxy.proc is not None           # started
        self.sandbox, self.proc = self.proxy.sandbox, self.proxy.proc
        self._begin()
        return self

    def __exit__(self, *exc):
        self._end()


# -- memory ----------------------------------------------------------------------------------------------------------
def reset_peak(proxy: Worker):
    """Start a new peak-memory measurement of the worker's sandbox."""
    if proxy.proc is None:
        proxy.start()
    assert proxy.proc is not None and proxy.sandbox is not None           # started
    try:
        reset = proxy.sandbox.reset_memory_peak()
    except OSError as e:
        raise GraderFault(f"the sandbox's peak memory could not be reset: {e.strerror or e}") from None
    if not reset:
        proxy.grading.notes.add("memory measured as the worker's VmHWM (no cgroup): a learner's code can reset it")
        with open(f"/proc/{_worker_pid(proxy.proc.pid)}/clear_refs", "w") as f:
            f.write("5")


def held(proxy: Worker) -> int:
    """Bytes of anonymous and tmpfs memory the worker's sandbox holds now."""
    assert proxy.sandbox is not None                                       # a worker was started
    now = proxy.sandbox.memory_held()
    if now is not None:
        return now
    fields = _proc_status(proxy)
    return sum(fields.get(k, 0) for k in ("RssAnon", "RssShmem"))


def held_since_start(proxy: Worker) -> int:
    """Bytes of memory the worker's sandbox holds now beyond what it held before any learner code ran: what the
    learner's cells and calls kept (a buffer made ahead of a measured call is not free)."""
    if proxy.proc is None:
        proxy.start()
    return max(0, held(proxy) - proxy.held_at_start)


def now_and_peak(proxy: Worker) -> tuple[int, int]:
    """(bytes now, peak bytes since the last reset) of the worker's sandbox."""
    assert proxy.sandbox is not None                                       # a worker was started
    reading = proxy.sandbox.memory()
    if reading is not None:
        return reading
    fields = _proc_status(proxy)
    return fields["VmRSS"], fields["VmHWM"]


def _proc_status(proxy: Worker) -> dict[str, int]:
    """The worker process's memory fields of /proc/<pid>/status, in bytes (the fallback without a cgroup)."""
    assert proxy.proc is not None                                          # a worker was started
    with open(f"/proc/{_worker_pid(proxy.proc.pid)}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return {k: int(v.split()[0]) * 1024 for k, v in fields.items() if v.strip().endswith(" kB")}


def _worker_pid(root_pid: int) -> int:
    import psutil

    root = psutil.Process(root_pid)
    for p in [root, *root.children(recursive=True)]:
        if any(arg.endswith("worker.py") for arg in p.cmdline()[1:2]):
            return p.pid
    raise GraderFault("the grader could not find the worker's process")


class HeldPoller(_Polling):
    """Polls the anonymous and tmpfs memory a sandbox holds (its cgroup's memory.stat) during a measured call, every
    millisecond, from outside it. A cgroup's peak counts page cache too, which the sandbox's own code can drop (a
    charged file's pages, given back with posix_fadvise) to make room for what the call builds; what the call holds
    of its own cannot be dropped that way, and a score matrix lives far longer than a poll."""

    def __init__(self, read: Callable[[], int], interval: float = 0.001):
        self.read, self.interval = read, interval
        self.base = self.peak = 0

    def _poll(self):
        while not self.stop.is_set():
            with contextlib.suppress(OSError, ValueError, KeyError):
                self.peak = max(self.peak, self.read())
            time.sleep(self.interval)

    def __enter__(self):
        self.base = self.peak = self.read()
        self._begin()
        return self

    def __exit__(self, *exc):
        self._end()
        with contextlib.suppress(OSError, ValueError, KeyError):
            self.peak = max(self.peak, self.read())

    def rise(self) -> int:
        return max(0, self.peak - self.base)


def held_poller(proxy: Worker) -> HeldPoller:
    """A poll, from here, of the anonymous and tmpfs memory the worker's sandbox holds (see `HeldPoller`)."""
    return HeldPoller(lambda: held(proxy))


# -- GPU memory ------------------------------------------------------------------------------------------------------
def driver(grading: context.Context) -> gpu.Driver | None:
    """The GPU driver's reading in this process, where the grading reads it (autograder.verdict.context)."""
    return gpu.driver(config.current().device) if grading.driver_readings else None


def gpu_memory(pids, grading: context.Context) -> int | None:
    """Bytes of GPU memory these processes hold now, by the driver's count (None without a reading)."""
    return gpu.memory_of(pids, config.current().device) if grading.driver_readings else None


class DriverPoller:
    """Polls the GPU driver for the memory that the sandbox's processes hold, from outside them, as fast as the driver
    answers (tens of thousands of times a second): an allocation has to outlive a poll to be seen."""

    def __init__(self, pids: Callable[[], list[int]], grading: context.Context, refresh: float = 0.005):
        self.pids, self.refresh, self.grading = pids, refresh, grading
        self.base = self.peak = self.polls = 0
        self.failed = ""
        self.stop = threading.Event()
        self.driver = driver(grading)

    def used(self, mine: set) -> int:
        assert self.driver is not None                                     # polled only with a driver
        return self.driver.used(mine)

    def _poll(self):
        mine, fresh = set(self.pids()), time.monotonic()
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, self.used(mine))
            except Exception as e:  # noqa: BLE001 - the driver stopped answering: this measurement has no reading
                self.failed = f"{type(e).__name__}: {e}"
                return
            self.polls += 1
            if time.monotonic() - fresh > self.refresh:       # a process the sandbox started meanwhile counts too
                mine, fresh = set(self.pids()), time.monotonic()

    def __enter__(self):
        self.seconds = time.monotonic()
        if self.driver:
            try:
                self.base = self.peak = self.used(set(self.pids()))
            except Exception as e:  # noqa: BLE001
                self.driver, self.failed = None, f"{type(e).__name__}: {e}"
                return self
            self.thread = threading.Thread(target=self._poll, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.driver:
            self.stop.set()
            self.thread.join()
            if not self.failed:
                with contextlib.suppress(Exception):
                    self.peak = max(self.peak, self.used(set(self.pids())))
        self.seconds = time.monotonic() - self.seconds

    @property
    def reading(self) -> bool:
        """Whether the driver was read through the whole call; the grading's notes say so where it was not."""
        if self.driver is None or self.failed:
            why = f": {self.failed[:200]}" if self.failed else ""
            self.grading.note("GPU memory read from the caching allocator only (the driver's per-process reading, "
                              f"NVML, was not available{why}): learner code can reset it")
            return False
        return True

    def rise(self) -> int:
        return max(0, self.peak - self.base)


def gpu_peak(proxy: Worker, request: Callable[[], Any]) -> tuple[Any, int]:
    """Run `request()` and return (its result, the GPU bytes it took beyond what the worker held at its start).

    The driver's reading, from outside: what the sandbox's processes hold on the GPU, polled from this process as fast
    as the driver answers during the call, above what they held before it, plus what they held before it beyond what
    the worker held before any learner code ran (after the worker gave back what its allocator cached: a buffer made
    ahead and used in the call counts). The caching allocator's peak rise (which learner code can reset) can only add
    to it."""
    def allocator_reading(reset: bool = False) -> dict:    # the learner's process speaking: numbers or nothing
        got = proxy.request({"op": "device_memory", "reset": reset}, what="(GPU memory)")["ok"]
        return {k: v for k, v in got.items() if type(v) is int} if isinstance(got, dict) else {}

    proxy.request({"op": "release"}, what="(GPU memory)")
    before = allocator_reading(reset=True).get("current", 0)
    assert proxy.sandbox is not None                                       # started by the requests
    poller = DriverPoller(proxy.sandbox.pids, proxy.grading)
    with poller:
        result = request()
    allocator = allocator_reading().get("peak", 0) - before
    proxy.last_poll = {"polls": poller.polls, "seconds": round(poller.seconds, 4)}
    if not poller.reading:
        return result, max(0, allocator)
    held_before = max(0, poller.base - proxy.gpu_at_start) if proxy.gpu_at_start is not None else 0
    return result, max(allocator, poller.rise() + held_before)
