"""The folders show a notebook's path, and the imports follow it: what runs inside the sandbox imports nothing outside
its folder, and each step imports only the steps below it (read from the source with `ast`)."""
import ast
import sys
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "autograder"
# Bottom to top: a package may import the ones before it. `base` is the package's own top-level modules
# (config, notebooks), which every step uses.
FLOW = ["base", "inside", "sandbox", "graph", "verdict", "pipeline", "authoring", "classroom", "service"]


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, relative ones made absolute."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
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
    for path in inside.glob("*.py"):
        for line, module in imports(path):
            top = module.split(".")[0]
            assert top in own or top in allowed, f"{path.relative_to(ROOT)}:{line} imports {module}"
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
