"""Trusted grading holds against attacks, through the real `nbgrader autograde`.

A class of red-team learners (tests/attacks.py, and the output flood of tests/test_feedback.py) is
graded in one batch; the tests assert that no attack gained anything, that every other learner's grade
is exactly as expected, that the batch went on past each attacker, that no hidden test text reached any
output, and that no process outlives the grading.
"""
import os
import re
import socket
import threading
import time

import nbformat
import pytest
from attacks import FLOOD, MARKER, NOTEBOOK_ATTACKS, SNIPPETS, WRONG
from helpers import leaks, prepare, suite_lines

from autograder.authoring import variants
from autograder.classroom import grade

pytestmark = pytest.mark.xdist_group("redteam")
ASG = "positional_encoding"
FULL = {"sinusoidal_encoding_tests": 4.0, "rope_tests": 4.0, "alibi_bias_tests": 3.0}
FAST = {"GRADER_CELL_TIMEOUT": "20", "GRADER_CALL_TIMEOUT": "15", "GRADER_NOTEBOOK_TIMEOUT": "120"}
ATTACKERS = [*(n for n in SNIPPETS if n != "control"), "flood", *NOTEBOOK_ATTACKS]


def _control():
    return variants.submission(ASG, {"sinusoidal_encoding": WRONG})


def _notebook_attack(name):
    nb = _control()
    graded = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "sinusoidal_encoding_tests")
    if name == "edit_graded_cell":
        graded.source = "4.0"
        graded.metadata["nbgrader"]["points"] = 40
        graded.metadata["nbgrader"]["locked"] = False
    elif name == "delete_graded_cell":
        nb.cells.remove(graded)
    elif name == "change_grade_id":
        graded.metadata["nbgrader"]["grade_id"] = "bonus_tests"
    elif name == "fake_output":
        graded.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "4.0"}, execution_count=1)]
    elif name == "corrupt_json":
        return b'{"cells": [ {"cell_type": "code", this is not json'
    return nb


