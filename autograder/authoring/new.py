"""Start a new exercise: `python -m autograder.authoring.new NAME ["Title"]`.

Writes the skeletons of everything an exercise is made of, each following the course's conventions, with one graded
part (`scale`, to be replaced) so that the new exercise grades from the start:

- solutions/NAME/NAME.ipynb            the one source: text, a solution cell, visible checks, a graded cell
- autograder/verdict/suites/test_NAME.py  the hidden suite that scores the graded cell
- examples/variants/NAME.py            known answers: correct ones, mistakes, and where each mistake is caught
- book/NAME.md                         the chapter, which offers the exercise for download
- _toc.yml                             the chapter's entry

Then `make exercises` writes the criteria into the graded cell and generates the release, exercises/NAME/.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

from autograder import ROOT

PART = "scale"


def _meta(grade_id: str, solution=False, grade=False, locked=True, points=None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3, "solution": solution,
            "task": False}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def notebook(name: str, title: str):
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    link = f"../../_build/html/book/{name}.html"
    cells = [
        md(f"# Exercise: {title.lower()}\n\nThis exercise goes with the chapter [{title}]({link}) of the book "
           "(about 10 minutes in all).", metadata=_meta("intro")),
        code("import torch", metadata={**_meta("setup"), "tags": ["setup"]}),
        md(f"## 1. Scale\n\n**Time:** about 10 minutes. **In the book:** [{title} › Scaling]({link}#scaling).\n\n"
           "Return `x` multiplied by `factor`, as a new tensor of the same shape and dtype.",
           metadata=_meta(f"{PART}_text")),
        md("<details><summary><b>Hint 1</b>: a nudge</summary>\n\nOne operator does it.\n\n</details>\n"
           "<details><summary><b>Hint 2</b>: the key idea</summary>\n\n`x * factor` makes a new tensor; "
           "`x.mul_(factor)` would change the caller's.\n\n</details>", metadata=_meta(f"{PART}_hints")),
        code(f'def {PART}(x, factor):\n    """x times factor, as a new tensor."""\n    ### BEGIN SOLUTION\n'
             "    return x * factor\n    ### END SOLUTION", metadata=_meta(PART, solution=True, locked=False)),
        code("# Visible checks: run this cell.\n"
             f"x = torch.arange(4.0)\nassert torch.equal({PART}(x, 2.0), torch.tensor([0.0, 2.0, 4.0, 6.0])), "
             '"each entry times the factor"\n'
             'assert torch.equal(x, torch.arange(4.0)), "x itself must not change: return a new tensor"',
             metadata=_meta(f"{PART}_checks")),
        code("", metadata=_meta(f"{PART}_tests", grade=True, points=2)),
    ]
    nb = nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}})
    return nb


SUITE = '''"""Hidden suite: {name} ({part}).

