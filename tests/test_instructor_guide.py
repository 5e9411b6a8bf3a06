"""The README's "For instructors", run as written after `make`: one assignment from release to export, with real
nbgrader. The full guide, docs/instructors.md, says the same commands and configuration lines.

A scratch course (this course's `nbgrader_config.py` with the README's configuration lines added, its
`solutions/positional_encoding/`) first has `make`'s example class graded in it, by the Makefile's own recipe, then
releases `positional_encoding` with a due date; one learner fetches and submits it through the exchange (their id is
this machine's user name) and two come from an LMS's zip through `zip_collect`, one on time with a bug, one late; then
autograde, feedback, the class report, feedback back through the exchange, and the exports (nbgrader's, Canvas's and
Moodle's, each read as its LMS reads it) with a learner who never submitted: everywhere only this class's learners.
Formgrader is started as the README says and answers over HTTP; a cell flagged for manual grading stays flagged until
a score is typed for it, and the typed score and its status stay when every submission is graded again after a change
of due date. Every command is taken from the README's text (a test fails when the README stops saying it); only the
exchange's folder is moved to a temporary one.

The example class that `make` graded is checked as well: its gradebook's scores, its feedback pages (each mistake
named, no hidden test shown), each grading's record, and a learner graded again.
"""
import csv
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from http.cookiejar import CookieJar
from pathlib import Path

import nbformat
import pytest
from helpers import ROOT, canvas_import, leaks, moodle_import, suite_lines
from nbgrader.api import Gradebook

from autograder.authoring import variants
from autograder.classroom import grade
from autograder.classroom.grade_examples import roster
from autograder.notebooks import is_solution, nbgrader_meta
from autograder.service.local import free_port
from autograder.verdict import hidden

pytestmark = pytest.mark.xdist_group("instructor-guide")
ASG = "positional_encoding"
BIN = Path(sys.executable).parent
EXCHANGE = "/srv/nbgrader/exchange"
BUG = "sin_cos_swapped"
README = (ROOT / "README.md").read_text()
_start = README.index("## For instructors")
GUIDE = README[_start:README.index("\n## ", _start)]
FULL_GUIDE = (ROOT / "docs" / "instructors.md").read_text()


def documented(cmd: str) -> str:
    assert cmd in GUIDE, f"README's For instructors no longer says: {cmd}"
    assert cmd in FULL_GUIDE, f"docs/instructors.md no longer says: {cmd}"
    return cmd


def make_grade() -> str:
    """The command `make` runs to grade the example class: the recipe of the Makefile's `grade`, as `make -n` says."""
    r = subprocess.run(["make", "-n", "-s", "grade"], cwd=ROOT, capture_output=True, text=True, check=True)
    [line] = [ln for ln in r.stdout.splitlines() if "grade_examples" in ln]
    python, rest = line.split(" ", 1)
    assert Path(python).name.startswith("python"), line
    return f"{sys.executable} {rest}"


def config_lines() -> str:
    """The README's lines for the end of nbgrader_config.py (its only python block)."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE, re.S)
    assert len(blocks) == 1, "README's For instructors should have one block of configuration lines"
    assert re.findall(r"```python\n(.*?)```", FULL_GUIDE, re.S) == blocks, "docs/instructors.md's lines differ"
    return blocks[0]


class Course:
    def __init__(self, tmp: Path):
        self.root, self.exchange = tmp / "course", tmp / "exchange"
        self.grading = self.root / "_build" / "grading"
        (self.root / "solutions").mkdir(parents=True)
        shutil.copytree(ROOT / "solutions" / ASG, self.root / "solutions" / ASG)
        config = (ROOT / "nbgrader_config.py").read_text() + "\n" + config_lines()
        assert f'"{EXCHANGE}"' in config
        (self.root / "nbgrader_config.py").write_text(config.replace(f'"{EXCHANGE}"', repr(str(self.exchange))))
        self.home = tmp / "instructor"
        self.home.mkdir()
        self.user = pwd.getpwuid(os.getuid()).pw_name        # the exchange's learner id: the user name
        self.learner_home = tmp / "learner"
        self.learner_home.mkdir()

    def env(self, home: Path, grading: bool = True) -> dict:
        drop = ("GRADING_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env.update(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", HOME=str(home))
        if grading:
            env["GRADING_DIR"] = str(self.grading)      # where nbgrader_config.py puts it anyway; the report reads it
        return env

    def run(self, cmd: str, learner: bool = False, check: bool = True) -> subprocess.CompletedProcess:
        """A README command, from the course root (the instructor) or the learner's home folder."""
        cmd = cmd.replace(EXCHANGE, str(self.exchange))
        home = self.learner_home if learner else self.home
        r = subprocess.run(["bash", "-c", cmd], cwd=home if learner else self.root,
                           env=self.env(home, grading=not learner), capture_output=True, text=True, timeout=600)
        if check:
            assert r.returncode == 0, f"{cmd}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
        return r


