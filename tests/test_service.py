"""autograder/service/: "check my work" through the real HTTP service, the real nbgrader autograde and a real
browser. A correct notebook gets full marks and the verdicts `nbgrader autograde` records; a broken one its diagnosis;
every refusal comes before any grading and says why; the rate limit, the caps on what waits and the fair queue hold
under clients arriving at once (raw sockets: every request's headers, then the bodies); a request that does not say
who sends it takes nothing, and anonymous sockets held open keep no learner out; a check touches no gradebook;
a failure the learner's notebook caused is their check (counted), a grader fault the grader's (503, not counted); the
service answers while it warms up; the upload page runs no script."""
import asyncio
import concurrent.futures
import http.cookiejar
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import nbformat
import psutil
import pytest
from helpers import (
    MARKS,
    first_check,
    leaks,
    prepare,
    prepare_service,
    run_check_cell,
    suite_lines,
)

from autograder import ROOT
from autograder.authoring import criteria, variants
from autograder.classroom import grade
from autograder.notebooks import graded_cells
from autograder.service import grading
from autograder.service.fair import Admission, FairQueue, RateLimit, Refusal
from autograder.service.gate import Gate, peer_of
from autograder.service.local import LocalService, RawCheck, free_port, wait_for, wait_ready
from autograder.service.pending import Checks
from autograder.service.roster import Roster, new_roster
from autograder.service.server import COOKIE, FORM_MARGIN
from autograder.verdict import record

ASG = "positional_encoding"
# The tests of one service (the `service` fixture) run on one xdist worker, which starts it once; a test that starts a
# service of its own runs wherever there is room.
SHARED = pytest.mark.xdist_group("service")
PROBE_ROPE = """def rope(x, base=10000.0):
    raise ValueError(f"probe {float(x.double().sum()):.9g}")
"""
SCRIPTED_ROPE = '''def rope(x, base=10000.0):
    raise ValueError('<script>window.pwned = 1</script><img src="data:," onerror="window.pwned = 2">')
'''
KILLING_ROPE = """def rope(x, base=10000.0):
    import os, signal
    os.kill(os.getpid(), signal.SIGKILL)
"""
MARKED_ROPE = f"""def rope(x, base=10000.0):
    raise ValueError({MARKS!r})
"""
FORMULA = '=HYPERLINK("http://example.com")'
SHOTS = ROOT / "_build" / "screenshots"       # what the browser showed, for a person to see (as tests/test_site.py)
LEARNER_TIMEOUT = {"GRADER_LEARNER_BUDGET": "30", "GRADER_GRACE": "5"}    # learner_timeout: 30 + 2 x 5 = 40 s

NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?")    # sizes and errors differ from one grading to the next


def _roster(**kw) -> dict:
    r = new_roster(["ada", "ben", "cy", "dee", "eve", "fay", "gus", "hal", "ivy", "jo", "kim", "lu", "mia", "ned",
                    "ola", "pat", "rae", "sal", "tom", "uma", "val", "wes", FORMULA], [ASG, "attention"])
    r["assignments"]["attention"]["open"] = False
    r.update(kw)
    return r


def _counted(service) -> dict:
    """(learner, assignment) -> the instructor's table's row."""
    return {(r["learner"], r["assignment"]): r for r in service.table()}


def _dead_alias_chain(n: int):
    """The reference notebook with a dead chain of `n` aliases in a solution cell, written last to first: code that
    never runs, and that takes the grader's reading of the code longer than a check may take."""
    nb = variants.submission(ASG)
    cell = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    cell.source += "\nif False:\n" + "".join(f"    a{i} = a{i - 1}\n" for i in range(n, 0, -1)) + "    a0 = torch\n"
    return nb


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """The service, started where GRADEBOOK_URL names the class's gradebook (which no check may touch), with a
    learner's check stopped after 40 s."""
    tmp = tmp_path_factory.mktemp("service")
    prepare(tmp / "class", [ASG])
    s = LocalService(tmp, _roster(rate=[3, 3600], max_concurrent=1, max_bytes=400_000, max_waiting_per_learner=5,
                                  max_connections=64),
                     env={"GRADEBOOK_URL": grade.db_url(tmp / "class"), **LEARNER_TIMEOUT})
    s.class_gradebook = tmp / "class" / "gradebook.db"              # type: ignore[attr-defined]
    s.class_gradebook_was = s.class_gradebook.read_bytes()          # type: ignore[attr-defined]
    yield s
    s.close()


@SHARED
@pytest.mark.full     # too long for make test (docs/testing.md)
def test_a_check_gives_what_autograde_gives(service, tmp_path):
    """A correct notebook: full marks, the very verdicts `nbgrader autograde` writes and (`?html=1`) the feedback
    page `generate_feedback` writes; a broken one: its diagnosis; checks hold no line of the hidden suites."""
    ok, answer, _ = service.post(f"/check/{ASG}?html=1", nbformat.writes(variants.submission(ASG)).encode(),
                                 service.roster["learners"]["ada"])
    assert ok == 200 and answer["total"] == answer["points"] == 11, answer
    d = tmp_path / "batch"
    prepare(d, [ASG])
    grade.submit(d, "ada", ASG, variants.submission(ASG))
    assert grade.autograde(d, ASG, capture_output=True).returncode == 0
    graded = nbformat.read(str(d / "autograded" / "ada" / ASG / f"{ASG}.ipynb"), as_version=4)
    batch = record.Grading.from_dict(record.load(record.path(d, "ada", ASG, ASG)) or {}).verdicts
    assert [(c["cell"], c["text"]) for c in answer["cells"]] == [(g, batch[g].text()) for g in graded_cells(graded)]
    assert grade.feedback(d, ASG, capture_output=True).returncode == 0
    page = (d / "feedback" / "ada" / ASG / f"{ASG}.html").read_text()
    assert NUMBER.sub("#", answer["feedback_html"]) == NUMBER.sub("#", page)
    bug = {v.name: v for v in variants.load(ASG)}["sin_cos_swapped"]
    status, wrong = service.check("ada", variants.submission(ASG, bug.cells), ASG)
    assert status == 200 and wrong["total"] < 11
    for cell, diagnosis in bug.fails.items():
        assert diagnosis in next(c["text"] for c in wrong["cells"] if c["cell"] == cell), wrong
    secrets = suite_lines()
    assert not leaks(json.dumps([answer, wrong]), secrets)
    assert "test_" not in json.dumps([answer, wrong])                   # no hidden test's name


@SHARED
def test_checking_again_reveals_nothing_new(service):
    """Two checks of one broken notebook (each grading draws its own inputs): the answers name the same causes and
    say the same thing but for numbers and what each saw of its own drawn inputs, and hold nothing but the scores and
    the verdicts (no seed, no test's name)."""
    bug = {v.name: v for v in variants.load(ASG)}["halves_concatenated"]
    answers = [service.check("fay", variants.submission(ASG, bug.cells), ASG)[1] for _ in range(2)]
    for a in answers:
        assert set(a) == {"assignment", "total", "points", "cells", "notes", "seconds", "text"}, set(a)
        assert all(set(c) == {"cell", "text", "score", "points"} for c in a["cells"]), a["cells"]
        assert "seed" not in a["text"] and "test_" not in a["text"], a["text"]

    def said(a):
        lines = a["text"].split("\n")[1:]
        return NUMBER.sub("#", "\n".join(ln for ln in lines if not ln.lstrip().startswith("seen:")))

    assert said(answers[0]) == said(answers[1])


