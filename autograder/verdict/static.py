"""What a learner's code reaches, read from its source in the trusted process (Python's `ast`), against the course's
library policy (autograder.verdict.policy): the learner's explanation, and the first of two lines.

The second line is the policy enforced while the code runs (autograder.inside.guard): every attribute, import and
builtin of the learner's cells goes through a guard, whatever name the code computes. The reading adds what running
cannot see: a route to a library version on a path the tests never take.

- **Proven**: a name the reading resolves (imports, `from ... import`, plain aliases, `getattr(module, "constant")`)
  to a library version of what the exercise asks for (its suite's LIBRARY): the graded part that reaches it scores 0.
- **Flagged** for the instructor (nbgrader's needs_manual_grade, with what and where), in a graded part's own code:
  a resolved reference the policy does not allow, and what a reading cannot settle (a lookup by a name built while
  the code runs, `vars`, `eval`, reflection through dunder attributes, a module passed around as a value, ...).
- **Noted**: the same in code that runs when its cell runs (module level, a self-check, a plot): no graded part's use,
  and refused at once where it runs if the policy does not allow it.
- Strings are data: a type hint, a dict key, a message are nothing to read.

A finding belongs to the code that reaches it: a graded part is charged with its body's findings and those of every
function and class it names, transitively. The reading is linear in the size of the code and stops at a deadline.
docs/how-it-works.md ("Proven", "Flagged") says more.
"""
from __future__ import annotations

import ast
import importlib
import re
import sys
import time
import types
from dataclasses import dataclass, field

from autograder.inside.guard import DUNDERS
from autograder.verdict import policy
from autograder.verdict.policy import COURSE_LIBRARY

# Builtins that run code, look names up, or reach the process: never a course's need.
DENIED_BUILTINS = {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "dir", "open", "breakpoint",
                   "input", "help", "exit", "quit", "delattr", "memoryview", "__build_class__"}
SELF = ("self", "cls")
# What the notebooks name as the library versions of their parts.
EXAMPLES = ("F.scaled_dot_product_attention", "nn.MultiheadAttention", "F.layer_norm", "nn.LayerNorm",
            "nn.TransformerEncoderLayer")
DEADLINE_S = 10.0             # a reading that takes longer flags every part: too large to read


@dataclass
class Finding:
    cell: str
    line: int
    what: str

    def where(self) -> str:
        return f"cell {self.cell}, line {self.line}"


@dataclass
class Report:
    """Per graded part: the library versions it reaches (`library`), what it reaches that the reading cannot follow
    (`suspicious`), and notes on library use in code that runs when its cell runs (`notes`); `too_large`: the
    reading stopped at its deadline."""

    library: dict[str, list[Finding]] = field(default_factory=dict)
    suspicious: dict[str, list[Finding]] = field(default_factory=dict)
    notes: dict[str, list[Finding]] = field(default_factory=dict)
    too_large: bool = False
    steps: int = 0                # the reading's steps (a name resolved, a node read): its cost, counted


class TooLarge(Exception):
    """The reading passed its deadline."""


