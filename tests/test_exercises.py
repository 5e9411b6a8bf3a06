"""Each exercise tells the learner what is graded and helps when stuck.

- The criteria in each graded cell are what `autograder.authoring.criteria` renders from the hidden suite's own tests
  and constants.
- The visible checks pass for the reference and for every known correct answer, and catch the known mistakes listed
  in VISIBLE, each with its own message: the released notebook, its solution cells filled in with the answer, runs
  in order in a fresh namespace, as in a learner's kernel.
- Each part's visible checks judge that part alone: a right part passes them whatever the other graded parts hold,
  a known mistake or nothing at all (the parts an exercise asks to paste from earlier ones hold the reference).
- Every chapter links its exercise; every exercise links its chapter and, for each graded part, the section of the
  book that explains it, and gives the part a time and two hints.
"""
import contextlib
import io
import re
import warnings

import pytest
import torch
from docutils.nodes import make_id
from helpers import ASSIGNMENTS, ROOT

from autograder import notebooks
from autograder.authoring import criteria, variants
from autograder.classroom import report
from autograder.notebooks import is_graded_test, is_solution, nbgrader_meta

# The hidden suites are imported here to read their tests; their markers are registered only where they run.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")
with warnings.catch_warnings():
    warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
    from autograder.verdict.suites import checks, test_attention
    from autograder.verdict.suites import test_transformer as tt

def placed(asg) -> tuple[dict, dict]:
    """(VISIBLE, HIDDEN_ONLY) of an exercise's known answers (examples/variants/<asg>.py)."""
    return variants.placed(asg)


def bugs(asg):
    return {v.name: v for v in variants.load(asg) if isinstance(v, variants.Bug)}


def run_visible(asg, cells=None, until=None, answered=True) -> dict:
    """Run the code cells of the released notebook of `asg`, its solution cells holding the reference or `cells`
    where given (the stubs, with `answered=False`), in order, in a fresh namespace, up to the cell `until`; return
    each cell's exception (None where it ran through)."""
    nb = variants.submission(asg, cells, answered=answered)
    ns, results = {"__name__": f"visible_{asg}"}, {}
    for cell in nb.cells:
        if cell.cell_type != "code" or is_graded_test(cell):
            continue
        gid = nbgrader_meta(cell).get("grade_id") or cell.get("id")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(cell.source, f"<{asg}:{gid}>", "exec"), ns)
            results[gid] = None
        except Exception as e:  # noqa: BLE001 - a failing check is the result
            results[gid] = e
        if gid == until:
            break
    return results


def visible_checks(asg) -> list[str]:
    nb = notebooks.read(notebooks.source_notebook(asg))
    return [nbgrader_meta(c).get("grade_id") or c.get("id") for c in nb.cells if c.cell_type == "code"
            and not is_solution(c) and not is_graded_test(c) and "setup" not in c.metadata.get("tags", [])]


def checks_of_parts(asg) -> dict[str, list[str]]:
    """Each graded part -> its visible checks: the code cells between its solution cell and its graded cell."""
    nb = notebooks.read(notebooks.source_notebook(asg))
    parts = {gid.removesuffix(notebooks.TESTS_SUFFIX) for gid in notebooks.graded_cells(nb)}
    found: dict[str, list[str]] = {}
    part = None
    for cell in nb.cells:
        gid = nbgrader_meta(cell).get("grade_id") or cell.get("id")
        if is_solution(cell):
            part = gid if gid in parts else part
            if part is not None:
                found.setdefault(part, [])
        elif is_graded_test(cell):
            part = None
        elif part is not None and cell.cell_type == "code":
            found[part].append(gid)
    return found


def solution_ids(asg) -> list[str]:
    return [nbgrader_meta(c)["grade_id"] for c in notebooks.read(notebooks.source_notebook(asg)).cells
            if is_solution(c)]


def mistakes_in_other_parts():
    """(asg, bug, part): a known mistake in some graded parts, and a graded part it leaves right."""
    for asg in ASSIGNMENTS:
        parts = checks_of_parts(asg)
        for bug in bugs(asg).values():
            if set(bug.cells) <= set(parts):         # a mistake in the pasted parts is the together tests' concern
                yield from ((asg, bug.name, part) for part in sorted(set(parts) - set(bug.cells)))


