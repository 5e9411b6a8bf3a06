"""Class-scale grading: the real `nbgrader autograde` per learner on Dask, into SQLite and PostgreSQL.

A small class is graded in parallel with `autograder.classroom.classgrade` on a LocalCluster of two workers;
its gradebook must hold exactly what serial grading gives (each learner's verdict computed
directly with the hidden suite), a learner whose grading fails is reported with its reason while
the others are graded, and the class report counts the diagnoses.  A smaller class is graded the
same way into a real PostgreSQL server that the test starts and stops (tests/pg.py), and one
learner on an existing Dask cluster given by its scheduler's address.
"""
import csv
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import prepare

from autograder.authoring import variants
from autograder.classroom import classgrade, grade, report
from autograder.verdict import hidden, record

pytestmark = pytest.mark.xdist_group("class-scale")
ASG = "positional_encoding"
NOT_IMPLEMENTED = "not implemented yet (it raises NotImplementedError)"
POINTS = {"sinusoidal_encoding_tests": 4.0, "rope_tests": 4.0, "alibi_bias_tests": 3.0}
BUG = "sin_cos_swapped"


def _bug():
    return {v.name: v for v in variants.load(ASG)}[BUG]


def _class(d, learners: dict):
    """Submit each learner's answer: a notebook, raw bytes, or None for a folder without the notebook."""
    for learner, nb in learners.items():
        grade.submit(d, learner, ASG, nb)


def _scores(url):
    out = {}
    for r in grade.scores(None, [ASG], url):
        out.setdefault(r.learner, {})[r.cell] = r
    return out


@pytest.fixture(scope="module")
def serial_bug_verdict():
    """What serial grading gives the buggy learner: the hidden suite run on the notebook directly."""
    return {gid: v.score for gid, v in hidden.grade(variants.submission(ASG, _bug().cells), ASG).verdicts.items()}


@pytest.fixture(scope="module")
def sqlite_class(tmp_path_factory):
    d = tmp_path_factory.mktemp("class-sqlite")
    prepare(d, [ASG])
    _class(d, {"ada": variants.submission(ASG), "ben": variants.submission(ASG, _bug().cells),
               "dev": variants.submission(ASG, answered=False), "lost": None})
    out = io.StringIO()
    t0 = time.monotonic()
    result = classgrade.grade_class(ASG, d, workers=2, url=grade.db_url(d), out=out, progress=False)
    return d, result, out.getvalue(), time.monotonic() - t0


@pytest.fixture(scope="module")
def postgres():
    if not sys.platform.startswith("linux"):
        pytest.skip("the PostgreSQL gradebook test starts Debian's server binaries: Linux only")
    from pg import INSTALL_HINT, PostgresServer, server_bin

    if server_bin() is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="module")
def postgres_class(tmp_path_factory, postgres):
    d = tmp_path_factory.mktemp("class-postgres")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRADEBOOK_URL", postgres.url)
        grade.prepare(d, [ASG])           # generate_assignment records the assignment in PostgreSQL
    _class(d, {"ada": variants.submission(ASG), "ben": variants.submission(ASG, _bug().cells), "lost": None})
    out = io.StringIO()
    result = classgrade.grade_class(ASG, d, workers=2, url=postgres.url, out=out, progress=False,
                                    feedback=False, group=3)          # one nbgrader run for the three of them
    return d, result, out.getvalue()


def _check_class(scores, answers, bug_verdict):
    assert set(scores) == set(answers), sorted(scores)
    for learner, answer in answers.items():
        got = {c: s.score for c, s in scores[learner].items()}
        assert {c: s.points for c, s in scores[learner].items()} == POINTS
        if answer == "reference":
            assert got == POINTS, (learner, got)
        elif answer == "zero":
            assert got == {c: 0.0 for c in POINTS}, (learner, got)
        else:
            assert got == bug_verdict, (learner, got)
            for cell, diagnosis in _bug().fails.items():
                assert got[cell] < POINTS[cell] and diagnosis in scores[learner][cell].comment


