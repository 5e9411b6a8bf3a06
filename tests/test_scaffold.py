"""A new exercise added as a maintainer would add one: the scaffold writes its skeletons into a copy of the course,
`make exercises`' two steps release it, and the course's own tests of an exercise pass for it (its conventions, its
release, its reference and its known answers graded by the real suite)."""
import os
import shutil
import subprocess
import sys

import pytest
from helpers import ROOT

pytestmark = pytest.mark.xdist_group("scaffold")
SKIP = shutil.ignore_patterns(".git", ".venv*", "_build", "node_modules", "__pycache__", ".hypothesis", ".pytest_cache",
                              "*.egg-info", ".whl")


def test_a_new_exercise_from_the_scaffold_passes_the_course_s_tests(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(ROOT, course, ignore=SKIP)
    env = {**os.environ, "PYTHONPATH": str(course)}      # the copy's autograder, not the installed one

    def run(*args):
        r = subprocess.run([sys.executable, *args], cwd=course, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"{' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return r.stdout

    name = "demo"
    wrote = run("-m", "autograder.authoring.new", name, "Demo chapter")
    assert sorted(line.removeprefix("wrote ") for line in wrote.splitlines() if line.startswith("wrote ")) == [
        "_toc.yml", f"autograder/verdict/suites/test_{name}.py", f"book/{name}.md", f"examples/variants/{name}.py",
        f"solutions/{name}/{name}.ipynb"]
    run("-m", "autograder.authoring.criteria", "demo")
    run("-m", "autograder.authoring.release", "demo")
    assert (course / "exercises" / "demo" / "demo.ipynb").exists()
    # The course lists it wherever it goes over every exercise: its files, and nothing else, made it one.
    listed = run("-m", "autograder.exercises").split()
    assert "demo" in listed, listed
    assert run("-c", "from autograder import exercises; print(exercises.get('demo').missing())").strip() == "[]"
    # Every test of the course that checks an exercise, as `make test-exercise` runs them (with this course's
    # environment: the copy has none of its own).
    r = subprocess.run(["make", "-s", "test-exercise", "ASG=demo", f"VENV={ROOT / '.venv'}"], cwd=course, env=env,
                       capture_output=True, text=True, timeout=1800)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "failed" not in out and " passed" in out, out[-3000:]
    with pytest.raises(AssertionError, match="exists already"):
        run("-m", "autograder.authoring.new", "demo")
