"""autograder/service/: "check my work" through the real HTTP service, the real nbgrader autograde and a real
browser. A correct notebook gets full marks and the verdicts `nbgrader autograde` records; a broken one its diagnosis;
every refusal comes before any grading and says why; the rate limit, the caps on what waits and the fair queue hold
under clients arriving at once (raw sockets: every request's headers, then the bodies); a check touches no gradebook;
a failure the learner's notebook caused is their check (counted), a grader fault the grader's (503, not counted); the
service answers while it warms up; the upload page runs no script."""
import asyncio
import concurrent.futures
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import psutil
import pytest
from helpers import CHROMIUM, CHROMIUM_ARGS, MARKS, leaks, prepare, prepare_service, run_check_cell, suite_lines

from autograder import ROOT
from autograder.authoring import variants
from autograder.classroom import grade, report
from autograder.notebooks import graded_cells
from autograder.service import grading
from autograder.service.fair import Admission, FairQueue, RateLimit, Refusal
from autograder.service.local import LocalService, RawCheck, free_port, wait_for, wait_ready
from autograder.service.roster import Roster, new_roster
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
LEARNER_TIMEOUT = {"GRADER_LEARNER_BUDGET": "30", "GRADER_GRACE": "5"}    # learner_timeout: 30 + 2 x 5 = 40 s


def _roster(**kw) -> dict:
    r = new_roster(["ada", "ben", "cy", "dee", "eve", "fay", "gus", "hal", "ivy", "jo", "kim", "lu", FORMULA],
                   [ASG, "attention"])
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
    assert report.NUMBER.sub("#", answer["feedback_html"]) == report.NUMBER.sub("#", page)
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
    """Three checks of one broken notebook (each grading draws its own inputs): the answers name the same causes and
    say the same thing but for numbers and what each saw of its own drawn inputs, and hold nothing but the scores and
    the verdicts (no seed, no test's name)."""
    bug = {v.name: v for v in variants.load(ASG)}["halves_concatenated"]
    answers = [service.check("fay", variants.submission(ASG, bug.cells), ASG)[1] for _ in range(3)]
    for a in answers:
        assert set(a) == {"assignment", "total", "points", "cells", "notes", "seconds", "text"}, set(a)
        assert all(set(c) == {"cell", "text", "score", "points"} for c in a["cells"]), a["cells"]
        assert "seed" not in a["text"] and "test_" not in a["text"], a["text"]

    def said(a):
        lines = a["text"].split("\n")[1:]
        return report.NUMBER.sub("#", "\n".join(ln for ln in lines if not ln.lstrip().startswith("seen:")))

    assert said(answers[0]) == said(answers[1]) == said(answers[2])


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
def test_the_upload_page_shows_a_learner_s_script_as_text(service, tmp_path):
    from playwright.sync_api import sync_playwright

    nb = tmp_path / f"{ASG}.ipynb"
    nbformat.write(variants.submission(ASG, {"rope": SCRIPTED_ROPE}), str(nb))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page()
        violations = []
        page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
        response = page.goto(service.url + "/")
        assert "default-src 'none'" in response.headers["content-security-policy"]
        page.select_option("select[name=assignment]", ASG)
        page.set_input_files("input[name=notebook]", str(nb))
        page.fill("input[name=token]", service.roster["learners"]["eve"])
        page.click("button[type=submit]")
        page.wait_for_selector("#answer", timeout=300_000)
        text = page.inner_text("#answer")
        rope = re.search(r"rope_tests: ([\d.]+) / 4", text)
        assert "<script>window.pwned = 1</script>" in text and rope and float(rope.group(1)) < 1, text
        assert page.evaluate("window.pwned") is None
        browser.close()


