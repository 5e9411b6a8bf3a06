"""The feedback pages: nbgrader's feedback template with our head (a Content-Security-Policy that runs no script, a
small stylesheet), the math typeset ahead into SVG (a learner's within limits: MAX_FORMULAS ...), the instructor's
score and comment on the learner's answer (the grader's diagnosis is said once, in the graded cell's output), the
`check()` cell left out, and the book's links made to work from anywhere. Each part is named in the page's contents,
long lines wrap in their box (formgrader's pages too: PageStyles), and no markup is written for what is drawn plain."""
from __future__ import annotations

import html
import json
import re
import secrets
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.highlight import Highlight2HTML, _pygments_highlight
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath, MathBlockParser, MathInlineParser
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor, Preprocessor
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import GetGrades
from pygments.formatters import HtmlFormatter
from traitlets import Bool, Unicode

from autograder import ROOT
from autograder.notebooks import CHECK_CELL, TESTS_SUFFIX, nbgrader_meta
from autograder.pipeline.common import stored
from autograder.pipeline.late import LatePenalties
from autograder.pipeline.score import verdict_outputs
from autograder.verdict import record
from autograder.verdict.record import GraderFault

TEMPLATES = Path(__file__).parent / "templates"
TYPESET = Path(__file__).parent / "typeset.js"
MATHJAX = ROOT / "node_modules" / "mathjax"
TYPESET_TIMEOUT = 60              # seconds of one page's run of node, all its formulas

# A learner's formulas (all but those of the course's locked markdown cells: a learner's markdown, the markdown their
# code displays, a comment) on one page. The course's own pages: at most 49 formulas, of at most 218 characters, drawn
# in at most 6 KiB each and 46 KiB in all, typeset in about 1.5 s with node's start.
MAX_FORMULAS = 256                # typeset per page; the rest are shown as their TeX
MAX_TEX = 2_000                   # characters of one formula's TeX
MAX_FORMULA_SVG = 128 << 10       # bytes of one formula's SVG
MAX_PAGE_SVG = 2 << 20            # bytes of all the page's SVG (the course's formulas first), the glyphs' cache aside
TYPESET_BUDGET = 20               # seconds of one page's run that typeset a learner's formulas, after the course's
# What defines or redefines a macro (MathJax's newcommand and ams packages, and TeX's): one formula's macro would
# stay for the page's next ones, the course's included, and each of its uses can expand into many glyphs (300 formulas
# of nested \def made a 27 MB page). A learner's formula that names one is shown as its TeX.
DEFINES = {"def", "gdef", "edef", "xdef", "let", "futurelet", "global", "newcommand", "renewcommand",
           "providecommand", "newenvironment", "renewenvironment", "DeclareMathOperator"}
CONTROL = re.compile(r"\\([A-Za-z]+|.)", re.S)   # a control sequence, as TeX reads them: `\\def` is `\\`, then d e f
UNTYPESET = {
    "count": f"past the first {MAX_FORMULAS} of the page",
    "tex": f"over {MAX_TEX:,} characters of TeX",
    "defines": "defining a macro (" + ", ".join(f"\\{name}" for name in ("def", "newcommand", "let")) + ", ...)",
    "formula": f"drawn in over {MAX_FORMULA_SVG >> 10} KiB",
    "page": f"past the {MAX_PAGE_SVG >> 20} MiB that a page's formulas may be drawn in",
    "time": f"past the {TYPESET_BUDGET} s that a page's formulas may take",
    "error": "that MathJax could not typeset",
}


