"""Speed and memory checks whose measurements the learner cannot touch.

The learner's code and the reference solution each run in a sandboxed worker (the reference is
course code, but it runs under the same limits and thread count).  One timed run is one `run`
request: it carries a seed the grader drew for it (`secrets`), the worker builds the inputs from
that seed, makes the calls and sends every output back in the same request, so nothing can be
prepared before the clock starts and the grader compares the outputs itself.  Reference and
learner alternate (reference first on even repetitions, learner first on odd ones) on the same
seeds; warm-up runs are discarded; the verdict uses the ratio of medians.  The clock is outside
the worker: the CPU time of the worker's cgroup on the CPU (every process it ran counts, ended
or not), the grader's wall clock around a request that ends with a device-wide synchronise on
CUDA (the L2 cache flushed before each run, outside the clock; the inputs made on the GPU; each
output sent back as its shape and a projection on a random vector the seed draws).  Memory is the
rise of the cgroup's peak during one call, reset by the grader, plus what the sandbox holds beyond
its start (`peak_memory`; on a GPU: the driver's reading, polled, and the allocator's).  On a GPU,
one measured comparison runs at a time on the machine (`gpu_lane`), so that learners graded in
parallel do not slow each other's timed calls.
"""
from __future__ import annotations

import contextlib
import fcntl
import itertools
import secrets
import statistics
import time
from dataclasses import dataclass, field

from autograder.sandbox.box import private_root
from autograder.sandbox.gpu import on_gpu
from autograder.verdict import measure
from autograder.verdict.learner import Learner, WorkerDied
from autograder.verdict.record import GraderFault


def fresh_seed() -> int:
    """A seed no submission can know in advance."""
    return secrets.randbits(62)


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

    def prepare(self):
        """Before a timed run, outside the clock: on a GPU, a cold L2 cache."""
        if on_gpu():
            self.request("flush")

    def run(self, seed: int, inputs: list[dict], kwargs: dict | None = None, calls: int = 1,
            timeout: float | None = None) -> list:
        """The outputs of `calls` calls on inputs made from `seed`; on a GPU each as its shape and projection."""
        return self.request("run", timeout=timeout, seed=seed, inputs=inputs, kwargs=kwargs or {}, count=calls,
                            project=on_gpu())


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

    def clearly_under(self, limit: float, z: float = 3.0) -> bool:
        """The ratio is under `limit` by more than `z` standard errors of the two means (relative errors add), and
        so is every learner run against the reference's fastest."""
        se = (self.standard_error("learner") ** 2 + self.standard_error("reference") ** 2) ** 0.5
        return self.ratio * (1 + z * se) < limit and max(self.learner) < limit * min(self.reference)

    def standard_error(self, which: str = "reference") -> float:
        """The standard error of the mean time, relative to the mean."""
        xs = getattr(self, which)
        return statistics.stdev(xs) / len(xs) ** 0.5 / statistics.mean(xs) if len(xs) > 1 else float("inf")


def _clock(target: Target, cpu: bool) -> float:
    """The CPU time of the target's own worker: what its code computes, its calls of the course's parts included but
    not the course's work for them (a worker of course code, which neither side's code may load with its own)."""
    return measure.cpu_seconds(target.proxy) if cpu else time.perf_counter()


@contextlib.contextmanager
def gpu_lane(*proxies: Learner):
    """On a GPU, while held: the only measured comparison of this machine's GPU (a lock that every grading process
    of the machine takes, in the grader's private folder). The time spent waiting for it is added to the
    learners' deadlines: a busy GPU is not the learner's doing. A no-op on the CPU, where the clock is the cgroup's
    CPU time."""
    if not on_gpu():
        yield
        return
    with open(private_root() / "gpu-lane.lock", "a") as lock:
        waited = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)
        waited = time.monotonic() - waited
        for proxy in proxies:
            proxy.deadline += waited
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def compare(learner: Target, reference: Target, inputs: list[dict], kwargs: dict | None = None, reps: int = 7,
            warmup: int = 1, calls: int = 1, rtol: float = 1e-3, slow_limit: float = 30.0,
            cpu: bool | None = None, same_output: bool = True, until_se: float | None = None,
            budget_s: float = 20.0, max_reps: int = 60, limit: float | None = None, min_reps: int = 3) -> Comparison:
    """Time `learner` against `reference` on the same fresh inputs, interleaved.

    Each timed run makes `calls` calls on distinct fresh inputs (a warm-up run, not timed, makes one).  With
    `same_output=False` (models whose weights differ), outputs are checked for shape and finiteness only.  After
    `reps` repetitions, more follow while either side's standard error is above `until_se` of its mean (default on
    CUDA: 1 %), until `budget_s` seconds or `max_reps` repetitions are spent.  Given the `limit` the ratio is judged
    by, the comparison stops after `min_reps` repetitions once the ratio is clearly inside (below half the limit, or
    below it by three standard errors) or clearly outside (above twice the limit): only a close ratio takes every
    repetition.
    """
    cpu = not on_gpu() if cpu is None else cpu
    until_se = (None if cpu else 0.01) if until_se is None else until_se
    result = Comparison()
    ref_best = None

    def enough(i: int) -> bool:
        if limit is not None and i >= warmup + min_reps and (not (limit / 2 < result.ratio < 2 * limit)
                                                             or result.clearly_under(limit)):
            return True
        if i < warmup + reps:
            return False
        return (not until_se or i >= warmup + max_reps or time.perf_counter() - started > budget_s
                or max(result.standard_error("learner"), result.standard_error("reference")) <= until_se)

    with gpu_lane(learner.proxy, reference.proxy):
        started = time.perf_counter()
        for i in itertools.count():
            if enough(i):
                break
            seed = fresh_seed()
            order = (reference, learner) if i % 2 == 0 else (learner, reference)
            n = calls if i >= warmup else 1
            outs = {}
            for target in order:
                timeout = None
                if target is learner and ref_best is not None:
                    timeout = max(5.0, slow_limit * ref_best * n / calls)
                target.prepare()
                t0 = _clock(target, cpu)
                sandbox = target.proxy.sandbox           # (the first reading starts a worker not started yet)
                try:
                    outs[id(target)] = target.run(seed, inputs, kwargs, n, timeout=timeout)
                except WorkerDied:
                    if target is learner and timeout is not None:
                        result.mismatch = (f"one run took more than {slow_limit:g}x the reference's time: "
                                           "far too slow (a Python loop over positions?)")
                        return result
                    raise
                elapsed = _clock(target, cpu) - t0
                if cpu and target.proxy.sandbox is not sandbox:   # never a difference of counters of two sandboxes
                    if target is learner:
                        result.mismatch = ("your code ended its process between two timed runs (it was started "
                                           "again): the run cannot be timed")
                        return result
                    raise GraderFault("the reference's worker was replaced during its timed run")
                if i >= warmup:
                    if elapsed <= 0:
                        raise GraderFault(f"an impossible time measurement ({elapsed:g} s for {calls} calls)")
                    (result.reference if target is reference else result.learner).append(elapsed)
                # The reference's best time for `calls` calls; a one-call warm-up's CPU time can read 0.
                if target is reference and elapsed > 0:
                    ref_best = min(ref_best or float("inf"), elapsed * calls / n)
            if not same_outputs(outs[id(learner)], outs[id(reference)], rtol, same_output):
                result.mismatch = "the timed calls' outputs are wrong: the time of a wrong answer does not count"
                return result
        return result


