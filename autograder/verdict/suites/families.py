"""Families of checks every graded part gets by declaring what its notebook promises, as PyTorch tests its own
operators and modules (OpInfo, ModuleInfo; test_noncontiguous_samples, dtype coverage, gradcheck, test_to,
test_save_load).

A part's `Promises` (autograder.verdict.suites.contract) say what it is and takes; the families then hold it to:
arguments not contiguous in memory; a fresh result at every call (the caller changes the first in place, then calls
again); arguments on "meta"; float16 and bfloat16 where promised; gradients in float64 through the course's code;
and for a module `.to(torch.float64)`, `.to("meta")`, a `state_dict` loaded into a module made with other weights,
training mode. Each family is one test of the part's graded cell (`tests`), on calls drawn for the grading (its
edges first); a failure says what it observed, and names a known mistake only where the learner's answer to that
very call is the mistake's. The same checks, on code in this process (`Here`), are the mutation testing's oracle
(`witness`). docs/how-it-works.md ("Promises checked by families") says more.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from autograder.inside.calls import call_twice, gradients, raised
from autograder.verdict.learner import LearnerError

from .checks import Diagnosis, allowed_error, max_error
from .contract import (
    Call,
    Draw,
    Expected,
    Part,
    drawn_calls,
    expected_of,
    explain_outcome,
    learner_raised,
    made_here,
    made_there,
    run_here,
    run_learner,
)

EDGES, CALLS = 2, 1            # per family, part and grading: the first edge calls it applies to, then drawn calls
# What each family's failure says first: how the call was made.
SAID = {
    "strided": "on arguments that are not contiguous in memory (as a view of a transposed or permuted tensor is)",
    "changed": "called again after the caller changed the first call's result in place, and its answer read again "
               "after the caller changed its arguments in place (a result must not share memory with an argument or "
               "with another call)",
    "float64": "after .to(torch.float64), on float64 inputs (every tensor the module uses must move with it: keep "
               "constant tensors in buffers, register_buffer; and it answers at float64's precision, nothing "
               "computed in float32 inside)",
    "meta": "on inputs on the \"meta\" device, a module after .to(\"meta\") (a result is made on its inputs' "
            "device, and every tensor a module uses moves with it)",
    "train": "in training mode, model.train() (the notebook asks for no dropout: training and evaluation agree)",
    "state_dict": "made anew, with other weights, and given the state_dict() of one that holds the call's weights",
}


def _floats(call: Call) -> bool:
    return any(isinstance(a, torch.Tensor) and a.is_floating_point() for a in (*call.args, *call.kwargs.values()))


def _tensors(call: Call) -> bool:
    return any(isinstance(a, torch.Tensor) for a in (*call.args, *call.kwargs.values()))


def _cast(call: Call, dtype) -> Call:
    """The call with every floating argument (and a module's state) in `dtype`."""
    def to(v):
        return v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v

    state = None if call.state is None else {k: to(v) for k, v in call.state.items()}
    return dataclasses.replace(call, args=tuple(map(to, call.args)), kwargs={k: to(v) for k, v in call.kwargs.items()},
                               state=state, about=", ".join(filter(None, (call.about, f"in {_name(dtype)}"))))


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def applies(part: Part, call: Call | None, family: str) -> bool:
    """Whether `family` checks `part` on `call` (None: on some call, from what the part promises alone: no call is
    drawn where a suite is imported, so that no torch thread starts in a process that forks)."""
    p = part.promises
    module = p.module if call is None else call.ctor is not None
    tensors = p.takes != "sizes" if call is None else _tensors(call)
    floats = p.takes == "floats" if call is None else _floats(call)
    return {"strided": tensors, "changed": True, "float64": module, "meta": (module or tensors) and p.meta,
            "train": module, "state_dict": module and (call is None or call.state is not None),
            "gradients": p.differentiable and (module or floats),
            "low precision": bool(p.low_precision) and not module and floats}[family]


FAMILIES = ("strided", "changed", "low precision", "gradients", "float64", "meta", "state_dict", "train")


def calls_for(part: Part, ns: dict, family: str, seed: int) -> list[tuple[Call, Call, Expected]]:
    """The calls of the part for `family` in this grading, each as the value checks make it and as the family makes it,
    with what the family's should give: its first EDGES edge calls and CALLS drawn calls that the family applies to and
    whose right answer is not an exception."""
    out, edges = [], len(part.promises.edges(Draw(0))) if part.promises.edges else 0
    taken = 0
    for i, plain in enumerate(drawn_calls(part, seed, 4 * CALLS)):
        if not applies(part, plain, family) or (i < edges and taken >= EDGES):
            continue
        call = _cast(plain, torch.float64) if family == "float64" else plain
        # The course's code called as the family calls it: on arguments laid out otherwise, its reductions add in
        # another order, and its answer there is one of the baselines of the error allowed (LayerNorm(284)'s erred
        # 1.2 times what its answer on contiguous arguments allowed, in 1 of 2,000 gradings' draws).
        expected = expected_of(part, call, ns, family=family if family in ("float64", "meta", "strided") else None)
        if "raised" in expected.outcome:
            continue
        out.append((plain, call, expected))
        taken += i < edges
        if len(out) >= min(EDGES, edges) + CALLS:
            break
    return out


def _value_is_wrong(side, ns: dict, part: Part, plain: Call, others: list[Call]) -> bool:
    """Whether the answer to `plain`, called as the value checks call it, is a wrong value: then those checks charge
    the mistake, and a family has nothing of its own to say. One mistake loses its points once, whether or not this
    grading's draws happen to show it to a family too. An exception where the course's code answers is a wrong value
    too, from a part that answers one of the family's `others` calls or of the calls every grading makes (ANSWERED:
    keys projected from the query raise on cross-attention alone, which some gradings' draws are all made of); a part
    that answers none of them (a stub, code that cannot run) keeps no promise. The oracle of the mutation testing
    (`Here`) takes every failure as a witness."""
    if not side.charges_values_once:
        return False
    expected = expected_of(part, plain, ns)
    if "raised" in expected.outcome:
        return False
    got = side.run(plain)
    if "raised" in got:
        fixed = drawn_calls(part, 0, ANSWERED)
        return got["raised"] != "NotImplementedError" and any("raised" not in side.run(c) for c in [*others, *fixed]
                                                               if c is not plain)
    return expected.judge(plain, got) is not None


# The calls of every grading (the part's edges, and these many drawn from one seed) where an exception is asked whether
# the part answers anything at all.
ANSWERED = 4


class Learner:
    """The learner's code, through its worker: where the families check a part when a notebook is graded."""

    charges_values_once = True

    def __init__(self, learner, part: Part):
        self.learner, self.part = learner, part

    def run(self, call: Call, family: str | None = None):
        return run_learner(self.learner, call, self.part.rename, family=family)

    def gradients(self, call: Call, grads: list) -> tuple[dict, dict | None]:
        """(calls.gradients of the call, the module's state_dict: None for a function)."""
        proxy = made_there(self.learner, call, self.part.rename)
        if proxy is None:
            return self.learner.gradients(call.part, *call.args, grads=grads, **call.kwargs), None
        return proxy.gradients(*call.args, grads=grads, **call.kwargs), proxy.state_dict()

    def remade(self, call: Call, seed: int):
        """The module of `call` made with its state, then another made with other weights given its state_dict, called
        twice (call_twice)."""
        try:
            source = made_there(self.learner, call, self.part.rename)
            assert source is not None                 # the family applies to modules
            state = source.state_dict()
            self.learner.seed(seed % (1 << 31) + 1)
            other = self.learner.new(call.part, *call.made, **call.ctor_kwargs)
            other.load_state_dict(state, strict=True, contract=call.state)
            return other.twice(*call.args, **call.kwargs)
        except LearnerError as e:                 # the code's exception is its answer, as in `run`
            return learner_raised(e)

    def explain(self, call: Call, got, expected: Expected):
        return explain_outcome(self.learner, self.part, call, got, expected)


class Here:
    """A part's code in this process (course code, a known mistake, a mutant): the families as an oracle."""

    charges_values_once = False

    def __init__(self, ns: dict, part: Part):
        self.ns, self.part = ns, part

    def run(self, call: Call, family: str | None = None):
        return run_here(self.ns, call, rename=self.part.rename, family=family)

    def gradients(self, call: Call, grads: list) -> tuple[dict, dict | None]:
        target = made_here(self.ns, call, rename=self.part.rename)
        out = gradients(target, call.args, call.kwargs, grads)
        return out, target.state_dict() if isinstance(target, torch.nn.Module) else None

    def remade(self, call: Call, seed: int):
        try:
            source = made_here(self.ns, call, rename=self.part.rename)
            torch.manual_seed(seed % (1 << 31) + 1)
            other = self.ns[call.part](*call.made, **call.ctor_kwargs)
            other.load_state_dict(source.state_dict(), strict=True)
            return call_twice(other, call.args, call.kwargs)
        except Exception as e:  # noqa: BLE001 - the code's exception is its answer
            return raised(e)

    def explain(self, call: Call, got, expected: Expected):
        return [], []


def check(side, ns: dict, part: Part, family: str, seed: int):
    """The part's code at `side` (Learner or Here) keeps the promise of `family` on calls drawn for this grading,
    against the course's code in `ns`: a Diagnosis that says what it observed, else None."""
    if family == "low precision":
        return _low_precision(side, ns, part, seed)
    if family == "gradients":
        return _gradients(side, ns, part, seed)
    calls = calls_for(part, ns, family, seed)
    precise = part.promises.precise(Draw(seed)) if family == "float64" and part.promises.precise else []
    # a module moved to float64 answers at its precision where float32 inside would err most
    calls = [(c, _cast(c, torch.float64), expected_of(part, _cast(c, torch.float64), ns, family="float64"))
             for c in precise] + calls
    others = [c for c, _, _ in calls[len(precise):]]
    for i, (plain, call, expected) in enumerate(calls):
        got = side.remade(call, seed) if family == "state_dict" else side.run(call, family)
        wrong = expected.judge(call, got)
        if wrong:
            # asked now, before `_value_is_wrong` calls the learner's code again: the explanation is of the learner's
            # last call (contract.explain_outcome), which would then be the plain one (rope_in_place lost its cause so)
            said = side.explain(call, got, expected)
            # no value check makes a precise call: this family alone can charge it
            if i < len(precise) or not _value_is_wrong(side, ns, part, plain, others):
                raise Diagnosis(f"{SAID[family]}, {call}: {wrong}", *said)


def _low_precision(side, ns: dict, part: Part, seed: int):
    """In each promised dtype, the calls where it loses the most (the promises' `precise`), then the family's own."""
    precise = part.promises.precise(Draw(seed)) if part.promises.precise else []
    for k, dtype in enumerate(part.promises.low_precision):
        drawn = [c for c, _, _ in calls_for(part, ns, "low precision", seed + 31 * k)]
        for i, plain in enumerate([*precise, *drawn]):
            call = _cast(plain, dtype)
            expected = expected_of(part, call, ns)
            if "raised" in expected.outcome or _overflows(expected):
                continue
            got = side.run(call)
            wrong = expected.judge(call, got) or (part.promises.rounded_once and _not_rounded_once(got, expected,
                                                                                                    dtype))
            # No cause is named here: the known mistakes are written at float32 and float64, and in a lower dtype their
            # answers differ from the course's by its precision too, so one may match a learner's for that alone (a
            # float16 attention was told its maximum was taken before masking, with no mask given).
            if wrong and (i < len(precise) or not _value_is_wrong(side, ns, part, plain, drawn)):     # (as in `check`)
                raise Diagnosis(f"on {_name(dtype)} inputs (answered in their dtype, at its precision), {call}: "
                                f"{wrong}")


def _not_rounded_once(got, expected: Expected, dtype) -> str | None:
    """Where an entry of the answer is more than one unit in its own last place from the truth, beyond what float32
    inside may err (its error at the answer's largest entry, and the call's slack: angles known to float32's
    precision): the truth rounded once to `dtype` is within half of one. An answer computed in the lower dtype step by
    step (cos and sin rounded, then each product and sum) is off by several units in entries smaller than the
    largest."""
    first, truth = got.get("first"), expected.truth
    if not (isinstance(first, torch.Tensor) and isinstance(truth, torch.Tensor) and first.shape == truth.shape
            and first.numel()):
        return None
    t = truth.double()
    unit = torch.finfo(dtype).eps * torch.maximum(t.abs(), torch.full_like(t, torch.finfo(dtype).tiny))
    off = (first.double() - t).abs() - unit - torch.finfo(torch.float32).eps * float(t.abs().max()) - expected.slack
    i = int(off.reshape(-1).argmax())
    if float(off.reshape(-1)[i]) <= 0:
        return None
    idx = [int(x) for x in torch.unravel_index(torch.tensor(i), t.shape)]
    mine, right = float(first.double().reshape(-1)[i]), float(t.reshape(-1)[i])
    units = abs(mine - right) / float(unit.reshape(-1)[i])
    return (f"the entry at index {idx} is {mine:.6g} where {right:.6g} is right: {units:.1f} units in its last place "
            "(the right answer rounded once is within half of one: compute in float32 and convert the result)")


def _overflows(expected: Expected) -> bool:
    """Whether the course's answer at the call's precision is not finite where the truth is: a call outside what the
    dtype can hold (scores of 1e4 in float16 overflow), which no answer in that dtype can get right."""
    first = expected.outcome.get("first")
    plains = list(first) if isinstance(first, (tuple, list)) else [first]
    truths = expected.truth if isinstance(expected.truth, (tuple, list)) else [expected.truth]
    return any(isinstance(p, torch.Tensor) and isinstance(t, torch.Tensor) and p.shape == t.shape
               and bool((~torch.isfinite(p.double()) & torch.isfinite(t.double())).any())
               for p, t in zip(plains, truths))


# The scale of the gradients sent back into the outputs: the gradients compared are linear in them, and a caller's
# are of any size; at 100 a division guarded by the smallest float (x / total.clamp_min(tiny) on a row with every
# key masked) overflows to NaN at nearly every entry, not at the few a draw of order 1 happens to make large.
OUTPUT_GRAD_SCALE = 100.0


def _output_grads(outcome: dict, g: torch.Generator) -> list:
    first = outcome.get("first")
    outs = list(first) if isinstance(first, (tuple, list)) else [first]
    return [OUTPUT_GRAD_SCALE * torch.randn(o.shape, generator=g, dtype=torch.float64)
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.device.type != "meta" else None
            for o in outs]


# A gradient in float64 against the course code's: what the family looks for is a gradient cut (detach, no_grad,
# .data) or computed through something autograd cannot follow, errors of the order of the gradient itself; two
# correct orders of computation differ by 1e-6 of it where a softmax saturates (scores of 1e4), by 1e-14 elsewhere.
GRAD_RTOL = 1e-4
GRAD_FLOOR = 1e-8         # a gradient smaller than this everywhere says nothing (it may round to 0 in another order)


def _gradients(side, ns: dict, part: Part, seed: int):
    """In float64, the gradient of every floating argument and every parameter of the contract is the one autograd
    gives through the course's code."""
    calls = calls_for(part, ns, "gradients", seed)
    for plain, call, expected in calls:
        try:
            _same_gradients(side, ns, part, _cast(call, torch.float64), expected, seed)
        except (Diagnosis, LearnerError):          # a wrong gradient, or the code's exception on the call
            # A gradient multiplies what a value hides: where scores saturate the softmax, an unscaled attention's
            # answer is right to within 1e-11 and its gradient is wrong by its own size (it lost these points in 2 of
            # 20 gradings, whichever drew such scores). So the value is asked where the gradient was, in float64, and
            # on the calls every grading makes: code whose values the value checks charge there loses no more here.
            others = [c for c, _, _ in calls]
            if not (_value_is_wrong(side, ns, part, _cast(plain, torch.float64), others)
                    or any(_value_is_wrong(side, ns, part, c, others) for c in drawn_calls(part, 0, ANSWERED))):
                raise


def _same_gradients(side, ns: dict, part: Part, call: Call, expected: Expected, seed: int):
    """The gradients of `call` in the learner's code and in the course's agree (a Diagnosis if not); `seed`: the
    family's, drawn for this grading."""
    grads = _output_grads(expected.outcome, torch.Generator().manual_seed(seed + 17))
    theirs, _ = Here(ns, part).gradients(call, grads)
    mine, state = side.gradients(call, grads)
    said = f"with autograd, in float64, {call}"
    for i, (want, have) in enumerate(zip(theirs["args"], mine.get("args") or [])):
        _same_gradient(want, have, f"argument {i + 1}", said)
    if state is None or call.state is None:
        return
    have_params = mine.get("params") or {}
    # The course's gradients by the learner's own names, mapped as the weights are (a mapping that joins or splits
    # tensors maps their gradients the same way).
    want_params = part.rename(state, theirs["params"]) if part.rename else theirs["params"]
    for param, want in want_params.items():
        if param in have_params or part.rename is None:
            _same_gradient(want, have_params.get(param), f"the parameter {param}", said)


def _same_gradient(want, have, what: str, said: str):
    if (isinstance(want, torch.Tensor) and isinstance(have, torch.Tensor) and have.shape == want.shape
            and bool(torch.isfinite(want).all()) and not bool(torch.isfinite(have).all())):
        # where the right gradient is 0 everywhere too (every row masked): NaN there is no small gradient
        bad = int((~torch.isfinite(have)).sum())
        raise Diagnosis(f"{said}: the gradient of {what} is NaN or infinite in {bad} of {have.numel()} entries, where "
                        "autograd through the course's code gives finite ones (a torch.where that avoids 0/0 in the "
                        "answer still sends NaN back through the branch it did not take)")
    if want is None or not want.numel() or float(want.abs().max()) < GRAD_FLOOR:
        return
    if not isinstance(have, torch.Tensor) or not float(have.double().abs().max() if have.numel() else 0):
        raise Diagnosis(f"{said}: no gradient reaches {what} (is it detached, or computed under torch.no_grad() or "
                        "through .data?)")
    if have.shape != want.shape:
        raise Diagnosis(f"{said}: the gradient of {what} has shape {tuple(have.shape)}, expected {tuple(want.shape)}")
    allowed = allowed_error(want, torch.float64, rtol=GRAD_RTOL, atol=GRAD_FLOOR)
    err = max_error(have, want)
    if err > allowed:
        raise Diagnosis(f"{said}: the gradient of {what} is wrong: largest error {err:.3g} (allowed {allowed:.3g})")


def witness(part: Part, reference: dict, ns: dict, seed: int) -> str | None:
    """The first family whose promise the code of `ns` breaks, with what shows it (None: it keeps every one): the
    mutation testing's oracle (autograder.authoring.mutation)."""
    for family in FAMILIES:
        if not applies(part, None, family):
            continue
        try:
            check(Here(ns, part), reference, part, family, seed)
        except Diagnosis as e:
            return str(e)
        except Exception as e:  # noqa: BLE001 - the code's exception is its answer
            return f"{family}: it raised {type(e).__name__}"
    return None


def tests(contract: dict[str, Part], suite: str, cells: dict[str, str] | None = None) -> dict:
    """The family tests of every part of `contract`, by name, for a suite's module namespace: each marked with its
    part's graded cell (`cells`: part -> cell, by default `<part>_tests`), and seeded per grading."""
    out = {}
    for i, (part_name, part) in enumerate(contract.items()):
        cell = (cells or {}).get(part_name, f"{part_name}_tests")
        for j, family in enumerate(FAMILIES):
            if not applies(part, None, family):
                continue
            out[f"test_{part_name}_family_{family.replace(' ', '_')}"] = _test(suite, part_name, family,
                                                                              7000 + 100 * i + j, cell)
    return out


def _test(suite: str, part_name: str, family: str, label: int, cell: str):
    def test(grading, learner, reference):
        module = __import__(f"autograder.verdict.suites.test_{suite}", fromlist=["CONTRACT"])
        part = module.CONTRACT[part_name]
        check(Learner(learner, part), vars(reference(suite)), part, family, grading.seeded(label).initial_seed())

    test.__doc__ = f"{FAMILY_DOCS[family]} (a promise every part keeps)"
    test.__name__ = f"test_{part_name}_family_{family.replace(' ', '_')}"
    test.__module__ = f"autograder.verdict.suites.test_{suite}"
    return pytest.mark.family(pytest.mark.cell(cell)(test))


FAMILY_DOCS = {
    "strided": "arguments that are not contiguous in memory (a view of a transposed or permuted tensor)",
    "changed": "a fresh result at every call: changing one result changes no argument and no later result",
    "low precision": "float16 and bfloat16 arguments, answered in their dtype at its precision",
    "gradients": "gradients reach every floating argument and parameter, as autograd gives them",
    "float64": "after .to(torch.float64), every tensor it uses moves with it",
    "meta": "on the \"meta\" device (a module after .to(\"meta\")), it answers there",
    "state_dict": "a module given another's state_dict answers as that one does",
    "train": "training mode answers as evaluation mode (no dropout)",
}