class FeedbackHTML(HTMLExporter):
    """The feedback pages' exporter: nbgrader's feedback template with our head (templates/course_feedback).

    A page must open on its own: nbgrader's `release_feedback` hands a learner the .html file alone. So its math is
    typeset when the page is written (MathJax's SVG output, `typeset.js` run once per page by node), and the page
    runs no script at all: its Content-Security-Policy allows none, so no inline script, event handler or
    javascript: link of anyone's runs, and nothing is fetched from another host."""

    @pass_context
    def markdown2html(self, context, source):
        """nbconvert's markdown filter, with each formula left as a mark that `from_notebook_node` typesets, a learner's
        (all but a locked markdown cell's: the course's, restored from the release) within the limits above."""
        cell = context.get("cell", {})
        course = cell.get("cell_type") == "markdown" and bool(nbgrader_meta(cell).get("locked"))
        renderer = MathMarks(self._formulas, not course, escape=False, attachments=cell.get("attachments", {}),
                             embed_images=self.embed_images,
                             path=context.get("resources", {}).get("metadata", {}).get("path", ""),
                             anchor_link_text=self.anchor_link_text, exclude_anchor_links=self.exclude_anchor_links,
                             **self.lexer_options)
        return MarkdownWithMath(renderer=renderer, block=MathBlock(), inline=MathInline(hard_wrap=False)).render(source)

    def from_notebook_node(self, nb, resources=None, **kw):
        self._formulas = Formulas()
        info = nb.metadata.get("language_info", {})
        self.filters = {**self.filters, "highlight_code": LeanHighlight(
            pygments_lexer=info.get("pygments_lexer", info.get("name")), parent=self)}
        page, resources = super().from_notebook_node(nb, resources, **kw)
        return self._formulas.typeset(used_styles(page), self.log), resources


class LeanFormatter(HtmlFormatter):
    """pygments' HTML, without a <span> around a token its style draws as plain text (names and punctuation: half
    the markup of a page of code, 57 KB of the attention exercise's 224 KB)."""

    def _get_css_classes(self, ttype):
        s = self.style.style_for_token(ttype)
        drawn = s["color"] or s["bgcolor"] or s["border"] or s["bold"] or s["italic"] or s["underline"]
        return super()._get_css_classes(ttype) if drawn else ""


class LeanHighlight(Highlight2HTML):
    """nbconvert's highlighting of code, with `LeanFormatter`."""

    def __call__(self, source, language=None, metadata=None):
        language = language or self.pygments_lexer
        formatter = LeanFormatter(cssclass=html.escape(f" highlight hl-{language}"), **self.extra_formatter_options)
        return _pygments_highlight(source or " ", formatter, language, metadata)


STYLE = re.compile(r"<style>.*?</style>", re.S)
PYGMENTS_RULE = re.compile(r"^(?:\.highlight \.(\w+) \{.*|(?:td|span)\.linenos.*)\n", re.M)


def used_styles(page: str) -> str:
    """The page with pygments' style rules only for the token classes it uses (no line numbers: none are drawn)."""
    used = set(re.findall(r'<span class="(\w+)">', page))
    return STYLE.sub(lambda style: PYGMENTS_RULE.sub(lambda m: m.group(0) if m.group(1) in used else "",
                                                     style.group(0)), page)


