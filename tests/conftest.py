"""Shared fixtures of the project's own tests (their shared helpers are in helpers.py)."""
import pytest
from helpers import ASSIGNMENTS

from autograder.verdict.suites import conftest as suites_conftest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: builds the book or runs nbgrader on a class")
    suites_conftest.pytest_configure(config)   # a test here may import a hidden suite to test one of its rules


@pytest.fixture(scope="session")
def assignments():
    return ASSIGNMENTS
