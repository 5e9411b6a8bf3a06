"""A warm grader: a trusted process that runs nbgrader's commands in-process, one after another, for the check
service, and keeps between them what a batch `nbgrader autograde` keeps between learners: nbgrader and the pipeline
imported, the next learner's notebook kernel made ready in a fresh sandbox (`SandboxedExecute.more_follow`), the warm
suite process with the next learner's suite process forked ahead. It runs no learner code: each check is still its
own `nbgrader autograde` of one submission in its own grading folder, with a fresh sandbox and a fresh worker.

    python -m autograder.service.warm     (started by `Grader`, below)

One JSON line per request on stdin ({"dir": a grading folder, "argv": nbgrader's arguments}), one per reply on the
stdout it was started with ({"exit": code, "log": what nbgrader logged}); anything else printed goes to stderr.
{"ready": assignment} makes the first check's kernel and suite process ready for it; its reply is {"ready": ok}.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import select
import signal
import subprocess
import sys
import traceback

from autograder import ROOT

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


def main():
    import nbgrader.apps.nbgraderapp  # noqa: F401 - imported once, before the first check

    import autograder.pipeline  # noqa: F401

    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)                                     # a stray print must not reach the replies
    sys.stdout = sys.stderr
    os.chdir(ROOT)
    for line in sys.stdin:
        req = json.loads(line)
        if "ready" in req:
            from autograder import config
            from autograder.pipeline.run import make_ready

            try:
                make_ready(req["ready"], config.course())
                reply = {"ready": True}
            except Exception:  # noqa: BLE001 - the first check then starts its own, as nbgrader does
                traceback.print_exc()
                reply = {"ready": False}
        else:
            code, log = run(req["dir"], req["argv"])
            reply = {"exit": code, "log": log[-200_000:]}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


class Stopped(Exception):
    """A grader process gave no answer: it was still at work at the deadline and was ended (`overran`), or it ended
    on its own (it died)."""

    def __init__(self, overran: bool):
        super().__init__("it ran past its deadline and was stopped" if overran else "it died")
        self.overran = overran


class Grader:
    """The service's side of one warm grader process: started at once (its first check made ready for `ready`, an
    assignment), asked one command at a time, ended when it overran, replaced when it died or overran."""

    READY_TIMEOUT = 300.0        # seconds to make the first check ready: the grader's own work, not a learner's

    def __init__(self, ready: str | None = None):
        from autograder.authoring.release import tools_path

        # A check never touches the class's gradebook: nbgrader_config.py would otherwise pick GRADEBOOK_URL.
        env = {k: v for k, v in os.environ.items() if k != "GRADEBOOK_URL"}
        self.proc = subprocess.Popen([sys.executable, "-m", "autograder.service.warm"], cwd=ROOT,
                                     env={**env, "PATH": tools_path()}, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        self.runs = 0
        self.readying = bool(ready)
        if ready:
            self.send({"ready": ready})

    def send(self, req: dict):
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()

    def run(self, grading_dir: str, argv: list[str], timeout: float) -> tuple[int, str]:
        """nbgrader's exit code and log; Stopped when the process died, or did not answer within `timeout` seconds of
        this command (the time before it, while it made the first check ready, is not counted, and an overrun there
        is the grader's): it is then ended, and `alive()` says so."""
        try:
            if self.readying:
                self.readying = False
                try:
                    self._reply(self.READY_TIMEOUT)
                except Stopped:
                    raise Stopped(overran=False) from None
            self.runs += 1
            self.send({"dir": grading_dir, "argv": argv})
            reply = self._reply(timeout)
            if "exit" not in reply:
                raise Stopped(overran=False)
        except Stopped:
            self.close(kill=True)
            raise
        except OSError:
            self.close(kill=True)
            raise Stopped(overran=False) from None
        return reply["exit"], reply["log"]

    def _reply(self, timeout: float) -> dict:
        """The next reply; Stopped when none came within `timeout` (it overran) or the process ended."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise Stopped(overran=True)
        line = self.proc.stdout.readline()
        try:
            reply = json.loads(line) if line else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise Stopped(overran=False)
        return reply

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, kill: bool = False):
        """End the process: asked (it ends its kernels and suite process on the way out), or killed with every process
        it started, and what their sandboxes left on the host removed (an overrun)."""
        assert self.proc.stdin is not None
        if kill:
            import psutil

            from autograder.sandbox.box import sweep

            try:
                tree = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
            except psutil.Error:
                tree = []
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)          # its group, and the rest of its tree
            for p in tree:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            psutil.wait_procs(tree, timeout=10)
            for p in tree:
                sweep(p.pid)
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    main()
