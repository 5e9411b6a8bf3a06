"""`SaveGrades`, in place of nbgrader's `SaveAutoGrades`: each graded cell's automatic score into the gradebook, and a
score the instructor typed in formgrader kept with its status when the cell is graded again.

nbgrader 0.9.6's `SaveAutoGrades._add_score` marks every grade that holds a manual score as needing manual grading
again (`needs_manual_grade = manual_score is not None or auto_score is None`), whatever changed: so
`nbgrader autograde --force`, run after a change of due date, put every reviewed submission back on formgrader's
list of those to grade by hand (the typed scores stay stored, and count). Here a reviewed grade stays reviewed when
the grader's own score for the cell is what it was when the instructor reviewed it; a cell whose automatic score
changed (the learner submitted again, say) needs review again, as nbgrader has it.
"""
from __future__ import annotations

from nbgrader import utils
from nbgrader.preprocessors import SaveAutoGrades


class SaveGrades(SaveAutoGrades):
    """nbgrader's `SaveAutoGrades`, keeping a reviewed manual grade reviewed while its automatic score is unchanged."""

    def _add_score(self, cell, resources):
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                          self.assignment_id, self.student_id)
        reviewed = grade.manual_score is not None and not grade.needs_manual_grade
        before = grade.auto_score
        grade.auto_score, _ = utils.determine_grade(cell, self.log)
        if reviewed and grade.auto_score == before:
            grade.needs_manual_grade = False
        else:
            grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
        self.gradebook.db.commit()
