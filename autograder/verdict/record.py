"""The verdict as data: one hidden test's outcome (`Check`), a graded cell's (`Verdict`), a notebook's (`Grading`),
stored once per graded notebook as a JSON file beside nbgrader's folders (`path`, `store`, `load`), whether the
grader could grade it or not (`gradable`, with the fault); the graded cell's output, the gradebook comment, the
feedback, the check service's answer, classgrade's decision and the class report are all rendered from it, and
nothing reads their text back; and the one error that says the grader, not the learner, failed (`GraderFault`)."""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path


class GraderFault(RuntimeError):
    """The grader could not do its part (no sandbox, a worker that failed before learner code ran, an impossible
    measurement): the grading fails visibly, nbgrader records nothing, and it is never the learner's zero."""


GRADED, FLAGGED = "graded", "needs manual grading"
RECORD = "autograder"          # the record of the notebook being graded, in nbgrader's resources while it is graded
FOLDER = "verdicts"            # beside nbgrader's `autograded`: verdicts/<learner>/<asg>/<notebook>.json


def path(grading_dir: str | Path, learner: str, assignment: str, notebook: str) -> Path:
    """Where the record of a learner's graded notebook is stored: outside nbgrader's `autograded` folder, which nbgrader
    removes when a grading fails, so that a grading the grader could not do keeps its record too."""
    return Path(grading_dir) / FOLDER / learner / assignment / f"{notebook}.json"


VERSION = 4       # of the record's schema (1: no version, `refused`, `cause_ids`; 2: no `kind`, no `uncounted`;
#                   3: no `unanswered`)
# A check's kind: values on calls every grading makes, on calls drawn for it, a measure, a family's own promise
FIXED, DRAWN, MEASURED, FAMILY = "fixed", "drawn", "measured", "family"
_STRINGS = {"type": "array", "items": {"type": "string"}}
_CHECK = {"type": "object", "required": ["label", "weight", "passed"], "additionalProperties": False, "properties": {
    "label": {"type": "string"}, "weight": {"type": "number", "minimum": 0}, "passed": {"type": "boolean"},
    "diagnosis": {"type": ["string", "null"]}, "together": {"type": "boolean"}, "causes": _STRINGS,
    "cause_ids": _STRINGS, "ruled_out": _STRINGS, "refused": _STRINGS,
    "kind": {"enum": [FIXED, DRAWN, MEASURED, FAMILY]}, "uncounted": {"type": "boolean"},
    "unanswered": {"type": "boolean"}}}
_VERDICT = {"type": "object", "required": ["grade_id", "points", "score", "status", "checks", "notes"],
            "additionalProperties": False, "properties": {
                "grade_id": {"type": "string"}, "points": {"type": "number", "minimum": 0},
                "score": {"type": "number", "minimum": 0}, "status": {"enum": [GRADED, FLAGGED]},
                "checks": {"type": "array", "items": _CHECK}, "notes": _STRINGS}}
# The stored record (Grading.to_dict), validated whenever it is written or read: every consumer reads this, nothing
# else (the autograded notebook's text, the feedback, the service's answer, classgrade's decision, the report).
SCHEMA = {"type": "object", "required": ["version", "gradable", "verdicts", "notes", "fault"], "properties": {
    "version": {"const": VERSION}, "gradable": {"type": "boolean"},
    "verdicts": {"type": "object", "additionalProperties": _VERDICT}, "notes": _STRINGS,
    "fault": {"type": ["string", "null"]}, "profile": {"type": "object"}, "structure": {"type": "object"},
    # the notebook's run, in the sandbox (autograder.pipeline.run), and what reading the submission found wrong in it
    "protections": {"type": "object", "additionalProperties": {"type": "boolean"}},
    "execute_s": {"type": "number", "minimum": 0}, "problems": _STRINGS},
    "additionalProperties": False}


class InvalidRecord(ValueError):
    """A record that does not meet the schema (the grader's own bug, or a file changed by hand)."""


