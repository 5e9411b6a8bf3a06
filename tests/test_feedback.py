"""Learner output is data: the feedback and the autograded notebook run no script of a learner's, and what a
learner's notebook outputs is capped on both sides of the sandbox.

A learner whose cells display a script as HTML, as JavaScript, inside an SVG, in an `<img onerror>`, in a
markdown cell and in an exception message is graded with the real `nbgrader autograde` and
`generate_feedback`; the feedback is opened in Debian's Chromium (Playwright, as in test_site.py),
from the file and over HTTP, and nothing of the learner's may run while the course's math shows, typeset ahead:
the page runs no script at all. The Content-Security-Policy is tested on its own too, on a feedback page where a
sanitizer had missed everything. A page is read as a learner reads it: about 110 KB, the `check()` cell left
out, each failure said once, each part named, long lines wrapped in their box (formgrader's page too) at 1280 and
390 px.  A learner whose kernel tries to write 300,000 outputs straight into the grader's pipe (the
notebook client is not dumpable: it cannot) and floods the client with 20,000 outputs is graded beside a normal
learner: the trusted processes' memory and the feedback stay those of a normal learner.  A learner whose cells
display an image of 1.9 MiB each passes the notebook's limit (8 MiB): the rest is not kept, and says so.
"""
import html
import json
import re
import threading
from pathlib import Path

import nbformat
import pytest
from attacks import FLOOD, HEAVY
from helpers import MARKS, SUITE, peak_memory, prepare

from autograder.authoring import variants
from autograder.classroom import grade
from autograder.verdict import record

pytestmark = pytest.mark.xdist_group("feedback")
ASG = "positional_encoding"
MIB = 1 << 20

SCRIPTS = r'''from IPython.display import HTML, SVG, Javascript, display
display(HTML("<script>document.title = 'PWNED'; window.pwned = 'html'; console.log('PWNED html')</script>"))
display(Javascript("document.title = 'PWNED'; window.pwned = 'javascript'; console.log('PWNED javascript')"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><script>window.pwned = "svg"; '
            'console.log("PWNED svg")</script><rect width="8" height="8"/></svg>'))
display(HTML('<img src="data:," onerror="window.pwned = \'img\'; console.log(\'PWNED img\')">'
             '<img src="http://leak.invalid/pixel.png"><a href="javascript:window.pwned=\'a\'">a link</a>'))
'''
MARKDOWN = '''A note of mine.
<script>window.pwned = "markdown"; console.log("PWNED markdown")</script>
<img src="data:," onerror="window.pwned = 'markdown img'">

[a markdown link](javascript:window.pwned='markdown link')
'''
LOUD_ROPE = '''def rope(x, base=10000.0):
    raise ValueError('<img src="data:," onerror="window.pwned = \\'comment\\'"> [click](javascript:window.pwned=1)')
'''
# Learner text written to read as the grader's, the instructor's, a link or a spreadsheet formula: in an exception
# message, and in the notebook's metadata under the grader's own keys (what a grading writes there).
SPOOFING_ALIBI = '''def alibi_bias(*args, **kwargs):
    raise ValueError("# All hidden tests passed: 4 / 4 **Instructor:** well done, see "
                     "[your prize](http://leak.invalid/prize) =HYPERLINK(\\"http://leak.invalid\\")")
'''
PLANTED = {"grader_problems": ['=HYPERLINK("http://leak.invalid","planted")', "+cmd|' /C calc'!A0 planted"],
           "autograder": {"notes": ["**Instructor:** planted note"], "protections": {"planted": False}}}


def _mallory():
    nb = variants.submission(ASG, {"rope": LOUD_ROPE, "alibi_bias": SPOOFING_ALIBI})
    nb.metadata.update(PLANTED)
    first = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("solution"))
    nb.cells.insert(first + 1, nbformat.v4.new_code_cell(SCRIPTS))
    nb.cells.insert(first + 2, nbformat.v4.new_markdown_cell(MARKDOWN))
    return nb


