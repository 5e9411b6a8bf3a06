"""The autograde preprocessors that make `nbgrader autograde` trustworthy.

nbgrader's own pipeline runs the hidden tests inside the learner's kernel and reads a cell's
score from its output.  Here, registered in `nbgrader_config.py` through `configure(c)`:

- `SandboxedExecute` replaces nbgrader's `Execute`: the notebook runs in the sandbox (kernel and
  client both), only to record outputs for the feedback; what comes back is capped, validated and
  sanitized (no script of a learner's ever reaches an instructor's browser);
- `HiddenSuites` then scores every graded cell with the hidden suite (trusted process, learner
  code in a sandboxed worker) and replaces the cell's outputs with the verdict: the diagnosis as
  text and the score as a plain float in [0, points], which nbgrader's `SaveAutoGrades` records.
  The verdicts are stored once, as data, in the notebook's metadata (`autograder`); a grader fault
  raises, so nbgrader does not record the submission as graded and the command exits non-zero;
- `SaveDiagnoses` writes each verdict as the gradebook comment of the learner's solution cell, and
  marks flagged cells as needing manual grading.

Every limit comes from `autograder.config` (`c.Grader.<name>` in nbgrader_config.py).
"""
from __future__ import annotations

import atexit
import contextlib
import html
import json
import re
import shutil
import time
from pathlib import Path

import bleach
import nbformat
from nbconvert.exporters import HTMLExporter, NotebookExporter
from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbconvert.preprocessors.sanitize import SanitizeHTML
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    NbGraderPreprocessor,
    OverwriteCells,
    OverwriteKernelspec,
    SaveAutoGrades,
)
from traitlets import Unicode

from autograder import config
from autograder.inside import execute
from autograder.notebooks import TESTS_SUFFIX, cell_id, is_graded_test, nbgrader_meta
from autograder.pipeline import submission
from autograder.sandbox.box import Limits, Sandbox, SandboxUnavailable
from autograder.verdict import hidden
from autograder.verdict.hidden import RECORD, record

DEADLINE = "grader_deadline"   # resources: when this learner's grading budget ends (time.time())
LAST = "grader_last"           # resources: no learner follows this one in this nbgrader run
UNFINISHED = "grader_unfinished"   # resources: the cells the notebook's run stopped at the cell limit (`unfinished`)
TEMPLATES = Path(__file__).parent / "templates"


class GraderFault(RuntimeError):
    """The grader could not grade this submission; nbgrader's failure path takes over (never a zero)."""


def _note(text: str):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def settings_of(pre) -> config.Settings:
    return config.Grader(parent=pre).settings()


class SubmissionReader(NotebookExporter):
    """nbgrader's exporter, reading submissions defensively (see `autograder.pipeline.submission`)."""

    def from_file(self, file_stream, resources=None, **kw):
        ids = (resources or {}).get("nbgrader", {})
        converter = self.parent
        if not ids.get("assignment") or not hasattr(converter, "coursedir"):
            return super().from_file(file_stream, resources=resources, **kw)
        release_path = Path(converter.coursedir.format_path(converter.coursedir.release_directory, ".",
                                                            ids["assignment"])) / f"{ids['notebook']}.ipynb"
        release = nbformat.read(str(release_path), as_version=4)
        try:
            raw = file_stream.read(submission.MAX_BYTES + 1).encode("utf-8")
        except UnicodeDecodeError:
            raw = b"\xff not UTF-8 text"
        nb, problems = submission.read(raw, release)
        for problem in problems:
            self.log.warning("%s/%s: %s", ids.get("student"), ids["assignment"], problem)
        return self.from_notebook_node(nb, resources=resources, **kw)


