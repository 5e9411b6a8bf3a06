"""`HiddenSuites`: each graded cell scored by its hidden suite (a trusted process; the learner's code in a sandboxed
worker); the verdict replaces the cell's outputs, rendered from it (the diagnosis as text, the score as a plain float
in [0, points], which nbgrader's `SaveAutoGrades` records), and is kept once, as data, in the grading's record
(stored by `autograder.pipeline.reader`). A grader fault raises: nbgrader records nothing and the command exits
non-zero."""
from __future__ import annotations

import html

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.notebooks import is_graded_test, nbgrader_meta
from autograder.pipeline import submission
from autograder.pipeline.common import DEADLINE, LAST, UNFINISHED, markdown_text, note, quoted, settings_of
from autograder.verdict import hidden
from autograder.verdict.record import RECORD, GraderFault, Verdict


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
                           grading.fault, quoted(grading.log[-6000:]))
            raise GraderFault(f"grader fault (not the learner's): {grading.fault}")
        for cell in nb.cells:
            if not is_graded_test(cell):
                continue
            gid = nbgrader_meta(cell)["grade_id"]
            cell.outputs = verdict_outputs(grading.verdicts[gid])
            if gid in grading.structure:
                cell.outputs.append(structure_output(grading.structure[gid]))
        grading.structure = {gid: {k: v for k, v in st.items() if k != "html"} for gid, st in grading.structure.items()}
        rec = resources.get(RECORD, {})
        missing = [name for name, ok in rec.get("protections", {}).items() if not ok]
        if missing:                   # the machine's, not the learner's: the log and the class report say so
            self.log.warning("%s graded without: %s", resources["nbgrader"].get("student"), "; ".join(missing))
        notes = list(dict.fromkeys([*(f"graded without: {m}" for m in missing), *grading.notes]))
        resources[RECORD] = {**rec, **grading.to_dict(), "notes": notes,
                             "problems": nb.metadata.get(submission.PROBLEMS, [])}
        if grading.notes:
            text = markdown_text("; ".join(dict.fromkeys(grading.notes)))
            nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"**Grader note:** {text}."))
        self.log.info("hidden suite %s: %s", assignment,
                      ", ".join(f"{gid} {v.score:g}/{v.points:g}" for gid, v in grading.verdicts.items()))
        return nb, resources


def verdict_outputs(v: Verdict, given: float | None = None) -> list:
    """A graded cell's outputs rendered from its verdict: the verdict as text, and the score as a plain float (which
    nbgrader reads); `given`: the score the instructor gave since, which both say instead."""
    score = v.score if given is None else given
    return [note(v.text(given) + "\n"),
            nbformat.v4.new_output("execute_result", data={"text/plain": repr(float(score))}, execution_count=None)]


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
        body = ((f"<ul>{items}</ul>" if found else "<p>The same structure as the course's.</p>")
                + str(st.get("html", "")))
    page = (f'<div class="grader-structure"><p><strong>Your {name} drawn beside the course\'s</strong> (for you to '
            f"read; the points come from the hidden tests)</p>{body}</div>")
    return nbformat.v4.new_output("display_data", data={"text/plain": text, "text/html": page})
