"""Trusted grading against plain nbgrader on the same notebooks, side by side (`make bench`).

"Plain nbgrader" is a baseline course this script builds in a temporary folder: the same assignments, whose
graded cells run the same hidden tests as ordinary nbgrader test cells, in the learner's kernel, minus what only
a trusted grader can do (speed and memory, the course's parts, the sandbox). Both courses grade the same
learners' notebooks with `nbgrader autograde`, a batch per course in turn (the order swapped each round); the
table gives the median time per notebook and the ratio, in wall time and in the machine's CPU time (every
core's busy time, from /proc/stat: the bench is meant to run alone).

    python bench/plain_nbgrader.py [ASSIGNMENT...] [--rounds N]

The in-kernel runner is `run_tests`, which the baseline's graded cells import from this file.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

TRUSTED_ONLY = {"reference_worker", "timed_reference", "course"}    # fixtures only a trusted grader has

CONFTEST = '''"""The hidden suites' fixtures for plain nbgrader: the learner's code is called in this very process."""
import pytest
from hypothesis import HealthCheck, settings

from plain_nbgrader import InKernel, NAMESPACE
from autograder.notebooks import reference_namespace
from types import SimpleNamespace

settings.register_profile("grading", max_examples=15, derandomize=True, deadline=None, database=None,
                          print_blob=False, suppress_health_check=list(HealthCheck))
settings.load_profile("grading")


def pytest_configure(config):
    for name in ("cell(grade_id)", "weight(w)", "together", "feedback"):
        config.addinivalue_line("markers", name)


@pytest.fixture(scope="session")
def learner():
    return InKernel(NAMESPACE[0])


@pytest.fixture(scope="session")
def reference():
    cache = {}

    def get(assignment):
        if assignment not in cache:
            cache[assignment] = SimpleNamespace(**reference_namespace(assignment))
        return cache[assignment]
    return get


@pytest.fixture(autouse=True)
def parts():
    yield []
'''

NAMESPACE: list = []


class InKernel:
    """The trusted suites' learner proxy, answered in this process by the worker's own code (autograder.inside.worker):
    every request and response goes through the protocol's encoding, as it would between two processes."""

    def __init__(self, ns: dict):
        from autograder.inside.worker import Worker
        from autograder.verdict.learner import Learner

        self.worker, self.parts, self.parts_server = Worker(ns), [], None
        for name in ("fn", "new", "twice", "seed"):
            setattr(self, name, getattr(Learner, name).__get__(self))

    def request(self, req: dict, timeout=None, what: str = "", remember: bool = True):
        from autograder.inside.protocol import decode, encode
        from autograder.verdict.learner import LearnerError

        def copy(obj):
            data = encode(obj)
            hlen = int.from_bytes(data[:4], "little")
            return decode(data[4:4 + hlen], data[12 + hlen:])

        resp = copy(self.worker.handle(copy(req)))
        if "error" in resp:
            e = resp["error"]
            raise LearnerError(e["type"], e["mro"], e["message"], e["traceback"])
        return resp

    @contextlib.contextmanager
    def course_parts(self, names, server):
        from autograder.verdict.learner import LearnerError

        raise LearnerError("NotAvailable", ["NotAvailable"], "plain nbgrader has no course parts")
        yield


class _Select:
    """Keep the tests of one graded cell that plain nbgrader can run; record their outcomes."""

    def __init__(self, cell: str):
        self.cell, self.weights = cell, {}

    def pytest_collection_modifyitems(self, items):
        keep = []
        for item in items:
            marker = item.get_closest_marker("cell")
            trusted = TRUSTED_ONLY & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("feedback")
            if marker and marker.args[0] == self.cell and not trusted:
                keep.append(item)
        items[:] = keep

    def pytest_runtest_makereport(self, item, call):
        if call.when == "call" or (call.when == "setup" and call.excinfo is not None):
            weight = item.get_closest_marker("weight")
            self.weights[item.nodeid] = (float(weight.args[0]) if weight else 1.0, call.excinfo is None)


def run_tests(assignment: str, cell: str, namespace: dict, points: float, suites: str) -> float:
    """Run the hidden tests of `cell` on the notebook's own names; the score, for nbgrader's partial credit."""
    import pytest

    NAMESPACE[:] = [namespace]
    if suites not in sys.path:
        sys.path.insert(0, suites)
    select = _Select(cell)
    with contextlib.redirect_stdout(io.StringIO()):
        pytest.main([str(Path(suites) / "plainsuites" / f"test_{assignment}.py"), "-q", "-p", "no:cacheprovider",
                     "--assert=plain", "-c", os.devnull, "--rootdir", suites, "-W", "ignore"], plugins=[select])
    total = sum(w for w, _ in select.weights.values())
    got = sum(w for w, ok in select.weights.values() if ok)
    return round(points * got / total, 2) if total else 0.0


