"""Shared fixtures of the project's own tests."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.authoring import variants  # noqa: E402
from autograder.verdict.suites import conftest as suites_conftest  # noqa: E402

ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists())


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: builds the book or runs nbgrader on a class")
    suites_conftest.pytest_configure(config)   # a test here may import a hidden suite to test one of its rules


@pytest.fixture(scope="session")
def assignments():
    return ASSIGNMENTS


def all_variants():
    return [(asg, v) for asg in ASSIGNMENTS if (variants.VARIANTS_DIR / f"{asg}.py").exists()
            for v in variants.load(asg)]
