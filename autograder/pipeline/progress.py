"""`Progress`, the last step of `nbgrader autograde`: one line per graded notebook, as it is done (which of how many,
the learner, the seconds it took, the score), so that a long run says how far it is, as classgrade's bar does."""
from __future__ import annotations

import time

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.pipeline.common import STARTED
from autograder.pipeline.run import position

_run = {"began": 0.0, "done": 0, "at": 0}      # this nbgrader run so far: when its first notebook began, how many


class Progress(NbGraderPreprocessor):
    """Log `graded 2 of 7: ben, 12.3 s, 8.33 / 11 points; about 1.2 min left` (with the late penalty, or a manual grade
    still to give)."""

    def preprocess(self, nb, resources):
        ids = resources["nbgrader"]
        now = time.monotonic()
        began = resources.get(STARTED, now)
        where = position(self, resources)
        if not _run["done"] or where is None or where[0] <= _run["at"]:   # this process's first run, or another
            _run.update(began=began, done=0)
        _run["done"] += 1
        _run["at"] = where[0] if where else 0
        line = f"graded {where[0]} of {where[1]}: " if where else "graded: "
        line += f"{ids['student']}, {now - began:.1f} s"
        with Gradebook(ids["db_url"]) as gb:
            try:
                sub = gb.find_submission_notebook(ids["notebook"], ids["assignment"], ids["student"])
            except MissingEntry:
                sub = None
            if sub is not None:
                line += f", {sub.score:g} / {sub.max_score:g} points"
                if sub.late_submission_penalty:
                    line += f" (late: {sub.late_submission_penalty:g} points off)"
                if sub.needs_manual_grade:
                    line += " (provisional: a part waits for your manual grade)"
        if where and where[0] < where[1]:
            left = (now - _run["began"]) / _run["done"] * (where[1] - where[0])
            line += f"; about {left / 60:.1f} min left" if left >= 90 else f"; about {left:.0f} s left"
        self.log.info(line)
        return nb, resources