def validate(rec) -> dict:
    """`rec` as the schema says it must be, else InvalidRecord saying where it is not."""
    import jsonschema

    try:
        jsonschema.validate(rec, SCHEMA)
    except jsonschema.ValidationError as e:
        where = "/".join(map(str, e.absolute_path)) or "the record"
        raise InvalidRecord(f"{where}: {e.message}") from None
    if rec["gradable"] != (rec["fault"] is None):
        raise InvalidRecord("a record is gradable exactly when it holds no fault")
    for gid, v in rec["verdicts"].items():
        if v["grade_id"] != gid or v["score"] > v["points"] + 1e-9:
            raise InvalidRecord(f"verdicts/{gid}: its grade_id or its score ({v['score']} of {v['points']})")
    return rec


def upgraded(rec: dict) -> dict:
    """A record of an earlier version in this version's form (version 1: no version, no refusals, no cause ids;
    version 2: no kind of check, none uncounted; version 3: no check says its part was left unwritten, which an
    earlier grading told only in its diagnosis's words: those records keep `unanswered` false)."""
    if isinstance(rec, dict) and rec.get("version", 2) in (2, 3) and isinstance(rec.get("verdicts", {}), dict):
        rec = {**rec, "version": VERSION, "verdicts": {
            g: {**v, "checks": [{"refused": [], "cause_ids": [], "kind": FIXED, "uncounted": False,
                                 "unanswered": False, **c} for c in v.get("checks", [])]}
            for g, v in rec.get("verdicts", {}).items()}}
    return rec


def store(where: Path, rec: dict):
    """Write a record whole (a reader sees the previous file or this one, never a part), once it meets the schema."""
    validate(rec)
    where.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".record-", dir=where.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(rec, f)
    os.replace(tmp, where)


def load(where: Path) -> dict | None:
    """The record stored at `where`, validated (None when there is none, or what is there does not meet the schema:
    the grading is then as one never stored)."""
    try:
        return validate(upgraded(json.loads(where.read_text())))
    except (OSError, ValueError):
        return None


@dataclass
class Check:
    """One hidden test's outcome."""

    label: str
    weight: float
    passed: bool
    diagnosis: str | None = None  # what the test observed
    together: bool = False        # the part with the learner's own parts it uses (not the course's)
    causes: list[str] = field(default_factory=list)     # known mistakes whose answers the learner's answer is
    ruled_out: list[str] = field(default_factory=list)  # known mistakes wrong on this test's input that it is not
    refused: list[str] = field(default_factory=list)    # library versions of the exercise its code reached (by name)
    cause_ids: list[str] = field(default_factory=list)  # the names of the known mistakes `causes` says, in order
    kind: str = FIXED             # FIXED, DRAWN, MEASURED or FAMILY (above)
    uncounted: bool = False       # passed, yet not counted: a drawn check where a fixed one failed (hidden.score)
    unanswered: bool = False      # failed because the part is the release's stub (it raises NotImplementedError)


UNCOUNTED = ("on inputs drawn for this grading: not counted, because the checks every grading makes found this part "
             "wrong (whether this grading's draws showed it too does not change the score)")