def failures(results: dict, cells: list[str]) -> dict:
    return {gid: f"{type(results[gid]).__name__}: {results[gid]}" for gid in cells if results.get(gid) is not None}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The training run is quickest on one thread, and the machine is shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- what is graded -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_graded_cells_state_the_suites_criteria(asg):
    """Each graded cell (and the visible training run) is what the generator writes from the hidden suite."""
    assert criteria.stale(asg) == [], f"{asg}: run `make criteria` (python -m autograder.authoring.criteria {asg})"


def comment_text(source: str) -> str:
    return " ".join(source.replace("#", " ").split())


def test_criteria_quote_the_suites_numbers():
    """The generated text carries the speed factor, the memory limit and the training run, but not the offset K."""
    block = comment_text(criteria.graded_comment("attention", "blockwise_attention_tests", 5))
    assert f"at most {checks.SPEED_FACTOR:g}x (graded on a GPU: {checks.GPU_SPEED_FACTOR:g}x" in block
    assert f"of shape {tuple(test_attention.MEMORY_GPU_SHAPE)}" in block
    assert f"{test_attention.MEMORY_FRACTION:g} of the" in block
    assert f"Lq = Lk = {test_attention.MEMORY_SEQ_LEN}" in block
    tiny = comment_text(criteria.graded_comment("transformer", "TinyTransformer_tests", 6))
    for number in (f"for {tt.STEPS} steps", f"at least {tt.ACCURACY:g}", f"d_model={tt.D_MODEL}", "a new offset"):
        assert number in tiny, number
    assert "3 places" not in tiny


# -- visible checks -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_every_known_mistake_is_placed(asg):
    """Each known mistake is either caught by a visible check or listed as visible to the hidden tests only."""
    visible_table, hidden_table = placed(asg)
    visible, hidden = set(visible_table), set(hidden_table)
    assert not visible & hidden
    assert visible | hidden == set(bugs(asg)), (
        f"{asg}: say in VISIBLE which visible check catches {sorted(set(bugs(asg)) - visible - hidden)}, or in "
        "HIDDEN_ONLY why none can")
    checks = set(visible_checks(asg))
    assert {cell for cell, _ in visible_table.values()} <= checks


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_no_two_known_mistakes_share_a_cause(asg):
    """A cause is a known mistake's own: the record names it by its text, the class report groups by it, and a grading
    drops it when that mistake answered a call otherwise; shared by two parts' mistakes, a right part would rule out
    the cause of a wrong one."""
    named: dict[str, str] = {}
    for bug in (b for b in bugs(asg).values() if b.cause):
        first = named.setdefault(bug.cause, bug.name)
        assert first == bug.name, f"{asg}: {bug.name} and {first} share a cause"


@pytest.mark.parametrize("asg,answer", [(asg, "reference") for asg in ASSIGNMENTS] + [
    (asg, v.name) for asg in ASSIGNMENTS for v in variants.load(asg) if isinstance(v, variants.Correct)])
def test_visible_checks_pass_for_correct_answers(asg, answer):
    cells = {} if answer == "reference" else {v.name: v for v in variants.load(asg)}[answer].cells
    results = run_visible(asg, cells)
    assert set(visible_checks(asg)) <= set(results)
    failed = {gid: f"{type(e).__name__}: {e}" for gid, e in results.items() if e is not None}
    assert not failed, f"{asg}, {answer}: {failed}"


@pytest.mark.parametrize("asg,bug", [(asg, name) for asg in ASSIGNMENTS for name in placed(asg)[0]])
def test_visible_checks_catch_known_mistakes(asg, bug):
    cell, message = placed(asg)[0][bug]
    error = run_visible(asg, bugs(asg)[bug].cells, until=cell)[cell]
    assert isinstance(error, AssertionError), f"{asg}, {bug}: {cell} gave {error!r}, not a failed check"
    assert message in str(error), f"{asg}, {bug}: {cell} failed with {str(error)!r}, expected {message!r}"


@pytest.mark.parametrize("asg,bug,part", list(mistakes_in_other_parts()))
def test_a_right_part_passes_its_checks_whatever_the_others_hold(asg, bug, part):
    """A right part passes its own visible checks beside a known mistake in another graded part (part 3 beside a
    part 1 that forgets 1/sqrt(d), for instance)."""
    own = checks_of_parts(asg)[part]
    assert own, f"{asg}: {part} has no visible checks"
    results = run_visible(asg, bugs(asg)[bug].cells, until=own[-1])
    assert not failures(results, own), f"{asg}: the reference {part} beside {bug}: {failures(results, own)}"


