"""The known answers of each exercise, and the differential diagnosis that names a cause only on evidence.

`examples/variants/<assignment>.py` lists, as `VARIANTS`, correct answers written differently from the reference
(`Correct`) and typical mistakes (`Bug`, each with the `cause` a learner reads when their answer is that mistake).
When a hidden test finds an answer wrong, `explain` runs every known mistake of the part that gave it on the very
call that gave it (course code, here in the trusted process) and compares: a mistake whose answer is the learner's
(and not the right one) is named; one that gives something else there, the right answer included, is ruled out:
one mistake must explain every failure it is named for. The verdict names the causes
that some failed check matched and none ruled out (autograder.verdict.record.Verdict.causes); a failure no known
mistake explains says only what it observed.
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import re
import time
from dataclasses import dataclass, field

import torch

from autograder import ROOT
from autograder.inside.calls import call_family, call_twice, fresh, raised
from autograder.notebooks import learner_cells, read, run_cell, source_notebook
from autograder.verdict.learner import Origin, origin

VARIANTS_DIR = ROOT / "examples" / "variants"


@dataclass
class Correct:
    name: str
    cells: dict[str, str]
    about: str = ""


@dataclass
class Bug:
    name: str
    cells: dict[str, str]
    fails: dict[str, str]           # graded cell id -> text its feedback must contain
    about: str = ""
    cell_errors: list = field(default_factory=list)
    # graded cell id -> text: a later part that is right and uses this wrong one loses only its `together`
    # test (graded with the learner's own parts), whose diagnosis contains the text
    together: dict[str, str] = field(default_factory=dict)
    cause: str = ""                 # what the learner reads when the evidence points to this mistake
    # what it gets wrong: "value" (what a part computes, which the contract sees), "promise" (right values, but a
    # promise every part keeps is broken, which the families see: a result handed out twice, say), "speed", "memory"
    # or "library" (a library version of the part: right values, refused where it runs)
    kind: str = "value"


KINDS = ("value", "promise", "speed", "memory", "library")


def module(assignment: str):
    """The module examples/variants/<assignment>.py (None when there is none)."""
    path = VARIANTS_DIR / f"{assignment}.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"variants_{assignment}", path)
    assert spec is not None and spec.loader is not None      # a .py file
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load(assignment: str) -> list:
    mod = module(assignment)
    return list(mod.VARIANTS) if mod is not None else []


# -- differential diagnosis --------------------------------------------------------------------------------------
# A grading's replays stop after this much CPU time of the trusted process, in one thread (the kernel's count: a
# loaded machine stretches the wall time, not this); no cause is named past it. Each known mistake of the course,
# its whole notebook graded, takes at most 1.6 s of it on the 2-core machine (blockwise attention's).
REPLAY_CPU_S = 60.0
_SPENT = [0.0]


_LOADED: dict = {}


def load_cached(assignment: str) -> list:
    if assignment not in _LOADED:
        _LOADED[assignment] = load(assignment)
    return _LOADED[assignment]


def cause_ids(assignment: str, causes: list[str]) -> list[str]:
    """The names of the known mistakes whose causes are `causes` (the record keeps both: the text a learner reads,
    the name the class report groups by)."""
    by_cause = {v.cause: v.name for v in load_cached(assignment) if isinstance(v, Bug) and v.cause}
    return [by_cause.get(c, "") for c in causes]


def bugs(assignment: str, part: str) -> list[Bug]:
    """The known mistakes of `assignment` in the code of `part` (a cell that defines it), with a cause to name."""
    defines = re.compile(rf"^\s*(def|class)\s+{re.escape(part)}\b", re.M)
    return [v for v in load_cached(assignment) if isinstance(v, Bug) and v.cause
            and any(cell == part or defines.search(src) for cell, src in v.cells.items())]


def namespace(assignment: str, bug: Bug) -> dict | None:
    """The solution notebook's code with the mistake's cells in place of the reference's, executed afresh (so its
    state is the replay's own); None when it does not run."""
    ns: dict = {"__name__": f"known_{assignment}_{bug.name}"}
    try:
        for cell in learner_cells(read(source_notebook(assignment))):
            run_cell(bug.cells.get(cell["id"], cell["source"]), f"<{bug.name}:{cell['id']}>", ns)
    except Exception:  # noqa: BLE001 - a known mistake that does not even load explains no answer
        return None
    return ns


