"""The book builds offline with warnings as errors, serves its own MathJax, and leaks no secret; its pages run the
exercises' reference solutions and quote every trained result as mean ± sd over seeds."""
import ast
import html.parser
import json
import re
import statistics
import types

import pytest
import torch
from helpers import ROOT, book_module, leaks, secret_lines

pytestmark = pytest.mark.xdist_group("book")


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


# --- every sentence that states a measured number or a trend: rendered from the data, or checked where it stands ---

CLAIM_PAGES = ["positional_encoding.md", "attention.md", "residual.md", "measuring_speed.md", "together.md",
               "fused_attention.md"]
# Words of measurement in sentences that state no measurement of the page: what a cited paper found or argues, what a
# definition or a formula says, a setting the experiment chooses, what a GPU would show (the build has none), the
# grading rule in words. Each fragment (words of the sentence as written) exempts the words inside it and nothing else;
# one that exempts nothing fails the test.
CITED, DEFINED = "a cited paper's result or argument", "what a definition or a formula says, not a measurement"
SETTING, GPU = "the experiment's setting", "what a GPU does: this build has none, and its cell runs only with CUDA"
GRADER = "the speed rule in words; its numbers are checked where the chapter states them"
NOT_MEASURED = {
    "residual.md": {
        "so that their sum stays bounded": "what a remedy is for, not a measurement",
        "reached a higher training error than shallower ones": CITED,
        "(e) best, (b) worst, and (c) worse than the original (a)": CITED,
        "a training loss that falls more slowly at the start of training": CITED,
        "(c) came out worse than the original there": CITED,
        "does not shrink as layers are added, while pre-LN's shrinks like": CITED,
        "post-LN's gradients grow from the bottom layers to the top ones while pre-LN's stay level": CITED,
        "its adaptive learning rate varies far too much": CITED,
        "the stream grows by one layer's width at every layer, and each layer's input matrix grows with it": DEFINED,
        "the input stays": DEFINED,
        "it shrinks or grows exponentially with depth": DEFINED,
        "makes the stream and every layer's input grow with depth": DEFINED,
    },
    "positional_encoding.md": {
        "the stream doubles to": DEFINED,
        "a concatenation either halves the token's width or doubles the stream": DEFINED,
        "We measure how much each term varies across the keys": SETTING,
        "a penalty from each attention score that grows with the distance": DEFINED,
        "Its penalty grows with distance whatever the length": DEFINED,
        "with a bigger table, the rows there are still random": DEFINED,
    },
    "attention.md": {
        "it has done so since PyTorch 2.5": CITED,
        "far fewer forms than the untied product can make": DEFINED,
        "It is worse than symmetric": DEFINED,
        "if that other token has a larger self-score": DEFINED,
        "would need the self-scores to decrease all along the sequence": DEFINED,
        "because tying also halves the parameters of the scores": DEFINED,
        "as the models get much better at using the earlier context": CITED,
        "at a cost of 0.15 BLEU on English–Russian": CITED,
        "whenever the maximum grows": DEFINED,
        "for growing": SETTING,
        "its own is the largest, so it gives itself the largest weight": DEFINED,
        "only if that one has a larger self-score": DEFINED,
        "rescales them when the maximum grows": DEFINED,
    },
    "measuring_speed.md": {
        "your attention must run about as fast as the reference solution": GRADER,
        'what "as fast as" means': GRADER,
        "50 times (each sample is the average of 10 calls)": SETTING,
        "fell in the busy period": SETTING,
        "Writing a buffer larger than the cache before each sample evicts them": GPU,
        "expect the first line to be much smaller than the others": GPU,
        "the synchronised wall clock to be a little larger than the events": GPU,
        "the warm-cache events to be the smallest": GPU,
        "a small L2 cache per core and a larger L3 shared by the cores": "how a CPU's caches are laid out",
    },
    "fused_attention.md": {
        "runs several times faster": CITED,
        "registers and up to 227 KB of shared memory per block of threads": CITED,
        "moves 3.35 TB/s from HBM3": CITED,
    },
}
RENDERED = "⟨glued⟩"
INLINE = [(re.compile(r"\{glue:text\}`[^`]*`"), f" {RENDERED} "),   # a value the build computed
          (re.compile(r"\{[\w:-]+\}`[^`]*`"), " ⟨role⟩ "),            # {cite:t}, {doc}, {download}: not prose
          (re.compile(r"\$[^$]+\$"), " ⟨math⟩ "),                     # a formula states what it derives
          (re.compile(r"`[^`]+`"), " ⟨code⟩ ")]
