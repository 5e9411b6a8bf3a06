"""The folders show a notebook's path, and the imports follow it: what runs inside the sandbox imports nothing outside
its folder, and each step imports only the steps below it (read from the source with `ast`). Every module and file of
the package that the repository names exists."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

PACKAGE = ROOT / "autograder"
# Bottom to top: a package may import the ones before it. `base` is the package's own top-level modules
# (config, notebooks), which every step uses.
FLOW = ["base", "inside", "sandbox", "graph", "verdict", "pipeline", "authoring", "classroom", "service"]


def absolute(node: ast.ImportFrom, path: Path) -> str:
    """The module a `from ... import` names, a relative one made absolute."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    base = node.module or ""
    if node.level:
        up = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join([*up, base] if base else up)
    return base


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, relative ones made absolute."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node, path)
            names = [f"{base}.{a.name}" for a in node.names] if base == "autograder" else [base]
            found += [(node.lineno, n) for n in names]
    return found


def step(module: str) -> str | None:
    """The step (package) of an autograder module, or None for anything else."""
    parts = module.split(".")
    if parts[0] != "autograder":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in FLOW else "base"


def test_the_sandbox_gets_one_folder_that_imports_nothing_outside_it():
    inside = PACKAGE / "inside"
    own = {p.stem for p in inside.glob("*.py")}
    allowed = set(sys.stdlib_module_names) | {"torch", "numpy", "safetensors", "nbformat", "nbclient", "jupyter_client",
                                              "ipykernel", "IPython"}
    # The kernels helper alone imports Triton (inside its functions): the instruments of a kernels exercise's worker.
    also = {"kernels.py": {"triton"}}
    for path in inside.glob("*.py"):
        for line, module in imports(path):
            top = module.split(".")[0]
            assert top in own or top in allowed | also.get(path.name, set()), \
                f"{path.relative_to(ROOT)}:{line} imports {module}"
    from autograder.sandbox import box

    assert set(box.SANDBOX_FILES) == {p.name for p in inside.glob("*.py")} - {"__init__.py"}


def test_each_step_imports_only_the_steps_below_it():
    for path in PACKAGE.rglob("*.py"):
        here = step(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for line, module in imports(path):
            there = step(module)
            if there is not None and there != here:
                assert FLOW.index(there) < FLOW.index(here), (
                    f"{path.relative_to(ROOT)}:{line}: {here} imports {module}, a step above it")


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path: Path, modules: set[str]) -> set[str]:
    """Those of the package's `modules` a file imports, anywhere in it (inside functions, under TYPE_CHECKING):
    `from a.b import c` is a.b.c when c is a module, else a.b."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node, path)
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m in modules} - {module_of(path)}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_circles_finds_modules_that_import_each_other():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_two_modules_import_each_other_even_through_others():
    """A module below another never needs it: not for a type, not inside a function (packages aside: a package's
    face may name what its modules hold)."""
    files = list(PACKAGE.rglob("*.py"))
    modules = {module_of(p) for p in files}
    graph = {module_of(p): module_imports(p, modules) for p in files if p.name != "__init__.py"}
    found = circles(graph)
    assert not found, f"modules that import each other, through others or not: {found}"


def test_every_folder_of_the_flow_exists_and_says_what_it_is():
    for name in FLOW[1:]:
        face = PACKAGE / name / "__init__.py"
        assert face.exists(), name
        doc = ast.get_docstring(ast.parse(face.read_text()))
        assert doc and len(doc.splitlines()) <= 6, f"autograder/{name}: a docstring of a few lines says what it holds"


def test_module_docstrings_say_what_a_module_is_in_a_few_lines():
    """Manuals live in the README and docs/, not at the top of a module."""
    for path in PACKAGE.rglob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert len(doc.splitlines()) <= 20, f"{path.relative_to(ROOT)}: a docstring of {len(doc.splitlines())} lines"


PKG = PACKAGE.name
DOTTED = re.compile(rf"\b{PKG}((?:\.[A-Za-z_]\w*)+)")
SLASHED = re.compile(rf"\b{PKG}/[\w./-]*")
PLACEHOLDER = re.compile(r"(?<![A-Za-z])[A-Z]{3,}(?![A-Za-z])")      # test_NAME.py: any exercise's suite


def top_names(path: Path) -> set[str]:
    """The names a module defines or imports at its top level (inside top-level `if` and `try` too)."""
    names, body = set(), list(ast.parse(path.read_text()).body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            body += [*node.body, *node.orelse, *getattr(node, "finalbody", []),
                     *(s for h in getattr(node, "handlers", []) for s in h.body)]
    return names


def dotted_exists(segments: list[str]) -> bool:
    """Whether the package's module (and the first name after it, a module's or a package's own) exists."""
    here = PACKAGE
    for i, seg in enumerate(segments):
        if (here / seg / "__init__.py").is_file():
            here = here / seg
        elif (here / f"{seg}.py").is_file():
            rest = segments[i + 1:]
            return not rest or rest[0] in top_names(here / f"{seg}.py")
        else:
            return seg in top_names(here / "__init__.py")
    return True


