"""The feedback pages: nbgrader's feedback template with our head (a Content-Security-Policy that runs no script, a
small stylesheet), the course's math typeset ahead into SVG, the instructor's score and comment on the learner's
answer (the grader's diagnosis is said once, in the graded cell's output), the `check()` cell left out, and the
book's links made to work from anywhere."""
from __future__ import annotations

import html
import json
import re
import secrets
import shutil
import subprocess
from pathlib import Path

from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import Preprocessor
from nbgrader.api import MissingEntry
from nbgrader.preprocessors import GetGrades
from traitlets import Bool, Unicode

from autograder import ROOT
from autograder.notebooks import CHECK_CELL, TESTS_SUFFIX
from autograder.pipeline.common import stored
from autograder.pipeline.score import verdict_outputs
from autograder.verdict import record
from autograder.verdict.record import GraderFault

TEMPLATES = Path(__file__).parent / "templates"
TYPESET = Path(__file__).parent / "typeset.js"
MATHJAX = ROOT / "node_modules" / "mathjax"
TYPESET_TIMEOUT = 60


class FeedbackHTML(HTMLExporter):
    """The feedback pages' exporter: nbgrader's feedback template with our head (templates/course_feedback).

    A page must open on its own: nbgrader's `release_feedback` hands a learner the .html file alone. So its math is
    typeset when the page is written (MathJax's SVG output, `typeset.js` run once per page by node), and the page
    runs no script at all: its Content-Security-Policy allows none, so no inline script, event handler or
    javascript: link of anyone's runs, and nothing is fetched from another host."""

    @pass_context
    def markdown2html(self, context, source):
        """nbconvert's markdown filter, with each formula left as a mark that `from_notebook_node` typesets."""
        cell = context.get("cell", {})
        renderer = MathMarks(self._formulas, escape=False, attachments=cell.get("attachments", {}),
                             embed_images=self.embed_images,
                             path=context.get("resources", {}).get("metadata", {}).get("path", ""),
                             anchor_link_text=self.anchor_link_text, exclude_anchor_links=self.exclude_anchor_links,
                             **self.lexer_options)
        return MarkdownWithMath(renderer=renderer).render(source)

    def from_notebook_node(self, nb, resources=None, **kw):
        self._formulas = Formulas()
        page, resources = super().from_notebook_node(nb, resources, **kw)
        return self._formulas.typeset(page, self.log), resources


class Formulas:
    """The formulas of one page: each gets a mark no one else can write (a random nonce), then all are typeset by
    one run of node and put in place of their marks in the page's text, with the glyphs they share once, at the top of
    the body; a mark inside a tag (a heading's anchor, made from its text) becomes the formula's TeX."""

    def __init__(self):
        self.nonce = secrets.token_hex(16)
        self.items: list[tuple[str, bool]] = []

    def mark(self, tex: str, display: bool) -> str:
        self.items.append((tex, display))
        return f"mathjax-{self.nonce}-{len(self.items) - 1}-"

    def typeset(self, page: str, log) -> str:
        if not self.items:
            return page
        tex = [("$$%s$$" if display else "$%s$") % source for source, display in self.items]
        try:
            svgs, cache = typeset(self.items)
        except TypesetError as e:              # the page's TeX (a learner's, perhaps): the math is shown as its TeX
            log.warning("the math of this page was not typeset (%s): it is shown as TeX", e)
            svgs, cache = [html.escape(t) for t in tex], ""
        mark = re.compile(f"mathjax-{self.nonce}-(\\d+)-")
        parts = TAG.split(page)                # text, tag, text, ...: no tag holds a '>' of its own (escaped)
        for i, part in enumerate(parts):
            found = svgs if i % 2 == 0 else [html.escape(t, quote=True) for t in tex]
            parts[i] = mark.sub(lambda m, found=found: found[int(m.group(1))], part)
        page = "".join(parts)
        if cache:
            defs = f'<svg id="MJX-SVG-global-cache" style="display: none">{cache}</svg>'
            page = page.replace("<body>", f"<body>\n{defs}", 1)
        return page


TAG = re.compile(r"(<[^>]*>)")


