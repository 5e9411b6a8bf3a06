"""The autograde preprocessors that make `nbgrader autograde` trustworthy.

nbgrader's own pipeline runs the hidden tests inside the learner's kernel and reads a cell's
score from its output.  Here, registered in `nbgrader_config.py` through `configure(c)`:

- `SandboxedExecute` replaces nbgrader's `Execute`: the notebook runs in the sandbox (kernel and
  client both), only to record outputs for the feedback;
- `HiddenSuites` then scores every graded cell with the hidden suite (trusted process, learner
  code in a sandboxed worker) and replaces the cell's outputs with the verdict: the diagnosis as
  text and the score as a plain float in [0, points], which nbgrader's `SaveAutoGrades` records;
- `SaveDiagnoses` writes each verdict as the gradebook comment of the learner's solution cell.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearOutput, DeduplicateIds, GetGrades,
                                    IgnorePattern,
                                    LimitOutput, NbGraderPreprocessor, OverwriteCells, OverwriteKernelspec,
                                    SaveAutoGrades)
from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from traitlets import Integer, Unicode

from nbconvert.exporters import NotebookExporter

from . import hidden, submission
from .notebooks import TESTS_SUFFIX, is_graded_test, nbgrader_meta
from .sandbox import Limits, Sandbox, missing_protections

VERDICTS = "grader_verdicts"


def _note(text: str):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


class SubmissionReader(NotebookExporter):
    """nbgrader's exporter, reading submissions defensively (see `autograder.submission`)."""

    def from_file(self, file_stream, resources=None, **kw):
        ids = (resources or {}).get("nbgrader", {})
        converter = self.parent
        if not ids.get("assignment") or not hasattr(converter, "coursedir"):
            return super().from_file(file_stream, resources=resources, **kw)
        release_path = Path(converter.coursedir.format_path(converter.coursedir.release_directory, ".",
                                                            ids["assignment"])) / f"{ids['notebook']}.ipynb"
        release = nbformat.read(str(release_path), as_version=4)
        try:
            raw = file_stream.read(submission.MAX_BYTES + 1).encode("utf-8")
        except UnicodeDecodeError:
            raw = b"\xff not UTF-8 text"
        nb, problems = submission.read(raw, release)
        for problem in problems:
            self.log.warning("%s/%s: %s", ids.get("student"), ids["assignment"], problem)
        return self.from_notebook_node(nb, resources=resources, **kw)


class SandboxedExecute(NbGraderPreprocessor):
    """Execute the notebook inside the sandbox and keep only the outputs it produced."""

    cell_timeout = Integer(60, help="Seconds one cell may run.").tag(config=True)
    total_timeout = Integer(600, help="Seconds the whole notebook may run.").tag(config=True)
    max_output_chars = Integer(20_000, help="Characters of text output kept per cell.").tag(config=True)

    def preprocess(self, nb, resources):
        missing = missing_protections()
        if missing:
            self.log.warning("sandbox: this machine lacks %s", "; ".join(missing))
        with Sandbox(Limits(wall_s=self.total_timeout)) as sb:
            src, dst = sb.home / "submission.ipynb", sb.home / "executed.ipynb"
            nbformat.write(nb, str(src))
            result = sb.run([sb.inside(sb.code / "execute.py"), sb.inside(src), sb.inside(dst),
                             str(self.cell_timeout), str(self.max_output_chars)])
            executed = self._read(dst)
        problem = None
        if result.timed_out:
            problem = f"your notebook did not finish running within {self.total_timeout} s"
        elif executed is None:
            problem = "your notebook could not be run to the end (it ended the Python process or used too much memory)"
        if executed is not None:
            for cell, run in zip(nb.cells, executed.cells):
                if cell.cell_type == "code" and run.get("cell_type") == "code" and run.get("source") == cell.source:
                    cell.outputs = run.get("outputs", [])
        if problem:
            self.log.warning("%s", problem)
            first_code = next((c for c in nb.cells if c.cell_type == "code"), None)
            if first_code is not None:
                first_code.outputs.insert(0, _note(f"[grader] {problem}; the outputs below are those recorded before.\n"))
        return nb, resources

    def _read(self, path):
        if not path.exists() or path.stat().st_size > 256 << 20:
            return None
        try:
            nb = nbformat.reads(path.read_text(errors="replace"), as_version=4)
            nbformat.validate(nb)
            return nb
        except Exception:  # noqa: BLE001 - whatever the sandbox wrote, it is only untrusted data
            return None