def _answer(path: Path):
    """The learner writes the reference's answers into the fetched notebook."""
    nb = nbformat.read(str(path), as_version=4)
    ref = variants.reference_sources(ASG)
    for cell in nb.cells:
        if is_solution(cell):
            cell.source = ref[nbgrader_meta(cell)["grade_id"]]
    nbformat.write(nb, str(path))


def _lms_zip(path: Path):
    """What an LMS hands over: ben on time with a bug, cleo a day late, and a file not named by the pattern."""
    bug = {v.name: v for v in variants.load(ASG)}[BUG]
    path.parent.mkdir(parents=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"ben_20261201T120000_{ASG}.ipynb", nbformat.writes(variants.submission(ASG, bug.cells)))
        z.writestr(f"cleo_20261216T090000_{ASG}.ipynb", nbformat.writes(variants.submission(ASG)))
        z.writestr(f"{ASG}.ipynb", nbformat.writes(variants.submission(ASG)))


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    c = Course(tmp_path_factory.mktemp("instructor-guide"))
    t0 = time.monotonic()
    out = {}
    # `make` first: the example class, graded as the Makefile grades it, from the course's root
    out["make"] = c.run(make_grade())
    # release, with the due date
    c.run(documented(f"nbgrader generate_assignment {ASG} --force"))
    c.run(documented(f'nbgrader db assignment add {ASG} --duedate="2026-12-15 17:00:00 Europe/Berlin"'))
    out["list"] = c.run(documented("nbgrader db assignment list")).stdout
    # the exchange: released, fetched and submitted by the learner, collected
    c.run(documented(f"nbgrader release_assignment {ASG}"))
    c.run(documented(f"nbgrader fetch_assignment {ASG} --course=inside-the-transformer --Exchange.root={EXCHANGE}"),
          learner=True)
    _answer(c.learner_home / ASG / f"{ASG}.ipynb")
    c.run(documented(f"nbgrader submit {ASG} --course=inside-the-transformer --Exchange.root={EXCHANGE}"), learner=True)
    c.run(documented(f"nbgrader collect {ASG}"))
    # the LMS's zip, from the instructor's Downloads folder
    _lms_zip(c.home / "Downloads" / f"{ASG}.zip")
    c.run(documented(f"mkdir -p _build/grading/downloaded/{ASG}/archive"))
    c.run(documented(f"cp ~/Downloads/{ASG}.zip _build/grading/downloaded/{ASG}/archive/"))
    out["zip_collect"] = c.run(documented(f"nbgrader zip_collect {ASG}")).stderr
    # grade, feedback, report; feedback back through the exchange
    out["autograde"] = c.run(documented(f"nbgrader autograde {ASG}")).stderr
    c.run(documented(f"nbgrader generate_feedback {ASG}"))
    c.run(documented(f"python -m autograder.classroom.report {ASG}"))
    r = c.run(documented(f"nbgrader release_feedback {ASG}"), check=False)       # it stops at ben: no secret
    assert r.returncode and "submission_secret.txt" in r.stderr, r.stderr[-3000:]
    c.run(documented(f"nbgrader release_feedback {ASG} --CourseDirectory.student_id_exclude=ben,cleo"))
    c.run(documented(f"nbgrader fetch_feedback {ASG} --course=inside-the-transformer --Exchange.root={EXCHANGE}"),
          learner=True)
    # a learner who never submitted, and the exports
    c.run(documented("nbgrader db student add ID").replace("ID", "dev"))
    c.run(documented("nbgrader export --to=_build/grading/grades.csv"))
    for lms in ("Canvas", "Moodle"):
        c.run(documented(f"nbgrader export --exporter=autograder.pipeline.export.{lms}Export "
                         f"--to=_build/grading/{lms.lower()}.csv"))
    out["seconds"] = time.monotonic() - t0
    print(f"\nthe README's round for {ASG}: {out['seconds']:.0f} s")
    return c, out


def _export(c: Course) -> dict[str, dict]:
    with open(c.grading / "grades.csv") as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


