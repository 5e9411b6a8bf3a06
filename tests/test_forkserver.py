"""Workers forked from the fork server (autograder.sandbox.forkserver) are confined exactly as workers started by
bubblewrap are, each in a sandbox of its own that no other learner's code ever ran in; the server takes requests only
from the host, and a server that died is replaced."""
import os
import subprocess
import sys
import time

import pytest
from helpers import ROOT

from autograder.sandbox import box as sandbox
from autograder.sandbox import forkserver
from autograder.sandbox.box import Limits, Sandbox, wait_until
from autograder.verdict.learner import Learner

PROBE = r'''
import os, signal, socket, sys, torch

def probe():
    status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
    keep = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
    return {"status": {k: status.get(k, "").strip() for k in keep},
            "limits": open("/proc/self/limits").read(),
            "mounts": sorted(" ".join((l.split()[4], l.split(" - ")[1].split()[0])) for l in open("/proc/self/mountinfo")),
            "cgroup": open("/proc/self/cgroup").read(), "hostname": socket.gethostname(), "cwd": os.getcwd(),
            "env": dict(os.environ), "root": sorted(os.listdir("/")), "fds": sorted(os.listdir("/proc/self/fd")),
            "net": sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]),
            "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()],
            "path": sys.path, "argv": sys.argv, "umask": os.umask(0o022), "threads": torch.get_num_threads(),
            "sigchld": str(signal.getsignal(signal.SIGCHLD)), "course": os.path.exists(ROOT), "marked": marked()}

def marked():
    return getattr(torch, "left_by_another_learner", None)
'''  # noqa: E501 - the probe's code, kept as it runs


def worker(code: str, fork: bool, **limits) -> Learner:
    w = Learner([{"id": "probe", "source": code}], limits=Limits(wall_s=120, fork=fork, **limits), role="probe",
                guarded=False)
    w.start()
    assert type(w.proc).__name__ == ("Forked" if fork else "Popen")
    return w


@pytest.fixture
def forking():
    if not sandbox.can_fork(Limits()):
        pytest.skip("workers are not forked here (no bubblewrap, no cgroup, or grading not as root)")


def test_a_forked_worker_is_confined_exactly_like_a_started_one(forking):
    seen = {}
    for fork in (True, False):
        w = worker(PROBE.replace("ROOT", repr(str(ROOT / "solutions"))), fork)
        try:
            seen[fork] = w.fn("probe")()
            if fork:          # (a started worker's pid is bubblewrap's, on the host)
                host = {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in (*forkserver.NAMESPACES, "user")}
                theirs = {ns: os.readlink(f"/proc/{w.proc.pid}/ns/{ns}") for ns in host}
                assert all(theirs[ns] != host[ns] for ns in host), (host, theirs)
            assert w.proc.pid in w.sandbox.pids()
        finally:
            w.close()
    forked, started = seen[True], seen[False]
    bounding = [int(seen[fork]["status"].pop("CapBnd"), 16) for fork in (True, False)]
    assert bounding[0] == 0 and bounding[1] != 0      # stricter: bubblewrap leaves the bounding set to the no-privs
    for key in started:
        assert forked[key] == started[key], (key, forked[key], started[key])
    assert forked["status"]["CapEff"] == "0000000000000000" and forked["status"]["NoNewPrivs"] == "1"
    assert forked["ids"][:4] == [1000] * 4 and not forked["course"] and forked["net"] == ["lo"]


def test_each_worker_is_a_fresh_process_in_a_sandbox_of_its_own(forking):
    """What one learner's code leaves in its process, its folders or its namespaces, the next never sees."""
    first = worker(PROBE.replace("ROOT", "'/'") + "\ntorch.left_by_another_learner = 1\n"
                   "open('/tmp/left', 'w').write('x'); open('/sandbox/left', 'w').write('x')\n", True)
    second = worker(PROBE.replace("ROOT", "'/'") + "\ndef left():\n    return [os.path.exists(p) for p in "
                    "('/tmp/left', '/sandbox/left')]\n", True)
    try:
        assert first.fn("marked")() == 1
        assert second.fn("marked")() is None
        assert second.fn("left")() == [False, False]
        assert first.sandbox.dir != second.sandbox.dir and first.sandbox.cgroup.dirs != second.sandbox.cgroup.dirs
        for ns in ("mnt", "pid", "net", "user", "ipc"):
            assert os.readlink(f"/proc/{first.proc.pid}/ns/{ns}") != os.readlink(f"/proc/{second.proc.pid}/ns/{ns}")
        assert second.proc.pid not in first.sandbox.pids()
    finally:
        first.close()
        second.close()


def spawned(code: str, limits: Limits, send: bytes = b""):
    """Run a script as a forked worker (no worker.py): (its sandbox, its stdout, its exit code)."""
    sb = Sandbox(limits)
    proc = sb.spawn([sb.put("script.py", code)], stderr=2)
    assert type(proc).__name__ == "Forked"
    proc.stdin.write(send)
    proc.stdin.close()
    out = proc.stdout.read()
    return sb, out, proc.wait(60)