def _run(ns: dict, rec: dict, modules: dict, rename) -> dict:
    """One recorded call on the code of `ns`: its answer (as `contract.run_here` gives it)."""
    try:
        target = ns[rec["part"]]
        if rec.get("handle") is not None:
            held = modules.get(rec["handle"])
            if held is None:
                torch.manual_seed(0)
                held = modules[rec["handle"]] = [target(*rec.get("ctor", ()), **rec.get("ctor_kwargs", {})), None]
            if rec.get("state") is not None and held[1] is not rec["state"]:
                state = rename(held[0].state_dict(), rec["state"]) if rename else rec["state"]
                held[0].load_state_dict(state, strict=False)
                held[1] = rec["state"]
            target = held[0]
        if rec.get("twice") and rec.get("family"):
            return call_family(target, rec["args"], rec.get("kwargs", {}), rec["family"],
                               last_rows=rec.get("last_rows"))
        if rec.get("twice"):
            return call_twice(target, rec["args"], rec.get("kwargs", {}), last_rows=rec.get("last_rows"))
        with torch.no_grad():                       # on copies: a mistake may write into its arguments
            return {"first": target(*(fresh(a, False) for a in rec["args"]), **rec.get("kwargs", {}))}
    except Exception as e:  # noqa: BLE001 - the mistake's exception is its answer
        return raised(e)


def _rename(assignment: str, part: str):
    """How the contract's state of `part` is put into a module of other names (its suite's CONTRACT), if at all."""
    try:
        suite = importlib.import_module(f"autograder.verdict.suites.test_{assignment}")
    except ImportError:
        return None
    return getattr(getattr(suite, "CONTRACT", {}).get(part), "rename", None)


class _Replayer:
    """One known mistake given, in order, the calls of one part that the learner's code was given: its answers to
    the last few (a failed check asks about the call that just failed, or one a little before), and whether it ever
    answered otherwise than the learner's code did (then it is not what the learner wrote)."""

    KEEP = 16

    def __init__(self, ns: dict, part: str, rename):
        self.ns, self.part, self.rename = ns, part, rename
        self.modules: dict = {}
        self.done = 0
        self.answers: dict[int, dict] = {}
        self.differed = False

    def answer(self, calls: list, position: int) -> dict | None:
        if position < self.done and position not in self.answers:
            return None                                  # long passed: not kept
        for i in range(self.done, position + 1):
            rec = calls[i]
            if rec["part"] != self.part:
                continue
            if self.differed:
                break                                    # not what the learner wrote: no answer of it is evidence
            if rec.get("handle") is not None and rec.get("state") is None:
                continue                                 # a module's own weights (drawn, or trained): no evidence
            self.answers[i] = theirs = _run(self.ns, rec, self.modules, self.rename)
            if "answer" in rec and not _same_answer(rec["answer"], theirs, bool(rec.get("twice"))):
                self.differed = True
            for old in [k for k in self.answers if k < i - self.KEEP]:
                del self.answers[old]
        self.done = max(self.done, position + 1)
        return {} if self.differed else self.answers.get(position)


def _same_answer(mine, theirs: dict, twice: bool) -> bool:
    """Whether the learner's answer to a call is a known mistake's (to within 1e-3 of its size)."""
    if "raised" in theirs:
        return False                                     # the learner's code answered
    got = mine if twice else {"first": mine}
    pairs = list(zip(_flat(got.get("first")), _flat(theirs.get("first"))))
    if twice:
        pairs += [(a, b) for ma, mb in zip(got.get("args_after") or [], theirs.get("args_after") or [])
                  for a, b in zip(ma, mb)]
        pairs += list(zip(_flat(got.get("returned")), _flat(theirs.get("returned"))))
    for a, b in pairs:
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return False
        if isinstance(a, torch.Tensor):
            scale = size(b)
            if a.dtype != b.dtype or a.device.type != b.device.type or distance(a, b) > 1e-3 * (1 + scale):
                return False
    return len(_flat(got.get("first"))) == len(_flat(theirs.get("first")))


