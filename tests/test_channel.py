"""One channel per request (autograder.verdict.channel): a warm child answers one JSON request at a time, and its
parent tells apart a reply, a child that ran past its deadline (ended then), one that ended without a reply (with its
exit code) and one that sent something that is not a reply; what a child prints never reaches the channel."""
import contextlib
import os
import sys
import time

import pytest

from autograder.verdict import channel


def answers(requests, replies, log):
    if log is not None:
        os.dup2(log.fileno(), 1)
        os.write(1, b"printed, not a reply\n")
    for req in channel.requests(requests):
        channel.write(replies, {"cells": len(req["cells"]), "echo": req["cells"][-1]})
    return 0


def hangs(requests, replies, log):
    next(channel.requests(requests))
    time.sleep(3600)
    return 0


def dies(requests, replies, log):
    next(channel.requests(requests))
    sys.stderr.write("died on its own\n")
    return 3


def garbles(requests, replies, log):
    next(channel.requests(requests))
    os.write(replies, b"Traceback (most recent call last):\n")
    return 0


def raises(requests, replies, log):
    os.dup2(log.fileno(), 2)
    raise RuntimeError("a bug of the child's")


CELLS = [{"id": f"c{i}", "source": "x = 1\n" * 50} for i in range(2000)]     # more than a pipe holds


def outcome(run, req: dict | None = None, within: float = 30.0) -> dict:
    child = channel.Child.fork(run, log=True)
    with contextlib.suppress(channel.Stopped):          # one that ends first does not read it
        child.send(req or {"cells": CELLS}, timeout=within)
    child.done()
    return child.outcome(time.time() + within)


def test_a_child_answers_its_request_and_ends():
    out = outcome(answers)
    assert out["reply"] == {"cells": len(CELLS), "echo": CELLS[-1]} and out["exit"] == 0, out
    assert "printed, not a reply" in out["log"]


def test_a_child_that_overruns_is_stopped_at_its_deadline():
    t = time.monotonic()
    out = outcome(hangs, within=1.0)
    assert out == {"stopped": channel.OVERRAN, "exit": None, "log": ""}, out
    assert time.monotonic() - t < 15


def test_a_child_that_ends_without_a_reply_is_told_apart_with_its_exit_code():
    out = outcome(dies)
    assert out["stopped"] == channel.DIED and out["exit"] == 3, out
    out = outcome(raises)
    assert out["stopped"] == channel.DIED and out["exit"] == 70 and "a bug of the child's" in out["log"], out


def test_a_child_that_sends_what_is_not_a_reply_is_told_apart():
    out = outcome(garbles)
    assert out["stopped"] == channel.GARBLED and out["exit"] == 0, out


def test_a_warm_child_answers_one_request_after_another_and_is_ended_with_what_it_started():
    child = channel.Child.fork(answers)
    try:
        for n in (1, 2, 3):
            assert child.ask({"cells": CELLS[:n]}, timeout=30) == {"cells": n, "echo": CELLS[n - 1]}
    finally:
        child.close(kill=True)
    assert not child.alive()
    with pytest.raises(channel.Stopped) as e:
        child.ask({"cells": CELLS[:1]})
    assert e.value.why == channel.DIED and not e.value.overran


def test_a_child_that_does_not_reply_in_time_is_not_a_death():
    child = channel.Child.fork(hangs)
    try:
        with pytest.raises(channel.Stopped) as e:
            child.ask({"cells": []}, timeout=0.5)
        assert e.value.overran and child.alive()
    finally:
        child.close(kill=True)
    assert not child.alive()