@SHARED
def test_each_check_draws_its_own_inputs(service):
    """A rope that tells what it was given (its input's sum, in its error, which the answer shows): two checks of
    the same notebook were given different inputs, so what one check shows of its inputs says nothing of the next's."""
    probe = variants.submission(ASG, {"rope": PROBE_ROPE})
    said = []
    for _ in range(2):
        status, answer = service.check("gus", probe, ASG)
        assert status == 200, answer
        said.append(re.search(r"probe (\S+)", answer["text"]).group(1))
    assert said[0] != said[1], said


@SHARED
def test_refusals_come_before_any_grading(service):
    nb = nbformat.writes(variants.submission(ASG)).encode()
    started = service.state.joinpath("scratch")
    before = len(list(started.iterdir()))
    status, answer, headers = service.post(f"/check/{ASG}", nb, None)
    assert status == 401 and "no check token" in answer["error"] and headers.get("WWW-Authenticate") == "Bearer"
    status, answer, _ = service.post(f"/check/{ASG}", nb, "not-a-token")
    assert status == 403 and "belongs to no learner" in answer["error"]
    status, answer, _ = service.post("/check/attention", nb, service.roster["learners"]["ben"])
    assert status == 403 and "switched checks of 'attention' off" in answer["error"]
    status, answer, _ = service.post(f"/check/{ASG}", b"x" * 400_001, service.roster["learners"]["ben"])
    assert status == 413 and "more than the 400000" in answer["error"]
    status, answer, _ = service.post(f"/check/{ASG}", b"{not json", service.roster["learners"]["ben"])
    assert status == 400 and "not a notebook" in answer["error"]
    assert len(list(started.iterdir())) == before, "a refused request made a grading folder"


@SHARED
def test_the_rate_limit_refuses_without_grading(service):
    """cy's 3 checks an hour are spent (on uploads that are not notebooks: no grading); the 4th is refused with
    when to retry, and another learner is not."""
    token = service.roster["learners"]["cy"]
    for _ in range(3):
        assert service.post(f"/check/{ASG}", b"[]", token)[0] == 400
    status, answer, headers = service.post(f"/check/{ASG}", b"[]", token)
    assert status == 429 and "at most 3 checks in 60 minutes" in answer["error"], answer
    assert 3000 < int(headers["Retry-After"]) <= 3600
    assert service.post(f"/check/{ASG}", b"[]", service.roster["learners"]["dee"])[0] == 400


@SHARED
@pytest.mark.full     # too long for make test (docs/testing.md)
def test_the_queue_is_fair_under_load(service):
    """One grading at a time: dee sends two checks at once (of a notebook that takes 4 s to run), then eve one a
    second later, while dee's first is graded; eve's is graded before dee's second."""
    slow = variants.submission(ASG)
    slow.cells.append(nbformat.v4.new_code_cell("import time\ntime.sleep(4)"))
    done = []

    def check(learner):
        status, answer = service.check(learner, slow if learner == "dee" else variants.submission(ASG), ASG)
        done.append(learner)
        return status

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        first = [pool.submit(check, "dee"), pool.submit(check, "dee")]
        time.sleep(1.0)
        last = pool.submit(check, "eve")
        assert [f.result() for f in [*first, last]] == [200, 200, 200]
    assert done.index("eve") < 2, done


@SHARED
def test_checks_are_counted_for_the_instructor_and_change_no_gradebook(service, tmp_path):
    assert service.post(f"/check/{ASG}", b"[]", service.roster["learners"]["eve"])[0] == 400     # logged, no grading
    assert service.post(f"/check/{ASG}", b"[]", service.roster["learners"][FORMULA])[0] == 400
    table = _counted(service)
    assert set(table[("eve", ASG)]) == {"learner", "assignment", "checks", "first", "last", "grader failures"}
    # A learner's name that a spreadsheet would read as a formula is text there, as in the class report's tables.
    assert ("'" + FORMULA, ASG) in table and not any(learner.startswith("=") for learner, _ in table), table
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(service.url + "/instructor/checks.csv", headers={
            "Authorization": f"Bearer {service.roster['learners']['ada']}"}))
    assert e.value.code == 403
    # Every file a check wrote is under the service's own state folder: no grading folder, no gradebook elsewhere,
    # and the class's gradebook, named by GRADEBOOK_URL where the service runs, is as it was.
    assert not list((service.state / "scratch").iterdir()), "a check left its scratch grading behind"
    assert service.class_gradebook.read_bytes() == service.class_gradebook_was
    assert grade.scores(None, [ASG], url=grade.db_url(service.class_gradebook.parent)) == []


@pytest.mark.full     # too long for make test (docs/testing.md)
def test_a_grader_fault_is_the_grader_s_and_costs_the_learner_nothing(tmp_path):
    prepare_service(tmp_path / "state", [ASG, "attention"])
    s = LocalService(tmp_path, _roster(rate=[1, 3600]), env={"GRADER_THREADS": "0"})     # every worker fails to start
    try:
        status, answer = s.check("ada", variants.submission(ASG), ASG)
        assert status == 503 and "failed on the grader's side" in answer["error"], answer
        # A limit of one check an hour: the fault was not counted, so the next request is still taken (an upload
        # that is not a notebook, answered without grading), and the one after it is over the limit.
        assert s.post(f"/check/{ASG}", b"[]", s.roster["learners"]["ada"])[0] == 400
        assert s.post(f"/check/{ASG}", b"[]", s.roster["learners"]["ada"])[0] == 429
        row = _counted(s)[("ada", ASG)]                  # the instructor sees one check, and the grader's failure
        assert (row["checks"], row["grader failures"]) == ("1", "1"), row
    finally:
        s.close()


@pytest.mark.full     # too long for make test (docs/testing.md)
def test_a_grader_that_dies_mid_check_is_replaced_and_the_check_not_counted(tmp_path):
    """The warm grader grading ada's check is killed: ada is told it failed on the grader's side (503), the check is
    not counted against her, and her next check is graded by a new grader."""
    prepare_service(tmp_path / "state", [ASG, "attention"])
    s = LocalService(tmp_path, _roster(rate=[2, 3600], max_concurrent=1))
    try:
        graders = [p for p in psutil.Process(s.proc.pid).children()
                   if "autograder.service.warm" in " ".join(p.cmdline())]
        assert len(graders) == 1, graders
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            first = pool.submit(s.check, "ada", variants.submission(ASG), ASG)
            deadline = time.monotonic() + 60
            while not list((s.state / "scratch").iterdir()) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)                                              # within the grading
            graders[0].kill()
            status, answer = first.result()
        assert status == 503 and "failed on the grader's side" in answer["error"], answer
        status, answer = s.check("ada", variants.submission(ASG), ASG)
        assert status == 200 and answer["total"] == answer["points"], answer
        # A limit of two checks an hour: the killed check was not counted, so one more is taken, then none.
        assert s.post(f"/check/{ASG}", b"[]", s.roster["learners"]["ada"])[0] == 400
        assert s.post(f"/check/{ASG}", b"[]", s.roster["learners"]["ada"])[0] == 429
    finally:
        s.close()