class Formulas:
    """The formulas of one page: each gets a mark no one else can write (a random nonce), then all are typeset by
    one run of node and put in place of their marks in the page's text, with the glyphs they share once, at the top of
    the body; a mark inside a tag (a heading's anchor, made from its text) becomes the formula's TeX. A learner's
    formula past the limits above is shown as its TeX, and one note at the top of the page says how many and why."""

    def __init__(self):
        self.nonce = secrets.token_hex(16)
        self.items: list[tuple[str, bool, bool]] = []

    def mark(self, tex: str, display: bool, learner: bool = True) -> str:
        self.items.append((tex, display, learner))
        return f"mathjax-{self.nonce}-{len(self.items) - 1}-"

    def typeset(self, page: str, log) -> str:
        if not self.items:
            return page
        tex = [("$$%s$$" if display else "$%s$") % source for source, display, _ in self.items]
        try:
            done = mathjax(self.items)
        except TypesetError as e:              # the page's TeX (a learner's, perhaps): the math is shown as its TeX
            log.warning("the math of this page was not typeset (%s): it is shown as TeX", e)
            done = Typeset([None] * len(tex), [None] * len(tex), "")
        svgs = [svg if svg is not None else html.escape(t) for svg, t in zip(done.svgs, tex)]
        mark = re.compile(f"mathjax-{self.nonce}-(\\d+)-")
        parts = TAG.split(page)                # text, tag, text, ...: no tag holds a '>' of its own (escaped)
        quoted = [html.escape(t, quote=True) for t in tex]      # once, not once per tag: n formulas, n tags
        for i, part in enumerate(parts):
            found = svgs if i % 2 == 0 else quoted
            parts[i] = mark.sub(lambda m, found=found: found[int(m.group(1))], part)
        page = "".join(parts)
        top = ""
        if done.cache:
            top += f'\n<svg id="MJX-SVG-global-cache" style="display: none">{done.cache}</svg>'
        why = Counter(reason for reason in done.why if reason)
        if why:
            reasons = html.escape("; ".join(f"{n} {UNTYPESET[reason]}" for reason, n in why.items()))
            top += (f'\n<p class="untypeset"><strong>{sum(why.values())} of your formulas are shown as their TeX, not '
                    f'typeset:</strong> {reasons}.</p>')
        return page.replace("<body>", f"<body>{top}", 1) if top else page


TAG = re.compile(r"(<[^>]*>)")


class MathMarks(IPythonRenderer):
    """nbconvert's markdown renderer, with a mark for each formula in place of its TeX (`learner`: the markdown is not
    the course's own)."""

    def __init__(self, formulas: Formulas, learner: bool = True, **kw):
        super().__init__(**kw)
        self.formulas = formulas
        self.learner = learner

    def block_math(self, body: str) -> str:
        return self.formulas.mark(body, True, self.learner)

    def inline_math(self, body: str) -> str:
        return self.formulas.mark(body, False, self.learner)

    def latex_environment(self, name: str, body: str) -> str:
        return self.formulas.mark(f"\\begin{{{name}}}{body}\\end{{{name}}}", True, self.learner)


def bounded(pattern: str) -> str:
    """A pattern of nbconvert's math, its formula at most MAX_TEX characters: `.*?` that finds no end scans the rest of
    the text, at each opening delimiter (8,000 `\\begin{x}`: 2 s, 32,000: 34 s)."""
    return pattern.replace(".*?", f".{{0,{MAX_TEX}}}?").replace(".+?", f".{{1,{MAX_TEX}}}?")


class MathBlock(MathBlockParser):
    """nbconvert's block parser of markdown with math, its formulas bounded."""

    SPECIFICATION = {**MathBlockParser.SPECIFICATION, "multiline_math": bounded(MathBlockParser.MULTILINE_MATH)}


class MathInline(MathInlineParser):
    """nbconvert's inline parser of markdown with math, its formulas bounded (longer, they are read as text)."""

    SPECIFICATION = {**MathInlineParser.SPECIFICATION, **{
        rule: bounded(MathInlineParser.SPECIFICATION[rule]) for rule in
        ("block_math_tex", "block_math_latex", "inline_math_tex", "inline_math_latex", "latex_environment")}}


class TypesetError(Exception):
    """MathJax could not typeset a page's formulas."""


@dataclass
class Typeset:
    svgs: list[str | None]     # an <mjx-container> of SVG per formula, None where it was not typeset
    why: list[str | None]      # why not (a key of UNTYPESET), for a learner's formula
    cache: str                 # the <defs> of the glyphs they use


def typeset(items: list[tuple]) -> tuple[list[str | None], str]:
    """([an <mjx-container> of SVG per (tex, display[, learner])], the <defs> of the glyphs they use), from MathJax in
    node; a learner's formula past the limits gets None."""
    done = mathjax(items)
    return done.svgs, done.cache


