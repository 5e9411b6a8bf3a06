"""The class report: what to re-teach first, who waits for a manual grade, who was late, every learner's scores.

    python -m autograder.classroom.report ASSIGNMENT... [--grading-dir DIR] [--out DIR]

Read from the gradebook (GRADEBOOK_URL, else the grading folder's SQLite file) and written into
`<grading-dir>/report/<assignment>/` (also the last step of `autograder.classroom.classgrade`):

- `scores.csv`     one row per learner: each graded cell's score, the total (before any late penalty), the points,
                   how late and the penalty (as nbgrader's policy gives the scores now: autograder.pipeline.late),
                   the status (`graded`, `waiting for manual grading`: the total is provisional, `grader error:
                   <reason>`, which a stored record that says the grader could not grade gives too, or `not graded`);
- `diagnoses.csv`  the misconceptions, most learners first: a graded cell's mistake (the known mistakes its record
                   names, else the checks that failed), who made it, the points it cost, the book's section that
                   teaches it (its known mistake's, `SECTIONS` in examples/variants, else its part's);
- `histogram.png`  the histogram of total scores;
- `report.html`    one page, no script, that fits 1280 px (on a phone a wide table scrolls in its own box): the above,
                   the flagged cells (the grader's doubt, not a mistake), the grading notes; the book where
                   `c.BookLinks.url` says, else in `_build/html`.

All from the gradebook and each notebook's stored record (autograder.verdict.record), never from re-reading a text.
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
from traitlets.config import Config

from autograder import ROOT
from autograder.classroom import grade
from autograder.notebooks import is_graded_test, nbgrader_meta
from autograder.pipeline.export import csv_cell
from autograder.pipeline.feedback import LOCAL_BOOK
from autograder.pipeline.late import refresh_all
from autograder.verdict import record
from autograder.verdict.record import DRAWN, FLAGGED, Grading, Verdict


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


def misconception(v: Verdict) -> tuple[str, ...]:
    """What one learner got wrong in one graded cell, as a key that another learner with the same mistake shares, made
    of the record's data, never of its words: a part left as the release's stub is unanswered, whatever else its
    tests said; else the known mistakes the evidence names (by id); else the checks that failed (the ones every
    grading makes, when any did: which drawn checks fail depends on the draws); else the notes."""
    if v.unanswered:
        return ("unanswered",)
    failed = [c for c in v.checks if not c.passed]
    if not failed:
        return ("noted",)            # what lost the points is a note: a library version used, say
    named = sorted({i for c in failed for cause, i in zip(c.causes, c.cause_ids) if i and cause in v.causes})
    if named:
        return ("mistakes", *named)
    steady = [c for c in failed if c.kind != DRAWN] or failed
    return ("failed", *sorted({c.label for c in steady}))


def class_diagnoses(grading_dir: Path, rows: list[grade.CellScore],
                    order: Sequence[str] = ()) -> tuple[list[dict], list[dict], list[dict]]:
    """(the misconceptions, the flags, the grading notes) of one assignment's class.

    A misconception is one per (graded cell, mistake): how many learners made it, who, the points it cost them in
    all and on average; it is shown by the diagnoses its first learner got, the ones that name a cause first (`said`:
    the causes named, else the first; `observed`: the rest; `mistakes`: the known mistakes named), and ranked most
    learners first, then most points lost (a part left unanswered after every mistake). A flag is one per
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
                f = flagged.setdefault((cell, tuple(sorted(set(v.notes)))), {"cell": cell, "why": v.notes, "who": [],
                                                                              "waiting": []})
                f["who"].append(learner)
                if row is not None and row.needs_manual_grade:
                    f["waiting"].append(learner)
            diagnoses = [c.diagnosis for c in v.checks if not c.passed and c.diagnosis] if v.status == FLAGGED \
                else v.failed
            if not diagnoses:
                continue
            key = (cell, misconception(v))
            unanswered = v.unanswered
            shown = ([next(c.diagnosis for c in v.checks if c.unanswered and not c.passed)] if unanswered
                     else sorted(dict.fromkeys(diagnoses), key=lambda d: ": " not in d))
            named = [] if unanswered or v.status == FLAGGED else [*v.notes, *v.causes]
            said = [d for d in shown if d in named] or shown[:1]
            ids = {cause: name for c in v.checks for cause, name in zip(c.causes, c.cause_ids) if name}
            g = groups.setdefault(key, {"cell": cell, "diagnoses": shown, "who": [], "lost": [], "said": said,
                                        "unanswered": unanswered,
                                        "observed": [d for d in shown if d not in said],
                                        "mistakes": [ids[c] for c in v.causes if c in ids and not unanswered]})
            g["who"].append(learner)
            g["lost"].append(row.points - (row.score or 0.0) if row is not None else 0.0)
        for note in [*rec.get("notes", []), *rec.get("problems", [])]:
            noted[note].append(learner)
    cells = grade.ordered_cells(rows, order)
    out = [{"cell": g["cell"], "diagnosis": " | ".join(g["diagnoses"]), "diagnoses": g["diagnoses"],
            "unanswered": g["unanswered"],
            "said": g["said"], "observed": g["observed"], "mistakes": g["mistakes"],
            "learners": len(g["who"]), "who": sorted(g["who"]), "total": round(sum(g["lost"]), 2),
            "lost": round(sum(g["lost"]) / len(g["lost"]), 2)}
           for g in groups.values() if g["cell"] in cells]
    out.sort(key=lambda x: (x["unanswered"], -x["learners"], -x["total"], cells.index(x["cell"]),
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


def course_config() -> Config:
    """The course's nbgrader configuration: the nbgrader_config.py of the folder the report runs in, as nbgrader reads
    it, else the course's; empty when it does not load."""
    from traitlets.config.loader import PyFileConfigLoader

    for folder in (Path.cwd(), ROOT):
        if (folder / "nbgrader_config.py").exists():
            try:
                return PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config()
            except Exception:  # noqa: BLE001 - a configuration that does not load: nbgrader's defaults
                return Config()
    return Config()


def book_url(cfg: Config | None = None) -> str:
    """Where the book is published, as `c.BookLinks.url` of the course's configuration says ('' when it does not)."""
    cfg = course_config() if cfg is None else cfg
    return str(cfg.get("BookLinks", {}).get("url", "") or "")


def section_href(link: str, url: str, out: Path) -> str:
    """A notebook's link into the book (`../../_build/html/...`), from the report's folder: on the published book,
    else on the course's own build."""
    if not link.startswith(LOCAL_BOOK):
        return link
    rest = link[len(LOCAL_BOOK):]
    return url.rstrip("/") + "/" + rest if url else os.path.relpath(ROOT / "_build" / "html", out) + "/" + rest


FENCE = re.compile(r"^(`{3,}|~{3,})")
HEADING = re.compile(r"^(#+) (.+)$")


def book_headings(page: str) -> tuple[str, dict[str, str]]:
    """The title of book/<page>.md and its sections' headings by the id Sphinx gives each (docutils' `make_id` of its
    text, math and code marks aside)."""
    from docutils.nodes import make_id

    title, fence = "", ""
    found: dict[str, str] = {}
    path = ROOT / "book" / f"{page}.md"
    for line in path.read_text().splitlines() if path.exists() else []:
        if m := FENCE.match(line):
            fence = "" if fence and m.group(1).startswith(fence) else fence or m.group(1)
        elif not fence and (h := HEADING.match(line)):
            text = h.group(2).strip()
            if len(h.group(1)) == 1 and not title:
                title = text
            else:
                found.setdefault(make_id(text.replace("$", "").replace("`", "")), text)
    return title, found


def book_section(ref: str) -> tuple[str, str]:
    """A section of the book, `<page>#<id>`, as a notebook links it: (`<chapter> › <heading>`, its link)."""
    page, _, anchor = ref.partition("#")
    title, headings = book_headings(page)
    return f"{title} › {headings.get(anchor, anchor)}", f"{LOCAL_BOOK}book/{page}.html#{anchor}"


def mistake_sections(assignment: str) -> dict[str, tuple[str, str]]:
    """The known mistakes of `assignment` whose teaching section is not the one their part's description names
    (`SECTIONS` in examples/variants/<assignment>.py), each as `book_section` gives it."""
    from autograder.verdict import known  # torch: only where a class has mistakes named

    mod = known.module(assignment)
    return {name: book_section(ref) for name, ref in getattr(mod, "SECTIONS", {}).items()} if mod else {}


def reteach(cell: str, mistakes: Sequence[str], parts: dict[str, list[tuple[str, str]]],
            named: dict[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """Where the book teaches a misconception, as (title, link): the sections of its known mistakes, else the ones
    its part's description names (a failure no known mistake explains, a part left unanswered)."""
    found = [named[m] for m in mistakes if m in named]
    if len(found) < len(mistakes) or not found:
        found += parts.get(cell, [])
    return list(dict.fromkeys(found))


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


# TeX in a section's title (a heading of the book: `Why divide by $\sqrt{d}$?`) is drawn as text, the letters of its
# math in italics: the page runs no script to typeset it. An unknown command is shown as its name.
MATH = re.compile(r"\$([^$]+)\$")
SQRT = re.compile(r"\\sqrt\{([^{}]*)\}")
TEX_COMMAND = re.compile(r"\\([A-Za-z]+)")
TEX_SYMBOLS = {"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε", "theta": "θ",
               "lambda": "λ", "mu": "μ", "pi": "π", "sigma": "σ", "tau": "τ", "phi": "φ", "omega": "ω", "ell": "ℓ",
               "cdot": "·", "times": "×", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "to": "→",
               "infty": "∞"}


def _math(tex: str, as_html: bool) -> str:
    tex = SQRT.sub(lambda m: "√" + (m.group(1) if len(m.group(1)) == 1 else f"({m.group(1)})"), tex)
    tex = TEX_COMMAND.sub(lambda m: TEX_SYMBOLS.get(m.group(1), m.group(1)), tex)
    tex = re.sub(r"[{}\\]", "", tex).replace("~", " ")
    if not as_html:
        return tex
    return re.sub(r"\b[A-Za-z]\b", lambda m: f"<var>{m.group(0)}</var>", html.escape(tex))


def tex_text(title: str, as_html: bool = False) -> str:
    """A title with its TeX drawn as text (`$\\sqrt{d}$`: √d): plain, or as HTML (escaped, a letter of the math in
    <var>)."""
    parts = MATH.split(title)                 # text, math, text, ...
    return "".join(_math(p, as_html) if i % 2 else html.escape(p) if as_html else p for i, p in enumerate(parts))


CSS = """body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:80em;padding:1em 1.5em;color:#222}
p{max-width:52em}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}img{max-width:100%}.muted{color:#555}
.box{overflow-x:auto;margin:1em 0}table{border-collapse:collapse;font-size:.9em}
th,td{border:1px solid #ccc;padding:.3em .5em;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f2f2f2}td.n,th.n{text-align:right;white-space:nowrap}tr.failed td{color:#a00}
tr.waiting td{color:#8a5300}ul{margin:0;padding-left:1.2em}summary{cursor:pointer;color:#1f5fbf}
.part{font:.9em ui-monospace,monospace;color:#555}.said{margin:.2em 0}.names{overflow-wrap:anywhere}
table.scores td.who{position:sticky;left:0;background:#fff}
table.scores th:first-child{position:sticky;left:0}table.scores td.status{min-width:10em}
@media (max-width:44em){body{padding:.5em .8em}
table.cards,table.cards tbody,table.cards tr,table.cards td{display:block}table.cards thead{display:none}
table.cards tr{border:1px solid #ccc;margin:.6em 0}table.cards td{border:0;border-top:1px solid #eee}
table.cards td.n{text-align:left;white-space:normal}
table.cards td[data-label]::before{content:attr(data-label) ": ";font-weight:600;color:#555}}"""
NO_ONE_WAITS = "none: every one has a typed score"
NAMES_SHOWN = 5                 # learners named in a row of the report; the others behind a "more" toggle


def _names(names: list[str]) -> str:
    """Learners as a short list: the first few, the rest collapsed."""
    e = html.escape
    shown = e(", ".join(names[:NAMES_SHOWN]))
    rest = names[NAMES_SHOWN:]
    more = f"<details><summary>and {len(rest)} more</summary>{e(', '.join(rest))}</details>" if rest else ""
    return f'<span class="names">{shown}</span>{more}'


def _breakable(name: str) -> str:
    """A name (a graded cell's, a learner's), escaped, that may break after an underscore or inside CamelCase."""
    return re.sub(r"_|(?<=[a-z])(?=[A-Z])", lambda m: m.group(0) + "<wbr>", html.escape(name))


def _table(cls: str, head: list[tuple[str, str]], rows: list[str], empty: str) -> str:
    """A table in a box of its own (a wide one scrolls there, never the page); `head`: (label, th class)."""
    th = "".join(f'<th class="{c}">{label}</th>' if c else f"<th>{label}</th>" for label, c in head)
    body = "".join(rows) or f'<tr><td colspan="{len(head)}">{empty}</td></tr>'
    return f'<div class="box"><table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


def render_html(assignment: str, cells: list[str], lines: list[grade.Line], diagnoses: list[dict], flags: list[dict],
                notes: list[dict], png: bytes, sections: dict[str, list[tuple[str, str]]]) -> str:
    """The report's page; `sections`: the book's sections each graded cell's part names (a misconception's own, when
    it has some, are its "sections")."""
    e = html.escape
    failed = [x for x in lines if x.total is None]
    waiting = [x for x in lines if x.waiting]
    late = [x for x in lines if x.seconds_late > 0]
    faults = sum(1 for x in failed if x.status.startswith(grade.GRADER_ERROR))
    summary = (f"{len(lines) - len(failed)} learners graded ({len(waiting)} waiting for a manual grade, {len(late)} "
               f"late), {len(failed)} not graded"
               + (f" ({faults} of them for a grader error: no score is recorded for them, and their grading must be "
                  "run again)" if faults else "") + ".")

    def reteach_links(d: dict) -> str:
        found = d.get("sections") or sections.get(d["cell"], [])
        return "<br>".join(f'<a href="{e(href)}">{tex_text(title, True)}</a>' for title, href in found) or "-"

    def said(d: dict) -> str:
        observed = d.get("observed", [])
        more = (f"<details><summary>what the tests observed ({len(observed)})</summary><ul>"
                + "".join(f"<li>{e(x)}</li>" for x in observed) + "</ul></details>") if observed else ""
        return "".join(f'<p class="said">{e(x)}</p>' for x in d.get("said", d["diagnoses"])) + more

    diag = [f'<tr><td class="n" data-label="#">{i}</td><td data-label="mistake"><span class="part">'
            f'{_breakable(d["cell"].removesuffix("_tests"))}</span>{said(d)}</td>'
            f'<td data-label="learners"><strong>{d["learners"]}</strong>: {_names(d["who"])}</td>'
            f'<td class="n" data-label="points lost">{d["total"]:g} ({d["lost"]:g} each)</td>'
            f'<td data-label="re-teach">{reteach_links(d)}</td></tr>' for i, d in enumerate(diagnoses, 1)]
    flagged = [f'<tr><td data-label="graded cell"><span class="part">{_breakable(f["cell"].removesuffix("_tests"))}'
               f'</span></td><td data-label="why">' + "".join(f'<p class="said">{e(x)}</p>' for x in f["why"])
               + f'</td><td data-label="learners"><strong>{f["learners"]}</strong>: {_names(f["who"])}</td>'
               f'<td data-label="still waiting">{_names(f["waiting"]) if f["waiting"] else NO_ONE_WAITS}</td></tr>'
               for f in flags]
    body = []
    for x in lines:
        cls = ' class="failed"' if x.total is None else (' class="waiting"' if x.waiting else "")
        tds = "".join(f'<td class="n">{_fmt(x.scores.get(c))}</td>' for c in cells)
        body.append(f'<tr{cls}><td class="who">{_breakable(x.learner)}</td>{tds}<td class="n">{_fmt(x.total)}</td>'
                    f'<td class="n">{_fmt(x.points)}</td><td>{e(_late(x))}</td><td class="status">{e(_status(x))}</td>'
                    "</tr>")
    noted = [f'<tr><td data-label="note">{e(n["note"])}</td><td data-label="learners">'
             f'<strong>{n["learners"]}</strong>: {_names(n["who"])}</td></tr>' for n in notes]
    img = base64.b64encode(png).decode()
    head = [("learner", ""), *((_breakable(c.removesuffix("_tests")), "n") for c in cells), ("total", "n"),
            ("points", "n"), ("late", ""), ("status", "")]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Class report: {e(assignment)}</title>
<style>{CSS}</style></head><body>
<h1>Class report: {e(assignment)}</h1>
<p class="muted">{e(summary)}</p>
<h2>What to re-teach: the misconceptions, most learners first</h2>
<p class="muted">Learners whose tests failed with the same diagnoses (numbers aside) in a graded cell made the same
mistake: it is named by the known mistake the evidence points to (what the tests observed is behind the toggle); the
points are what the cell cost them, in all and per learner; the section is where the book teaches it.</p>
{_table("cards", [("#", "n"), ("mistake", ""), ("learners", ""), ("points lost", "n"), ("re-teach", "")], diag,
        "no diagnosis: every graded cell passed")}
<h2>Flagged for manual grading</h2>
<p class="muted">A flag is the grader's doubt, not a mistake: it could not decide the part on its own. Until you type a
score for it in formgrader, the learner's total counts the provisional score.</p>
{_table("cards", [("graded cell", ""), ("why the grader flagged it", ""), ("learners", ""),
                  ("still waiting for your score", "")], flagged, "none: the grader decided every part on its own")}
<h2>Scores</h2>
<p class="muted">The total is before any late penalty (the export applies it).</p>
{_table("scores", head, body, "no learner")}
<h2>Grading notes: protections or measurements a grading lacked, notebooks the grader repaired</h2>
{_table("cards", [("note", ""), ("learners", "")], noted,
        "none: every grading had every protection, no notebook needed repair")}
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
    cfg = course_config()
    refresh_all(grade.gradebook_url(grading_dir, url), assignment, cfg)
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
    published = book_url(cfg)
    parts = book_sections(grading_dir, assignment)
    named = mistake_sections(assignment) if any(d["mistakes"] for d in diagnoses) else {}
    sections = {cell: [(title, section_href(link, published, out)) for title, link in found]
                for cell, found in parts.items()}
    for d in diagnoses:
        d["sections"] = [(title, section_href(link, published, out))
                         for title, link in reteach(d["cell"], d["mistakes"], parts, named)]
    with open(out / "diagnoses.csv", "w", newline="") as f:
        row = _writer(f)
        row(["cell", "diagnosis", "learners", "points lost", "points lost per learner", "who", "re-teach"])
        for d in diagnoses:
            row([d["cell"], d["diagnosis"], d["learners"], f"{d['total']:g}", f"{d['lost']:g}", " ".join(d["who"]),
                 " ".join(f"{tex_text(title)} <{href}>" for title, href in d["sections"])])
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