@pytest.mark.full     # make test replaces a grader that died (test_a_grader_that_dies_mid_check_...)
def test_a_warm_grader_is_replaced_after_its_share_of_checks(tmp_path, monkeypatch):
    """RECYCLE bounds a warm grader's life: after that many commands the next check has a new grader process, and
    every check is graded alike."""
    from autograder.service import grading

    monkeypatch.setattr(grading, "RECYCLE", 2)
    prepare_service(tmp_path, [ASG])
    checker = grading.Checker(tmp_path, [ASG], graders=1)
    try:
        body = nbformat.writes(variants.submission(ASG)).encode()
        pids = []
        for i in range(3):
            assert checker.check(ASG, f"l{i}", body)["total"] == 11
            pids.append(checker.idle[-1].proc.pid)
        assert pids[0] != pids[1] == pids[2], pids
    finally:
        checker.close()


@pytest.mark.full     # make test grades a class on a Dask cluster (test_class.py)
def test_with_a_dask_scheduler_checks_run_on_its_workers(tmp_path):
    """`--scheduler`: the grading runs on a Dask worker (a separate process of the cluster), and its log says which."""
    import csv
    import logging

    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR, memory_limit=0) as cluster:
        prepare_service(tmp_path / "state", [ASG, "attention"])
        s = LocalService(tmp_path, _roster(), args=("--scheduler", cluster.scheduler_address))
        try:
            status, answer = s.check("ada", variants.submission(ASG), ASG)
            assert status == 200 and answer["total"] == 11, answer
            workers = set(cluster.scheduler_info["workers"])
        finally:
            s.close()
    with open(s.state / "checks.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["graded by"] for r in rows] == [next(iter(workers))], (rows, workers)


@SHARED
@pytest.mark.browser
def test_the_upload_page_shows_a_learner_s_script_as_text(browser, service, tmp_path):

    nb = tmp_path / f"{ASG}.ipynb"
    nbformat.write(variants.submission(ASG, {"rope": SCRIPTED_ROPE}), str(nb))
    page = browser.new_page()
    violations = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    response = page.goto(service.url + "/")
    assert "default-src 'none'" in response.headers["content-security-policy"]
    page.fill("input[name=token]", service.roster["learners"]["eve"])          # asked once: the login form
    page.click("button[type=submit]")
    page.wait_for_selector("input[name=notebook]")
    assert "Checking as eve" in page.inner_text("body") and page.locator("input[name=token]").count() == 0
    page.select_option("select[name=assignment]", ASG)
    page.set_input_files("input[name=notebook]", str(nb))
    page.click("button[type=submit]")
    page.wait_for_selector("#answer", timeout=300_000)
    text = page.inner_text("#answer")
    rope = re.search(r"rope_tests: ([\d.]+) / 4", text)
    assert "<script>window.pwned = 1</script>" in text and rope and float(rope.group(1)) < 1, text
    assert page.evaluate("window.pwned") is None


@SHARED
def test_check_in_the_learner_s_kernel_prints_the_feedback(service, tmp_path, monkeypatch):
    """The released notebook's own check() cell, run in a real kernel beside the saved notebook, with the address
    and token from the environment: it prints the scores and each graded cell's verdict."""
    monkeypatch.setenv("COURSE_CHECK_URL", service.url)
    monkeypatch.setenv("COURSE_CHECK_TOKEN", service.roster["learners"]["ben"])
    printed = run_check_cell(ASG, tmp_path)
    assert f"{ASG}: 11 / 11 points (a check: no grade changed)" in printed, printed
    assert "rope_tests: 4 / 4 points" in printed, printed


SLOW = 8          # seconds a slow notebook sleeps while it is graded: the checks after it wait


def _slow(seconds: float = SLOW):
    """The reference notebook with a cell that sleeps `seconds` (it runs while the notebook is graded)."""
    nb = variants.submission(ASG)
    nb.cells.append(nbformat.v4.new_code_cell(f"import time\ntime.sleep({seconds})"))
    return nb


PROGRESS = re.compile(r"Check received: (?:waiting, number (\d+) in the queue|your notebook is being graded) "
                      r"\((\d+) s so far\)")
# An answer's first line, whatever the score (what a check scores is tested above; on a loaded machine a correct
# notebook may lose a timed test's points).
ANSWERED = re.compile(rf"{ASG}: [\d.]+ / 11 points \(a check: no grade changed\)")


@SHARED
@pytest.mark.full     # too long for make test (docs/testing.md)
def test_a_check_answered_at_once_says_its_place_then_its_time_then_its_answer(service):
    """`Prefer: respond-async`: while mia's slow check is graded, ned's and ola's are answered at once, 202 with where
    to ask (relative to the check's address) and their places in the queue, 1 and 2. Asked again, ola's says its place
    and the seconds since it was received, moving up as the checks before it are graded, then that it is graded, then
    its answer: the answer a check answered once graded gets, which stays there to be asked for again. Only the
    learner who sent it is told of it."""
    tokens = service.roster["learners"]
    t = time.monotonic()
    status, mia, _ = service.send("mia", _slow(), ASG)
    assert status == 202 and mia["state"] == "grading", mia
    status, ned, headers = service.send("ned", variants.submission(ASG), ASG)
    assert status == 202, ned
    status, ola, _ = service.send("ola", variants.submission(ASG), ASG)
    received = time.monotonic() - t
    print(f"\nthree checks received, answered 202, in {received:.2f} s while the first was graded")
    assert status == 202 and received < 5, (status, received)
    assert headers["Location"] == f"../checks/{ned['id']}" and ned["poll"] == headers["Location"]
    assert headers["Preference-Applied"] == "respond-async" and headers["Retry-After"] == "1"
    assert [(w["state"], w["position"], w["seconds"]) for w in (ned, ola)] == [("queued", 1, 0), ("queued", 2, 0)]
    assert ola["text"] == "Check received: waiting, number 2 in the queue (0 s so far)", ola
    assert service.ask(ola["id"], tokens["ola"])[0] == 202
    for token, refused in [(tokens["mia"], 404), (None, 401), ("not-a-token", 403)]:   # told only to its learner
        status, answer, _ = service.ask(ola["id"], token)
        assert status == refused and "text" not in answer, (status, answer)
    status, answer, _ = service.ask("no-such-check", tokens["ola"])
    assert status == 404 and "no check of yours has this id" in answer["error"], answer
    said = []
    while (asked := service.ask(ola["id"], tokens["ola"]))[0] == 202:
        said.append((asked[1]["state"], asked[1].get("position"), asked[1]["seconds"], asked[1]["text"]))
        time.sleep(0.5)
    status, answer, _ = asked
    steps = [(state, place) for state, place, _, _ in said]
    print(f"ola's check, asked every half second: {sorted(set(steps), key=steps.index)}, then {status}")
    assert sorted(set(steps), key=steps.index) == [("queued", 2), ("queued", 1), ("grading", None)], steps
    assert [s for _, _, s, _ in said] == sorted(s for _, _, s, _ in said) and said[-1][2] >= SLOW, said
    assert all(PROGRESS.fullmatch(text) for *_, text in said), said
    sync_status, sync = service.check("pat", variants.submission(ASG), ASG)      # no preference: once graded
    assert sync_status == 200 and "id" not in sync and "state" not in sync, sync
    assert status == 200 and ANSWERED.fullmatch(answer["text"].split("\n")[0]), answer
    assert set(answer) == set(sync) and [c["cell"] for c in answer["cells"]] == [c["cell"] for c in sync["cells"]]
    assert service.ask(ola["id"], tokens["ola"])[:2] == (200, answer)                 # kept: asked again, the same
    assert service.answer("ned", ned["id"])[0] == service.answer("mia", mia["id"])[0] == 200
    counted = _counted(service)
    assert [counted[(name, ASG)]["checks"] for name in ("mia", "ned", "ola")] == ["1", "1", "1"]


@pytest.mark.full     # too long for make test (docs/testing.md)
def test_checks_answered_at_once_hold_their_place_until_answered(busy):
    """A check answered at once holds no connection while it waits, but holds what a waiting check holds: ivy's two
    (the first slow) are taken, 202, and her third is refused, 503 as when her clients waited; once they are
    answered, her next is taken."""
    token = busy.roster["learners"]["ivy"]
    first = busy.send("ivy", _slow(4), ASG)
    second = busy.post(f"/check/{ASG}", b"[]", token, {"Prefer": "respond-async"})
    assert [first[0], second[0]] == [202, 202], (first[1], second[1])
    status, answer, headers = busy.post(f"/check/{ASG}", b"[]", token, {"Prefer": "respond-async"})
    assert status == 503 and "you have 2 checks waiting" in answer["error"] and int(headers["Retry-After"]) >= 1
    assert busy.answer("ivy", first[1]["id"])[1]["text"]              # answered (whatever the grading said)
    status, answer = busy.answer("ivy", second[1]["id"])
    assert status == 400 and "not a notebook" in answer["error"] and answer["text"].startswith("Check failed"), answer
    status, again, _ = busy.post(f"/check/{ASG}", b"[]", token, {"Prefer": "respond-async"})
    assert status == 202 and busy.answer("ivy", again["id"])[0] == 400


@SHARED
@pytest.mark.full     # too long for make test (docs/testing.md)
def test_check_in_the_learner_s_kernel_says_its_place_and_time_while_it_waits(service, tmp_path, monkeypatch):
    """check() as `make criteria` writes it into each release (from autograder/authoring/check_client.py), in a real
    kernel, while rae's slow check holds the grader: it prints at once that the check was received and its place in
    the queue, then, while it waits, that it is graded with the seconds so far, then the answer; refused, it prints
    why at once. The check() of the earlier releases (one request, its answer once graded) still gets its answer."""
    monkeypatch.setenv("COURSE_CHECK_URL", service.url)
    monkeypatch.setenv("COURSE_CHECK_TOKEN", service.roster["learners"]["sal"])
    assert service.send("rae", _slow(), ASG)[0] == 202
    printed = run_check_cell(ASG, tmp_path, criteria.check_cell_source(ASG))
    lines = printed.splitlines()
    score = next(i for i, line in enumerate(lines) if ANSWERED.fullmatch(line))
    progress = [PROGRESS.fullmatch(line) for line in lines[:score]]
    print("\n" + "\n".join(lines[:score + 1]))
    assert progress and all(progress), printed
    assert progress[0].group(1) == "1" and int(progress[0].group(2)) <= 2, lines[0]     # at once, with its place
    assert any(m.group(1) is None for m in progress), printed                           # then graded
    assert int(progress[-1].group(2)) > int(progress[0].group(2)), printed              # the seconds so far
    assert "rope_tests: " in printed, printed
    monkeypatch.setenv("COURSE_CHECK_TOKEN", service.roster["learners"]["tom"])
    printed = run_check_cell(ASG, tmp_path, first_check(ASG))
    assert ANSWERED.fullmatch(printed.splitlines()[0]) and "Check received" not in printed, printed
    monkeypatch.setenv("COURSE_CHECK_TOKEN", "not-a-token")             # a first answer that is not 202 is the answer
    printed = run_check_cell(ASG, tmp_path, criteria.check_cell_source(ASG))
    assert printed == "Check refused (403): this check token belongs to no learner of the course\n", printed


@SHARED
@pytest.mark.full     # too long for make test (docs/testing.md)
def test_the_upload_page_says_at_once_its_check_s_place_and_time(browser, service, tmp_path):
    """An upload while uma's slow check holds the grader: the browser is sent at once to its check's page, which says
    that it was received, its place in the queue and the seconds so far, reloads itself (no script runs) with the
    seconds growing, and then shows the verdicts. The page is its learner's alone. What the page showed is in
    _build/screenshots/check-upload-waiting.png and check-upload-answered.png."""

    SHOTS.mkdir(parents=True, exist_ok=True)
    nb = tmp_path / f"{ASG}.ipynb"
    nbformat.write(variants.submission(ASG), str(nb))
    page = browser.new_page()
    violations = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(service.url + "/")
    page.fill("input[name=token]", service.roster["learners"]["val"])
    page.click("button[type=submit]")
    page.wait_for_selector("input[name=notebook]")
    page.select_option("select[name=assignment]", ASG)
    page.set_input_files("input[name=notebook]", str(nb))
    assert service.send("uma", _slow(), ASG)[0] == 202
    t = time.monotonic()
    page.click("button[type=submit]")
    page.wait_for_selector("#progress")
    shown = time.monotonic() - t
    first = page.inner_text("#progress")
    page.screenshot(path=SHOTS / "check-upload-waiting.png")
    print(f"\nthe check's page {shown:.2f} s after the upload was sent: {first!r}")
    m = PROGRESS.fullmatch(first)
    assert m and m.group(1) == "1" and shown < 5, first
    assert re.search(r"/upload/[A-Za-z0-9_-]+$", page.url), page.url
    assert page.locator("script").count() == 0
    later = first
    deadline = time.monotonic() + 60
    while later == first and time.monotonic() < deadline:          # the page reloads itself
        time.sleep(0.5)
        later = page.locator("#progress, #answer").first.inner_text()
    print(f"then: {later.splitlines()[0]!r}")
    assert later != first and (PROGRESS.fullmatch(later) or ANSWERED.match(later)), later
    page.wait_for_selector("#answer", timeout=300_000)
    page.screenshot(path=SHOTS / "check-upload-answered.png")
    assert ANSWERED.match(page.inner_text("#answer")), page.inner_text("#answer")
    assert page.get_attribute("a:text-is('Check again')", "href") == "../"
    where = page.url
    assert not violations, violations
    # the page is its learner's: no login is asked to log in, another learner is told there is no such check
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(where, timeout=60)
    assert e.value.code == 401 and "log in" in e.value.read().decode()
    other, _, _ = _login(service, service.roster["learners"]["wes"])
    with pytest.raises(urllib.error.HTTPError) as e:
        other.open(where, timeout=60)
    assert e.value.code == 404 and "no check of yours has this id" in e.value.read().decode()


def test_the_fair_queue_and_the_rate_limit_by_their_rules():
    """FairQueue: with one slot, a learner's burst is served in turn with the others'; RateLimit: a sliding window."""
    async def run():
        q, order = FairQueue(1), []

        async def one(learner, i):
            await q.turn(learner)
            order.append(f"{learner}{i}")
            await asyncio.sleep(0.01)
            q.done()

        tasks = [asyncio.create_task(one("a", i)) for i in range(4)]
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(one("b", 0)), asyncio.create_task(one("c", 0))]
        await asyncio.gather(*tasks)
        return order

    order = asyncio.run(run())
    assert order == ["a0", "b0", "c0", "a1", "a2", "a3"], order
    r = RateLimit(2, 10.0)
    r.take("a", now=0.0)
    r.take("a", now=1.0)
    assert r.retry_after("a", now=2.0) == pytest.approx(8.0) and r.retry_after("b", now=2.0) == 0
    assert r.retry_after("a", now=10.5) == 0
    r.take("a", now=10.6)
    r.give_back("a", 1.0)                            # a check the grader failed is given back, that one only
    assert list(r.seen["a"]) == [10.6]


