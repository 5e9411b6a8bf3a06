"""Fixtures of the hidden suites.

`grading`   the learner's grading (autograder.verdict.context): its seed, deadline, cells and notes, handed down;
`learner`   the proxy for the submission's code, running in a sandboxed worker (one per suite run), which
            imports ahead the modules a suite names as its WORKER_PRELOAD;
`reference` the course's own solution code for an assignment, executed here (trusted);
`reference_worker`, `course` the course's solution in sandboxed workers: the other side of every speed
            comparison, and the server of the course's parts (autograder.inside.parts).
Each test carries `@pytest.mark.cell("<grade_id>")`, the graded cell it scores, and may carry
`@pytest.mark.weight(w)`.  A suite that defines `course_parts(cell, learner) -> [names]` has the tests of
that cell run with those names bound to the course's parts (a part is graded on its own), except the
tests marked `@pytest.mark.together`, which use the learner's own parts together.
"""
import re
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, settings

from autograder.notebooks import learner_cells, read, reference_namespace, source_notebook
from autograder.verdict.learner import Learner, LearnerError, WorkerDied

# Regrading the same submission must give the same grade: examples are derandomized.
settings.register_profile("grading", max_examples=15, derandomize=True, deadline=None, database=None,
                          print_blob=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                 HealthCheck.data_too_large])
settings.load_profile("grading")


@pytest.fixture(scope="session")
def learner(request, grading):
    """The learner's worker: the one a warm suite process started ahead (autograder.verdict.suite_server), else one
    of its own, given the grading's cells and deadline (`grading`: autograder.verdict.context, handed to the suite by
    autograder.verdict.hidden.answer)."""
    modules = {getattr(item, "module", None) for item in request.session.items}
    preload = dict.fromkeys(name for m in modules for name in getattr(m, "WORKER_PRELOAD", ()))
    proxy, grading.prestarted = grading.prestarted, None
    if proxy is None:
        proxy = Learner(grading.cells, preload=tuple(preload), refuse=refusals(modules), library=library(modules),
                        grading=grading)
    proxy.cells, proxy.deadline = grading.cells, grading.deadline
    declare(proxy, modules)
    proxy.assignment = next((getattr(item.module, "A", None) for item in request.session.items
                             if getattr(getattr(item, "module", None), "A", None)), None)
    yield proxy
    proxy.close()


def declare(worker, modules):
    """What the suites' modules declare their learner's worker needs: the modules its code may use beyond the course's
    (ALLOWED_MODULES), environment variables (WORKER_ENV), the course's instruments (WORKER_INSTRUMENTS) and the cells
    it runs (WORKER_CELLS: a function of the notebook's cells, for an exercise whose graded code is part of them)."""
    worker.modules = tuple(dict.fromkeys(n for m in modules for n in getattr(m, "ALLOWED_MODULES", ())))
    worker.env = {k: v for m in modules for k, v in getattr(m, "WORKER_ENV", {}).items()}
    worker.instruments = tuple(dict.fromkeys(n for m in modules for n in getattr(m, "WORKER_INSTRUMENTS", ())))
    for m in modules:
        if callable(getattr(m, "WORKER_CELLS", None)):
            worker.cells = m.WORKER_CELLS(worker.cells)


def library(modules) -> str | None:
    """The suites' pattern of library versions (their LIBRARY), refused while the learner's code runs (None: none
    says, every exercise's)."""
    said = list(dict.fromkeys(m.LIBRARY for m in modules if isinstance(getattr(m, "LIBRARY", None), str)))
    if len(said) <= 1:
        return said[0] if said else None
    # a pattern's global flags (a leading `(?i)`) hold only for its own alternative: `(?i:...)`
    return "|".join(f"(?{f.group(1)}:{p[f.end():]})" if (f := re.match(r"\(\?([aiLmsux]+)\)", p)) else f"(?:{p})"
                    for p in said)


def refusals(modules) -> tuple[str, ...] | None:
    """The library operators the suites' modules refuse (their REFUSED_OPS; None: none says, the worker's own)."""
    said = [m.REFUSED_OPS for m in modules if hasattr(m, "REFUSED_OPS")]
    return tuple(dict.fromkeys(op for ops in said for op in ops)) if said else None


