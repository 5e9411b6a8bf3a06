"""`SubmissionReader`: nbgrader's exporter, reading a submission defensively (`autograder.pipeline.submission`)."""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbconvert.exporters import NotebookExporter

from autograder.pipeline import submission


class SubmissionReader(NotebookExporter):
    """nbgrader's exporter, reading submissions defensively (see `autograder.pipeline.submission`)."""

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
