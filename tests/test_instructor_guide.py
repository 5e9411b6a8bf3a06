"""The README's "For instructors", run as written after `make`: one assignment from release to export, with real
nbgrader. The full guide, docs/instructors.md, says the same commands and configuration lines.

A scratch course (this course's `nbgrader_config.py` with the README's configuration lines added, its
`solutions/positional_encoding/`) first has `make`'s example class graded in it, by the Makefile's own recipe, then
releases `positional_encoding` with a due date; one learner fetches and submits it through the exchange (their id is
this machine's user name) and two come from an LMS's zip through `zip_collect`, one on time with a bug, one late; then
autograde, feedback, the class report, feedback back through the exchange (which names the learners who came another
way), and the exports (the course's CSV, Canvas's and Moodle's, each read as its LMS reads it) with a learner who never
submitted: everywhere only this class's learners, and no command prints a SQLAlchemy warning. Formgrader is started as
the README says and answers over HTTP; a cell flagged for manual grading stays flagged until a score is typed for it,
and the typed score and its status stay when every submission is graded again after a change of due date; a score
typed for the late learner leaves her total 0, never below, in the export, the feedback written again and the report.
Every command is taken from the README's text (a test fails when the README stops saying it); only the exchange's
folder is moved to a temporary one.

The example class that `make` graded is checked as well: its gradebook's scores, its feedback pages (each mistake
named, no hidden test shown), each grading's record, and a learner graded again.

Many learners on one machine (docs/instructors.md): the exchange's round again with two real Unix accounts, made for
the test and removed after it (it needs root, as grading and CI have). Each learner runs nbgrader from an environment
of the learners' own, readable by every account and without the course's package, in a home of their own; the
course lives in a folder no learner can enter. Both submissions are collected, each from a folder its learner owns,
and a submission one learner forges in the other's name is caught by its owner.
"""
import csv
import json
import os
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
import zipfile
from http.cookiejar import CookieJar
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from helpers import ROOT, canvas_import, leaks, moodle_import, suite_lines
from nbgrader.api import Gradebook
from packaging.requirements import Requirement

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
    def __init__(self, tmp: Path, exchange: Path | None = None):
        self.root, self.exchange = tmp / "course", exchange or tmp / "exchange"
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
        self.said: list[tuple[str, str]] = []         # each command run, and what it wrote to stderr

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
        self.said.append((cmd, r.stderr))
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
    r = c.run(documented(f"nbgrader release_feedback {ASG}"), check=False)       # ben and cleo have no secret
    out["release_feedback"] = r
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


def _feedback_total(c: Course, learner: str) -> tuple[float, float | None]:
    """The total a learner's feedback page says, and the late penalty it lists (None: none)."""
    page = (c.grading / "feedback" / learner / ASG / f"{ASG}.html").read_text()
    [total] = re.findall(rf"{ASG} \(Score: (-?[\d.]+) / 11\.0\)", page)
    penalty = re.findall(r"Late submission penalty \(Score: -(-?[\d.]+)\)", page)
    return float(total), float(penalty[0]) if penalty else None


def test_release_feedback_says_who_came_another_way(course):
    """ben and cleo came from the LMS's zip: before releasing anything, one error names them and gives the command
    the README gives, no traceback; the README's command then releases the exchange learner's feedback (below)."""
    _, out = course
    r = out["release_feedback"]
    assert r.returncode and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "ben, cleo did not submit through the exchange" in r.stderr, r.stderr[-3000:]
    assert documented(f"nbgrader release_feedback {ASG} --CourseDirectory.student_id_exclude=ben,cleo") in r.stderr


