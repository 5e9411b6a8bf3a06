"""The book builds offline with warnings as errors, serves its own MathJax, and leaks no secret."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from test_release import secret_lines, leaks

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