TRUSTED = {"nbgrader autograde": ("nbgrader autograde",), "hidden suite": SUITE}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Each learner autograded on its own (timed, the trusted processes' memory polled), then the class's feedback."""
    d = tmp_path_factory.mktemp("feedback")
    prepare(d, [ASG])
    ref = variants.reference_sources(ASG)
    learners = {"normal": variants.submission(ASG), "mallory": _mallory(),
                "flood": variants.submission(ASG, {"sinusoidal_encoding": ref["sinusoidal_encoding"] + FLOOD}),
                "heavy": variants.submission(ASG, {"sinusoidal_encoding": ref["sinusoidal_encoding"] + HEAVY})}
    runs = {}
    for learner, nb in learners.items():
        grade.submit(d, learner, ASG, nb)
        runs[learner] = peak_memory(
            lambda learner=learner: grade.autograde(d, ASG, learner=learner, capture_output=True, text=True), TRUSTED)
    f = grade.feedback(d, ASG, capture_output=True, text=True)
    scores = {}
    for row in grade.scores(d, [ASG]):
        scores.setdefault(row.learner, {})[row.cell] = row
    return d, runs, f, scores


def _page(d, learner, name=ASG):
    return d / "feedback" / learner / ASG / f"{name}.html"


def test_everyone_is_graded(graded):
    _, runs, f, scores = graded
    for learner, (r, _, _) in runs.items():
        assert r.returncode == 0, (learner, (r.stdout + r.stderr)[-3000:])
    assert f.returncode == 0, f.stderr[-3000:]
    assert {c: s.score for c, s in scores["normal"].items()} == {"sinusoidal_encoding_tests": 4.0, "rope_tests": 4.0,
                                                                  "alibi_bias_tests": 3.0}
    assert scores["mallory"]["rope_tests"].score < 4 and scores["mallory"]["sinusoidal_encoding_tests"].score == 4
    assert {c: s.score for c, s in scores["flood"].items()} == {c: s.score for c, s in scores["normal"].items()}


# -- the browser --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(graded):
    """The feedback folder over HTTP on 127.0.0.1, as a Jupyter server would serve it."""
    import functools
    import http.server

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(graded[0] / "feedback"))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()
    srv.server_close()


OPENED = """async () => {
    for (const a of document.querySelectorAll('a[href^="javascript:"]')) a.click();
    await new Promise(r => setTimeout(r, 500));
    return {
        title: document.title,
        pwned: window.pwned === undefined ? null : String(window.pwned),
        math: document.querySelectorAll("mjx-container > svg").length,
        math_drawn: [...document.querySelectorAll("mjx-container > svg")].filter(s => {
            const b = s.getBoundingClientRect();
            return b.width > 0 && b.height > 0 && s.querySelector("use");
        }).length,
        inline_scripts: document.querySelectorAll("script:not([src])").length,
        scripts: [...document.querySelectorAll("script[src]")].map(s => s.src),
        handlers: document.querySelectorAll("[onerror],[onload],[onclick],[onmouseover]").length,
        violations: window.__violations || [],
        text: document.body.innerText,
    };
}"""


def _open(browser, url):
    """Open a page, record what it logs, asks for and blocks; return what it holds."""
    ctx = browser.new_context(service_workers="block")
    asked, logged, dialogs = [], [], []
    ctx.route("**/*", lambda route: (asked.append(route.request.url),
                                     route.continue_() if route.request.url.startswith(("file:", "http://127.0.0.1"))
                                     else route.abort()))
    ctx.add_init_script("document.addEventListener('securitypolicyviolation', "
                        "e => (window.__violations = window.__violations || []).push(e.violatedDirective))")
    page = ctx.new_page()
    page.on("console", lambda m: logged.append(m.text))
    page.on("dialog", lambda dlg: (dialogs.append(dlg.message), dlg.dismiss()))
    try:
        page.goto(url, wait_until="load")
        seen = page.evaluate(OPENED)
    finally:
        ctx.close()
    return dict(seen, asked=asked, logged=logged, dialogs=dialogs)


def _nothing_ran(seen):
    assert seen["title"] == ASG, seen["title"]
    assert seen["pwned"] is None, seen["pwned"]
    assert not [m for m in seen["logged"] if "PWNED" in m] and not seen["dialogs"], seen["logged"]
    assert not [u for u in seen["asked"] if "leak.invalid" in u], seen["asked"]
    assert seen["math"] > 0 and seen["math_drawn"] == seen["math"], "the course's math did not render"


@pytest.mark.parametrize("how", ["file", "http"])
def test_no_learner_script_runs_in_the_feedback(graded, browser, served, how):
    d = graded[0]
    url = _page(d, "mallory").as_uri() if how == "file" else f"{served}/mallory/{ASG}/{ASG}.html"
    seen = _open(browser, url)
    _nothing_ran(seen)
    assert seen["inline_scripts"] == 0 and seen["handlers"] == 0, seen         # the page runs no script at all
    assert not seen["scripts"], seen["scripts"]
    assert seen["violations"] == [], "the sanitized page itself breaks its policy"
    # The exception message reaches the learner as the text it was, in the gradebook comment.
    assert 'raised ValueError: <img src="data:," onerror=' in seen["text"], seen["text"][-2000:]


def test_a_feedback_page_opens_on_its_own(graded, browser, tmp_path):
    """nbgrader's release_feedback hands a learner the page alone: moved away from the grading folder, its math
    still shows (typeset ahead, in the page), it asks for no other file, and no link points into a clone of the
    course."""
    page = tmp_path / "alone" / f"{ASG}.html"
    page.parent.mkdir()
    page.write_text(_page(graded[0], "normal").read_text())
    seen = _open(browser, page.as_uri())
    assert seen["math"] > 0 and seen["math_drawn"] == seen["math"] and seen["violations"] == [], seen["violations"]
    assert seen["asked"] == [page.as_uri()], seen["asked"]
    assert not re.search(r'href="[^"]*_build/html', page.read_text())


def test_the_feedback_agrees_with_the_instructor_s_score(graded, tmp_path):
    """A score and a comment the instructor gives in formgrader (written to the gradebook as formgrader writes them):
    the page's header, the graded cell's output and its comment all say the instructor's score, and the grader's
    diagnosis stays in the graded cell's output, once, not again beside the instructor's comment; no page carries
    grader jargon or nbgrader's warnings."""
    import shutil

    from nbgrader.api import Gradebook

    d = tmp_path / "grading"
    shutil.copytree(graded[0], d, ignore=shutil.ignore_patterns("feedback"))
    with Gradebook(grade.db_url(d)) as gb:
        g = gb.find_grade("rope_tests", ASG, ASG, "mallory")
        g.manual_score = 1.0
        gb.find_comment("rope", ASG, ASG, "mallory").manual_comment = "see me about the rotation"
        gb.db.commit()
    f = grade.feedback(d, ASG, capture_output=True, text=True)
    assert f.returncode == 0 and "not recognized" not in f.stderr, f.stderr[-3000:]
    shown = _page(d, "mallory").read_text()
    assert "rope_tests: 1 / 4 points (given by your instructor; the grader&#x27;s automatic score" in shown or \
        "rope_tests: 1 / 4 points (given by your instructor; the grader's automatic score" in shown, shown[-3000:]
    assert "Your instructor gave this part 1 / 4 points" in shown and "see me about the rotation" in shown
    assert "The grader:" not in shown and _said_once(d, "mallory", "rope_tests", shown)
    for page in (d / "feedback").rglob("*.html"):
        assert "graded without" not in page.read_text(), page


def test_every_consumer_reads_the_record_not_the_text(graded, tmp_path):
    """The stored record is the one thing read. A copy of a real grading whose record is rewritten, so that no rendered
    text (the autograded notebook, the gradebook's comments) holds what it now says: notes, a diagnosis and a flag
    full of markdown's marks, and a score of 1 where the gradebook holds 4. The check service's answer, the class
    report, the feedback (with a score the instructor gave) and, once the record names a fault, classgrade's decision
    and the report's status give back the record's words byte for byte."""
    import shutil

    from nbgrader.api import Gradebook

    from autograder.classroom import classgrade, report
    from autograder.service.grading import answer_of

    d = tmp_path / "grading"
    shutil.copytree(graded[0], d, ignore=shutil.ignore_patterns("feedback"))
    where = record.path(d, "normal", ASG, ASG)
    rec = record.load(where)
    assert rec is not None and rec["gradable"]
    grading = record.Grading.from_dict(rec)
    rope, alibi = grading.verdicts["rope_tests"], grading.verdicts["alibi_bias_tests"]
    rope.score, rope.notes = 1.0, [f"rec-note {MARKS}"]
    rope.checks[0].passed, rope.checks[0].diagnosis = False, f"rec-seen {MARKS}"
    alibi.status, alibi.notes = record.FLAGGED, [f"rec-flag {MARKS}"]
    record.store(where, {**rec, **grading.to_dict(), "notes": [f"rec-grading {MARKS}"],
                         "problems": [f"rec-repair {MARKS}"]})
    rendered = (d / "autograded" / "normal" / ASG / f"{ASG}.ipynb").read_text()
    comments = " ".join(row.comment or "" for row in grade.scores(d, [ASG]) if row.learner == "normal")
    assert "rec-" not in rendered + comments

    answer = answer_of(record.load(where))
    assert answer["notes"] == [f"rec-repair {MARKS}", f"rec-grading {MARKS}"], answer["notes"]
    cell = next(c for c in answer["cells"] if c["cell"] == "rope_tests")
    assert cell["score"] == 1.0 and cell["text"] == rope.text(), cell
    lines = cell["text"].splitlines()
    assert f"  note: rec-note {MARKS}" in lines and any(x.endswith(f": rec-seen {MARKS}") for x in lines), lines

    files = report.build(d, ASG, out=tmp_path / "report")
    assert files["notes"][f"rec-grading {MARKS}"] == 1 and files["notes"][f"rec-repair {MARKS}"] == 1, files["notes"]
    assert ("alibi_bias_tests", f"rec-flag {MARKS}") in files["flags"], files["flags"]
    said = [diagnosis.split(" | ") for (c, diagnosis) in files["counts"] if c == "rope_tests"]
    assert [f"rec-note {MARKS}", f"rec-seen {MARKS}"] in [sorted(x) for x in said], said
    assert html.escape(f"rec-seen {MARKS}") in Path(files["html"]).read_text()

    with Gradebook(grade.db_url(d)) as gb:
        gb.find_grade("rope_tests", ASG, ASG, "normal").manual_score = 2.0
        gb.db.commit()
    f = grade.feedback(d, ASG, capture_output=True, text=True)
    assert f.returncode == 0, f.stderr[-3000:]
    shown = html.unescape(_page(d, "normal").read_text())
    assert "rope_tests: 2 / 4 points (given by your instructor; the grader's automatic score: 1)" in shown
    assert f"  note: rec-note {MARKS}" in shown and f": rec-seen {MARKS}" in shown, shown[-3000:]

    record.store(where, record.Grading({}, fault=f"GraderFault: {MARKS}\nthe rest of its log").to_dict())
    assert classgrade.recorded_fault(d, ASG, "normal", since=0.0) == f"GraderFault: {MARKS}\nthe rest of its log"
    assert classgrade.failure_reason([], 1, classgrade.recorded_fault(d, ASG, "normal", since=0.0))[0] == \
        f"exit code 1: GraderFault: {MARKS}"
    assert report.recorded_failures(d, ASG, ["normal"]) == {"normal": f"grader error: GraderFault: {MARKS}"}


def test_a_page_says_each_failure_once_and_runs_no_script(graded):
    """The page is about 110 KB and holds no script (its math is typeset ahead, as SVG; no <span> for a token drawn
    plain: 136 KB before); its contents name each graded part; it leaves out the `check()` cell (the course's code, the
    same for everyone); each failed check of a graded cell is said once, in the graded cell's output, with its cost,
    and not again as a comment under the learner's answer."""
    d = graded[0]
    sizes = {who: _page(d, who).stat().st_size for who in ("normal", "mallory")}
    print(f"\nfeedback pages: {', '.join(f'{who} {n / 1000:.0f} KB' for who, n in sizes.items())}")
    assert max(sizes.values()) < 120_000, sizes
    page = _page(d, "mallory").read_text()
    text = html.unescape(page)
    assert _said_once(d, "mallory", "rope_tests", page)
    assert "<script" not in page and "mjx-container" in page
    assert "def check(" not in text and "COURSE_CHECK_URL" not in text and "Comments:" not in text
    toc = re.search(r'<div id="toc">(.*?)</div>', page, re.S).group(1)
    assert re.findall(r'<a href="#(\w+)_tests"><code>(\w+)</code></a>', toc) == [
        (part, part) for part in ("sinusoidal_encoding", "rope", "alibi_bias")] and "Test cell" not in toc, toc
    assert '<span class="n">' not in page and 'class="prompt' not in page


def _said_once(d, learner: str, cell: str, page: str) -> bool:
    """Whether the page says each failure the grading recorded for `cell` exactly once."""
    failed = record.Grading.from_dict(record.load(record.path(d, learner, ASG, ASG)) or {}).verdicts[cell].failed
    text = html.unescape(page)
    assert failed, f"{learner}'s {cell} failed nothing"
    return all(text.count(diagnosis) == 1 for diagnosis in failed)


def test_math_is_typeset_ahead_and_learner_tex_draws_only_symbols(monkeypatch):
    """MathJax in node turns TeX into SVG; a learner's TeX draws symbols and nothing else (no link, no style, no
    extension loaded); when MathJax cannot finish in time, the formulas stay readable as their TeX."""
    import logging

    from autograder.pipeline import feedback

    tex = [r"\sqrt{d_\text{model}}", r"\href{javascript:alert(1)}{x} \require{html} \style{color:red}{y}"]
    svgs, cache = feedback.typeset([(tex[0], True), (tex[1], False)])
    assert svgs[0].startswith("<mjx-container") and 'display="true"' in svgs[0] and "<svg" in svgs[0]
    assert "<defs>" in cache and "<path" in cache
    assert not re.search(r"<a\b|javascript|href=\"[^#]|style=\"color", svgs[1]), svgs[1]
    f = feedback.Formulas()
    mark = f.mark(tex[0], False)
    page = f'<body><h2 id="Why-{mark}">Why {mark}</h2></body>'           # a heading's anchor is made from its text
    done = f.typeset(page, logging.getLogger())
    assert done.startswith('<body>\n<svg id="MJX-SVG-global-cache"') and "mathjax-" not in done
    assert '<h2 id="Why-$\\sqrt{d_\\text{model}}$">Why <mjx-container' in done, done[:300]
    monkeypatch.setattr(feedback, "TYPESET_TIMEOUT", 0.001)
    assert f.typeset(page, logging.getLogger()) == ('<body><h2 id="Why-$\\sqrt{d_\\text{model}}$">'
                                                    'Why $\\sqrt{d_\\text{model}}$</h2></body>')


LONG = ("your rotation goes the wrong way round for every pair after the first, which the second visible check would "
        "have shown you had it run on a batch: compare out[..., 0::2] with x[..., 0::2] * cos - x[..., 1::2] * sin "
        "and see torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))*torch.polar(torch.ones_like(a),a)")
FLAG_NOTE = ("the grader could not tell what getattr(torch, name) calls in alibi_bias: a name computed at run time "
             "reaches the library, which a reading of the source cannot decide, so your instructor reads it: "
             "slopes_for_every_head_count_including_those_that_are_not_a_power_of_two_go_here")
BOXES = """() => {
    const boxes = [...document.querySelectorAll('pre, div.panel-footer')];
    const over = boxes.filter(b => b.scrollWidth > b.clientWidth).map(b => b.textContent.slice(0, 80));
    const lines = text => {                      // the lines a text is drawn on
        const at = [...document.querySelectorAll('pre, div.panel-footer p')].find(b => b.textContent.includes(text));
        if (!at) return 0;
        const node = [...at.childNodes].find(n => n.textContent.includes(text)) || at;
        const range = document.createRange();
        range.selectNodeContents(node);
        return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size;
    };
    const cut = [...document.querySelectorAll('pre')].filter(b => {     // the boxes that cut a line, unwrapped
        const was = b.style.whiteSpace;
        b.style.whiteSpace = 'pre';
        const wide = b.scrollWidth > b.clientWidth;
        b.style.whiteSpace = was;
        return wide;
    }).length;
    return {boxes: boxes.length, over, cut, scrollWidth: document.scrollingElement.scrollWidth, innerWidth,
            toc: [...document.querySelectorAll('#toc li')].map(li => li.textContent.trim()),
            note: lines('a name computed at run time'), comment: lines('wrong way round')};
}"""


def _formgrader_page(notebook: Path, folder: Path) -> Path:
    """The page formgrader shows for an autograded notebook: nbgrader's HTMLExporter with the course's configuration
    and formgrader's template, as formgrader's extension makes it, and its static files beside it, where its links
    look for them."""
    import nbgrader
    from nbconvert.exporters import HTMLExporter
    from nbgrader.apps import NbGrader
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config

    app = NbGrader()
    app.load_config_file()
    config = app.config
    extra = Config()
    extra.HTMLExporter.template_name = "formgrade"
    extra.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    config.merge(extra)
    resources = {"assignment_id": ASG, "notebook_id": ASG, "submission_id": "x", "index": 0, "total": 1,
                 "base_url": "", "student": "mallory", "last_name": None, "first_name": None, "notebook_path": ""}
    page, _ = HTMLExporter(config=config).from_filename(str(notebook), resources=resources)
    (folder / "formgrader").mkdir(parents=True)
    (folder / "formgrader" / "static").symlink_to(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
                                                  / "static")
    (folder / "page.html").write_text(page)
    return folder / "page.html"


def test_long_lines_wrap_in_their_box(graded, browser, tmp_path):
    """At 1280 and at 390 px, no box of the feedback cuts a line (a graded cell's criteria, its verdict and a flag's
    note, the instructor's comment): each wraps inside it, and the page does not scroll sideways; the contents name
    each part. formgrader's page of the same notebook (its template, Bootstrap and all) wraps its code and output
    too. Each page has lines its boxes would cut unwrapped; the note and the comment are drawn on several lines."""
    import functools
    import http.server
    import shutil

    from nbgrader.api import Gradebook

    d = tmp_path / "grading"
    shutil.copytree(graded[0], d, ignore=shutil.ignore_patterns("feedback"))
    where = record.path(d, "mallory", ASG, ASG)
    rec = record.load(where)
    grading = record.Grading.from_dict(rec)
    alibi = grading.verdicts["alibi_bias_tests"]
    alibi.status, alibi.notes = record.FLAGGED, [FLAG_NOTE]
    record.store(where, {**rec, **grading.to_dict()})
    with Gradebook(grade.db_url(d)) as gb:                 # what formgrader writes: a typed score, a comment
        gb.find_grade("alibi_bias_tests", ASG, ASG, "mallory").manual_score = 2.0
        gb.find_comment("rope", ASG, ASG, "mallory").manual_comment = LONG
        gb.db.commit()
    f = grade.feedback(d, ASG, capture_output=True, text=True)
    assert f.returncode == 0, f.stderr[-3000:]
    formgrader = _formgrader_page(d / "autograded" / "mallory" / ASG / f"{ASG}.ipynb", tmp_path / "formgrader")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(formgrader.parent))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        for width in (1280, 390):
            for name, url in (("feedback", _page(d, "mallory").as_uri()),
                              ("formgrader", f"http://127.0.0.1:{srv.server_port}/page.html")):
                view = browser.new_page(viewport={"width": width, "height": 900})
                try:
                    view.goto(url, wait_until="load")
                    seen = view.evaluate(BOXES)
                    view.screenshot(path=str(tmp_path / f"{name}-{width}.png"), full_page=True)
                finally:
                    view.close()
                assert seen["boxes"] > 10 and seen["over"] == [], (name, width, seen["over"])
                assert seen["scrollWidth"] <= seen["innerWidth"], (name, width, seen["scrollWidth"])
                assert seen["cut"] > 0, (name, width, seen)              # lines that would be cut, unwrapped
                if name == "feedback":
                    assert seen["note"] > 1 and seen["comment"] > 1, (width, seen)
                    parts = [t.split(" (")[0] for t in seen["toc"] if not t.startswith("Comment on")]
                    assert parts == ["sinusoidal_encoding", "rope", "alibi_bias"], seen["toc"]
    finally:
        srv.shutdown()
        srv.server_close()
    print(f"\nscreenshots in {tmp_path}")


