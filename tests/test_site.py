"""The published site, tested in a real browser: Debian's Chromium driven by Playwright, headless,
against _build/html served on 127.0.0.1, with every request to another host recorded and aborted.

Each page of _toc.yml is opened once; the checks below read what that visit recorded. A full-page
screenshot of each is written to _build/screenshots/<page>.png so a person can see what was tested.
The browser is found at $CHROMIUM (default /usr/bin/chromium; `make test` installs it when missing).
A missing browser or playwright fails these tests: they never skip.
"""
import html.parser
import json
import re
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import pytest
from site_server import ROOT, SiteServer, toc_pages

pytestmark = pytest.mark.xdist_group("book")  # after test_book.py, on its worker: one build per run

SHOTS = ROOT / "_build" / "screenshots"
PAGES = toc_pages()
SEARCHES = {"residual": "book/residual", "positional": "book/positional_encoding",
            "attention": "book/attention"}

WAIT_FOR_SITE = """async () => {
    // MathJax typesets after the load event; its promise settles when the first typeset is done.
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
    const imgs = [...document.images];
    imgs.forEach(i => { i.loading = "eager"; });
    const settled = Promise.all(imgs.map(i => i.complete ? null :
        new Promise(r => { i.addEventListener("load", r); i.addEventListener("error", r); })));
    await Promise.race([settled, new Promise(r => setTimeout(r, 10000))]);
    await document.fonts.ready;
}"""

INSPECT = r"""() => {
    const math = [...document.querySelectorAll(".math")];
    return {
        math: math.length,
        mathjax: document.querySelectorAll("mjx-container").length,
        unrendered: math.filter(m => !m.querySelector("mjx-container"))
                        .map(m => m.textContent.trim().slice(0, 80)),
        // TeX that MathJax could not read: an merror, or an undefined macro it shows in red.
        math_errors: (window.MathJax && MathJax.startup && MathJax.startup.document
                      && MathJax.startup.document.math ? [...MathJax.startup.document.math] : [])
                        .filter(item => /<merror|<mtext mathcolor="red">\\/
                                        .test(MathJax.startup.toMML(item.root)))
                        .map(item => item.math.trim().slice(0, 120)),
        images: document.images.length,
        broken_images: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))
                        .map(i => i.getAttribute("src") || i.outerHTML.slice(0, 120)),
        links: [...document.querySelectorAll("a[href]")].map(a => a.href),
        ids: [...document.querySelectorAll("[id]")].map(e => e.id)
                .concat([...document.querySelectorAll("a[name]")].map(a => a.name)),
    };
}"""

# Run after the screenshot: it opens every toggle, so that the code of hide-input cells is measured too.
OVERFLOW = r"""() => {
    document.querySelectorAll("details").forEach(d => { d.open = true; });
    const code = [...document.querySelectorAll("div.highlight pre, div.cell_output pre")];
    const math = [...document.querySelectorAll("div.math, mjx-container[display='true']")];
    const wide = e => e.scrollWidth > e.clientWidth + 1;
    const say = e => `${e.matches("pre") ? "code" : "math"} ${e.scrollWidth} px in ${e.clientWidth} px: `
                     + e.textContent.trim().replace(/\s+/g, " ").slice(0, 70);
    return {code: code.length, math: math.length, overflowing: [...code, ...math].filter(wide).map(say)};
}"""

# After OVERFLOW (toggles open): each line of code that wraps, and where its continuation starts against where its
# text starts (its indentation included); a continuation must hang at the line's indentation and 4 characters more.
HANGING = r"""() => {
    const lines = [...document.querySelectorAll("div.cell div.highlight pre span.line")];
    const wrapped = [], flat = [];
    for (const line of lines) {
        const range = document.createRange();
        range.selectNodeContents(line);
        const rects = [...range.getClientRects()].filter(r => r.width > 0);
        const tops = [...new Set(rects.map(r => Math.round(r.top)))].sort((a, b) => a - b);
        if (tops.length < 2 || !line.textContent.trim()) continue;
        const probe = document.createElement("span");
        probe.textContent = "0".repeat(40);
        line.closest("pre").appendChild(probe);
        const ch = probe.getBoundingClientRect().width / 40;
        probe.remove();
        const left = Math.min(...rects.filter(r => Math.round(r.top) === tops[0]).map(r => r.left));
        const next = Math.min(...rects.filter(r => Math.round(r.top) !== tops[0]).map(r => r.left));
        const indent = line.textContent.length - line.textContent.trimStart().length;
        const say = `${line.textContent.trim().slice(0, 60)}: continues ${((next - left) / ch).toFixed(1)} ch in, ` +
                    `indented ${indent}`;
        wrapped.push(say);
        if (next - left < (indent + 4) * ch - 1) flat.push(say);
    }
    return {lines: lines.length, wrapped, flat};
}"""