class HiddenSuites(NbGraderPreprocessor):
    """Score each graded cell with the hidden suite; the verdict replaces the cell's outputs."""

    def preprocess(self, nb, resources):
        assignment = resources["nbgrader"]["assignment"]
        if not hidden.suite_path(assignment).exists():
            raise RuntimeError(f"no hidden suite for assignment {assignment!r} ({hidden.suite_path(assignment).name})")
        verdicts = hidden.grade(nb, assignment)
        for cell in nb.cells:
            if not is_graded_test(cell):
                continue
            v = verdicts[nbgrader_meta(cell)["grade_id"]]
            cell.outputs = [_note(v.text() + "\n"),
                            nbformat.v4.new_output("execute_result", data={"text/plain": repr(float(v.score))},
                                                   execution_count=None)]
        resources[VERDICTS] = {gid: {"score": v.score, "points": v.points, "failed": v.failed}
                               for gid, v in verdicts.items()}
        self.log.info("hidden suite %s: %s", assignment,
                      ", ".join(f"{gid} {v.score:g}/{v.points:g}" for gid, v in verdicts.items()))
        return nb, resources


class SaveDiagnoses(NbGraderPreprocessor):
    """Write each graded cell's diagnoses as the gradebook comment of the solution cell it scores."""

    def preprocess(self, nb, resources):
        verdicts = resources.get(VERDICTS, {})
        ids = resources["nbgrader"]
        problems = "; ".join(nb.metadata.get(submission.PROBLEMS, []))
        solution_ids = {nbgrader_meta(c).get("grade_id") for c in nb.cells if nbgrader_meta(c).get("solution")}
        with Gradebook(ids["db_url"]) as gb:
            for gid, v in verdicts.items():
                name = gid[: -len(TESTS_SUFFIX)] if gid.endswith(TESTS_SUFFIX) else gid
                if name not in solution_ids:
                    continue
                comment = gb.find_comment(name, ids["notebook"], ids["assignment"], ids["student"])
                if comment.auto_comment == "No response." and not problems:
                    continue
                text = ("; ".join(v["failed"]) if v["failed"]
                        else f"all hidden tests passed ({v['score']:g}/{v['points']:g})")
                comment.auto_comment = f"{problems}. {text}" if problems else text
            gb.db.commit()
        return nb, resources


class OfflineMathJax(NbGraderPreprocessor):
    """Put one copy of MathJax 3 beside the feedback (feedback/mathjax/), which the pages load."""

    feedback_directory = Unicode("", help="The course's feedback folder.").tag(config=True)

    def preprocess(self, nb, resources):
        target = Path(self.feedback_directory) / "mathjax"
        if self.feedback_directory and not (target / "tex-chtml.js").exists():
            source = mathjax_source()
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / "tex-chtml.js", target / "tex-chtml.js")
            for sub in ("output/chtml", "input/tex/extensions"):
                shutil.copytree(source / sub, target / sub, dirs_exist_ok=True)
        return nb, resources


def mathjax_source() -> Path:
    """MathJax 3 as shipped by the sphinx-mathjax-offline wheel (also the book's MathJax)."""
    import importlib.util

    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    return Path(spec.origin).parent / "static" / "mathjax"


def configure(c, feedback_directory: str = ""):
    """Register the trusted grading pipeline in an nbgrader config object."""
    c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells,
                                          CheckCellMetadata]
    c.Autograde.autograde_preprocessors = [SandboxedExecute, IgnorePattern, HiddenSuites, ClearMetadataPreprocessor,
                                           LimitOutput, SaveAutoGrades, SaveDiagnoses, AssignLatePenalties,
                                           CheckCellMetadata]
    c.OverwriteCells.add_missing_cells = True
    c.Autograde.exporter_class = SubmissionReader
    c.ClearSolutions.enforce_metadata = True
    # A graded cell's score is the trusted verdict; nothing the learner prints may change it.
    c.LimitOutput.max_lines = 2000
    c.LimitOutput.max_traceback = 100
    # Feedback: MathJax from the grading folder (templates/base/mathjax.html.j2), no CDN.
    import nbgrader

    nbgrader_templates = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"
    c.HTMLExporter.extra_template_basedirs = [str(Path(__file__).parent / "templates"), str(nbgrader_templates)]
    c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, OfflineMathJax]
    c.OfflineMathJax.feedback_directory = feedback_directory