def stale_names(text: str) -> list[str]:
    """The package's modules and files that `text` names and that do not exist. A name cut by a template (`{asg}`,
    `<asg>`) is checked up to the cut; an upper-case word in a file name stands for any name."""
    stale = []
    for m in DOTTED.finditer(text):
        segments = m.group(1).split(".")[1:]
        if text[m.end():m.end() + 1] in ("{", "<"):
            segments = segments[:-1]
        if not dotted_exists(segments):
            stale.append(m.group(0))
    for m in SLASHED.finditer(text):
        path = m.group(0).rstrip(".")
        if text[m.end():m.end() + 1] in ("{", "<"):
            path = path.rsplit("/", 1)[0]
        if not (ROOT / path).exists() and not list(ROOT.glob(PLACEHOLDER.sub("*", path))):
            stale.append(m.group(0))
    return stale


def repository_files() -> list[Path]:
    r = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                       capture_output=True, check=True)
    return [ROOT / name for name in r.stdout.decode().split("\0") if name and (ROOT / name).is_file()]


def test_stale_names_finds_modules_and_files_that_do_not_exist():
    assert stale_names(f"see {PKG}.verdict.record.Verdict and {PKG}/inside/worker.py.") == []
    assert stale_names(f"f'{PKG}.verdict.suites.test_{{asg}}' and `{PKG}/verdict/suites/test_<asg>.py`") == []
    assert stale_names(f"the hidden suite `{PKG}/verdict/suites/test_NAME.py`") == []
    assert stale_names(f"{PKG}.graph.explorer_data, {PKG}.inside.<name>, {PKG}.pipeline.export.{{plugin}}") == []
    assert stale_names(f"moved: {PKG}.learner, {PKG}/worker.py, {PKG}.graph.assemble, {PKG}.sandbox.Sandbox") == [
        f"{PKG}.learner", f"{PKG}.graph.assemble", f"{PKG}.sandbox.Sandbox", f"{PKG}/worker.py"]
    assert stale_names(f"{PKG}.verdict.record.NoSuchThing, {PKG}/verdict/suites/test_nothing.py") == [
        f"{PKG}.verdict.record.NoSuchThing", f"{PKG}/verdict/suites/test_nothing.py"]


def test_every_module_and_file_of_the_package_named_anywhere_exists():
    """Code, docs, the book, the tests, the Makefile: a name left behind by a move fails here."""
    found = []
    files = repository_files()
    assert ROOT / "README.md" in files and PACKAGE / "inside" / "worker.py" in files
    for path in files:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{number}: {name}" for name in stale_names(line)]
    assert not found, "names of the package's modules or files that do not exist:\n" + "\n".join(found)