# --- the site, the server and the browser ----------------------------------------------------------

@pytest.fixture(scope="module")
def server(site):
    with SiteServer(site) as s:
        yield s


@pytest.fixture(scope="module")
def context(browser, server):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    ctx.set_default_timeout(20_000)
    # Nothing may leave 127.0.0.1: such requests are recorded by the page (below) and aborted here,
    # so a test never depends on the outside world.
    ctx.route(lambda url: not _local(url), lambda route: route.abort("blockedbyclient"))
    yield ctx
    ctx.close()


def _local(url):
    parts = urlsplit(url)
    return parts.scheme in ("data", "blob", "about") or parts.hostname == "127.0.0.1"


class Watch:
    """What a page does while it is open: console errors, uncaught exceptions, every request."""

    def __init__(self, page):
        self.errors, self.requests, self.failed = [], [], []
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"uncaught {exc.name}: {exc.message}"))
        page.on("request", lambda req: self.requests.append(req.url))
        page.on("requestfailed", lambda req: _local(req.url) and self.failed.append(
            f"{req.url}: {req.failure}"))
        page.on("response", lambda res: res.status >= 400 and self.failed.append(
            f"{res.url}: HTTP {res.status}"))

    def _console(self, msg):
        if msg.type == "error":
            loc = msg.location or {}
            self.errors.append(f"{msg.text} ({loc.get('url', '')}:{loc.get('lineNumber', '')})")

    @property
    def external(self):
        return sorted({u for u in self.requests if not _local(u)})


_visits = {}


@pytest.fixture(scope="module")
def visit(context, server):
    """Open a page of the book once (cached): wait for MathJax, images and fonts, record, screenshot."""
    def open_page(name):
        if name not in _visits:
            page = context.new_page()
            watch = Watch(page)
            response = page.goto(server.url + f"{name}.html", wait_until="load")
            page.wait_for_load_state("networkidle")
            page.evaluate(WAIT_FOR_SITE)
            seen = page.evaluate(INSPECT)
            SHOTS.mkdir(parents=True, exist_ok=True)
            shot = SHOTS / f"{Path(name).name}.png"
            page.screenshot(path=shot, full_page=True)
            seen["overflow"] = page.evaluate(OVERFLOW)
            seen["hanging"] = page.evaluate(HANGING)
            _visits[name] = dict(seen, status=response.status if response else None, url=page.url,
                                 errors=watch.errors, external=watch.external, failed=watch.failed,
                                 shot=shot)
            page.close()
        return _visits[name]
    return open_page


def _source(name):
    for suffix in (".md", ".ipynb"):
        if (ROOT / f"{name}{suffix}").exists():
            return (ROOT / f"{name}{suffix}").read_text()
    raise FileNotFoundError(name)


def _has_math(source):
    """Whether MyST source holds math outside code: $...$, $$...$$ or an amsmath environment."""
    prose = re.sub(r"^(```|~~~)[^\n]*\n.*?^\1[ \t]*$", "", source, flags=re.S | re.M)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return bool(re.search(r"\$[^$\s]|\$\$|\\begin\{(equation|align|gather|multline)", prose))


class _Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key == "id" or (tag == "a" and key == "name"):
                self.ids.add(value)


_targets = {}


def _fetch(context, url):
    """(status, ids of the document) of a same-origin URL, fetched once per run."""
    if url not in _targets:
        r = context.request.get(url, max_redirects=5)
        ids = set()
        if r.ok and "html" in r.headers.get("content-type", ""):
            parser = _Ids()
            parser.feed(r.text())
            ids = parser.ids
        _targets[url] = (r.status, ids)
    return _targets[url]


# --- every page of the table of contents ---------------------------------------------------------

def test_the_site_root_leads_to_the_book(context, server):
    page = context.new_page()
    try:
        response = page.goto(server.url, wait_until="load")
        assert response.status == 200
        page.wait_for_url(f"{server.url}{PAGES[0]}.html", timeout=10_000)
    finally:
        page.close()


