"""`SubmissionReader`: nbgrader's exporter, reading a submission defensively (`autograder.pipeline.submission`) and
storing each grading's record (`autograder.verdict.record`), whether the grader could grade the notebook or not."""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbconvert.exporters import NotebookExporter

from autograder.pipeline import submission
from autograder.pipeline.common import stored
from autograder.verdict import record


class SubmissionReader(NotebookExporter):
    """nbgrader's exporter, reading submissions defensively (see `autograder.pipeline.submission`) and storing the
    record of each grading."""

    def from_file(self, file_stream, resources=None, **kw):
        ids = (resources or {}).get("nbgrader", {})
        converter = self.parent
        if (not ids.get("assignment") or converter is None or not hasattr(converter, "coursedir")
                or not getattr(converter, "_sanitizing", True)):
            # autograde's second pass reads its own copy, written by the first from the submission read here
            return super().from_file(file_stream, resources=resources, **kw)
        release_path = Path(converter.coursedir.format_path(converter.coursedir.release_directory, ".",
                                                            ids["assignment"])) / f"{ids['notebook']}.ipynb"
        release = nbformat.read(str(release_path), as_version=4)
        try:
            raw = file_stream.read(submission.MAX_BYTES + 1).encode("utf-8")
        except UnicodeDecodeError:
            raw = b"\xff not UTF-8 text"
        nb, problems = submission.read(raw, release)
        for problem in problems:
            self.log.warning("%s/%s: %s", ids.get("student"), ids["assignment"], problem)
        return self.from_notebook_node(nb, resources=resources, **kw)

    def from_notebook_node(self, nb, resources=None, **kw):
        """nbconvert's, and in autograde's second pass (the grading: the preprocessors that run the notebook and score
        it) the record the preprocessors made stored, or, when one of them raised, a record that says the grader could
        not grade the notebook, and why (nbgrader then removes the autograded notebook and exits non-zero). The
        learner's code runs only in the sandbox: whatever raises here is the grader's failure."""
        if getattr(self.parent, "_sanitizing", True) or not (resources or {}).get("nbgrader"):
            return super().from_notebook_node(nb, resources, **kw)
        where = stored(self, resources)
        try:
            nb, resources = super().from_notebook_node(nb, resources, **kw)
            if not isinstance(resources.get(record.RECORD), dict):
                raise record.GraderFault("the grading made no record (autograder.pipeline.configure sets the "
                                         "preprocessors that make it)")
        except Exception as e:
            record.store(where, record.Grading({}, fault=f"{type(e).__name__}: {e}").to_dict())
            raise
        record.store(where, resources[record.RECORD])
        return nb, resources