NUMBER = r"\d[\d,]*(?:\.\d+)?(?:e-?\d+)?"
# A number typed into the prose as a measurement: with ± or ≈, a percentage, "about 3", "4 times", a decimal.
TYPED_NUMBER = re.compile(rf"[±≈]\s*{NUMBER}|{NUMBER}\s*%|\b(?:about|around|roughly|nearly|almost|near|above|below|"
                          rf"at least|at most|up to)\s+{NUMBER}|{NUMBER}\s*(?:times|-fold)\b|\b\d+\.\d+\b")
# A trend or a comparison. "above"/"below" compare when something follows that they compare with ("below every seed",
# "above 90", "above (e)"), not as places ("as above", "Below is", "below the diagonal"); "every seed" says what held
# on each, unless a figure shows them.
TREND = re.compile(r"\b(?:larger|smaller|bigger|greater|higher|lower|faster|slower|better|worse|fewer|closer|further|"
                   r"more than|less than|went up|went down|goes up|goes down|grows?|grew|growing|shrinks?|shrank|"
                   r"shrinking|falls?|fell|rises?|rose|"
                   r"drops? (?:to|from|by|below)|collapses?|explodes?|vanish(?:es|ed)?|drifts?|increases?|decreases?|"
                   r"doubles|doubled|halves|halved|exceeds?|beats?|outperforms?|varies|vary|spread|stays?|level|"
                   r"almost exactly|nearly exactly|as (?:fast|slowly|good|high|low|large|small) as|"
                   r"(?<!shows )every seed|"
                   # a superlative as a verdict ("ALiBi ..., the lowest"), not as a name ("the largest tensor")
                   r"(?:largest|smallest|highest|lowest|fastest|slowest|furthest|best|worst)(?! [a-z])|"
                   r"(?:above|below)(?= (?:\d|\(|⟨glued⟩|every|all|any|each|that|those|its|their|chance|zero|one|half|"
                   r"the (?!diagonal|main)))"
                   r")\b", re.I)


def prose_blocks(text):
    """(line, text) of each paragraph, list item and table row of a MyST page: the code cells, code blocks, math
    blocks, comments and directive options left out (the text inside a directive, an exercise's, stays)."""
    lines = text.split("\n")
    if lines[0] == "---":                                           # the front matter
        end = lines.index("---", 1)
        lines = [""] * (end + 1) + lines[end + 1:]
    out, cur, start, fence, math = [], [], 0, None, False

    def flush():
        if cur:
            out.append((start, " ".join(cur)))
            cur.clear()

    for i, line in enumerate(lines, start=1):
        s = line.strip()
        if fence:
            fence = None if s == fence else fence
            continue
        if math:
            math = not s.endswith("$$")
            continue
        opening = re.match(r"(`{3,})(.*)", s)
        if opening:
            flush()
            if opening.group(2) and not opening.group(2).startswith(("{exercise}", "{solution}")):
                fence = opening.group(1)                          # a code cell or block: skipped to its closing
            continue
        if s.startswith("$$"):
            flush()
            math = not (len(s) > 2 and s.endswith("$$"))
            continue
        if not s or s.startswith(("#", "%", ":::")) or re.match(r":\w+:", s):
            flush()
            continue
        if s.startswith("|") or re.match(r"(?:[-*]|\d+\.)\s", s):
            flush()                                               # a table row, a list item: each its own block
        if not cur:
            start = i
        cur.append(s)
        if s.startswith("|"):
            flush()
    flush()
    return out