INJECTED = """<script>window.pwned = 'inline'; console.log('PWNED inline')</script>
<img src="data:," onerror="window.pwned = 'handler'">
<a href="javascript:window.pwned = 'link'">a link</a>
<svg><script>window.pwned = 'svg'</script></svg>
<iframe srcdoc="<script>parent.pwned = 'frame'</script>"></iframe>
<img src="http://leak.invalid/pixel.png">
<script src="http://leak.invalid/x.js"></script>
"""


def test_the_policy_holds_for_what_a_sanitizer_would_miss(graded, browser):
    """The normal learner's feedback with scripts written into its body after sanitizing: the page's
    Content-Security-Policy alone stops every one, and the course's math still shows."""
    d = graded[0]
    source = _page(d, "normal").read_text()
    end = source.rindex("</body>")
    page = _page(d, "normal", "injected")
    page.write_text(source[:end] + INJECTED + source[end:])
    seen = _open(browser, page.as_uri())
    _nothing_ran(seen)
    assert {"script-src-elem", "script-src-attr"} <= set(seen["violations"]), seen["violations"]


def test_the_autograded_notebook_holds_no_script(graded):
    """What formgrader shows: no active content in any output or in the learner's markdown."""
    d = graded[0]
    nb = nbformat.read(str(d / "autograded" / "mallory" / ASG / f"{ASG}.ipynb"), as_version=4)
    rich, markdown = [], []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            markdown.append(cell.source)
        for out in cell.get("outputs", []):
            rich += [f"{k}: {v}" for k, v in out.get("data", {}).items() if k != "text/plain"]
    assert any("A note of mine" in m for m in markdown), "the learner's markdown cell is not in the notebook"
    assert rich and not [t for t in rich if t.startswith(("application/javascript", "image/svg+xml"))], rich
    for text in rich + markdown:
        for active in (r"<\s*(script|svg|iframe|object|embed|style)\b", r"<[^>]*\son\w+\s*=",
                       r"<[^>]*(href|src)\s*=\s*[\"']?\s*(javascript|vbscript|data):", r"\]\(\s*javascript:"):
            assert not re.search(active, text, re.I), (active, text[:300])


