"""What the pipeline's preprocessors share: the keys they pass one another in nbgrader's resources, the settings
of a preprocessor (`c.Grader`), where the record of the notebook being converted is stored, and how a note or a
sandbox's stderr is shown."""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat

from autograder import config
from autograder.verdict import record

DEADLINE = "grader_deadline"   # resources: when this learner's grading budget ends (time.time())
LAST = "grader_last"           # resources: no learner follows this one in this nbgrader run
STARTED = "grader_started"     # resources: when this learner's notebook run began (time.monotonic())
UNFINISHED = "grader_unfinished"   # resources: the cells the notebook's run stopped at the cell limit


def note(text: str):
    """A stream output holding the grader's text."""
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def settings_of(pre) -> config.Settings:
    return config.Grader(parent=pre).settings()


def stored(part, resources) -> Path:
    """Where the record of the notebook that nbgrader converts is stored (autograder.verdict.record.path): `part` is
    the converter's exporter or one of its preprocessors; the grading folder is the one that holds nbgrader's
    `autograded` folder."""
    converter = part
    while converter is not None and not hasattr(converter, "coursedir"):
        converter = getattr(converter, "parent", None)
    if converter is None:
        raise record.GraderFault("the grading record's place is unknown outside an nbgrader command")
    cd = converter.coursedir
    ids = resources["nbgrader"]
    return record.path(os.path.dirname(os.path.join(cd.root, cd.autograded_directory)), ids["student"],
                       ids["assignment"], ids["notebook"])


def quoted(text: str) -> str:
    """A sandbox's stderr for the log, each line marked, so none of it reads as a line of the grader's own."""
    return "\n".join(f"    | {line}" for line in text.strip().splitlines()[-80:]) or "    | (nothing)"


def markdown_text(text: str) -> str:
    """Text that a markdown renderer shows as the text it is: every ASCII punctuation character escaped, so that
    what a learner wrote (an exception message, a name) makes no heading, emphasis, link, list, table or HTML."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", text)
