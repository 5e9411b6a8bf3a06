"""Checks the hidden suites use.  Each failure raises `Diagnosis`, whose text is what the learner
reads: it names the misconception, never the test code.  All comparisons happen here, on the
trusted side, with tensors the worker sent back."""
from __future__ import annotations

import re
from typing import cast

import torch
from torch.overrides import TorchFunctionMode

from autograder.sandbox.gpu import on_gpu
from autograder.verdict.learner import LearnerError, origin
from autograder.verdict.timing import Target, compare

# A correct vectorised answer runs within this factor of the reference; a Python loop over
# positions runs 10x or more slower (calibrated by `make bench`: bench/speed.py).
SPEED_FACTOR = 3.0
# On a GPU, passes over the score matrix are bound by memory traffic: a correct answer that makes more passes than
# the reference (torch.where masks, a softmax written out) took 1.1-1.45x its time in 20 gradings on an H200, a loop
# over query positions 17-22x; 5 is their geometric middle (`make gpu-check`, bench/results/gpu-h200-2026-12-04.md).
GPU_SPEED_FACTOR = 5.0


def speed_factor() -> float:
    """The speed rule's factor on the device the timed calls run on."""
    return GPU_SPEED_FACTOR if on_gpu() else SPEED_FACTOR


def on_device(cpu, gpu):
    """`gpu` when the timed and measured calls run on a GPU (inputs sized for it), else `cpu`."""
    return gpu if on_gpu() else cpu


NOT_IMPLEMENTED = "not implemented yet (it raises NotImplementedError)"   # a part left as the release's stub


class Diagnosis(AssertionError):
    """A failed check; its message, what the check observed, is shown to the learner as it is. `causes`: the known
    mistakes whose answers the learner's answer is (autograder.verdict.known), `ruled_out`: those it is not;
    `unanswered`: the part is the release's stub, not yet written."""

    def __init__(self, message: str, causes=(), ruled_out=(), unanswered: bool = False):
        super().__init__(message)
        self.causes, self.ruled_out, self.unanswered = list(causes), list(ruled_out), unanswered


def check(condition, diagnosis: str):
    if not condition:
        raise Diagnosis(diagnosis)


def tensor(value, what: str, shape=None, dtype=None) -> torch.Tensor:
    """`value` must be a tensor (of this shape and dtype when given)."""
    check(isinstance(value, torch.Tensor), f"{what} should be a torch.Tensor, but it is a {type(value).__name__}")
    if shape is not None:
        check(tuple(value.shape) == tuple(shape),
              f"{what} has shape {tuple(value.shape)}, expected {tuple(shape)}")
    if dtype is not None:
        check(value.dtype == dtype, f"{what} has dtype {value.dtype}, expected {dtype}")
    return value


def max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    diff = (a.double() - b.double()).abs()
    both_nan = torch.isnan(a.double()) & torch.isnan(b.double())
    diff = torch.where(both_nan, torch.zeros_like(diff), diff)
    return float(torch.nan_to_num(diff, nan=float("inf")).max()) if diff.numel() else 0.0


FLOORS = {torch.float64: (1e-10, 1e-12), torch.float32: (1.3e-6, 1e-5), torch.bfloat16: (1.6e-2, 1e-5),
          torch.float16: (1e-3, 1e-5)}


def close(actual, expected: torch.Tensor, what: str, baseline: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
          rtol: float | None = None, atol: float | None = None, dtype=None):
    """`actual` equals the float64 reference `expected` up to the error of a plain computation.

    The allowed error is the larger of a floor for the dtype (torch.testing's defaults; float64 at float64's own
    precision) and twice the error that `baseline` -- the same computation done plainly at the learner's precision --
    makes against the float64 reference, so correct answers written any way pass while wrong ones, whose error is of
    the order of the values themselves, fail. Several baselines (plain computations in different orders) give the
    largest of their errors: one float32 computation's largest error is a single draw, and on ill-conditioned inputs
    (a LayerNorm over two features) another correct order's can be several times it. A failure says what it
    observed, and names a cause only where the learner's answer is what a known mistake gives on the same call
    (autograder.verdict.known).
    """
    from autograder.verdict import known

    dtype = dtype or (expected.dtype if expected.dtype != torch.float64 else None)
    try:
        t = tensor(actual, what, shape=expected.shape, dtype=dtype)
        check(not torch.isnan(t).any() or torch.isnan(expected).any(),
              f"{what} contains NaN (in {int(torch.isnan(t).sum())} of {t.numel()} entries)")
    except Diagnosis as e:
        raise Diagnosis(str(e), *known.explain(actual, expected)) from None
    baselines = baseline if isinstance(baseline, tuple) else () if baseline is None else (baseline,)
    allowed = allowed_error(expected, t.dtype, baselines, rtol, atol)
    err = max_error(t, expected)
    if err > allowed:
        raise Diagnosis(f"{what} is wrong: largest error {err:.3g} (allowed {allowed:.3g}){where(t, expected)}",
                        *known.explain(actual, expected, allowed))