def test_a_check_s_place_in_the_queue_is_the_order_it_starts_in():
    """FairQueue.position: with one slot and a0 graded, the places of the checks waiting are the order they start in
    (b and c, never served, before a's next), a place moves up as checks start, a check that arrives later from a
    learner served less recently goes before it, and a check whose turn came has none."""
    async def run():
        q, started, turns = FairQueue(1), [], {}

        def join(name: str):
            turns[name] = q.join(name[0])
            turns[name].add_done_callback(lambda _: started.append(name))

        for name in ["a0", "a1", "a2", "b0", "c0"]:
            join(name)
        places = {name: q.position(f) for name, f in turns.items()}
        assert (q.count(), q.running) == (4, 1)
        await asyncio.sleep(0)
        q.done()                                                  # a0 ends: b0 starts
        await asyncio.sleep(0)
        after = {name: q.position(turns[name]) for name in ["a1", "a2", "c0"]}
        join("d0")                                                # never served: before a's next
        later = {name: q.position(turns[name]) for name in ["a1", "c0", "d0"]}
        while q.count():
            q.done()
            await asyncio.sleep(0)
        return places, after, later, started

    places, after, later, started = asyncio.run(run())
    assert places == {"a0": None, "a1": 3, "a2": 4, "b0": 1, "c0": 2}, places
    assert after == {"a1": 2, "a2": 3, "c0": 1} and later == {"a1": 3, "c0": 1, "d0": 2}, (after, later)
    assert started == ["a0", "b0", "c0", "d0", "a1", "a2"], started


