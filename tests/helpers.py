"""What the project's tests share: the course's paths and assignments, its secrets and the search for them, the
browser's settings, text full of markdown's marks, a polled measure of processes' memory, a learner's check() run in
a real kernel, and grade books read as the LMS that imports them reads them."""
import atexit
import csv
import importlib.util
import io
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import psutil

from autograder import exercises, notebooks
from autograder.authoring import variants
from autograder.classroom import grade
from autograder.verdict import hidden

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = exercises.names()

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Headless, and quiet: without these Chromium calls Google's hosts (updates, sync, field trials).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-default-apps", "--disable-extensions", "--disable-dev-shm-usage",
                 "--metrics-recording-only", "--no-default-browser-check", "--disable-features=Translate"]

# The trusted processes: nbgrader's, and the hidden suite's (a warm suite server and the processes forked from it,
# or one process per learner).
SUITE = ("autograder.verdict.suite_server", "autograder.verdict.hidden")
# Markdown's special characters (escape, emphasis, code, link, heading): text read back from a rendering would come
# back escaped or changed; read from the record, it is these characters.
MARKS = r"a \ b: (c) *d* _e_ `f` [g](h) # i"


_PREPARED: dict[str, Path] = {}


def prepare(grading_dir: Path, assignments: list[str]) -> Path:
    """`grade.prepare` (nbgrader generate_assignment into a new grading folder with its own SQLite gradebook), run once
    per assignment in this test process and copied after that: what it writes names no folder, so a copy is the
    same. A check service's prepared assignments are `<state>/templates/<assignment>`."""
    grading_dir = Path(grading_dir)
    key = ",".join(assignments)
    if key not in _PREPARED:
        _PREPARED[key] = Path(tempfile.mkdtemp(prefix="prepared-")) / "grading"
        atexit.register(shutil.rmtree, _PREPARED[key].parent, True)
        grade.prepare(_PREPARED[key], assignments)
    if grading_dir.exists():
        shutil.rmtree(grading_dir)
    shutil.copytree(_PREPARED[key], grading_dir)
    return grading_dir


def prepare_service(state: Path, assignments: list[str]):
    """A check service's state folder with its assignments prepared (`prepare`), as its Checker would."""
    for asg in assignments:
        prepare(Path(state) / "templates" / asg, [asg])


def all_variants():
    return [(asg, v) for asg in ASSIGNMENTS if (variants.VARIANTS_DIR / f"{asg}.py").exists()
            for v in variants.load(asg)]