@pytest.mark.parametrize("name", PAGES)
def test_page_loads_with_everything_it_asks_for(visit, name):
    v = visit(name)
    assert v["status"] == 200, v["url"]
    assert not v["failed"], f"{name}: requests of the site that failed:\n" + "\n".join(v["failed"])


@pytest.mark.parametrize("name", PAGES)
def test_no_console_errors(visit, name):
    v = visit(name)
    assert not v["errors"], f"{name}: console errors:\n" + "\n".join(v["errors"])


@pytest.mark.parametrize("name", PAGES)
def test_no_request_leaves_the_site(visit, name):
    v = visit(name)
    assert not v["external"], f"{name} requested other hosts:\n" + "\n".join(v["external"])


@pytest.mark.parametrize("name", PAGES)
def test_math_is_rendered_by_mathjax(visit, name):
    v = visit(name)
    if _has_math(_source(name)):
        assert v["math"] > 0, f"{name}.md has math but the page has no math element"
        assert v["mathjax"] > 0, f"{name}: MathJax rendered nothing"
    assert not v["unrendered"], f"{name}: math MathJax did not render: {v['unrendered'][:10]}"
    assert not v["math_errors"], f"{name}: MathJax errors: {v['math_errors']}"


@pytest.mark.parametrize("name", PAGES)
def test_every_image_loads(visit, name):
    v = visit(name)
    assert not v["broken_images"], f"{name}: images that did not load: {v['broken_images']}"


@pytest.mark.parametrize("name", PAGES)
def test_every_internal_link_resolves(visit, context, server, name):
    v = visit(name)
    here = f"{server.url}{name}.html"
    broken = []
    for href in sorted(set(v["links"])):
        if not href.startswith(server.url):
            continue  # another site (a reference, say): the reader's browser follows it, not ours
        target, fragment = urldefrag(href)
        status, ids = _fetch(context, target)
        if status != 200:
            broken.append(f"{href}: HTTP {status}")
        elif fragment and target == here and unquote(fragment) not in set(v["ids"]) | ids:
            broken.append(f"{href}: no element with id {unquote(fragment)!r} on this page")
        elif fragment and target != here and unquote(fragment) not in ids:
            broken.append(f"{href}: no element with id {unquote(fragment)!r} on {target}")
    assert not broken, f"{name}: broken internal links:\n" + "\n".join(broken)


@pytest.mark.parametrize("name", PAGES)
def test_exercise_downloads_are_the_notebooks(visit, context, server, name):
    v = visit(name)
    offered = re.findall(r"\{download\}`[^`<]*<([^>`]+\.ipynb)>`", _source(name))
    links = sorted({urldefrag(h)[0] for h in v["links"]
                    if h.startswith(server.url + "_downloads/") and h.endswith(".ipynb")})
    assert len(links) == len(set(offered)), f"{name}: the source offers {offered}, the page links {links}"
    for link in links:
        r = context.request.get(link)
        assert r.status == 200, f"{link}: HTTP {r.status}"
        notebook = json.loads(r.body())
        assert isinstance(notebook.get("cells"), list) and notebook["cells"], f"{link} has no cells"
        assert notebook.get("nbformat") == 4, link
    for path in offered:
        release = json.loads((ROOT / name).parent.joinpath(path).resolve().read_text())
        same = [link for link in links if link.endswith("/" + Path(path).name)]
        assert same, f"{name}: no download link for {path}"
        assert json.loads(context.request.get(same[0]).body()) == release, \
            f"{same[0]} is not the current {path}"


@pytest.mark.parametrize("name", PAGES)
def test_no_code_or_math_is_wider_than_the_page(visit, name):
    """At 1280 px, every code block, printed output and displayed formula fits the column: none scrolls sideways
    (or is cut off), so every line can be read at once."""
    v = visit(name)
    found = v["overflow"]
    if name != "book/references":
        assert found["code"] + found["math"] > 0, f"{name}: no code block or formula was measured"
    assert not found["overflowing"], f"{name}: wider than the page:\n" + "\n".join(found["overflowing"])