@pytest.mark.parametrize("asg,part", [(asg, part) for asg in ASSIGNMENTS for part in checks_of_parts(asg)])
def test_a_right_part_passes_its_checks_with_the_others_unanswered(asg, part):
    """A right part passes its own visible checks when the other graded parts are still the stubs of the release (a
    learner may write them in any order); the parts pasted from earlier exercises hold the reference."""
    parts = checks_of_parts(asg)
    reference = variants.reference_sources(asg)
    cells = {gid: reference[gid] for gid in solution_ids(asg) if gid == part or gid not in parts}
    results = run_visible(asg, cells, until=parts[part][-1], answered=False)
    assert not failures(results, parts[part]), \
        f"{asg}: the reference {part}, the other parts unanswered: {failures(results, parts[part])}"


# -- links, times and hints -----------------------------------------------------------------------------------------
BOOK_LINK = re.compile(r"\[([^\]]+)\]\(\.\./\.\./_build/html/book/(\w+)\.html(?:#([\w-]+))?\)")
DOWNLOAD = re.compile(r"\{download\}`[^`<]*<\.\./exercises/(\w+)/(\w+)\.ipynb>`")


def book_page(page: str) -> tuple[str, dict]:
    """The title of book/<page>.md and its sections: HTML id -> heading, as Sphinx makes them."""
    title, sections, fence = None, {}, None
    for line in (ROOT / "book" / f"{page}.md").read_text().splitlines():
        m = re.match(r"^(`{3,}|~{3,})", line)
        if m:
            fence = None if fence and m.group(1).startswith(fence) else fence or m.group(1)
            continue
        heading = re.match(r"^(#+) (.+)$", line) if fence is None else None
        if heading:
            text = heading.group(2).strip()
            if len(heading.group(1)) == 1 and title is None:
                title = text
            else:
                sections[make_id(text.replace("$", "").replace("`", ""))] = text
    return title, sections


def toc_pages() -> set:
    return set(re.findall(r"(?:root|file):\s*book/(\S+)", (ROOT / "_toc.yml").read_text()))


def chapter_of() -> dict:
    """assignment -> the book page whose exercise box offers its notebook for download."""
    found = {}
    for page in sorted(toc_pages()):
        for a, b in DOWNLOAD.findall((ROOT / "book" / f"{page}.md").read_text()):
            assert a == b and (ROOT / "exercises" / a / f"{a}.ipynb").exists(), (page, a)
            assert a not in found, f"{a} is offered by {found.get(a)} and {page}"
            found[a] = page
    return found


def test_every_chapter_with_an_exercise_offers_it():
    assert set(chapter_of()) == set(ASSIGNMENTS)


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_exercise_links_its_chapter_and_sections(asg):
    """The release links its chapter from the top, and each graded part the book's sections, by their names."""
    nb = notebooks.read(ROOT / "exercises" / asg / f"{asg}.ipynb")
    pages = toc_pages()
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for text, page, anchor in BOOK_LINK.findall(cell.source):
            assert page in pages, f"{asg} links book/{page}, which is not in _toc.yml"
            title, sections = book_page(page)
            if anchor:
                assert anchor in sections, f"{asg}: book/{page}.md has no section #{anchor}"
                assert text == f"{title} › {sections[anchor]}", f"{asg}: the link to #{anchor} reads {text!r}"
            else:
                assert text == title, f"{asg}: the link to book/{page} reads {text!r}, not its title {title!r}"
    chapter = chapter_of()[asg]
    intro = nb.cells[0].source
    assert any(page == chapter and not anchor for _, page, anchor in BOOK_LINK.findall(intro)), \
        f"{asg}: the introduction does not link its chapter, book/{chapter}"
    start = 0
    for end, cell in enumerate(nb.cells):                # a graded part: the cells after the last graded cell
        if not is_graded_test(cell):
            continue
        part, start = [c.source for c in nb.cells[start:end] if c.cell_type == "markdown"], end + 1
        name = nbgrader_meta(cell)["grade_id"]
        assert any("**Time:** about" in md for md in part), f"{asg}: {name}'s part gives no time"
        assert any(anchor for md in part for _, _, anchor in BOOK_LINK.findall(md)), \
            f"{asg}: {name}'s part links no section of the book"
        assert any(md.count("<details>") == 2 and "Hint 1" in md and "Hint 2" in md for md in part), \
            f"{asg}: {name}'s part needs two hints"


# -- the class report's re-teach links --------------------------------------------------------------------------------
STOP_WORDS = frozenset("""the and for not with from that this their them each which when where what whose than then
there they one two any all but into out over only more most same used use uses give gives given get gets must need
needs may can could would should has have had was were been being does done its also every other are you your how
why whatever those these is it as of to in on by an be at or so if""".split())