def book_module(name: str):
    """A module of the book's own code (book/NAME.py), imported from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "book" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def solution_lines():
    """Lines of the reference solutions, which must never reach a learner before grading."""
    secrets = set()
    for asg in ASSIGNMENTS:
        for cell in notebooks.read(notebooks.source_notebook(asg)).cells:
            if notebooks.is_solution(cell):
                body = re.search(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S)
                secrets |= {ln.strip() for ln in body.group(1).splitlines() if len(ln.strip()) >= 25}
    return secrets


def suite_lines():
    """Lines of the hidden suites, which must never reach a learner at all (less the lines they share
    with the solutions: a learner's own notebook may hold those)."""
    secrets = set()
    for asg in ASSIGNMENTS:
        for ln in hidden.suite_path(asg).read_text().splitlines():
            ln = ln.strip()
            if len(ln) >= 30 and not ln.startswith(("#", '"""', "import", "from")):
                secrets.add(ln)
    solutions = "\n".join(c.source for asg in ASSIGNMENTS for c in notebooks.read(notebooks.source_notebook(asg)).cells
                          if notebooks.is_solution(c))
    return {ln for ln in secrets if ln not in solutions}


def public_text() -> str:
    """What the source notebooks release on purpose: every cell less its solution's body (a kernel's index arithmetic
    shown in the text, the setup cell a suite repeats)."""
    return "\n".join(re.sub(r"### BEGIN SOLUTION\n.*?### END SOLUTION", "", c.source, flags=re.S)
                     for asg in ASSIGNMENTS for c in notebooks.read(notebooks.source_notebook(asg)).cells)


def secret_lines():
    public = public_text()
    return {ln for ln in solution_lines() | suite_lines() if ln not in public}


def leaks(text: str, secrets: set) -> list:
    """The secret lines found in a file's text (JSON-escaped notebook text included)."""
    text = text.replace('\\"', '"').replace("\\n", "\n")
    return [s for s in secrets if s in text]


def peak_memory(run, markers: dict[str, tuple[str, ...]]) -> tuple[object, float, dict[str, int]]:
    """(what run() returns, its wall time, {name: the peak resident memory of the processes under this one whose
    command line holds one of its markers}), polled from outside (VmHWM) while it runs."""
    peak: dict[str, int] = {}
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            for p in psutil.Process().children(recursive=True):
                try:
                    cmd = " ".join(p.cmdline())
                    with open(f"/proc/{p.pid}/status") as f:
                        hwm = next(int(line.split()[1]) << 10 for line in f if line.startswith("VmHWM"))
                except (psutil.Error, OSError, StopIteration):
                    continue
                for name, found in markers.items():
                    if any(m in cmd for m in found):
                        peak[name] = max(peak.get(name, 0), hwm)
            time.sleep(0.05)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    t0 = time.monotonic()
    try:
        result = run()
    finally:
        wall = time.monotonic() - t0
        stop.set()
        t.join()
    return result, wall, peak


# The check() cell of the releases before the check service answered at once: one POST, and its answer once graded
# (what an already-released notebook still sends). `first_check` binds it to an assignment, as criteria.render does.
FIRST_CHECK = '''def check(notebook=None, url=None, token=None):
    """Check your work: send this notebook, as last saved (save it first), to the course's check service and print
    what the hidden tests say of it: your scores and their diagnoses. It changes no grade and is not a submission.
    The service's address and your token come from your instructor: pass them, or set COURSE_CHECK_URL and
    COURSE_CHECK_TOKEN, or put {"url": ..., "token": ...} in ~/.course-check.json. On the course's JupyterHub
    nothing is needed: the hub gives your server both."""
    import json
    import os
    import pathlib
    import urllib.error
    import urllib.request

    saved = {}
    conf = pathlib.Path.home() / ".course-check.json"
    if conf.exists():
        saved = json.loads(conf.read_text())
    url = url or os.environ.get("COURSE_CHECK_URL") or saved.get("url")
    token = (token or os.environ.get("COURSE_CHECK_TOKEN") or saved.get("token")
             or os.environ.get("JUPYTERHUB_API_TOKEN"))
    if not url or not token:
        print("No check service is set up: ask your instructor for its address and your token.")
        return None
    path = pathlib.Path(notebook or f"{ASSIGNMENT}.ipynb")
    request = urllib.request.Request(f"{url.rstrip('/')}/check/{ASSIGNMENT}", data=path.read_bytes(), method="POST",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=900) as r:
            answer = json.load(r)
    except urllib.error.HTTPError as e:
        answer = json.loads(e.read() or b"{}")
        answer.setdefault("text", f"Check refused ({e.code}): {answer.get('error', e.reason)}")
    except urllib.error.URLError as e:
        answer = {"text": f"The check service could not be reached ({e.reason}): try again later."}
    print(answer.get("text", ""))
    return answer.get("total")
'''


def first_check(assignment: str) -> str:
    return FIRST_CHECK.replace("{ASSIGNMENT}", assignment)


def run_check_cell(assignment: str, folder: Path, source: str | None = None) -> str:
    """The released notebook's own check() cell (or the cell `source`), then `check()`, run in a real kernel in
    `folder` beside the learner's saved notebook (the reference submission, written there); what it printed. The
    address and the token are the kernel's environment's, as the caller set them."""
    from nbclient import NotebookClient

    from autograder.authoring.criteria import CHECK_CELL

    if source is None:
        released = nbformat.read(str(ROOT / "exercises" / assignment / f"{assignment}.ipynb"), as_version=4)
        source = next(c for c in released.cells if c.get("id") == CHECK_CELL).source
    nbformat.write(variants.submission(assignment), str(folder / f"{assignment}.ipynb"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source), nbformat.v4.new_code_cell("check()")])
    NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(folder)}}).execute()
    return "".join(o.get("text", "") for o in nb.cells[1].outputs)


CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


def canvas_import(text: str) -> dict:
    """A grade-book CSV read as Canvas's Gradebook import reads it: the columns Student, ID, SIS User ID, SIS Login
    ID and Section first, then one per assignment, `Name (id)` for an existing Canvas assignment or `Name` for a new
    one; a first row `Points Possible` may give each assignment's points; a learner is found by ID, else SIS User ID,
    else SIS Login ID; a score is a number or empty (no change). {"assignments": [(name, id)], "points": {name:
    points}, "learners": {identifier: {name: score or None}}}; an AssertionError says what Canvas would refuse."""
    rows = list(csv.reader(io.StringIO(text)))
    assert rows and rows[0][:5] == CANVAS_COLUMNS, f"Canvas needs the columns {CANVAS_COLUMNS} first: {rows[:1]}"
    assignments = [re.fullmatch(r"(.+?)(?: \((\d+)\))?", h).groups() for h in rows[0][5:]]
    names = [name for name, _ in assignments]
    assert len(set(names)) == len(names), f"an assignment twice: {names}"
    points, learners = {}, {}
    for row in rows[1:]:
        assert len(row) == len(rows[0]), f"a row of {len(row)} cells under {len(rows[0])} columns: {row}"
        if row[0].strip() == "Points Possible":
            points = {name: float(v) for name, v in zip(names, row[5:])}
            continue
        who = row[1] or row[2] or row[3]
        assert who, f"a row Canvas cannot match to a learner (no ID, SIS User ID or SIS Login ID): {row}"
        assert who not in learners, f"{who} twice"
        scores = {}
        for name, value in zip(names, row[5:]):
            assert value == "" or re.fullmatch(r"\d+(\.\d+)?", value), f"{who}: {name} = {value!r} is not a score"
            scores[name] = float(value) if value else None
        learners[who] = scores
    return {"assignments": assignments, "points": points, "learners": learners}


def moodle_import(text: str, users: set[str], identify_by: str = "Username", items: dict[str, float] | None = None,
                  maximum: float = 100.0) -> dict:
    """A grade import CSV read as Moodle's (grade/import/csv, gradeimport_csv_load_data) reads it, with the column
    `identify_by` mapped to the users' usernames and each column named in `items` (grade item -> its maximum) mapped to
    that grade item: the headers trimmed and unique; a row with an empty user field skipped; a user that does not exist
    refused; a grade `-` or empty is no grade, else a number (a point as the decimal separator), at most the grade
    point maximum (100) and the item's maximum. {username: {item: grade or None}}; an AssertionError says what Moodle
    would refuse."""
    rows = list(csv.reader(io.StringIO(text)))
    header = [h.strip() for h in rows[0]]
    assert len(set(header)) == len(header), f"duplicate column names: {header}"
    assert identify_by in header, f"no column {identify_by!r} to identify users by: {header}"
    items = items or {}
    assert set(items) <= set(header), f"grade items without a column: {sorted(set(items) - set(header))}"
    who_at = header.index(identify_by)
    out: dict[str, dict] = {}
    for row in rows[1:]:
        user = row[who_at].strip()
        if not user:
            continue
        assert user in users, f"usermappingerror: no user with username {user!r}"
        grades = {}
        for item, top in items.items():
            value = row[header.index(item)].strip()
            if value in ("", "-"):
                grades[item] = None
                continue
            assert re.fullmatch(r"-?\d+(\.\d+)?", value), f"badgrade: {user} {item} = {value!r}"
            assert float(value) <= min(maximum, top), f"gradevaluetoobig: {user} {item} = {value}"
            grades[item] = float(value)
        out[user] = grades
    return out


# -- what a learner's code may not reach: the static reading proves or flags it (tests/test_static.py), the guards
# refuse it while it runs (tests/test_guard.py) ------------------------------------------------------------------------
def in_part(source: str) -> str:
    """`source` as the body of the graded function scaled_dot_product_attention."""
    return "def scaled_dot_product_attention(q, k, v, mask=None):\n    x = q\n" + "\n".join(
        "    " + line for line in source.splitlines())