@pytest.mark.parametrize("name", PAGES)
def test_wrapped_code_keeps_its_indentation(visit, name):
    """A line of code too long for the column wraps under itself, past its own indentation (a hanging indent), never
    back to column 0, where it would read as another line of Python."""
    found = visit(name)["hanging"]
    if name != "book/references":
        assert found["lines"] > 0, f"{name}: no line of code was measured"
    assert not found["flat"], f"{name}: continuations not under their line:\n" + "\n".join(found["flat"])


def test_some_code_line_wraps_at_1280_px(visit):
    """The check above is not empty: at 1280 px the positional-encoding chapter has lines that wrap."""
    assert visit("book/positional_encoding")["hanging"]["wrapped"]


@pytest.mark.parametrize("name", PAGES)
def test_screenshot_shows_the_page(visit, name):
    shot = visit(name)["shot"]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, shot


# --- search ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("word", SEARCHES)
def test_search_finds_the_chapter(context, server, word):
    page = context.new_page()
    watch = Watch(page)
    try:
        page.goto(f"{server.url}search.html?q={word}", wait_until="load")
        page.wait_for_function(
            "() => /Search finished|did not match/.test("
            "document.querySelector('#search-results p.search-summary')?.innerText || '')")
        found = page.eval_on_selector_all("#search-results ul.search li a", "as => as.map(a => a.href)")
    finally:
        page.close()
    pages = {urldefrag(h)[0].removeprefix(server.url) for h in found}
    assert f"{SEARCHES[word]}.html" in pages, f"searching {word!r} found {sorted(pages)}"
    assert not watch.errors, f"search for {word!r}: console errors:\n" + "\n".join(watch.errors)
    assert not watch.external, f"search for {word!r} requested other hosts: {watch.external}"


# --- the interactive graph of the whole network (book/network_graph.md) -----------------------------------------

# The details panel and the search box of the graph page, as drawn: the panel's width, whether every key of the node's
# table is on one line, and whether the search box shows its whole placeholder.
PANEL = r"""() => {
    const info = document.querySelector(".graph-info"), search = document.querySelector(".graph-search");
    const lines = el => { const r = document.createRange(); r.selectNodeContents(el);
                          return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; };
    const ctx = document.createElement("canvas").getContext("2d");
    const style = getComputedStyle(search);
    ctx.font = style.font;
    const room = search.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    return {width: info.getBoundingClientRect().width,
            keys_on_one_line: [...info.querySelectorAll("td:first-child")].every(td => lines(td) === 1),
            placeholder: ctx.measureText(search.placeholder).width, room: room};
}"""


def test_graph_page_panel_and_search_fit_at_1280_px(context, server):
    """At 1280 px the details panel is wide enough for its keys (each on one line) and the search box shows its
    whole placeholder."""
    page = context.new_page()
    try:
        page.goto(server.url + "book/network_graph.html", wait_until="load")
        page.wait_for_selector(".graph-explorer[data-drawn='1']")
        page.locator(".graph-view g.node", has_text="blocks.0 · TransformerBlock").click()
        page.wait_for_selector(".graph-explorer[data-drawn='2']")
        page.locator(".graph-view g.node", has_text="masked_fill").first.click()
        seen = page.evaluate(PANEL)
    finally:
        page.close()
    assert seen["width"] >= 280 and seen["keys_on_one_line"], seen
    assert seen["placeholder"] <= seen["room"], seen