def _dotted(node) -> list[str] | None:
    """`a.b.c` as ['a', 'b', 'c'], `getattr(a.b, "c")` too; None for anything else."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return base + [node.attr] if base else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        base = _dotted(node.args[0])
        return base + [node.args[1].value] if base else None
    return None


class _Aliases:
    """Names bound to modules or their members anywhere in the code (flow-insensitive), each resolved once."""

    def __init__(self, trees: list[ast.AST], tick):
        self.bound: dict[str, list] = {}          # name -> what binds it: a path, or the parts of a name to resolve
        self.class_level: set[int] = set()        # statements of a class's body: an alias there is an attribute
        for tree in trees:
            for node in ast.walk(tree):
                tick()
                if isinstance(node, ast.ClassDef):
                    self.class_level.update(id(s) for s in node.body)
        for tree in trees:
            for node in ast.walk(tree):
                tick()
                for name, how in self._binds(node):
                    self.bound.setdefault(name, []).append(how)
        self.memo: dict[str, str | None] = {}

    def _binds(self, node):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield (a.asname, a.name) if a.asname else (a.name.split(".")[0], a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    yield a.asname or a.name, f"{node.module}.{a.name}"
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None \
                and id(node) not in self.class_level:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                parts = _dotted(node.value)
                if isinstance(t, ast.Name) and parts:
                    yield t.id, parts

    def path(self, name: str) -> str | None:
        """The module path `name` is bound to (None: none), resolved once, iteratively (no recursion depth)."""
        if name in self.memo:
            return self.memo[name]
        stack, seen = [name], {name}
        while stack:
            top = stack[-1]
            pending = [how[0] for how in self.bound.get(top, []) if not isinstance(how, str)
                       and how[0] not in self.memo and how[0] in self.bound and how[0] not in seen]
            if pending:
                seen.add(pending[0])
                stack.append(pending[0])
                continue
            stack.pop()
            found = None
            for how in self.bound.get(top, []):
                if isinstance(how, str):
                    found = found or how
                else:
                    base = self.memo.get(how[0])
                    found = found or (".".join([base, *how[1:]]) if base else None)
            self.memo[top] = found
        return self.memo[name]

    def resolve(self, node) -> str | None:
        parts = _dotted(node)
        if not parts:
            return None
        base = self.path(parts[0])
        return ".".join([base, *parts[1:]]) if base else None


_MODULES: dict[str, bool] = {}


def _module_like(path: str) -> bool:
    """Whether `path` names a module (or one of torch's operator namespaces), as far as the trusted process can tell:
    the allowed libraries are imported to look; a path it cannot look up is a module when it is a bare name."""
    if path in _MODULES:
        return _MODULES[path]
    parts = path.split(".")
    if parts[0] in ("torch", "numpy", "math") and parts[0] not in sys.modules:
        importlib.import_module(parts[0])
    obj = sys.modules.get(parts[0])
    result = obj is None and len(parts) == 1
    if obj is not None:
        for name in parts[1:]:
            try:
                obj = getattr(obj, name)
            except Exception:  # noqa: BLE001 - a path the reading cannot follow: not known to be a module
                obj = None
                break
        result = obj is not None and (isinstance(obj, types.ModuleType) or type(obj).__module__ == "torch._ops")
    _MODULES[path] = result
    return result


def allowed(path: str, modules: tuple[str, ...] = ()) -> bool:
    """Whether a course's code may use `path` (autograder.verdict.policy; a dunder of DUNDERS is a name, no part);
    `modules`: those the exercise allows beyond the course's."""
    parts = path.split(".")
    if any(p.startswith("_") and p not in DUNDERS for p in parts):
        return False
    return policy.allowed(".".join(p for p in parts if not p.startswith("__")), modules)


def _parents(tree: ast.AST) -> dict:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _module_as_value(node, parent, class_level: set[int]) -> bool:
    """Whether a module-naming expression `node` is used as a value: anything but an attribute's base, a call's
    function, the first argument of getattr/hasattr, or the whole right side of a plain alias `name = module` (not in
    a class's body, where the name is an attribute the reading does not follow)."""
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return False
    if isinstance(parent, ast.Call) and (parent.func is node or (
            isinstance(parent.func, ast.Name) and parent.func.id in ("getattr", "hasattr") and parent.args
            and parent.args[0] is node)):
        return False
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node and id(parent) not in class_level \
            and all(isinstance(t, ast.Name)
                    for t in (parent.targets if isinstance(parent, ast.Assign) else [parent.target])):
        return False
    return not isinstance(parent, ast.Expr)


class _Unit:
    """A piece of code that runs as one: a top-level function or class (its body), or a cell's code that runs when
    the cell runs (`name` None: statements at module level, class bodies, decorators, defaults)."""

    def __init__(self, cell: str, name: str | None):
        self.cell, self.name = cell, name
        self.nodes: list[ast.AST] = []
        self.library: list[Finding] = []
        self.flags: list[Finding] = []
        self.uses: set[str] = set()


def _units(cell: str, tree: ast.Module) -> list[_Unit]:
    """The units of one cell: its top-level functions and classes (their bodies), and the code that runs with it."""
    now = _Unit(cell, None)
    units = [now]
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            unit = _Unit(cell, stmt.name)
            unit.nodes += stmt.body
            now.nodes += [*stmt.decorator_list, stmt.args, *([stmt.returns] if stmt.returns else [])]
            units.append(unit)
        elif isinstance(stmt, ast.ClassDef):
            unit = _Unit(cell, stmt.name)
            now.nodes += [*stmt.decorator_list, *stmt.bases, *stmt.keywords]
            for item in stmt.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    unit.nodes += item.body
                    now.nodes += [*item.decorator_list, item.args]
                else:
                    now.nodes.append(item)              # a class body runs when the class is made
            units.append(unit)
        else:
            now.nodes.append(stmt)
    return units


class _Reader:
    def __init__(self, aliases: _Aliases, library: re.Pattern, defined: set[str], tick, modules: tuple[str, ...] = ()):
        self.aliases, self.library, self.defined, self.tick = aliases, library, defined, tick
        self.modules = modules

    def banned(self, path: str) -> str | None:
        """The path up to its first part that is a library version of this exercise (None: no part is)."""
        parts = path.split(".")
        hit = next((i for i, p in enumerate(parts) if self.library.search(p)), None)
        return None if hit is None else ".".join(parts[:hit + 1])

    def read(self, unit: _Unit):
        def flag(node, what):
            unit.flags.append(Finding(unit.cell, getattr(node, "lineno", 0), what))

        for top in unit.nodes:
            parents = _parents(top)
            for node in ast.walk(top):
                self.tick()
                parent = parents.get(node)
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    unit.uses.add(node.id)
                    builtin = node.id not in self.defined and self.aliases.path(node.id) is None
                    if node.id in DENIED_BUILTINS and builtin:
                        flag(node, f"uses {node.id}")
                    elif node.id in ("__builtins__", "__loader__", "__spec__"):
                        flag(node, f"uses {node.id}")
                    elif node.id == "getattr" and node.id not in self.defined and not (
                            isinstance(parent, ast.Call) and parent.func is node):
                        flag(node, "uses getattr as a value")
                if isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr.endswith("__") \
                        and node.attr not in DUNDERS:
                    flag(node, f"uses .{node.attr}")
                if isinstance(node, (ast.Name, ast.Attribute)):
                    self._path(node, parent, unit, flag)
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    if _dotted(node) and node.func.id not in self.defined:
                        self._path(node, parent, unit, flag)            # getattr(module, "constant")
                    self._call(node, unit, flag)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    self._import(node, unit, flag)

    def _import(self, node, unit: _Unit, flag):
        """An import binds names (their use is what counts), but one that names a library version is its use."""
        module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
        if isinstance(node, ast.ImportFrom):
            if node.level:
                flag(node, "a relative import")
            if any(a.name == "*" for a in node.names):
                flag(node, f"imports every name of {module} (from {module} import *)")
        for a in node.names:
            path = f"{module}.{a.name}" if module else a.name
            if a.name != "*" and (banned := self.banned(path)) is not None:
                unit.library.append(Finding(unit.cell, node.lineno, banned))

    def _path(self, node, parent, unit, flag):
        # only the longest chain counts: `a.b.c` is read once, not as `a.b` again
        if isinstance(parent, ast.Attribute) and parent.value is node and self.aliases.resolve(parent):
            return
        path = self.aliases.resolve(node)
        if not path:
            return
        line = getattr(node, "lineno", 0)
        if isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del)):
            if isinstance(node, ast.Attribute):
                flag(node, f"assigns into a library module ({path})")
            return
        if (banned := self.banned(path)) is not None:
            unit.library.append(Finding(unit.cell, line, banned))
        elif not allowed(path, self.modules):
            flag(node, f"uses {path}, outside the modules this course's code uses")
        elif _module_like(path) and _module_as_value(node, parent, self.aliases.class_level):
            flag(node, f"uses the module {path} as a value")

    def _call(self, node: ast.Call, unit: _Unit, flag):
        fname = node.func.id if isinstance(node.func, ast.Name) else ""
        if fname in self.defined or fname not in ("getattr", "setattr", "delattr", "hasattr") or len(node.args) < 2:
            return
        target = node.args[0]
        path = self.aliases.resolve(target)
        name = node.args[1].value if isinstance(node.args[1], ast.Constant) else None
        if isinstance(name, str):
            if name.startswith("__") and name.endswith("__") and name not in DUNDERS:
                flag(node, f"{fname}() of {name}")
            elif path and fname in ("setattr", "delattr"):
                flag(node, f"{fname}() on {path}")
            return
        if isinstance(target, ast.Name) and target.id in SELF:
            return                                     # the learner's own object: its own attributes
        if path and _module_like(path):
            flag(node, f"{fname}() on the module {path} with a name built while the code runs: the reading cannot "
                       f"tell what it reaches (allowed there: any public name but the library versions this "
                       f"exercise asks you to write)")
        else:
            flag(node, f"{fname}() with a name built while the code runs, on an object the reading cannot name")


