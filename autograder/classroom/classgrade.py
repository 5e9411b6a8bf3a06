"""Grade a whole class in parallel: real `nbgrader autograde` runs, each for a group of learners, as tasks on Dask
distributed (a local cluster, or an existing one with `--scheduler`), then feedback and the class report.

    python -m autograder.classroom.classgrade ASSIGNMENT [--scheduler ADDRESS] [--workers N] [--grading-dir DIR]
                                              [--learners A,B,...] [--timeout S] [--retries N] [--group N]
                                              [--no-feedback] [--no-report] [--no-progress]

Where it runs (a Slurm cluster included), the gradebook under concurrent writers, and how a grader error is told
from a submission with nothing to grade: docs/classgrade.md.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import random
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autograder import config
from autograder.authoring.release import nbgrader
from autograder.classroom import grade
from autograder.pipeline import failures
from autograder.sandbox.box import sweep
from autograder.verdict import record

DEFAULT_RETRIES = 2
GRADER, SUBMISSION = grade.GRADER_ERROR, grade.NOT_GRADED       # the two kinds of failure


@dataclass
class Outcome:
    """What one learner's grading task reports back."""
    learner: str
    ok: bool
    returncode: int | None
    seconds: float
    attempts: int = 1
    reason: str = ""
    errors: list[str] = field(default_factory=list)
    log: str = ""
    kind: str = ""              # of a failure: GRADER or SUBMISSION

    @property
    def status(self) -> str:
        return "graded" if self.ok else f"{self.kind}: {self.reason}"


@dataclass
class ClassResult:
    assignment: str
    outcomes: list[Outcome]
    wall_s: float
    grading_s: float
    workers: int
    feedback_failures: list[str] = field(default_factory=list)
    feedback_s: float = 0.0
    report: dict = field(default_factory=dict)

    @property
    def graded(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.ok]

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    @property
    def grader_errors(self) -> list[Outcome]:
        return [o for o in self.failed if o.kind == GRADER]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.feedback_failures


# -- the gradebook ------------------------------------------------------------------------------
def gradebook_url(grading_dir: Path, url: str | None = None) -> str:
    """The gradebook every task writes to: `url`, else GRADEBOOK_URL, else the grading folder's SQLite
    file; a SQLite URL gets a busy timeout unless it names one."""
    from sqlalchemy.engine import make_url

    u = make_url(grade.gradebook_url(grading_dir, url))
    if u.get_backend_name() == "sqlite" and "timeout" not in u.query:
        u = u.update_query_dict({"timeout": f"{config.course().gradebook_busy_timeout:g}"})
    return u.render_as_string(hide_password=False)


def check_gradebook(url: str, assignment: str):
    """Fail early, with the step to run, when the gradebook does not know the assignment."""
    from nbgrader.api import Gradebook, MissingEntry
    from sqlalchemy import create_engine, inspect

    engine = create_engine(url)
    try:
        if "assignment" not in inspect(engine).get_table_names():
            raise SystemExit(f"the gradebook {_safe(url)} has no assignments: "
                             f"run `nbgrader generate_assignment {assignment}` first")
    finally:
        engine.dispose()
    with Gradebook(url) as gb:
        try:
            gb.find_assignment(assignment)
        except MissingEntry:
            raise SystemExit(f"the gradebook {_safe(url)} does not know {assignment!r}: "
                             f"run `nbgrader generate_assignment {assignment}` first") from None