# -- SQLite, the default gradebook ------------------------------------------------------------------
def test_parallel_grading_gives_the_serial_scores(sqlite_class, serial_bug_verdict):
    d, result, out, _ = sqlite_class
    assert [o.learner for o in result.graded] == ["ada", "ben", "dev"], out
    assert result.workers == 2
    _check_class(_scores(grade.db_url(d)), {"ada": "reference", "ben": "bug", "dev": "zero"},
                 serial_bug_verdict)
    for o in result.graded:
        log = open(o.log).read()
        assert "database is locked" not in log, o.learner
        assert o.attempts == 1


def test_a_failed_learner_is_reported_with_its_reason(sqlite_class):
    d, result, out, _ = sqlite_class
    [failed] = result.failed
    assert failed.learner == "lost" and failed.returncode == 1
    assert "No notebooks were matched" in failed.reason, failed.reason
    assert failed.reason.startswith("exit code 1")
    assert "lost: exit code 1: No notebooks were matched" in out
    assert "3 of 4 learners graded, 1 failed, on 2 workers" in out
    assert "wall time" in out and "per learner" in out
    assert os.path.exists(failed.log)
    assert not result.ok


def test_feedback_for_every_graded_learner(sqlite_class):
    d, result, out, _ = sqlite_class
    assert result.feedback_failures == [], out
    for learner in ("ada", "ben", "dev"):
        assert (d / "feedback" / learner / ASG / f"{ASG}.html").is_file(), learner
    assert not (d / "feedback" / "lost").exists()


