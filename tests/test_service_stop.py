"""Stopping the check service (`python -m autograder.service`) when it is idle: a real process, a real SIGTERM, the
time to its end measured. docs/instructors.md says it stops at once; after a check its warm graders hold a ready
kernel and suite process each, in sandboxes, which die at once when killed but are reaped later: an orphan by the
machine's first process (seconds later in a container, or never), a sandbox's bwrap once its namespace is empty. The
service stops without waiting for that, and leaves no grader process running and no sandbox behind.
"""
import signal
import time

import psutil

from autograder.authoring import variants
from autograder.sandbox import box
from autograder.service.local import LocalService
from autograder.service.roster import new_roster
from autograder.verdict.channel import ended

ASG = "positional_encoding"
STOP_S = 3.0                  # generous: it takes about half a second on two busy cores (10 s before the fix)


def test_an_idle_service_stops_at_once_on_sigterm(tmp_path):
    service = LocalService(tmp_path, new_roster(["ada"], [ASG]))
    try:
        status, answer = service.check("ada", variants.submission(ASG), ASG)
        assert status == 200 and answer["total"] == 11, answer
        time.sleep(2.0)                          # idle: the graders have made the next check ready
        tree = psutil.Process(service.proc.pid).children(recursive=True)
        assert len(tree) > 2, [p.name() for p in tree]
        t = time.monotonic()
        service.proc.send_signal(signal.SIGTERM)
        code = service.proc.wait(60)
        took = time.monotonic() - t
    finally:
        service.proc.kill()
        service.log.close()
    out = (tmp_path / "server.log").read_text()
    print(f"\nan idle service (after a check, {len(tree)} processes under it) stopped in {took:.2f} s on SIGTERM")
    assert code == 0 and out.rstrip().endswith("stopped") and "Traceback" not in out, (code, out[-3000:])
    assert took < STOP_S, f"stopped in {took:.1f} s"
    running = [p for p in tree if not ended(p)]
    assert not running, [(p.pid, p.name()) for p in running]
    left = [f.name for p in tree for f in box.private_root().glob(f"sandbox-{p.pid}-*")]
    assert not left, left