def test_every_exercise_is_one_complete_unit_of_its_own_files():
    """Each exercise has its source, suite, known answers, release and a chapter its first cell links; the course
    lists them in the book's order, and a folder of solutions/ without its notebook is no exercise."""
    from autograder import exercises

    names = exercises.names()
    assert names[:4] == ["positional_encoding", "attention", "residual", "transformer"], names
    for name in names:
        assert exercises.get(name).missing() == [], name
    with pytest.raises(KeyError, match="no exercise 'nope'"):
        exercises.get("nope")
    absent = exercises.Exercise("nope")
    assert absent.missing()[:4] == [str(p.relative_to(ROOT)) for p in (absent.source, absent.suite, absent.variants,
                                                                      absent.release)]
    assert absent.suite.name == "test_nope.py" and absent.source.parent.name == "nope"


def test_each_hidden_test_of_drawn_calls_or_of_a_measure_says_so():
    """hidden.score does not count a drawn check of a part whose values a check every grading makes found wrong: a
    drawn test left unmarked would charge a mistake in some gradings only, and a measure or a family's promise left
    unmarked would charge the values' drawn checks for a mistake that is not of the values."""
    import importlib
    import inspect

    from autograder import exercises

    for name in exercises.names():
        suite = importlib.import_module(f"autograder.verdict.suites.test_{name}")
        for test, f in vars(suite).items():
            if not test.startswith("test_") or not callable(f):
                continue
            marks = {m.name for m in getattr(f, "pytestmark", [])}
            drawn = (f.__doc__ or "").startswith("on inputs drawn for this grading")
            measure = re.search(r"_(speed|memory|bytes|compiles)(_on_a_gpu)?$", test) is not None
            family = not drawn and ("_family_" in test or "family(grading, learner" in inspect.getsource(f))
            assert (("drawn" in marks) == drawn and ("measured" in marks) == measure
                    and ("family" in marks) == family), f"{name}: {test} {marks}"


def test_the_docs_give_each_tier_s_count(request):
    """docs/testing.md's tier table says how many tests each tier holds, as this run counted them (a run that
    collects every test file: `make test`, `make test-full`)."""
    from conftest import TIER_COUNTS

    counts = request.config.stash.get(TIER_COUNTS, None)
    if counts is None:
        pytest.skip("only a run that collects every test file counts the tiers")
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| (\d+) \|", (ROOT / "docs" / "testing.md").read_text(), re.M)
    assert {tier: int(n) for tier, n in rows} == counts, "docs/testing.md's tier table: give each tier's count"


# Every regular expression of the package, by module and the name that holds or uses it, with what it reads. None
# reads a verdict's words, a log or another process's report: the record's data is read instead
# (autograder.verdict.record). A new one fails here until it is listed with what it reads.
REGULAR_EXPRESSIONS = {
    "authoring.new": {"toc_with": "the course's _toc.yml", "write": "the new exercise's name"},
    "authoring.variants": {"_MARKER": "nbgrader's solution markers in the course's source"},
    "classroom.report": {n: "the book's Markdown and TeX, for the report's links and formulas"
                         for n in ("FENCE", "HEADING", "IN_THE_BOOK", "LINK", "MATH", "SQRT", "TEX_COMMAND",
                                   "_breakable", "_math")},
    "exercises": {"CHAPTER_LINK": "the source notebook's link to its chapter", "_chapters": "the course's _toc.yml"},
    "graph.model": {"_SAFE": "a module's attribute names, made safe for Graphviz"},
    "inside.guard": {"Policy.__init__": "the exercise's library ban (a pattern of names the suite declares)"},
    "inside.kernels": {n: "the NVIDIA compiler's own report on the kernel it compiled"
                       for n in ("_REGISTERS", "_SPILLS", "_TILE")},
    "inside.tracer": {"_code_line": "torch's stack trace of a graph node, for the feedback's graph"},
    "pipeline.common": {"markdown_text": "text escaped for Markdown"},
    "pipeline.exchange": {"ReleaseFeedback.not_from_exchange": "nbgrader's folder layout"},
    "pipeline.feedback": {n: "the feedback page's HTML, CSS and TeX as written by nbconvert and MathJax"
                          for n in ("BookLinks.preprocess_cell", "CONTROL", "Formulas.typeset", "GROUP",
                                    "PYGMENTS_RULE", "STYLE", "TAG", "lean_svg", "used_styles")},
    "pipeline.run": {"position": "nbgrader's folder layout"},
    "pipeline.sanitize": {n: "a learner's Markdown, made inert" for n in ("FENCE", "LITERALS", "MARKDOWN_LINK",
                                                                          "MARKUP", "markdown")},
    "pipeline.submission": {"_defines": "a learner's source: whether a cell defines a name"},
    "service.server": {"AUTHORIZATION": "an HTTP request's header", "RESPOND_ASYNC": "an HTTP request's header"},
    "verdict.known": {"bugs": "a known mistake's source: whether it defines its part"},
    "verdict.static": {"analyse": "the exercise's library ban (a pattern of names the suite declares)"},
    "verdict.suites.checks": {"load_exact": "a module's parameter names"},
    "verdict.suites.conftest": {"library": "the suites' library bans, joined into one pattern"},
    "verdict.suites.test_transformer": {"BLOCK_PARAM": "a module's parameter names",
                                        "contract_names": "a module's parameter names"},
}


