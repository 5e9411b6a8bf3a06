"""The class report: every learner's scores, the class's misconceptions, the spread of totals.

    python -m autograder.classroom.report ASSIGNMENT... [--grading-dir DIR] [--out DIR]

Read from the gradebook (GRADEBOOK_URL, else the grading folder's SQLite file) and written into
`<grading-dir>/report/<assignment>/` (also the last step of `autograder.classroom.classgrade`):

- `scores.csv`     one row per learner: the score of each graded cell, the total, the points, and
                   for a learner whose grading failed its status, `grader error: <reason>` (the grader
                   could not grade it) or `not graded: <reason>` (nothing to grade), and no total;
- `diagnoses.csv`  for each graded cell, each misconception (the diagnoses one mistake gives, numbers aside),
                   how many learners made it (which ones) and the points it cost them on average;
- `histogram.png`  the histogram of total scores;
- `report.html`    one self-contained page with the three (the image inlined, no other file or host).

The diagnoses come from the grading record that each autograded notebook holds (the verdicts, as
data: `autograder.verdict.record.Grading`), never from re-reading the text of a comment; so do the grading
notes (protections or measurements a grading lacked), listed with the learners they concern.
"""
from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import math
import os
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import nbformat

from autograder import ROOT
from autograder.classroom import grade
from autograder.notebooks import is_graded_test, nbgrader_meta
from autograder.verdict.record import Grading, record


def learner_record(grading_dir: Path, assignment: str, learner: str) -> dict:
    """The grading record of a learner's autograded notebook ({} when there is none)."""
    path = Path(grading_dir) / "autograded" / learner / assignment / f"{assignment}.ipynb"
    try:
        return record(nbformat.read(str(path), as_version=4))
    except Exception:  # noqa: BLE001 - no autograded notebook: nothing to count
        return {}


NOT_ANSWERED = "not implemented yet"
NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?")


def misconception(diagnoses: list[str]) -> tuple[str, ...]:
    """What one learner got wrong in one graded cell, as a key that another learner with the same mistake shares:
    its diagnoses with their numbers taken out (sizes and errors differ from one grading to the next); an
    unanswered cell is unanswered, whatever else its tests said."""
    if any(NOT_ANSWERED in d for d in diagnoses):
        return (next(d for d in diagnoses if NOT_ANSWERED in d),)
    return tuple(sorted({NUMBER.sub("#", d) for d in diagnoses}))


def class_diagnoses(grading_dir: Path, rows: list[grade.CellScore],
                    order: Sequence[str] = ()) -> tuple[list[dict], list[dict]]:
    """(one record per (graded cell, misconception), one per grading note): how many learners made it, who, and
    the points it cost them on average; a misconception is shown by the diagnoses its first learner got, the ones
    that name a cause first."""
    groups: dict[tuple[str, tuple[str, ...]], dict] = {}
    noted: dict[str, list[str]] = defaultdict(list)
    lost = {(r.learner, r.cell): r.points - (r.score or 0.0) for r in rows}
    for learner in sorted({r.learner for r in rows}):
        rec = learner_record(grading_dir, rows[0].assignment, learner)
        grading = Grading.from_dict(rec)
        for cell, v in grading.verdicts.items():
            found = [[p] for p in rec.get("problems", [])] + ([v.failed] if v.failed else [])
            for diagnoses in found:
                key = (cell, misconception(diagnoses))
                shown = (list(key[1]) if any(NOT_ANSWERED in d for d in diagnoses)
                         else sorted(dict.fromkeys(diagnoses), key=lambda d: ": " not in d))
                g = groups.setdefault(key, {"cell": cell, "diagnoses": shown, "who": [], "lost": []})
                g["who"].append(learner)
                g["lost"].append(lost.get((learner, cell), 0.0))
        for note in rec.get("notes", []):
            noted[note].append(learner)
    cells = grade.ordered_cells(rows, order)
    out = [{"cell": g["cell"], "diagnosis": " | ".join(g["diagnoses"]), "diagnoses": g["diagnoses"],
            "learners": len(g["who"]), "who": sorted(g["who"]), "lost": round(sum(g["lost"]) / len(g["lost"]), 2)}
           for g in groups.values() if g["cell"] in cells]
    notes = [{"note": n, "learners": len(names), "who": sorted(names)} for n, names in sorted(noted.items())]
    return sorted(out, key=lambda x: (cells.index(x["cell"]), -x["learners"], x["diagnosis"])), notes


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


def csv_cell(value) -> str:
    """A CSV cell that a spreadsheet reads as text: one starting with = + - @ or a tab or carriage return (a formula
    to Excel, LibreOffice and Google Sheets) gets a leading apostrophe. A plain number stays a number."""
    text = str(value)
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        try:
            float(text)
        except ValueError:
            return "'" + text
    return text