# -- building the baseline course ---------------------------------------------------------------------------
def build_plain_course(folder: Path, assignments: list[str]) -> Path:
    """The baseline course in `folder`: its own nbgrader_config (nbgrader's own pipeline), the suites' copies with
    the in-kernel conftest, and each source notebook with graded cells that run the hidden tests."""
    import nbformat

    from autograder import notebooks

    suites = folder / "suites"
    (suites / "plainsuites").mkdir(parents=True)
    for src in (ROOT / "autograder" / "verdict" / "suites").glob("*.py"):
        if src.name != "conftest.py":
            shutil.copy(src, suites / "plainsuites" / src.name)
    (suites / "plainsuites" / "conftest.py").write_text(CONFTEST)
    (folder / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(folder)!r}\n"
        "c.CourseDirectory.source_directory = 'source'\nc.CourseDirectory.release_directory = 'release'\n"
        "c.ExecutePreprocessor.timeout = 300\n"
        "c.ClearSolutions.code_stub = "
        "{'python': '# YOUR CODE HERE\\nraise NotImplementedError(\"not implemented yet\")'}\n")
    for asg in assignments:
        nb = notebooks.read(notebooks.source_notebook(asg))
        for cell in nb.cells:
            if notebooks.is_graded_test(cell):
                meta = notebooks.nbgrader_meta(cell)
                # bench/ goes last on the kernel's path: its profile.py would hide the standard library's (cProfile,
                # which torch's tracer imports, would fail, and with it the training test)
                cell.source = (f"import sys\nsys.path.append({str(HERE)!r})\nfrom plain_nbgrader import run_tests\n"
                               f"run_tests({asg!r}, {meta['grade_id']!r}, globals(), {float(meta['points'])!r}, "
                               f"{str(suites)!r})")
        (folder / "source" / asg).mkdir(parents=True)
        nbformat.write(nb, str(folder / "source" / asg / f"{asg}.ipynb"))
    return folder


def _nbgrader(course: Path, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    from autograder.authoring.release import BIN, tools_path

    full = {**os.environ, **(env or {}), "PATH": tools_path()}
    return subprocess.run([str(BIN / "nbgrader"), *args], cwd=course, env=full, capture_output=True, text=True)


def learners(assignment: str) -> dict:
    """The notebooks both courses grade: the reference and every known answer of the assignment."""
    from autograder.authoring import variants

    out = {"reference": variants.submission(assignment)}
    for v in variants.load(assignment):
        out[v.name] = variants.submission(assignment, v.cells)
    return out


def machine_cpu_s() -> float:
    """Seconds of CPU time every core of the machine spent busy since boot (not idle, not waiting for I/O)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def compare(assignments: list[str], rounds: int, per_batch: int) -> list[list]:
    import nbformat

    from autograder.classroom import grade

    rows = []
    with tempfile.TemporaryDirectory(prefix="plain-course-") as tmp:
        plain = build_plain_course(Path(tmp) / "plain", assignments)
        trusted = Path(tmp) / "trusted"
        grade.prepare(trusted, assignments)
        for asg in assignments:
            r = _nbgrader(plain, "generate_assignment", asg, "--force", "--log-level=WARN")
            assert r.returncode == 0, r.stderr[-3000:]
            notebooks_ = dict(list(learners(asg).items())[:per_batch])
            for learner, nb in notebooks_.items():
                grade.submit(trusted, learner, asg, nb)
                path = plain / "submitted" / learner / asg / f"{asg}.ipynb"
                path.parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, str(path))
            times = {"plain": [], "trusted": []}
            cpu = {"plain": [], "trusted": []}
            for i in range(rounds):
                for side in (("plain", "trusted") if i % 2 == 0 else ("trusted", "plain")):
                    t0, c0 = time.perf_counter(), machine_cpu_s()
                    if side == "plain":
                        r = _nbgrader(plain, "autograde", asg, "--force")
                    else:
                        r = grade.autograde(trusted, asg, capture_output=True, text=True)
                    times[side].append((time.perf_counter() - t0) / len(notebooks_))
                    cpu[side].append((machine_cpu_s() - c0) / len(notebooks_))
                    if r.returncode:
                        print(f"  ({side} {asg}: exit {r.returncode}: {r.stderr[-500:]})", file=sys.stderr)
            plain_scores = grade.scores(None, [asg], "sqlite:///" + str(plain / "gradebook.db"))
            trusted_scores = grade.scores(trusted, [asg])
            ref = lambda rows: {r.cell: r.score for r in rows if r.learner == "reference"}  # noqa: E731
            print(f"  {asg} reference: plain {ref(plain_scores)}, trusted {ref(trusted_scores)}", flush=True)
            # A baseline whose reference loses points skipped work (a test that failed early): its times mean nothing.
            void = "" if ref(plain_scores) == ref(trusted_scores) else " (void: the reference's scores differ)"
            p, t = statistics.median(times["plain"]), statistics.median(times["trusted"])
            pc, tc = statistics.median(cpu["plain"]), statistics.median(cpu["trusted"])
            rows.append([asg, len(notebooks_), rounds, f"{p:.1f}", f"{t:.1f}", f"{t / p:.2f}{void}",
                         f"{pc:.1f}", f"{tc:.1f}", f"{tc / pc:.2f}"])
            print(f"  {asg}: plain {[round(x, 1) for x in times['plain']]} "
                  f"trusted {[round(x, 1) for x in times['trusted']]}",
                  flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("assignments", nargs="*")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--learners", type=int, default=6, help="notebooks per batch")
    a = p.parse_args()
    assignments = a.assignments or sorted(d.name for d in (ROOT / "solutions").iterdir())
    rows = compare(assignments, a.rounds, a.learners)
    print("\nGrading time per notebook, seconds (median of the rounds; a batch of notebooks per course in turn): wall "
          "time, then the machine's CPU time")
    header = ["assignment", "notebooks", "rounds", "plain nbgrader", "trusted", "ratio", "plain CPU", "trusted CPU",
              "CPU ratio"]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, *rows]:
        print("  " + "  ".join(str(x).rjust(w) for x, w in zip(row, widths)))


if __name__ == "__main__":
    main()
