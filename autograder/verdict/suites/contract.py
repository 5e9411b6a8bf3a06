"""Each graded part's contract as data: inputs drawn over everything its specification allows, and one judge of an
answer on such an input.

A suite lists its parts in `CONTRACT` (name -> `Part`). A `Part` draws a `Call` (sizes, dtypes, devices, masks with
empty rows, scores around 1e4 or all far below 0, sizes past any table, defaults left out or given), knows the answer
in float64 (`truth`: torch's own layer where there is one) and the answer of a plain computation at the output's
precision (`plain`: the error a correct answer may make), and may `vary` a call: the same sizes with other values
or other arguments, so that a result kept from an earlier call shows.

`judge` compares an answer with the truth, the reference's answer and the contract's rules (the exception raised,
the output's type, shape, dtype and device, inputs left as they were, autograd on or off alike) and says what it
observed, never why: the hidden suites draw calls from it per grading (`drawn_calls`, `check_drawn`), and the
mutation testing of the suites (autograder.authoring.mutation) draws many more from it, as its oracle.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from autograder.inside.calls import call_family, call_twice, first_line, raised, tail

from .checks import allowed_error, max_error, rounded_runs, where


class Draw:
    """The random choices of one call: sizes from Python's generator, tensors from torch's, both from one seed."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.g = torch.Generator().manual_seed(seed & ((1 << 63) - 1))

    def size(self, low: int, high: int, far: int | None = None, p_far: float = 0.2) -> int:
        """A size in [low, high], an edge of it one time in five, and past it (up to `far`) with chance `p_far`."""
        if far is not None and self.r.random() < p_far:
            return self.r.randint(high + 1, far)
        if self.r.random() < 0.2:
            return self.r.choice((low, high))
        return self.r.randint(low, high)

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def norm_first(self, ctor: tuple) -> tuple[tuple, dict, bool]:
        """`norm_first` drawn, and given to a constructor whose arguments so far are `ctor` as its next positional
        argument, by keyword, or (when True, the default) not at all: (ctor, ctor_kwargs, norm_first)."""
        norm_first, ctor_kwargs = self.chance(0.5), {}
        if not norm_first or self.chance(0.5):
            if self.chance(0.5):
                ctor += (norm_first,)
            else:
                ctor_kwargs["norm_first"] = norm_first
        return ctor, ctor_kwargs, norm_first

    def choice(self, options):
        return self.r.choice(list(options))

    def uniform(self, low: float, high: float) -> float:
        return self.r.uniform(low, high)

    def lead(self, most: int = 2, largest: int = 3) -> tuple[int, ...]:
        """Leading dimensions (batch, heads): none up to `most` of them."""
        return tuple(self.r.randint(1, largest) for _ in range(self.r.randint(0, most)))

    def dtype(self, p64: float = 0.4) -> torch.dtype:
        return torch.float64 if self.chance(p64) else torch.float32

    def randn(self, *shape, dtype=torch.float32, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=self.g, dtype=torch.float64) * scale + shift).to(dtype)

    def mask(self, *shape, empty_rows: bool = False) -> torch.Tensor:
        """A random bool mask (True = may attend); every row keeps a key unless `empty_rows`, then some rows keep
        none."""
        m = torch.rand(*shape, generator=self.g) < self.uniform(0.2, 0.9)
        first = torch.randint(0, shape[-1], shape[:-1], generator=self.g)
        m |= torch.nn.functional.one_hot(first, shape[-1]).bool()
        if empty_rows:
            m &= (torch.rand(*shape[:-1], 1, generator=self.g) > 0.3)
        return m


@dataclass
class Call:
    """One call of a part: a function's arguments, or a module's constructor arguments, its parameters (by the
    contract's names; None: as constructed) and its forward's arguments."""

    part: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    ctor: tuple | None = None
    ctor_kwargs: dict = field(default_factory=dict)
    state: dict | None = None
    about: str = ""             # what is special about this input
    last_rows: int | None = None    # the grader reads each output's last rows only (an answer too large to send)

    @property
    def made(self) -> tuple:
        """A module's constructor arguments (none for a function)."""
        return self.ctor or ()

    def __str__(self) -> str:
        about = f" ({self.about})" if self.about else ""
        if self.ctor is None:
            return f"{self.part}({_args(self.args, self.kwargs)}){about}"
        state = "with drawn weights" if self.state else "as constructed"
        made = _args(self.made, self.ctor_kwargs)
        return f"{self.part}({made}), {state}, called on ({_args(self.args, self.kwargs)}){about}"


