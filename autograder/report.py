"""The class report: every learner's scores, the class's misconceptions, the spread of totals.

    python -m autograder.report ASSIGNMENT... [--grading-dir DIR] [--out DIR]

Read from the gradebook (GRADEBOOK_URL, else the grading folder's SQLite file) and written into
`<grading-dir>/report/<assignment>/` (also the last step of `autograder.classgrade`):

- `scores.csv`     one row per learner: the score of each graded cell, the total, the points, and
                   `not graded: <reason>` for a learner whose grading failed;
- `diagnoses.csv`  for each graded cell, each diagnosis and how many learners got it (which ones):
                   the class's misconceptions.  The diagnoses are the gradebook comments of the
                   solution cells, split into single diagnoses;
- `histogram.png`  the histogram of total scores;
- `report.html`    one self-contained page with the three (the image inlined, no other file or host).

A comment holds the diagnoses of the cell's failed hidden tests joined by "; " (`SaveDiagnoses`),
after a note on a repaired or unreadable notebook file when there was one.  Since a diagnosis may
itself contain "; ", the split follows the verdict that the autograded notebook's graded cell shows
(one `FAILED:` line per diagnosis) when the comment ends with exactly those; otherwise on "; ".
"""
from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import math
import os
from collections import defaultdict
from pathlib import Path

import nbformat

from . import ROOT, grade
from .notebooks import is_graded_test, nbgrader_meta

PASSED = "all hidden tests passed"
NO_RESPONSE = "No response."


def verdict_failures(grading_dir: Path, assignment: str, learner: str) -> dict[str, list[str]]:
    """graded cell -> the diagnoses its verdict lists, from the learner's autograded notebook."""
    path = Path(grading_dir) / "autograded" / learner / assignment / f"{assignment}.ipynb"
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception:  # noqa: BLE001 - no autograded notebook: the comment alone is split
        return {}
    found = {}
    for cell in nb.cells:
        if not is_graded_test(cell):
            continue
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        found[nbgrader_meta(cell).get("grade_id")] = [line.strip()[len("FAILED: "):] for line in text.splitlines()
                                                      if line.strip().startswith("FAILED: ")]
    return found


def split_diagnoses(comment: str | None, failed: list[str] | None = None) -> list[str]:
    """The single diagnoses in a gradebook comment; `failed` (the verdict's list), when known, fixes the split."""
    comment = (comment or "").strip()
    if not comment:
        return []
    if comment == NO_RESPONSE:
        return [NO_RESPONSE]
    joined = "; ".join(failed or [])
    if failed and comment.endswith(joined):
        note = comment[: len(comment) - len(joined)].strip()
        return ([note.removesuffix(".")] if note else []) + list(failed)
    if PASSED in comment:
        note = comment[: comment.index(PASSED)].strip()
        return [note.removesuffix(".")] if note else []
    return [part.strip() for part in comment.split("; ") if part.strip()]


def class_diagnoses(grading_dir: Path, rows: list[grade.CellScore], order: list[str] = ()) -> list[dict]:
    """One record per (graded cell, diagnosis): how many learners got it, and who."""
    who: dict[tuple[str, str], list[str]] = defaultdict(list)
    verdicts: dict[str, dict] = {}
    for r in rows:
        if r.learner not in verdicts:
            verdicts[r.learner] = verdict_failures(grading_dir, r.assignment, r.learner)
        for d in dict.fromkeys(split_diagnoses(r.comment, verdicts[r.learner].get(r.cell))):
            who[(r.cell, d)].append(r.learner)
    cells = grade.ordered_cells(rows, order)
    out = [{"cell": cell, "diagnosis": d, "learners": len(names), "who": sorted(names)}
           for (cell, d), names in who.items()]
    return sorted(out, key=lambda x: (cells.index(x["cell"]), -x["learners"], x["diagnosis"]))


def cell_order(grading_dir: Path, assignment: str) -> list[str]:
    """The graded cells in the order the released notebook shows them."""
    for path in (Path(grading_dir) / "release" / assignment / f"{assignment}.ipynb",
                 ROOT / "exercises" / assignment / f"{assignment}.ipynb"):
        if path.exists():
            nb = nbformat.read(str(path), as_version=4)
            return [nbgrader_meta(c)["grade_id"] for c in nb.cells if is_graded_test(c)]
    return []