def prose_sentences(block):
    """A block's sentences, inline markup replaced: a glued value by ⟨glued⟩, a formula by ⟨math⟩, code by ⟨code⟩."""
    for pattern, repl in INLINE:
        block = pattern.sub(repl, block)
    block = re.sub(r"\s+", " ", block.replace("*", "")).strip()
    return re.split(r"(?<!\bal\.)(?<!\be\.g\.)(?<!\bi\.e\.)(?<=[.!?])\s+(?=[A-Z(⟨\"-])", block)


def _normal(text):
    return re.sub(r"\s+", " ", re.sub(r"[*\"]", "", text)).strip().lower()


def claim_windows(sentence):
    """The words of a sentence that state a measurement, each with the word on either side of it in its clause: what
    a check's claim must quote. A question states nothing; a number the build glued in is rendered, not typed."""
    if sentence.rstrip().endswith("?"):
        return []
    windows = []
    for m in [*TYPED_NUMBER.finditer(sentence), *TREND.finditer(sentence)]:
        before = re.sub(r"[.!?\"]", "", re.split(r"[,;:()⟨⟩]", sentence[:m.start()])[-1]).split()
        after = re.sub(r"[.!?\"]", "", re.split(r"[,;:()⟨⟩]", sentence[m.end():])[0]).split()
        windows.append(_normal(" ".join(before[-1:] + [m.group(0)] + after[:1])))
    return windows


def page_checks(text):
    """(line, claim) of every check(claim, holds) the build executes: a call at the top level of a code cell (not
    in a function, a branch or a loop, not in a cell tagged to skip execution or to expect an exception), its claim
    a string written out, its verdict not a constant."""
    found = []
    for m in re.finditer(r"^```\{code-cell\}[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        options = re.match(r"(?::\w+:.*\n)*", m.group(1)).group(0)
        if re.search(r"skip-execution|raises-exception", options):
            continue
        line = text.count("\n", 0, m.start(1)) + 1 + options.count("\n")
        for st in ast.parse(m.group(1)[len(options):]).body:
            call = st.value if isinstance(st, ast.Expr) else None
            if (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "check" and len(call.args) == 2
                    and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)
                    and not isinstance(call.args[1], ast.Constant)):
                found.append((line + st.lineno - 1, _normal(call.args[0].value)))
    return found


def unchecked_claims(text, exempt=()):
    """(line, sentence, windows) of each sentence with words that state a measurement that no check quotes: a check
    executed in the sentence's section (from its heading to the next heading; in "Key takeaways", anywhere before it
    in the page). A window inside one of the `exempt` fragments of the sentence is left out; the fragments that left
    one out are returned too."""
    lines = text.split("\n")
    headings = [i for i, line in enumerate(lines, start=1) if re.match(r"#{1,6} ", line)] + [len(lines) + 1]
    checks = page_checks(text)
    found, used = [], set()
    for line, block in prose_blocks(text):
        start = max([h for h in headings if h < line], default=0)
        end = min(h for h in headings if h > line)
        if start and lines[start - 1].lstrip("#").strip() == "Key takeaways":
            start, end = 0, line
        claims = [claim for at, claim in checks if start < at < end]
        for sentence in prose_sentences(block):
            missing = []
            for w in claim_windows(sentence):
                if any(w in claim for claim in claims):
                    continue
                fragments = [f for f in exempt if _normal(f) in _normal(sentence) and w in _normal(f)]
                used.update(fragments)
                if not fragments:
                    missing.append(w)
            if missing:
                found.append((line, sentence, missing))
    return found, used