def test_make_grades_its_example_class_apart(course):
    """`make` graded the example class in its own folder and gradebook: the course's gradebook holds this class's
    learners alone and the one assignment released, as do formgrader (below), the report and the exports."""
    c, out = course
    examples = c.root / "_build" / "examples"
    with Gradebook(f"sqlite:///{examples / 'gradebook.db'}") as gb:
        assert sorted(s.id for s in gb.students) == ["ada", "ben", "cleo", "dev"]
    assert (examples / "report" / ASG / "report.html").is_file(), out["make"].stdout[-2000:]
    with Gradebook(f"sqlite:///{c.grading / 'gradebook.db'}") as gb:
        seen = sorted(s.id for s in gb.students)
        assert seen == sorted([c.user, "ben", "cleo", "dev"]), seen
        assert [a.name for a in gb.assignments] == [ASG]
    print(f"\nthe course's gradebook after `make` and the README's round: {', '.join(seen)}")


# -- make's example class (the `course` fixture's first command) --------------------------------------------------
POINTS = {"sinusoidal_encoding_tests": 4.0, "rope_tests": 4.0, "alibi_bias_tests": 3.0}


def _examples(course) -> Path:
    """The folder where `make` graded the example class."""
    c, _ = course
    return c.root / "_build" / "examples"


def test_make_grade_prints_no_error(course):
    out = course[1]["make"].stdout + course[1]["make"].stderr
    assert not [line for line in out.splitlines() if "ERROR" in line], out[-3000:]


