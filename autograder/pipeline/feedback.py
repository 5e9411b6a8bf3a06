"""The feedback pages: nbgrader's feedback template with our head (a Content-Security-Policy, MathJax from the
grading folder), and MathJax copied there once."""
from __future__ import annotations

import shutil
from pathlib import Path

from nbconvert.exporters import HTMLExporter
from nbgrader.preprocessors import GetGrades, NbGraderPreprocessor
from traitlets import Unicode

from autograder.pipeline.common import markdown_text
from autograder.verdict.record import GraderFault

TEMPLATES = Path(__file__).parent / "templates"


class FeedbackHTML(HTMLExporter):
    """The feedback pages' exporter: nbgrader's feedback template, with our head (templates/base/mathjax.html.j2:
    a Content-Security-Policy that runs no script but MathJax's, and MathJax from the grading folder)."""


class FeedbackGrades(GetGrades):
    """nbgrader's `GetGrades`, with each solution cell's comment as the feedback shows it: the grader's diagnosis (which
    quotes the learner's messages and names) as plain text, never markdown or HTML of the learner's, and an
    instructor's comment (markdown, as formgrader offers) beside it, not instead of it."""

    def _get_comment(self, cell, resources):
        c = self.gradebook.find_comment(cell.metadata["nbgrader"]["grade_id"], self.notebook_id, self.assignment_id,
                                        self.student_id)
        parts = []
        if c.manual_comment:
            parts.append(f"**Your instructor:** {c.manual_comment}")
        if c.auto_comment:
            parts.append(("**The grader:** " if parts else "") + markdown_text(c.auto_comment))
        cell.metadata.nbgrader["comment"] = "\n\n".join(parts) or None


class OfflineMathJax(NbGraderPreprocessor):
    """Put one copy of MathJax 3 and its configuration beside the feedback (feedback/mathjax/), which the pages load."""

    feedback_directory = Unicode("", help="The course's feedback folder.").tag(config=True)

    def preprocess(self, nb, resources):
        if not self.feedback_directory:
            return nb, resources
        target = Path(self.feedback_directory) / "mathjax"
        if not (target / "tex-chtml.js").exists():
            source = mathjax_source()
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / "tex-chtml.js", target / "tex-chtml.js")
            for sub in ("output/chtml", "input/tex/extensions"):
                shutil.copytree(source / sub, target / sub, dirs_exist_ok=True)
        config_js = TEMPLATES / "mathjax-config.js"
        if not (target / "config.js").exists() or (target / "config.js").read_bytes() != config_js.read_bytes():
            shutil.copy(config_js, target / "config.js")
        return nb, resources


def mathjax_source() -> Path:
    """MathJax 3 as shipped by the sphinx-mathjax-offline wheel (also the book's MathJax)."""
    import importlib.util

    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None:
        raise GraderFault("the feedback's MathJax comes from the sphinx-mathjax-offline package, which this Python "
                          "lacks (requirements.txt installs it)")
    assert spec.origin is not None                # a package with an __init__.py
    return Path(spec.origin).parent / "static" / "mathjax"