# Constructs a reading cannot follow, each with what its flag names.
CONSTRUCTS = [
    ("getattr(torch.nn.functional, 'scaled_dot_product_' + 'attention')", "a name built while the code runs"),
    ("__import__('torch.nn.functional')", "__import__"),
    ("import importlib\nimportlib.import_module('torch.nn.functional')", "importlib"),
    ("import sys\nsys.modules['__main__'].Worker.op_run = None", "sys.modules"),
    ("eval('torch.nn.functional')", "eval"),
    ("exec('x = 1')", "exec"),
    ("import ctypes\nctypes.CDLL(None)", "ctypes"),
    ("import sys\nsys._getframe(1).f_globals", "_getframe"),
    ("(lambda: 0).__globals__", "__globals__"),
    ("torch.nn.functional.__dict__['layer_norm']", "__dict__"),
    ("from torch.nn.functional import *", "every name"),
    ("torch.allclose = lambda *a, **k: True", "assigns into a library module"),
    ("setattr(torch, 'allclose', None)", "setattr"),
    ("import os\nos.fork()", "os.fork"),
    ("import signal\nsignal.alarm(1)", "signal"),
    ("open('/proc/self/clear_refs', 'w').write('5')", "open"),
    ("import inspect\ninspect.currentframe()", "inspect"),
    ("import operator\noperator.attrgetter('layer_norm')(torch.nn.functional)", "operator.attrgetter"),
    # the third round: routes a list of known bad routes had missed
    ("g = getattr\ng(torch.nn.functional, 'scaled_dot_product_attention')(q, k, v)", "getattr as a value"),
    ("def f(q, nnf=torch.nn.functional):\n    return nnf.scaled_dot_product_attention(q, q, q)", "as a value"),
    ("(G, _) = (torch.nn.functional, 0)\nG.scaled_dot_product_attention(q, k, v)", "as a value"),
    ("op = torch._C._jit_get_operation('aten::scaled_dot_product_attention')", "torch._C"),
    ("op = torch._C._jit_get_operation(name)", "torch._C"),
    ("ops = [torch.ops.aten]", "torch.ops"),
    ("vars(torch.nn.functional)['layer_norm']", "vars"),
    ("getattr(things[0], name)", "a name built while the code runs"),
    ("import torch.library\ntorch.library.Library('aten', 'IMPL')", "torch.library"),
    # the fourth round: library versions found by their __name__, and the worker's own objects
    ("import torch.overrides\nfs = torch.overrides.get_testing_overrides()\n"
     "f = [g for g in fs if g.__name__ == 'multi_head_' + 'attention_forward'][0]", "torch.overrides"),
    ("import torch._decomp\nf = [g for g in torch._decomp.decomposition_table.values()\n"
     "     if getattr(g, '__name__', '') == 'native_layer_norm'][0]", "torch._decomp"),
    ("import __main__\n__main__._refusals.clear()", "__main__"),
    ("import torch.nn.functional as F\nf = [getattr(F, n) for n in dir(F) if n.endswith('attention')][0]", "dir"),
    ("import torch.nn.functional as F\nf = next(v for v in vars(F).values() if getattr(v, '__name__', '') == 'x')",
     "vars"),
    ("import gc\nf = [o for o in gc.get_objects() if getattr(o, '__name__', '') == 'layer_norm'][0]", "gc"),
    ("import torch.nn.functional as F\nf = {g.__name__: g for g in F.__dict__.values() if callable(g)}['x']",
     "__dict__"),
]