def allowed_error(truth: torch.Tensor, dtype, baselines=(), rtol: float | None = None,
                  atol: float | None = None) -> float:
    """The error allowed against the float64 `truth` at `dtype`: the larger of a floor for the dtype (torch.testing's
    defaults, unless `rtol` and `atol` are given) and twice the largest error of the `baselines` against it."""
    floor_rtol, floor_atol = FLOORS.get(dtype, (1e-6, 1e-6))
    rtol = floor_rtol if rtol is None else rtol
    atol = floor_atol if atol is None else atol
    scale = float(truth.double().abs().max()) if truth.numel() else 0.0
    return max([atol + rtol * scale, *(2.0 * max_error(b, truth) for b in baselines)])


ROUNDED_RUNS = 4      # computations under random rounding per drawn call (rounded_runs)


class _RandomRounding(TorchFunctionMode):
    """Every float64 tensor a torch function makes (a view excepted) times 1 + `unit` * U(-1, 1), from `g`: the
    float64 computation run as if each step rounded at a lower precision, in a random direction (Monte Carlo
    arithmetic)."""

    def __init__(self, unit: float, g: torch.Generator):
        super().__init__()
        self.unit, self.g = unit, g

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self._rounded(func(*args, **(kwargs or {})), args)

    def _rounded(self, out, args):
        if isinstance(out, (tuple, list)):
            return type(out)(self._rounded(o, args) for o in out)
        if not isinstance(out, torch.Tensor) or out.dtype != torch.float64 or not out.numel() or out.is_meta:
            return out
        if any(isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
               for a in args):
            return out
        noise = 2 * torch.rand(out.shape, generator=self.g, dtype=torch.float64) - 1
        return out * (1 + self.unit * noise.to(out.device))


def rounded_runs(compute, dtype, g: torch.Generator, runs: int = ROUNDED_RUNS) -> list:
    """`compute()` (a float64 computation of plain torch operations) `runs` times, each step rounded at random by up
    to two units of `dtype`'s precision (one rounding and one accumulation). The largest error of these runs against
    the truth is what the call's conditioning makes of rounding: a LayerNorm over a row whose entries nearly agree
    multiplies the error of its input many times, in whatever order a correct answer computes it. Two fixed float32
    computations are only two draws of that error: on such calls a third correct one was up to 6.2 times the larger
    of them in 3,000 gradings, and never over half the allowed error with these runs among the baselines
    (bench/results/rounding.md)."""
    if dtype == torch.float64:
        return []
    unit = 2 * torch.finfo(dtype).eps
    out = []
    for _ in range(runs):
        with torch.no_grad(), _RandomRounding(unit, g):
            out.append(compute())
    return out


def equal(actual, expected: torch.Tensor, what: str):
    """`actual` is exactly `expected` (a mask: its shape, dtype and every entry); a failure names a cause only where
    the learner's answer is a known mistake's (autograder.verdict.known)."""
    from autograder.verdict import known

    try:
        t = tensor(actual, what, shape=expected.shape, dtype=expected.dtype)
    except Diagnosis as e:
        raise Diagnosis(str(e), *known.explain(actual, expected)) from None
    if not torch.equal(t, expected):
        wrong = t != expected
        idx = [int(x) for x in wrong.nonzero()[0]]
        raise Diagnosis(f"{what} differs from the right answer in {int(wrong.sum())} of {t.numel()} entries: at "
                        f"{idx} it is {t[tuple(idx)].item()}", *known.explain(actual, expected))


def where(got: torch.Tensor, right: torch.Tensor) -> str:
    """Where the largest error is, and the two values there."""
    diff = (got.double() - right.double()).abs().nan_to_num(float("inf"))
    if not diff.numel() or diff.shape != right.shape:
        return ""
    i = int(diff.reshape(-1).argmax())
    idx = [int(x) for x in torch.unravel_index(torch.tensor(i), diff.shape)]
    mine, truth = float(got.double().reshape(-1)[i]), float(right.double().reshape(-1)[i])
    return f" at index {idx}: {mine:.6g} where {truth:.6g} is right"


