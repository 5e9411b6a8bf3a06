"""The book builds offline with warnings as errors, serves its own MathJax, and leaks no secret; its pages run the
exercises' reference solutions and quote every trained result as mean ± sd over seeds."""
import ast
import html.parser
import json
import re
import statistics
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from helpers import ROOT, book_module, leaks, secret_lines

pytestmark = pytest.mark.xdist_group("book")
HTML = ROOT / "_build" / "html"


@pytest.fixture(scope="module")
def site():
    """Build the book with the one command the Makefile and the publishing workflow use."""
    jb = Path(sys.executable).parent / "jupyter-book"
    r = subprocess.run([str(jb), "build", "--all", "-W", "-n", "--keep-going", "."], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:]
    return HTML


def pages(site):
    return sorted(site.rglob("*.html"))


def test_every_toc_page_is_built(site):
    toc = (ROOT / "_toc.yml").read_text()
    for name in re.findall(r"(?:root|file):\s*(\S+)", toc):
        assert (site / f"{name}.html").exists(), name


def test_mathjax_is_served_by_the_site(site):
    assert (site / "_static" / "mathjax" / "tex-chtml.js").exists()
    with_math = [p for p in pages(site) if "tex-chtml.js" in p.read_text()]
    assert with_math, "no page loads MathJax"
    for page in with_math:
        assert re.search(r'<script[^>]+src="[./]*_static/mathjax/tex-chtml\.js', page.read_text()), page


def test_no_page_loads_anything_from_another_host(site):
    external = re.compile(r'<(script|link|img|iframe|source)\b[^>]*\b(src|href)="(https?:)?//', re.I)
    for page in pages(site):
        found = external.search(page.read_text())
        assert not found, f"{page.relative_to(site)} loads {found.group(0)}"


def test_site_offers_the_exercises_and_no_secret(site):
    downloads = list((site / "_downloads").rglob("*.ipynb"))
    assert downloads, "no exercise notebook is offered for download"
    secrets = secret_lines()
    for path in [*pages(site), *downloads, *site.rglob("*.txt"), *site.rglob("*.js")]:
        if "mathjax" not in str(path):
            assert not leaks(path.read_text(errors="replace"), secrets), path


# --- what a reader sees --------------------------------------------------------------------------------------

class _CellSources(html.parser.HTMLParser):
    """The text of every code cell's source (div.cell_input) on a built page, hidden inputs included."""

    def __init__(self):
        super().__init__()
        self.sources, self._depth, self._inside = [], 0, None

    def handle_starttag(self, tag, attrs):
        if tag == "div":
            self._depth += 1
            if self._inside is None and "cell_input" in (dict(attrs).get("class") or "").split():
                self._inside = self._depth
                self.sources.append("")

    def handle_endtag(self, tag):
        if tag == "div":
            if self._inside == self._depth:
                self._inside = None
            self._depth -= 1

    def handle_data(self, data):
        if self._inside is not None:
            self.sources[-1] += data


def cell_sources(page_html):
    parser = _CellSources()
    parser.feed(page_html)
    return parser.sources


BOOKKEEPING = re.compile(r"^[ \t]*(?:glue|glue_stat|glue_text|check)\(.*$", re.M)
@pytest.mark.parametrize("chapter", sorted(page.stem for page in (ROOT / "book").glob("*.md")))
def test_no_glue_or_check_call_is_shown(site, chapter):
    """glue(), glue_stat() and check() put numbers into the prose and stop the build when the prose is wrong: they
    live in cells tagged remove-cell, so that no reader sees them (a hide-input cell still shows them)."""
    sample = '<div class="cell_input docutils container"><div class="highlight"><pre>x = 1\n' \
             '<span class="n">glue</span><span class="p">(</span>"x", x)</pre></div></div>'
    assert BOOKKEEPING.findall(cell_sources(sample)[0]) == ['glue("x", x)'], "the parser must find a glue call"
    page = site / "book" / f"{chapter}.html"
    sources = cell_sources(page.read_text())
    shown = [line.strip() for source in sources for line in BOOKKEEPING.findall(source)]
    assert not shown, f"{chapter}.html shows {len(shown)} bookkeeping lines, the first: {shown[:3]}; " \
        "move them into a cell below, tagged remove-cell"


# --- the pages' experiments: one source for the exercises' code, every trained number over seeds ---------------