class _Kernels:
    """The next learner's notebook kernel, made ready in its own sandbox (torch imported, waiting for a notebook)
    while this one's is graded: each learner gets a fresh one, never used before."""

    def __init__(self):
        self.ready = None                     # (settings, wall, Sandbox, Popen)
        atexit.register(self.discard)

    @staticmethod
    def _start(s: config.Settings, wall: float):
        try:
            sb = Sandbox(Limits.of(s, wall_s=wall))
        except (SandboxUnavailable, OSError) as e:
            raise GraderFault(f"the sandbox could not be set up: {e}") from None
        return sb, sb.start([sb.inside(sb.files / "execute.py"), str(s.cell_timeout), str(s.max_cell_output_chars),
                             str(s.max_cell_output_bytes), str(s.max_outputs_per_cell)], preload=execute.PRELOAD)

    def take(self, s: config.Settings, wall: float):
        ready, self.ready = self.ready, None
        if ready is not None and ready[:2] == (s, wall) and ready[3].poll() is None:
            return ready[2], ready[3]
        if ready is not None:
            ready[2].close()
        return self._start(s, wall)

    def prepare(self, s: config.Settings, wall: float):
        self.discard()
        with contextlib.suppress(GraderFault):
            self.ready = (s, wall, *self._start(s, wall))

    def discard(self):
        if self.ready is not None:
            self.ready[2].close()
            self.ready = None


_kernels = _Kernels()


def last_learner(pre, resources) -> bool:
    """Whether nbgrader grades no submission after this one in this run: the converter (the preprocessor's
    exporter's parent) grades the submission folders it found in sorted order. False when that cannot be read."""
    converter = getattr(getattr(pre, "parent", None), "parent", None)
    try:
        folders = sorted(converter.assignments)
        cd = converter.coursedir
        pattern = cd.format_path(cd.submitted_directory, "(?P<student_id>.*)", "(?P<assignment_id>.*)", escape=True)
        ids = [m.groupdict() if m else None for m in (re.match(pattern, f) for f in folders)]
        ours = {"assignment_id": resources["nbgrader"]["assignment"], "student_id": resources["nbgrader"]["student"]}
        return bool(ids) and ids[-1] == ours
    except (AttributeError, KeyError, TypeError, re.error):
        return False


class SandboxedExecute(NbGraderPreprocessor):
    """Execute the notebook inside the sandbox and keep only the outputs it produced, capped and sanitized."""

    def preprocess(self, nb, resources):
        s = settings_of(self)
        started = time.time()
        resources[DEADLINE] = started + s.learner_budget
        resources[LAST] = last_learner(self, resources)
        if resources[LAST]:
            self.log.info("%s is the last submission of this run: no kernel or suite process is made ready after it",
                          resources["nbgrader"].get("student"))
        wall = min(s.notebook_timeout, s.learner_budget)
        hidden.prepare(resources["nbgrader"]["assignment"], s)
        sb, proc = _kernels.take(s, wall)
        with sb:
            missing = sb.missing()
            if missing:
                self.log.warning("sandbox: this grading lacks %s", "; ".join(missing))
            run = sb.finish(proc, s.max_notebook_bytes, nbformat.writes(nb).encode(),
                            last=json.dumps(execute.DONE).encode() + b"\n")
        if not resources[LAST]:
            _kernels.prepare(s, wall)           # the next learner's kernel, while this one is graded
        lines = run.stdout.splitlines()
        if not lines or _json(lines[0]) != {"ready": True}:
            # Nothing of the learner's had run: the sandbox or its kernel could not start.
            self.log.error("the sandbox's notebook run ended before its kernel was ready (%s); its stderr:\n%s",
                           _ended(run, wall), _quoted(run.stderr))
            raise GraderFault(f"the notebook's kernel did not start in the sandbox ({_ended(run, wall)}); "
                              "the sandbox's stderr is in the log")
        ran = self._apply(nb, lines[1:], s)
        resources[UNFINISHED] = unfinished(nb, s)
        problem = None
        if run.timed_out:
            problem = f"your notebook did not finish running within {wall:g} s"
        elif run.over_limit:
            problem = f"your notebook's outputs passed {s.max_notebook_bytes >> 20} MiB; the rest were not kept"
        elif ran < sum(c.cell_type == "code" for c in nb.cells):
            problem = "your notebook could not be run to the end (it ended the Python process or used too much memory)"
        if problem:
            self.log.warning("%s (%s); the sandbox's stderr:\n%s", problem, _ended(run, wall), _quoted(run.stderr))
            first_code = next((c for c in nb.cells if c.cell_type == "code"), None)
            if first_code is not None:
                first_code.outputs.insert(0, _note(f"[grader] {problem}; the outputs below are those recorded before.\n"))
        nb.metadata[RECORD] = {**record(nb), "protections": {name: ok for name, ok in sb.protections.items()},
                               "execute_s": round(time.time() - started, 3)}
        sanitize(nb)
        return nb, resources

    def _apply(self, nb, lines: list[bytes], s: config.Settings) -> int:
        """Put the outputs of each line the sandbox wrote into its code cell, checked and capped again here; the
        number of code cells that reported.  Only the first line for each code cell counts, and a line longer
        than a cell's outputs may be is not parsed."""
        from autograder.inside.execute import cap_outputs

        code = {i for i, c in enumerate(nb.cells) if c.cell_type == "code"}
        done: set[int] = set()
        longest = s.max_cell_output_bytes + s.max_cell_output_chars + (64 << 10)
        for line in lines:
            if done == code:
                break
            msg = _json(line) if len(line) <= longest else None
            try:
                index, raw = int(msg["index"]), msg["outputs"]
                if index not in code or index in done or not isinstance(raw, list):
                    continue
                outputs = [nbformat.from_dict(o) for o in raw[:s.max_outputs_per_cell]]
                probe = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=outputs)])
                nbformat.validate(probe)
                outputs = [_joined(o) for o in outputs]
            except Exception:  # noqa: BLE001 - whatever the sandbox wrote, it is only untrusted data
                continue
            nb.cells[index].outputs = cap_outputs(outputs, s.max_cell_output_chars, s.max_cell_output_bytes,
                                                  s.max_outputs_per_cell, total=len(raw))
            done.add(index)
        return len(done)