def leaves_inputs(result: dict, sent: list, what: str, hint: str = "compute on a copy or out of place",
                  names: list[str] | None = None):
    """`result` of two calls (`Learner.twice`), each on fresh copies of the arguments, with autograd off and on:
    after each single call its arguments are still what the grader sent, and both calls give the same answer."""
    first, second, after = result.get("first"), result.get("second"), result.get("args_after")
    check(isinstance(after, list) and len(after) == 2 and all(isinstance(a, list) and len(a) >= len(sent)
                                                               for a in after),
          f"{what}: the grader could not read its arguments back")
    for m, (mode, args) in enumerate(zip(("with autograd off", "with autograd on"), cast(list, after))):  # checked
        for i, (b, a) in enumerate(zip(sent, args)):
            if isinstance(b, torch.Tensor) and not (isinstance(a, torch.Tensor) and a.shape == b.shape
                                                    and torch.equal(a, b)):
                from autograder.verdict import known

                name = names[i] if names and i < len(names) else f"its input (argument {i + 1})"
                out = first[0] if isinstance(first, (tuple, list)) and first else first
                raise Diagnosis(f"{what} modifies {name} in place ({mode}); {hint}", *known.explain_purity(out, i, m))
    if isinstance(first, (tuple, list)) and isinstance(second, (tuple, list)) and first and second:
        first, second = first[0], second[0]
    check(isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor) and first.shape == second.shape
          and max_error(first, second) <= 1e-6 * (1 + float(first.double().abs().max() if first.numel() else 0)),
          f"{what} gives another answer with autograd on than off, on the same inputs: it keeps or changes state "
          f"between calls ({hint})")


def raises(call, exc: str, diagnosis: str):
    """`call()` must raise the exception named `exc` in the learner's code."""
    from autograder.verdict import known

    try:
        out = call()
    except LearnerError as e:
        if not e.isa(exc):
            raise Diagnosis(f"{diagnosis} (it raised {e.type} instead of {exc})",
                            *known.explain_raised(e.origin, e.type)) from None
        return
    raise Diagnosis(diagnosis, *known.explain_raised(origin(out), None))


def function_targets(learner, reference_worker, name: str) -> tuple[Target, Target]:
    """The function `name` in the learner's worker and in the reference worker, as timing targets."""
    return Target(learner, name), Target(reference_worker, name)


def module_targets(learner, reference_worker, name: str, *args, same_weights: bool = True):
    """The same module built in the learner's worker and in the reference worker, as timing targets."""
    ref = reference_worker.new(name, *args)
    mine = learner.new(name, *args)
    if same_weights:
        mine.load_state_dict(ref.state_dict())
    return Target(learner, name, mine.handle), Target(reference_worker, name, ref.handle)


def speed_ratios(learner_target: Target, reference_target: Target, inputs: list[dict], calls: int = 1,
                 kwargs: dict | None = None, factor: float | None = None, same_output: bool = True,
                 attempts: int = 3, rtol: float = 1e-3) -> tuple[list[float], str | None]:
    """(the ratios measured, the mismatch of a wrong output if any), by the rule of `fast_enough`; `rtol`: how far
    the outputs may be from the reference's (timing.same_outputs)."""
    factor = factor or speed_factor()
    ratios: list[float] = []
    for _ in range(attempts):
        result = compare(learner_target, reference_target, inputs, kwargs=kwargs, calls=calls,
                         same_output=same_output, limit=factor, rtol=rtol)
        if result.mismatch is not None:
            return ratios, result.mismatch
        ratios.append(result.ratio)
        if result.ratio <= factor or result.ratio >= 2 * factor:
            break
    return ratios, None


def course_calls(learner, part: str, run) -> int:
    """How many times `run()` made the learner's code call the course's `part`, counted by the grader as it serves
    each call (the time of those calls is the course worker's, off the learner's clock)."""
    before = learner.served[part]
    run()
    return learner.served[part] - before


def fast_enough(learner_target: Target, reference_target: Target, inputs: list[dict], what: str,
                calls: int = 1, kwargs: dict | None = None, factor: float | None = None, same_output: bool = True,
                attempts: int = 3):
    """The learner's code runs within `factor` (by default the device's: `speed_factor`) of the reference on fresh
    inputs (autograder.verdict.timing).

    A ratio over `factor` but under twice it is measured again on new inputs, up to `attempts` times, and the
    best one counts: a burst of load on a shared machine (another process, a hypervisor taking the core) slows
    single runs, never every measurement, while a loop is slow in all of them."""
    factor = factor or speed_factor()
    ratios, mismatch = speed_ratios(learner_target, reference_target, inputs, calls, kwargs, factor, same_output,
                                    attempts)
    check(mismatch is None, f"{what}: {mismatch}")
    if min(ratios) <= factor:
        return
    best = f"the best of {len(ratios)} measurements" if len(ratios) > 1 else "far over it, so measured once"
    raise Diagnosis(f"{what} takes {min(ratios):.1f}x the time of the reference solution on the same inputs (allowed "
                    f"{factor:g}x; {best})")


