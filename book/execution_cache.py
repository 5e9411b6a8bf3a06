"""A Sphinx extension: a page's cached execution is stale when the code it imports changes, not only its own.

Jupyter Book re-executes a page only when the page's code cells change. The pages also run the book's shared
experiment code (`book/experiments.py`) and the exercises' reference solutions, which `reference()` executes from
the solution notebooks. When either changes, the whole execution cache is cleared as the build starts, so every
page runs again and a fix to a solution reaches the book.
"""
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAMP = "imported-code.sha256"


def digest():
    """A hash of the code the pages import: experiments.py, how solutions are run, and their code cells."""
    from autograder.notebooks import SOLUTIONS, learner_cells, read

    h = hashlib.sha256()
    for path in (ROOT / "book" / "experiments.py", ROOT / "autograder" / "notebooks.py"):
        h.update(path.read_bytes())
    for nb in sorted(SOLUTIONS.glob("*/*.ipynb")):
        h.update(nb.parent.name.encode())
        for cell in learner_cells(read(nb)):
            h.update(cell["source"].encode() + b"\0")
    return h.hexdigest()


def clear_stale_cache(app):
    if app.config.nb_execution_mode != "cache":
        return
    cache = Path(app.config.nb_execution_cache_path or Path(app.outdir).parent / ".jupyter_cache")
    stamp, now = cache / STAMP, digest()
    if stamp.exists() and stamp.read_text() == now:
        return
    if (cache / "global.db").exists():
        from jupyter_cache import get_cache

        get_cache(str(cache)).clear_cache()
    cache.mkdir(parents=True, exist_ok=True)
    stamp.write_text(now)


def setup(app):
    app.connect("builder-inited", clear_stale_cache)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
