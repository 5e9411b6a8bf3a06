"""Grades out, as nbgrader export plugins: `GradesExport` (plain `nbgrader export`, as `configure` sets it) and the
grade-book CSVs Canvas and Moodle import (`--exporter=autograder.pipeline.export.CanvasExport`, `MoodleExport`).

Every cell is written by Python's csv module (quoted where it must be), a learner's or an assignment's text that a
spreadsheet would read as a formula is text (`csv_cell`), and a score is after the late penalty that nbgrader's policy
gives the scores as they are now (autograder.pipeline.late), never below 0; `--student` and `--assignment` narrow it.
`GradesExport` has nbgrader's own CSV columns and rows (`CsvExportPlugin`'s, which are written unquoted, with the
penalty autograde stored): one per assignment (drafts too) and learner, 0 and no `timestamp` for none submitted.

The LMS exports have one row per learner, one column per released assignment (with a due date, a submission, or in
the exchange; not a draft from `generate_assignment`): the score, or for no submission 0 once the due date has passed
and empty before (no grade). Canvas (Gradebook > Import): `Student`, `ID`, `SIS User ID`, `SIS Login ID`, `Section`,
then `Name (id)` per assignment with the id from `c.CanvasExport.assignment_ids` (without one Canvas makes a new
assignment), and a second row `Points Possible`; a learner is the nbgrader id as `SIS Login ID`, and the `ID` where
nbgrader knows it (`lms_user_id`). Moodle (Grades > Import > CSV file): `Username` (the nbgrader id), `Email
address`, then a column per assignment; map `Username` to the username and each column to its grade item.
"""
from __future__ import annotations

import csv
import datetime
import os

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import ExportPlugin
from traitlets import Dict, Unicode

from autograder.pipeline.late import LatePenalties


class GradebookExport(ExportPlugin):
    """What the exports share: the learners and assignments exported, a submission's score after its late penalty,
    and the file, written by the csv module."""

    default_to = "grades.csv"
    drafts = False                  # whether an assignment never released is exported too

    def export(self, gradebook: Gradebook) -> None:
        learners = [s for s in gradebook.students if not self.student or s.id in self.student]
        learners.sort(key=lambda s: s.id)
        assignments = [a for a in gradebook.assignments if (not self.assignment or a.name in self.assignment)
                       and (self.drafts or self.released(gradebook, a))]
        dest = self.to or self.default_to
        self.log.info("Exporting %d learners and %d %sassignments (%s) to %s", len(learners), len(assignments),
                      "" if self.drafts else "released ", ", ".join(a.name for a in assignments) or "none", dest)
        self.penalties = LatePenalties(parent=self)
        with open(dest, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            for row in self.rows(gradebook, learners, assignments):
                w.writerow(row)

    def rows(self, gradebook, learners, assignments):
        raise NotImplementedError

    def released(self, gradebook: Gradebook, assignment) -> bool:
        """Whether learners were given the assignment: it has a due date, a submission, or the exchange holds it."""
        if assignment.duedate is not None or assignment.submissions:
            return True
        root = self.config.get("Exchange", {}).get("root")
        course = self.config.get("CourseDirectory", {}).get("course_id")
        return bool(root and course and os.path.isdir(os.path.join(root, course, "outbound", assignment.name)))

    def penalized(self, gradebook: Gradebook, submission) -> tuple[float, float]:
        """A submission's late penalty as nbgrader's policy gives its scores now (stored), and its score after it."""
        penalty = self.penalties.refresh(gradebook, submission)
        return penalty, max(0.0, submission.score - penalty)

    def score(self, gradebook: Gradebook, assignment, learner) -> str:
        """The learner's score after the late penalty; for no submission 0 after the due date, else empty."""
        try:
            sub = gradebook.find_submission(assignment.name, learner.id)
        except MissingEntry:
            now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
            return "0" if assignment.duedate is not None and assignment.duedate < now else ""
        return number(self.penalized(gradebook, sub)[1])


def number(x: float) -> str:
    """A score as the LMS reads it: a plain decimal with a point, at most two places (0.333 is 0.33)."""
    return f"{round(float(x), 2):g}"


def csv_cell(value) -> str:
    """A CSV cell that a spreadsheet reads as text: one starting with = + - @ or a tab or carriage return (a formula
    to Excel, LibreOffice and Google Sheets) gets a leading apostrophe. A plain number stays a number."""
    text = "" if value is None else str(value)
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        try:
            float(text)
        except ValueError:
            return "'" + text
    return text


class GradesExport(GradebookExport):
    """Plain `nbgrader export`: nbgrader's CSV columns and rows (`CsvExportPlugin`'s), every assignment of the
    gradebook, each cell quoted as CSV needs and a learner's text never a formula, the penalty nbgrader's policy gives
    the scores now."""

    drafts = True
    COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email", "raw_score",
               "late_submission_penalty", "score", "max_score"]

    def rows(self, gradebook, learners, assignments):
        yield self.COLUMNS
        for a in assignments:
            for s in learners:
                try:
                    sub = gradebook.find_submission(a.name, s.id)
                except MissingEntry:
                    timestamp, raw, penalty, score = None, 0.0, 0.0, 0.0
                else:
                    timestamp, raw = sub.timestamp, sub.score
                    penalty, score = self.penalized(gradebook, sub)
                yield [csv_cell(a.name), a.duedate or "", timestamp or "", csv_cell(s.id), csv_cell(s.last_name),
                       csv_cell(s.first_name), csv_cell(s.email), float(raw), float(penalty), float(score),
                       float(a.max_score)]


class CanvasExport(GradebookExport):
    """Canvas's grade-book CSV (Gradebook > Import)."""

    default_to = "canvas.csv"
    assignment_ids = Dict(Unicode(), help="Canvas's id of each assignment, by its nbgrader name: the column is then "
                          "'Name (id)' and fills that assignment, else Canvas makes a new one").tag(config=True)
    section = Unicode("", help="the Canvas section of every row").tag(config=True)

    def rows(self, gradebook, learners, assignments):
        def column(a):
            cid = self.assignment_ids.get(a.name)
            return f"{a.name} ({cid})" if cid else a.name

        yield ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *map(column, assignments)]
        yield ["Points Possible", "", "", "", "", *(number(a.max_score) for a in assignments)]
        for s in learners:
            name = f"{s.last_name}, {s.first_name}" if s.last_name and s.first_name else (s.last_name or s.first_name
                                                                                            or s.id)
            yield [csv_cell(name), csv_cell(s.lms_user_id or ""), "", csv_cell(s.id), csv_cell(self.section),
                   *(self.score(gradebook, a, s) for a in assignments)]


class MoodleExport(GradebookExport):
    """Moodle's grade import CSV (Grades > Import > CSV file)."""

    default_to = "moodle.csv"

    def rows(self, gradebook, learners, assignments):
        yield ["Username", "Email address", *(a.name for a in assignments)]
        for s in learners:
            yield [csv_cell(s.id), csv_cell(s.email or ""), *(self.score(gradebook, a, s) for a in assignments)]