@dataclass
class Verdict:
    grade_id: str
    points: float
    score: float = 0.0
    status: str = GRADED
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)    # why the score is 0 or why it is flagged

    @property
    def passed(self) -> list[str]:
        return [c.label for c in self.checks if c.passed]

    @property
    def unanswered(self) -> bool:
        """The part is not written yet: a check failed on the release's stub."""
        return any(c.unanswered and not c.passed for c in self.checks)

    @property
    def causes(self) -> list[str]:
        """The causes the evidence points to: known mistakes some failed test's answer matched and none ruled out,
        those that more tests matched first (autograder.verdict.known)."""
        failed = [c for c in self.checks if not c.passed]
        ruled_out = {r for c in failed for r in c.ruled_out}
        counts: dict[str, int] = {}
        for c in failed:
            for cause in c.causes:
                if cause not in ruled_out:
                    counts[cause] = counts.get(cause, 0) + 1
        return sorted(counts, key=lambda k: -counts[k])

    def _groups(self) -> list[tuple[str | None, list[Check]]]:
        """The failed tests by the cause named for them; each test no cause explains on its own (cause None), those
        that observed the same thing together."""
        causes = self.causes
        groups: dict[tuple[str, str], list[Check]] = {("cause", c): [] for c in causes}
        for c in self.checks:
            if not c.passed and c.diagnosis:
                cause = next((k for k in causes if k in c.causes), None)
                groups.setdefault(("cause", cause) if cause else ("seen", c.diagnosis), []).append(c)
        return [(key if kind == "cause" else None, v) for (kind, key), v in groups.items() if v]

    @property
    def failed(self) -> list[str]:
        """What the learner reads: the notes, each cause named, then what each failed test observed, once."""
        seen = [c.diagnosis for _, checks in self._groups() for c in checks]
        return list(dict.fromkeys([*self.notes, *self.causes, *(d for d in seen if d)]))

    def costs(self) -> list[tuple[str | None, float | None, list[str]]]:
        """(the cause named, or None; the points its tests cost, or None when the score does not come from the
        tests, a note set it; what those tests observed, once each)."""
        total = sum(c.weight for c in self.checks)
        uncounted = [c for c in self.checks if c.uncounted]
        groups = self._groups() + ([(None, uncounted)] if uncounted else [])
        rows = [(cause, sum(self.points * c.weight / total if total else 0.0 for c in checks),
                 list(dict.fromkeys(c.diagnosis or UNCOUNTED for c in checks)))
                for cause, checks in groups]
        from_tests = abs(sum(r[1] for r in rows) - (self.points - self.score)) < 0.011
        return [(cause, round(cost, 2) if from_tests else None, seen) for cause, cost, seen in rows]

    def text(self, given: float | None = None) -> str:
        """The graded cell's output: the score, the notes, what passed, each cause the evidence names with what its
        tests observed, and each other failed test once, with what it cost; `given`: the score the instructor gave
        since, said in place of the grader's."""
        if given is not None:
            head = (f"{self.grade_id}: {given:g} / {self.points:g} points (given by your instructor; the grader's "
                    f"automatic score: {self.score:g})")
        else:
            head = f"{self.grade_id}: {self.score:g} / {self.points:g} points" + (
                "" if self.status == GRADED else f" ({self.status})")
        lines = [head]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  passed: {p}" for p in self.passed]
        for cause, cost, seen in self.costs():
            price = "" if cost is None else f" (-{cost:g} points)"
            if cause is None:
                lines.append(f"  FAILED{price}: {seen[0]}")
            else:
                lines.append(f"  FAILED{price}: {cause}")
                lines += [f"    seen: {d}" for d in seen]
        return "\n".join(lines)

    def comment(self) -> str:
        found = [*self.notes]
        for cause, cost, seen in self.costs():
            price = "" if cost is None else f" (-{cost:g} points)"
            found.append(f"{cause or seen[0]}{price}")
        return "; ".join(found) if found else f"all hidden tests passed ({self.score:g}/{self.points:g})"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Verdict:
        return cls(**{**d, "checks": [Check(**c) for c in d.get("checks", [])]})


@dataclass
class Grading:
    """The verdicts of one notebook, with what the grading could not do (`fault`: then it is not `gradable`, and the
    verdicts are not the learner's) or measure (`notes`)."""

    verdicts: dict[str, Verdict]
    notes: list[str] = field(default_factory=list)
    fault: str | None = None
    log: str = ""
    profile: dict = field(default_factory=dict)    # where the suite's time went (s), its largest frame (bytes)
    # graded cell -> {"name", "differences": [...], "html"} or {"name", "note"}: feedback, not a score
    structure: dict = field(default_factory=dict)

    @property
    def gradable(self) -> bool:
        return self.fault is None

    def to_dict(self) -> dict:
        return {"version": VERSION, "gradable": self.gradable,
                "verdicts": {g: v.to_dict() for g, v in self.verdicts.items()},
                "notes": self.notes, "fault": self.fault, "profile": self.profile, "structure": self.structure}

    @classmethod
    def from_dict(cls, d: dict) -> Grading:
        return cls({g: Verdict.from_dict(v) for g, v in d.get("verdicts", {}).items()}, list(d.get("notes", [])),
                   d.get("fault"), profile=dict(d.get("profile", {})), structure=dict(d.get("structure", {})))