def test_a_forked_worker_ends_like_a_started_one(forking):
    sb, out, code = spawned("import sys; print(sys.stdin.read()); sys.exit(3)", Limits(), send=b"hello")
    sb.close()
    assert (out, code) == (b"hello\n", 3)
    for _ in range(5):            # ended before the grader read its pid: the status that follows is still read
        sb = Sandbox(Limits())
        try:
            proc = sb.spawn([sb.put("script.py", "import os; os._exit(4)")], stderr=2)
            assert proc.wait(10) == 4
        finally:
            sb.close()
    sb = Sandbox(Limits())
    try:
        proc = sb.spawn([sb.put("script.py", "import time; time.sleep(60)")], stderr=2)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(0.2)
        assert proc.poll() is None
        proc.kill()
        assert proc.wait(10) == -9
    finally:
        sb.close()
    sb = Sandbox(Limits())
    proc = sb.spawn([sb.put("script.py", "import time; time.sleep(60)")], stderr=2)
    sb.close()                                    # the whole sandbox killed, the worker with it
    assert proc.wait(10) == -9
    orphan = "import os, subprocess\nsubprocess.Popen(['sleep', '60'], start_new_session=True)\nos._exit(0)\n"
    started = time.monotonic()
    sb, out, code = spawned(orphan, Limits())     # what it left running dies with it: its stdout ends at once
    try:
        assert code == 0 and time.monotonic() - started < 20
        assert wait_until(lambda: not sb.pids(), 10), sb.pids()
    finally:
        sb.close()


def test_a_server_that_died_is_replaced_and_its_workers_live_on(forking):
    first = worker("x = 1", True)
    try:
        for server in list(sandbox._FORK_SERVERS.values()):
            server.proc.kill()
            server.proc.wait(10)
        assert first.request({"op": "echo", "token": "t"}, what="(check)")["ok"] == "t"
        second = worker("x = 2", True)
        assert second.request({"op": "echo", "token": "u"}, what="(check)")["ok"] == "u"
        second.close()
    finally:
        first.close()


def test_the_server_refuses_a_request_from_outside_the_host_namespaces(forking):
    """A process in another PID namespace (as a sandboxed one is) gets no worker, even with a real placeholder."""
    worker("x = 1", True).close()            # a server is running
    server = next(iter(sandbox._FORK_SERVERS.values()))
    sb = Sandbox(Limits())
    try:
        target = sb.placeholder(2)
        ask = ("from autograder.sandbox import forkserver\n"
               f"client = object.__new__(forkserver.ForkServer); client.path = {server.path!r}\n"
               f"try:\n    client.fork({target}, {sb.cgroup.procs_files()!r}, [], ['/bin/true'], 2)\n"
               f"except OSError as e:\n    print(e)\n")
        r = subprocess.run(["unshare", "--pid", "--fork", sys.executable, "-c", ask], capture_output=True, text=True,
                           timeout=60)
        assert "does not come from a process of the host" in r.stdout, (r.stdout, r.stderr)
        assert sb.pids() and all(os.readlink(f"/proc/{p}/exe").endswith(("bwrap", "sleep")) for p in sb.pids())
    finally:
        sb.close()


def test_a_worker_refuses_to_start_with_the_hosts_credentials():
    """The worker's last check before running worker.py, here on the host (root, every capability): it fails."""
    problem = forkserver.credentials_problem()
    assert "CapEff" in problem and "Uid/Gid" in problem and "root" in problem


@pytest.mark.parametrize("fork", [True, False], ids=["fork server", "bubblewrap"])
def test_the_notebooks_kernel_is_forked_interrupted_and_started_again(fork):
    """The notebook's run (execute.py) forks its first kernel with torch imported; a cell past the cell limit is
    interrupted and the next one runs in the same kernel; after a cell that ends the process, a kernel started as
    usual runs the rest. The same outputs whether the run was forked from the fork server or started by bubblewrap."""
    import json

    import nbformat

    from autograder.inside import execute

    if fork and not sandbox.can_fork(Limits()):
        pytest.skip("nothing is forked here (no bubblewrap, no cgroup, or grading not as root)")
    cells = ["import sys\nprint('torch' in sys.modules, 'kernel')", "while True:\n    pass",
             "print('after the interrupt')", "import os\nos._exit(3)", "print('in a new kernel')"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    sb = Sandbox(Limits(wall_s=120, fork=fork))
    try:
        proc = sb.start([sb.inside(sb.files / "execute.py"), "5", "20000", str(2 << 20), "50"], preload=execute.PRELOAD)
        assert type(proc).__name__ == ("Forked" if fork else "Popen")
        key = b"0" * 64
        run = sb.finish(proc, 8 << 20, key + b"\n" + nbformat.writes(nb).encode(),
                        last=execute.signed(key, execute.DONE).encode() + b"\n")
    finally:
        sb.close()
    first, *rest = run.stdout.splitlines()
    lines = [json.loads(first), *(json.loads(line.partition(b" ")[2]) for line in rest)]
    assert lines[0] == {"ready": True} and lines[-1] == execute.DONE, (lines, run.stderr)
    said = {m["index"]: json.dumps(m["outputs"]) for m in lines[1:-1]}
    assert "True kernel" in said[0]
    assert "TimeoutError" in said[1] and "after the interrupt" in said[2]
    assert "DeadKernelError" in said[3] and "in a new kernel" in said[4], (said, run.stderr)


def test_the_server_is_reached_from_a_deep_private_folder(forking, tmp_path, monkeypatch):
    """A Unix socket's address holds at most 108 bytes; a grader's temporary folder may be deeper than that."""
    import tempfile

    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    monkeypatch.setattr(sandbox, "_FORK_SERVERS", {})
    w = worker("x = 1", True)
    try:
        assert w.request({"op": "echo", "token": "deep"}, what="(check)")["ok"] == "deep"
        sockets = list(deep.glob("grader-*/forkserver-*.sock"))
        assert sockets and all(len(str(p)) > 108 for p in sockets)
    finally:
        w.close()
        for server in sandbox._FORK_SERVERS.values():
            server.close()
