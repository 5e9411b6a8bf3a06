"""A grader fault is never a learner's zero, and one learner's grading is held to one budget.

Each fault is injected through a setting an instructor can set (autograder.config) and made real:
a hidden-suite folder whose suite does not compile or hangs (`suites_dir`), a worker that cannot
start with the configured threads (`threads = 0`), a sandbox that cannot start under its process limit
(`processes = 1`).  Through the real `nbgrader autograde`, each must fail that learner's grading the
way nbgrader fails: the command exits non-zero, no score is recorded, the autograded notebook is
removed, no feedback is written, the log names the fault with the sandbox's or the worker's stderr, and the
grading's stored record says it could not grade, and why; `autograder.classroom.classgrade` lists it as a grader
error, from that record, apart from a submission with nothing to grade.
A learner whose every call hangs is stopped at the budget and graded (the learner's doing), and a
worker that sends a frame of 512 MiB is refused without reading it.
"""
import csv
import dataclasses
import io
import json
import os
import re
import struct
import time

import pytest
import torch
from helpers import SUITE, peak_memory, prepare
from hypothesis import given, settings
from hypothesis import strategies as st

from autograder import config
from autograder.authoring import variants
from autograder.classroom import classgrade, grade
from autograder.inside import protocol
from autograder.verdict import hidden, record

SHARED = pytest.mark.xdist_group("faults")      # the tests of the `faults` class run where it was graded
ASG = "positional_encoding"
CELLS = ("sinusoidal_encoding_tests", "rope_tests", "alibi_bias_tests")

BROKEN_SUITE = "from autograder.verdict.suites.checks import Diagnosis\nthis line is not Python\n"
HANGING_SUITE = '''import time
import pytest


@pytest.mark.cell("sinusoidal_encoding_tests")
def test_waits_forever():
    time.sleep(3600)
'''


def _suites(tmp_path, name, text):
    folder = tmp_path / name
    folder.mkdir()
    (folder / f"test_{ASG}.py").write_text(text)
    return str(folder)


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    """One learner per fault, each submitting the reference solution, each graded on its own."""
    d = tmp_path_factory.mktemp("faults")
    suites = tmp_path_factory.mktemp("suites")
    injected = {
        "suite_broken": ({"GRADER_SUITES_DIR": _suites(suites, "broken", BROKEN_SUITE)},
                         "the hidden suite could not be collected", "this line is not Python"),
        "suite_hangs": ({"GRADER_SUITES_DIR": _suites(suites, "hangs", HANGING_SUITE), "GRADER_LEARNER_BUDGET": "10",
                         "GRADER_GRACE": "3"},
                        "the hidden suite did not finish in time", None),
        "worker_fails": ({"GRADER_THREADS": "0"}, "the grader's worker ended before running any learner code",
                         "set_num_threads expects a positive integer"),
        "no_sandbox": ({"GRADER_PROCESSES": "1"}, "the notebook's kernel did not start in the sandbox",
                       "bwrap: Creating new namespace failed"),
    }
    prepare(d, [ASG])
    runs = {}
    for learner, (env, _, _) in injected.items():
        grade.submit(d, learner, ASG, variants.submission(ASG))
        r = grade.autograde(d, ASG, learner=learner, capture_output=True, text=True, env_extra=env)
        runs[learner] = r
    f = grade.feedback(d, ASG, capture_output=True, text=True)
    return d, injected, runs, f