def same_outputs(got, want, rtol: float = 1e-3, same_values: bool = True) -> bool:
    """The learner's outputs of a timed or measured run agree with the reference's: the same number of
    tensors, shapes, finite where the reference is, and (with `same_values`) the same values up to `rtol`
    of the largest reference value."""
    import torch

    if not isinstance(got, list) or len(got) != len(want):
        return False
    if want and isinstance(want[0], dict):        # a GPU run's outputs: shapes exactly, then the projections
        if not all(isinstance(g, dict) and g.get("shape") == w["shape"] for g, w in zip(got, want)):
            return False
        got, want = [g.get("projection") for g in got], [w["projection"] for w in want]
    for g, w in zip(got, want):
        if not isinstance(g, torch.Tensor) or tuple(g.shape) != tuple(w.shape):
            return False
        g, w = g.double(), w.double()
        if not torch.isfinite(g[torch.isfinite(w)]).all():
            return False
        if same_values and w.numel():
            scale = float(w.abs().max())
            if not float((g - w).abs().nan_to_num(float("inf")).max()) <= rtol * scale + 1e-6:
                return False
    return True


def peak_memory(target: Target, inputs: list[dict], kwargs: dict | None = None, seed: int | None = None,
                timeout: float = 120.0, warmup: list[dict] | None = None) -> tuple[int, list]:
    """(bytes one call adds to its sandbox's peak memory, the call's outputs).

    A first call on other inputs (`warmup`: smaller ones of the same kind, else inputs like the measured call's)
    warms up thread pools and caches and is not counted; the measured call's
    inputs come from `seed` (give the reference the same seed to compare the outputs).  On the CPU the
    measure is the sandbox's cgroup peak, reset by the grader just before the call: it counts every process
    and cannot be reset or hidden from inside. To the call's rise is added the anonymous and tmpfs memory
    the sandbox held beyond what it held before any learner code ran: a buffer the learner's code made
    ahead (at import, in the warm-up call) and fills during the measured call counts. The rise is also read as the
    sandbox's own (anonymous and tmpfs) memory, polled during the call: page cache charged before the call and
    dropped during it hides nothing. On a GPU, the measure is
    the GPU memory the call takes (autograder.verdict.measure.gpu_peak).
    """
    seed = fresh_seed() if seed is None else seed
    target.run(fresh_seed(), warmup or inputs, kwargs, timeout=timeout)
    proxy = target.proxy
    if on_gpu():
        with gpu_lane(proxy):
            outputs, extra = measure.gpu_peak(proxy, lambda: target.run(seed, inputs, kwargs, timeout=timeout))
        return extra, outputs
    # What earlier calls freed is not the learner's; the measured call's tensors get pages of their own (worker
    # op_release), and the heap reuses freed memory again once it is measured.
    proxy.request({"op": "release", "exact": True}, what="(memory)")
    held = measure.held_since_start(proxy)
    measure.reset_peak(proxy)
    base, _ = measure.now_and_peak(proxy)
    with measure.held_poller(proxy) as own:
        outputs = target.run(seed, inputs, kwargs, timeout=timeout)
    proxy.request({"op": "release"}, what="(memory)")
    _, peak = measure.now_and_peak(proxy)
    if peak <= 0:
        raise GraderFault(f"an impossible memory measurement ({peak} bytes)")
    return max(peak - base, own.rise(), 0) + held, outputs