def _stem(word: str) -> str:
    for end in ("ing", "ed", "es", "s"):
        if word.endswith(end) and len(word) - len(end) >= 3:
            return word[:-len(end)]
    return word


def words(text: str) -> set:
    """The words of a text, lower case, stemmed, stop words aside (TeX's commands are words: `\\epsilon`)."""
    return {_stem(w) for w in re.findall(r"[a-z][a-z0-9]+", re.sub(r"\\([a-z]+)", r" \1 ", text.lower()))
            if w not in STOP_WORDS}


def section_texts(page: str) -> dict:
    """book/<page>.md's sections: HTML id -> the heading and everything under it (its code too) to the next heading."""
    found, current, fence = {}, None, None
    for line in (ROOT / "book" / f"{page}.md").read_text().splitlines():
        m = re.match(r"^(`{3,}|~{3,})", line)
        if m:
            fence = None if fence and m.group(1).startswith(fence) else fence or m.group(1)
        heading = re.match(r"^(#+) (.+)$", line) if fence is None else None
        if heading and len(heading.group(1)) > 1:
            current = make_id(heading.group(2).strip().replace("$", "").replace("`", ""))
            found[current] = heading.group(2)
        elif current:
            found[current] += "\n" + line
    return found


def shared_words(cause: str, page: str, anchor: str) -> set:
    """The words of `cause` that the section says too, but for those that more than half of the page's sections say."""
    texts = {a: words(t) for a, t in section_texts(page).items()}
    common = {w for w in set().union(*texts.values()) if sum(w in t for t in texts.values()) > len(texts) / 2}

    def same(a: str, b: str) -> bool:                    # or one holds the other: `order` in `unordered`
        return a == b or (min(len(a), len(b)) >= 5 and (a in b or b in a))
    return {w for w in words(cause) - common if any(same(w, x) for x in texts[anchor])}


REPORT_LINK = re.compile(r"^\.\./\.\./_build/html/book/(\w+)\.html#([\w-]+)$")


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_each_known_mistake_links_the_section_that_teaches_it(asg):
    """The class report links each known mistake (a misconception the evidence names) to one section of the book: the
    one its `SECTIONS` entry names, else the one its part's description names. The section is a heading of that page
    (the id Sphinx gives it, the title the notebooks write), and, but for its part's only section, it is about the
    mistake: it says a word of the mistake's cause that most of the page's sections do not. A part whose description
    names several sections has each of its mistakes name its own (the attention mask's is Masks, not the scale's)."""
    parts = report.book_sections(ROOT / "exercises", asg)           # no grading folder: the release in exercises/
    named = report.mistake_sections(asg)
    mistakes = {name: bug for name, bug in bugs(asg).items() if bug.cause}
    assert set(named) <= set(mistakes), f"{asg}: SECTIONS names no known mistake {set(named) - set(mistakes)}"
    for name, bug in mistakes.items():
        cell = next(iter(bug.fails))
        links = report.reteach(cell, [name], parts, named)
        assert len(links) == 1, f"{asg}: {name} links {len(links)} sections: name its own in SECTIONS"
        title, link = links[0]
        page, anchor = REPORT_LINK.match(link).groups()
        chapter, headings = book_page(page)
        assert anchor in headings, f"{asg}: {name} links book/{page}.md#{anchor}, which is no section"
        assert title == f"{chapter} › {headings[anchor]}", (name, title)
        if parts.get(cell) != links:
            assert shared_words(bug.cause, page, anchor), f"{asg}: {name}'s cause says nothing of #{anchor}"
    if asg == "attention":
        masks = [("Attention › Masks", "../../_build/html/book/attention.html#masks")]
        assert report.reteach("scaled_dot_product_attention_tests", ["sdpa_mask_inverted"], parts, named) == masks
        assert not shared_words(mistakes["sdpa_mask_inverted"].cause, "attention", "why-divide-by-sqrt-d")


def test_a_section_title_shows_its_math_as_text():
    """The report runs no script: `$\\sqrt{d}$` in a heading is drawn as √d (its letter in <var> in HTML)."""
    title = "Attention › Why divide by $\\sqrt{d}$?"
    assert report.tex_text(title) == "Attention › Why divide by √d?"
    assert report.tex_text(title, as_html=True) == "Attention › Why divide by √<var>d</var>?"
    assert report.tex_text("What $\\epsilon$ is for <b>", as_html=True) == "What ε is for &lt;b&gt;"