def analyse(cells: list[dict], graded: set[str], library: str | None = None,
            deadline_s: float = DEADLINE_S, modules: tuple[str, ...] = ()) -> Report:
    """What each graded part reaches, read from the learner's `cells` ({"id", "source"}, setup cells included):
    `graded` are the contract names graded on their own; `library` the exercise's pattern of library versions;
    `modules` those the exercise allows beyond the course's (its suite's ALLOWED_MODULES)."""
    deadline = time.monotonic() + deadline_s
    count = [0]

    def tick():
        count[0] += 1
        if count[0] % 4096 == 0 and time.monotonic() > deadline:
            raise TooLarge

    report = Report()
    try:
        trees = {}
        for c in cells:
            try:
                trees[c["id"]] = ast.parse(c["source"])
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                trees[c["id"]] = ast.Module(body=[], type_ignores=[])
        aliases = _Aliases(list(trees.values()), tick)
        units = [u for cid, tree in trees.items() for u in _units(cid, tree)]
        defined = {u.name for u in units if u.name}
        reader = _Reader(aliases, re.compile(library or COURSE_LIBRARY), defined, tick, tuple(modules))
        for unit in units:
            reader.read(unit)
    except (TooLarge, RecursionError, MemoryError):
        report.too_large, report.steps = True, count[0]
        return report
    by_name: dict[str, _Unit] = {}
    for u in units:
        if u.name:
            by_name.setdefault(u.name, u)

    def reach(start: list[_Unit]) -> list[_Unit]:
        """The units `start` runs, and those they name, transitively, the graded parts aside."""
        seen, stack = {id(u) for u in start}, list(start)
        out = []
        while stack:
            u = stack.pop()
            out.append(u)
            for name in u.uses:
                v = by_name.get(name)
                if v is not None and id(v) not in seen and name not in graded:
                    seen.add(id(v))
                    stack.append(v)
        return out

    # What runs when the cells run (module level, class bodies, what they call) is no graded part's use: the worker
    # runs it under the policy's guards (autograder.inside.guard), which refuse at once what the policy does not
    # allow. Its findings are notes for the parts of its cell (every part's, for a cell that defines none).
    running = reach([u for u in units if u.name is None])
    homes = {by_name[p].cell for p in graded if p in by_name}
    for part in graded:
        home = by_name.get(part)
        own = reach([home]) if home is not None else []
        report.library[part] = _once([f for u in own for f in u.library])
        report.suspicious[part] = _once([f for u in own for f in u.flags])
        report.notes[part] = _once([f for u in running for f in (*u.library, *u.flags)
                                    if f.cell == (home.cell if home else part) or f.cell not in homes])
    report.steps = count[0]
    return report


def _once(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.cell, f.line, f.what)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
