"""Grades out to an LMS: nbgrader export plugins that write the grade-book CSV Canvas and Moodle import.

    nbgrader export --exporter=autograder.pipeline.export.CanvasExport --to=_build/grading/canvas.csv
    nbgrader export --exporter=autograder.pipeline.export.MoodleExport --to=_build/grading/moodle.csv

One row per learner of the gradebook, one column per released assignment (one with a due date, submitted by
anyone, or released through the exchange; nbgrader keeps a draft in the gradebook too, from `generate_assignment`).
A cell holds the score after the late penalty; an assignment a learner never submitted is 0 once its due date has
passed and empty before (the LMS then records no grade). nbgrader's `--student` and `--assignment` narrow it.

Canvas (its Gradebook's Import): the columns `Student`, `ID`, `SIS User ID`, `SIS Login ID`, `Section`, then one per
assignment, `Name (id)` with the Canvas assignment's id from `c.CanvasExport.assignment_ids` (without one Canvas
makes a new assignment of that name), and a second row `Points Possible`. A learner is identified by the nbgrader
id as `SIS Login ID` (the login the exchange and zip_collect use), and by `ID` where nbgrader knows the learner's
LMS id (`lms_user_id`).  Moodle (Grades > Import > CSV file): `Username` (the nbgrader id), `Email address`, then one
column per assignment named as in nbgrader; map `Username` to the user's username and each column to its grade item.
"""
from __future__ import annotations

import csv
import datetime
import os

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import ExportPlugin
from traitlets import Dict, Unicode


class GradebookExport(ExportPlugin):
    """What the LMS exports share: the rows (learners) and columns (released assignments), each cell's score."""

    default_to = "grades.csv"

    def export(self, gradebook: Gradebook) -> None:
        learners = [s for s in gradebook.students if not self.student or s.id in self.student]
        learners.sort(key=lambda s: s.id)
        assignments = [a for a in gradebook.assignments
                       if (not self.assignment or a.name in self.assignment) and self.released(gradebook, a)]
        dest = self.to or self.default_to
        self.log.info("Exporting %d learners and %d released assignments (%s) to %s", len(learners), len(assignments),
                      ", ".join(a.name for a in assignments) or "none", dest)
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

    @staticmethod
    def score(gradebook: Gradebook, assignment, learner) -> str:
        """The learner's score after the late penalty; for no submission 0 after the due date, else empty."""
        try:
            sub = gradebook.find_submission(assignment.name, learner.id)
        except MissingEntry:
            now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
            return "0" if assignment.duedate is not None and assignment.duedate < now else ""
        return number(max(0.0, sub.score - (sub.late_submission_penalty or 0.0)))


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
