"""Trusted work bounded by the bytes a learner sends: the sanitizer of a learner's markdown and HTML, and the feedback's
typesetting of a learner's formulas.

Generated pathological inputs (runs of one character, nested and misnested tags, one tag or comment grown piece by
piece, text appended to one node across ignored tags, formulas defining nested macros) are measured by how their cost
scales, not by a clock's threshold: each is sanitized at n and 4n characters, and the larger costs under 8 times the
smaller in CPU time (linear work: 4; the quadratic work the red team found: 16 and more). Past its bounds a learner's
text is shown as text, a markdown cell past its cap is a note that names the cap, and a page of formula bombs stays
the size of its TeX and says its formulas were not typeset. Honest markdown, the course's own and a learner's notes
with `<`, `&`, code, math, quotes and tables, keeps its meaning: the same tags, text and formulas once rendered.
"""
import gc
import html
import re
import time

import nbformat
import pytest
from helpers import ROOT

from autograder.pipeline import feedback, sanitize

CLEANER = sanitize.Sanitizer(tags=sanitize.TAGS, attributes=sanitize.ATTRIBUTES)
# What must never come out of the sanitizer (tests/test_feedback.py looks for the same in a graded notebook): here a
# tag is `<` and a letter, as HTML reads one (`<` and a zero-width space is text), and its search stops at the next
# `<`, which keeps it linear on text of many `<`.
ACTIVE = (r"<\s*(script|svg|iframe|object|embed|style|img|math)\b", r"<[a-z][^<>]*\son\w+\s*=",
          r"<[a-z][^<>]*(href|src)\s*=\s*[\"']?\s*(javascript|vbscript|data):", r"\]\(\s*javascript:")


