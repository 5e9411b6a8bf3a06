"""A warm grader: a trusted process that runs nbgrader's commands in-process, one after another, for the check
service, and keeps between them what a batch `nbgrader autograde` keeps between learners: nbgrader and the pipeline
imported, the next learner's notebook kernel made ready in a fresh sandbox (`SandboxedExecute.more_follow`), the warm
suite process with the next learner's suite process forked ahead. It runs no learner code: each check is still its
own `nbgrader autograde` of one submission in its own grading folder, with a fresh sandbox and a fresh worker.

    python -m autograder.service.warm     (started by `Grader`, below)

One request at a time (autograder.verdict.channel): {"dir": a grading folder, "argv": nbgrader's arguments}, replied
with {"exit": code, "log": what nbgrader logged}; {"ready": assignment} makes the first check's kernel and suite process
ready for it, replied with {"ready": ok}.
"""
from __future__ import annotations

import io
import logging
import os
import traceback

from autograder import ROOT
from autograder.verdict.channel import DIED, GARBLED, Child, Stopped, serve

MORE_FOLLOW = "--SandboxedExecute.more_follow=True"


def run(grading_dir: str, argv: list[str]) -> tuple[int, str]:
    """One nbgrader command in this process, as `nbgrader <argv>` with GRADING_DIR=grading_dir would run it (the
    way nbgrader's own tests run its commands in-process)."""
    from jupyter_core.application import NoStart
    from nbgrader.apps.nbgraderapp import NbGraderApp

    os.environ["GRADING_DIR"] = grading_dir          # read by nbgrader_config.py, loaded afresh by each command
    log = io.StringIO()
    app = NbGraderApp.instance()
    try:
        app.initialize(argv)
        app.init_logging(logging.StreamHandler, [log], color=False, subapps=True)
        app.start()
        code = 0
    except NoStart:                                   # how a command that ran says it is done
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except Exception:  # noqa: BLE001 - nbgrader's failure is this command's, reported in its log
        code = 1
        log.write(traceback.format_exc())
    finally:
        app.reset()
    return code, log.getvalue()


def answer(req: dict) -> dict:
    if "ready" in req:
        from autograder import config
        from autograder.pipeline.run import make_ready

        try:
            make_ready(req["ready"], config.course())
            return {"ready": True}
        except Exception:  # noqa: BLE001 - the first check then starts its own, as nbgrader does
            traceback.print_exc()
            return {"ready": False}
    code, log = run(req["dir"], req["argv"])
    return {"exit": code, "log": log[-200_000:]}


def main():
    import nbgrader.apps.nbgraderapp  # noqa: F401 - imported once, before the first check

    import autograder.pipeline  # noqa: F401

    os.chdir(ROOT)
    serve(answer)


class Grader(Child):
    """The service's side of one warm grader process: started at once (its first check made ready for `ready`, an
    assignment), asked one command at a time, ended when it overran, replaced when it died or overran."""

    READY_TIMEOUT = 300.0        # seconds to make the first check ready: the grader's own work, not a learner's

    def __init__(self, ready: str | None = None):
        from autograder.authoring.release import tools_path

        # A check never touches the class's gradebook: nbgrader_config.py would otherwise pick GRADEBOOK_URL.
        env = {k: v for k, v in os.environ.items() if k != "GRADEBOOK_URL"}
        super().__init__("autograder.service.warm", {**env, "PATH": tools_path()}, session=True)
        self.runs = 0
        self.readying = bool(ready)
        if ready:
            self.send({"ready": ready})

    def run(self, grading_dir: str, argv: list[str], timeout: float) -> tuple[int, str]:
        """nbgrader's exit code and log; Stopped when the process died, or did not answer within `timeout` seconds of
        this command (the time before it, while it made the first check ready, is not counted, and an overrun there
        is the grader's): it is then ended, and `alive()` says so."""
        try:
            if self.readying:
                self.readying = False
                try:
                    self.reply(self.READY_TIMEOUT)
                except Stopped:
                    raise Stopped(DIED) from None
            self.runs += 1
            reply = self.ask({"dir": grading_dir, "argv": argv}, timeout)
            if "exit" not in reply:
                raise Stopped(GARBLED)
        except Stopped:
            self.close(kill=True)
            raise
        return reply["exit"], reply["log"]


if __name__ == "__main__":
    main()
