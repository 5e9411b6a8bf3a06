"""The class report: what to re-teach first, who waits for a manual grade, who was late, every learner's scores.

    python -m autograder.classroom.report ASSIGNMENT... [--grading-dir DIR] [--out DIR]

Read from the gradebook (GRADEBOOK_URL, else the grading folder's SQLite file) and written into
`<grading-dir>/report/<assignment>/` (also the last step of `autograder.classroom.classgrade`):

- `scores.csv`     one row per learner: each graded cell's score, the total (before any late penalty), the points,
                   how late and the penalty, the status (`graded`, `waiting for manual grading`: the total is
                   provisional, `grader error: <reason>`, which a stored record that says the grader could not
                   grade gives too, or `not graded: <reason>`: no total);
- `diagnoses.csv`  the misconceptions, most learners first, then most points lost: a graded cell's mistake (its
                   diagnoses, numbers aside), who made it, the points it cost, the book's section that teaches it;
- `histogram.png`  the histogram of total scores;
- `report.html`    one self-contained page with the above, the cells flagged for manual grading (apart: a flag is the
                   grader's doubt, not a mistake) and the grading notes; the book linked where `c.BookLinks.url` says
                   it is published, else in `_build/html`.

All comes from the gradebook's scores and the record stored for each graded notebook (`autograder.verdict.record`),
never from re-reading the text of a comment or of an autograded notebook.
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
from autograder.pipeline.export import csv_cell
from autograder.pipeline.feedback import LOCAL_BOOK
from autograder.verdict import record
from autograder.verdict.record import FLAGGED, Grading


def learner_record(grading_dir: Path, assignment: str, learner: str) -> dict:
    """The stored record of a learner's graded notebook ({} when there is none)."""
    return record.load(record.path(grading_dir, learner, assignment, assignment)) or {}


def recorded_failures(grading_dir: Path, assignment: str, learners: Sequence[str]) -> dict[str, str]:
    """learner -> `grader error: <fault>` for each learner whose stored record says the grader could not grade their
    notebook (what the gradebook holds of them is no score of theirs)."""
    faults = {learner: Grading.from_dict(learner_record(grading_dir, assignment, learner)).fault
              for learner in learners}
    return {learner: f"{grade.GRADER_ERROR}: {fault.strip().splitlines()[0]}"
            for learner, fault in faults.items() if fault}


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
                    order: Sequence[str] = ()) -> tuple[list[dict], list[dict], list[dict]]:
    """(the misconceptions, the flags, the grading notes) of one assignment's class.

    A misconception is one per (graded cell, mistake): how many learners made it, who, the points it cost them in
    all and on average; it is shown by the diagnoses its first learner got, the ones that name a cause first, and
    ranked most learners first, then most points lost (a part left unanswered after every mistake). A flag is one per
    (graded cell, reason the grader gave for it): who, and who among them still waits for a typed score. A note is one
    per grading note or repair."""
    groups: dict[tuple[str, tuple[str, ...]], dict] = {}
    flagged: dict[tuple[str, tuple[str, ...]], dict] = {}
    noted: dict[str, list[str]] = defaultdict(list)
    by = {(r.learner, r.cell): r for r in rows}
    for learner in sorted({r.learner for r in rows}):
        rec = learner_record(grading_dir, rows[0].assignment, learner)
        for cell, v in Grading.from_dict(rec).verdicts.items():
            row = by.get((learner, cell))
            if v.status == FLAGGED:
                f = flagged.setdefault((cell, misconception(v.notes)), {"cell": cell, "why": v.notes, "who": [],
                                                                         "waiting": []})
                f["who"].append(learner)
                if row is not None and row.needs_manual_grade:
                    f["waiting"].append(learner)
            diagnoses = [c.diagnosis for c in v.checks if not c.passed and c.diagnosis] if v.status == FLAGGED \
                else v.failed
            if not diagnoses:
                continue
            key = (cell, misconception(diagnoses))
            shown = (list(key[1]) if any(NOT_ANSWERED in d for d in diagnoses)
                     else sorted(dict.fromkeys(diagnoses), key=lambda d: ": " not in d))
            g = groups.setdefault(key, {"cell": cell, "diagnoses": shown, "who": [], "lost": []})
            g["who"].append(learner)
            g["lost"].append(row.points - (row.score or 0.0) if row is not None else 0.0)
        for note in [*rec.get("notes", []), *rec.get("problems", [])]:
            noted[note].append(learner)
    cells = grade.ordered_cells(rows, order)
    out = [{"cell": g["cell"], "diagnosis": " | ".join(g["diagnoses"]), "diagnoses": g["diagnoses"],
            "learners": len(g["who"]), "who": sorted(g["who"]), "total": round(sum(g["lost"]), 2),
            "lost": round(sum(g["lost"]) / len(g["lost"]), 2)}
           for g in groups.values() if g["cell"] in cells]
    out.sort(key=lambda x: (NOT_ANSWERED in x["diagnosis"], -x["learners"], -x["total"], cells.index(x["cell"]),
                            x["diagnosis"]))
    flags = [{"cell": f["cell"], "why": f["why"], "learners": len(f["who"]), "who": sorted(f["who"]),
              "waiting": sorted(f["waiting"])} for f in flagged.values()]
    flags.sort(key=lambda x: (-x["learners"], cells.index(x["cell"]) if x["cell"] in cells else len(cells)))
    notes = [{"note": n, "learners": len(names), "who": sorted(names)} for n, names in sorted(noted.items())]
    return out, flags, notes


