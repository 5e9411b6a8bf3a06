"""The built book, up to date and served on 127.0.0.1, for the browser tests (test_site.py)."""
import fcntl
import functools
import http.server
import re
import subprocess
import sys
import threading
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
# The one build command: the Makefile's `book`, the publishing workflow and test_book.py use it too.
BUILD = [str(Path(sys.executable).parent / "jupyter-book"), "build", "--all", "-W", "-n", "--keep-going", "."]


def toc_pages():
    """The pages of _toc.yml, root first, as paths without suffix relative to the root ("book/intro")."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    found = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({k: v for k, v in toc.items() if k != "root"})
    return [re.sub(r"\.(md|ipynb)$", "", p) for p in found]


def sources():
    """Every file the site is built from: configuration, the chapters, the offered exercise notebooks, and the
    solution notebooks whose reference code the chapters run."""
    files = [ROOT / "_config.yml", ROOT / "_toc.yml"]
    files += [p for p in (ROOT / "book").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    files += (ROOT / "exercises").rglob("*.ipynb")
    files += (ROOT / "solutions").rglob("*.ipynb")
    return [p for p in files if ".ipynb_checkpoints" not in p.parts]


def stale():
    """Why the built site is missing or older than its sources (None when it is up to date)."""
    built = [HTML / f"{page}.html" for page in toc_pages()]  # a build writes each of these anew
    missing = [p for p in [*built, HTML / "index.html", HTML / "searchindex.js"] if not p.exists()]
    if missing:
        return f"{missing[0].relative_to(ROOT)} is missing"
    oldest = min(p.stat().st_mtime for p in built)
    newer = [p for p in sources() if p.stat().st_mtime > oldest]
    return f"{newer[0].relative_to(ROOT)} is newer than the site" if newer else None


def ensure_built():
    """Build the book unless _build/html is already newer than every source (an earlier module of the run built it).

    A lock keeps two test processes of one run from building into _build/html at the same time."""
    HTML.parent.mkdir(parents=True, exist_ok=True)
    with open(HTML.parent / ".site-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stale():
            r = subprocess.run(BUILD, cwd=ROOT, capture_output=True, text=True)
            assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:]
    return HTML


class _Quiet(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".ipynb": "application/x-ipynb+json", ".woff": "font/woff", ".woff2": "font/woff2",
                      ".js": "text/javascript", ".svg": "image/svg+xml"}

    def log_message(self, *args):
        pass


class SiteServer:
    """A static file server for `directory` on 127.0.0.1 and a free port, in a daemon thread."""

    def __init__(self, directory):
        handler = functools.partial(_Quiet, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