def test_answers_are_kept_for_their_learner_alone_for_a_while():
    """Checks (the checks answered at once) by its rules, times given: a check is found by its id for its learner
    only; its answer is kept `kept` seconds after it is given, then forgotten; a learner's answers past `per_learner`
    are forgotten oldest first, and a check still waiting is never forgotten."""
    c = Checks(kept=600.0, per_learner=2)
    a = [c.new("ada", ASG, now=float(i)) for i in range(4)]
    b = c.new("ben", ASG, now=0.0)
    assert len({p.id for p in [*a, b]}) == 5 and all(len(p.id) >= 20 for p in a)
    assert c.get(a[0].id, "ada", now=1.0) is a[0] and c.get(a[0].id, "ben", now=1.0) is None
    assert c.get(a[0].id, "ad", now=1.0) is None and c.get("x" + a[0].id, "ada", now=1.0) is None
    assert a[0].state() == "queued"
    c.done(b, 200, {"total": 1}, now=10.0)
    c.done(a[0], 200, {"total": 1}, now=10.0)
    c.done(a[1], 200, {"total": 2}, now=11.0)
    assert c.get(a[0].id, "ada", now=12.0) is a[0] and a[0].state() == "done"     # two answers of ada's: kept
    c.done(a[2], 400, {"error": "x"}, now=12.0)                                    # a third: her oldest forgotten
    assert c.get(a[0].id, "ada", now=13.0) is None and c.get(a[1].id, "ada", now=13.0) is a[1]
    assert c.get(b.id, "ben", now=610.0) is b                                      # within the time kept
    assert c.get(b.id, "ben", now=610.5) is None                                   # past it: forgotten
    assert c.get(a[3].id, "ada", now=10_000.0) is a[3]                             # waiting: never forgotten
    assert set(c.checks) == {a[3].id}


def test_admission_takes_every_limit_at_once_and_gives_back_only_grader_failures():
    """Admission by its rules: each limit refuses with its status; a ticket released as charged keeps its
    rate-limit slot, one released as the grader's failure gives it back; what a ticket holds is given back once."""
    a = Admission((3, 3600.0), per_learner=2, waiting=3, bytes_held=100, slots=1)
    t1, t2 = a.admit("a", 10), a.admit("a", 10)
    with pytest.raises(Refusal) as e:
        a.admit("a", 10)
    assert e.value.status == 503 and "2 checks waiting" in e.value.why and int(e.value.headers["Retry-After"]) >= 1
    t3 = a.admit("b", 10)
    with pytest.raises(Refusal) as e:
        a.admit("c", 10)
    assert e.value.status == 503 and "3 checks waiting" in e.value.why
    t1.release(charged=False)
    t1.release(charged=True)                         # once only
    with pytest.raises(Refusal) as e:
        a.admit("c", 81)
    assert e.value.status == 503 and "bytes" in e.value.why
    assert a.waiting == {"a": 1, "b": 1} and a.held == 20
    t2.release()
    t3.release()
    t4, t5 = a.admit("a", 10), a.admit("a", 10)     # a's second and third: the one given back made room
    with pytest.raises(Refusal) as e:
        a.admit("a", 10)
    assert e.value.status == 429 and "Retry-After" in e.value.headers
    t4.release()
    t5.release()
    assert a.held == 0 and not a.waiting


@SHARED
def test_fifty_checks_at_once_from_one_token_get_the_rate_limit_s_three(service):
    """Fifty requests from one token, every one's headers before any body: the first three take the three checks an
    hour and are answered once their bodies arrive (not notebooks: 400, counted); the other 47 are refused 429 from
    their headers, before their bodies are sent."""
    checks = [RawCheck(service.port, f"/check/{ASG}", service.roster["learners"]["hal"], b"[]") for _ in range(50)]
    deadline = time.monotonic() + 30
    while sum(c.answered() for c in checks) < 47 and time.monotonic() < deadline:
        time.sleep(0.1)
    early = [c for c in checks if c.answered()]
    assert len(early) == 47
    assert {c.answer()[0] for c in early} == {429}
    late = [c for c in checks if c not in early]
    for c in late:
        c.send_body()
    assert [c.answer()[0] for c in late] == [400, 400, 400]
    assert _counted(service)[("hal", ASG)]["checks"] == "3"


@SHARED
def test_a_long_dead_alias_chain_is_read_in_time_and_graded(service):
    """A notebook whose reading took the grader minutes (a dead chain of 4,000 aliases, last to first) is read in
    linear time now: answered 200 with the marks of the reference, well within the check's 40 s."""
    t = time.monotonic()
    status, answer = service.check("ivy", _dead_alias_chain(4000), ASG)
    assert status == 200 and answer["total"] == 11, answer
    assert time.monotonic() - t < 40


def test_a_check_past_its_time_is_the_learner_s_and_counted(tmp_path):
    """Whatever keeps a check's grading past the learner's deadline is their notebook's doing: a real grader given
    less time than any grading takes stops it and answers for the learner (counted), not as a grader fault."""
    prepare_service(tmp_path / "state", [ASG])
    checker = grading.Checker(tmp_path / "state", [ASG])
    checker.timeout = 0.5
    try:
        with pytest.raises(grading.Refused) as refused:
            checker.check(ASG, "ivy", nbformat.writes(variants.submission(ASG)).encode())
    finally:
        checker.close()
    assert refused.value.grader is False and "did not finish within 0.5 s" in str(refused.value)
    assert "it was counted" in str(refused.value)


