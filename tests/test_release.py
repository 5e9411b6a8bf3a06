"""One source per exercise: exercises/ is generated from solutions/, and nothing secret leaks."""
import filecmp
import re

import nbformat
import pytest
from helpers import ASSIGNMENTS, ROOT, leaks, secret_lines

from autograder import notebooks
from autograder.authoring.release import generate
from autograder.verdict import hidden


def test_every_assignment_has_a_release_a_suite_and_variants():
    assert ASSIGNMENTS, "no assignments found in solutions/"
    for asg in ASSIGNMENTS:
        assert (ROOT / "exercises" / asg / f"{asg}.ipynb").exists(), f"{asg}: run `make exercises`"
        assert hidden.suite_path(asg).exists(), f"{asg}: no hidden suite"
        assert (ROOT / "examples" / "variants" / f"{asg}.py").exists(), f"{asg}: no variants"


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_exercises_are_generated_from_solutions(asg, tmp_path):
    """Regenerating the release with nbgrader gives exactly the committed exercises/ folder."""
    generate([asg], into=tmp_path / "release", grading_dir=tmp_path / "grading")
    fresh, committed = tmp_path / "release" / asg, ROOT / "exercises" / asg
    cmp = filecmp.dircmp(fresh, committed)
    assert not (cmp.left_only or cmp.right_only), f"files differ: {cmp.left_only} vs {cmp.right_only}"
    for name in cmp.common_files:
        assert (fresh / name).read_bytes() == (committed / name).read_bytes(), (
            f"exercises/{asg}/{name} is out of date with solutions/: run `make exercises`")


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_source_folders_hold_only_the_notebook(asg):
    """nbgrader copies every other file of a source folder into the release (nbgrader #1432)."""
    files = sorted(p.name for p in (ROOT / "solutions" / asg).iterdir() if p.name != ".ipynb_checkpoints")
    assert files == [f"{asg}.ipynb"]


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_source_notebook_conventions(asg):
    """Each graded solution has a locked graded cell `<name>_tests` with points and no test code,
    every graded cell is scored by some hidden test, and every hidden test names a graded cell."""
    nb = notebooks.read(notebooks.source_notebook(asg))
    nbformat.validate(nb)
    graded = notebooks.graded_cells(nb)
    solutions = [notebooks.nbgrader_meta(c)["grade_id"] for c in nb.cells if notebooks.is_solution(c)]
    for cell in nb.cells:
        meta = notebooks.nbgrader_meta(cell)
        if notebooks.is_solution(cell):
            assert cell.source.count("### BEGIN SOLUTION") == cell.source.count("### END SOLUTION") == 1, meta
        if notebooks.is_graded_test(cell):
            assert meta["locked"] and meta["points"] > 0
            assert meta["grade_id"].endswith("_tests") and meta["grade_id"][:-6] in solutions
            code = [ln for ln in cell.source.splitlines() if ln.strip() and not ln.strip().startswith("#")]
            assert not code, f"graded cell {meta['grade_id']} must hold no code: the hidden suite grades it"
    suite = hidden.suite_path(asg).read_text()
    marked = set(re.findall(r'mark\.cell\("([^"]+)"\)', suite))
    assert marked == set(graded), f"hidden suite cells {sorted(marked)} != graded cells {sorted(graded)}"


def test_no_secret_in_exercises():
    secrets = secret_lines()
    assert len(secrets) > 20
    for path in (ROOT / "exercises").rglob("*"):
        if path.is_file():
            found = leaks(path.read_text(errors="replace"), secrets)
            assert not found, f"{path.relative_to(ROOT)} contains {found[:3]}"


def test_leak_search_catches_solution_code():
    """The search itself works: it finds the secrets in the source notebooks and suites."""
    secrets = secret_lines()
    for asg in ASSIGNMENTS:
        assert leaks(notebooks.source_notebook(asg).read_text(), secrets)
        assert leaks(hidden.suite_path(asg).read_text(), secrets)