RULE_PAGE = """# A page made for the rule

## Results

```{code-cell} ipython3
:tags: [remove-cell]
check("the loss grows with depth on every seed", grows)
check("the error stays small", True)
if ok:
    check("the accuracy falls below 50 %", low)
```

```{code-cell} ipython3
:tags: [raises-exception]
check("the gap is about 40 % wider", wide)
```

The loss grows with depth on every seed (from {glue:text}`a` to {glue:text}`b`). The accuracy falls below 50 %.
The gap is about 40 % wider. Position 3 is drawn above, with {glue:text}`n` seeds. Does the gap grow?
The error stays small. They found that deeper networks reached a higher error.

```{code-cell} ipython3
check("the width halves from layer to layer", halves)
```

The width halves from layer to layer.

## Elsewhere

The loss grows with depth on every seed.

## Key takeaways

- The loss grows with depth on every seed, and the width halves from layer to layer.
"""


def test_the_claim_rule_both_ways():
    """A sentence that states a trend or types a measured number passes only when a check executed in its section
    quotes its words: not a check in a branch, in a cell allowed to fail, with a constant verdict, or under another
    heading (but in "Key takeaways", any check above). A glued number, a place on the page and a question state
    nothing to check; an exempted fragment exempts only the words inside it."""
    found, used = unchecked_claims(RULE_PAGE, {"They found that deeper networks reached a higher error": CITED})
    flagged = {(line, sentence): missing for line, sentence, missing in found}
    assert {sentence for _, sentence in flagged} == {
        "The accuracy falls below 50 %.",                          # its check is in a branch
        "The gap is about 40 % wider.",                            # its check's cell may raise
        "The error stays small.",                                  # its check's verdict is a constant
        "The loss grows with depth on every seed."}, flagged       # its check is in another section
    assert flagged[next(k for k in flagged if k[1] == "The accuracy falls below 50 %.")] == \
        ["falls below 50 %", "accuracy falls below", "falls below 50"]
    assert used == {"They found that deeper networks reached a higher error"}
    assert not unchecked_claims(RULE_PAGE.replace("if ok:\n    check", "check"), {})[0][0][1].startswith("The acc")
    above = RULE_PAGE.replace("The width halves from layer to layer.\n\n## Else", "## Else")
    above = above.replace("The gap is about", "The width halves from layer to layer. The gap is about")
    assert "The width halves from layer to layer." not in {s for _, s, _ in unchecked_claims(above, {})[0]}, \
        "a check further down the same section backs a sentence above it"
    cell = '```{code-cell} ipython3\ncheck("the width'
    later = above.replace(cell, "### Below\n\n" + cell)
    assert "The width halves from layer to layer." in {s for _, s, _ in unchecked_claims(later, {})[0]}, \
        "a check under the next heading does not back a sentence above it"
    assert not unchecked_claims("The gap grows.\n", {"gap grows": DEFINED})[0]
    assert unchecked_claims("The gap grows, and the loss falls.\n", {"gap grows": DEFINED})[0][0][2] == \
        ["loss falls"], "an exempted fragment exempts the words inside it, no more"


@pytest.mark.parametrize("page", CLAIM_PAGES)
def test_every_measured_sentence_is_rendered_or_checked(page):
    """Every sentence of a chapter that states a measured number or a trend either has its numbers glued in by the
    build, or sits in the section of a check() that the build executes and that quotes the words stating the trend: a
    change of
    the data that contradicts the sentence stops the build. The list of sentences that state no measurement of the
    page (NOT_MEASURED) holds no fragment that exempts nothing."""
    text = (BOOK / page).read_text()
    exempt = NOT_MEASURED.get(page, {})
    found, used = unchecked_claims(text, exempt)
    assert not found, f"{page}: {len(found)} sentences state a measurement that no check quotes; the first:\n" + \
        "\n".join(f"  line {line}: {sentence}\n    unchecked: {missing}" for line, sentence, missing in found[:5])
    assert used == set(exempt), f"{page}: NOT_MEASURED fragments that exempt nothing: {set(exempt) - used}"
    backed = [w for line, block in prose_blocks(text) for s in prose_sentences(block) for w in claim_windows(s)]
    assert backed and page_checks(text), f"{page}: the rule found nothing to check"