@SHARED
def test_a_notebook_that_would_kill_its_worker_is_graded_as_such(service):
    """A rope that would kill the process it runs in: the policy refuses it where it runs; the learner's check is
    answered 200 with that part at 0 and why."""
    status, answer = service.check("kim", variants.submission(ASG, {"rope": KILLING_ROPE}), ASG)
    assert status == 200 and answer["total"] < 11, answer
    rope = next(c for c in answer["cells"] if c["cell"] == "rope_tests")
    assert rope["score"] == 0 and "importing os is not allowed" in rope["text"], rope


@SHARED
def test_a_body_past_the_cap_is_refused_and_counted(service):
    """A chunked upload (no length said) that passes the 400,000-byte cap: 413 and counted (two more, then 429)."""
    check = RawCheck(service.port, f"/check/{ASG}", service.roster["learners"]["lu"], b"x" * 500_000, chunked=True)
    check.send_body()
    status, _, answer = check.answer()
    assert status == 413 and "400000" in answer["error"], answer
    token = service.roster["learners"]["lu"]
    assert [service.post(f"/check/{ASG}", b"[]", token)[0] for _ in range(3)] == [400, 400, 429]


@SHARED
def test_notes_reach_the_learner_as_plain_text(service):
    """A notebook with a copied solution cell: the grader's note on it (from the grading's record) reads as written,
    with no markdown escape."""
    nb = variants.submission(ASG)
    i, cell = next((i, c) for i, c in enumerate(nb.cells) if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    copy = nbformat.from_dict(json.loads(json.dumps(cell)))
    copy["id"] = "copied-cell"
    nb.cells.insert(i + 1, copy)
    status, answer = service.check("gus", nb, ASG)
    assert status == 200, answer
    note = "your notebook holds the cell sinusoidal_encoding more than once (a copied cell keeps its grading id)"
    assert any(n.startswith(note) for n in answer["notes"]), answer["notes"]
    assert f"Grader note: {note}" in answer["text"] and "\\" not in answer["text"], answer["text"]


@SHARED
def test_a_learner_s_words_come_back_as_written(service):
    """A rope whose error is full of markdown's marks: the answer says it byte for byte, in the verdict's text and in
    the whole answer's, as the grading's record holds it (nothing rendered is read back, escaped or not)."""
    status, answer = service.check("jo", variants.submission(ASG, {"rope": MARKED_ROPE}), ASG)
    assert status == 200, answer
    rope = next(c for c in answer["cells"] if c["cell"] == "rope_tests")
    said = f"your code raised ValueError: {MARKS}"
    assert rope["score"] < 4 and said in rope["text"] and said in answer["text"], rope["text"]


@SHARED
def test_the_service_answers_while_it_warms_up(service):
    """The port is bound first: the first answer (before the graders were ready) was 503 with Retry-After."""
    started = service.started
    assert started["first_status"] == 503 and int(started["first_retry_after"]) >= 1, started
    assert started["first_answer_s"] < started["ready_s"], started


@SHARED
def test_a_taken_port_is_one_clear_line(service, tmp_path):
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "autograder.service", "--roster", str(service.roster_path),
                        "--state", str(tmp_path / "state"), "--port", str(service.port)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and time.monotonic() - t < 60
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{service.port}" in lines[0] and "the port is taken" in lines[0], lines


@pytest.mark.parametrize("when", ["warming up", "ready"])
@pytest.mark.full     # too long for make test (docs/testing.md)
def test_sigint_stops_the_service_even_where_it_was_ignored(tmp_path, when):
    """A hub stops its services with SIGINT and waits 30 s before SIGTERM. The service stops within seconds, whether
    its graders are still being prepared or ready, also when it was started with SIGINT ignored (as a shell starts a
    job in the background), says that it stopped, and leaves no grader behind."""
    roster = tmp_path / "roster.json"
    roster.write_text(json.dumps(_roster()))
    log_path, url = tmp_path / "server.log", f"http://127.0.0.1:{(port := free_port())}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "autograder.service", "--roster", str(roster), "--state",
                                 str(tmp_path / "state"), "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        try:
            (wait_for if when == "warming up" else wait_ready)(url, proc, log_path)
            children = psutil.Process(proc.pid).children(recursive=True)
            t = time.monotonic()
            proc.send_signal(signal.SIGINT)
            code = proc.wait(20)
        finally:
            proc.kill()
    out = log_path.read_text()
    assert code == 0 and "stopped" in out and "Traceback" not in out, (code, out[-3000:])
    print(f"\nstopped {when} in {time.monotonic() - t:.1f} s")
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, [p.cmdline() for p in alive]


def test_tokens_write_a_private_roster_outside_the_course(tmp_path):
    """`tokens` writes the roster where the service reads it by default (the instructor's configuration folder, not
    the course's repository), mode 0600, with its instructors as docs/instructors.md says, and keeps an existing one."""
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("XDG_CONFIG_HOME", None)
    argv = [sys.executable, "-m", "autograder.service", "tokens", "--learners", "ada", "ben", "--assignments", ASG,
            "--instructors", "prof"]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    path = tmp_path / ".config" / "course-check" / "roster.json"
    assert (path.stat().st_mode & 0o777) == 0o600 and (path.parent.stat().st_mode & 0o777) == 0o700
    written = json.loads(path.read_text())
    assert set(written["learners"]) == {"ada", "ben"} and set(written["instructors"]) == {"prof"}
    assert "instructor" not in written
    roster = Roster.load(path)
    assert roster.is_instructor(written["instructors"]["prof"]) and not roster.is_instructor(written["learners"]["ada"])
    again = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    assert again.returncode != 0 and "exists" in again.stderr and json.loads(path.read_text()) == written
    # A roster written where the old instructions put it, at the course's root, is ignored by git.
    assert subprocess.run(["git", "check-ignore", "-q", "roster.json"], cwd=ROOT).returncode == 0
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"learners": {}, "instructor": "x"}))
    with pytest.raises(SystemExit, match="instructors"):
        Roster.load(old)


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """A service with small caps on what waits: 2 checks a learner, 4 in all, 1,000,000 bytes, 12 connections."""
    s = LocalService(tmp_path_factory.mktemp("busy"),
                     _roster(rate=[1000, 3600], max_concurrent=1, max_bytes=400_000, max_waiting_per_learner=2,
                             max_waiting=4, max_bytes_held=1_000_000, max_connections=12))
    yield s
    s.close()


