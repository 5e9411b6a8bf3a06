"""Fixtures of the hidden suites.

`learner`   the proxy for the submission's code, running in a sandboxed worker (one per suite run);
`reference` the course's own solution code for an assignment, executed here (trusted).
Each test carries `@pytest.mark.cell("<grade_id>")`, the graded cell it scores, and may carry
`@pytest.mark.weight(w)`.
"""
import json
import os
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, settings

from autograder.learner import Learner
from autograder.notebooks import learner_cells, read, reference_namespace, source_notebook

# Regrading the same submission must give the same grade: examples are derandomized.
settings.register_profile("grading", max_examples=15, derandomize=True, deadline=None, database=None,
                          print_blob=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                 HealthCheck.data_too_large])
settings.load_profile("grading")


def pytest_configure(config):
    config.addinivalue_line("markers", "cell(grade_id): the graded cell this test scores")
    config.addinivalue_line("markers", "weight(w): this test's share of its cell's points (default 1)")


@pytest.fixture(scope="session")
def learner():
    with open(os.environ["GRADER_CELLS"]) as f:
        cells = json.load(f)
    proxy = Learner(cells)
    yield proxy
    proxy.close()


_REFERENCES: dict = {}


@pytest.fixture(scope="session")
def reference():
    def get(assignment: str) -> SimpleNamespace:
        if assignment not in _REFERENCES:
            _REFERENCES[assignment] = SimpleNamespace(**reference_namespace(assignment))
        return _REFERENCES[assignment]
    return get


@pytest.fixture(scope="session")
def reference_worker():
    """The course's solution code running in its own sandboxed worker, under the same limits as the
    learner's: the other side of every speed comparison (autograder.timing)."""
    workers: dict = {}

    def get(assignment: str) -> Learner:
        if assignment not in workers:
            workers[assignment] = Learner(learner_cells(read(source_notebook(assignment))))
        return workers[assignment]

    yield get
    for w in workers.values():
        w.close()