def test_an_assignment_nobody_in_the_example_class_submits_is_named_not_graded(tmp_path):
    r = subprocess.run([sys.executable, "-m", "autograder.classroom.grade_examples", "attention",
                        "--grading-dir", str(tmp_path / "examples")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "attention: no learner of the example class submits it" in r.stdout
    assert not (tmp_path / "examples" / "autograded").exists()


def test_the_example_gradebook_holds_the_expected_scores(course):
    rows = {}
    for row in grade.scores(_examples(course), [ASG]):
        rows.setdefault(row.learner, {})[row.cell] = row
    assert set(rows) == set(roster())
    for learner, answers in roster().items():
        got = rows[learner]
        assert {c: got[c].points for c in got} == POINTS
        answer = answers[ASG]
        for cell, points in POINTS.items():
            score = got[cell].score
            if answer == "reference":
                assert score == points, (learner, cell, got[cell].comment)
            elif answer == "unanswered":
                assert score == 0, (learner, cell)
            else:
                bug = {v.name: v for v in variants.load(ASG)}[answer]
                if cell in bug.fails:
                    assert 0 <= score < points, (learner, cell)
                    assert bug.fails[cell] in (got[cell].comment or ""), got[cell].comment
                else:
                    assert score == points, (learner, cell, got[cell].comment)


def test_the_example_feedback_names_the_mistake_and_hides_the_tests(course):
    d = _examples(course)
    secrets = suite_lines()   # learners' own notebooks may hold solution code
    for learner, answers in roster().items():
        page = d / "feedback" / learner / ASG / f"{ASG}.html"
        html = page.read_text()
        assert not leaks(html, secrets), learner
        # The math is typeset in the page, no script runs, nothing comes from another host.
        assert not re.search(r'<(script|link|img)\b[^>]*(src|href)="(https?:)?//', html), learner
        assert "<script" not in html and "<mjx-container" in html
        if answers[ASG] not in ("reference", "unanswered"):
            bug = {v.name: v for v in variants.load(ASG)}[answers[ASG]]
            for diagnosis in bug.fails.values():
                assert diagnosis in html, (learner, diagnosis)


def test_no_hidden_test_name_reaches_an_example_learner(course):
    """Neither the autograded notebook (its metadata included) nor the feedback page names a hidden test."""
    d = _examples(course)
    names = set(re.findall(r"^def (test_\w+)", hidden.suite_path(ASG).read_text(), re.M))
    assert len(names) > 10
    for learner in roster():
        for page in (d / "autograded" / learner / ASG / f"{ASG}.ipynb", d / "feedback" / learner / ASG / f"{ASG}.html"):
            text = page.read_text()
            assert not [n for n in names if n in text], (learner, page.name)


def test_the_example_records_say_what_was_applied(course):
    """Each grading's stored record holds the protections its sandbox applied, read while the sandbox existed: on a
    machine that gives them all, every one is there, and no note says a grading went without one."""
    from autograder.sandbox import box
    from autograder.verdict import record

    if box.missing_protections():
        pytest.skip(f"this machine lacks {box.missing_protections()}")
    d = _examples(course)
    for learner in roster():
        rec = record.load(record.path(d, learner, ASG, ASG))
        assert rec is not None and rec["gradable"], learner
        assert rec["protections"] and all(rec["protections"].values()), (learner, rec["protections"])
        assert not [n for n in rec.get("notes", []) if "graded without" in n], (learner, rec.get("notes"))


def test_regrading_an_example_learner_gives_the_same_grades(course):
    d = _examples(course)
    before = {(r.learner, r.cell): r.score for r in grade.scores(d, [ASG])}
    learner = next(iter(roster()))
    r = grade.autograde(d, ASG, learner=learner, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    after = {(r.learner, r.cell): r.score for r in grade.scores(d, [ASG])}
    assert after == before


def test_release_with_due_date(course):
    c, out = course
    assert (c.root / "exercises" / ASG / f"{ASG}.ipynb").exists()
    assert f"{ASG} (due: 2026-12-15 16:00:00)" in out["list"], out["list"]


def test_exchange_round_trip(course):
    c, _ = course
    submitted = c.grading / "submitted" / c.user / ASG
    assert (submitted / f"{ASG}.ipynb").exists()
    # nbgrader's own files travel with the submission (lateness, release_feedback)
    assert (submitted / "timestamp.txt").exists() and (submitted / "submission_secret.txt").exists()
    assert (c.grading / "feedback" / c.user / ASG / f"{ASG}.html").exists()
    fetched = list((c.learner_home / ASG / "feedback").glob(f"*/{ASG}.html"))
    assert len(fetched) == 1, fetched


def test_zip_collect_by_file_name(course):
    c, out = course
    for learner, when in (("ben", "2026-12-01 12:00:00"), ("cleo", "2026-12-16 09:00:00")):
        folder = c.grading / "submitted" / learner / ASG
        assert (folder / f"{ASG}.ipynb").exists()
        assert (folder / "timestamp.txt").read_text().startswith(when)
    assert "2 files collected, 1 files skipped" in out["zip_collect"], out["zip_collect"][-2000:]
    assert sorted(p.name for p in (c.grading / "submitted").iterdir()) == sorted(["ben", "cleo", c.user])


def test_late_penalty_and_export(course):
    c, out = course
    rows = _export(c)
    assert set(rows) == {c.user, "ben", "cleo", "dev"}
    me = rows[c.user]
    late = me["timestamp"] > me["duedate"]        # the exchange's time is now: late once the clock passes the date
    assert float(me["raw_score"]) == 11 and float(me["score"]) == (0 if late else 11), me
    assert 0 < float(rows["ben"]["raw_score"]) < 11 and rows["ben"]["late_submission_penalty"] == "0.0", rows["ben"]
    assert rows["ben"]["score"] == rows["ben"]["raw_score"]
    cleo = rows["cleo"]
    assert (float(cleo["raw_score"]), float(cleo["late_submission_penalty"]), float(cleo["score"])) == (11, 11, 0)
    assert "cleo> is 61200.0 seconds late" in out["autograde"]
    # autograde said how far it was, a line per notebook: which of how many, the learner, the seconds, the score
    done = re.findall(r"graded (\d) of 3: ([\w.-]+), [\d.]+ s, ([\d.]+) / 11 points", out["autograde"])
    assert sorted(n for n, _, _ in done) == ["1", "2", "3"], done
    assert {who: float(score) for _, who, score in done} == pytest.approx(
        {who: float(rows[who]["raw_score"]) for who in (c.user, "ben", "cleo")}, abs=0.01), done
    with open(c.grading / "report" / ASG / "scores.csv") as f:
        report = {row["learner"]: row for row in csv.DictReader(f)}
    assert set(report) == {c.user, "ben", "cleo"} and report["cleo"]["total"] == "11"   # before the penalty
    assert report["cleo"]["hours late"] == "17.00" and report["cleo"]["late penalty"] == "11"


def test_lms_grade_books(course):
    """The Canvas and Moodle exports, read as each LMS reads its import: this class's learners, the assignment
    released, each score after the late penalty, nothing for a learner who never submitted before the due date."""
    c, _ = course
    rows = _export(c)
    late = rows[c.user]["timestamp"] > rows[c.user]["duedate"]
    due_passed = rows[c.user]["duedate"] < time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    want = {c.user: 0.0 if late else 11.0, "ben": float(rows["ben"]["score"]), "cleo": 0.0,
            "dev": 0.0 if due_passed else None}
    canvas = canvas_import((c.grading / "canvas.csv").read_text())
    assert canvas["assignments"] == [(ASG, None)] and canvas["points"] == {ASG: 11.0}
    assert {who: g[ASG] for who, g in canvas["learners"].items()} == want
    moodle = moodle_import((c.grading / "moodle.csv").read_text(), set(want), items={ASG: 11.0})
    assert {who: g[ASG] for who, g in moodle.items()} == want


def _report(c: Course) -> dict[str, dict]:
    c.run(documented(f"python -m autograder.classroom.report {ASG}"))
    with open(c.grading / "report" / ASG / "scores.csv") as f:
        return {row["learner"]: row for row in csv.DictReader(f)}


def test_formgrader_and_manual_grade(course):
    """A flagged cell waits for a typed score in formgrader (the report says so); the typed score counts, and it and
    its status stay when, after a change of due date, every submission is graded again as the README says (the new
    due date applied: cleo is no longer late)."""
    c, _ = course
    cmd = documented("jupyter server --no-browser")
    port, token = free_port(), "instructor-guide"
    args = f" --port={port} --IdentityProvider.token={token}" + (" --allow-root" if os.geteuid() == 0 else "")
    log = open(c.home / "server.log", "w")
    server = subprocess.Popen(["bash", "-c", "exec " + cmd + args], cwd=c.root, env=c.env(c.home),
                              stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))

    def api(path: str, data: bytes | None = None):
        req = urllib.request.Request(base + path, data=data, method="PUT" if data else "GET",
                                     headers={"Authorization": f"token {token}"})
        with opener.open(req, timeout=30) as r:
            return json.load(r)

    try:
        for _ in range(120):
            try:
                api("/api/status")
                break
            except OSError:
                assert server.poll() is None, (c.home / "server.log").read_text()[-3000:]
                time.sleep(0.5)
        with opener.open(f"{base}/formgrader?token={token}", timeout=30) as r:   # as a browser: token, then cookie
            page = r.read().decode()
            assert r.status == 200 and r.url.endswith("/formgrader/manage_assignments"), r.url
        assert "<title>nbgrader formgrade" in page
        assert sorted(s["id"] for s in api("/formgrader/api/students")) == sorted([c.user, "ben", "cleo", "dev"])

        with Gradebook(f"sqlite:///{c.grading / 'gradebook.db'}") as gb:    # the grader flags ben's first part
            flagged = gb.find_grade("sinusoidal_encoding_tests", ASG, ASG, "ben")
            flagged.needs_manual_grade = True
            gb.db.commit()
            grade_id, provisional = flagged.id, flagged.auto_score

        def ben():
            return {s["student"]: s for s in api(f"/formgrader/api/submissions/{ASG}")}["ben"]

        assert ben()["needs_manual_grade"] is True
        assert _report(c)["ben"]["status"].startswith("waiting for manual grading: sinusoidal_encoding")
        typed = api(f"/formgrader/api/grade/{grade_id}", b'{"manual_score": 2, "extra_credit": 0}')
        assert typed["manual_score"] == 2 and typed["needs_manual_grade"] is False
        now = ben()
        assert now["needs_manual_grade"] is False and now["score"] == pytest.approx(now["max_score"] - 4 + 2)
        assert provisional < 2

        # a day's grace: the due date moved, every submission graded again
        c.run(documented(f'nbgrader db assignment add {ASG} --duedate="2026-12-15 17:00:00 Europe/Berlin"')
              .replace("2026-12-15", "2026-12-16"))
        again = c.run(documented(f"nbgrader autograde {ASG} --force")).stderr
        assert "cleo> is" not in again and len(re.findall(r"graded \d of 3: ", again)) == 3, again[-3000:]
        kept = api(f"/formgrader/api/grade/{grade_id}")
        assert (kept["manual_score"], kept["needs_manual_grade"]) == (2, False), kept
        assert ben()["needs_manual_grade"] is False and ben()["score"] == pytest.approx(now["score"])
        print(f"\nben's typed score after the re-grade: {kept['manual_score']:g}, needs manual grade: "
              f"{kept['needs_manual_grade']}, total {ben()['score']:g} / 11")
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    c.run(documented("nbgrader export --to=_build/grading/grades.csv"))
    rows = _export(c)
    assert float(rows["ben"]["score"]) == 9
    assert (float(rows["cleo"]["late_submission_penalty"]), float(rows["cleo"]["score"])) == (0, 11)
    report = _report(c)
    assert report["ben"]["status"] == "graded" and report["cleo"]["hours late"] == ""