def unfinished(nb, s: config.Settings) -> list[str]:
    """The code cells (by `cell_id`) that the notebook's run stopped at the cell limit: the hidden suite's worker does
    not run them again, and the names they define fail as a cell that could not be loaded. Only the sandbox says a
    cell was stopped, and so can a cell of the learner's raising the same error: believing it can only cost the
    learner what that cell defines, and it saves the cell limit's time (60 s by default) a second time."""
    from autograder.inside.execute import UNFINISHED as STOPPED

    said = STOPPED.format(int(s.cell_timeout))
    return [cell_id(cell, i) for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and any(
        o.get("output_type") == "error" and o.get("ename") == "TimeoutError" and o.get("evalue") == said
        for o in cell.outputs)]


def _joined(out):
    """An output whose texts are strings: nbformat also allows lists of lines, which the sanitizer cannot read."""
    if isinstance(out.get("text"), list):
        out["text"] = "".join(out["text"])
    for key, value in out.get("data", {}).items():
        if isinstance(value, list) and not key.endswith("json"):
            out["data"][key] = "".join(value)
    return out


def _json(line: bytes):
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _ended(run, wall: float) -> str:
    if run.timed_out:
        return f"stopped after {wall:g} s"
    if run.returncode is None:
        return "killed"
    return f"killed by signal {-run.returncode}" if run.returncode < 0 else f"exit code {run.returncode}"


def _quoted(text: str) -> str:
    """A sandbox's stderr for the log, each line marked, so none of it reads as a line of the grader's own."""
    return "\n".join(f"    | {line}" for line in text.strip().splitlines()[-80:]) or "    | (nothing)"


# What a learner's HTML and markdown may hold: bleach's defaults (links of http, https and mailto only) and the
# tags of text and tables; no script, style, SVG, frame, form, event handler, or image fetched from anywhere
# (a learner's images are image/png outputs).
TAGS = sorted({*bleach.ALLOWED_TAGS, "p", "div", "span", "br", "hr", "pre", "h1", "h2", "h3", "h4", "h5", "h6",
               "table", "thead", "tbody", "tr", "th", "td", "sub", "sup", "del", "dl", "dt", "dd"})
ATTRIBUTES = {**bleach.ALLOWED_ATTRIBUTES, "td": ["colspan", "rowspan"], "th": ["colspan", "rowspan"]}


# Markdown makes links and images of its own, `[x](javascript:...)` and `[x]: url`, its scheme even written as
# character references, which no HTML sanitizer sees: a zero-width space after the `]` leaves them as text.
MARKDOWN_LINK = re.compile(r"\](?=[(:])")


