"""The instructor-side autograder: never released to learners.

A learner's notebook flows source -> release -> submission -> sandboxed run -> trusted verdict
-> gradebook -> feedback.  One folder per step, each importing only the ones before it:

- `inside/`     what runs in the sandbox: the worker that answers calls, the notebook's run, the tracer.
- `sandbox/`    starts a process with no access to the course, no network, resource limits.
- `graph/`      the network traced and drawn as a graph.
- `verdict/`    the hidden suites (`suites/`) run in a trusted process, and the proxy for the learner's code.
- `pipeline/`   the preprocessors that put the above into `nbgrader autograde`, the feedback, the exports.
- `authoring/`  the release, each graded cell's criteria, the known answers, a new exercise's skeletons.
- `classroom/`  a whole class graded in parallel, and the class report.
- `service/`    Check my work: a learner's check while they work, over HTTP.

Over the shared `config` (every limit of grading) and `notebooks` (what a cell of a course notebook is).
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