def regular_expressions(tree: ast.AST) -> set[str]:
    """The names (module-level assignments, functions, methods) under which a module calls `re`; an import of `re`
    under another name counts as a use of its own (`<import>`), so none is missed."""
    found: set[str] = set()

    def visit(node: ast.AST, where: str):
        for child in ast.iter_child_nodes(node):
            here = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                here = child.name if where == "<module>" else f"{where}.{child.name}"
            elif isinstance(child, ast.Assign) and where == "<module>":
                here = ",".join(t.id for t in child.targets if isinstance(t, ast.Name))
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr != "escape" \
                    and isinstance(child.func.value, ast.Name) and child.func.value.id == "re":
                found.add(here)
            if (isinstance(child, ast.ImportFrom) and child.module == "re") or (isinstance(child, ast.Import) and any(
                    a.name == "re" and a.asname for a in child.names)):
                found.add("<import>")
            visit(child, here)

    visit(tree, "<module>")
    return found


def test_regular_expressions_finds_every_use_of_re():
    tree = ast.parse("import re\nimport re as r2\nA = re.compile('x')\n\n\ndef f(t):\n    return re.sub('a', '', t)\n"
                     "\n\nclass C:\n    def m(self):\n        return re.escape('x')\n")
    assert regular_expressions(tree) == {"A", "f", "<import>"}


def test_no_regular_expression_reads_a_verdict_or_a_log():
    """The record is read as data: no module of the package applies a regular expression to a verdict's words, a log,
    or what another process reports. Each use of `re` is listed above with what it reads."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        if uses := regular_expressions(ast.parse(path.read_text())):
            found[module] = uses
    unlisted = {m: sorted(u - set(REGULAR_EXPRESSIONS.get(m, {}))) for m, u in found.items()}
    assert not {m: u for m, u in unlisted.items() if u}, "a regular expression not listed with what it reads"
    gone = {m: sorted(set(listed) - found.get(m, set())) for m, listed in REGULAR_EXPRESSIONS.items()}
    assert not {m: g for m, g in gone.items() if g}, "listed, but no longer there"


def test_every_worker_a_grading_makes_is_handed_that_grading():
    """The grading (its deadline, its notes, what the learner's code reached) is handed down, never looked up: every
    worker the suites, the suite process and the warm server make is given the grading it serves (a worker made
    without one has a grading of its own, with no deadline)."""
    from autograder.verdict import context

    assert not hasattr(context, "current") and not hasattr(context, "begin")      # no grading to look up
    made = []
    for path in [*sorted((PACKAGE / "verdict" / "suites").glob("*.py")), PACKAGE / "verdict" / "suite_server.py"]:
        tree = ast.parse(path.read_text())
        imports = any(isinstance(n, ast.ImportFrom) and n.module == "autograder.verdict.learner"
                      and any(a.name == "Learner" for a in n.names) for n in ast.walk(tree))
        if not imports and path.stem != "suite_server":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "Learner"
                                               or getattr(node.func, "attr", None) == "Learner"):
                made.append((path.name, node.lineno, any(k.arg == "grading" for k in node.keywords)))
    assert len(made) >= 6 and all(given for *_, given in made), [m for m in made if not m[2]]