def test_graph_page_folds_a_group_shows_a_node_and_searches(context, server):
    page = context.new_page()
    watch = Watch(page)
    root = page.locator(".graph-explorer")

    def drawn(k):
        page.wait_for_selector(f".graph-explorer[data-drawn='{k}']")
        return int(root.get_attribute("data-nodes"))

    try:
        page.goto(server.url + "book/network_graph.html", wait_until="load")
        overview = drawn(1)                                    # it opens on the overview: the blocks folded
        assert overview < 20, overview
        folded = page.locator(".graph-view g.node", has_text="blocks.0 · TransformerBlock")
        assert folded.count() == 1
        folded.click()                                         # open the first block
        opened = drawn(2)
        assert opened > overview + 20
        block = page.locator(".graph-view g.cluster", has_text="blocks.0 · TransformerBlock")
        block.locator("text").first.click()                    # and fold it again
        assert drawn(3) == overview
        page.fill(".graph-search", "bitwise_not")              # the mask, once per block: both blocks open
        drawn(4)
        assert page.locator(".graph-count").inner_text() == "2 found"
        assert page.locator(".graph-view g.graph-hit").count() == 2
        page.press(".graph-search", "Enter")                   # the view moves to the second one, in blocks.1
        hit = page.locator(".graph-view g.graph-hit").last.bounding_box()
        view = page.locator(".graph-view").bounding_box()
        assert view["x"] < hit["x"] + hit["width"] / 2 < view["x"] + view["width"], (hit, view)
        assert view["y"] < hit["y"] + hit["height"] / 2 < view["y"] + view["height"], (hit, view)
        chosen = page.locator(".graph-view g.graph-hit").last
        chosen.click()
        info = page.locator(".graph-info")
        text = info.inner_text()
        assert "aten.bitwise_not" in text and "(L, L)" in text and "blocks.1.attn" in text, text
        box, node = info.bounding_box(), chosen.bounding_box()
        # over the graph's top right corner, in sight, and not over the node it describes
        assert view["x"] + view["width"] / 2 <= box["x"] and box["x"] + box["width"] <= view["x"] + view["width"] + 1
        assert view["y"] <= box["y"] < view["y"] + 30 and 0 <= box["y"] < page.viewport_size["height"], (box, view)
        assert node["x"] + node["width"] <= box["x"] or node["y"] >= box["y"] + box["height"], (node, box)
        assert page.evaluate(PANEL)["keys_on_one_line"], page.evaluate(PANEL)
        page.click("button.graph-expand")                      # everything drawn: the node still shown, and marked
        drawn(5)
        assert "aten.bitwise_not" in info.inner_text() and page.locator(".graph-view g.graph-selected").count() == 1
        page.click("button.graph-collapse")                    # the node folded away: the panel says what to do
        drawn(6)
        assert info.inner_text() == "Click a node to see what it computes."
        page.click("button[data-part=backward]")
        drawn(7)
        assert page.locator(".graph-view g.node", has_text="AddBackward0").count() >= 4
        assert info.inner_text() == "Click a node to see what it computes."
    finally:
        page.close()
    assert not watch.errors, "console errors:\n" + "\n".join(watch.errors)
    assert not watch.external, f"requested other hosts: {watch.external}"
    assert not watch.failed, "requests of the site that failed:\n" + "\n".join(watch.failed)


# --- the graph page's room, zoom and pan; narrow screens (a phone, 390 px) ------------------------------------------

PHONE = {"width": 390, "height": 844}
SIZES = {"1280": "context", "390": "phone"}

# The graph page's layout: the article's content width (inside its padding) and the graph's frame.
GRAPH_LAYOUT = r"""() => {
    const art = document.querySelector("article.bd-article"), s = getComputedStyle(art);
    return {content: art.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight),
            graph: document.querySelector(".graph-view").getBoundingClientRect().width,
            secondary_sidebar: !!document.querySelector(".bd-sidebar-secondary"),
            sidebar_buttons: [...document.querySelectorAll("button.secondary-toggle")]
                .filter(b => b.getClientRects().length > 0).length};
}"""

# The labels of the graph as drawn on the screen, in CSS px: each text's font size in the drawing, scaled by the
# drawing's transform to the screen (which the viewBox, the camera, sets).
LABEL_PX = r"""() => {
    const px = [...document.querySelectorAll(".graph-view svg text")]
        .map(t => parseFloat(t.getAttribute("font-size")) * t.getScreenCTM().a);
    return {labels: px.length, smallest: Math.min(...px), largest: Math.max(...px)};
}"""

VIEWBOX = "() => document.querySelector('.graph-view svg').getAttribute('viewBox').split(' ').map(Number)"

# What scrolls sideways: the document, and the boxes that scroll inside it. The outermost element wider than the
# window is named, so that a failure says what pushed the page. Images of cell outputs (plots) and their scale.
SIDEWAYS = r"""() => {
    const d = document.documentElement, vw = d.clientWidth;
    const over = [...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > vw + 1);
    const say = e => `${e.tagName.toLowerCase()}.${[...e.classList].join(".")} `
                     + `to ${Math.round(e.getBoundingClientRect().right)} px`;
    const outer = over.filter(e => !over.includes(e.parentElement)).slice(0, 5).map(say);
    const scrolls = sel => [...document.querySelectorAll(sel)].filter(e => e.scrollWidth > e.clientWidth + 1 &&
        ["auto", "scroll"].includes(getComputedStyle(e).overflowX)).length;
    const plots = [...document.querySelectorAll("div.cell_output img")];
    return {scroll_width: d.scrollWidth, width: vw, outer,
            tables: document.querySelectorAll("article table").length,
            tables_scrolling: scrolls(".pst-scrollable-table-container"),
            equations: document.querySelectorAll("mjx-container[display='true']").length,
            equations_scrolling: scrolls("mjx-container[display='true']"),
            plots: plots.length,
            plot_scale: plots.map(i => i.getBoundingClientRect().width / i.naturalWidth)};
}"""