Oracle: the plain computation in float64."""
import pytest
import torch

from .checks import close, leaves_inputs, tensor
from .contract import Call, Draw, Part, check_drawn

A = "{name}"
SCALE = pytest.mark.cell("{part}_tests")
LIBRARY = None                   # the library versions this exercise bans (a pattern; None: the course's)


# -- the contract: inputs drawn over everything the notebook allows (autograder.verdict.suites.contract) ---------
def draw_{part}(d: Draw) -> Call:
    return Call("{part}", (d.randn(*d.lead(3), d.size(1, 64), dtype=d.dtype()), d.uniform(-3.0, 3.0)))


CONTRACT = {{"{part}": Part(draw_{part}, lambda c: c.args[0].double() * c.args[1],
                           lambda c: c.args[0] * c.args[1])}}


@SCALE
def test_{part}_shape(grading, learner):
    """returns a tensor of the shape and dtype of x"""
    x = grading.randn(3, 5, seed=1)
    tensor(learner.fn("{part}")(x, 1.5), "{part}(x, 1.5)", shape=(3, 5), dtype=torch.float32)


@SCALE
def test_{part}_values(grading, learner):
    """every entry times the factor"""
    x = grading.randn(4, 7, seed=2)
    close(learner.fn("{part}")(x, -0.75), x.double() * -0.75, "{part}(x, -0.75)", dtype=torch.float32)


@SCALE
def test_{part}_leaves_inputs(grading, learner):
    """does not modify x"""
    x = grading.randn(2, 3, seed=3)
    leaves_inputs(learner.twice("{part}", x, 2.0), [x, 2.0], "{part}", names=["x"])


@SCALE
def test_{part}_on_drawn_inputs(grading, learner, reference):
    """on inputs drawn for this grading: any shapes, float32 and float64, any factor"""
    check_drawn(learner, vars(reference(A)), "{part}", CONTRACT["{part}"], grading.seeded(9000).initial_seed(), 8)
'''

VARIANTS = '''"""Known answers to the {name} exercise (see autograder/authoring/variants.py)."""
from autograder.authoring.variants import Bug, Correct

IN_PLACE = "{part} writes its result into x: compute on a copy or out of place"
ADDED = "the factor is added to every entry; each entry is multiplied by it"

VARIANTS = [
    Correct("torch_mul", {{"{part}": "def {part}(x, factor):\\n    return torch.mul(x, factor)\\n"}}, "torch.mul"),
    Correct("clone_then_scale", {{"{part}": "def {part}(x, factor):\\n    return x.clone().mul_(factor)\\n"}},
            "a copy scaled in place"),
    Bug("{part}_in_place", {{"{part}": "def {part}(x, factor):\\n    return x.mul_(factor)\\n"}},
        {{"{part}_tests": IN_PLACE}}, "the caller's tensor scaled in place", cause=IN_PLACE),
    Bug("{part}_added", {{"{part}": "def {part}(x, factor):\\n    return x + factor\\n"}},
        {{"{part}_tests": ADDED}}, "the factor added, not multiplied", cause=ADDED),
]
# The known mistakes each visible check catches: variant -> (visible-check cell, text of the check's message).
VISIBLE = {{
    "{part}_in_place": ("{part}_checks", "return a new tensor"),
    "{part}_added": ("{part}_checks", "each entry times the factor"),
}}
# The known mistakes no visible check can see, and why.
HIDDEN_ONLY: dict[str, str] = {{}}
'''

CHAPTER = '''# {title}

A chapter of the course: what the exercise asks, with an experiment that answers a learner's question.

## Scaling

Multiplying a tensor by a number scales every entry; a new tensor leaves the caller's unchanged.

```{{admonition}} Exercise
Implement `{part}` in the exercise notebook, {{download}}`{name}.ipynb <../exercises/{name}/{name}.ipynb>`.
```
'''


def toc_with(toc: str, name: str) -> str:
    """_toc.yml with the chapter book/NAME after the last chapter of the first part."""
    lines, at = toc.splitlines(), None
    for i, line in enumerate(lines):
        if re.match(r"\s*- file: book/", line):
            at = i
        elif at is not None and re.match(r"\s*- caption:", line):
            break
    assert at is not None                         # the toc has a chapter
    indent = re.match(r"(\s*)", lines[at]).group(1)  # type: ignore[union-attr]  # \s* matches any line
    lines.insert(at + 1, f"{indent}- file: book/{name}")
    return "\n".join(lines) + "\n"


def write(name: str, title: str, root: Path = ROOT) -> list[Path]:
    """Write the skeletons of exercise `name`; the paths written (none is overwritten)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise SystemExit(f"{name!r}: an exercise's name is a Python identifier in lower case (it names a suite)")
    files = {root / "solutions" / name / f"{name}.ipynb": nbformat.writes(notebook(name, title)) + "\n",
             root / "autograder" / "verdict" / "suites" / f"test_{name}.py": SUITE.format(name=name, part=PART),
             root / "examples" / "variants" / f"{name}.py": VARIANTS.format(name=name, part=PART),
             root / "book" / f"{name}.md": CHAPTER.format(name=name, title=title, part=PART)}
    existing = [str(p.relative_to(root)) for p in files if p.exists()]
    if existing:
        raise SystemExit(f"{name} exists already: {', '.join(existing)}")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    toc = root / "_toc.yml"
    toc.write_text(toc_with(toc.read_text(), name))
    return [*files, toc]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m autograder.authoring.new", description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="the exercise's name: solutions/NAME/NAME.ipynb, test_NAME.py, ...")
    p.add_argument("title", nargs="?", help="the chapter's title (default: from the name)")
    a = p.parse_args(argv)
    for path in write(a.name, a.title or a.name.replace("_", " ").capitalize()):
        print(f"wrote {path.relative_to(ROOT)}")
    print("next: make exercises (the criteria and the release), then fill in the exercise")


if __name__ == "__main__":
    sys.exit(main())
