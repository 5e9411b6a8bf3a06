"""The trusted verdict: the hidden suites (`suites/`) run in a process that never runs learner code (`hidden`, kept
warm by `suite_server`, asked through a `channel`), one grading `context` per learner, talking to the learner's
sandboxed worker through its proxy (`learner`), measuring it from outside (`measure`, `timing`) and reading its
source (`static`)."""
