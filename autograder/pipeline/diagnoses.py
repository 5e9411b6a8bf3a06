"""`SaveDiagnoses`: each verdict as the gradebook comment of the solution cell it scores, as plain text (the feedback
shows it as text: `autograder.pipeline.feedback.FeedbackGrades`); flagged cells marked as needing manual grading."""
from __future__ import annotations

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.notebooks import TESTS_SUFFIX, nbgrader_meta
from autograder.verdict.record import FLAGGED, RECORD, Grading


class SaveDiagnoses(NbGraderPreprocessor):
    """Write each verdict as the gradebook comment of the solution cell it scores; flag cells for manual grading."""

    def preprocess(self, nb, resources):
        rec = resources.get(RECORD, {})
        grading = Grading.from_dict(rec)
        ids = resources["nbgrader"]
        problems = "; ".join(rec.get("problems", []))
        solution_ids = {nbgrader_meta(c).get("grade_id") for c in nb.cells if nbgrader_meta(c).get("solution")}
        with Gradebook(ids["db_url"]) as gb:
            for gid, v in grading.verdicts.items():
                if v.status == FLAGGED:
                    try:
                        grade = gb.find_grade(gid, ids["notebook"], ids["assignment"], ids["student"])
                        # a score typed for it stands, reviewed or not, as SaveGrades left it
                        if grade.manual_score is None:
                            grade.needs_manual_grade = True
                    except MissingEntry:
                        pass
                name = gid.removesuffix(TESTS_SUFFIX)
                if name not in solution_ids:
                    continue
                comment = gb.find_comment(name, ids["notebook"], ids["assignment"], ids["student"])
                if comment.auto_comment == "No response." and not problems:
                    continue
                comment.auto_comment = f"{problems}. {v.comment()}" if problems else v.comment()
            gb.db.commit()
        return nb, resources