@pytest.mark.full     # too long for make test (docs/testing.md)
def test_what_waits_is_capped_and_refused_before_its_body(busy):
    """While one slow check holds the grader, clients that send their headers and wait: a learner's third check, the
    bytes past the cap, the fifth check waiting and the 13th connection are each refused 503 with Retry-After before
    any body is sent; the checks admitted are answered; and then everything is free again."""
    slow = variants.submission(ASG)
    slow.cells.append(nbformat.v4.new_code_cell("import time\ntime.sleep(10)"))
    token, path = busy.roster["learners"], f"/check/{ASG}"

    def refused(check: RawCheck, says: str):
        assert check.answered(30)
        status, headers, answer = check.answer()
        assert status == 503 and int(headers["Retry-After"]) >= 1 and says in answer["error"], (status, answer)

    def one_refused(checks: list[RawCheck], says: str) -> list[RawCheck]:
        """Of checks sent together, the one whose headers the service reads last is refused, whichever that is (its
        event loop reads connections that are ready together in no set order); returns the others, which wait."""
        deadline = time.monotonic() + 30
        while not any(c.answered() for c in checks) and time.monotonic() < deadline:
            time.sleep(0.05)
        answered = [c for c in checks if c.answered()]
        assert len(answered) == 1, f"{len(answered)} of {len(checks)} checks answered before their bodies"
        refused(answered[0], says)
        return [c for c in checks if c is not answered[0]]

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(busy.check, "ada", slow, ASG)
        deadline = time.monotonic() + 120
        while not list((busy.state / "scratch").iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        dee = one_refused([RawCheck(busy.port, path, token["dee"], b"x" * 300_000) for _ in range(3)],
                          "you have 2 checks waiting")
        refused(RawCheck(busy.port, path, token["eve"], b"x" * 400_000), "as many bytes as the service takes")
        fay = one_refused([RawCheck(busy.port, path, token["fay"], b"[]") for _ in range(2)],
                          "the service has 4 checks waiting")
        # ada's, dee's two and fay's first are open: 8 more connections are taken, the rest refused on arrival.
        time.sleep(0.5)
        bare = []
        for _ in range(12):
            bare.append(socket.create_connection(("127.0.0.1", busy.port)))
            time.sleep(0.1)
        time.sleep(2.0)              # the 8 taken stay unanswered (their headers may take 10 s), the 4 refused are not
        answered = select.select(bare, [], [], 0)[0]
        assert len(answered) == 4, len(answered)
        for s in answered:
            reply = s.recv(4096).decode()
            assert reply.startswith("HTTP/1.1 503") and "Retry-After: 5" in reply and "connections" in reply, reply
        for s in bare:
            s.close()
        waiting = [*dee, *fay]
        assert not any(c.answered() for c in waiting)
        for c in waiting:
            c.send_body()
        assert [c.answer()[0] for c in waiting] == [400, 400, 400]
        assert first.result()[0] == 200
    for name in ["dee", "eve", "fay", "gus"]:
        assert busy.post(path, b"[]", token[name])[0] == 400


ATTACKER = "127.0.0.2"        # the anonymous sockets' address; the learners' checks come from 127.0.0.1


class _Attacker(threading.Thread):
    """Anonymous sockets from ATTACKER, one for each of `heads` (a request's headers: never a body), each sending its
    head at once or, `slow`, a byte every `slow` seconds; one the server answers or closes is counted and, `again`,
    opened anew. `seen` lists (its status, 0 for closed unanswered; the seconds it was open); `live`, those open."""

    def __init__(self, port: int, heads: list[bytes], slow: float = 0.0, again: bool = True):
        super().__init__(daemon=True)
        self.port, self.heads, self.slow, self.again = port, heads, slow, again
        self.seen: list[tuple[int, float]] = []
        self.live: list[list] = []
        self.opened = 0
        self.stop = threading.Event()

    def _open(self, i: int) -> list:
        s = socket.socket()
        s.bind((ATTACKER, 0))
        s.connect(("127.0.0.1", self.port))
        self.opened += 1
        return [s, i, 0, time.monotonic()]        # the socket, its head, the bytes of it sent, when it was opened

    def run(self):
        self.live = [self._open(i) for i in range(len(self.heads))]
        while self.live and not self.stop.is_set():
            for e in self.live:
                head, n = self.heads[e[1]], 1 if self.slow else len(self.heads[e[1]])
                if e[2] < len(head):
                    try:
                        e[2] += e[0].send(head[e[2]:e[2] + n])
                    except OSError:
                        pass
            ready = select.select([e[0] for e in self.live], [], [], self.slow or 0.05)[0]
            for e in [e for e in self.live if e[0] in ready]:
                try:
                    data = e[0].recv(4096)
                except OSError:
                    data = b""
                self.seen.append((int(data.split()[1]) if data.startswith(b"HTTP/") else 0, time.monotonic() - e[3]))
                e[0].close()
                self.live.remove(e)
                if self.again:
                    time.sleep(0.02)
                    self.live.append(self._open(e[1]))
        for e in self.live:
            e[0].close()

    def statuses(self) -> dict[int, int]:
        return {st: [s for s, _ in self.seen].count(st) for st in sorted({s for s, _ in self.seen})}


def _upload_head(length: int, cookie: str = "") -> bytes:
    return (f"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=b\r\n"
            f"{cookie}Content-Length: {length}\r\n\r\n").encode()


def _login(service, token: str) -> tuple[urllib.request.OpenerDirector, str, str]:
    """A client logged in on the upload page with `token` (its form, as a browser sends it): the client with its
    cookies, the upload page it was sent to, and the form's XSRF value."""
    jar = http.cookiejar.CookieJar()
    client = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = client.open(service.url + "/", timeout=60).read().decode()
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"_xsrf": xsrf, "token": token}).encode()
    try:
        page = client.open(service.url + "/login", data=form, timeout=60).read().decode()
    except urllib.error.HTTPError as e:
        return client, e.read().decode(), ""
    return client, page, re.search(r'name="_xsrf" value="([^"]+)"', page).group(1)


def _upload_answer(client: urllib.request.OpenerDirector, req) -> tuple[int, str, list[str]]:
    """An upload (`req`) sent by a logged-in `client`, which is sent at once to its check's page, then that page asked
    for again until it is the answer: its status, its text, and the texts of the pages that said the check waits."""
    waited = []
    try:
        r = client.open(req, timeout=60)
        while r.status == 202:
            waited.append(r.read().decode())
            time.sleep(0.5)
            r = client.open(r.url, timeout=60)
        return r.status, r.read().decode(), waited
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), waited


def _cookies(client: urllib.request.OpenerDirector) -> str:
    jar = next(h for h in client.handlers if isinstance(h, urllib.request.HTTPCookieProcessor)).cookiejar
    return "Cookie: " + "; ".join(f"{c.name}={c.value}" for c in jar) + "\r\n"


@pytest.fixture(scope="module")
def defaults(tmp_path_factory):
    """A service with the roster's own caps (4,000,000-byte notebooks, 64 MiB of them held, 256 connections, 64
    anonymous and 16 from one address, 10 s for a request's headers), one grading at a time, room for many checks."""
    s = LocalService(tmp_path_factory.mktemp("defaults"), _roster(rate=[1000, 3600], max_concurrent=1))
    yield s
    s.close()