def _writer(f):
    w = csv.writer(f)
    return lambda row: w.writerow([csv_cell(x) for x in row])


CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left}
td.n{text-align:right}th{background:#f2f2f2}tr.failed td{color:#a00}h1{font-size:1.5em}h2{font-size:1.2em}
img{max-width:100%}.muted{color:#666}"""


def render_html(assignment: str, cells: list[str], lines, diagnoses: list[dict], notes: list[dict], png: bytes,
                n_graded: int) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c.removesuffix('_tests'))}</th>" for c in cells)
    body = []
    for learner, scores, total, points, status in lines:
        cls = ' class="failed"' if status != "graded" else ""
        tds = "".join(f'<td class="n">{_fmt(scores.get(c))}</td>' for c in cells)
        body.append(f"<tr{cls}><td>{e(learner)}</td>{tds}<td class=\"n\">{_fmt(total)}</td>"
                    f"<td class=\"n\">{_fmt(points)}</td><td>{e(status)}</td></tr>")
    diag = "".join(f"<tr><td>{e(d['cell'].removesuffix('_tests'))}</td><td><ul>"
                   + "".join(f"<li>{e(x)}</li>" for x in d["diagnoses"])
                   + f"</ul></td><td class=\"n\">{d['learners']}</td><td class=\"n\">{d['lost']:g}</td>"
                   f"<td>{e(', '.join(d['who']))}</td></tr>"
                   for d in diagnoses)
    noted = "".join(f"<tr><td>{e(n['note'])}</td><td class=\"n\">{n['learners']}</td>"
                    f"<td>{e(', '.join(n['who']))}</td></tr>"
                    for n in notes)
    img = base64.b64encode(png).decode()
    faults = sum(1 for x in lines if x[4].startswith(grade.GRADER_ERROR))
    faulted = (f" ({faults} of them for a grader error: no score is recorded for them, and their grading must be "
               "run again)") if faults else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Class report: {e(assignment)}</title>
<style>{CSS}</style></head><body>
<h1>Class report: {e(assignment)}</h1>
<p class="muted">{n_graded} learners graded, {sum(1 for x in lines if x[4] != "graded")} not graded{faulted}.</p>
<h2>Scores</h2>
<table><tr><th>learner</th>{head}<th>total</th><th>points</th><th>status</th></tr>
{''.join(body)}</table>
<h2>Misconceptions: one row per mistake and graded cell</h2>
<p class="muted">Learners whose tests failed with the same diagnoses (numbers aside) are counted together; the points
are what the cell cost them on average.</p>
<table><tr><th>graded cell</th><th>what the grader said</th><th>learners</th><th>points lost</th><th>who</th></tr>
{diag or '<tr><td colspan="5">no diagnosis: every graded cell passed</td></tr>'}</table>
<h2>Grading notes: protections or measurements a grading lacked</h2>
<table><tr><th>note</th><th>learners</th><th>who</th></tr>
{noted or '<tr><td colspan="3">none: every grading had every protection</td></tr>'}</table>
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
        row = _writer(f)
        row(["learner", *cells, "total", "points", "status"])
        for learner, scores, total, points, status in lines:
            row([learner, *[_fmt(scores.get(c)) for c in cells], _fmt(total), _fmt(points), status])
    diagnoses, notes = class_diagnoses(grading_dir, rows, order) if rows else ([], [])
    with open(out / "diagnoses.csv", "w", newline="") as f:
        row = _writer(f)
        row(["cell", "diagnosis", "learners", "points lost", "who"])
        for d in diagnoses:
            row([d["cell"], d["diagnosis"], d["learners"], f"{d['lost']:g}", " ".join(d["who"])])
    graded = [x for x in lines if x[4] == "graded"]
    totals = [x[2] for x in graded]
    max_points = max((x[3] for x in graded), default=0.0)
    png = histogram_png(totals, max_points, f"{assignment}: {len(totals)} learners")
    (out / "histogram.png").write_bytes(png)
    page = render_html(assignment, cells, lines, diagnoses, notes, png, len(graded))
    (out / "report.html").write_text(page)
    return {"dir": str(out), "scores": str(out / "scores.csv"), "diagnoses": str(out / "diagnoses.csv"),
            "histogram": str(out / "histogram.png"), "html": str(out / "report.html"),
            "counts": {(d["cell"], d["diagnosis"]): d["learners"] for d in diagnoses},
            "notes": {n["note"]: n["learners"] for n in notes}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder.classroom.report", description=__doc__.split("\n\n")[0])
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
