"""The instructor-side autograder: never released to learners.

A learner's notebook flows source -> release -> submission -> sandboxed run -> trusted verdict
-> gradebook -> feedback.  The modules here are the last four steps:

- `sandbox`        starts a process with no access to the course, no network, resource limits.
- `worker`         runs inside the sandbox: executes the learner's code and answers calls.
- `protocol`       the plain-data messages between the two (JSON + safetensors, never pickle).
- `learner`        the trusted side's proxy for the learner's code.
- `suites/`        the hidden pytest suites, one per assignment.
- `hidden`         runs a hidden suite against one submission and scores its graded cells.
- `nbgrader_plugin` the preprocessors that put the above into `nbgrader autograde`.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