def test_learner_text_is_inert_everywhere_it_lands(graded):
    """The grader's keys in a submitted notebook's metadata are not the grader's: nothing planted there reaches the
    gradebook, the feedback, the CSVs or the report; an exception message written as markdown shows as its text in
    the feedback (no heading, emphasis or link); no CSV cell starts as a formula."""
    import csv

    from autograder.classroom import report

    d, _, _, scores = graded
    comments = " ".join(row.comment or "" for row in scores["mallory"].values())
    assert "well done" in comments and "planted" not in comments, comments
    page = _page(d, "mallory").read_text()
    assert "planted" not in page
    assert "All hidden tests passed: 4 / 4" in page and "[your prize](http://leak.invalid/prize)" in page, page[-3000:]
    assert not re.search(r"<h\d[^>]*>[^<]*All hidden|<(strong|em)>\s*Instructor|href=\"http://leak", page), page[-3000:]
    files = report.build(d, ASG)
    for name in ("scores", "diagnoses"):
        with open(files[name], newline="") as f:
            cells = [cell for row in csv.reader(f) for cell in row]
        assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")], (name, cells)
    assert any("HYPERLINK" in c for c in cells), cells          # the learner's text is there, as text
    assert "planted" not in Path(files["html"]).read_text()


@pytest.mark.parametrize("value,cell", [("=1+2", "'=1+2"), ("+cmd|x", "'+cmd|x"), ("-2.5", "-2.5"),
                                        ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("plain", "plain"), ("", "")])