@SHARED
def test_check_in_the_learner_s_kernel_prints_the_feedback(service, tmp_path, monkeypatch):
    """The released notebook's own check() cell, run in a real kernel beside the saved notebook, with the address
    and token from the environment: it prints the scores and each graded cell's verdict."""
    monkeypatch.setenv("COURSE_CHECK_URL", service.url)
    monkeypatch.setenv("COURSE_CHECK_TOKEN", service.roster["learners"]["ben"])
    printed = run_check_cell(ASG, tmp_path)
    assert f"{ASG}: 11 / 11 points (a check: no grade changed)" in printed, printed
    assert "rope_tests: 4 / 4 points" in printed, printed


@SHARED
@pytest.mark.browser
def test_the_jupyterlab_button_checks_the_open_notebook(service, tmp_path):
    """JupyterLab with the course's extension as `make install` installs it (labextension/, by pip): the notebook
    toolbar's "Check my work" saves the open notebook, runs its own check() cell in its kernel and shows what it
    prints."""
    from playwright.sync_api import sync_playwright

    from autograder.service.local import free_port, wait_for

    work = tmp_path / "work"
    work.mkdir()
    nbformat.write(variants.submission(ASG), str(work / "mine.ipynb"))       # any name: the file open is checked
    other = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}})
    nbformat.write(other, str(work / "other.ipynb"))
    port, token = free_port(), "lab-" + os.urandom(8).hex()
    button = ".jp-NotebookPanel-toolbar [data-command='course-check:check']"
    answer, close = ".jp-Dialog pre.course-check", ".jp-Dialog button:has-text('Close')"
    env = {**os.environ, "HOME": str(tmp_path),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_DATA_DIR": str(tmp_path / "data"),
           "COURSE_CHECK_URL": service.url, "COURSE_CHECK_TOKEN": service.roster["learners"]["ada"]}
    log = open(tmp_path / "lab.log", "w")
    lab = subprocess.Popen([str(Path(sys.executable).parent / "jupyter-lab"), "--no-browser", "--allow-root",
                            f"--port={port}",
                            "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
                            f"--ServerApp.root_dir={work}"], env=env, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page()
            wait_for(f"http://127.0.0.1:{port}/api/status?token={token}", lab, tmp_path / "lab.log", timeout=120)
            page.goto(f"http://127.0.0.1:{port}/lab/tree/mine.ipynb?token={token}")
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
            page.locator(button).click()
            page.wait_for_selector(answer, timeout=300_000)
            text = page.inner_text(answer)
            assert f"{ASG}: 11 / 11 points (a check: no grade changed)" in text, text
            page.click(close)
            page.click(".lm-MenuBar-itemLabel:text-is('Run')")                 # the command is in the Run menu too
            assert page.locator(".lm-Menu-itemLabel:text-is('Check my work')").is_visible()
            page.keyboard.press("Escape")
            # A notebook that is not one of the course's: nothing is sent, and the learner is told why.
            page.goto(f"http://127.0.0.1:{port}/lab/tree/other.ipynb?token={token}")
            page.wait_for_selector(".lm-TabBar-tab.jp-mod-current >> text=other.ipynb")
            page.locator(f"{button} >> visible=true").click()
            page.wait_for_selector(answer, timeout=60_000)
            assert "has no check() cell" in page.inner_text(answer)
            browser.close()
    finally:
        lab.terminate()                       # JupyterLab shuts its kernels down; past 30 s, it and they are killed
        try:
            lab.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait()
        log.close()


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
def test_a_notebook_that_kills_its_worker_is_graded_as_such(service):
    """A rope that kills the process it runs in: the learner's check, answered 200 with that part at 0 and why."""
    status, answer = service.check("kim", variants.submission(ASG, {"rope": KILLING_ROPE}), ASG)
    assert status == 200 and answer["total"] < 11, answer
    rope = next(c for c in answer["cells"] if c["cell"] == "rope_tests")
    assert rope["score"] == 0 and "your code was killed while calling rope()" in rope["text"], rope


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
        answered = [s for s in bare if select.select([s], [], [], 2)[0]]
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