# A generator of obfuscations ------------------------------------------------------------------------
# A route is a module reached some way, passed from name to name through one to three bindings, and its function
# looked up some way; every combination must be proven or flagged, never pass as honest code.  Hypothesis draws
# them (and shrinks a route that passes to its smallest form); every single binding with every lookup is tried too.
MODULES = ["torch.nn.functional", "nn.functional", "F", "torch._C._nn", "torch.ops.aten"]
BINDINGS = [
    "{b} = {a}", "({b}, _) = ({a}, 0)", "{b}, = [{a}]", "{b} = [{a}][0]", "{b} = {{'k': {a}}}['k']",
    "{b} = (lambda: {a})()", "def _get{i}(m={a}):\n    return m\n{b} = _get{i}()",
    "class _Box{i}:\n    m = {a}\n{b} = _Box{i}.m", "{b} = {a} if q is not None else q", "({b} := {a})",
    "for {b} in ({a},):\n    pass", "import contextlib\nwith contextlib.nullcontext({a}) as {b}:\n    pass",
    "global {b}\n{b} = {a}", "{b} = next(iter([{a}]))", "{b} = type('B', (), {{'m': {a}}}).m",
    "{b} = {a}.__class__.__call__ and {a}", "[*{b}] = [{a}]\n{b} = {b}[0]",
]
LOOKUPS = [
    "h.scaled_dot_product_attention", "getattr(h, 'scaled_dot_product_attention')",
    "getattr(h, 'scaled_dot_product_' + 'attention')", "h.__dict__['scaled_dot_product_attention']",
    "vars(h)['scaled_dot_product_attention']", "getattr(h, 'noitnetta_tcudorp_tod_delacs'[::-1])",
    "(lambda g: g(h, 'scaled_dot_product_attention'))(getattr)",
    "__import__('operator').attrgetter('scaled_dot_product_attention')(h)",
    "h.__getattribute__('scaled_dot_product_attention')",
    # found by its __name__ in a table of the module's names or values
    "[g for g in vars(h).values() if getattr(g, '__name__', '') == 'scaled_dot_product_attention'][0]",
    "next(g for g in h.__dict__.values() if getattr(g, '__name__', '') == 'scaled_dot_product_attention')",
    "[getattr(h, n) for n in dir(h) if n.startswith('scaled_dot')][0]",
    "{g.__name__: g for g in map(h.__getattribute__, dir(h))}['scaled_dot_product_attention']",
    "[g for g in (h.relu, h.scaled_dot_product_attention) if g.__name__.endswith('attention')][0]",
    "[g for g in __import__('torch').overrides.get_testing_overrides() if g.__name__ == 'x'][0]",
]


def route(module: str, bindings: list[str], lookup: str) -> str:
    lines = ["import torch.nn.functional as F"]
    for i, binding in enumerate(bindings):
        a, b = (module if i == 0 else f"h{i - 1}"), ("h" if i == len(bindings) - 1 else f"h{i}")
        lines += binding.format(a=a, b=b, i=i).splitlines()
    lines += [f"f = {lookup}", "return f(q, k, v), None"]
    return "def scaled_dot_product_attention(q, k, v, mask=None):\n" + "\n".join("    " + line for line in lines)



# Honest code: every idiom a good learner writes, in any combination, is neither proven, flagged nor refused.
IDIOMS = [
    "h = x  # type: torch.Tensor",
    "def helper(t: torch.Tensor) -> 'torch.Tensor':\n    return t",
    "names = {'attention': 1, 'layer_norm': 2, 'MultiheadAttention': 3}",
    "shape = functools.reduce(operator.mul, x.shape, 1)",
    "cfg = types.SimpleNamespace(d=4, name='layernorm')",
    "if DEBUG:\n    print('layernorm', x.shape)",
    "acts = {'relu': torch.relu, 'gelu': torch.nn.functional.gelu}",
    "y = itertools.chain.from_iterable([[1], [2]])",
    "Pair = collections.namedtuple('Pair', 'a b')",
    "Pair = collections.namedtuple('Pair', 'a b')\np = Pair(1, 2)._replace(b=3)\nd = p._asdict()\n"
    "names = Pair._fields + p._fields\nq = Pair._make([4, 5])",
    "z = math.sqrt(x.shape[-1]) * np.float64(1.0)",
    "w = getattr(self, 'weight', None)",
    "setattr(self, 'cache', None)",
    "t = torch.nn.functional.softmax(x, dim=-1)",
    "n = type(self).__name__",
    "nn.Module.__init__(self)",
    "fn = (lambda t: t * 2)",
    "msg = f'{type(x).__name__} of shape {tuple(x.shape)}'",
    "mask = torch.ones(3, 3, dtype=torch.bool).tril()",
    "d = dataclasses.field(default=0)",
    "k = typing.cast(int, 3)",
]


