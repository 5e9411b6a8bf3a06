"""The warm suite process (autograder.verdict.suite_server) keeps every guarantee of a process per learner: each
learner's worker is its own, a shared worker of course code that died or was slowed is replaced, and learners graded one
after another get the scores each gets alone."""
import os
import re
import signal
import time

import psutil
import pytest

from autograder import config
from autograder.authoring import variants
from autograder.verdict import hidden

pytestmark = pytest.mark.xdist_group("pooling")
PE = "positional_encoding"

LEAVES = '''def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    return torch.zeros(seq_len, d_model)


LEFT_BY_THE_FIRST = "learner one was here"
torch.manual_seed(424242)
'''

LOOKS = variants.reference_sources(PE)["sinusoidal_encoding"] + '''

_found = ["a name"] * ("LEFT_BY_THE_FIRST" in dir()) + ["torch's seed"] * (torch.initial_seed() == 424242)
if _found:
    def sinusoidal_encoding(seq_len, d_model, base=10000.0):
        raise RuntimeError(f"found what the learner before left: {_found}")
'''


def scores(grading):
    assert grading.fault is None, f"{grading.fault}\n{grading.log[-3000:]}"
    return {gid: v.score for gid, v in grading.verdicts.items()}


def since_boot() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def started_since_boot(pid: int) -> float:
    """When the process started, on the clock of `since_boot` (the kernel's own record, in clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


def status(what="shared"):
    return hidden._SERVERS[0].ask({"op": "status"})[what]


def test_a_learner_never_sees_the_worker_of_the_one_before():
    first = scores(hidden.grade(variants.submission(PE, {"sinusoidal_encoding": LEAVES}), PE))
    assert first["sinusoidal_encoding_tests"] < 4
    second = hidden.grade(variants.submission(PE, {"sinusoidal_encoding": LOOKS}), PE)
    assert scores(second)["sinusoidal_encoding_tests"] == 4, second.verdicts["sinusoidal_encoding_tests"].failed
    assert [role for role, _ in second.profile["workers"]].count("learner") == 1, "a worker of its own, started for it"


def test_each_learner_s_inputs_come_from_a_seed_of_its_own():
    """Each learner's process begins a grading of its own (autograder.verdict.context): its seed is drawn afresh, not
    the one before's, and its notes and worker starts are its own."""
    gradings = [hidden.grade(variants.submission(PE), PE) for _ in range(2)]
    seeds = [re.search(r"grading seed (\d+)", g.log) for g in gradings]
    assert all(seeds) and seeds[0].group(1) != seeds[1].group(1), [g.log[-2000:] for g in gradings]
    assert all([role for role, _ in g.profile["workers"]] == ["learner"] for g in gradings)


def test_a_shared_worker_that_died_or_was_slowed_is_replaced():
    full = scores(hidden.grade(variants.submission("attention"), "attention"))
    assert full["scaled_dot_product_attention_tests"] == 5 and full["MultiHeadAttention_tests"] == 6
    before = status()
    os.kill(before["reference/attention"], signal.SIGKILL)
    assert scores(hidden.grade(variants.submission("attention"), "attention")) == full
    after = status()
    assert after["reference/attention"] != before["reference/attention"], "the dead reference worker was replaced"
    stopped = [after["course parts/attention"],
               *(p.pid for p in psutil.Process(after["course parts/attention"]).children(recursive=True))]
    for pid in stopped:                                              # alive, but it answers nothing in time
        os.kill(pid, signal.SIGSTOP)
    try:
        assert scores(hidden.grade(variants.submission("attention"), "attention")) == full
        assert status()["course parts/attention"] != after["course parts/attention"], "the stopped worker was replaced"
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_learners_graded_one_after_another_get_what_each_gets_alone(monkeypatch):
    """A mistake that the course's parts serve (the inverted mask), then a right answer: the shared workers carry
    nothing from one to the next. The cells graded are those whose tests use attention (blockwise_attention's use
    none)."""
    bug = {v.name: v for v in variants.load("attention")}["sdpa_mask_inverted"].cells
    only = ("MultiHeadAttention_tests", "causal_mask_tests", "scaled_dot_product_attention_tests")

    def graded(cells):
        return scores(hidden.grade(variants.submission("attention", cells), "attention", only=only))

    batch = [graded(cells) for cells in (bug, {})]
    monkeypatch.setenv("GRADER_WARM_SUITE", "0")
    alone = [graded(cells) for cells in (bug, {})]
    assert batch == alone
    assert batch[0]["scaled_dot_product_attention_tests"] < 5.0
    assert batch[1] == {"scaled_dot_product_attention_tests": 5.0, "causal_mask_tests": 2.0,
                        "MultiHeadAttention_tests": 6.0}


def test_prepared_before_the_first_learner():
    """`prepare`, sent while a batch's first notebook runs, starts the workers of course code the suite asks for:
    the first learner's suite starts no worker but its own and gets full marks with the shared ones."""
    hidden.prepare("residual", config.current())
    assert {"reference/residual", "course parts/residual"} <= set(status())
    grading = hidden.grade(variants.submission("residual"), "residual")
    assert [role for role, _ in grading.profile["workers"]] == ["learner"]
    assert all(v.score == v.points for v in grading.verdicts.values()), (
        {g: v.failed for g, v in grading.verdicts.items()})


def test_nothing_made_ready_after_the_last_learner():
    """After the last learner of a batch (`more=False`) no process is forked ahead; the next grading gets its own."""
    first = scores(hidden.grade(variants.submission(PE), PE))
    assert status("ready") is not None
    assert scores(hidden.grade(variants.submission(PE), PE, more=False)) == first
    assert status("ready") is None
    assert scores(hidden.grade(variants.submission(PE), PE)) == first
    assert status("ready") is not None


def test_the_next_learners_process_starts_while_this_one_is_graded():
    """The next learner's process is forked when this learner's suite starts, not after it ends, and it still
    gets a worker of its own and the same scores."""
    first = scores(hidden.grade(variants.submission(PE), PE))
    asked = since_boot()
    assert scores(hidden.grade(variants.submission(PE), PE)) == first
    returned = since_boot()
    forked = started_since_boot(status("ready"))
    assert asked <= forked + 0.02 and forked - asked < (returned - asked) / 2, (asked, forked, returned)
    grading = hidden.grade(variants.submission(PE), PE)
    assert scores(grading) == first
    assert [role for role, _ in grading.profile["workers"]].count("learner") == 1


def test_a_batch_leaves_nothing_behind_on_the_host(tmp_path, monkeypatch):
    """When the warm suite process ends, nothing it made stays on the host: not the sandbox (folder and cgroup) of
    the worker made ready for a learner who never came, not the fork server or its socket."""
    from autograder.sandbox.box import wait_until

    for server in hidden._SERVERS:
        server.close()
    hidden._SERVERS.clear()
    monkeypatch.setenv("TMPDIR", str(tmp_path))        # the new suite process's private folder is here
    try:
        assert scores(hidden.grade(variants.submission(PE), PE))["sinusoidal_encoding_tests"] == 4
        assert status("ready") is not None               # the next learner's process and worker, made ready
    finally:
        hidden._SERVERS[0].close()
        hidden._SERVERS.clear()
    root = tmp_path / f"grader-{os.geteuid()}"
    assert root.is_dir()
    assert wait_until(lambda: not list(root.iterdir()), 10), sorted(p.name for p in root.iterdir())
