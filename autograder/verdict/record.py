"""The verdict as data: one hidden test's outcome (`Check`), a graded cell's (`Verdict`), a notebook's (`Grading`),
kept in the autograded notebook's metadata (`RECORD`), from which the graded cell's output, the gradebook comment,
the feedback and the class report are all rendered; and the one error that says the grader, not the learner, failed
(`GraderFault`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


class GraderFault(RuntimeError):
    """The grader could not do its part (no sandbox, a worker that failed before learner code ran, an impossible
    measurement): the grading fails visibly, nbgrader records nothing, and it is never the learner's zero."""


GRADED, FLAGGED = "graded", "needs manual grading"
RECORD = "autograder"          # notebook metadata: the grading's record (Grading.to_dict, protections, notes)


def record(nb) -> dict:
    """The grading record a graded notebook holds ({} when none)."""
    rec = nb.metadata.get(RECORD, {})
    return rec if isinstance(rec, dict) else {}


@dataclass
class Check:
    """One hidden test's outcome."""

    label: str
    weight: float
    passed: bool
    diagnosis: str | None = None
    together: bool = False        # the part with the learner's own parts it uses (not the course's)


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
    def failed(self) -> list[str]:
        """What the learner reads: the notes, then each failed test's diagnosis once."""
        return list(dict.fromkeys([*self.notes, *(c.diagnosis for c in self.checks if not c.passed and c.diagnosis)]))

    def costs(self) -> list[tuple[str, float | None]]:
        """Each failed test's diagnosis once, with the points the tests that failed with it cost (None when the
        score does not come from the tests: a note set it)."""
        total = sum(c.weight for c in self.checks)
        cost: dict[str, float] = {}
        for c in self.checks:
            if not c.passed and c.diagnosis:
                cost[c.diagnosis] = cost.get(c.diagnosis, 0.0) + (self.points * c.weight / total if total else 0.0)
        from_tests = abs(sum(cost.values()) - (self.points - self.score)) < 0.011
        return [(d, round(v, 2) if from_tests else None) for d, v in cost.items()]

    def text(self) -> str:
        """The graded cell's output: the score, the notes, what passed, and each mistake once with what it cost."""
        lines = [f"{self.grade_id}: {self.score:g} / {self.points:g} points"
                 + ("" if self.status == GRADED else f" ({self.status})")]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  passed: {p}" for p in self.passed]
        lines += [f"  FAILED{'' if cost is None else f' (-{cost:g} points)'}: {d}" for d, cost in self.costs()]
        return "\n".join(lines)

    def comment(self) -> str:
        found = [*self.notes, *(d if cost is None else f"{d} (-{cost:g} points)" for d, cost in self.costs())]
        return "; ".join(found) if found else f"all hidden tests passed ({self.score:g}/{self.points:g})"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Verdict:
        return cls(**{**d, "checks": [Check(**c) for c in d.get("checks", [])]})


@dataclass
class Grading:
    """The verdicts of one notebook, with what the grading could not do (`fault`) or measure (`notes`)."""

    verdicts: dict[str, Verdict]
    notes: list[str] = field(default_factory=list)
    fault: str | None = None
    log: str = ""
    profile: dict = field(default_factory=dict)    # where the suite's time went (seconds)
    # graded cell -> {"name", "differences": [...], "html"} or {"name", "note"}: feedback, not a score
    structure: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"verdicts": {g: v.to_dict() for g, v in self.verdicts.items()}, "notes": self.notes,
                "fault": self.fault, "profile": self.profile, "structure": self.structure}

    @classmethod
    def from_dict(cls, d: dict) -> Grading:
        return cls({g: Verdict.from_dict(v) for g, v in d.get("verdicts", {}).items()}, list(d.get("notes", [])),
                   d.get("fault"), profile=dict(d.get("profile", {})), structure=dict(d.get("structure", {})))