def released_notebook(grading_dir: Path, assignment: str):
    """The released notebook: the grading folder's release, else the course's exercises/ (None when neither)."""
    for path in (Path(grading_dir) / "release" / assignment / f"{assignment}.ipynb",
                 ROOT / "exercises" / assignment / f"{assignment}.ipynb"):
        if path.exists():
            return nbformat.read(str(path), as_version=4)
    return None


def cell_order(grading_dir: Path, assignment: str) -> list[str]:
    """The graded cells in the order the released notebook shows them."""
    nb = released_notebook(grading_dir, assignment)
    return [nbgrader_meta(c)["grade_id"] for c in nb.cells if is_graded_test(c)] if nb else []


IN_THE_BOOK = re.compile(r"\*\*In the book:\*\*(.*)")
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def book_sections(grading_dir: Path, assignment: str) -> dict[str, list[tuple[str, str]]]:
    """{graded cell: [(section, where the notebook links it)]}: the sections of the book that the part's description
    names (its "In the book:" line), the part each graded cell scores."""
    nb = released_notebook(grading_dir, assignment)
    found: dict[str, list[tuple[str, str]]] = {}
    last: list[tuple[str, str]] = []
    for cell in nb.cells if nb else []:
        if cell.cell_type == "markdown" and (m := IN_THE_BOOK.search(cell.source)):
            last = LINK.findall(m.group(1))
        elif is_graded_test(cell):
            found[nbgrader_meta(cell)["grade_id"]] = last
    return found


def book_url() -> str:
    """Where the book is published, as `c.BookLinks.url` of the course's nbgrader_config.py says ('' when it does not):
    the one in the folder the report runs in, as nbgrader reads it, else the course's."""
    from traitlets.config.loader import PyFileConfigLoader

    for folder in (Path.cwd(), ROOT):
        if (folder / "nbgrader_config.py").exists():
            try:
                cfg = PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config()
            except Exception:  # noqa: BLE001 - a configuration that does not load: links to the local build
                return ""
            return str(cfg.get("BookLinks", {}).get("url", "") or "")
    return ""


def section_href(link: str, url: str, out: Path) -> str:
    """A notebook's link into the book (`../../_build/html/...`), from the report's folder: on the published book,
    else on the course's own build."""
    if not link.startswith(LOCAL_BOOK):
        return link
    rest = link[len(LOCAL_BOOK):]
    return url.rstrip("/") + "/" + rest if url else os.path.relpath(ROOT / "_build" / "html", out) + "/" + rest


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