def test_the_gate_bounds_anonymous_connections_by_address_and_in_all():
    """Gate by its rules (times given): a burst from one address is taken while there is room; past its share an
    address makes room only of its own old ones; another address's connection takes the place of the one past its
    share, or of the oldest past the grace; a connection that says who it is leaves the anonymous ones."""
    g = Gate(connections=10, anonymous=4, per_peer=2, grace=2.0)
    a = [object() for _ in range(5)]
    assert [g.enter(c, "A", now=0.0) for c in a[:4]] == [(None, None)] * 4       # a burst, past the share of 2
    why, _ = g.enter(a[4], "A", now=0.5)
    assert "not said who they are" in why and g.count("A") == 4                   # full, its own all young
    b = object()
    assert g.enter(b, "B", now=0.5) == (None, a[0]) and g.evicted == 1             # A's oldest, young as it is
    assert g.enter(a[4], "A", now=3.0) == (None, a[1])                              # its own oldest, past the grace
    g = Gate(connections=3, anonymous=2, per_peer=2, grace=2.0)
    c = [object() for _ in range(4)]
    g.enter(c[0], "A", now=0.0)
    g.enter(c[1], "B", now=0.0)
    assert g.enter(c[2], "C", now=1.0)[0] is not None                              # full, none past the grace
    g.identified(c[0])
    assert g.enter(c[2], "C", now=1.0) == (None, None) and g.count() == 2
    why, _ = g.enter(c[3], "D", now=1.5)
    assert why == "the check service has as many connections open as it takes"
    assert g.enter(c[3], "D", now=2.5) == (None, c[1])                             # B's, past the grace
    g.closed(c[0])
    g.closed(c[0])
    assert len(g.open) == 2 and g.count() == 2
    assert peer_of(("10.0.0.1", 5)) == peer_of(("::ffff:10.0.0.1", 6, 0, 0)) == "10.0.0.1"
    assert peer_of(("2001:db8::1", 5, 0, 0)) == peer_of(("2001:db8::ff:2", 6, 0, 0)) == "2001:db8::/64"


def test_the_upload_page_knows_its_learner_from_its_headers(defaults):
    """Standalone, the upload page asks for the token once (a small form) and knows the learner by the login cookie
    it sets: an upload without it is refused 401 before its body; with it, the upload is the learner's check."""
    anonymous = RawCheck(defaults.port, "/upload", None, b"x" * 1_000_000)
    assert anonymous.answered(10)
    assert anonymous.answer()[0] == 401
    client, page, _ = _login(defaults, "not-a-token")
    assert "belongs to no learner" in page
    client, page, xsrf = _login(defaults, defaults.roster["learners"]["kim"])
    assert "Checking as kim" in page and 'name="notebook"' in page and 'name="token"' not in page
    cookie = next(c for c in next(h for h in client.handlers if isinstance(h, urllib.request.HTTPCookieProcessor))
                  .cookiejar if c.name == COOKIE)
    assert cookie.has_nonstandard_attr("HttpOnly")
    body = (f'--b\r\nContent-Disposition: form-data; name="_xsrf"\r\n\r\n{xsrf}\r\n--b\r\nContent-Disposition: '
            f'form-data; name="assignment"\r\n\r\n{ASG}\r\n--b\r\nContent-Disposition: form-data; name="notebook"; '
            'filename="n.ipynb"\r\nContent-Type: application/octet-stream\r\n\r\n[]\r\n--b--\r\n').encode()
    req = urllib.request.Request(defaults.url + "/upload", data=body, headers={
        "Content-Type": "multipart/form-data; boundary=b"})
    status, page, _ = _upload_answer(client, req)
    assert status == 400 and "not a notebook" in page
    assert _counted(defaults)[("kim", ASG)]["checks"] == "1"


@pytest.mark.full     # too long for make test (docs/testing.md)
def test_anonymous_uploads_as_large_as_the_byte_cap_keep_no_learner_out(defaults):
    """The red team's probe: 17 anonymous uploads from another address whose Content-Lengths add up to the 64 MiB the
    checks waiting may hold, no body sent, each opened again when the service closes it. Each is refused 401 from
    its headers and holds nothing, so a learner's checks meanwhile are graded (not 503). Control: the same 17 sent
    by a learner the service knows (her login cookie) are held, two of them, as her limit says, the rest refused."""
    cap, each = Roster.max_bytes_held, Roster.max_bytes + FORM_MARGIN
    lengths = [each] * 16 + [cap - 16 * each]
    assert len(lengths) == 17 and sum(lengths) == cap == 64 << 20
    token = defaults.roster["learners"]["ada"]
    attacker = _Attacker(defaults.port, [_upload_head(n) for n in lengths])
    attacker.start()
    try:
        deadline = time.monotonic() + 30
        while len(attacker.seen) < 17 and time.monotonic() < deadline:
            time.sleep(0.1)
        first = attacker.statuses()
        status, answer = defaults.check("ada", variants.submission(ASG), ASG)
        statuses = [status] + [defaults.post(f"/check/{ASG}", b"[]", token)[0] for _ in range(9)]
    finally:
        attacker.stop.set()
        attacker.join()
    print(f"\nlearner: {statuses}; anonymous: {attacker.opened} opened, answered {attacker.statuses()}")
    assert first.get(401, 0) >= 17, first                         # the service read them and answered each
    assert status == 200 and answer["total"] == 11, answer
    assert statuses[1:] == [400] * 9                             # admitted: "not a notebook", counted
    assert attacker.statuses().get(401, 0) >= 17 and set(attacker.statuses()) <= {0, 401, 503}
    assert max(t for st, t in attacker.seen) < defaults.roster["anonymous_timeout"]        # none held
    client, _, _ = _login(defaults, defaults.roster["learners"]["eve"])
    control = _Attacker(defaults.port, [_upload_head(n, _cookies(client)) for n in lengths], again=False)
    control.start()
    try:
        deadline = time.monotonic() + 30
        while len(control.seen) < 15 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        held, refused = len(control.live), control.statuses()
        assert defaults.post(f"/check/{ASG}", b"[]", token)[0] == 400
    finally:
        control.stop.set()
        control.join()
    print(f"control (eve, known): {held} held, answered {refused}")
    assert held == 2 and refused == {503: 15}, (held, refused)


@pytest.mark.full     # too long for make test (docs/testing.md)
def test_slow_headers_are_cut_off_and_keep_no_learner_out(defaults):
    """Slowloris: 80 sockets from another address send their headers a byte every half second, never finishing. The
    service takes 64 (its anonymous cap: they arrive together, a burst past the 16 of one address while no one else
    needs the room) and refuses the other 16 at once, 503 before reading anything; a learner's check from another
    address meanwhile takes the place of the oldest (and the next ones the place it left) and is admitted; the rest
    are cut off unanswered at the 10 s a request's headers may take, however steadily they send. Their places are
    then free again."""
    heads = [b"POST /check/" + ASG.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200] * 80
    attacker = _Attacker(defaults.port, heads, slow=0.5, again=False)
    attacker.start()
    try:
        time.sleep(2.0)
        refused_at_once = attacker.statuses()
        statuses = [defaults.post(f"/check/{ASG}", b"[]", defaults.roster["learners"]["gus"])[0] for _ in range(3)]
        attacker.join(30)
    finally:
        attacker.stop.set()
        attacker.join()
    timeout = defaults.roster["anonymous_timeout"]
    cut = sorted(round(t, 1) for st, t in attacker.seen if st == 0)
    print(f"\nlearner: {statuses}; slow sockets: {attacker.opened} opened, refused at once {refused_at_once}, "
          f"closed unanswered after {cut[:4]} ... {cut[-2:]} s")
    assert statuses == [400, 400, 400]
    assert refused_at_once == {503: 16} and attacker.statuses() == {0: 64, 503: 16}
    assert len([t for t in cut if t < timeout - 1]) == 1      # the learner's first took one's place; then 63 left room
    assert all(timeout - 1 <= t <= timeout + 4 for t in cut[1:]), cut        # the rest: the header timeout
    again = _Attacker(defaults.port, heads[:16], slow=0.5, again=False)
    again.start()
    time.sleep(1.0)
    assert not again.seen and len(again.live) == 16                          # taken: the places were given back
    again.stop.set()
    again.join()