def test_a_csv_cell_is_never_a_formula(value, cell):
    from autograder.classroom.report import csv_cell

    assert csv_cell(value) == cell


# -- output caps ----------------------------------------------------------------------------------------
def test_an_output_flood_costs_the_grader_nothing(graded):
    """The flooding learner's grading: the trusted processes' memory within 64 MiB of a normal learner's, and its
    autograded notebook and feedback of a normal size."""
    d, runs, _, _ = graded
    (_, normal_s, normal), (_, flood_s, flood) = runs["normal"][:3], runs["flood"][:3]
    print(f"\nautograde: normal {normal_s:.1f} s, {', '.join(f'{k} {v / MIB:.0f} MiB' for k, v in normal.items())}; "
          f"flood {flood_s:.1f} s, {', '.join(f'{k} {v / MIB:.0f} MiB' for k, v in flood.items())}")
    for marker in TRUSTED:
        assert normal.get(marker) and flood.get(marker), (normal, flood)
        assert flood[marker] < normal[marker] + 64 * MIB, (marker, flood[marker] / MIB, normal[marker] / MIB)
    sizes = {who: ((d / "autograded" / who / ASG / f"{ASG}.ipynb").stat().st_size, _page(d, who).stat().st_size)
             for who in ("normal", "flood")}
    assert all(f < n + MIB for f, n in zip(sizes["flood"], sizes["normal"])), sizes
    notes = _outputs(d, "flood")
    assert max(len(outputs) for outputs in notes) <= 52, [len(outputs) for outputs in notes]
    text = json.dumps(notes)
    assert "more outputs cut" in text and "the grader's pipe could not be reached" in text, text[:2000]


def test_a_notebook_past_its_limit_keeps_what_came_before(graded):
    """Images of 1.9 MiB after every cell: the grader reads 8 MiB of the run and no more, says so in the notebook,
    and its trusted processes hold no more than a normal learner's and those 8 MiB."""
    d, runs, _, scores = graded
    normal, heavy = runs["normal"][2], runs["heavy"][2]
    for marker in TRUSTED:
        assert heavy[marker] < normal[marker] + 64 * MIB, (marker, heavy[marker] / MIB, normal[marker] / MIB)
    assert (d / "autograded" / "heavy" / ASG / f"{ASG}.ipynb").stat().st_size < 9 * MIB
    text = json.dumps(_outputs(d, "heavy"))
    assert "your notebook's outputs passed 8 MiB; the rest were not kept" in text, text[:2000]
    assert scores["heavy"]["sinusoidal_encoding_tests"].score == 4


def _outputs(d, learner) -> list:
    nb = nbformat.read(str(d / "autograded" / learner / ASG / f"{ASG}.ipynb"), as_version=4)
    return [c.outputs for c in nb.cells if c.cell_type == "code"]