def _safe(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def submitted_learners(grading_dir: Path, assignment: str) -> list[str]:
    base = Path(grading_dir) / "submitted"
    return sorted(p.parent.name for p in base.glob(f"*/{assignment}") if p.is_dir())


def log_path(grading_dir: Path, assignment: str, learner: str) -> Path:
    return Path(grading_dir) / "logs" / assignment / f"{learner}.log"


# -- one learner (runs on a Dask worker) -----------------------------------------------------------
class _Watchdog:
    """Kill the process tree of this process's child whose command line holds `marker`, after `seconds`."""

    def __init__(self, seconds: float, marker: str):
        self.fired = False
        self.marker = marker
        self._timer = threading.Timer(seconds, self._kill)
        self._timer.daemon = True
        self._timer.start()

    def _kill(self):
        import psutil

        for child in psutil.Process().children():
            try:
                if self.marker not in child.cmdline():
                    continue
                tree = [child, *child.children(recursive=True)]
            except psutil.Error:
                continue
            self.fired = True
            for p in tree:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(tree, timeout=10)
            for p in tree:               # what their sandboxes and fork servers left on the host
                sweep(p.pid)

    def cancel(self):
        self._timer.cancel()


def failure_reason(errors: list[dict], returncode: int | None, fault: str | None = None) -> tuple[str, list[str]]:
    """(a one-line reason, the last errors) of a failed nbgrader run: the grader's fault as its record says it, else
    what nbgrader's logger recorded (`autograder.pipeline.failures`), never a line of the log's text."""
    detail, said = failures.reason(errors)
    if returncode is None:
        code = "no exit code"
    elif returncode < 0:
        code = f"killed by signal {-returncode}"
    else:
        code = f"exit code {returncode}"
    if fault:
        detail = fault.strip().splitlines()[0]
    return f"{code}: {(detail or 'nbgrader logged no error')[:300]}", said


def errors_path(log: Path) -> Path:
    """Where the nbgrader run that writes `log` records its errors (GRADER_ERRORS)."""
    return log.with_name(f"{log.stem}.errors.jsonl")


def _run_env(log: Path, url: str, env: dict | None = None) -> dict:
    """`env` for an nbgrader run on the gradebook at `url` whose errors are recorded beside `log` (emptied first)."""
    errors_path(log).write_text("")
    return {**(env or {}), "GRADEBOOK_URL": url, failures.ENV: str(errors_path(log))}


def recorded_fault(grading_dir: Path, assignment: str, learner: str, since: float) -> str | None:
    """The fault a record stored since `since` (time.time()) for the learner's assignment names: the grader could not
    grade a notebook of it (autograder.verdict.record); None when no such record says so."""
    for path in sorted(record.path(grading_dir, learner, assignment, assignment).parent.glob("*.json")):
        rec = record.load(path) if path.stat().st_mtime >= since - 1 else None
        grading = record.Grading.from_dict(rec) if rec is not None else None
        if grading is not None and not grading.gradable:
            return grading.fault
    return None


def has_notebook(grading_dir: Path, assignment: str, learner: str) -> bool:
    """Whether the learner's submission folder holds a notebook for nbgrader to grade."""
    return any(grade.submitted_path(grading_dir, learner, assignment).parent.glob("*.ipynb"))


def failure_kind(fault: str | None, submitted: bool, stopped: bool) -> str:
    """GRADER unless the submission explains the failure: it holds no notebook, and the grading was neither stopped nor
    recorded as one the grader could not do. Nothing of a log counts: a learner's code may write anything there."""
    if stopped or fault is not None or submitted:
        return GRADER
    return SUBMISSION


def autograde_learner(grading_dir: Path | str, assignment: str, learner: str, url: str,
                      timeout: float | None = None, retries: int = DEFAULT_RETRIES,
                      extra: tuple = (), env: dict | None = None) -> dict:
    """The Dask task: `nbgrader autograde ASSIGNMENT --force --student=LEARNER` into the gradebook at `url`,
    again after a lock error (at most `retries` times), killed after `timeout` seconds (default: the course's
    `learner_timeout`)."""
    timeout = timeout or config.course().learner_timeout
    grading_dir = Path(grading_dir)
    log = log_path(grading_dir, assignment, learner)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    t0 = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        began = time.time()
        with open(log, "a") as f:
            f.write(f"== nbgrader autograde {assignment} --student={learner} (attempt {attempt})\n")
            f.flush()
            watchdog = _Watchdog(timeout, f"--student={learner}")
            try:
                r = grade.autograde(grading_dir, assignment, learner=learner, extra=tuple(extra),
                                    env_extra=_run_env(log, url, env),
                                    stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            finally:
                watchdog.cancel()
        errors = failures.read(errors_path(log))
        seconds = round(time.monotonic() - t0, 2)
        if r.returncode == 0 and not watchdog.fired:
            return asdict(Outcome(learner, True, 0, seconds, attempt, log=str(log)))
        said: list[str]
        fault = recorded_fault(grading_dir, assignment, learner, began)
        if watchdog.fired:
            reason, said = f"did not finish within {timeout:g} s and was stopped", []
        elif failures.is_lock(errors) and attempt <= retries:
            time.sleep(min(30.0, 2.0 ** attempt) * random.uniform(0.5, 1.5))
            continue
        else:
            reason, said = failure_reason(errors, r.returncode, fault)
        kind = failure_kind(fault, has_notebook(grading_dir, assignment, learner), watchdog.fired)
        return asdict(Outcome(learner, False, r.returncode, seconds, attempt, reason, said, str(log), kind))


def _sections(text: str, assignment: str, learners: list[str]) -> dict[str, str]:
    """The lines of a group's nbgrader log that concern each learner (nbgrader names their folders)."""
    marks = {learner: (f"/submitted/{learner}/{assignment}", f"/autograded/{learner}/{assignment}")
             for learner in learners}
    out: dict[str, list[str]] = {learner: [] for learner in learners}
    current = None
    for line in text.splitlines():
        for learner, names in marks.items():
            if any(n in line for n in names):
                current = learner
                break
        if current is not None:
            out[current].append(line)
    return {learner: "\n".join(lines) for learner, lines in out.items()}


def autograde_learners(grading_dir: Path | str, assignment: str, learners: list[str], everyone: list[str], url: str,
                       timeout: float | None = None, retries: int = DEFAULT_RETRIES, extra: tuple = (),
                       env: dict | None = None) -> list[dict]:
    """The Dask task for a group of learners: one `nbgrader autograde` for all of them, so that its warm suite
    process, the kernels it makes ready ahead and nbgrader's own start serve the whole group; a learner graded is
    one whose autograded notebook this run wrote (nbgrader removes it when the grading fails), a learner whose
    stored record says the grader could not grade it is a grader error, and any other is graded again alone
    (`autograde_learner`), which says why. `timeout` is per learner; the group may take that many times it."""
    if len(learners) == 1:
        return [autograde_learner(grading_dir, assignment, learners[0], url, timeout, retries, extra, env)]
    timeout = timeout or config.course().learner_timeout
    grading_dir = Path(grading_dir)
    log = grading_dir / "logs" / assignment / f"group-{learners[0]}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    others = [x for x in everyone if x not in learners]
    t0, began = time.monotonic(), time.time()
    with open(log, "w") as f:
        f.write(f"== nbgrader autograde {assignment} for {', '.join(learners)}\n")
        f.flush()
        watchdog = _Watchdog(timeout * len(learners), "autograde")
        try:
            r = grade.autograde(grading_dir, assignment, extra=(*extra, *(
                                [f"--CourseDirectory.student_id_exclude={','.join(others)}"] if others else [])),
                                env_extra=_run_env(log, url, env),
                                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            watchdog.cancel()
    text, errors = log.read_text(errors="replace"), failures.read(errors_path(log))
    share = round((time.monotonic() - t0) / len(learners), 2)
    sections = _sections(text, assignment, learners)
    outcomes = []
    for learner in learners:
        done = grading_dir / "autograded" / learner / assignment / f"{assignment}.ipynb"
        section = sections[learner]
        own = log_path(grading_dir, assignment, learner)
        own.write_text(f"== part of {log.name}\n{section}\n")
        fault = recorded_fault(grading_dir, assignment, learner, began)
        if done.exists() and done.stat().st_mtime >= began - 1 and fault is None:
            outcomes.append(asdict(Outcome(learner, True, 0, share, log=str(own))))
        elif fault is not None and not watchdog.fired and not failures.is_lock(errors):
            reason, _ = failure_reason([], r.returncode, fault)    # the run's errors may be other learners'
            outcomes.append(asdict(Outcome(learner, False, r.returncode, share, 1, reason, [], str(own), GRADER)))
        else:
            # stopped with its group, not reached, a lock, or another failure of nbgrader's: on its own again
            outcomes.append(autograde_learner(str(grading_dir), assignment, learner, url, timeout, retries, extra, env))
    return outcomes


def feedback_learners(grading_dir: Path | str, assignment: str, url: str, learners: list[str],
                      others: list[str]) -> dict:
    """The Dask task: `nbgrader generate_feedback` for `learners` (every learner but `others`)."""
    grading_dir = Path(grading_dir)
    args = ["generate_feedback", assignment, "--force"]
    if len(learners) == 1:
        args.append(f"--student={learners[0]}")
    elif others:
        args.append(f"--CourseDirectory.student_id_exclude={','.join(others)}")
    log = grading_dir / "logs" / assignment / f"feedback-{learners[0]}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log, "w") as f:
        r = nbgrader(*args, grading_dir=grading_dir, check=False, env_extra=_run_env(log, url),
                     stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    missing = [name for name in learners
               if not (grading_dir / "feedback" / name / assignment).is_dir()]
    reason = "" if r.returncode == 0 and not missing else failure_reason(failures.read(errors_path(log)),
                                                                         r.returncode)[0]
    return {"learners": learners, "ok": not reason, "missing": missing, "reason": reason,
            "seconds": round(time.monotonic() - t0, 2), "log": str(log)}


def portable(name: str):
    """The task function `name` of this module, in a form any Dask process can unpickle without the course
    installed: a closure, which Dask's cloudpickle sends by value, that imports the course's code only when it
    runs on a worker (whose Python is the course's, where it is installed).  Recent schedulers unpickle the task
    graph themselves, so a function sent by reference would need the course where the scheduler runs too."""
    def task(*args):
        import importlib

        return getattr(importlib.import_module("autograder.classroom.classgrade"), name)(*args)
    return task


# -- the class -------------------------------------------------------------------------------------
@contextmanager
def dask_client(scheduler: str | None = None, workers: int | None = None):
    """A Dask client: on the cluster at `scheduler`, or on an embedded LocalCluster of `workers` processes."""
    from distributed import Client, LocalCluster

    if scheduler:
        client = Client(scheduler, timeout="60s")
        try:
            if workers:
                client.wait_for_workers(workers, timeout=600)
            yield client
        finally:
            client.close()
        return
    n = workers or os.cpu_count() or 1
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR, memory_limit=0) as cluster, Client(cluster) as client:
        yield client


def _bar(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="learner", file=sys.stderr, disable=not enabled, smoothing=0,
                dynamic_ncols=True, mininterval=0.5,
                bar_format="{desc}: {n_fmt}/{total_fmt} |{bar}| {elapsed} elapsed, about {remaining} left{postfix}")


def _chunks(items: list[str], n: int) -> list[list[str]]:
    n = max(1, min(n, len(items)))
    return [items[i::n] for i in range(n)]


def grade_class(assignment: str, grading_dir: Path = grade.DEFAULT_DIR, scheduler: str | None = None,
                workers: int | None = None, learners: list[str] | None = None, url: str | None = None,
                timeout: float | None = None, retries: int = DEFAULT_RETRIES, extra: tuple = (),
                env: dict | None = None, feedback: bool = True, report: bool = True, progress: bool = True,
                out=None, group: int | None = None) -> ClassResult:
    """Autograde every submitted learner in parallel, then feedback and the report; print a summary.
    `timeout`: seconds one learner may take (default: the course's `learner_timeout`, autograder.config).
    `group`: learners per nbgrader run (default: enough groups for two per worker, for balance)."""
    out = out or sys.stdout
    timeout = timeout or config.course().learner_timeout
    grading_dir = Path(grading_dir).resolve()
    url = gradebook_url(grading_dir, url)
    names = list(learners) if learners else submitted_learners(grading_dir, assignment)
    if not names:
        raise SystemExit(f"no learner has submitted {assignment!r} under {grading_dir / 'submitted'}")
    check_gradebook(url, assignment)
    t0 = time.monotonic()
    from distributed import as_completed

    with dask_client(scheduler, workers) as client:
        n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
        run = f"{time.time_ns():x}"
        task = portable("autograde_learners")
        size = group or max(1, math.ceil(len(names) / (2 * n_workers)))
        groups = [names[i:i + size] for i in range(0, len(names), size)]
        futures = {client.submit(task, str(grading_dir), assignment, chunk, names, url, timeout, retries, tuple(extra),
                                 env, key=f"autograde-{assignment}-{chunk[0]}-{run}", pure=False): chunk
                   for chunk in groups}
        outcomes = []
        with _bar(len(names), f"autograde {assignment} on {n_workers} workers", progress) as bar:
            for fut in as_completed(futures):
                chunk = futures[fut]
                try:
                    done = [Outcome(**o) for o in fut.result()]
                except Exception as e:  # noqa: BLE001 - the task itself failed (worker lost, not importable)
                    done = [Outcome(name, False, None, 0.0, 1,
                                    f"the grading task failed: {type(e).__name__}: {e}"[:300], kind=GRADER)
                            for name in chunk]
                outcomes += done
                bar.update(len(done))
                for o in done:
                    if not o.ok:
                        bar.write(f"{o.kind}: {o.learner}: {o.reason}", file=sys.stderr)
                bar.set_postfix_str(f"{sum(not x.ok for x in outcomes)} failed" if not all(x.ok for x in outcomes)
                                    else "", refresh=False)
        grading_s = time.monotonic() - t0
        outcomes.sort(key=lambda o: names.index(o.learner))
        result = ClassResult(assignment, outcomes, 0.0, grading_s, n_workers)
        graded = [o.learner for o in outcomes if o.ok]
        if feedback and graded:
            t1 = time.monotonic()
            autograded = grading_dir / "autograded"
            everyone = sorted({p.name for p in autograded.iterdir() if p.is_dir()} | set(names))
            chunks = _chunks(graded, n_workers)
            fb = [client.submit(portable("feedback_learners"), str(grading_dir), assignment, url, chunk,
                                [x for x in everyone if x not in chunk], key=f"feedback-{assignment}-{i}-{run}",
                                pure=False) for i, chunk in enumerate(chunks)]
            with _bar(len(graded), f"feedback {assignment}", progress) as bar:
                for fut in as_completed(fb):
                    try:
                        r = fut.result()
                    except Exception as e:  # noqa: BLE001
                        r = {"learners": [], "ok": False, "missing": [], "reason": f"{type(e).__name__}: {e}"}
                    bar.update(len(r["learners"]))
                    if not r["ok"]:
                        result.feedback_failures.append(
                            f"{', '.join(r['missing'] or r['learners'])}: {r['reason']}")
            result.feedback_s = time.monotonic() - t1
    if report:
        from autograder.classroom import report as class_report

        failures = {o.learner: o.status for o in outcomes if not o.ok}
        result.report = class_report.build(grading_dir, assignment, url=url, failures=failures)
    result.wall_s = time.monotonic() - t0
    print(summary(result, grading_dir), file=out)
    return result


def summary(r: ClassResult, grading_dir: Path | None = None) -> str:
    n = len(r.outcomes)
    busy = sum(o.seconds for o in r.outcomes)
    lines = [f"{r.assignment}: {len(r.graded)} of {n} learners graded, {len(r.failed)} failed, "
             f"on {r.workers} workers",
             f"  wall time {r.wall_s:.1f} s (autograde {r.grading_s:.1f} s, feedback {r.feedback_s:.1f} s); "
             f"per learner: {busy / max(n, 1):.1f} s of autograde on average, "
             f"{r.grading_s / max(n, 1):.1f} s of wall time"]
    retried = [o for o in r.outcomes if o.attempts > 1]
    if retried:
        lines.append("  graded again after a gradebook lock error: "
                     + ", ".join(f"{o.learner} ({o.attempts} attempts)" for o in retried))
    for kind, title in ((GRADER, "grader errors, not the learners' doing (no score recorded; fix, then grade "
                                 "them again):"),
                        (SUBMISSION, "not graded, nothing to grade in the submission:")):
        failed = [o for o in r.failed if o.kind == kind]
        if failed:
            lines.append(f"  {title}")
        for o in failed:
            lines.append(f"    {o.learner}: {o.reason}")
            for e in [e for e in o.errors if e not in o.reason][-2:]:
                lines.append(f"        {e[:200]}")
            if o.log:
                lines.append(f"        log: {o.log}")
    for f in r.feedback_failures:
        lines.append(f"  feedback failed for {f}")
    if r.report.get("html"):
        lines.append(f"  report: {r.report['html']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder.classroom.classgrade",
                                description="Grade every submitted learner of an assignment in parallel on Dask.")
    p.add_argument("assignment")
    p.add_argument("--scheduler", help="address of an existing Dask scheduler (default: a local cluster)")
    p.add_argument("--workers", type=int, help="local worker processes (default: one per core); "
                                               "with --scheduler, wait for this many workers")
    p.add_argument("--grading-dir", type=Path, default=Path(os.environ.get("GRADING_DIR", grade.DEFAULT_DIR)))
    p.add_argument("--learners", help="comma-separated learners (default: everyone who submitted)")
    p.add_argument("--timeout", type=float, help="seconds one learner may take (default: the learner's budget "
                                                 "and twice the grace, from nbgrader_config.py)")
    p.add_argument("--retries", type=int, default=DEFAULT_RETRIES,
                   help="grade a learner again this many times after a gradebook lock error")
    p.add_argument("--group", type=int, help="learners per nbgrader run (default: two groups per worker)")
    p.add_argument("--no-feedback", action="store_true")
    p.add_argument("--no-report", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    r = grade_class(a.assignment, a.grading_dir, scheduler=a.scheduler, workers=a.workers,
                    learners=a.learners.split(",") if a.learners else None, timeout=a.timeout, retries=a.retries,
                    feedback=not a.no_feedback, report=not a.no_report, progress=not a.no_progress, group=a.group)
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
