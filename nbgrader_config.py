"""nbgrader configuration: the repository root is the course directory.

solutions/  is nbgrader's source folder (the one source of every exercise),
exercises/  is its release folder (generated, committed),
and everything a grading run writes (submitted, autograded, feedback, gradebook)
lives under one ignored folder, `_build/grading` unless GRADING_DIR names another.
"""
import os

c = get_config()  # noqa: F821  (provided by traitlets when nbgrader loads this file)

here = os.path.dirname(os.path.abspath(__file__))
grading = os.path.abspath(os.environ.get("GRADING_DIR", os.path.join(here, "_build", "grading")))
# Every nbgrader command opens the gradebook first: its folder must exist (after `make clean` too).
os.makedirs(grading, exist_ok=True)

c.CourseDirectory.root = here
c.CourseDirectory.course_id = "inside-the-transformer"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = os.path.join(grading, "submitted")
c.CourseDirectory.autograded_directory = os.path.join(grading, "autograded")
c.CourseDirectory.feedback_directory = os.path.join(grading, "feedback")
c.CourseDirectory.db_url = os.environ.get("GRADEBOOK_URL", "sqlite:///" + os.path.join(grading, "gradebook.db"))
# Only notebooks are ever copied from solutions/ into a release (nbgrader #1432); *.txt is kept: nbgrader's own
# timestamp.txt and submission_secret.txt travel with each submission (lateness, release_feedback).
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "*.py", "*.json", "*.md"]

c.ClearSolutions.code_stub = {"python": '# YOUR CODE HERE\nraise NotImplementedError("not implemented yet")'}

# Trusted grading: the learner's notebook is executed in a sandbox, and every graded cell's
# score is decided by the hidden suites in a process that never runs learner code.
from autograder.pipeline import configure

configure(c)
# Where the book is published, for the links in the feedback pages (without it they name the chapter as text).
c.BookLinks.url = os.environ.get("COURSE_BOOK_URL", "")
