"""The feedback pages: nbgrader's feedback template with our head (a Content-Security-Policy, MathJax written into
the page), the instructor's score and comment beside the grader's, and the book's links made to work from anywhere."""
from __future__ import annotations

import base64
import functools
import hashlib
import re
from pathlib import Path

from nbconvert.exporters import HTMLExporter
from nbconvert.preprocessors import Preprocessor
from nbgrader.api import MissingEntry
from nbgrader.preprocessors import GetGrades
from traitlets import Bool, Unicode

from autograder.notebooks import TESTS_SUFFIX
from autograder.pipeline.common import markdown_text
from autograder.verdict.record import GraderFault

TEMPLATES = Path(__file__).parent / "templates"


class FeedbackHTML(HTMLExporter):
    """The feedback pages' exporter: nbgrader's feedback template, with our head (templates/base/mathjax.html.j2).

    A page must open on its own: nbgrader's `release_feedback` hands a learner the .html file alone. So MathJax 3
    (its SVG output, which needs no font files) is written into the page, and the page's Content-Security-Policy
    runs no script but those two, named by their hashes: no other inline script, no event handler, no javascript:
    link, nothing fetched from another host."""

    def _create_environment(self):
        env = super()._create_environment()
        env.globals.update(mathjax_scripts())
        return env


@functools.cache
def mathjax_scripts() -> dict:
    """The feedback head's scripts (MathJax's configuration, MathJax) and the policy's hashes of them."""
    config = (TEMPLATES / "mathjax-config.js").read_text()
    js = (mathjax_source() / "tex-svg.js").read_text()
    if "</script" in js.lower():
        raise GraderFault("MathJax's code holds '</script': it cannot be written into a page")

    def sha(text: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"

    return {"feedback_mathjax_config": config, "feedback_mathjax_js": js,
            "feedback_script_hashes": f"{sha(config)} {sha(js)}"}


class BookLinks(Preprocessor):
    """The notebooks link the book relative to a clone of the course (`../../_build/html/book/...`), which is
    nowhere beside a feedback page: with `c.BookLinks.url` (where the book is published) those links point there,
    without it they become plain text that names the chapter."""

    enabled = Bool(True).tag(config=True)
    url = Unicode("", help="Where the course's book is published (its _build/html), e.g. https://example.org/course/"
                  ).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown" and LOCAL_BOOK in cell.source:
            if self.url:
                cell.source = cell.source.replace(LOCAL_BOOK, self.url.rstrip("/") + "/")
            else:
                cell.source = re.sub(r"\[([^\]]*)\]\(" + re.escape(LOCAL_BOOK) + r"[^)\s]*\)", r"*\1* (in the book)",
                                     cell.source)
        return cell, resources


LOCAL_BOOK = "../../_build/html/"


class FeedbackGrades(GetGrades):
    """nbgrader's `GetGrades`, with each solution cell's comment as the feedback shows it: the grader's diagnosis (which
    quotes the learner's messages and names) as plain text, never markdown or HTML of the learner's, and an
    instructor's comment (markdown, as formgrader offers) beside it, not instead of it."""

    def _grade(self, grade_id):
        try:
            return self.gradebook.find_grade(grade_id, self.notebook_id, self.assignment_id, self.student_id)
        except MissingEntry:
            return None

    def _get_comment(self, cell, resources):
        gid = cell.metadata["nbgrader"]["grade_id"]
        c = self.gradebook.find_comment(gid, self.notebook_id, self.assignment_id, self.student_id)
        parts = []
        graded = self._grade(gid + TESTS_SUFFIX)
        if graded is not None and graded.manual_score is not None:
            parts.append(f"**Your instructor gave this part {graded.score:g} / {graded.max_score:g} points** (the "
                         f"grader's automatic score: {graded.auto_score or 0:g}).")
        if c.manual_comment:
            parts.append(f"**Your instructor:** {c.manual_comment}")
        if c.auto_comment:
            parts.append(("**The grader:** " if parts else "") + markdown_text(c.auto_comment))
        cell.metadata.nbgrader["comment"] = "\n\n".join(parts) or None

    def _get_score(self, cell, resources):
        """nbgrader's (the score and points into the cell's metadata), and a graded cell's output written at
        autograde time made to agree with a score the instructor gave since (its first line and its value)."""
        gid = cell.metadata["nbgrader"]["grade_id"]
        graded = self.gradebook.find_grade(gid, self.notebook_id, self.assignment_id, self.student_id)
        cell.metadata.nbgrader["score"], cell.metadata.nbgrader["points"] = graded.score, graded.max_score
        if graded.manual_score is None:
            return
        for out in cell.get("outputs", []):
            if out.get("output_type") == "execute_result" and "text/plain" in out.get("data", {}):
                out["data"]["text/plain"] = repr(float(graded.score))
            elif out.get("output_type") == "stream" and out.get("text", "").startswith(f"{gid}: "):
                rest = out["text"].split("\n", 1)
                out["text"] = (f"{gid}: {graded.score:g} / {graded.max_score:g} points (given by your instructor; "
                               f"the grader's automatic score: {graded.auto_score or 0:g})\n"
                               + (rest[1] if len(rest) > 1 else ""))


def mathjax_source() -> Path:
    """MathJax 3 as shipped by the sphinx-mathjax-offline wheel (also the book's MathJax)."""
    import importlib.util

    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None:
        raise GraderFault("the feedback's MathJax comes from the sphinx-mathjax-offline package, which this Python "
                          "lacks (requirements.txt installs it)")
    assert spec.origin is not None                # a package with an __init__.py
    return Path(spec.origin).parent / "static" / "mathjax"