@SHARED
@pytest.mark.parametrize("learner", ["suite_broken", "suite_hangs", "worker_fails", "no_sandbox"])
def test_a_grader_fault_fails_the_grading_visibly(faults, learner):
    d, injected, runs, _ = faults
    r = runs[learner]
    _, fault, stderr = injected[learner]
    log = r.stdout + r.stderr
    assert r.returncode != 0, log[-3000:]
    assert "GraderFault" in log and fault in log, log[-5000:]
    if stderr:                       # the failing sandbox's or worker's own words, in the grading log
        assert stderr in log, log[-5000:]
    assert not (d / "autograded" / learner / ASG / f"{ASG}.ipynb").exists(), "nbgrader kept the failed notebook"
    rec = record.load(record.path(d, learner, ASG, ASG))
    assert rec is not None and rec["gradable"] is False and fault in rec["fault"] and not rec["verdicts"], rec
    rows = [row for row in grade.scores(d, [ASG]) if row.learner == learner]
    assert all(row.score is None for row in rows), [(row.cell, row.score) for row in rows]
    print(f"\n{learner}: {classgrade.failure_reason([], r.returncode, rec['fault'])[0]}")


def test_the_suite_stops_at_the_first_grader_fault():
    """A grader fault makes the whole grading the grader's: the suite stops there rather than failing every later
    test the same way (each trying to start the worker again), and the fault is the one the grading reports."""
    no_threads = dataclasses.replace(config.current(), threads=0, warm_suite=False)
    grading = hidden.grade(variants.submission(ASG), ASG, settings=no_threads)
    assert grading.fault is not None and "ended before running any learner code" in grading.fault, grading.fault
    summary = re.findall(r"^(\d+) failed(?:, (\d+) passed)? in ", grading.log, re.M)
    assert summary == [("1", "")], f"the suite went on past the fault: {summary} {grading.log[-1500:]}"


@SHARED
def test_the_report_says_a_fault_from_the_record(faults):
    """The class report alone (no classgrade to tell it who failed) reads each grading's record: a learner the grader
    could not grade has no total and says why, never a zero of theirs."""
    from autograder.classroom import report

    d, injected, _, _ = faults
    files = report.build(d, ASG, out=d / "report-alone")
    rows = {r["learner"]: r for r in csv.DictReader(open(files["scores"]))}
    for learner, (_, fault, _) in injected.items():
        assert rows[learner]["total"] == "", rows[learner]
        assert rows[learner]["status"].startswith("grader error: GraderFault: ") and fault in rows[learner]["status"]


@SHARED
def test_no_feedback_for_a_grading_that_failed(faults):
    d, injected, _, f = faults
    for learner in injected:
        assert not (d / "feedback" / learner).exists(), learner


@SHARED
def test_classgrade_lists_grader_errors_apart(faults):
    """Through Dask: a broken suite is a grader error, as its grading's record says, with its log; a folder without the
    notebook is not, though an earlier grading left a record that says the grader could not grade it."""
    d, injected, _, _ = faults
    grade.submit(d, "lost", ASG, None)
    earlier = record.path(d, "lost", ASG, ASG)
    record.store(earlier, record.Grading({}, fault="GraderFault: an earlier run's").to_dict())
    os.utime(earlier, (time.time() - 3600, time.time() - 3600))
    env, fault, _ = injected["suite_broken"]
    out = io.StringIO()
    result = classgrade.grade_class(ASG, d, workers=1, learners=["suite_broken", "lost"], env=env, out=out,
                                    progress=False, feedback=False)
    text = out.getvalue()
    by = {o.learner: o for o in result.failed}
    assert set(by) == {"suite_broken", "lost"} and not result.graded, text
    assert by["suite_broken"].kind == grade.GRADER_ERROR and fault in by["suite_broken"].reason, text
    assert by["lost"].kind == grade.NOT_GRADED and "No notebooks were matched" in by["lost"].reason, text
    errors, others = text.split("grader errors, not the learners' doing")[1].split("not graded, nothing to grade")
    assert "suite_broken: exit code 1: GraderFault:" in errors and f"log: {by['suite_broken'].log}" in errors, text
    assert "lost: exit code 1: No notebooks were matched" in others and "earlier run" not in text, text
    rows = {r["learner"]: r for r in csv.DictReader(open(d / "report" / ASG / "scores.csv"))}
    assert rows["suite_broken"]["status"].startswith("grader error: exit code 1: GraderFault:"), rows
    assert rows["suite_broken"]["total"] == "" and rows["lost"]["status"].startswith("not graded: ")


