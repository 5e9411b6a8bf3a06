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
                 Check("shape", 1, True)], ["a note"])
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


def test_a_record_of_the_first_version_is_read_upgraded(tmp_path):
    rec = grading().to_dict()
    rec.pop("version")
    for c in rec["verdicts"]["rope_tests"]["checks"]:
        c.pop("refused")
        c.pop("cause_ids")
    (tmp_path / "old.json").write_text(json.dumps(rec))
    back = record.load(tmp_path / "old.json")
    assert back is not None and back["version"] == record.VERSION
    assert Grading.from_dict(back).verdicts["rope_tests"].checks[1].refused == []
