"""The course's exercises, each one unit of its own files, and the one place that lists them.

An exercise NAME is:
- `solutions/NAME/NAME.ipynb`: the one source (text, reference, visible checks, graded cells and their points), whose
  first cell links its chapter of the book;
- `autograder/verdict/suites/test_NAME.py`: its hidden suite (parts, library bans, promises);
- `examples/variants/NAME.py`: its known answers (correct ways, mistakes each with its kind);
- `exercises/NAME/`: its release, generated from the source.
Whatever goes over every exercise (the make targets, the tests, the benches, the GPU check, the example class) asks
`names()`; they come in the order of their chapters in `_toc.yml`. Adding an exercise adds these files and the
chapter's line in `_toc.yml` (`python -m autograder.authoring.new NAME` writes them all).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder import ROOT

CHAPTER_LINK = re.compile(r"\]\((?:\.\./)*_build/html/book/([a-z0-9_]+)\.html")   # the first cell's chapter link


@dataclass(frozen=True)
class Exercise:
    name: str

    @property
    def source(self) -> Path:
        return ROOT / "solutions" / self.name / f"{self.name}.ipynb"

    @property
    def release(self) -> Path:
        return ROOT / "exercises" / self.name / f"{self.name}.ipynb"

    @property
    def suite(self) -> Path:
        return ROOT / "autograder" / "verdict" / "suites" / f"test_{self.name}.py"

    @property
    def variants(self) -> Path:
        return ROOT / "examples" / "variants" / f"{self.name}.py"

    @property
    def chapter(self) -> str | None:
        """The book page (`book/<chapter>.md`) the notebook's first cell links, or None when it links none."""
        nb = nbformat.read(str(self.source), as_version=4)
        first = next((c.source for c in nb.cells if c.cell_type == "markdown"), "")
        m = CHAPTER_LINK.search(first)
        return m.group(1) if m else None

    def missing(self) -> list[str]:
        """The files of the unit that are not there (its release is generated: `make exercises`)."""
        wanted = [self.source, self.suite, self.variants, self.release]
        found = [str(p.relative_to(ROOT)) for p in wanted if not p.exists()]
        chapter = self.chapter if self.source.exists() else None
        if chapter is None:
            found.append(f"a link to its chapter in the first cell of {self.source.relative_to(ROOT)}")
        elif not (ROOT / "book" / f"{chapter}.md").exists():
            found.append(f"book/{chapter}.md")
        return found


def _chapters() -> list[str]:
    """The book's pages in the order of `_toc.yml`."""
    return re.findall(r"^\s*-?\s*(?:file|root):\s*book/([a-z0-9_]+)\s*$", (ROOT / "_toc.yml").read_text(), re.M)


def names() -> list[str]:
    """Every exercise (a folder of solutions/ with its notebook), in the order of their chapters in the book, then
    by name."""
    found = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists())
    order = {page: i for i, page in enumerate(_chapters())}
    return sorted(found, key=lambda n: (order.get(Exercise(n).chapter or "", len(order)), n))


def get(name: str) -> Exercise:
    if name not in names():
        raise KeyError(f"no exercise {name!r}: the exercises are {', '.join(names())}")
    return Exercise(name)


if __name__ == "__main__":
    print(" ".join(names()))