class MathMarks(IPythonRenderer):
    """nbconvert's markdown renderer, with a mark for each formula in place of its TeX."""

    def __init__(self, formulas: Formulas, **kw):
        super().__init__(**kw)
        self.formulas = formulas

    def block_math(self, body: str) -> str:
        return self.formulas.mark(body, True)

    def inline_math(self, body: str) -> str:
        return self.formulas.mark(body, False)

    def latex_environment(self, name: str, body: str) -> str:
        return self.formulas.mark(f"\\begin{{{name}}}{body}\\end{{{name}}}", True)


class TypesetError(Exception):
    """MathJax could not typeset a page's formulas."""


def typeset(items: list[tuple[str, bool]]) -> tuple[list[str], str]:
    """([an <mjx-container> of SVG per (tex, display)], the <defs> of the glyphs they use), from MathJax in node."""
    node = shutil.which("node")
    if node is None or not (MATHJAX / "package.json").exists():
        raise GraderFault("the feedback's math is typeset by MathJax in node (npm's mathjax, from package-lock.json), "
                          "which this machine lacks: `make` installs both")
    try:
        r = subprocess.run([node, str(TYPESET)], input=json.dumps(items), capture_output=True, text=True,
                           timeout=TYPESET_TIMEOUT, cwd=ROOT)
    except subprocess.TimeoutExpired:
        raise TypesetError(f"MathJax took more than {TYPESET_TIMEOUT} s") from None
    if r.returncode != 0:
        raise TypesetError(f"MathJax failed: {r.stderr.strip()[-300:]}")
    out = json.loads(r.stdout)
    if len(out["svgs"]) != len(items):
        raise TypesetError("MathJax returned another number of formulas")
    return out["svgs"], out["cache"]


class OmitCheckCell(Preprocessor):
    """The release's `check()` cell (the check service's client, the same for every learner) is left out of the
    feedback: it is the course's code, not the learner's answer."""

    enabled = Bool(True)

    def preprocess(self, nb, resources):
        nb.cells = [c for c in nb.cells if c.get("id") != CHECK_CELL]
        return nb, resources


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
    """nbgrader's `GetGrades`, with each solution cell's comment as the feedback shows it (the instructor's score and
    comment, in markdown as formgrader offers) and each graded cell's output rendered again from the grading's record
    when the instructor gave it a score."""

    def preprocess(self, nb, resources):
        self.grading = record.Grading.from_dict(record.load(stored(self, resources)) or {})
        return super().preprocess(nb, resources)

    def _grade(self, grade_id):
        try:
            return self.gradebook.find_grade(grade_id, self.notebook_id, self.assignment_id, self.student_id)
        except MissingEntry:
            return None

    def _get_comment(self, cell, resources):
        """The comment under the learner's answer: the instructor's score and comment, when there are any. The grader's
        diagnosis is not repeated there: the graded cell's output below says each failure once, with its cost."""
        gid = cell.metadata["nbgrader"]["grade_id"]
        c = self.gradebook.find_comment(gid, self.notebook_id, self.assignment_id, self.student_id)
        parts = []
        graded = self._grade(gid + TESTS_SUFFIX)
        if graded is not None and graded.manual_score is not None:
            parts.append(f"**Your instructor gave this part {graded.score:g} / {graded.max_score:g} points** (the "
                         f"grader's automatic score: {graded.auto_score or 0:g}).")
        if c.manual_comment:
            parts.append(f"**Your instructor:** {c.manual_comment}")
        cell.metadata.nbgrader["comment"] = "\n\n".join(parts) or None

    def _get_score(self, cell, resources):
        """nbgrader's (the score and points into the cell's metadata), and a graded cell whose score the instructor
        gave since autograde: its verdict and score rendered again from the record, saying the instructor's score (the
        grader wrote the cell's outputs whole; what it drew of the learner's module stays)."""
        gid = cell.metadata["nbgrader"]["grade_id"]
        graded = self.gradebook.find_grade(gid, self.notebook_id, self.assignment_id, self.student_id)
        cell.metadata.nbgrader["score"], cell.metadata.nbgrader["points"] = graded.score, graded.max_score
        v = self.grading.verdicts.get(gid)
        if graded.manual_score is not None and v is not None:
            drawn = [out for out in cell.get("outputs", []) if out.get("output_type") == "display_data"]
            cell.outputs = verdict_outputs(v, float(graded.score)) + drawn
