"""Shared fixtures of the project's own tests (their shared helpers are in helpers.py), and their tiers."""
import os
from pathlib import Path

import pytest
import torch

# Triton chooses its interpreter when it is first imported, as the fused_attention notebook's environment cell has it:
# without an NVIDIA GPU, whichever test of a worker imports it first (a graph's, a suite's), the course's kernels run
# in the interpreter (imported otherwise, every kernel raised "0 active drivers": the families had nothing to judge).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
from helpers import ASSIGNMENTS, CHROMIUM, CHROMIUM_ARGS

from autograder.verdict.suites import conftest as suites_conftest

# The tiers, each a pytest marker (docs/testing.md gives each one's time): `make test-quick` runs the first, `make test`
# every one but `full` (a `gpu` test skips itself where no CUDA device is), `make test-full` the last. CI runs both
# `make test` and `make test-full`: every test runs there.
TIERS = {
    "quick": "no notebook graded, no nbgrader command, no browser, no book build",
    "nbgrader": "grades notebooks: a hidden suite against a sandboxed worker, nbgrader's commands, the check service",
    "browser": "drives Chromium",
    "gpu": "needs a CUDA device (make gpu-check)",
    "full": "too long for make test: the book built and its site in a browser, the classes of attackers, every known "
            "mistake (each also on its whole notebook), every correct alternative beside CPU hogs",
}
# Each file's tier, for the tests in it that are not marked with another where they are written. A test that uses the
# `browser` fixture is in the browser tier unless its file is in the full tier; one that needs the book built (the
# `site` fixture: its pages' experiments run from scratch on a clean clone, 6 minutes of one core) is in the full tier.
FILE_TIERS = {
    "quick": ["test_channel.py", "test_guard.py", "test_house.py", "test_record.py", "test_static.py", "test_timing.py",
              "test_gpu.py", "test_sandbox.py", "test_contract.py", "test_labextension.py", "test_book.py",
              "test_bounded.py", "test_pipeline.py"],
    "nbgrader": ["test_class.py", "test_exercises.py", "test_export.py", "test_faults.py", "test_forkserver.py",
                 "test_grading.py", "test_graph.py", "test_hub.py", "test_mutation.py", "test_nbgrader_commands.py",
                 "test_release.py", "test_service.py", "test_variants.py"],
    # whole files too long for make test (docs/testing.md says what make test keeps of each)
    "full": ["test_redteam.py", "test_trust.py", "test_site.py", "test_instructor_guide.py", "test_feedback.py",
             "test_pooling.py", "test_scaffold.py", "test_service_stop.py"],
}
_TIER_OF = {name: tier for tier, names in FILE_TIERS.items() for name in names}
# How many tests each tier holds, when a run collected every test file unfiltered (docs/testing.md gives them, and
# tests/test_house.py checks it says what this run counted).
TIER_COUNTS = pytest.StashKey[dict]()


def pytest_configure(config):
    for tier, what in TIERS.items():
        config.addinivalue_line("markers", f"{tier}: {what}")
    suites_conftest.pytest_configure(config)   # a test here may import a hidden suite to test one of its rules


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(tier) for tier in TIERS):
            continue
        fixtures = getattr(item, "fixturenames", ())
        name = Path(str(item.fspath)).name
        if name not in _TIER_OF:
            raise pytest.UsageError(f"tests/{name} has no tier: add it to FILE_TIERS in tests/conftest.py")
        if "site" in fixtures or _TIER_OF[name] == "full":
            item.add_marker("full")
        elif "browser" in fixtures:
            item.add_marker("browser")
        else:
            item.add_marker(_TIER_OF[name])
    files = {Path(str(item.fspath)).name for item in items}
    if files >= set(_TIER_OF) and not config.option.keyword:
        counts = dict.fromkeys(TIERS, 0)
        for item in items:
            counts[next(t for t in TIERS if item.get_closest_marker(t))] += 1
        config.stash[TIER_COUNTS] = counts


@pytest.fixture(scope="session")
def assignments():
    return ASSIGNMENTS


@pytest.fixture(scope="module")
def site():
    """The book built with the one command the Makefile and the publishing workflow use (tests/site_server.py): built
    once per run, and read again by a later module that finds it newer than every source."""
    from site_server import ensure_built

    return ensure_built()


@pytest.fixture(scope="module")
def browser():
    """Chromium, headless, driven by Playwright."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: `make install` installs it from requirements.txt")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: `make test` installs Debian's (apt-get install chromium); "
                    "or set CHROMIUM to a Chromium or Chrome binary")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()