def _show(v) -> str:
    if isinstance(v, torch.Tensor):
        kind = str(v.dtype).removeprefix("torch.")
        return f"{kind} tensor of shape {tuple(v.shape)}" + ("" if v.device.type == "cpu" else f" on {v.device}")
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, torch.device):
        return repr(str(v))
    return repr(v)


def _args(args, kwargs) -> str:
    return ", ".join([*map(_show, args), *(f"{k}={_show(v)}" for k, v in kwargs.items())])


@dataclass
class Promises:
    """What a part's notebook promises beyond its own rules, which the families check on every part alike
    (autograder.verdict.suites.families): the floating dtypes beyond float32 and float64 its tensor arguments may
    have, each answered at its own precision, with the calls where a lower precision loses the most (positions past
    256, scores near 1e3, rows near 1e4: `precise`, checked at every grading in each of those dtypes and, for a module,
    after `.to(torch.float64)`); whether gradients reach every floating argument and every parameter; and the edge
    calls every grading holds (one key, one head, width 1, length 1, the largest sizes)."""

    module: bool = False                 # an nn.Module (made, given a state, then called)
    takes: str = "floats"                # what its calls pass: "floats" (floating tensors), "tensors", "sizes"
    low_precision: tuple = ()
    # each entry of an answer in a lower dtype is the truth rounded once, from float32 inside (rope's rotation): within
    # one unit in its own last place, not only within the dtype's error at the answer's largest entry
    rounded_once: bool = False
    differentiable: bool = True
    meta: bool = True                    # answers on the "meta" device (a Triton kernel needs a device's memory)
    edges: Callable[[Draw], list[Call]] | None = None
    precise: Callable[[Draw], list[Call]] | None = None


@dataclass
class Part:
    draw: Callable[[Draw], Call]
    truth: Callable[[Call], Any]                       # the answer in float64 (or exactly)
    plain: Callable[[Call], Any] | None = None         # a plain computation at the answer's precision
    vary: Callable[[Call, Draw], Call] | None = None   # the same sizes, other values or arguments
    # (a module's state_dict, the contract's state by the contract's names) -> that state by the module's own names
    rename: Callable[[dict, dict], dict] | None = None
    # an absolute error the call's conditioning allows any order of computation (large scores, large angles)
    slack: Callable[[Call], float] | None = None
    # the answer in float64 by plain torch operations, made ready (weights loaded) to run again under random rounding
    # (checks.rounded_runs): what the call's conditioning makes of rounding errors (a LayerNorm over a row whose
    # entries nearly agree)
    rounded: Callable[[Call], Callable[[], Any]] | None = None
    promises: Promises = field(default_factory=Promises)


