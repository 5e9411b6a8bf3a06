"""The verdict record (autograder.verdict.record) is a versioned schema, validated whenever it is written or read: the
one thing every consumer reads."""
import json

import pytest

from autograder.verdict import record
from autograder.verdict.record import Check, Grading, Verdict


def grading() -> Grading:
    v = Verdict("rope_tests", 4.0, 2.5, record.GRADED,
                [Check("values", 2, False, "rope(x) is wrong", causes=["the pairs are the halves"],
                       cause_ids=["rope_halves"]),
                 Check("library", 1, False, "it raised RefusedError", refused=["torch.nn.functional.layer_norm"]),
                 Check("shape", 1, True), Check("stub", 1, False, "not implemented yet", unanswered=True)],
                ["a note"])
    return Grading({"rope_tests": v}, notes=["missing protection: none"], profile={"suite_s": 1.5})


def test_a_record_round_trips_through_its_schema(tmp_path):
    where = tmp_path / "r.json"
    record.store(where, {**grading().to_dict(), "protections": {"bubblewrap": True}, "execute_s": 2.5,
                         "problems": ["a cell was copied"]})
    rec = record.load(where)
    assert rec is not None and rec["version"] == record.VERSION
    back = Grading.from_dict(rec)
    assert back.verdicts["rope_tests"].checks[0].cause_ids == ["rope_halves"]
    assert back.verdicts["rope_tests"].checks[1].refused == ["torch.nn.functional.layer_norm"]
    assert back.to_dict() == grading().to_dict() and rec["problems"] == ["a cell was copied"]


@pytest.mark.parametrize("change,where", [
    (lambda r: r.update(version=1), "version"),
    (lambda r: r["verdicts"]["rope_tests"].update(score=5.0), "score"),
    (lambda r: r["verdicts"]["rope_tests"].update(status="lost"), "status"),
    (lambda r: r["verdicts"]["rope_tests"]["checks"][0].update(weight="two"), "weight"),
    (lambda r: r["verdicts"]["rope_tests"]["checks"][0].update(shown="x"), "checks/0"),
    (lambda r: r.update(fault="a fault"), "gradable"),
    (lambda r: r["verdicts"]["rope_tests"].update(grade_id="alibi_tests"), "grade_id"),
])
def test_a_record_that_breaks_the_schema_is_refused_on_write_and_on_read(tmp_path, change, where):
    rec = grading().to_dict()
    change(rec)
    with pytest.raises(record.InvalidRecord, match=where):
        record.store(tmp_path / "r.json", rec)
    (tmp_path / "r.json").write_text(json.dumps(rec))
    assert record.load(tmp_path / "r.json") is None        # read as a grading never stored


@pytest.mark.parametrize("version,dropped", [(None, ("refused", "cause_ids", "kind", "uncounted", "unanswered")),
                                             (2, ("kind", "uncounted", "unanswered")), (3, ("unanswered",))],
                         ids=["first", "second", "third"])
def test_a_record_of_an_earlier_version_is_read_upgraded(tmp_path, version, dropped):
    """Version 1 had no version, no refusals and no cause ids; version 2 no kind of check and none uncounted; version
    3 no check that says its part was unwritten: each is read as this version, the missing fields at their defaults."""
    rec, expected = grading().to_dict(), grading().to_dict()
    if version is None:
        rec.pop("version")
    else:
        rec["version"] = version
    defaults = {"refused": [], "cause_ids": [], "kind": record.FIXED, "uncounted": False, "unanswered": False}
    for c, e in zip(rec["verdicts"]["rope_tests"]["checks"], expected["verdicts"]["rope_tests"]["checks"]):
        for name in dropped:
            c.pop(name)
            e[name] = defaults[name]
    (tmp_path / "old.json").write_text(json.dumps(rec))
    back = record.load(tmp_path / "old.json")
    assert back is not None and back["version"] == record.VERSION
    assert Grading.from_dict(back).to_dict() == expected
    assert Grading.from_dict(back).verdicts["rope_tests"].checks[1].refused == ([] if "refused" in dropped else
                                                                                ["torch.nn.functional.layer_norm"])


def _scored(*checks: tuple[str, bool, str, bool]) -> Verdict:
    """One cell of 4 points scored by hidden.score from records of (label, passed, kind, together), weight 1 each."""
    from autograder.verdict import hidden

    records = [{"cell": "rope_tests", "label": label, "weight": 1.0, "passed": passed, "kind": kind,
                "together": together, "diagnosis": None if passed else f"{label} is wrong"}
               for label, passed, kind, together in checks]
    return hidden.score(records, {"rope_tests": 4.0})["rope_tests"]


def test_a_drawn_check_is_not_counted_where_a_fixed_check_of_the_part_failed():
    """One notebook, one score: whether this grading's draws showed the mistake too does not change the score, and the
    feedback says what the drawn check's points went for."""
    found = _scored(("values", False, record.FIXED, False), ("shape", True, record.FIXED, False),
                    ("drawn", False, record.DRAWN, False), ("speed", True, record.MEASURED, False))
    missed = _scored(("values", False, record.FIXED, False), ("shape", True, record.FIXED, False),
                     ("drawn", True, record.DRAWN, False), ("speed", True, record.MEASURED, False))
    assert found.score == missed.score == 2.0
    assert [c.uncounted for c in missed.checks] == [False, False, True, False]
    assert not any(c.uncounted for c in found.checks)
    assert "FAILED (-1 points): values is wrong" in missed.text()
    assert f"FAILED (-1 points): {record.UNCOUNTED}" in missed.text()
    assert record.UNCOUNTED not in missed.failed, "not a diagnosis: the class report counts those"


@pytest.mark.parametrize("other", [("speed", False, record.MEASURED, False), ("strided", False, record.FAMILY, False),
                                   ("with yours", False, record.FIXED, True), ("shape", True, record.FIXED, False)])
def test_a_drawn_check_that_passed_counts_where_no_fixed_check_of_the_values_failed(other):
    """A slow part, a part that breaks a family's promise (not the values), one right alone but wrong with the
    learner's other parts, or one every check passes: the drawn check counts as it went."""
    v = _scored(("values", True, record.FIXED, False), ("drawn", True, record.DRAWN, False), other)
    assert not any(c.uncounted for c in v.checks)
    assert v.score == round(4.0 * (2 + other[1]) / 3, 2)
