"""Trusted work against the bytes a learner sends: the sanitizer of learner markdown and HTML, and the feedback's
typesetting of a learner's formulas, each timed as its input grows.

    python bench/sanitize_scaling.py [--max-mib 16] [--before-mib 1]

- the sanitizer (CPU seconds, one run each) on text of `<` and on the other pathological families of
  tests/test_bounded.py, from 64 KiB to `--max-mib` (the notebook's cap is 64 MiB; 16 MiB of `<` takes about a
  minute; the others up to 1 or 4 MiB), and the same text as one learner markdown cell through `sanitize` (past
  its 128 KiB cap, a note); `--before-mib` also times bleach as nbconvert's SanitizeHTML runs it, the sanitizer as it
  was, up to that size (a sixteenth of it for nesting, which it took minutes on; 4 MiB of `<` took 252 s in a whole
  `nbgrader autograde`);
- the typesetter: a page of the course's first exercise with n learner formulas of nested \\def (the red team's bomb),
  and with n honest formulas: the page's bytes and the seconds to write it (node's run included).
"""
import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbconvert.preprocessors.sanitize import SanitizeHTML

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_bounded import _bomb, _page  # noqa: E402 - the tests' own generators and page

from autograder.pipeline import sanitize  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20
# name: (text of about n bytes, the largest timed (MiB; `<`: --max-mib), the largest the sanitizer as it was is timed
# on, as a share of --before-mib)
FAMILIES = {
    "<": (lambda n: "<" * n, None, 1),
    "&": (lambda n: "&" * n, 1, 1),
    "x*1000 + </i>": (lambda n: ("x" * 1000 + "</i>") * (n // 1004), 4, 4),
    "<div> nested": (lambda n: "<div>" * (n // 5), 1, 1 / 16),
    "<li><b>": (lambda n: "<li><b>" * (n // 7), 1, 1 / 16),
    "`a<b` code spans": (lambda n: "`a<b` " * (n // 6), 1, 1),
}


def cpu(fn, arg) -> float:
    start = time.process_time()
    fn(arg)
    return time.process_time() - start


def sizes(top: int) -> list[int]:
    out, n = [], 64 * KIB
    while n <= top:
        out.append(n)
        n *= 4 if n < MIB else 2
    return out


def sanitizer_table(max_bytes: int, before_bytes: int):
    cleaner = sanitize.Sanitizer(tags=sanitize.TAGS, attributes=sanitize.ATTRIBUTES)
    old = SanitizeHTML(tags=sanitize.TAGS, attributes=sanitize.ATTRIBUTES)
    print("## The sanitizer: CPU seconds against the size of one text\n")
    print("| text | size | markdown (sanitize.markdown) | as a learner's cell (sanitize) | bleach as it was |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (make, top, share) in FAMILIES.items():
        for n in sizes(max_bytes if top is None else min(max_bytes, int(top * MIB))):
            text = make(n)
            now = cpu(lambda t: sanitize.markdown(t, cleaner), text)
            nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
            cell = cpu(sanitize.sanitize, nb)
            was = f"{cpu(old.sanitize_html_tags, text):.2f}" if n <= share * before_bytes else ""
            print(f"| `{name}` | {n / MIB:.2f} MiB | {now:.2f} | {cell:.3f} | {was} |", flush=True)
    print()


def typesetter_table():
    print("## The typesetter: the feedback page of a learner's markdown cell of n formulas\n")
    print("| formulas | n | TeX bytes | page bytes | seconds | typeset |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    course = _page("My notes.").count("<mjx-container")
    for name, formula in (("nested \\def (bomb)", f"${_bomb()}$"),
                          ("honest", r"$\frac{q_i k_j^\top}{\sqrt{d}} < \sum_{j \le i} e^{s_{ij}}$")):
        for n in (1, 10, 100, 300, 1000, 3000):
            markdown = "\n\n".join([formula] * n)
            start = time.perf_counter()
            page = _page(markdown)
            seconds = time.perf_counter() - start
            print(f"| {name} | {n} | {len(markdown):,} | {len(page):,} | {seconds:.1f} | "
                  f"{page.count('<mjx-container') - course} |", flush=True)
    print()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-mib", type=float, default=16, help="the largest text of `<` sanitized (MiB)")
    ap.add_argument("--before-mib", type=float, default=1, help="the largest text sanitized as it was (MiB)")
    args = ap.parse_args(argv)
    sanitizer_table(int(args.max_mib * MIB), int(args.before_mib * MIB))
    typesetter_table()


if __name__ == "__main__":
    main()