def test_no_command_prints_a_sqlalchemy_warning(course):
    """nbgrader's gradebook gives SQLAlchemy 2 three warnings a new submission (autograde's): the course's configuration
    silences them, in every command of the round (make's example class included)."""
    c, _ = course
    noisy = [cmd for cmd, err in c.said if "SAWarning" in err]
    assert not noisy, noisy
    assert [cmd for cmd, _ in c.said if cmd.startswith("nbgrader autograde")]
    print(f"\n{len(c.said)} commands, none with a SAWarning")


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
    assert _feedback_total(c, "cleo") == (0.0, 11.0) and _feedback_total(c, "ben")[1] is None


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
    due date applied: cleo is no longer late). A score typed for cleo while she is late (the `zero` policy) leaves her
    total 0 at every step, never below: the export, the feedback written again as the guide says, the report."""
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

        # cleo, late: half a point off a part of hers, typed in formgrader
        assert {s["student"]: s for s in api(f"/formgrader/api/submissions/{ASG}")}["cleo"]["score"] == 11
        with Gradebook(f"sqlite:///{c.grading / 'gradebook.db'}") as gb:
            rope = gb.find_grade("rope_tests", ASG, ASG, "cleo").id
        assert api(f"/formgrader/api/grade/{rope}", b'{"manual_score": 3.5, "extra_credit": 0}')["manual_score"] == 3.5
        c.run(documented("nbgrader export --to=_build/grading/grades.csv"))
        cleo = _export(c)["cleo"]
        assert (float(cleo["raw_score"]), float(cleo["late_submission_penalty"]), float(cleo["score"])) == \
            (10.5, 10.5, 0), cleo
        c.run(documented(f"nbgrader generate_feedback {ASG} --force"))
        assert _feedback_total(c, "cleo") == (0.0, 10.5)             # not -0.5: 10.5 less the 11 autograde stored
        assert (_report(c)["cleo"]["total"], _report(c)["cleo"]["late penalty"]) == ("10.5", "10.5")
        print(f"\ncleo, late, after a typed score: feedback {_feedback_total(c, 'cleo')[0]:g} / 11, export "
              f"{float(cleo['score']):g} (raw {float(cleo['raw_score']):g}, penalty "
              f"{float(cleo['late_submission_penalty']):g})")

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
    assert (float(rows["cleo"]["late_submission_penalty"]), float(rows["cleo"]["score"])) == (0, 10.5)
    report = _report(c)
    assert report["ben"]["status"] == "graded" and report["cleo"]["hours late"] == ""
    c.run(documented(f"nbgrader generate_feedback {ASG} --force"))
    assert _feedback_total(c, "cleo") == (10.5, None)


# -- many learners on one machine: the exchange between real Unix accounts -----------------------------------------

def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _learner_distributions() -> list[metadata.Distribution]:
    """nbgrader and every distribution it needs (extras included: nbconvert's bleach[css]), as installed for the
    course."""
    installed: dict[str, metadata.Distribution] = {}
    for d in metadata.distributions():                          # the first on sys.path, as import finds it
        installed.setdefault(_normal(d.metadata["Name"]), d)
    seen: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo = [("nbgrader", "")]
    while todo:
        name, extra = todo.pop()
        key = _normal(name)
        if (key, extra) in done or key not in installed:       # one not installed is missing for the course too
            continue
        done.add((key, extra))
        seen[key] = dist = installed[key]
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, "")] + [(req.name, e) for e in req.extras]
    return list(seen.values())


def _as_learner(user: str, cmd: str, home: Path, path: Path) -> subprocess.CompletedProcess:
    """`cmd` run by the Unix account `user` (runuser), from its home, with only `path` before the system's PATH."""
    env = ["env", "-i", f"HOME={home}", f"USER={user}", f"LOGNAME={user}", "LANG=C.UTF-8",
           f"PATH={path}:/usr/local/bin:/usr/bin:/bin"]
    return subprocess.run(["runuser", "-u", user, "--", *env, "bash", "-c", cmd], cwd=home,
                          capture_output=True, text=True, timeout=300)


class SharedMachine:
    """Two learners' accounts, an environment of the learners' own in a system-like folder, a course in a home
    that no learner can enter, and the exchange where the guide puts it, all under one folder that everyone may
    traverse (pytest's temporary folders are for root alone)."""

    def __init__(self):
        self.top = Path(tempfile.mkdtemp(prefix="shared-machine-"))
        self.top.chmod(0o755)
        tag = secrets.token_hex(3)
        self.learners = [f"ada{tag}", f"bea{tag}"]
        self.homes = {u: self.top / "home" / u for u in self.learners}
        self.created: list[str] = []
        (self.top / "home").mkdir(mode=0o755)
        (self.top / "home").chmod(0o755)
        instructor = self.top / "instructor"
        instructor.mkdir(mode=0o700)
        exchange = self.top / "srv" / "exchange"                 # the guide's /srv/nbgrader/exchange
        exchange.parent.mkdir(mode=0o755)
        exchange.parent.chmod(0o755)                               # root's, as /srv is; release makes exchange/
        self.course = Course(instructor, exchange=exchange)
        self.env = self.top / "opt" / "inside-the-transformer"

    def add_learners(self):
        for user in self.learners:
            r = subprocess.run(["useradd", "--create-home", "--home-dir", str(self.homes[user]), "--shell", "/bin/bash",
                                user], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            self.created.append(user)

    def python(self) -> str:
        """A Python of the course's version that a learner can run: the course's own interpreter where a second
        account can read it, else the system's."""
        want = "{}.{}".format(*sys.version_info[:2])
        tried = []
        for candidate in (os.path.realpath(sys._base_executable), f"/usr/bin/python{want}",
                          f"/usr/local/bin/python{want}"):
            if candidate in tried or not os.path.exists(candidate):
                continue
            tried.append(candidate)
            r = _as_learner(self.learners[0], f"{candidate} -c 'import sys; print(*sys.version_info[:2], sep=\".\")'",
                            self.homes[self.learners[0]], Path("/nonexistent"))
            if r.stdout.strip() == want:
                return candidate
        pytest.fail(f"no Python {want} that another account can run (tried {', '.join(tried)}): the course's own "
                    f"interpreter is in a folder only its owner can read; install the system's (apt-get install "
                    f"python{want})")

    def learners_environment(self, python: str):
        """The guide's /opt/inside-the-transformer, without a network: a venv of `python`, and the course's nbgrader
        with its dependencies copied in as pip installed them (RECORD), nothing of the course's own package."""
        subprocess.run([python, "-m", "venv", "--without-pip", str(self.env)], check=True, capture_output=True)
        site = sysconfig.get_paths()["purelib"]
        [target] = self.env.glob("lib/python*/site-packages")
        for dist in _learner_distributions():
            assert dist.files is not None, f"{dist.metadata['Name']} has no RECORD"
            for f in dist.files:
                src = os.path.normpath(dist.locate_file(f))
                if src.startswith(site + os.sep) and os.path.isfile(src):     # not the scripts in bin/
                    dest = target / os.path.relpath(src, site)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dest)
        script = self.env / "bin" / "nbgrader"                  # the console script pip writes
        script.write_text(f"#!{self.env / 'bin' / 'python'}\nimport sys\nfrom nbgrader.apps.nbgraderapp import main\n"
                          "sys.exit(main())\n")
        script.chmod(0o755)
        subprocess.run(["chmod", "-R", "u=rwX,go=rX", str(self.top / "opt")], check=True)

    def learner(self, user: str, cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        r = _as_learner(user, cmd.replace(EXCHANGE, str(self.course.exchange)), self.homes[user], self.env / "bin")
        if check:
            assert r.returncode == 0, f"{user}: {cmd}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return r

    def remove(self):
        """Every account made, with its home and group, and the whole folder; then say which account outlived it."""
        for user in self.created:
            subprocess.run(["userdel", "--remove", user], capture_output=True)
        shutil.rmtree(self.top, ignore_errors=True)
        left = [user for user in self.created if user in {p.pw_name for p in pwd.getpwall()}]
        assert not left, f"accounts still there: {left}"


def _inbound(m: SharedMachine) -> Path:
    return m.course.exchange / "inside-the-transformer" / "inbound"


@pytest.fixture(scope="module")
def shared_machine():
    """The exchange's round as the guide's "Many learners on one machine" says: the instructor (root) releases,
    two learners' accounts fetch and each submit their own notebook, the instructor collects."""
    if os.geteuid() != 0:
        pytest.skip("creating Unix accounts needs root (grading and CI run as root)")
    for tool in ("useradd", "userdel", "runuser"):
        assert shutil.which(tool), f"{tool} is missing: Debian's passwd and util-linux packages provide it"
    m = SharedMachine()
    t0 = time.monotonic()
    out = {}
    try:
        m.add_learners()
        m.learners_environment(out.setdefault("python", m.python()))
        c = m.course
        c.run(documented(f"nbgrader generate_assignment {ASG} --force"))
        c.run(documented(f"nbgrader release_assignment {ASG}"))
        where = f"--course=inside-the-transformer --Exchange.root={EXCHANGE}"
        fetch = documented(f"nbgrader fetch_assignment {ASG} {where}")
        submit = documented(f"nbgrader submit {ASG} {where}")
        for user in m.learners:
            m.learner(user, fetch)
            # each learner writes their own answer: a line that names them in the first cell they are to fill in
            m.learner(user, f"""python - <<'END'
import nbformat
path = "{ASG}/{ASG}.ipynb"
nb = nbformat.read(path, as_version=4)
cell = next(c for c in nb.cells if c.get("metadata", {{}}).get("nbgrader", {{}}).get("solution"))
cell.source += "\\n# the answer of {user}"
nbformat.write(nb, path)
END""")
            m.learner(user, submit)
        out["inbound"] = {p.name: p.stat() for p in _inbound(m).iterdir()}
        out["collect"] = c.run(documented(f"nbgrader collect {ASG}")).stderr
        out["seconds"] = time.monotonic() - t0
        print(f"\nthe exchange between two Unix accounts ({', '.join(m.learners)}; the learners' Python "
              f"{out['python']}): {out['seconds']:.0f} s")
        yield m, out
    finally:
        m.remove()


def test_each_learner_runs_the_exchange_as_themselves(shared_machine):
    """The learners' environment is one they can run and the course's package is not in it; the release is theirs to
    read and the submissions of others are not theirs to list."""
    m, out = shared_machine
    for user in m.learners:
        assert (m.homes[user] / ASG / f"{ASG}.ipynb").stat().st_uid == pwd.getpwnam(user).pw_uid
    r = m.learner(m.learners[0], "python -c 'import nbgrader, sys; print(sys.prefix)'")
    assert r.stdout.strip() == str(m.env), r.stdout
    r = m.learner(m.learners[0], "python -c 'import autograder'", check=False)
    assert r.returncode and "No module named 'autograder'" in r.stderr, r.stderr[-2000:]
    r = m.learner(m.learners[0], f"ls {_inbound(m)}", check=False)
    assert r.returncode and "Permission denied" in r.stderr, (r.stdout, r.stderr)
    r = m.learner(m.learners[0], f"ls {m.course.root}", check=False)
    assert r.returncode and "Permission denied" in r.stderr, (r.stdout, r.stderr)


def test_the_exchange_has_nbgraders_modes(shared_machine):
    m, _ = shared_machine
    course = m.course.exchange / "inside-the-transformer"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (m.course.exchange, course, course / "outbound",
                                                              course / "inbound")}
    assert modes == {"exchange": 0o777, "inside-the-transformer": 0o755, "outbound": 0o755, "inbound": 0o2733}, \
        {k: oct(v) for k, v in modes.items()}


def test_both_submissions_are_collected_each_owned_by_its_learner(shared_machine):
    m, out = shared_machine
    owners = {name.split("+")[0]: pwd.getpwuid(st.st_uid).pw_name for name, st in out["inbound"].items()}
    assert owners == {u: u for u in m.learners}, owners
    assert "cheating attempt" not in out["collect"], out["collect"][-3000:]
    assert out["collect"].count("Collecting submission") == 2, out["collect"][-3000:]
    for user in m.learners:
        nb = (m.course.grading / "submitted" / user / ASG / f"{ASG}.ipynb").read_text()
        assert [u for u in m.learners if f"# the answer of {u}" in nb] == [user]


def test_a_submission_in_another_learners_name_is_caught(shared_machine):
    """ada drops a later submission named for bea into the inbound folder (which she may write to): collect takes it
    as bea's newest, and says it belongs to ada."""
    m, _ = shared_machine
    ada, bea = m.learners
    when = time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime(time.time() + 60))
    forged = _inbound(m) / f"{bea}+{ASG}+{when}+forged"
    m.learner(ada, f"mkdir '{forged}' && cp {ASG}/{ASG}.ipynb '{forged}/' && echo '{when}' > '{forged}/timestamp.txt'")
    assert pwd.getpwuid(forged.stat().st_uid).pw_name == ada
    err = m.course.run(f"nbgrader collect --update {ASG}").stderr
    assert f"claims to be submitted by {bea} but is owned by {ada}; cheating attempt?" in err, err[-3000:]