def histogram_png(totals: list[float], max_points: float, title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    top = max(max_points, max(totals, default=0.0), 1.0)
    n = max(1, min(20, math.ceil(top)))
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    try:
        ax.hist(totals, bins=n, range=(0, top), color="#3b6ea5", edgecolor="white")
        ax.set_xlabel(f"total score (of {max_points:g} points)")
        ax.set_ylabel("learners")
        ax.set_title(title)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlim(0, top)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", metadata={"Software": None})
        return buf.getvalue()
    finally:
        plt.close(fig)


def _fmt(x) -> str:
    return "" if x is None else f"{x:g}"


CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left}
td.n{text-align:right}th{background:#f2f2f2}tr.failed td{color:#a00}h1{font-size:1.5em}h2{font-size:1.2em}
img{max-width:100%}.muted{color:#666}"""


def render_html(assignment: str, cells: list[str], lines, diagnoses: list[dict], png: bytes, n_graded: int) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c.removesuffix('_tests'))}</th>" for c in cells)
    body = []
    for learner, scores, total, points, status in lines:
        cls = ' class="failed"' if status != "graded" else ""
        tds = "".join(f'<td class="n">{_fmt(scores.get(c))}</td>' for c in cells)
        body.append(f"<tr{cls}><td>{e(learner)}</td>{tds}<td class=\"n\">{_fmt(total)}</td>"
                    f"<td class=\"n\">{_fmt(points)}</td><td>{e(status)}</td></tr>")
    diag = "".join(f"<tr><td>{e(d['cell'].removesuffix('_tests'))}</td><td>{e(d['diagnosis'])}</td>"
                   f"<td class=\"n\">{d['learners']}</td><td>{e(', '.join(d['who']))}</td></tr>"
                   for d in diagnoses)
    img = base64.b64encode(png).decode()
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Class report: {e(assignment)}</title>
<style>{CSS}</style></head><body>
<h1>Class report: {e(assignment)}</h1>
<p class="muted">{n_graded} learners graded, {sum(1 for x in lines if x[4] != "graded")} not graded.</p>
<h2>Scores</h2>
<table><tr><th>learner</th>{head}<th>total</th><th>points</th><th>status</th></tr>
{''.join(body)}</table>
<h2>Misconceptions: diagnoses per graded cell</h2>
<table><tr><th>graded cell</th><th>diagnosis</th><th>learners</th><th>who</th></tr>
{diag or '<tr><td colspan="4">no diagnosis: every graded cell passed</td></tr>'}</table>
<h2>Total scores</h2>
<img alt="histogram of the learners' total scores" src="data:image/png;base64,{img}">
</body></html>
"""


def build(grading_dir: Path, assignment: str, url: str | None = None, failures: dict[str, str] | None = None,
          out: Path | None = None) -> dict:
    """Write the report files of one assignment; returns their paths and the figures they hold."""
    grading_dir = Path(grading_dir)
    out = Path(out) if out else grading_dir / "report" / assignment
    out.mkdir(parents=True, exist_ok=True)
    rows = grade.scores(grading_dir, [assignment], url)
    order = cell_order(grading_dir, assignment)
    cells, lines = grade.by_learner(rows, failures, order)
    with open(out / "scores.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["learner", *cells, "total", "points", "status"])
        for learner, scores, total, points, status in lines:
            w.writerow([learner, *[_fmt(scores.get(c)) for c in cells], _fmt(total), _fmt(points), status])
    diagnoses = class_diagnoses(grading_dir, rows, order)
    with open(out / "diagnoses.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["cell", "diagnosis", "learners", "who"])
        for d in diagnoses:
            w.writerow([d["cell"], d["diagnosis"], d["learners"], " ".join(d["who"])])
    graded = [x for x in lines if x[4] == "graded"]
    totals = [x[2] for x in graded]
    max_points = max((x[3] for x in graded), default=0.0)
    png = histogram_png(totals, max_points, f"{assignment}: {len(totals)} learners")
    (out / "histogram.png").write_bytes(png)
    page = render_html(assignment, cells, lines, diagnoses, png, len(graded))
    (out / "report.html").write_text(page)
    return {"dir": str(out), "scores": str(out / "scores.csv"), "diagnoses": str(out / "diagnoses.csv"),
            "histogram": str(out / "histogram.png"), "html": str(out / "report.html"),
            "counts": {(d["cell"], d["diagnosis"]): d["learners"] for d in diagnoses}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder.report", description=__doc__.split("\n\n")[0])
    p.add_argument("assignments", nargs="+")
    p.add_argument("--grading-dir", type=Path, default=Path(os.environ.get("GRADING_DIR", grade.DEFAULT_DIR)))
    p.add_argument("--out", type=Path, help="folder for the files (default: <grading-dir>/report/<assignment>)")
    a = p.parse_args(argv)
    for asg in a.assignments:
        r = build(a.grading_dir, asg, out=(a.out / asg if a.out and len(a.assignments) > 1 else a.out))
        print(r["html"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