@pytest.fixture(scope="module")
def phone(browser, server):
    """A phone: 390 x 844 CSS px, touch, the page's own viewport meta tag honoured; nothing leaves 127.0.0.1."""
    ctx = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, service_workers="block")
    ctx.set_default_timeout(20_000)
    ctx.route(lambda url: not _local(url), lambda route: route.abort("blockedbyclient"))
    yield ctx
    ctx.close()


def _graph_page(ctx, server):
    page = ctx.new_page()
    watch = Watch(page)
    page.goto(server.url + "book/network_graph.html", wait_until="load")
    page.wait_for_selector(".graph-explorer[data-drawn='1']")
    return page, watch


def test_graph_page_gives_the_graph_the_full_width_at_1280_px(context, server, tmp_path):
    """At 1280 px the page has no right-hand sidebar and the graph spans the article's width, the details panel over
    its corner instead of beside it."""
    page, watch = _graph_page(context, server)
    try:
        seen = page.evaluate(GRAPH_LAYOUT)
        page.screenshot(path=tmp_path / "graph-1280.png")
    finally:
        page.close()
    assert not seen["secondary_sidebar"], seen
    assert seen["content"] >= 800, seen                  # the article is not capped for a sidebar it does not have
    assert seen["graph"] >= 0.8 * seen["content"], seen
    assert not watch.errors, "console errors:\n" + "\n".join(watch.errors)


@pytest.mark.parametrize("size", SIZES)
def test_graph_labels_are_readable_once_a_block_is_open(request, server, tmp_path, size):
    """The view opens a block where it was clicked (tapped, on a phone) at a scale where every label is at least
    11 CSS px; at 390 px the graph is then wider or taller than the screen and is panned."""
    ctx = request.getfixturevalue(SIZES[size])
    page, watch = _graph_page(ctx, server)
    try:
        folded = page.locator(".graph-view g.node", has_text="blocks.0 · TransformerBlock")
        if size == "390":
            folded.tap()
        else:
            folded.click()
        page.wait_for_selector(".graph-explorer[data-drawn='2']")
        seen = page.evaluate(LABEL_PX)
        layout = page.evaluate(GRAPH_LAYOUT)
        page.screenshot(path=tmp_path / f"graph-{size}-block-open.png")
        opened = page.locator(".graph-view g.cluster", has_text="blocks.0 · TransformerBlock").bounding_box()
        view = page.locator(".graph-view").bounding_box()
    finally:
        page.close()
    assert seen["labels"] > 40 and seen["smallest"] >= 11, seen
    assert layout["graph"] >= 0.99 * layout["content"], layout
    assert not layout["sidebar_buttons"], f"a button for a sidebar the page does not have: {layout}"
    assert opened["y"] < view["y"] + view["height"] and opened["y"] + opened["height"] > view["y"], (opened, view)
    assert not watch.errors, "console errors:\n" + "\n".join(watch.errors)


