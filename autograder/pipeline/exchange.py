"""`ReleaseFeedback`, `nbgrader release_feedback` in place of nbgrader's own (`c.ExchangeFactory.release_feedback`):
before anything is released, the learners who did not come through the exchange are named, with what to do.

The exchange hands a learner their feedback under a name made from the `submission_secret.txt` that only
`nbgrader submit` writes (`collect` copies it, with `timestamp.txt`, into the submission's folder, and
generate_feedback into the feedback's). A learner collected with `zip_collect`, or whose notebook was put into
`submitted/` by hand, has neither: nbgrader 0.9.6 stops at the first of them with a `FileNotFoundError`'s traceback,
after releasing the feedback of those before. Here nothing is released then, and the one error says who they are and
the command that leaves them out.
"""
from __future__ import annotations

import glob
import os
import re

from nbgrader.exchange.default import ExchangeReleaseFeedback

NEEDED = ("submission_secret.txt", "timestamp.txt")


class ReleaseFeedback(ExchangeReleaseFeedback):
    """nbgrader's release of the feedback to the exchange, failing at once, with what to do, when a learner it would
    release has no secret or time from the exchange."""

    def copy_files(self):
        missing = self.not_from_exchange()
        if missing:
            cd = self.coursedir
            excluded = [s for s in (cd.student_id_exclude or "").split(",") if s]
            where = cd.format_path(cd.feedback_directory, "<learner>", cd.assignment_id)
            self.fail(
                f"{', '.join(missing)} did not submit through the exchange (zip_collect, or a "
                f"notebook put in the submitted folder by hand): the exchange hands feedback back only to a learner "
                f"whose submission has the submission_secret.txt that `nbgrader submit` writes. Nothing was "
                f"released. Leave them out:\n    nbgrader release_feedback {cd.assignment_id} "
                f"--CourseDirectory.student_id_exclude={','.join([*excluded, *missing])}\n"
                f"and give them their feedback another way (their pages are in {where}).")
        super().copy_files()

    def not_from_exchange(self) -> list[str]:
        """The learners, sorted, whose feedback this would release and whose folder lacks a file the exchange
        needs (NEEDED), found as nbgrader's `copy_files` finds them."""
        cd = self.coursedir
        excluded = set(filter(None, (cd.student_id_exclude or "").split(",")))
        pattern = re.escape(os.path.sep).join([
            cd.format_path(cd.feedback_directory, "(?P<student_id>.*)", cd.assignment_id, escape=True),
            "(?P<notebook_id>.*).html"])
        missing = set()
        for page in glob.glob(os.path.join(self.src_path, "*.html")):
            m = re.match(pattern, page)
            if m is None or m["student_id"] in excluded:
                continue
            folder = os.path.dirname(page)
            if not all(os.path.isfile(os.path.join(folder, name)) for name in NEEDED):
                missing.add(m["student_id"])
        return sorted(missing)