def at_call_precision(values: Callable[[Call, torch.dtype], Any]) -> Callable[[Call], Any]:
    """A module's plain computation (`Part.plain`) from `values(call, dtype)`: in float64 on a call in float64 (the
    module moved there), else in float32. float32's on every call would let a module that computes in float32
    whatever its dtype pass once moved to float64."""
    def plain(c: Call):
        tensors = [*c.args, *(c.state or {}).values()]
        first = next((t.dtype for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
        return values(c, torch.float64 if first == torch.float64 else torch.float32)
    return plain


# -- running a call --------------------------------------------------------------------------------------------
# {"raised": type name, "mro": [names], "message": its first line} or {"first", "second", "args_after": [[...], [...]]}
Outcome = dict


def made_here(ns: dict, call: Call, seed: int = 0, rename=None):
    """The function `call` calls, or its module made and given its state, from the code of namespace `ns`."""
    target = ns[call.part]
    if call.ctor is not None:
        torch.manual_seed(seed)
        target = target(*call.ctor, **call.ctor_kwargs)
        if call.state is not None:
            state = rename(target.state_dict(), call.state) if rename else call.state
            missing = set(state) - set(target.state_dict())
            if missing:
                raise KeyError(f"no parameters {sorted(missing)}")
            target.load_state_dict(state, strict=False)
    return target


def run_here(ns: dict, call: Call, seed: int = 0, rename=None, family: str | None = None) -> Outcome:
    """`call` on the code of namespace `ns`, in this process (course code, or a mutant of it), as the learner's worker
    makes it (autograder.inside.calls.call_twice, or as one `family` of checks calls it: call_family)."""
    try:
        target = made_here(ns, call, seed, rename)
        if family is not None:
            return call_family(target, call.args, call.kwargs, family, last_rows=call.last_rows)
        return call_twice(target, call.args, call.kwargs, last_rows=call.last_rows)
    except Exception as e:  # noqa: BLE001 - the part's exception is its answer here
        return raised(e)


def made_there(learner, call: Call, rename=None):
    """The learner's module that `call` calls, made in its worker and given the call's state (None for a function)."""
    from .checks import load_state

    if call.ctor is None:
        return None
    proxy = learner.new(call.part, *call.ctor, **call.ctor_kwargs)
    if call.state is not None:
        load_state(proxy, rename(proxy.state_dict(), call.state) if rename else call.state, call.part,
                   contract=call.state)
    return proxy


def run_learner(learner, call: Call, rename=None, family: str | None = None) -> Outcome:
    """`call` on the learner's code through its worker (the same two calls as `run_here`, or the `family`'s)."""
    from autograder.verdict.learner import LearnerError

    try:
        proxy = made_there(learner, call, rename)
        if proxy is None:
            res = learner.twice(call.part, *call.args, family=family, last_rows=call.last_rows, **call.kwargs)
        else:
            res = proxy.twice(*call.args, family=family, last_rows=call.last_rows, **call.kwargs)
    except LearnerError as e:
        return learner_raised(e)
    return res if isinstance(res, dict) else {}


def learner_raised(e) -> Outcome:
    """The outcome of a call whose learner code raised (a LearnerError from its worker)."""
    return {"raised": e.type, "mro": list(e.mro), "message": first_line(e.message)}


# -- judging an answer -----------------------------------------------------------------------------------------
def _items(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _allowed(truth: torch.Tensor, dtype, baselines: list, slack: float) -> float:
    """checks.allowed_error with the baselines of `truth`'s shape, plus `slack`."""
    same_shape = [b for b in baselines if isinstance(b, torch.Tensor) and b.shape == truth.shape]
    return allowed_error(truth, dtype, same_shape) + slack


def judge(call: Call, got: Outcome, expected: Outcome, truth=None, plain=None, slack: float = 0.0,
          rounded: list | tuple = ()) -> str | None:
    """What is wrong with the answer `got` to `call` (None: nothing), given the reference's `expected` answer and,
    for values, the float64 `truth` and the `plain` and `rounded` computations that set the allowed error."""
    if "raised" in expected:
        if "raised" not in got:
            return f"it should raise {expected['raised']}, but it returned"
        if expected["raised"] not in got.get("mro", [got["raised"]]):
            return f"it should raise {expected['raised']}, but it raised {got['raised']}"
        return None
    if "raised" in got:
        return f"it raised {got['raised']}"
    first, second, after = got.get("first"), got.get("second"), got.get("args_after")
    want = _items(expected["first"])
    have = _items(first)
    if isinstance(expected["first"], (tuple, list)) != isinstance(first, (tuple, list)) or len(have) != len(want):
        kind = f"a tuple of {len(want)}" if isinstance(expected["first"], (tuple, list)) else "a tensor"
        return f"it should return {kind}, but it returned {_kind(first)}"
    truths = _items(truth) if truth is not None else want
    plains = _items(plain) if plain is not None else [None] * len(want)
    for i, (h, w, t, p) in enumerate(zip(have, want, truths, plains)):
        what = "the output" if len(want) == 1 else f"output {i + 1} of {len(want)}"
        if not isinstance(w, torch.Tensor):
            if h != w:
                return f"{what} is {h!r}, expected {w!r}"
            continue
        if not isinstance(h, torch.Tensor):
            return f"{what} should be a tensor, but it is {_kind(h)}"
        for attr in ("shape", "dtype"):
            if getattr(h, attr) != getattr(w, attr):
                return f"{what} has {attr} {_show_attr(getattr(h, attr))}, expected {_show_attr(getattr(w, attr))}"
        if h.device.type != w.device.type:
            return f"{what} is on the device {h.device.type!r}, expected {w.device.type!r} (the device asked for)"
        if w.device.type == "meta":
            continue
        if not w.is_floating_point():
            if not torch.equal(h, w):
                wrong = int((h != w).sum())
                return f"{what} differs from the right one in {wrong} of {w.numel()} entries{where(h, w)}"
            continue
        t = t if isinstance(t, torch.Tensor) else w
        if torch.isnan(h).any() and not torch.isnan(t).any():
            return f"{what} contains NaN (in {int(torch.isnan(h).sum())} of {h.numel()} entries)"
        allowed = _allowed(t, w.dtype, [w, p, *_output(rounded, i)], slack)
        err = max_error(h, t)
        if err > allowed:
            return f"{what} is wrong: largest error {err:.3g} (allowed {allowed:.3g}){where(h, t)}"
    names = [f"its argument {i + 1}" for i in range(len(call.args))] + [f"its argument {k}" for k in call.kwargs]
    for mode, args in zip(("with autograd off", "with autograd on"), after or []):
        for name, sent, left in zip(names, [*call.args, *call.kwargs.values()], args):
            if isinstance(sent, torch.Tensor) and not (isinstance(left, torch.Tensor) and left.shape == sent.shape
                                                       and torch.equal(left, sent)):
                return f"it changed {name} in place ({mode})"
    if not after or len(after) != 2:
        return "the grader could not read its arguments back"
    for a, b in zip(_items(first), _items(second)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.device.type != "meta" and (
                a.shape != b.shape or max_error(a, b) > 1e-6 * (1 + float(a.double().abs().max() if a.numel() else 0))):
            return "it gave another answer with autograd on than off, on the same inputs"
    return None


def _output(answers, i: int) -> list:
    """Output `i` of each of `answers`."""
    return [_items(a)[i] for a in answers if len(_items(a)) > i]


def _kind(v) -> str:
    return f"a tuple of {len(v)}" if isinstance(v, (tuple, list)) else f"a {type(v).__name__}"


def _show_attr(v) -> str:
    return str(tuple(v)) if isinstance(v, torch.Size) else str(v).removeprefix("torch.")


# -- what a suite draws per grading ------------------------------------------------------------------------------
def revalue(call: Call, d: Draw) -> Call:
    """The same call with new values in every tensor (same shapes and dtypes; masks and token ids stay such): an
    answer kept from the call before, by the sizes of its arguments, shows."""
    def new(v):
        if not isinstance(v, torch.Tensor):
            return v
        if v.dtype == torch.bool:
            return d.mask(*v.shape) if v.dim() else v
        if not v.is_floating_point():
            return torch.randint(0, int(v.max()) + 1 if v.numel() else 1, v.shape, generator=d.g, dtype=v.dtype)
        if v.numel() > 1 and float(v.double().std()) == 0:
            return v.clone()                 # a constant (a zero bias) stays what it is
        scale = float(v.double().std()) if v.numel() > 1 else 1.0
        return d.randn(*v.shape, dtype=v.dtype, scale=scale, shift=float(v.double().mean()) if v.numel() else 0.0)
    state = None if call.state is None else {k: new(v) for k, v in call.state.items()}
    args = tuple(new(a) for a in call.args)
    return dataclasses.replace(call, args=args, kwargs={k: new(v) for k, v in call.kwargs.items()}, state=state,
                               about=", ".join(filter(None, (call.about, "the sizes of the call before"))))


def drawn_calls(part: Part, seed: int, count: int, edges: bool = True) -> list[Call]:
    """The part's edge calls (its promises' `edges`: in every grading, their values from `seed`; none without
    `edges`), then `count` calls of `part` drawn from `seed`, each second one a variation of the one before (by
    default the same sizes with other values). A mistake that an edge shows loses its points at every grading; the
    drawn calls only add to them."""
    calls: list[Call] = list(part.promises.edges(Draw(seed * 1000 - 1))) if part.promises.edges and edges else []
    drawn: list[Call] = []
    for i in range(count):
        d = Draw(seed * 1000 + i)
        drawn.append((part.vary or revalue)(drawn[-1], d) if drawn and i % 2 else part.draw(d))
    return calls + drawn


@dataclass
class Expected:
    """What a call should give: the reference's answer, the truth, the plain answer, the conditioning's slack and the
    truth computed under random rounding."""

    outcome: Outcome
    truth: Any = None
    plain: Any = None
    slack: float = 0.0
    rounded: list = field(default_factory=list)

    def judge(self, call: Call, got: Outcome) -> str | None:
        return judge(call, got, self.outcome, self.truth, self.plain, self.slack, self.rounded)


def expected_of(part: Part, call: Call, ns: dict, family: str | None = None) -> Expected:
    """What `call` should give, from the reference (course code in `ns`, in this trusted process, called as `family`
    calls it where that changes its answer) and the oracles."""
    outcome = run_here(ns, call, rename=part.rename, family=family)
    if "raised" in outcome or family == "meta":         # on "meta", shapes, dtypes and devices alone
        return Expected(outcome)
    rows = call.last_rows
    cut = (lambda x: tail(x, rows)) if rows else (lambda x: x)
    return Expected(outcome, cut(part.truth(call)), cut(part.plain(call)) if part.plain else None,
                    part.slack(call) if part.slack else 0.0, [cut(r) for r in _rounded(part, call, outcome)])


def _rounded(part: Part, call: Call, outcome: Outcome) -> list:
    """`part.rounded` of `call` under random rounding at the precision of the reference's answer, from a generator of
    the call's own (drawn for this grading, or fixed): one call, one allowance."""
    floats = [x for x in _items(outcome.get("first")) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    if part.rounded is None or not floats:
        return []
    label = int.from_bytes(hashlib.blake2b(str(call).encode(), digest_size=6).digest(), "little")
    return rounded_runs(part.rounded(call), floats[0].dtype, torch.Generator().manual_seed(label))


def same_outcome(a: Outcome, b: Outcome, expected: Expected) -> bool:
    """Whether two answers to one call are the same: the same exception, or outputs that are each within the
    allowed error of each other, or ten times nearer each other than to the truth, and the arguments left the same
    way (within the allowed error)."""
    from autograder.verdict.known import distance

    if "raised" in a or "raised" in b:
        return ("raised" in a and "raised" in b and b["raised"] in a.get("mro", [a["raised"]])
                and a.get("message") == b.get("message"))
    xs, ys = _items(a.get("first")), _items(b.get("first"))
    truths = _items(expected.truth) if expected.truth is not None else _items(expected.outcome.get("first"))
    if len(xs) != len(ys):
        return False
    for i, (x, y, t) in enumerate(zip(xs, ys, truths + [None] * len(xs))):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            if x != y:
                return False
            continue
        if x.dtype != y.dtype or x.device.type != y.device.type:
            return False
        if isinstance(t, torch.Tensor) and t.shape == x.shape:
            allowed = _allowed(t, x.dtype, _output(expected.rounded, i), expected.slack)
            apart, wrong_by = distance(x, y), distance(x, t)
            if not (apart <= allowed or (math.isfinite(wrong_by) and apart <= 0.1 * wrong_by)):
                return False
        elif distance(x, y) > 0:
            return False
    # Arguments as the two calls left them: the same within the error allowed an output of their dtype (two
    # processes may round a value written in place differently in its last bits).
    after_a, after_b = a.get("args_after") or [], b.get("args_after") or []
    return all((apart := distance(x, y)) == 0 or apart <= _allowed(y, x.dtype, [], expected.slack)
               for ma, mb in zip(after_a, after_b) for x, y in zip(ma, mb)
               if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor))


def explain_outcome(learner, part: Part, call: Call, got: Outcome, expected: Expected):
    """(causes, ruled out): the known mistakes whose answer to the learner's last call (`call`, after the same calls
    before it) is the learner's `got`, and those wrong here whose answer is not (autograder.verdict.known)."""
    from autograder.verdict import known

    matched: list[str] = []
    ruled_out: list[str] = []
    for bug, theirs in known.replay(learner.assignment or "", learner.calls, len(learner.calls) - 1, part.rename):
        if theirs["differed"]:
            ruled_out.append(bug.cause)
            continue
        right_here = expected.judge(call, theirs) is None     # then it cannot explain this failure on its own
        (matched if same_outcome(got, theirs, expected) and not right_here else ruled_out).append(bug.cause)
    return matched, ruled_out


def check_drawn(learner, ns: dict, name: str, part: Part, seed: int, count: int):
    """The learner's `name` meets its contract on `count` calls drawn for this grading."""
    from .checks import Diagnosis

    for call in drawn_calls(part, seed, count):
        expected = expected_of(part, call, ns)
        got = run_learner(learner, call, part.rename)
        wrong = expected.judge(call, got)
        if wrong:
            raise Diagnosis(f"on an input drawn for this grading, {call}: {wrong}",
                            *explain_outcome(learner, part, call, got, expected))


def scores_slack(call: Call, inside: torch.dtype | None = None) -> float:
    """What any order of computation may err by on softmax attention whose scores are large: a score is only known to
    eps * |score| at the precision it is computed at (the arguments', unless the notebook says `inside`), and so each
    weight, times |v|."""
    q, k, v = call.args[:3]
    if not q.numel() or not k.numel() or not v.numel():
        return 0.0
    scores = (q.double() @ k.double().transpose(-2, -1)).abs().max() / math.sqrt(q.shape[-1])
    return 4 * torch.finfo(inside or q.dtype).eps * float(scores) * float(v.double().abs().max())