def _repeat(prefix: str, unit: str, suffix: str = ""):
    return lambda n: prefix + unit * max(1, (n - len(prefix) - len(suffix)) // len(unit)) + suffix


# (name, input of about n characters, n), n sized so that the sanitizer as it is takes a tenth of a second or so. The
# sanitizer as it was took 16x and more at 4n on the nesting, formatting, table and one-token families, and on text
# appended to one node across tokens: the red team's `<`, whose quadratic copying shows past a MiB, as here with
# runs of 1,000 characters between ignored end tags.
PATHOLOGICAL = [
    ("lt", _repeat("", "<"), 32_000),
    ("amp", _repeat("", "&"), 32_000),
    ("lt space", _repeat("", "< "), 32_000),
    ("text across ignored end tags", _repeat("", "x" * 1000 + "</i>"), 1 << 20),
    ("text in a table across ignored end tags", _repeat("<table>", "x" * 1000 + "</td>"), 1 << 20),
    ("nested div", _repeat("", "<div>"), 16_000),
    ("nested b", _repeat("", "<b>"), 16_000),
    ("nested list", _repeat("", "<ul><li>"), 16_000),
    ("misnested formatting", _repeat("", "<b><p></b>"), 16_000),
    ("reopened formatting", lambda n: "".join(f"<p><b x={k}></p>" for k in range(n // 14)), 16_000),
    ("unclosed formatting in paragraphs", _repeat("", "<p><b></p><p>x"), 8_000),
    ("list items of formatting", _repeat("", "<li><b>"), 8_000),
    ("foster-parented text", _repeat("", "<table>x"), 16_000),
    ("a table of many rows", _repeat("<table>", "<tr><td>1</td><td>2</td></tr>\n", "</table>"), 32_000),
    ("one tag name", _repeat("<b", "1", ">"), 32_000),
    ("one attribute name", _repeat("<b x", "<", ">"), 32_000),
    ("one attribute value", _repeat('<b x="', "&", '">'), 32_000),
    ("one comment", _repeat("<!--", "-x", "-->"), 32_000),
    ("one doctype", _repeat("<!DOCTYPE ", "1", ">"), 32_000),
    ("attributes that are tags", _repeat("", "<x <"), 32_000),
    ("invalid code points", _repeat("", "\x01"), 64_000),
    ("code spans", _repeat("", "`a<b` "), 32_000),
    ("unclosed code spans", _repeat("", "``a<"), 32_000),
    ("formulas", _repeat("", "$x<y$ "), 32_000),
    ("unclosed environments", _repeat("", "\\begin{x}<"), 32_000),
    ("fences", _repeat("", "```\n<b>\n"), 32_000),
    ("blockquotes", _repeat("", ">>> <\n"), 32_000),
]


def _cpu(fn, arg) -> tuple[float, object]:
    """The least CPU time of two calls, with the garbage collector off as `timeit` has it: a full collection scans the
    whole heap of this process (torch and nbconvert imported), so whether one falls in a call (0.2-0.3 s here) would
    say more than the work of the call itself; and what the call returned."""
    best = float("inf")
    for _ in range(2):
        gc.collect()
        gc.disable()
        try:
            start = time.process_time()
            out = fn(arg)
            best = min(best, time.process_time() - start)
        finally:
            gc.enable()
    return best, out


@pytest.mark.parametrize("name,make,n", PATHOLOGICAL, ids=[p[0] for p in PATHOLOGICAL])
def test_the_sanitizer_is_linear_and_its_output_inert(name, make, n):
    """A learner's markdown (code and math taken out, the rest through bleach) at n and 4n characters: the larger in
    under 8 times the smaller's CPU time (a floor of 20 ms for those stopped early by a bound), its output at most
    MAX_GROWTH times its size, with nothing active in it."""
    small, large = make(n), make(4 * n)
    (small_cost, _), (large_cost, out) = [_cpu(lambda text: sanitize.markdown(text, CLEANER), text)
                                          for text in (small, large)]
    assert large_cost < 8 * max(small_cost, 0.02), f"{name}: {small_cost:.3f} s at {len(small):,}, {large_cost:.3f} " \
                                                   f"s at {len(large):,} characters"
    assert len(out) <= sanitize.MAX_GROWTH * len(large) + 1024
    for active in ACTIVE:
        assert not re.search(active, out, re.I), (name, active)


def test_past_a_bound_the_text_is_shown_as_text():
    """Nesting past MAX_DEPTH, formatting past MAX_FORMATTING, one tag past MAX_PIECES: the text, escaped whole;
    within them, the tags are kept."""
    for text in ("<div>" * (sanitize.MAX_DEPTH + 1) + "x",
                 "".join(f"<p><b x={k}></p>" for k in range(sanitize.MAX_FORMATTING + 1)) + "x",
                 "<b x" + "<" * (sanitize.MAX_PIECES + 1) + ">"):
        assert CLEANER.sanitize_html_tags(text) == html.escape(text, quote=False)
    assert CLEANER.sanitize_html_tags("<div>" * 10 + "x") == "<div>" * 10 + "x" + "</div>" * 10


def _notebook(*sources: str):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(s) for s in sources])


def test_a_markdown_cell_past_its_cap_is_a_note_that_names_it():
    """A learner's markdown cell over MAX_MARKDOWN_BYTES is replaced by a note saying so, without being parsed (4 MiB of
    `<` costs what 1 MiB does); one at the cap is kept; past MAX_MARKDOWN_TOTAL of them, the later ones are notes too;
    the course's locked cells are never touched."""
    cap = sanitize.MAX_MARKDOWN_BYTES

    def sanitized(*sources):
        nb = _notebook(*sources)
        sanitize.sanitize(nb)
        return [c.source for c in nb.cells]

    at, over = "a" * cap, "é" * (cap // 2 + 1)                 # the cap counts UTF-8 bytes
    kept, note = sanitized(at, over)
    assert kept == at
    assert note.startswith("**Grader's note:**") and f"{cap >> 10:,} KiB a markdown cell may hold" in note, note
    costs = [_cpu(lambda s: sanitized(s), "<" * size)[0] for size in (1 << 20, 4 << 20)]
    assert costs[1] < 8 * max(costs[0], 0.02), costs
    chunk = "b" * (cap - 1)
    cells = sanitized(*[chunk] * (sanitize.MAX_MARKDOWN_TOTAL // cap + 2))
    assert cells[:sanitize.MAX_MARKDOWN_TOTAL // cap] == [chunk] * (sanitize.MAX_MARKDOWN_TOTAL // cap)
    assert f"{sanitize.MAX_MARKDOWN_TOTAL >> 10:,} KiB that all your markdown cells" in cells[-1], cells[-1][:200]
    nb = _notebook("<script>x</script>" + "<" * (2 * cap))
    nb.cells[0].metadata["nbgrader"] = {"locked": True, "grade_id": "intro"}
    sanitize.sanitize(nb)
    assert nb.cells[0].source.startswith("<script>x</script><<<")


def _meaning(markdown: str) -> tuple[list[str], str, list[str]]:
    """What a reader of the feedback gets from markdown: its tags, its text and its formulas (TeX, where a space after
    `<` or `&` means nothing)."""
    formulas = feedback.Formulas()
    page = feedback.MarkdownWithMath(renderer=feedback.MathMarks(formulas, escape=False), block=feedback.MathBlock(),
                                     inline=feedback.MathInline(hard_wrap=False)).render(markdown)
    page = page.replace(formulas.nonce, "")
    tags = re.findall(r"</?[a-z0-9]+", page)
    text = html.unescape(re.sub(r"<[^>]*>", "", page)).replace("\u200b", "")
    return tags, text, [re.sub(r"([<&]) ", r"\1", tex) for tex, _, _ in formulas.items]


NOTES = r"""## My notes on attention

If $a < b$ and $b<c$ then $a<c$; the mask keeps $j \le i$, and $$\sum_{j<i} w_{ij} = 1.$$
\begin{align} x &= y \\ z &< w \end{align}
The causal mask keeps `j <= i` and drops `j > i`; in code, `if a<b and c>d: keep &= mask`.
Plain text: 1 < 2 & 3 > 2, AT&T, &amp; stays one ampersand, <b>bold</b>, H<sub>2</sub>O, a<br>break.

> A quote from the book: scores grow like $\sqrt{d}$.
> > And a nested one, with `x < y`.

```python
scores = q @ k.transpose(-2, -1) / math.sqrt(d)   # (B, T, T)
if x<y and y>z:
    mask &= torch.tril(ones) > 0   # <b>not bold</b>
```

| part | shape |
| --- | --- |
| 1 < 2 | `(B, T, C)` |

<details><summary>Hint</summary>

Use `softmax(x, dim=-1)` on the last dimension.
</details>
"""


def test_honest_markdown_keeps_its_meaning():
    """The course's own markdown cells, sanitized as a learner's would be, and a learner's notes (`<`, `&`, code spans
    and blocks, math, quotes, a table, allowed tags): the same tags, text and formulas once rendered as the feedback
    renders them, but for its markdown links, which a learner's markdown shows as text (MARKDOWN_LINK)."""
    sources = [NOTES]
    for path in sorted((ROOT / "exercises").glob("*/*.ipynb")):
        sources += [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
    assert len(sources) > 20
    for source in sources:
        nb = _notebook(source)
        sanitize.sanitize(nb)
        assert _meaning(nb.cells[0].source) == _meaning(sanitize.MARKDOWN_LINK.sub("]\u200b", source)), source[:300]


# Code and math taken out of a learner's markdown where a renderer may read them as HTML: in an HTML block, in a tag,
# in a comment, after a <pre>, indented as code, unclosed; each must come back as text, whatever renders it.
HOSTILE = ["<div>\n```\n<script>alert(1)</script>\n```\n</div>",
           "<pre>\n\n```\n<img src=x onerror=alert(1)>\n```\n</pre>",
           "<pre>x</pre>\n\n```\n<script>alert(1)</script>\n```",
           "text\n\n    ```\n<script>alert(1)</script>\n    ```",
           "text\n```\n<svg onload=alert(1)>\n```",
           '<a title="`x" onmouseover="alert(1)<`">t</a>', '<a title="$x" onmouseover="alert(1)<$">t</a>',
           "<!--\n\n```\n<script>alert(1)</script>\n```\n-->", "<b\n>`<img src=x onerror=alert(1)>`</b>",
           "`<img src=x onerror=alert(1)>`", "$<img src=x onerror=alert(1)>$", "$$\n<script>alert(1)</script>\n$$",
           "\\begin{x}<iframe src=javascript:alert(1)>\\end{x}", "`[x](javascript:alert(1))<`",
           "$[x](javascript:alert(1))<$", "> <script>alert(1)</script>", "```\n<script>alert(1)</script>",
           "<table><tr><td>\n\n```\n<script>alert(1)</script>\n```\n</td></tr></table>",
           "````\n```\n<script>alert(1)</script>\n````", "~~~\n<script>alert(1)</script>\n~~~",
           "`<a href=&#106;avascript:alert(1)>x</a>`", "$<a href=javascript:alert(1)>x</a>$"]


@pytest.mark.parametrize("source", HOSTILE)
def test_code_and_math_kept_as_written_are_text_in_any_renderer(source):
    """Rendered by nbconvert (formgrader's and the feedback's mistune) and by a strict CommonMark renderer
    (markdown-it-py, raw HTML on): nothing active."""
    from markdown_it import MarkdownIt
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    clean = sanitize.markdown(source, CLEANER)
    for rendered in (markdown2html_mistune(clean), MarkdownIt("commonmark").render(clean)):
        for active in ACTIVE:
            assert not re.search(active, rendered, re.I), (active, clean, rendered)

# -- the feedback's typesetting ---------------------------------------------------------------------------------
def _bomb(levels: int = 9) -> str:
    """A formula whose nested \\def make 2**levels glyphs of 130 characters of TeX."""
    names = [f"q{chr(ord('a') + i)}" for i in range(levels)]
    tex = rf"\def\{names[0]}{{xy}}"
    for before, name in zip(names, names[1:]):
        tex += rf"\def\{name}{{\{before}\{before}}}"
    return tex + "\\" + names[-1]


def _page(markdown: str, locked: bool = False, displayed: bool = False) -> str:
    """The feedback page of the course's first exercise with a markdown cell of the learner's (or of the course's, or
    the markdown output of a learner's code cell)."""
    from traitlets.config import Config

    from autograder import pipeline

    c = Config()
    pipeline.configure(c)
    nb = nbformat.read(ROOT / "exercises" / "positional_encoding" / "positional_encoding.ipynb", as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") or meta.get("solution"):
            meta.update(score=0.0, points=float(meta.get("points", 0)), comment=None)
    if displayed:
        output = nbformat.v4.new_output("display_data", data={"text/markdown": markdown, "text/plain": "notes"})
        nb.cells.append(nbformat.v4.new_code_cell("display(Markdown(notes))", outputs=[output]))
    else:
        nb.cells.append(nbformat.v4.new_markdown_cell(markdown))
    if locked:
        nb.cells[-1].metadata["nbgrader"] = {"locked": True, "grade_id": "notes"}
    resources = {"nbgrader": {"notebook": "positional_encoding", "score": 0, "max_score": 11, "late_penalty": 0}}
    page, _ = feedback.FeedbackHTML(config=c).from_notebook_node(nb, resources=resources)
    return page


@pytest.mark.parametrize("n", [75, 300])
def test_a_page_of_formula_bombs_stays_small_and_says_so(n):
    """n formulas of nested \\def in a learner's markdown (the red team's 300 made a 27 MB page): the page grows by
    their TeX alone, the course's formulas are typeset, and one note says that the learner's were not, and why."""
    bombs = "\n\n".join(f"${_bomb()}$" for _ in range(n))
    page, course = _page(bombs), _page("My notes.")
    assert len(page) - len(course) < 2 * len(bombs), (len(page), len(course), len(bombs))
    assert page.count("<mjx-container") == course.count("<mjx-container") > 0
    assert page.count('class="untypeset"') == 1
    note = re.search(r'<p class="untypeset">(.*?)</p>', page).group(1)
    assert f"{n} of your formulas are shown as their TeX, not typeset" in note
    assert "defining a macro" in note and (n <= feedback.MAX_FORMULAS or "past the first" in note), note


def test_a_page_is_written_in_time_linear_in_its_formulas():
    """Pages of n and 4n learner formulas (bombs: none reaches node): the page's CPU time here grows under 8 times
    (each formula's TeX was escaped again for each tag of the page: 3,000 formulas took 18 s)."""
    costs = [_cpu(_page, "\n\n".join([f"${_bomb()}$"] * n))[0] for n in (1000, 4000)]
    assert costs[1] < 8 * costs[0], costs


def test_the_learners_formulas_are_typeset_within_the_caps(monkeypatch):
    """Each cap, one by one: the learner's formulas past it come back untypeset with its reason; the course's own are
    typeset whatever they hold (a \\def of theirs included), and first."""
    big = r"\underbrace{" * 130 + "x" + "}" * 130                              # about 85 KiB of SVG from 1.7 KB
    items = ([(r"\def\course{c}\course", False, False)] + [(f"x_{{{i}}}", False, True) for i in range(3)]
             + [("x" * (feedback.MAX_TEX + 1), False, True), (r"\newcommand{\a}{b}\a", False, True),
                ("x" * 1900, False, True), ("{" * 900 + "x" + "}" * 900, False, True)]
             + [(big, True, True)] * 30)
    done = feedback.mathjax(items)
    assert done.svgs[0] and "<svg" in done.svgs[0] and done.why[0] is None
    assert all(done.svgs[i] for i in (1, 2, 3))
    assert done.why[4:8] == ["tex", "defines", "formula", "error"], done.why[4:8]
    drawn = [svg for svg in done.svgs if svg]
    assert sum(map(len, drawn)) <= feedback.MAX_PAGE_SVG and done.why[-1] == "page"
    monkeypatch.setattr(feedback, "MAX_FORMULAS", 2)
    assert feedback.mathjax(items[:4]).why == [None, None, None, "count"]
    monkeypatch.undo()
    monkeypatch.setattr(feedback, "TYPESET_BUDGET", 0)
    late = feedback.mathjax(items[:4])
    assert late.svgs[0] and late.why[1:] == ["time"] * 3


def test_only_the_course_markdown_is_the_courses():
    """A formula of a locked markdown cell is the course's (its \\def typeset); the same in a learner's cell, or in
    markdown a learner's code displays, is not."""
    tex = r"$\def\mine{m}\mine$"
    assert 'class="untypeset"' not in _page(tex, locked=True)
    assert "1 of your formulas are shown as their TeX" in _page(tex)
    assert "1 of your formulas are shown as their TeX" in _page(tex, displayed=True)


def test_the_typesetter_is_linear_in_the_pages_formulas():
    """Pages of n and 4n small learner formulas: the node run's time (its start aside, measured as a page of one)
    grows under 8 times, where a quadratic typesetter grows 16 times; each page within MAX_PAGE_SVG. Each time is the
    least of three runs, as node's start alone varies by a tenth of a second on a busy machine."""
    def run(n):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            done = feedback.mathjax([(rf"\frac{{a_{i}}}{{b < c}}", False, True) for i in range(n)])
            times.append(time.perf_counter() - start)
        return min(times), done

    base, _ = run(1)
    (t1, d1), (t4, d4) = run(40), run(160)
    assert all(d1.svgs) and all(d4.svgs)
    assert t4 - base < 8 * max(t1 - base, 0.1), (base, t1, t4)
    assert sum(map(len, d4.svgs)) <= feedback.MAX_PAGE_SVG


def test_the_bounded_math_finds_what_nbconvert_finds():
    """The feedback's math patterns are nbconvert's, each formula at most MAX_TEX characters: the same formulas in the
    course's markdown."""
    from nbconvert.filters.markdown_mistune import MarkdownWithMath

    for path in sorted((ROOT / "exercises").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "markdown":
                continue
            ours, theirs = feedback.Formulas(), feedback.Formulas()
            MarkdownWithMath(renderer=feedback.MathMarks(ours, escape=False), block=feedback.MathBlock(),
                             inline=feedback.MathInline(hard_wrap=False)).render(cell.source)
            MarkdownWithMath(renderer=feedback.MathMarks(theirs, escape=False)).render(cell.source)
            assert ours.items == theirs.items