def together(learner, course_worker, names: list[str], run_check, what: str, fix: str, known_wrong: bool = False):
    """`run_check()` with the learner's own parts; when it fails but passes with the course's versions of
    `names`, the learner's part is right and the parts it uses are not: say so (`fix` names them).

    `known_wrong`: the learner's `names` were found wrong on their own, on inputs that reach their mistakes, which
    this check's inputs may not: the test fails whatever they give here, once the part itself is right with the
    course's versions, and `fix` is its diagnosis."""
    if known_wrong:
        with learner.course_parts(names, course_worker):
            run_check()
        raise Diagnosis(fix)
    try:
        run_check()
        return
    except (Diagnosis, LearnerError) as own:
        first = own
    try:
        with learner.course_parts(names, course_worker):
            run_check()
    except (Diagnosis, LearnerError):
        raise first from None
    raise Diagnosis(f"your {what} is right with the course's {' and '.join(names)} (its other tests use those); with "
                    f"yours it is wrong ({str(first)[:300]}): {fix}") from None


# What the learner's worker imports for `draw_structure` before its learner is known (torch.export's tracer costs
# about 2 s of CPU to import): a suite that draws names it as its WORKER_PRELOAD (autograder.verdict.suite_server).
DRAWING_PRELOAD = ("tracer", "torch.export._trace")


def draw_structure(request, learner, reference_namespace: dict, name: str):
    """For the feedback (never a score): the learner's `name` traced in its worker, as plain data, and drawn beside
    the course's, with the structural differences named (autograder.graph)."""
    from autograder import graph

    try:
        mine = learner.request({"op": "graph", "name": name}, what=f"drawing {name}")["ok"]
    except Exception as e:  # noqa: BLE001 - a drawing that cannot be made is a note, never a failure
        mine = {"error": f"it could not be traced ({type(e).__name__})"}
    if not isinstance(mine, dict) or "error" in mine:
        note = str(mine.get("error", "")) if isinstance(mine, dict) else ""
        request.node.user_properties.append(("structure", {
            "name": name, "note": f"your {name} could not be drawn as a graph: {note[:300]}".rstrip(": ")}))
        return
    course = graph.without_code(graph.trace_named(reference_namespace, name))
    request.node.user_properties.append(("structure", {
        "name": name, "differences": graph.differences(mine, course),
        "html": graph.side_by_side_html(mine, course, deadline=learner.deadline)}))


def load_state(proxy, state: dict, what: str, contract: dict | None = None) -> list[str]:
    """Put `state` (the contract's parameters, by their names) into the learner's module and nothing else: any other
    entry of its state_dict (a second name for the same parameter, a buffer, a parameter of its own) keeps its value,
    so it never makes a right output wrong. Returns those other entries' names. `contract`: the same state by the
    contract's names, where the learner's own differ (a failed check replays the known mistakes with it)."""
    sd = proxy.state_dict()
    check(isinstance(sd, dict), f"{what}.state_dict() should be a dict")
    have = {k: tuple(v.shape) for k, v in sd.items() if isinstance(v, torch.Tensor)}
    missing = [f"{k} {tuple(v.shape)}" for k, v in state.items() if k not in have]
    check(not missing, f"{what} has no parameter {', '.join(missing[:6])}: use the submodule and parameter names of "
                       f"the specification (its parameters are: {', '.join(sorted(have)[:12]) or 'none'})")
    wrong = [f"`{k}` has shape {have[k]}, expected {tuple(v.shape)}" for k, v in state.items()
             if have[k] != tuple(v.shape)]
    check(not wrong, f"{what}'s {'; '.join(wrong[:4])}")
    proxy.load_state_dict({k: v.to(sd[k].dtype) if v.is_floating_point() else v for k, v in state.items()},
                          strict=False, contract=contract)
    return sorted(set(have) - set(state))


def load_exact(proxy, state: dict, what: str, forbidden: str | None = None, contract: dict | None = None):
    """Load `state` as `load_state` does; entries of the learner's module outside it whose names match `forbidden` (a
    regular expression: what the specification rules out, such as a bias with bias=False) fail the check."""
    extra = load_state(proxy, state, what, contract)
    if forbidden:
        ruled_out = [k for k in extra if re.search(forbidden, k)]
        check(not ruled_out, f"{what} holds {', '.join(ruled_out[:6])}, which the specification rules out")