def sanitize(nb):
    """Learner output is data: no script, no active HTML or SVG, in any output or in a learner's markdown."""
    cleaner = SanitizeHTML(tags=TAGS, attributes=ATTRIBUTES)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            if not nbgrader_meta(cell).get("locked"):     # a locked one is the course's, restored from the release
                cell.source = cleaner.sanitize_html_tags(MARKDOWN_LINK.sub("]\u200b", cell.source))
            continue
        cleaner.preprocess_cell(cell, {}, i)


class HiddenSuites(NbGraderPreprocessor):
    """Score each graded cell with the hidden suite; the verdict replaces the cell's outputs."""

    def preprocess(self, nb, resources):
        assignment = resources["nbgrader"]["assignment"]
        s = settings_of(self)
        if not hidden.suite_path(assignment, s).exists():
            raise GraderFault(f"no hidden suite for assignment {assignment!r} ({hidden.suite_path(assignment, s)})")
        grading = hidden.grade(nb, assignment, s, resources.get(DEADLINE), more=not resources.get(LAST, False),
                               unfinished=resources.get(UNFINISHED, ()))
        if grading.log:
            self.log.debug("hidden suite log:\n%s", grading.log)
        if grading.fault:
            self.log.error("grader fault for %s: %s; the hidden suite's log:\n%s", resources["nbgrader"].get("student"),
                           grading.fault, _quoted(grading.log[-6000:]))
            raise GraderFault(f"grader fault (not the learner's): {grading.fault}")
        for cell in nb.cells:
            if not is_graded_test(cell):
                continue
            gid = nbgrader_meta(cell)["grade_id"]
            v = grading.verdicts[gid]
            cell.outputs = [_note(v.text() + "\n"),
                            nbformat.v4.new_output("execute_result", data={"text/plain": repr(float(v.score))},
                                                   execution_count=None)]
            if gid in grading.structure:
                cell.outputs.append(structure_output(grading.structure[gid]))
        grading.structure = {gid: {k: v for k, v in st.items() if k != "html"} for gid, st in grading.structure.items()}
        rec = record(nb)
        missing = [name for name, ok in rec.get("protections", {}).items() if not ok]
        notes = list(dict.fromkeys([*(f"graded without: {m}" for m in missing), *grading.notes]))
        nb.metadata[RECORD] = {**rec, **grading.to_dict(), "notes": notes,
                               "problems": nb.metadata.get(submission.PROBLEMS, [])}
        if notes:
            nb.cells.insert(0, nbformat.v4.new_markdown_cell("**Grader note:** " + "; ".join(notes) + "."))
        self.log.info("hidden suite %s: %s", assignment,
                      ", ".join(f"{gid} {v.score:g}/{v.points:g}" for gid, v in grading.verdicts.items()))
        return nb, resources


def structure_output(st: dict):
    """The learner's module drawn beside the course's (autograder.graph; every label escaped there), as an output."""
    name = html.escape(str(st.get("name", "")))
    if "note" in st:
        text = str(st["note"])
        body = f"<p>{html.escape(text)}</p>"
    else:
        found = [str(d) for d in st.get("differences", [])]
        text = (f"Your {st.get('name')}'s structure differs from the course's: " + "; ".join(found) if found
                else f"Your {st.get('name')} has the course's structure.")
        items = "".join(f"<li>{html.escape(d)}</li>" for d in found)
        body = (f"<ul>{items}</ul>" if found else "<p>The same structure as the course's.</p>") + str(st.get("html", ""))
    page = (f'<div class="grader-structure"><p><strong>Your {name} drawn beside the course\'s</strong> (for you to '
            f"read; the points come from the hidden tests)</p>{body}</div>")
    return nbformat.v4.new_output("display_data", data={"text/plain": text, "text/html": page})