BOOK = ROOT / "book"
GLUE_REF = re.compile(r"\{glue:text\}`([\w.+-]+?)(?::[^`]*)?`")


def page_code(path):
    """The Python of a MyST page's code cells (their `:option:` lines left out), joined."""
    cells = re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", path.read_text(), flags=re.S | re.M)
    return "\n\n".join(re.sub(r"\A(?::\w+:.*\n)+", "", cell) for cell in cells)


def book_code():
    """Every page's code, and the experiment module the pages share."""
    code = {p.name: page_code(p) for p in sorted(BOOK.glob("*.md"))}
    code["experiments.py"] = (BOOK / "experiments.py").read_text()
    return code


def contract_names():
    """The names the solution cells define: each cell's grade_id and every function or class in it."""
    from autograder.authoring.variants import reference_sources

    names = set()
    for asg in sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir()):
        for grade_id, source in reference_sources(asg).items():
            names.add(grade_id)
            names |= {n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names


def bound_names(tree):
    """Every name a piece of code binds: definitions, assignments, loop targets, imports."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            yield node.id
        elif isinstance(node, ast.alias):
            yield (node.asname or node.name).split(".")[0]


def test_no_page_defines_an_exercise_function():
    """The pages use the reference solutions from the solution notebooks; they never define their own copy."""
    contract = contract_names()
    assert {"sinusoidal_encoding", "blockwise_attention", "TransformerBlock", "scaled_dot_product_attention"} \
        <= contract
    for name, code in book_code().items():
        defined = contract & set(bound_names(ast.parse(code)))
        assert not defined, f"{name} defines {sorted(defined)}: load them with experiments.reference(assignment)"


def test_no_page_trains_outside_the_seed_helper():
    """The only training loop is experiments.fit, and fit refuses to run outside seeds()."""
    for name, code in book_code().items():
        if name != "experiments.py":
            found = re.findall(r"torch\.optim|\boptim\.|\.step\(\)", code)
            assert not found, f"{name} trains with its own loop ({found}): use experiments.fit inside seeds()"
    ex = experiments()

    def batch(gen):
        return torch.randn(8, 3, generator=gen), torch.randint(0, 2, (8,), generator=gen)

    with pytest.raises(RuntimeError, match="inside seeds"):
        ex.fit(torch.nn.Linear(3, 2), batch, steps=2, loss=torch.nn.functional.cross_entropy)
    runs = ex.seeds(lambda seed: dict(loss=ex.fit(torch.nn.Linear(3, 2), batch, 5,
                                                  loss=torch.nn.functional.cross_entropy)[-1]), n=3)
    again = ex.seeds(lambda seed: dict(loss=ex.fit(torch.nn.Linear(3, 2), batch, 5,
                                                   loss=torch.nn.functional.cross_entropy)[-1]), n=3)
    assert runs["loss"].n == 3 and len(set(runs["loss"].values.tolist())) == 3, "the seeds must differ"
    assert torch.equal(runs["loss"].values, again["loss"].values), "a seed must give the same run again"


def test_stat_is_mean_and_sd_over_seeds():
    ex = experiments()
    a, b = ex.Stat([1.0, 2.0, 4.0]), ex.Stat([5.0, 6.0, 7.0])
    assert a.mean.item() == pytest.approx(statistics.mean([1, 2, 4]))
    assert a.sd.item() == pytest.approx(statistics.stdev([1, 2, 4]))
    assert format(a, ".2f") == "2.33 ± 1.53"
    assert b.above(a) and not a.above(b) and a.separated(b)
    assert not ex.Stat([1.0, 6.0]).separated(ex.Stat([5.0, 7.0]))
    curve = ex.stack([a, b])                                   # (3 seeds, 2 settings)
    assert curve.values.shape == (3, 2) and curve[1].mean.item() == 6.0


def _names(node, ctx=ast.Load):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def _from_seeds(node, tainted):
    """Whether an expression calls seeds() or reads a name that holds what seeds() returned."""
    calls = any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "seeds" for n in ast.walk(node))
    return calls or bool(_names(node) & tainted)


def raw_glues_of_seed_results(statements, tainted=None):
    """The glue()/glue_text() calls whose arguments hold a result of seeds(), in the order the code runs.

    A name holds a result of seeds() from an assignment (or a loop) that reads one, until it is bound to something
    else; function bodies are judged where their results are used."""
    tainted = set() if tainted is None else tainted
    found = []
    for st in statements:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for node in ast.walk(st):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("glue", "glue_text"):
                if any(_from_seeds(a, tainted) for a in [*node.args, *(k.value for k in node.keywords)]):
                    found.append(ast.unparse(node))
        if isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and st.value is not None:
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            bound = set().union(*(_names(t, ast.Store) for t in targets))
            if _from_seeds(st.value, tainted):
                tainted |= bound
            elif not isinstance(st, ast.AugAssign):
                tainted -= bound
        elif isinstance(st, (ast.For, ast.AsyncFor)):
            if _from_seeds(st.iter, tainted):
                tainted |= _names(st.target, ast.Store)
            found += raw_glues_of_seed_results(st.body + st.orelse, tainted)
        elif isinstance(st, (ast.With, ast.If, ast.While, ast.Try)):
            for block in ("body", "orelse", "finalbody"):
                found += raw_glues_of_seed_results(getattr(st, block, []), tainted)
    return found


def test_trained_numbers_reach_the_prose_only_through_glue_stat():
    """A result of seeds() is glued by glue_stat (mean ± sd, with its _sd and _n twins), never by glue itself."""
    bad = "runs = seeds(run)\nacc = runs['acc'].mean\nglue('acc', 100 * acc)\n"
    assert raw_glues_of_seed_results(ast.parse(bad).body), "the search must find a raw glue of a seed result"
    for name, code in book_code().items():
        if name != "experiments.py":
            found = raw_glues_of_seed_results(ast.parse(code).body)
            assert not found, f"{name} glues results of seeds() without their spread: {found}; use glue_stat"


def glued(page):
    """name -> text of every value an executed page glued (the build writes them next to the executed notebook)."""
    path = ROOT / "_build" / "jupyter_execute" / "book" / f"{page.stem}.glue.json"
    return {name: out["data"]["text/plain"] for name, out in json.loads(path.read_text()).items()}


def test_every_trained_result_has_its_sd_and_seed_count(site):
    """Each glued "mean ± sd" has its `_sd` and `_n` twins, at least 3 seeds, and its section says how many."""
    stats_seen = 0
    for page in sorted(BOOK.glob("*.md")):
        if not page_code(page):
            continue                                            # no code: nothing executed, nothing glued
        values = glued(page)
        stats = {k for k, v in values.items() if " ± " in v}
        stats_seen += len(stats)
        for key in stats:
            assert f"{key}_sd" in values and f"{key}_n" in values, f"{page.name}: {key} has no _sd or _n twin"
            assert int(values[f"{key}_n"]) >= 3, f"{page.name}: {key} comes from {values[f'{key}_n']} seeds"
        for section in re.split(r"^#{1,4} ", page.read_text(), flags=re.M):
            refs = set(GLUE_REF.findall(section))
            if refs & stats:
                assert any(r.endswith("_n") and r[:-2] in stats for r in refs), \
                    f"{page.name}: the section {section.splitlines()[0]!r} quotes trained results " \
                    "without saying over how many seeds (a glued `<key>_n`)"
    assert stats_seen > 50


def test_the_execution_cache_follows_the_imported_code(tmp_path):
    """The build's extension hashes the code the pages import, and clears the cache when the hash changes."""
    execution_cache = book_module("execution_cache")
    from jupyter_cache import get_cache

    from autograder import notebooks

    before = execution_cache.digest()
    original = notebooks.learner_cells
    try:
        notebooks.learner_cells = lambda nb: [{**c, "source": c["source"] + "\n# changed"} for c in original(nb)]
        assert execution_cache.digest() != before, "a change to a solution cell must change the hash"
    finally:
        notebooks.learner_cells = original
    assert execution_cache.digest() == before

    cache = tmp_path / ".jupyter_cache"
    get_cache(str(cache)).list_cache_records()                      # a real cache, with its database
    (cache / "page").write_text("an executed page")
    (cache / execution_cache.STAMP).write_text("the hash of older code")
    app = types.SimpleNamespace(config=types.SimpleNamespace(nb_execution_mode="cache",
                                                             nb_execution_cache_path=str(cache)))
    execution_cache.clear_stale_cache(app)
    assert not (cache / "page").exists(), "a cache built with other code must be cleared"
    assert (cache / execution_cache.STAMP).read_text() == before
    (cache / "page").write_text("an executed page")
    execution_cache.clear_stale_cache(app)
    assert (cache / "page").exists(), "a cache built with the same code must be kept"


def experiments():
    return book_module("experiments")