def mathjax(items: list[tuple]) -> Typeset:
    """Each (tex, display[, learner]) typeset by MathJax in node (typeset.js), a learner's within the limits above."""
    items = [(tex, display, bool(learner and learner[0])) for tex, display, *learner in items]
    why: list[str | None] = [None] * len(items)
    mine = [i for i, item in enumerate(items) if item[2]]
    for n, i in enumerate(mine):
        why[i] = refused(items[i][0], n)
    sent = [i for i, reason in enumerate(why) if reason is None]
    svgs: list[str | None] = [None] * len(items)
    if not sent:
        return Typeset(svgs, why, "")
    node = shutil.which("node")
    if node is None or not (MATHJAX / "package.json").exists():
        raise GraderFault("the feedback's math is typeset by MathJax in node (npm's mathjax, from package-lock.json), "
                          "which this machine lacks: `make install` installs both")
    request = {"items": [items[i] for i in sent],
               "limits": {"formula": MAX_FORMULA_SVG, "page": MAX_PAGE_SVG, "seconds": TYPESET_BUDGET}}
    try:
        r = subprocess.run([node, str(TYPESET)], input=json.dumps(request), capture_output=True, text=True,
                           timeout=TYPESET_TIMEOUT, cwd=ROOT)
    except subprocess.TimeoutExpired:
        raise TypesetError(f"MathJax took more than {TYPESET_TIMEOUT} s") from None
    if r.returncode != 0:
        raise TypesetError(f"MathJax failed: {r.stderr.strip()[-300:]}")
    out = json.loads(r.stdout)
    if len(out["svgs"]) != len(sent) or len(out["why"]) != len(sent):
        raise TypesetError("MathJax returned another number of formulas")
    for i, svg, reason in zip(sent, out["svgs"], out["why"]):
        svgs[i], why[i] = lean_svg(svg) if svg is not None else None, reason
    return Typeset(svgs, why, lean_svg(out["cache"]))


GROUP = re.compile(r"(<g(?: [^>]*)?>|</g>)")


def lean_svg(svg: str) -> str:
    """MathJax's SVG without what a page drawing it inline does not use: the namespaces (HTML's parser gives them),
    `focusable`, xlink's href (SVG 2's instead), groups without attributes (their content in their place) and the
    end tags of empty elements: the same drawing, in about a third fewer bytes."""
    svg = re.sub(r' xmlns(?::xlink)?="[^"]*"| focusable="false"', "", svg).replace(" xlink:href=", " href=")
    svg = re.sub(r"<(use|path|rect)\b([^>]*)></\1>", r"<\1\2/>", svg)
    kept, opened = [], []
    for part in GROUP.split(svg):
        if part == "<g>" or part.startswith("<g "):
            opened.append(part != "<g>")
            if part == "<g>":
                continue
        elif part == "</g>" and not opened.pop():
            continue
        kept.append(part)
    return "".join(kept)


def refused(tex: str, before: int) -> str | None:
    """Why a learner's formula, after `before` others of theirs on the page, is not sent to MathJax, if it is not."""
    if before >= MAX_FORMULAS:
        return "count"
    if len(tex) > MAX_TEX:
        return "tex"
    if any(m.group(1) in DEFINES for m in CONTROL.finditer(tex)):
        return "defines"
    return None


class PageStyles(CSSHTMLHeaderPreprocessor):
    """nbconvert's inlined style (pygments' rules), and long lines that wrap inside their box
    (templates/course_feedback/wrap.css): in the feedback pages and in formgrader's, whose template (nbgrader's)
    inlines the exporter's `resources.inlining.css` too (configure() puts this in place of nbconvert's)."""

    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        resources["inlining"]["css"].append((TEMPLATES / "course_feedback" / "wrap.css").read_text())
        return nb, resources


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
    when the instructor gave it a score. The total is after the late penalty nbgrader's policy gives the scores as
    they are now (autograder.pipeline.late), not as they were at autograde."""

    def preprocess(self, nb, resources):
        self.grading = record.Grading.from_dict(record.load(stored(self, resources)) or {})
        ids = resources["nbgrader"]
        with Gradebook(ids["db_url"]) as gb:
            LatePenalties(parent=self).refresh(gb, gb.find_submission(ids["assignment"], ids["student"]))
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