def test_report_counts_the_class_diagnoses(sqlite_class):
    d, result, _, _ = sqlite_class
    folder = d / "report" / ASG
    for name in ("scores.csv", "diagnoses.csv", "histogram.png", "report.html"):
        assert (folder / name).is_file(), name
    rows = {r["learner"]: r for r in csv.DictReader(open(folder / "scores.csv"))}
    assert rows["ada"]["total"] == "11" and rows["ada"]["points"] == "11"
    assert rows["dev"]["total"] == "0"
    assert rows["lost"]["status"].startswith("not graded: exit code 1")
    counts = {(r["cell"], r["diagnosis"]): int(r["learners"]) for r in csv.DictReader(open(folder / "diagnoses.csv"))}
    who = {(r["cell"], r["diagnosis"]): r["who"] for r in csv.DictReader(open(folder / "diagnoses.csv"))}
    for cell, diagnosis in _bug().fails.items():
        found = {k: n for k, n in counts.items() if k[0] == cell and diagnosis in k[1]}
        assert found and set(found.values()) == {1}, found
        assert {who[k] for k in found} == {"ben"}
    # The unanswered learner's diagnoses all come from the stubs' NotImplementedError.
    assert {who[k] for k in counts if "NotImplementedError" not in k[1]} == {"ben"}
    for cell in POINTS:
        assert counts[(cell, NOT_IMPLEMENTED)] == 1
    assert (folder / "histogram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (folder / "report.html").read_text()
    assert 'src="data:image/png;base64,' in page
    assert "http:" not in page and "https:" not in page and "<link" not in page
    assert "sin and cos are swapped" in page and "lost" in page


# -- PostgreSQL ---------------------------------------------------------------------------------------
@pytest.mark.full     # make test grades the class in parallel into SQLite
def test_parallel_grading_into_postgresql(postgres_class, postgres, serial_bug_verdict):
    """The three learners are one group, graded by one nbgrader run; the one it cannot grade is graded again alone
    and reported with its own reason."""
    d, result, out = postgres_class
    assert [o.learner for o in result.graded] == ["ada", "ben"], out
    assert [o.learner for o in result.failed] == ["lost"]
    assert "No notebooks were matched" in result.failed[0].reason
    _check_class(_scores(postgres.url), {"ada": "reference", "ben": "bug"}, serial_bug_verdict)
    assert not (d / "gradebook.db").exists(), "grading wrote a SQLite gradebook instead of PostgreSQL"
    counts = result.report["counts"]
    swapped = [n for (cell, diagnosis), n in counts.items() if "sin and cos are swapped" in diagnosis]
    assert swapped and set(swapped) == {1}, counts


# -- an existing Dask cluster, by its scheduler's address ----------------------------------------------
@pytest.fixture
def dask_cluster(tmp_path):
    """A scheduler and a worker started as separate programs, the worker outside the course, as on a cluster."""
    bindir = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRADEBOOK_URL", "GRADING_DIR")}
    info = tmp_path / "scheduler.json"
    log = open(tmp_path / "dask.log", "w")
    procs = [subprocess.Popen([os.path.join(bindir, "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(info)], cwd=tmp_path, env=env,
                              stdout=log, stderr=subprocess.STDOUT)]
    try:
        deadline = time.monotonic() + 120
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        procs.append(subprocess.Popen([os.path.join(bindir, "dask"), "worker", "--scheduler-file", str(info),
                                       "--nworkers", "1", "--nthreads", "1", "--no-dashboard"], cwd=tmp_path, env=env,
                                      stdout=log, stderr=subprocess.STDOUT))
        time.sleep(0.5)
        import json

        yield json.loads(info.read_text())["address"]
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()


def test_an_existing_cluster_by_its_address(sqlite_class, dask_cluster):
    d = sqlite_class[0]
    _class(d, {"zed": None})
    out = io.StringIO()
    result = classgrade.grade_class(ASG, d, scheduler=dask_cluster, workers=1, learners=["zed"], out=out,
                                    progress=False, feedback=False, report=False)
    assert result.workers == 1
    [failed] = result.failed
    assert "No notebooks were matched" in failed.reason, out.getvalue()


# -- the parts, without nbgrader -------------------------------------------------------------------------
def test_a_sqlite_gradebook_gets_a_busy_timeout(tmp_path, monkeypatch):
    monkeypatch.delenv("GRADEBOOK_URL", raising=False)
    assert classgrade.gradebook_url(tmp_path) == f"sqlite:///{tmp_path.resolve()}/gradebook.db?timeout=60"
    assert classgrade.gradebook_url(tmp_path, "sqlite:////x.db?timeout=5") == "sqlite:////x.db?timeout=5"
    pg = "postgresql+psycopg2://grader:secret@db:5432/gradebook"
    assert classgrade.gradebook_url(tmp_path, pg) == pg
    monkeypatch.setenv("GRADEBOOK_URL", pg)
    assert classgrade.gradebook_url(tmp_path) == pg


def test_a_gradebook_locked_by_another_writer_is_graded_again(tmp_path, monkeypatch):
    """A real lock: another connection holds the SQLite gradebook (BEGIN EXCLUSIVE). nbgrader's logger records the
    database's own error code (autograder.pipeline.failures), classgrade tries again after a pause (here the pause
    lets the lock go), and a lock that outlasts the retries is a grader error that says so."""
    import sqlite3

    prepare(tmp_path, [ASG])
    grade.submit(tmp_path, "ada", ASG, variants.submission(ASG, answered=False))
    db = tmp_path / "gradebook.db"
    url = f"sqlite:///{db}?timeout=1"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    o = classgrade.autograde_learner(str(tmp_path), ASG, "ada", url, retries=0)
    assert not o["ok"] and o["attempts"] == 1 and o["kind"] == grade.GRADER_ERROR
    assert o["reason"] == "exit code 1: sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked"
    pauses: list[float] = []
    monkeypatch.setattr(classgrade.time, "sleep", lambda s: pauses.append(s) or holder.execute("ROLLBACK"))
    o = classgrade.autograde_learner(str(tmp_path), ASG, "ada", url, retries=2)
    assert o["ok"] and o["attempts"] == 2 and len(pauses) == 1, (o, Path(o["log"]).read_text()[-3000:])
    holder.close()


def test_only_what_nbgrader_logs_as_an_error_is_recorded_and_a_lock_only_by_its_code(tmp_path, monkeypatch):
    """autograder.pipeline.failures on nbgrader's logger: a warning is not recorded whatever it says (the sandbox's
    stderr, which a learner writes, is relayed as one), an error is, with the exception being handled; a lock is told
    by the database's code, never by the words of a message."""
    import logging
    import sqlite3

    from autograder.pipeline import failures

    path = tmp_path / "errors.jsonl"
    monkeypatch.setenv(failures.ENV, str(path))
    log = logging.getLogger("AutogradeApp.failures-test")
    log.propagate = False
    log.addHandler(failures.ErrorLog())
    log.warning("the sandbox's stderr:\n    | sqlite3.OperationalError: database is locked")
    log.error("sqlite3.OperationalError: database is locked")
    try:
        sqlite3.connect(tmp_path / "no" / "x.db")
    except sqlite3.OperationalError:
        log.error("There was an error processing assignment: %s", "a")
    errors = failures.read(path)
    assert [e["logged"] for e in errors] == ["sqlite3.OperationalError: database is locked",
                                             "There was an error processing assignment: a"]
    assert errors[1]["type"] == "sqlite3.OperationalError" and errors[1]["sqlite_errorcode"] == 14   # CANTOPEN
    assert not failures.is_lock(errors)
    assert failures.reason(errors)[0] == "sqlite3.OperationalError: unable to open database file"


def test_other_errors_are_not_retried(tmp_path):
    """Nor are they the learner's: the submission holds a notebook, so whatever stopped nbgrader is the grader's (here
    a gradebook it cannot open: SQLite's SQLITE_CANTOPEN, not a lock)."""
    grade.submit(tmp_path, "ada", ASG, b"{}")
    o = classgrade.autograde_learner(str(tmp_path), ASG, "ada", f"sqlite:///{tmp_path}/no/such/folder/x.db", retries=2)
    assert not o["ok"] and o["attempts"] == 1 and o["kind"] == grade.GRADER_ERROR
    assert o["reason"].startswith("exit code 1: sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) unable "
                                  "to open database file"), o["reason"]


def test_a_learner_over_time_is_stopped_with_its_process_tree(tmp_path, monkeypatch):
    import psutil

    def slow(grading_dir, assignment, learner=None, extra=(), stdout=None, **kw):
        code = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"
        return subprocess.run([sys.executable, "-c", code, f"--student={learner}"], stdout=stdout)
    monkeypatch.setattr(classgrade.grade, "autograde", slow)
    started = time.time()
    o = classgrade.autograde_learner(str(tmp_path), ASG, "slowpoke", "sqlite:///x.db", timeout=3)
    assert time.time() - started < 60
    assert not o["ok"] and "did not finish within 3 s" in o["reason"]
    time.sleep(0.5)
    survivors = [p for p in psutil.process_iter(["cmdline", "create_time"])
                 if p.info["cmdline"] == ["sleep", "300"] and p.info["create_time"] >= started - 1]
    assert not survivors


@pytest.mark.full     # make test stops a learner over time with its process tree
def test_a_learner_stopped_over_time_leaves_no_sandbox_behind(tmp_path, monkeypatch):
    """Its process tree is killed before it could close its sandboxes: their processes, cgroups and folders, and the
    socket of the fork server it started, are removed after it (in a private folder of this test's)."""
    import tempfile

    from autograder.sandbox.box import wait_until
    from autograder.sandbox.cgroups import Cgroup

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))          # the folder the sweep looks in, here
    made = tmp_path / "made"

    def slow(grading_dir, assignment, learner=None, extra=(), stdout=None, **kw):
        code = ("import sys, time\n"
                "from autograder.sandbox.box import Limits, Sandbox\n"
                "sb = Sandbox(Limits())\n"
                "sb.start([sb.put('s.py', 'import time; time.sleep(300)')])\n"
                f"open({str(made)!r}, 'w').write(sb.dir.name)\n"
                "time.sleep(300)\n")
        return subprocess.run([sys.executable, "-c", code, f"--student={learner}"], stdout=stdout,
                              env={**os.environ, "TMPDIR": str(tmp_path)})
    monkeypatch.setattr(classgrade.grade, "autograde", slow)
    o = classgrade.autograde_learner(str(tmp_path), ASG, "slowpoke", "sqlite:///x.db", timeout=20)
    assert not o["ok"] and "did not finish within 20 s" in o["reason"]
    root = tmp_path / f"grader-{os.geteuid()}"
    assert made.exists() and root.is_dir(), "the learner's process did not get as far as making its sandbox"
    assert wait_until(lambda: not list(root.iterdir()), 10), sorted(p.name for p in root.iterdir())
    assert Cgroup.existing(made.read_text()) is None


def test_the_report_counts_the_verdicts_as_recorded(tmp_path):
    """Diagnoses come from the grading's stored record, whole: one holding "; " stays one; what the grader had to
    repair in the notebook is a grading note, not a misconception."""
    a = "the scores are divided by d; divide by sqrt(d)"
    verdict = record.Verdict("rope_tests", 4.0, 1.0, checks=[record.Check("values", 1, False, a),
                                                             record.Check("shape", 1, True)])
    record.store(record.path(tmp_path, "ann", ASG, ASG), {**record.Grading({"rope_tests": verdict}).to_dict(),
                                                          "notes": ["graded without: x"],
                                                          "problems": ["your file was repaired"]})
    rows = [grade.CellScore("ann", ASG, "rope_tests", 1.0, 4.0, "ignored: the comment is not re-read")]
    diagnoses, flags, notes = report.class_diagnoses(tmp_path, rows)
    assert [(d["diagnosis"], d["who"]) for d in diagnoses] == [(a, ["ann"])] and flags == []
    assert notes == [{"note": "graded without: x", "learners": 1, "who": ["ann"]},         # a repair is a note too
                     {"note": "your file was repaired", "learners": 1, "who": ["ann"]}]


def test_the_report_groups_learners_by_the_record_s_data(tmp_path):
    """Learners are grouped by the record's data, never its words: two whose same checks failed make one row
    (whatever numbers their diagnoses hold), counted twice, ranked first; two whose evidence names one known mistake
    make one row though different checks failed; two whose words are the same but whose failed checks differ make
    two; an unanswered cell makes one row, whatever its other tests said, ranked after every mistake."""
    def check(label, diagnosis, **kw):
        return record.Check(label, 1, False, diagnosis, **kw)

    swapped = "sin(50, 32) is wrong (largest error {}, allowed 1e-05)"
    halves = dict(causes=["the halves are not concatenated"], cause_ids=["sin_halves"])
    answers = {"ann": [check("values", swapped.format(1.41)), check("row", "row 0 is wrong (1.41)")],
               "bob": [check("values", swapped.format(1.39)), check("row", "row 0 is wrong (1.39)")],
               "cy": [check("values", "wrong", **halves)], "dan": [check("shape", "wrong", **halves)],
               "eve": [check("dtype", swapped.format(1.41))],
               "fay": [check("raises", "must raise ValueError (it raised NotImplementedError)"),
                       check("values", "not implemented yet (it raises ...)", unanswered=True)]}
    rows = []
    for learner, checks in answers.items():
        _graded(tmp_path, learner, record.Verdict("rope_tests", 4.0, 1.0, checks=checks))
        rows.append(grade.CellScore(learner, ASG, "rope_tests", 1.0, 4.0, ""))
    diagnoses, _, _ = report.class_diagnoses(tmp_path, rows)
    assert [(d["who"], d["lost"]) for d in diagnoses] == [(["ann", "bob"], 3.0), (["cy", "dan"], 3.0), (["eve"], 3.0),
                                                          (["fay"], 3.0)]
    by = {d["who"][0]: d for d in diagnoses}
    assert by["cy"]["mistakes"] == ["sin_halves"] and by["cy"]["said"] == ["the halves are not concatenated"]
    assert by["fay"]["diagnoses"] == ["not implemented yet (it raises ...)"] and by["fay"]["unanswered"]


def _graded(tmp_path, learner: str, *verdicts: record.Verdict):
    """The stored record of `learner`'s grading, holding these verdicts."""
    record.store(record.path(tmp_path, learner, ASG, ASG), record.Grading({v.grade_id: v for v in verdicts}).to_dict())


def test_the_report_says_what_to_reteach_and_who_waits(tmp_path):
    """Misconceptions ranked by how many learners made each, then by the points lost, each with the section of the
    book its part's description names; a flagged cell's reason listed with the flags (and who still waits for a
    typed score), not as a misconception; a learner waiting for a manual grade says so, with a provisional total, and
    a late one says how late."""
    swapped = record.Check("values", 2, False, "sin(50, 32) is wrong: sin and cos are swapped")
    unrotated = record.Check("values", 1, False, "rope(x) is wrong: the pairs are not rotated")
    why = "the grader could not tell what getattr(torch, name) calls"
    flagged = record.Verdict("alibi_bias_tests", 3.0, 3.0, record.FLAGGED, [record.Check("values", 1, True)], [why])
    _graded(tmp_path, "ann", record.Verdict("rope_tests", 4.0, 0.0, checks=[unrotated]))
    for learner in ("bob", "cy"):
        _graded(tmp_path, learner, record.Verdict("sinusoidal_encoding_tests", 4.0, 1.33,
                                                  checks=[swapped, record.Check("shape", 1, True)]))
    _graded(tmp_path, "dee", flagged)
    rows = [grade.CellScore("ann", ASG, "rope_tests", 0.0, 4.0, ""),
            grade.CellScore("bob", ASG, "sinusoidal_encoding_tests", 1.33, 4.0, "", seconds_late=5400.0, penalty=1.0),
            grade.CellScore("cy", ASG, "sinusoidal_encoding_tests", 1.33, 4.0, ""),
            grade.CellScore("dee", ASG, "alibi_bias_tests", 3.0, 3.0, "", needs_manual_grade=True)]
    order = report.cell_order(tmp_path, ASG)
    diagnoses, flags, _ = report.class_diagnoses(tmp_path, rows, order)
    assert [(d["cell"], d["who"], d["total"]) for d in diagnoses] == [
        ("sinusoidal_encoding_tests", ["bob", "cy"], 5.34), ("rope_tests", ["ann"], 4.0)]      # 2 learners first
    assert not [d for d in diagnoses if why in d["diagnosis"]]
    assert flags == [{"cell": "alibi_bias_tests", "why": [why], "learners": 1, "who": ["dee"], "waiting": ["dee"]}]
    sections = report.book_sections(tmp_path, ASG)
    assert sections["sinusoidal_encoding_tests"] == [("Positional encoding › Sinusoidal encodings",
                                                      "../../_build/html/book/positional_encoding.html"
                                                      "#sinusoidal-encodings")]
    out = tmp_path / "report" / ASG
    href = report.section_href(sections["rope_tests"][0][1], "", out)
    assert (out / href.split("#")[0]).resolve() == report.ROOT / "_build" / "html" / "book" / "positional_encoding.html"
    assert report.section_href(sections["rope_tests"][0][1], "https://example.org/course", out) == \
        "https://example.org/course/book/positional_encoding.html#rope"
    cells, lines = grade.by_learner(rows, order=order)
    by = {x.learner: x for x in lines}
    assert by["dee"].status == grade.WAITING and by["dee"].waiting == ["alibi_bias_tests"]
    assert report._status(by["dee"]) == "waiting for manual grading: alibi_bias (the total is provisional)"
    assert report._late(by["bob"]) == "1.5 h late, penalty 1" and report._late(by["cy"]) == ""
    _, failed = grade.by_learner(rows, {"dee": "grader error: exit code 1"}, order)     # a failure says so, first
    assert report._status(next(x for x in failed if x.learner == "dee")) == "grader error: exit code 1"
    page = report.render_html(ASG, cells, lines, diagnoses, flags, [], b"", {
        c: [(t, report.section_href(link, "", out)) for t, link in found] for c, found in sections.items()})
    assert page.index("sin and cos are swapped") < page.index("the pairs are not rotated")
    assert "positional_encoding.html#sinusoidal-encodings\">Positional encoding › Sinusoidal encodings</a>" in page
    assert "4 learners graded (1 waiting for a manual grade, 1 late), 0 not graded." in page


def test_a_failure_is_a_grader_error_unless_nothing_was_submitted(tmp_path):
    """The kind comes from the grading's stored record and the submission folder, never from a log: a record of this
    run that says the grader could not grade is a grader error whatever the log says; a submission without a notebook
    and no such record is not graded; a record older than the run, or one of a grading done, counts for nothing."""
    nothing = [{"logged": "No notebooks were matched by '/x/submitted/lost/a/*.ipynb'"}]      # as failures records it
    fault = "GraderFault: grader fault (not the learner's): the hidden suite did not finish in time\nits log: ..."
    assert classgrade.failure_kind(None, submitted=False, stopped=False) == grade.NOT_GRADED
    assert classgrade.failure_kind(None, submitted=False, stopped=True) == grade.GRADER_ERROR
    assert classgrade.failure_kind(fault, submitted=False, stopped=False) == grade.GRADER_ERROR
    assert classgrade.failure_kind(None, submitted=True, stopped=False) == grade.GRADER_ERROR
    assert classgrade.failure_reason(nothing, 1) == ("exit code 1: No notebooks were matched by "
                                                     "'/x/submitted/lost/a/*.ipynb'", [
                                                         "No notebooks were matched by "
                                                         "'/x/submitted/lost/a/*.ipynb'"])
    reason, _ = classgrade.failure_reason(nothing, 1, fault)
    assert reason == ("exit code 1: GraderFault: grader fault (not the learner's): the hidden suite did not finish "
                      "in time")
    assert not classgrade.has_notebook(tmp_path, ASG, "ann")
    grade.submit(tmp_path, "ann", ASG, b"{}")
    assert classgrade.has_notebook(tmp_path, ASG, "ann")
    assert classgrade.recorded_fault(tmp_path, ASG, "ann", since=0.0) is None
    where = record.path(tmp_path, "ann", ASG, ASG)
    record.store(where, record.Grading({}, fault=fault).to_dict())
    assert classgrade.recorded_fault(tmp_path, ASG, "ann", since=0.0) == fault
    assert classgrade.recorded_fault(tmp_path, ASG, "ann", since=time.time() + 60) is None     # an earlier run's
    record.store(where, record.Grading({}).to_dict())
    assert classgrade.recorded_fault(tmp_path, ASG, "ann", since=0.0) is None


# -- the report in a browser ------------------------------------------------------------------------------------------
BIG = "attention"                 # the exercise with the longest part names
SHAPES = "float32 tensor of shape ({}, {}, 8), float32 tensor of shape ({}, 5, 8), float32 tensor of shape ({}, 5, 8)"
FLAG = ("the grader could not tell what getattr(torch, name) calls: a name computed at run time reaches the library, "
        "which a reading of the source cannot decide")


@pytest.fixture(scope="module")
def big_class(tmp_path_factory):
    """The report of a class of 16 on the attention exercise: a real gradebook (the assignment released by nbgrader,
    each submission added and scored through nbgrader's API, as autograde does) and each learner's stored record,
    failed checks as the hidden suites write them (the known mistake named, six observations with their numbers). Four
    learners invert the mask, three leave NaN rows, two more mistakes, one flagged for manual grading, two late, one
    whose grading failed."""
    import random
    from datetime import UTC, datetime, timedelta

    from nbgrader.api import Gradebook

    d = tmp_path_factory.mktemp("big-class")
    prepare(d, [BIG])
    mistakes = {v.name: v for v in variants.load(BIG) if isinstance(v, variants.Bug) and v.cause}
    plan = ["sdpa_mask_inverted"] * 4 + ["sdpa_nan_rows"] * 3 + ["causal_no_diagonal"] * 2 + \
        ["mha_heads_mixed", "blockwise_no_rescale", "sdpa_unscaled", "", "", "flagged", "fault"]
    draw = random.Random(0)
    due = datetime(2026, 12, 15, 16, tzinfo=UTC)
    with Gradebook(grade.db_url(d)) as gb:
        gb.update_or_create_assignment(BIG, duedate=due)
        points = {c.name: c.max_score for c in gb.find_notebook(BIG, BIG).grade_cells}
        for i, what in enumerate(plan):
            learner = f"learner{i:02d}" if i else "a_learner_with_a_long_name"
            gb.add_student(learner)
            sub = gb.add_submission(BIG, learner, timestamp=due + timedelta(hours=30 if i in (2, 9) else -1))
            verdicts = {}
            for g in sub.notebooks[0].grades:
                v = record.Verdict(g.name, points[g.name], points[g.name], checks=[record.Check("values", 1, True)])
                if what in mistakes and g.name in mistakes[what].fails:
                    part, bug = g.name.removesuffix("_tests"), mistakes[what]
                    v = record.Verdict(g.name, points[g.name], round(points[g.name] / 7, 2), checks=[
                        record.Check(f"check {k}", 1, False, f"{part}({SHAPES.format(*draw.sample(range(1, 10), 5))})"
                                     f": output 1 of 2 is wrong: largest error {draw.uniform(0.1, 3):.3g} (allowed "
                                     "1e-05)", causes=[bug.cause], cause_ids=[bug.name]) for k in range(6)]
                        + [record.Check("shape", 1, True)])
                elif what == "flagged" and g.name == "MultiHeadAttention_tests":
                    v = record.Verdict(g.name, points[g.name], points[g.name], record.FLAGGED, v.checks, [FLAG])
                g.auto_score, g.needs_manual_grade = v.score, v.status == record.FLAGGED
                verdicts[g.name] = v
            fault = "the hidden suite did not finish in time" if what == "fault" else None
            record.store(record.path(d, learner, BIG, BIG), record.Grading(verdicts, fault=fault).to_dict())
        gb.db.commit()
    return d, report.build(d, BIG)


SEEN = """() => {
    const box = document.querySelector('table.scores').closest('.box');
    const status = [...document.querySelectorAll('table.scores td.status')].map(td => td.getBoundingClientRect());
    const rows = [...document.querySelectorAll('table.cards')[0].querySelectorAll('tbody tr')];
    return {
        scrollWidth: document.scrollingElement.scrollWidth, innerWidth,
        box: {left: box.getBoundingClientRect().left, right: box.getBoundingClientRect().right,
              scrollWidth: box.scrollWidth, clientWidth: box.clientWidth, overflow: getComputedStyle(box).overflowX},
        table: document.querySelector('table.scores').getBoundingClientRect().width,
        statusRight: Math.max(...status.map(r => r.right)), statusWidth: Math.min(...status.map(r => r.width)),
        links: [...document.querySelectorAll('a')].map(a => a.textContent),
        reteach: rows.map(r => [...r.querySelectorAll('a')].map(a => a.textContent)),
        smallest: Math.min(...[...document.querySelectorAll('td, th, td *')].filter(c => c.textContent.trim())
                                .map(c => parseFloat(getComputedStyle(c).fontSize))),
        tallest: Math.max(...rows.map(r => r.getBoundingClientRect().height)),
        text: document.body.innerText,
    };
}"""


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")     # nbgrader's add_submission, as configure() says
def test_the_report_reads_at_1280_and_on_a_phone(big_class, browser, tmp_path):
    """At 1280 px the page does not scroll sideways and every learner's status is in sight; at 390 px (a phone) the
    page does not scroll sideways either: the scores table scrolls in its own box, the other tables stack. A section's
    math shows as text (no `$`), table text is 11 px or more, the mask's mistake links Masks, and a misconception is a
    line, its learners counted, its observations behind a toggle (the page holds them; none shows)."""
    d, built = big_class
    page = Path(built["html"])
    assert "largest error" in page.read_text()
    seen = {}
    for width in (1280, 390):
        view = browser.new_page(viewport={"width": width, "height": 900})
        try:
            view.goto(page.as_uri())
            seen[width] = s = view.evaluate(SEEN)
            view.screenshot(path=str(tmp_path / f"report-{width}.png"), full_page=True)
        finally:
            view.close()
        assert s["scrollWidth"] <= s["innerWidth"], (width, s["scrollWidth"])
        assert not [t for t in s["links"] if "$" in t or "\\" in t], s["links"]
        assert s["smallest"] >= 11, (width, s["smallest"])
        assert "largest error" not in s["text"] and "what the tests observed (6)" in s["text"]
        assert s["reteach"][0] == ["Attention › Masks"], s["reteach"]
        assert "Attention › Why divide by √d?" in s["links"]
        assert "4: a_learner_with_a_long_name, learner01, learner02, learner03" in s["text"].replace("\n", " ")
    wide, phone = seen[1280], seen[390]
    assert wide["box"]["scrollWidth"] <= wide["box"]["clientWidth"], wide["box"]        # the table fits its box
    assert wide["statusRight"] <= min(wide["innerWidth"], wide["box"]["right"]) and wide["statusWidth"] > 100, wide
    assert wide["tallest"] < 200, wide["tallest"]                          # no wall of observations
    assert phone["box"]["overflow"] == "auto" and phone["box"]["scrollWidth"] > phone["box"]["clientWidth"]
    assert "15 learners graded (1 waiting for a manual grade, 2 late), 1 not graded" in wide["text"], wide["text"][:300]
    print(f"\nreport: scores table {wide['table']:.0f} px at 1280 ({wide['scrollWidth']} px page), "
          f"{phone['table']:.0f} px in a {phone['box']['clientWidth']} px box at 390 ({phone['scrollWidth']} px page); "
          f"screenshots in {tmp_path}")
