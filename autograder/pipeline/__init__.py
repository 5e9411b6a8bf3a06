"""nbgrader's side, one part per file, registered by `configure(c)` (nbgrader_config.py): the submission read
defensively (`reader`, `submission`), the notebook run in the sandbox (`run`), each graded cell scored by its hidden
suite (`score`), the scores saved with the instructor's typed ones kept (`grades`), the verdicts saved as comments
(`diagnoses`), learner output sanitized (`sanitize`), the feedback pages (`feedback`), a line per graded notebook
(`progress`), the late penalty (`late`), the grades exported, by plain `nbgrader export` too (`export`), the feedback
released through the exchange (`exchange`), and each error nbgrader logs recorded for classgrade (`failures`)."""
from __future__ import annotations

import warnings
from pathlib import Path

from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    IgnorePattern,
    LimitOutput,
    OverwriteCells,
    OverwriteKernelspec,
)
from sqlalchemy.exc import SAWarning

from autograder.pipeline import failures, submission
from autograder.pipeline.diagnoses import SaveDiagnoses
from autograder.pipeline.exchange import ReleaseFeedback
from autograder.pipeline.export import GradesExport
from autograder.pipeline.feedback import TEMPLATES, BookLinks, FeedbackGrades, FeedbackHTML, OmitCheckCell, PageStyles
from autograder.pipeline.grades import SaveGrades
from autograder.pipeline.progress import Progress
from autograder.pipeline.reader import SubmissionReader
from autograder.pipeline.run import SandboxedExecute
from autograder.pipeline.score import HiddenSuites


def configure(c):
    """Register the trusted grading pipeline in an nbgrader config object."""
    c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells,
                                          CheckCellMetadata]
    c.Autograde.autograde_preprocessors = [SandboxedExecute, IgnorePattern, HiddenSuites, ClearMetadataPreprocessor,
                                           LimitOutput, SaveGrades, SaveDiagnoses, AssignLatePenalties,
                                           CheckCellMetadata, Progress]
    c.OverwriteCells.add_missing_cells = True
    c.ClearMetadataPreprocessor.preserve_nb_metadata_mask = {("language_info", "name"), (submission.PROBLEMS,)}
    c.Autograde.exporter_class = SubmissionReader
    c.ClearSolutions.enforce_metadata = True
    # A graded cell's score is the trusted verdict; nothing the learner prints may change it.
    c.LimitOutput.max_lines = 2000
    c.LimitOutput.max_traceback = 100
    # Feedback: nbgrader's template with our head (a Content-Security-Policy that runs no script, the math typeset
    # ahead), for the feedback only: formgrader's own pages keep nbgrader's.
    import nbgrader

    nbgrader_templates = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"
    c.GenerateFeedback.exporter_class = FeedbackHTML
    c.FeedbackHTML.template_name = "course_feedback"
    c.FeedbackHTML.extra_template_basedirs = [str(TEMPLATES), str(nbgrader_templates)]
    c.FeedbackHTML.extra_template_paths = [str(nbgrader_templates)]          # where 'feedback/index.html.j2' is
    c.GenerateFeedback.preprocessors = [OmitCheckCell, FeedbackGrades, BookLinks, PageStyles]
    # Long lines wrap in their box in formgrader's pages too (nbgrader's template on nbconvert's HTMLExporter):
    # PageStyles in place of the CSSHTMLHeaderPreprocessor their template registers, whose style it extends.
    c.HTMLExporter.preprocessors = [PageStyles]
    c.FeedbackHTML.preprocessors = []                          # the feedback's is GenerateFeedback's, above
    c.CSSHTMLHeaderPreprocessor.enabled = False
    c.PageStyles.enabled = True
    # Plain `nbgrader export`: nbgrader's columns, written as CSV (quoted, no learner's text a formula), with the late
    # penalty nbgrader's policy gives the scores now.
    c.ExportApp.plugin_class = GradesExport
    # `release_feedback` says who did not come through the exchange, and what to do, before releasing anything.
    c.ExchangeFactory.release_feedback = ReleaseFeedback
    # What a command failed on, for classgrade: written by nbgrader's logger, not read back from its log's text.
    failures.configure(c)
    # nbgrader 0.9.6's `Gradebook.add_submission` builds a submission, its notebooks, grades and comments, then adds
    # the submission to the session, which adds them all with it. Meanwhile its reading of the assignment's notebooks
    # flushes the session, and SQLAlchemy 2, which no longer adds a new object to the session through a backref, says
    # so: three warnings a new submission, at every autograde. Only those are silenced.
    warnings.filterwarnings("ignore", category=SAWarning, module=r"nbgrader\.api$",
                            message=r"Object of type <Submitted(Assignment|Notebook)> not in session, add operation "
                                    r"along '(Assignment|Student|Notebook)\.submissions' will not proceed")
