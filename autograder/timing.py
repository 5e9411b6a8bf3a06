"""Speed checks whose clock the learner cannot touch.

The learner's code and the reference solution each run in a sandboxed worker (the reference is
course code, but it runs under the same limits and thread count).  For every repetition the
grader asks each worker to build fresh inputs from a new seed (`prepare`, not timed), then times
one `run` request from the trusted process with its own clock, then asks for a random projection
of the output (`checksum`, not timed) and compares the two workers' checksums: a run that skipped
work, cached, or returned something else fails.  Reference and learner alternate (reference
first on even repetitions, learner first on odd ones); warm-up runs are discarded; the verdict
uses the ratio of medians.  On CUDA the worker synchronises the whole device before answering and
flushes the L2 cache before each run.
"""
from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass, field

from .learner import Learner, WorkerDied, on_gpu


@dataclass
class Target:
    """A function name, or a module handle created in that worker."""

    proxy: Learner
    name: str
    handle: int | None = None

    def request(self, op: str, timeout: float | None = None, **fields):
        req = {"op": op, "name": self.name, **fields}
        if self.handle is not None:
            req["handle"] = self.handle
        return self.proxy.request(req, timeout=timeout, what=f"{self.name} ({op})")["ok"]


@dataclass
class Comparison:
    learner: list[float] = field(default_factory=list)
    reference: list[float] = field(default_factory=list)
    mismatch: str | None = None

    @property
    def ratio(self) -> float:
        return statistics.median(self.learner) / max(statistics.median(self.reference), 1e-9)

    def spread(self, which: str = "reference") -> float:
        xs = getattr(self, which)
        return statistics.pstdev(xs) / statistics.mean(xs) if len(xs) > 1 else 0.0

    def standard_error(self, which: str = "reference") -> float:
        """The standard error of the mean time, relative to the mean."""
        xs = getattr(self, which)
        return statistics.stdev(xs) / len(xs) ** 0.5 / statistics.mean(xs) if len(xs) > 1 else float("inf")


def _clock(target: Target, cpu: bool) -> float:
    return target.proxy.cpu_seconds() if cpu else time.perf_counter()


def compare(learner: Target, reference: Target, inputs: list[dict], kwargs: dict | None = None, reps: int = 7,
            warmup: int = 1, calls: int = 1, seed: int = 0, rtol: float = 1e-3, slow_limit: float = 30.0,
            cpu: bool | None = None, same_output: bool = True, until_se: float | None = None,
            budget_s: float = 20.0, max_reps: int = 60) -> Comparison:
    """Time `learner` against `reference` on the same fresh inputs, interleaved.

    Each timed run makes `calls` calls on distinct fresh inputs.  On the CPU the clock is the
    CPU time of the worker's process tree (kernel accounting: immune to other load on the
    machine and to anything the learner's code does to its own clocks); on CUDA it is the
    grader's wall clock around a request that ends with a device-wide synchronise.  With
    `same_output=False` (models whose weights differ), outputs are checked for shape and finiteness.
    After `reps` repetitions, more follow while either side's standard error is above `until_se`
    of its mean (default on CUDA: 1 %), until `budget_s` seconds or `max_reps` repetitions are spent.
    """
    cpu = not on_gpu() if cpu is None else cpu
    until_se = (None if cpu else 0.01) if until_se is None else until_se
    result = Comparison()
    ref_best = None
    started = time.perf_counter()

    def enough(i: int) -> bool:
        if i < warmup + reps:
            return False
        return (not until_se or i >= warmup + max_reps or time.perf_counter() - started > budget_s
                or max(result.standard_error("learner"), result.standard_error("reference")) <= until_se)

    for i in itertools.count():
        if enough(i):
            break
        order = (reference, learner) if i % 2 == 0 else (learner, reference)
        sums = {}
        for target in order:
            target.request("prepare", seed=seed + i, inputs=inputs, kwargs=kwargs or {}, count=calls)
            timeout = None
            if target is learner and ref_best is not None:
                timeout = max(5.0, slow_limit * ref_best)
            t0 = _clock(target, cpu)
            try:
                target.request("run", timeout=timeout)
            except WorkerDied:
                if target is learner and timeout is not None:
                    result.mismatch = (f"one run took more than {slow_limit:g}x the reference's time: "
                                       "far too slow (a Python loop over positions?)")
                    return result
                raise
            elapsed = _clock(target, cpu) - t0
            sums[id(target)] = target.request("checksum", seed=10_000 + seed + i)
            if i >= warmup:
                (result.reference if target is reference else result.learner).append(elapsed)
            if target is reference:
                ref_best = elapsed if ref_best is None else min(ref_best, elapsed)
        if not same_checksums(sums[id(learner)], sums[id(reference)], rtol, same_output):
            result.mismatch = "the timed calls' outputs are wrong: the time of a wrong answer does not count"
            return result
    return result


def same_checksums(got: list[dict], want: list[dict], rtol: float = 1e-3, same_output: bool = True) -> bool:
    """Two workers' `checksum` answers agree: shapes, finiteness and (with `same_output`) the projections."""
    return len(got) == len(want) and all(
        g["shape"] == w["shape"] and g["finite"]
        and (not same_output or abs(g["checksum"] - w["checksum"]) <= rtol * (w["scale"] + 1e-6))
        for g, w in zip(got, want))


def peak_memory(target: Target, inputs: list[dict], kwargs: dict | None = None, seed: int = 0,
                timeout: float = 120.0) -> tuple[int, list[dict]]:
    """(bytes one call adds to its worker's peak resident memory, the checksum of its output).

    The memory is the kernel's high-water mark of the worker (VmHWM in /proc, reset through
    clear_refs just before the call, after its inputs exist), so the learner's code cannot report
    it.  A first call on other inputs warms up thread pools and caches and is not counted; the
    measured call's inputs are new (a cached answer fails the checksum).
    """
    for i in range(2):
        target.request("prepare", seed=seed + i, inputs=inputs, kwargs=kwargs or {})
        if i:
            target.proxy.reset_peak_memory()
            base = target.proxy.peak_memory()
        target.request("run", timeout=timeout)
    return target.proxy.peak_memory() - base, target.request("checksum", seed=10_000 + seed)