@pytest.fixture(scope="module")
def listener():
    """A loopback server on the grading machine that a sandboxed learner must not reach."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.5)
    got = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                got.append(conn.recv(100))
                conn.close()
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    # The control: a connection from outside the sandbox reaches it (so an empty list below means none did).
    socket.create_connection(srv.getsockname(), timeout=3).sendall(b"control")
    for _ in range(50):
        if got:
            break
        time.sleep(0.1)
    assert got == [b"control"], got
    got.clear()
    yield srv.getsockname()[1], got
    stop.set()
    t.join(2)
    srv.close()


@pytest.fixture(scope="module")
def attacked(tmp_path_factory, listener):
    port, _ = listener
    d = tmp_path_factory.mktemp("redteam")
    prepare(d, [ASG])
    grade.submit(d, "honest", ASG, variants.submission(ASG))
    for name, snippet in SNIPPETS.items():
        code = WRONG + snippet.replace("PORT", str(port))
        grade.submit(d, name, ASG, variants.submission(ASG, {"sinusoidal_encoding": code}))
    grade.submit(d, "flood", ASG, variants.submission(ASG, {"sinusoidal_encoding": WRONG + FLOOD}))
    for name in NOTEBOOK_ATTACKS:
        grade.submit(d, name, ASG, _notebook_attack(name))
    r = grade.autograde(d, ASG, capture_output=True, text=True, env_extra=FAST)
    f = grade.feedback(d, ASG, capture_output=True, text=True)
    scores = {}
    for row in grade.scores(d, [ASG]):
        scores.setdefault(row.learner, {})[row.cell] = row
    return d, r, f, scores


def test_honest_learner_gets_full_marks(attacked):
    _, r, _, scores = attacked
    assert {c: s.score for c, s in scores["honest"].items()} == FULL, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.mark.parametrize("attacker", ATTACKERS)
def test_attack_gains_nothing(attacked, attacker):
    _, r, _, scores = attacked
    control = {c: s.score for c, s in scores["control"].items()}
    assert 0 < control["sinusoidal_encoding_tests"] < 4, control
    got = {c: s.score for c, s in scores.get(attacker, {}).items()}
    if attacker == "corrupt_json":
        assert all((v or 0) == 0 for v in got.values()), got
        return
    assert set(got) == set(FULL), f"{attacker}: graded cells {sorted(got)}"
    for cell, points in FULL.items():
        assert scores[attacker][cell].points == points, f"{attacker} changed the points of {cell}"
        assert got[cell] is not None and got[cell] <= control[cell], f"{attacker} gained points in {cell}: {got}"
    # The attack costs at most the attacked part: the other functions keep their full marks.
    assert got["rope_tests"] == 4.0 and got["alibi_bias_tests"] == 3.0, f"{attacker}: {got}"


def test_no_connection_reached_the_grading_machine(attacked, listener):
    """The attack ran (the notebook's run shows its refusal) and nothing reached the listener, which a connection
    from outside the sandbox reaches (the `listener` fixture's control)."""
    _, got = listener
    ran = (attacked[0] / "autograded" / "socket" / ASG / f"{ASG}.ipynb").read_text()
    assert "no network:" in ran, ran[-2000:]
    assert got == []


def test_no_hidden_test_text_in_any_output(attacked):
    d = attacked[0]
    secrets = suite_lines()   # learners' own notebooks may hold solution code
    for path in list((d / "autograded").rglob("*.ipynb")) + list((d / "feedback").rglob("*.html")):
        assert not leaks(path.read_text(errors="replace"), secrets), path


def test_no_process_outlives_grading(attacked):
    survivors = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")
            except OSError:
                continue
            if MARKER.encode() in cmd:
                survivors.append((pid, cmd))
    assert not survivors


def test_the_batch_continued_and_says_why(attacked):
    """A corrupt notebook is reported, and every other learner was graded."""
    d, r, _, scores = attacked
    expected = {"honest", "control", *ATTACKERS} - {"corrupt_json"}
    assert expected <= set(scores), sorted(expected - set(scores))
    assert "corrupt_json" in (r.stdout + r.stderr)


def test_every_failure_is_explained(attacked):
    """The gradebook comment says what happened, in words a learner can act on."""
    scores = attacked[3]
    comment = {learner: cells["sinusoidal_encoding_tests"].comment or "" for learner, cells in scores.items()}
    # `import os` is refused where the cell runs (the worker's process goes on): the note says what the cell used
    assert "os._exit" in comment["os_exit"] and "outside the modules this course's code uses" in comment["os_exit"]
    assert "did not finish within 20 s when your notebook ran" in comment["spin"]   # and was not run again
    assert "did not finish within 20 s when your notebook ran" in comment["fake_timeout"]
    assert "could not be read" in comment["corrupt_json"]
    assert "rebuilt from the released notebook" in comment["delete_graded_cell"]
    assert "rebuilt from the released notebook" in comment["change_grade_id"]


def test_an_output_flood_leaves_a_small_feedback(attacked):
    """20,000 outputs through the notebook client, after failing to reach the grader's pipe: the flooding learner's
    notebook and feedback are of the control's size, with notes that say what was cut."""
    d = attacked[0]
    for folder, name in (("autograded", f"{ASG}.ipynb"), ("feedback", f"{ASG}.html")):
        flood, control = (d / folder / who / ASG / name for who in ("flood", "control"))
        assert flood.stat().st_size < control.stat().st_size + (1 << 20), (folder, flood.stat().st_size)
    assert "more outputs cut" in (d / "autograded" / "flood" / ASG / f"{ASG}.ipynb").read_text()


def test_nothing_is_made_ready_after_the_last_learner(attacked):
    """nbgrader grades the submission folders in sorted order; after the last one no kernel and no suite process is
    started for a learner who never comes."""
    d, r, _, _ = attacked
    said = re.findall(r"(\S+) is the last submission of this run", r.stdout + r.stderr)
    assert said == [sorted(map(str, d.glob(f"submitted/*/{ASG}")))[-1].split("/")[-2]], said


# -- the worker's pipe to the grader, written by learner code -------------------------------------------------------
# numpy's savetxt opened any path: /proc/self/fd/N is the worker's own pipe to the grader, and the bytes it wrote there
# were a whole reply of the protocol's (here {"ok": 42}, sent before the real reply of 7). The policy now refuses
# savetxt; these workers run without the guards, so that the protocol's own defence is what is tested.
FORGED_REPLY = r'''
import numpy as np


def answer():
    header = '{"$dict": {"ok": 42}}'
    frame = chr(len(header)) + chr(0) * 3 + header + chr(0) * 8
    for n in range(3, 9):
        try:
            np.savetxt("/proc/self/fd/" + str(n), np.zeros((0, 1)), header=frame, comments="", newline="",
                       encoding="latin1")
        except Exception:
            pass
    return 7
'''


@pytest.mark.quick
def test_a_reply_learner_code_writes_into_the_worker_s_pipe_is_never_taken_for_the_worker_s():
    """Every message of the worker carries the key the grader gave it with the cells (autograder.inside.worker), which
    no guarded code holds: bytes learner code wrote into the pipe end the worker, charged to the learner."""
    from autograder.verdict.learner import Learner, WorkerDied

    w = Learner([{"id": "c", "source": FORGED_REPLY}], call_timeout=20, guarded=False)
    try:
        assert w.cell_errors == []
        with pytest.raises(WorkerDied, match="without the worker's seal"):
            w.fn("answer")()
    finally:
        w.close()


# ... and a request written into the worker's pipe from the grader: the worker would answer it too, and the grader
# would take that answer (here of `echo`, whatever the request carries) for its next call's.
INJECTED_REQUEST = r'''
import numpy as np


def answer():
    header = '{"$dict": {"op": "echo", "token": 42}}'
    frame = chr(len(header)) + chr(0) * 3 + header + chr(0) * 8
    np.savetxt("/proc/self/fd/3", np.zeros((0, 1)), header=frame, comments="", newline="", encoding="latin1")
    return 7


def other():
    return 8
'''


@pytest.mark.quick
def test_a_request_learner_code_writes_into_the_worker_s_pipe_is_never_answered():
    from autograder.verdict.learner import Learner, WorkerDied

    w = Learner([{"id": "c", "source": INJECTED_REQUEST}], call_timeout=20, guarded=False)
    try:
        assert w.fn("answer")() == 7
        # where fd 3 is the worker's request pipe the injected request ends it (alone, it is); where the worker was
        # started with another descriptor there the request never reaches it: either way the next call gets its own
        # answer or none, never the injected request's
        try:
            assert w.fn("other")() == 8
        except WorkerDied:
            pass
    finally:
        w.close()