# -- one budget per learner ---------------------------------------------------------------------------
HANGS = {name: f"def {name}(*args, **kwargs):\n    while True:\n        pass\n"
         for name in ("sinusoidal_encoding", "rope", "alibi_bias")}


@pytest.mark.full     # too long for make test (docs/testing.md)
def test_a_learner_whose_every_call_hangs_is_stopped_at_the_budget(tmp_path):
    """Each function loops forever: the notebook's run and the suite share one budget; past it the learner is
    graded with zeros and told why (the learner's doing, not a grader fault)."""
    budget, grace = 15, 10
    d = tmp_path / "grading"
    prepare(d, [ASG])
    grade.submit(d, "spinner", ASG, variants.submission(ASG, HANGS))
    env = {"GRADER_LEARNER_BUDGET": str(budget), "GRADER_GRACE": str(grace), "GRADER_CELL_TIMEOUT": "5",
           "GRADER_CALL_TIMEOUT": "5"}
    t0 = time.monotonic()
    r = grade.autograde(d, ASG, capture_output=True, text=True, env_extra=env)
    wall = time.monotonic() - t0
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "GraderFault" not in r.stdout + r.stderr
    assert wall < budget + grace + 60, f"autograde took {wall:.0f} s for a budget of {budget} s"
    rows = {row.cell: row for row in grade.scores(d, [ASG])}
    assert {c: rows[c].score for c in CELLS} == {c: 0.0 for c in CELLS}
    comments = " ".join(rows[c].comment or "" for c in CELLS)
    assert "the time for grading your notebook ran out" in comments, comments
    rec = record.load(record.path(d, "spinner", ASG, ASG))
    assert rec is not None and rec["gradable"] is True and rec["fault"] is None, rec


def test_past_the_budget_no_check_starts():
    """A suite that starts past the learner's budget (the notebook's run spent it) fails every check at once, before
    any trusted work for it, so that the grace past the budget is never spent on checks that cannot pass: no worker
    starts, and every check says why."""
    from autograder.verdict.learner import OUT_OF_TIME

    grading = hidden.grade(variants.submission(ASG), ASG, deadline=time.time() - 1)
    assert grading.fault is None, grading.log[-3000:]
    assert grading.profile.get("workers") == [], grading.profile
    # no check does any work: each ends in its setup (about a millisecond; on the development machine a suite that ran
    # them spent 5 to 8 s in all, drawing inputs and working out the course's answers)
    assert sum(grading.profile["cells_s"].values()) < 1.0, grading.profile
    checks = [c for gid in CELLS for c in grading.verdicts[gid].checks]
    assert checks and all(not c.passed and c.diagnosis == OUT_OF_TIME for c in checks), [
        (c.label, c.diagnosis) for c in checks if c.passed or c.diagnosis != OUT_OF_TIME]


# -- a frame of 512 MiB ---------------------------------------------------------------------------------
# An answer of 512 MiB (2^27 float32 zeros): the worker sends it as one frame, which declares its size first (the
# families keep a copy of an answer beside it, all within the sandbox's 4 GiB).
GIANT_FRAME = '''
def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    return torch.zeros(1 << 27)
'''


