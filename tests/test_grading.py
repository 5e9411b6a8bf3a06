"""Notebooks that nbgrader alone cannot grade, graded end to end with the real `nbgrader autograde`, and nbgrader's
commands on a fresh grading folder. The example class as `make` grades it is tested in test_instructor_guide.py."""
import copy
import os
import subprocess

import nbformat
import pytest
from helpers import ROOT, prepare

from autograder.authoring import release, variants
from autograder.classroom import grade

ASG = "positional_encoding"
pytestmark = pytest.mark.xdist_group("class")
POINTS = {"sinusoidal_encoding_tests": 4.0, "rope_tests": 4.0, "alibi_bias_tests": 3.0}


def _by_learner(rows):
    out = {}
    for r in rows:
        out.setdefault(r.learner, {})[r.cell] = r
    return out


# -- notebooks nbgrader alone cannot grade (a KeyError in DeduplicateIds or OverwriteCells) ----------------
def _copied_cell():
    """An honest learner who copied the solution cell of sinusoidal_encoding: a wrong first try above, the
    answer in the copy below it (in notebook order, the copy is what the notebook defines)."""
    nb = variants.submission(ASG)
    i, cell = next((i, c) for i, c in enumerate(nb.cells)
                   if c.metadata.get("nbgrader", {}).get("grade_id") == "sinusoidal_encoding")
    first = copy.deepcopy(cell)
    first.id = "copy-of-the-solution"
    first.source = ("def sinusoidal_encoding(seq_len, d_model, base=10000.0):\n"
                    "    return torch.zeros(seq_len, d_model)\n")
    nb.cells.insert(i, first)
    return nb


def _lost_grade_ids():
    """The solution cell of rope and the graded cell of alibi_bias without their grade_id."""
    nb = variants.submission(ASG)
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") in ("rope", "alibi_bias_tests"):
            del c.metadata["nbgrader"]["grade_id"]
    return nb


@pytest.fixture(scope="module")
def repaired(tmp_path_factory):
    d = tmp_path_factory.mktemp("repaired")
    prepare(d, [ASG])
    grade.submit(d, "copycat", ASG, _copied_cell())
    grade.submit(d, "nameless", ASG, _lost_grade_ids())
    r = grade.autograde(d, ASG, capture_output=True, text=True)
    return d, r, _by_learner(grade.scores(d, [ASG]))


@pytest.mark.parametrize("learner, note", [("copycat", "holds the cell sinusoidal_encoding more than once"),
                                           ("nameless", "lost its grading id")])
def test_a_repaired_notebook_keeps_its_score(repaired, learner, note):
    d, r, rows = repaired
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "KeyError" not in r.stdout + r.stderr
    assert {c: rows[learner][c].score for c in POINTS} == POINTS, {c: rows[learner][c].comment for c in POINTS}
    assert all(note in (rows[learner][c].comment or "") for c in POINTS), rows[learner]["rope_tests"].comment
    graded = nbformat.read(str(d / "autograded" / learner / ASG / f"{ASG}.ipynb"), as_version=4)
    assert any(note in c.source.replace("\\", "") for c in graded.cells if c.cell_type == "markdown")   # as text


# -- nbgrader's commands right after `make install` or `make clean` ----------------------------------------
def test_nbgrader_commands_work_on_a_fresh_grading_folder(tmp_path):
    """No grading folder yet: nbgrader_config.py makes it, so the gradebook can be created in it."""
    fresh = tmp_path / "not" / "made" / "yet"
    env = {k: v for k, v in os.environ.items() if k != "GRADEBOOK_URL"}
    env.update(GRADING_DIR=str(fresh), PATH=release.tools_path())
    nbgrader = str(release.BIN / "nbgrader")
    out = {}
    for args in (["generate_assignment", ASG, "--force", f"--CourseDirectory.release_directory={tmp_path / 'release'}"],
                 ["db", "student", "add", "ada"], ["db", "assignment", "list"], ["db", "student", "list"]):
        r = subprocess.run([nbgrader, *args], cwd=ROOT, env=env, capture_output=True, text=True)
        out[" ".join(args[:3])] = text = r.stdout + r.stderr
        assert r.returncode == 0 and "ERROR" not in text, (args, text[-2000:])
    assert ASG in out["db assignment list"] and "ada" in out["db student list"]
    assert (fresh / "gradebook.db").is_file()
    assert (tmp_path / "release" / ASG / f"{ASG}.ipynb").is_file()