class SaveDiagnoses(NbGraderPreprocessor):
    """Write each verdict as the gradebook comment of the solution cell it scores; flag cells for manual grading."""

    def preprocess(self, nb, resources):
        rec = record(nb)
        grading = hidden.Grading.from_dict(rec)
        ids = resources["nbgrader"]
        problems = "; ".join(rec.get("problems", []))
        solution_ids = {nbgrader_meta(c).get("grade_id") for c in nb.cells if nbgrader_meta(c).get("solution")}
        with Gradebook(ids["db_url"]) as gb:
            for gid, v in grading.verdicts.items():
                if v.status == hidden.FLAGGED:
                    try:
                        grade = gb.find_grade(gid, ids["notebook"], ids["assignment"], ids["student"])
                        grade.needs_manual_grade = True
                    except MissingEntry:
                        pass
                name = gid.removesuffix(TESTS_SUFFIX)
                if name not in solution_ids:
                    continue
                comment = gb.find_comment(name, ids["notebook"], ids["assignment"], ids["student"])
                if comment.auto_comment == "No response." and not problems:
                    continue
                comment.auto_comment = as_text(f"{problems}. {v.comment()}" if problems else v.comment())
            gb.db.commit()
        return nb, resources


def as_text(comment: str) -> str:
    """A comment that the feedback renders as markdown (nbgrader's template) shows as the text it is: what a
    diagnosis quotes of the learner's code or messages makes no HTML and no link."""
    return comment.translate({ord(ch): f"&#{ord(ch)};" for ch in "&<>[]"})


class FeedbackHTML(HTMLExporter):
    """The feedback pages' exporter: nbgrader's feedback template, with our head (templates/base/mathjax.html.j2:
    a Content-Security-Policy that runs no script but MathJax's, and MathJax from the grading folder)."""


class OfflineMathJax(NbGraderPreprocessor):
    """Put one copy of MathJax 3 and its configuration beside the feedback (feedback/mathjax/), which the pages load."""

    feedback_directory = Unicode("", help="The course's feedback folder.").tag(config=True)

    def preprocess(self, nb, resources):
        if not self.feedback_directory:
            return nb, resources
        target = Path(self.feedback_directory) / "mathjax"
        if not (target / "tex-chtml.js").exists():
            source = mathjax_source()
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / "tex-chtml.js", target / "tex-chtml.js")
            for sub in ("output/chtml", "input/tex/extensions"):
                shutil.copytree(source / sub, target / sub, dirs_exist_ok=True)
        config_js = TEMPLATES / "mathjax-config.js"
        if not (target / "config.js").exists() or (target / "config.js").read_bytes() != config_js.read_bytes():
            shutil.copy(config_js, target / "config.js")
        return nb, resources


def mathjax_source() -> Path:
    """MathJax 3 as shipped by the sphinx-mathjax-offline wheel (also the book's MathJax)."""
    import importlib.util

    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None:
        raise GraderFault("the feedback's MathJax comes from the sphinx-mathjax-offline package, which this Python "
                          "lacks (requirements.txt installs it)")
    return Path(spec.origin).parent / "static" / "mathjax"


def configure(c, feedback_directory: str = ""):
    """Register the trusted grading pipeline in an nbgrader config object."""
    c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells,
                                          CheckCellMetadata]
    c.Autograde.autograde_preprocessors = [SandboxedExecute, IgnorePattern, HiddenSuites, ClearMetadataPreprocessor,
                                           LimitOutput, SaveAutoGrades, SaveDiagnoses, AssignLatePenalties,
                                           CheckCellMetadata]
    c.OverwriteCells.add_missing_cells = True
    c.ClearMetadataPreprocessor.preserve_nb_metadata_mask = {("language_info", "name"), (RECORD,),
                                                             (submission.PROBLEMS,)}
    c.Autograde.exporter_class = SubmissionReader
    c.ClearSolutions.enforce_metadata = True
    # A graded cell's score is the trusted verdict; nothing the learner prints may change it.
    c.LimitOutput.max_lines = 2000
    c.LimitOutput.max_traceback = 100
    # Feedback: nbgrader's template with our head (a Content-Security-Policy, MathJax from the grading folder,
    # no CDN), for the feedback only: formgrader's own pages keep nbgrader's.
    import nbgrader

    nbgrader_templates = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"
    c.GenerateFeedback.exporter_class = FeedbackHTML
    c.FeedbackHTML.template_name = "feedback"
    c.FeedbackHTML.extra_template_basedirs = [str(TEMPLATES), str(nbgrader_templates)]
    c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, OfflineMathJax]
    c.OfflineMathJax.feedback_directory = feedback_directory