@pytest.fixture(autouse=True)
def refusals_hold(request):
    """Before each test: the learner's worker still refuses the library versions of the exercise. Code that undid a
    refusal could have called one anywhere, so no test after it can be believed (autograder.inside.worker)."""
    if "learner" in request.fixturenames:
        from autograder.verdict.suites.checks import Diagnosis

        learner = request.getfixturevalue("learner")
        if learner.alive() and not learner.spawned:
            try:
                undone = learner.request({"op": "refused"}, what="(the refusals)", remember=False)["ok"]
            except (LearnerError, WorkerDied):
                undone = None
            if undone:
                raise Diagnosis(f"the grader refuses torch's own versions of this exercise's parts, and your code "
                                f"undid that refusal ({', '.join(map(str, undone))[:300]}): no test of your code can "
                                "be believed after that")
    yield


_REFERENCES: dict = {}


@pytest.fixture(scope="session")
def reference():
    def get(assignment: str) -> SimpleNamespace:
        if assignment not in _REFERENCES:
            _REFERENCES[assignment] = SimpleNamespace(**reference_namespace(assignment))
        return _REFERENCES[assignment]
    return get


def _workers(role: str, grading):
    """Workers of course code by assignment: the warm suite process's shared one, else one of this suite's own
    (the `workers` closed at the end)."""
    workers: dict = {}

    def get(assignment: str) -> Learner:
        if role in grading.shared:         # the warm process shares them for this suite's assignment
            return grading.shared[role]
        if assignment not in workers:
            workers[assignment] = Learner(learner_cells(read(source_notebook(assignment))), role=role,
                                          grading=grading)
        return workers[assignment]

    return workers, get


@pytest.fixture(scope="session")
def reference_worker(grading):
    """The course's solution code running in its own sandboxed worker, under the same limits as the
    learner's: the other side of every speed comparison (autograder.verdict.timing)."""
    workers, get = _workers("reference", grading)
    yield get
    for w in workers.values():
        w.close()


@pytest.fixture(scope="session")
def course(grading):
    """Another worker of the course's solution code: it computes the course's parts that a learner's part
    (or, in a speed comparison, the reference's) uses."""
    workers, get = _workers("course parts", grading)
    yield get
    for w in workers.values():
        w.close()


def pytest_configure(config):
    config.addinivalue_line("markers", "cell(grade_id): the graded cell this test scores")
    config.addinivalue_line("markers", "weight(w): this test's share of its cell's points (default 1)")
    config.addinivalue_line("markers", "together: this test uses the learner's own parts, not the course's")
    config.addinivalue_line("markers", "feedback: this test only adds to the feedback (no score, never fails)")
    config.addinivalue_line("markers", "drawn: this test's calls are drawn for each grading (its failure costs nothing "
                                       "where a check every grading holds already charges the part: hidden.score)")
    config.addinivalue_line("markers", "measured: this test measures speed, memory, bytes moved or compiling, not the "
                                       "values")
    config.addinivalue_line("markers", "family: this test checks a promise of the families (autograder.verdict.suites."
                                       "families), not the values")
    config.addinivalue_line("markers", "gpu: this test runs only where the grading's device is a GPU (elsewhere it is "
                                       "not collected, and its cell's other tests share its points)")


def pytest_collection_modifyitems(config, items):
    """A `gpu` test only where the timed calls run on a GPU (autograder.sandbox.gpu.on_gpu)."""
    from autograder.sandbox.gpu import on_gpu

    if not on_gpu():
        items[:] = [i for i in items if i.get_closest_marker("gpu") is None]


def parts_of(request, learner) -> list[str]:
    """The course parts this test's cell runs with (none for a `together` test)."""
    cell = request.node.get_closest_marker("cell")
    pick = getattr(request.module, "course_parts", None)
    if pick is None or cell is None or request.node.get_closest_marker("together"):
        return []
    return list(pick(cell.args[0], learner))


@pytest.fixture(autouse=True)
def parts(request):
    """Bind the names of the parts this test's part uses to the course's (see `parts_of`); the names."""
    if "learner" not in request.fixturenames:
        yield []
        return
    learner = request.getfixturevalue("learner")
    names = parts_of(request, learner)
    if not names:
        yield []
        return
    with learner.course_parts(names, request.getfixturevalue("course")(request.module.A)):
        yield names


@pytest.fixture
def timed_reference(request, reference_worker, course, parts):
    """The reference worker for a speed comparison, using the course's parts through the same route as the
    learner's code does in this test (so both sides pay the same for them)."""
    worker = reference_worker(request.module.A)
    if not parts:
        yield worker
        return
    with worker.course_parts(parts, course(request.module.A)):
        yield worker
