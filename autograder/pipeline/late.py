"""`LatePenalties`: a submission's late penalty as nbgrader's policy gives it for the scores it has now.

nbgrader computes each notebook's penalty once, at autograde (`AssignLatePenalties`: the configured
`LateSubmissionPlugin` given the notebook's score and how late the submission is, then kept between 0 and that score),
and stores it; a score typed in formgrader or set in the gradebook later leaves it as it was. Under the `zero` policy a
late total then read −0.5 after a manual score half a point lower, and more than 0 after a higher one. Each step of the
course that shows a total (generate_feedback, the exports, the class report) first gives every notebook of the
submission the penalty that nbgrader's own `AssignLatePenalties` and its plugin give it now, and stores it, so the
gradebook says the same: the scores, the due date and any extension as they are at that step.
"""
from __future__ import annotations

import copy
import logging

from nbgrader.api import Gradebook, MissingEntry, SubmittedAssignment
from nbgrader.preprocessors import AssignLatePenalties
from traitlets.config import Config


class LatePenalties(AssignLatePenalties):
    """nbgrader's `AssignLatePenalties` (its plugin, `c.AssignLatePenalties.plugin_class`, configured as nbgrader reads
    it, and its bounds), for a whole submission, at any step. Made inside a step (`parent`), it takes the step's
    configuration but for the options given to all preprocessors (`NbGraderPreprocessor.display_data_priority`),
    which are not its own: traitlets would warn of them at every learner."""

    def __init__(self, parent=None, config: Config | None = None, **kw):
        config = copy.deepcopy(config if config is not None else parent.config if parent is not None else Config())
        for base in LatePenalties.mro()[2:]:        # the sections of the classes above AssignLatePenalties
            config.pop(base.__name__, None)
        if parent is not None:
            kw.setdefault("log", parent.log)
        super().__init__(config=config, **kw)

    def init_plugin(self) -> None:
        super().init_plugin()
        # the plugin says which method it uses at every call: at autograde once per notebook, here once per learner of
        # an export; its warnings stay
        if isinstance(self.log, logging.Logger):
            quiet = self.log.getChild("late")
            quiet.setLevel(logging.WARNING)
            self.plugin_inst.log = quiet

    def refresh(self, gradebook: Gradebook, submission: SubmittedAssignment) -> float:
        """Give each notebook of `submission` the penalty the policy gives its score now, stored in `gradebook`; the
        submission's penalty (their sum)."""
        self.init_plugin()
        late = submission.total_seconds_late
        total = 0.0
        for notebook in submission.notebooks:
            penalty = None
            if late > 0:
                penalty = self.plugin_inst.late_submission_penalty(submission.student.id, notebook.score, late)
                if penalty is not None:
                    penalty = self._check_late_penalty(notebook, penalty)
            notebook.late_submission_penalty = penalty
            total += penalty or 0.0
        gradebook.db.commit()
        return total


def refresh_all(url: str, assignment: str, config: Config) -> None:
    """Give every submission of `assignment` in the gradebook at `url` its penalty now (`LatePenalties.refresh`), under
    the nbgrader configuration `config`; nothing when the gradebook has no such assignment."""
    penalties = LatePenalties(config=config)
    with Gradebook(url) as gb:
        try:
            submissions = gb.find_assignment(assignment).submissions
        except MissingEntry:
            return
        for sub in submissions:
            penalties.refresh(gb, sub)
