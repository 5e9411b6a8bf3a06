"""nbgrader's side: the preprocessors that make `nbgrader autograde` trustworthy, one per file, registered by
`configure(c)` (nbgrader_config.py): the submission read defensively (`reader`, `submission`), the notebook run in the
sandbox (`run`), each graded cell scored by its hidden suite (`score`), the scores saved with the instructor's typed
ones kept (`grades`), the verdicts saved as gradebook comments (`diagnoses`), learner output sanitized (`sanitize`),
the feedback pages (`feedback`), a line per graded notebook (`progress`), and the grades exported for an LMS
(`export`)."""
from __future__ import annotations

from pathlib import Path

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
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

from autograder.pipeline import submission
from autograder.pipeline.diagnoses import SaveDiagnoses
from autograder.pipeline.feedback import TEMPLATES, BookLinks, FeedbackGrades, FeedbackHTML, OmitCheckCell
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
    c.GenerateFeedback.preprocessors = [OmitCheckCell, FeedbackGrades, BookLinks, CSSHTMLHeaderPreprocessor]