@pytest.mark.full     # too long for make test (docs/testing.md)
def test_a_giant_frame_is_refused_unread():
    """The trusted suite process's peak memory (polled from outside) with a worker that sends 512 MiB stays within
    64 MiB of its peak with an honest one, and the learner is told why that part failed."""
    suite = {"suite": SUITE}
    honest, _, honest_peak = peak_memory(lambda: hidden.grade(variants.submission(ASG), ASG), suite)
    giant, _, giant_peak = peak_memory(
        lambda: hidden.grade(variants.submission(ASG, {"sinusoidal_encoding": GIANT_FRAME}), ASG), suite)
    honest_peak, giant_peak = honest_peak.get("suite", 0), giant_peak.get("suite", 0)
    print(f"\nthe suite process's peak: {honest_peak >> 20} MiB honest, {giant_peak >> 20} MiB with a 512 MiB frame")
    assert honest.fault is None and giant.fault is None, giant.fault
    assert honest_peak > 0 and giant_peak < honest_peak + (64 << 20), (honest_peak >> 20, giant_peak >> 20)
    v = giant.verdicts["sinusoidal_encoding_tests"]
    sizes = [int(n) for d in v.failed if "is too large" in d for n in re.findall(r"payload of (\d+) bytes", d)]
    assert v.score == 0 and sizes and min(sizes) >= 1 << 29, v.failed
    assert giant.verdicts["rope_tests"].score == 4.0 and giant.verdicts["alibi_bias_tests"].score == 3.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([*protocol.SAFETENSORS_DTYPES, "complex64"]),
                          st.lists(st.integers(0, 4), max_size=3), st.booleans()), min_size=1, max_size=4))
def test_a_frame_s_tensors_are_read_back_by_safetensors_as_they_were(specs):
    """The payload `protocol.encode` writes itself (the safetensors format, without safetensors' own writer) is read
    by safetensors.torch.load, the trusted side's reader, as the same tensors: every dtype it writes, any shape, a
    transposed tensor, a tensor sent twice; another dtype goes through safetensors' writer."""
    from safetensors.torch import load

    tensors = {}
    for i, (dtype, shape, transposed) in enumerate(specs):
        t = (torch.randn(shape or [], dtype=torch.float64) * 100).to(getattr(torch, dtype))
        tensors[f"t{i}"] = t.t() if transposed and t.dim() == 2 else t
    read = load(protocol._payload({k: t.contiguous() for k, t in tensors.items()}))
    assert read.keys() == tensors.keys()
    assert all(torch.equal(read[k], t) and read[k].dtype == t.dtype for k, t in tensors.items())
    frame = protocol.encode({"x": list(tensors.values()), "again": tensors["t0"]})
    (hlen,) = struct.unpack("<I", frame[:4])
    back = protocol.decode(frame[4:4 + hlen], frame[4 + hlen + 8:])
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(back["x"], tensors.values()))
    assert torch.equal(back["again"], tensors["t0"])


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["$t", "$tuple", "$dict", "$float", "$dtype", "$device", "$meta", "seal",
                                         "shape", "dtype", "x"]), inner, max_size=3), max_leaves=12),
       st.binary(max_size=64))
def test_whatever_bytes_a_frame_carries_a_reader_raises_only_protocol_error(message, payload):
    """Learner code can write into the worker's pipe: any header and payload, valid JSON or not, sealed or not, reads
    as a message or a ProtocolError (the worker's death, charged to the learner), never another exception in the
    trusted process; an unsealed one is refused before its payload is read."""
    header = json.dumps(message).encode() if not isinstance(message, float) else b"{"
    for seal in (None, "key"):
        try:
            got = protocol.decode(header, payload, seal)
        except protocol.ProtocolError:
            continue
        assert seal is None or message.get("$dict", {}).get("seal") == seal, got


def test_an_unsealed_frame_is_refused_before_its_payload_is_read():
    frame = protocol.encode({"x": torch.ones(3), "seal": "key"})
    (hlen,) = struct.unpack("<I", frame[:4])
    header, payload = frame[4:4 + hlen], frame[4 + hlen + 8:]
    assert torch.equal(protocol.decode(header, payload, "key")["x"], torch.ones(3))
    with pytest.raises(protocol.ProtocolError, match="without the worker's seal"):
        protocol.decode(header, b"not safetensors", "another key")
    with pytest.raises(protocol.ProtocolError, match="malformed message: SafetensorError"):
        protocol.decode(header, b"not safetensors", "key")