def _late(x: grade.Line) -> str:
    if x.seconds_late <= 0:
        return ""
    hours = x.seconds_late / 3600
    when = f"{hours:.1f} h late" if hours < 48 else f"{hours / 24:.1f} days late"
    return when + (f", penalty {x.penalty:g}" if x.penalty else "")


def _status(x: grade.Line) -> str:
    if x.waiting:
        return (f"{grade.WAITING}: {', '.join(c.removesuffix('_tests') for c in x.waiting)} "
                "(the total is provisional)")
    return x.status


def _writer(f):
    w = csv.writer(f)
    return lambda row: w.writerow([csv_cell(x) for x in row])


CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:64em;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;
vertical-align:top}td.n{text-align:right}th{background:#f2f2f2}tr.failed td{color:#a00}tr.waiting td{color:#8a5300}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}img{max-width:100%}.muted{color:#666}ul{margin:0;padding-left:1.2em}"""


def render_html(assignment: str, cells: list[str], lines: list[grade.Line], diagnoses: list[dict], flags: list[dict],
                notes: list[dict], png: bytes, sections: dict[str, list[tuple[str, str]]]) -> str:
    e = html.escape
    short = [c.removesuffix("_tests") for c in cells]
    failed = [x for x in lines if x.total is None]
    waiting = [x for x in lines if x.waiting]
    late = [x for x in lines if x.seconds_late > 0]
    faults = sum(1 for x in failed if x.status.startswith(grade.GRADER_ERROR))
    summary = (f"{len(lines) - len(failed)} learners graded ({len(waiting)} waiting for a manual grade, {len(late)} "
               f"late), {len(failed)} not graded"
               + (f" ({faults} of them for a grader error: no score is recorded for them, and their grading must be "
                  "run again)" if faults else "") + ".")

    def reteach(cell: str) -> str:
        return "<br>".join(f'<a href="{e(href)}">{e(title)}</a>' for title, href in sections.get(cell, [])) or "-"

    diag = "".join(f"<tr><td class=\"n\">{i}</td><td>{e(d['cell'].removesuffix('_tests'))}</td><td><ul>"
                   + "".join(f"<li>{e(x)}</li>" for x in d["diagnoses"])
                   + f"</ul></td><td class=\"n\">{d['learners']}</td><td class=\"n\">{d['total']:g}</td>"
                   f"<td class=\"n\">{d['lost']:g}</td><td>{reteach(d['cell'])}</td><td>{e(', '.join(d['who']))}</td>"
                   "</tr>" for i, d in enumerate(diagnoses, 1))
    flagged = "".join(f"<tr><td>{e(f['cell'].removesuffix('_tests'))}</td><td><ul>"
                      + "".join(f"<li>{e(x)}</li>" for x in f["why"])
                      + f"</ul></td><td class=\"n\">{f['learners']}</td><td>{e(', '.join(f['who']))}</td>"
                      f"<td>{e(', '.join(f['waiting'])) or 'none: every one has a typed score'}</td></tr>"
                      for f in flags)
    body = []
    for x in lines:
        cls = ' class="failed"' if x.total is None else (' class="waiting"' if x.waiting else "")
        tds = "".join(f'<td class="n">{_fmt(x.scores.get(c))}</td>' for c in cells)
        body.append(f"<tr{cls}><td>{e(x.learner)}</td>{tds}<td class=\"n\">{_fmt(x.total)}</td>"
                    f"<td class=\"n\">{_fmt(x.points)}</td><td>{e(_late(x))}</td><td>{e(_status(x))}</td></tr>")
    noted = "".join(f"<tr><td>{e(n['note'])}</td><td class=\"n\">{n['learners']}</td>"
                    f"<td>{e(', '.join(n['who']))}</td></tr>" for n in notes)
    img = base64.b64encode(png).decode()
    head = "".join(f"<th>{e(c)}</th>" for c in short)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Class report: {e(assignment)}</title>
<style>{CSS}</style></head><body>
<h1>Class report: {e(assignment)}</h1>
<p class="muted">{e(summary)}</p>
<h2>What to re-teach: the misconceptions, most learners first</h2>
<p class="muted">Learners whose tests failed with the same diagnoses (numbers aside) in a graded cell made the same
mistake; the points are what the cell cost them, in all and per learner; the section is where the book teaches it.</p>
<table><tr><th>#</th><th>graded cell</th><th>what the grader said</th><th>learners</th><th>points lost</th>
<th>per learner</th><th>re-teach</th><th>who</th></tr>
{diag or '<tr><td colspan="8">no diagnosis: every graded cell passed</td></tr>'}</table>
<h2>Flagged for manual grading</h2>
<p class="muted">A flag is the grader's doubt, not a mistake: it could not decide the part on its own. Until you type a
score for it in formgrader, the learner's total counts the provisional score.</p>
<table><tr><th>graded cell</th><th>why the grader flagged it</th><th>learners</th><th>who</th>
<th>still waiting for your score</th></tr>
{flagged or '<tr><td colspan="5">none: the grader decided every part on its own</td></tr>'}</table>
<h2>Scores</h2>
<p class="muted">The total is before any late penalty (the export applies it).</p>
<table><tr><th>learner</th>{head}<th>total</th><th>points</th><th>late</th><th>status</th></tr>
{''.join(body)}</table>
<h2>Grading notes: protections or measurements a grading lacked, notebooks the grader repaired</h2>
<table><tr><th>note</th><th>learners</th><th>who</th></tr>
{noted or '<tr><td colspan="3">none: every grading had every protection, no notebook needed repair</td></tr>'}</table>
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
    failures = {**recorded_failures(grading_dir, assignment, sorted({r.learner for r in rows})), **(failures or {})}
    cells, lines = grade.by_learner(rows, failures, order)
    with open(out / "scores.csv", "w", newline="") as f:
        row = _writer(f)
        row(["learner", *cells, "total", "points", "hours late", "late penalty", "status"])
        for x in lines:
            row([x.learner, *[_fmt(x.scores.get(c)) for c in cells], _fmt(x.total), _fmt(x.points),
                 f"{x.seconds_late / 3600:.2f}" if x.seconds_late > 0 else "", _fmt(x.penalty or None), _status(x)])
    diagnoses, flags, notes = class_diagnoses(grading_dir, rows, order) if rows else ([], [], [])
    published = book_url()
    sections = {cell: [(title, section_href(link, published, out)) for title, link in found]
                for cell, found in book_sections(grading_dir, assignment).items()}
    with open(out / "diagnoses.csv", "w", newline="") as f:
        row = _writer(f)
        row(["cell", "diagnosis", "learners", "points lost", "points lost per learner", "who", "re-teach"])
        for d in diagnoses:
            row([d["cell"], d["diagnosis"], d["learners"], f"{d['total']:g}", f"{d['lost']:g}", " ".join(d["who"]),
                 " ".join(f"{title} <{href}>" for title, href in sections.get(d["cell"], []))])
    graded = [x for x in lines if x.total is not None]
    totals = [x.total for x in graded if x.total is not None]
    max_points = max((x.points for x in graded), default=0.0)
    png = histogram_png(totals, max_points, f"{assignment}: {len(totals)} learners")
    (out / "histogram.png").write_bytes(png)
    page = render_html(assignment, cells, lines, diagnoses, flags, notes, png, sections)
    (out / "report.html").write_text(page)
    return {"dir": str(out), "scores": str(out / "scores.csv"), "diagnoses": str(out / "diagnoses.csv"),
            "histogram": str(out / "histogram.png"), "html": str(out / "report.html"),
            "counts": {(d["cell"], d["diagnosis"]): d["learners"] for d in diagnoses},
            "flags": {(f["cell"], " | ".join(f["why"])): f["waiting"] for f in flags},
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