def test_graph_zooms_pans_and_resets_with_the_mouse(context, server):
    """The + and − buttons and the wheel zoom (the viewBox shrinks or grows, about the pointer for the wheel), a drag
    pans (the viewBox moves, same size) and is not a click, and reset goes back to the starting view."""
    page, watch = _graph_page(context, server)
    try:
        start = page.evaluate(VIEWBOX)
        page.click("button.graph-zoom-in")
        zin = page.evaluate(VIEWBOX)
        page.click("button.graph-zoom-out")
        page.click("button.graph-zoom-out")
        zout = page.evaluate(VIEWBOX)
        page.locator(".graph-view").scroll_into_view_if_needed()
        box = page.locator(".graph-view").bounding_box()
        x, y = box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.5
        before = page.locator(".graph-view svg").get_attribute("viewBox")
        page.mouse.move(x, y)
        page.mouse.wheel(0, -300)                          # wheel up: in
        page.wait_for_function("vb => document.querySelector('.graph-view svg').getAttribute('viewBox') !== vb",
                               arg=before)
        wheel = page.evaluate(VIEWBOX)
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x + 60, y + 40, steps=6)
        page.mouse.up()
        dragged = page.evaluate(VIEWBOX)
        drawn = page.locator(".graph-explorer").get_attribute("data-drawn")
        page.click("button.graph-reset")
        back = page.evaluate(VIEWBOX)
    finally:
        page.close()
    assert zin[2] == pytest.approx(start[2] / 1.25, rel=0.01) and zin[3] == pytest.approx(start[3] / 1.25, rel=0.01)
    assert zout[2] == pytest.approx(start[2] * 1.25, rel=0.01), (start, zout)
    assert wheel[2] < zout[2] * 0.8, (zout, wheel)
    # the point under the pointer stays under it: x + 0.3 * width of the view in the drawing's points
    assert wheel[0] + 0.3 * wheel[2] == pytest.approx(zout[0] + 0.3 * zout[2], abs=1), (zout, wheel)
    assert dragged[2:] == wheel[2:] and dragged[0] < wheel[0] and dragged[1] < wheel[1], (wheel, dragged)
    assert drawn == "1", "the drag was taken for a click"
    assert back == start, (start, back)
    assert not watch.errors, "console errors:\n" + "\n".join(watch.errors)


def test_graph_pans_and_pinches_by_touch(phone, server):
    """On a phone one finger pans the graph and two fingers pinch it larger; reset goes back to the starting view.
    The touches are Chromium's own touch input (DevTools' Input.dispatchTouchEvent)."""
    page, watch = _graph_page(phone, server)
    try:
        cdp = phone.new_cdp_session(page)
        page.locator(".graph-view").scroll_into_view_if_needed()
        box = page.locator(".graph-view").bounding_box()
        cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2

        def touch(kind, *points):
            cdp.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": [
                {"x": x, "y": y, "id": i} for i, (x, y) in enumerate(points)]})

        start = page.evaluate(VIEWBOX)
        touch("touchStart", (cx, cy))
        for k in range(1, 6):
            touch("touchMove", (cx - 12 * k, cy - 16 * k))
        touch("touchEnd")
        panned = page.evaluate(VIEWBOX)
        touch("touchStart", (cx - 30, cy), (cx + 30, cy))
        for k in range(1, 6):
            touch("touchMove", (cx - 30 - 14 * k, cy), (cx + 30 + 14 * k, cy))
        touch("touchEnd")
        pinched = page.evaluate(VIEWBOX)
        page.locator("button.graph-reset").tap()
        back = page.evaluate(VIEWBOX)
    finally:
        page.close()
    assert panned[2:] == start[2:] and panned[0] > start[0] and panned[1] > start[1], (start, panned)
    assert pinched[2] < panned[2] * 0.6, (panned, pinched)          # 60 px apart, then 200: zoomed in
    assert back == start, (start, back)
    assert not watch.errors, "console errors:\n" + "\n".join(watch.errors)


# The graph page, the residual chapter (He et al.'s table) and the positional-encoding chapter (its display equations)
NARROW = {"book/network_graph": None, "book/residual": "tables_scrolling",
          "book/positional_encoding": "equations_scrolling"}


@pytest.mark.parametrize("name", NARROW)
def test_nothing_scrolls_the_page_sideways_at_390_px(phone, server, tmp_path, name):
    """On a phone the page never scrolls sideways: a table or an equation wider than the screen scrolls in its own
    box, and a plot keeps the size it was drawn at (its labels as large as matplotlib wrote them), in a box of its
    own."""
    page = phone.new_page()
    try:
        page.goto(f"{server.url}{name}.html", wait_until="load")
        page.wait_for_load_state("networkidle")
        page.evaluate(WAIT_FOR_SITE)
        seen = page.evaluate(SIDEWAYS)
        page.screenshot(path=tmp_path / f"{Path(name).name}-390.png", full_page=True)
    finally:
        page.close()
    assert seen["scroll_width"] <= seen["width"], f"{name} is wider than the screen: {seen}"
    if NARROW[name]:                                       # the case the page is here for is really met
        assert seen[NARROW[name]] >= 1, seen
    assert all(s >= 0.99 for s in seen["plot_scale"]), f"{name}: plots shrunk: {seen['plot_scale']}"
