"""Generate the learner release `exercises/` from the one source `solutions/` with nbgrader.

`python -m autograder.authoring.release ASSIGNMENT...` runs `nbgrader generate_assignment` for each
assignment, into `exercises/` by default (the committed release) or into `--into DIR`.  The
gradebook it records the assignment in is the grading one (GRADING_DIR), or a throwaway one.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder import ROOT

BIN = Path(sys.executable).parent      # this interpreter's folder: nbgrader, and the alembic it runs


def tools_path() -> str:
    """PATH with this interpreter's folder first: nbgrader makes a new gradebook by running `alembic`, which must
    be the project's (an unactivated venv's folder is not on PATH)."""
    return str(BIN) + os.pathsep + os.environ.get("PATH", "")


def nbgrader(*args: str, grading_dir: Path | None = None, check: bool = True, env_extra: dict | None = None,
             **kw) -> subprocess.CompletedProcess:
    """Run an nbgrader command in the course directory (the repository root)."""
    env = {**os.environ, **(env_extra or {}), "PATH": tools_path()}
    if grading_dir is not None:
        env["GRADING_DIR"] = str(grading_dir)
    cmd = [str(BIN / "nbgrader"), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, check=check, **kw)


def generate(assignments: list[str], into: Path | None = None, grading_dir: Path | None = None,
             url: str | None = None):
    """Release `assignments` (into `into`, else exercises/), recording them in the gradebook at `url`, else the one
    nbgrader_config.py picks for `grading_dir`."""
    with tempfile.TemporaryDirectory(prefix="release-db-") as tmp:
        grading_dir = Path(grading_dir or tmp)
        grading_dir.mkdir(parents=True, exist_ok=True)
        for asg in assignments:
            args = ["generate_assignment", asg, "--force", "--log-level=WARN"]
            if into is not None:
                args.append(f"--CourseDirectory.release_directory={into}")
            nbgrader(*args, grading_dir=grading_dir, env_extra={"GRADEBOOK_URL": url} if url else None)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("assignments", nargs="+")
    p.add_argument("--into", type=Path, help="release folder (default: exercises/)")
    a = p.parse_args()
    generate(a.assignments, a.into)


if __name__ == "__main__":
    main()