def _flat(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


_REPLAYERS: dict = {}


def replay(assignment: str, calls: list, position: int, rename=None) -> list[tuple[Bug, dict]]:
    """Each known mistake of the part called at `position` that answered every earlier call of that part as the
    learner's code did, given the same calls in order: (the mistake, its answer to that call). A mistake that answered
    some call otherwise is left out: the learner's code is not it."""
    if not 0 <= position < len(calls) or _SPENT[0] > REPLAY_CPU_S:
        return []
    started, threads = time.process_time(), torch.get_num_threads()
    part = calls[position]["part"]
    rename = rename or _rename(assignment, part)
    out = []
    torch.set_num_threads(1)        # no thread of a pool spinning on a loaded machine: CPU time is the work's
    try:
        for bug in bugs(assignment, part):
            key = (id(calls), assignment, bug.name, part)
            if key not in _REPLAYERS:
                ns = namespace(assignment, bug)
                _REPLAYERS[key] = _Replayer(ns, part, rename) if ns is not None and part in ns else None
            replayer = _REPLAYERS[key]
            answer = replayer.answer(calls, position) if replayer is not None else None
            if answer is not None:
                out.append((bug, {**answer, "differed": replayer.differed}))
    finally:
        torch.set_num_threads(threads)
        _SPENT[0] += time.process_time() - started
    return out


def size(t) -> float:
    """The largest finite magnitude in a tensor (0 for none, or no data)."""
    if not isinstance(t, torch.Tensor) or not t.numel() or t.device.type == "meta" or t.dtype == torch.bool:
        return 0.0
    return float(torch.nan_to_num(t.double(), nan=0.0, posinf=0.0, neginf=0.0).abs().max())


def distance(a, b) -> float:
    """The largest difference of two tensors of one shape (inf when they cannot be compared)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return float("inf")
    if a.device.type == "meta" or b.device.type == "meta" or not a.numel():
        return 0.0
    d = (a.double() - b.double()).abs()
    d = torch.where(torch.isnan(a.double()) & torch.isnan(b.double()), torch.zeros_like(d), d)
    return float(d.nan_to_num(float("inf")).max())


def explain(actual, expected, allowed: float = 0.0) -> tuple[list[str], list[str]]:
    """(causes the evidence points to, causes it rules out) for the learner's wrong answer `actual` to a call whose
    right answer is `expected` (to within `allowed`): a known mistake is named when it is wrong there too and the
    learner's answer is its answer (within `allowed`, or ten times nearer to it than to the right one)."""
    o = origin(actual)
    if o is None or not isinstance(expected, torch.Tensor):
        return [], []
    answers = replay(o.assignment, o.calls, o.position)
    matched, ruled_out = judge_answers([(bug, _pick(answer.get("first"), o.index)) for bug, answer in answers
                                        if not answer["differed"]], actual, expected, allowed)
    return matched, ruled_out + [bug.cause for bug, answer in answers if answer["differed"]]


def _pick(first, index):
    return first[index] if index is not None and isinstance(first, (tuple, list)) and len(first) > index else first


def judge_answers(answers, actual, expected, allowed: float) -> tuple[list[str], list[str]]:
    matched: list[str] = []
    ruled_out: list[str] = []
    wrong_by = distance(actual, expected)
    for bug, theirs in answers:
        if not isinstance(theirs, torch.Tensor):
            continue                                  # it raised where the learner's answered: another test's concern
        mine = distance(actual, theirs)
        right_here = distance(theirs, expected) <= allowed      # then it cannot explain this failure on its own
        same = mine <= allowed or (math.isfinite(wrong_by) and mine <= 0.1 * wrong_by)
        (matched if same and not right_here else ruled_out).append(bug.cause)
    return matched, ruled_out


def explain_purity(answer, argument: int, mode: int) -> tuple[list[str], list[str]]:
    """(causes, ruled out) where the learner's call that gave `answer` changed its argument `argument` in place (in
    the call with autograd off, `mode` 0, or on, 1): the known mistakes that change it too, and those that do not."""
    o = origin(answer)
    if o is None:
        return [], []
    sent = o.calls[o.position]["args"][argument]
    matched: list[str] = []
    ruled_out: list[str] = []
    for bug, theirs in replay(o.assignment, o.calls, o.position):
        if theirs["differed"]:
            ruled_out.append(bug.cause)
            continue
        after = theirs.get("args_after")
        left = after[mode][argument] if isinstance(after, list) and len(after) > mode else sent
        (ruled_out if distance(left, sent) == 0 else matched).append(bug.cause)
    return matched, ruled_out


def explain_raised(o: Origin | None, raised: str | None) -> tuple[list[str], list[str]]:
    """(causes, ruled out) where an exception was due and the learner's code raised `raised` (None: it answered):
    the known mistakes that do the same there, and those that do not."""
    if o is None:
        return [], []
    matched: list[str] = []
    ruled_out: list[str] = []
    for bug, answer in replay(o.assignment, o.calls, o.position):
        if answer["differed"]:
            ruled_out.append(bug.cause)
            continue
        theirs = answer.get("raised")
        same = theirs is None if raised is None else theirs is not None and theirs in answer.get("mro", [theirs]) \
            and raised in answer.get("mro", [])
        (matched if same else ruled_out).append(bug.cause)
    return matched, ruled_out
