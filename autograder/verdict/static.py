"""What a learner's code uses, read from its source in the trusted process (Python's `ast`).

A runtime watcher inside the learner's process cannot be sound: the learner's code can undo it.
The source can be read from outside, so library use is decided here:

- **Proven**: a name that an import binds, followed through attributes, `from ... import`, plain
  aliases (`G = torch.nn.functional`) and `getattr(module, "constant")`, that reaches a library
  version of what the course asks learners to write (any path component matching `LIBRARY`:
  `F.scaled_dot_product_attention`, `torch._C._nn.scaled_dot_product_attention`,
  `torch.native_layer_norm`, `torch.ops.aten.layer_norm`, `nn.LayerNorm`, `nn.MultiheadAttention`,
  `nn.TransformerEncoderLayer`, ...).  The part whose cell holds it scores 0.
- **Flagged** for the instructor (nbgrader's needs_manual_grade, with the reason): whatever the reading cannot
  resolve to something allowed: a module used as a value (passed, returned, stored anywhere but a plain alias,
  unpacked, a default), `getattr` other than called with a constant on a non-module, `vars`, `__dict__`, a string
  that names an operator or a library function, torch's operator registries (`torch._C`, `torch.ops`,
  `torch.library`), `__import__`, `importlib`, `eval`/`exec`, frames and function internals, `ctypes`,
  processes and signals, `/proc`, star imports, assignments into a library module.

All of a notebook's code is read, cells the learner added included; what a cell defines or imports carries its
findings to the cells that use it, except the other graded parts (each is graded on its own).
"""
from __future__ import annotations

import ast
import importlib
import re
import sys
import types
from dataclasses import dataclass, field

# What the notebooks name as the library versions of their parts (the rule itself is LIBRARY).
EXAMPLES = ("F.scaled_dot_product_attention", "nn.MultiheadAttention", "F.layer_norm", "nn.LayerNorm",
            "nn.TransformerEncoderLayer")
LIBRARY = re.compile(r"(?i)(attention|multihead|multi_head|(layer|group|instance|batch|rms)_?norm|transformer)")
SUSPICIOUS_MODULES = {"importlib", "ctypes", "cffi", "inspect", "gc", "pickle", "marshal", "subprocess",
                      "multiprocessing", "signal", "builtins", "operator", "types", "code", "codeop", "runpy",
                      "pty", "mmap", "resource", "faulthandler", "sysconfig", "site", "dis"}
SUSPICIOUS_CALLS = {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "breakpoint"}
SUSPICIOUS_ATTRS = {"f_globals", "f_locals", "f_back", "f_code", "f_builtins", "gi_frame", "tb_frame", "cr_frame",
                    "__globals__", "__code__", "__closure__", "__builtins__", "__subclasses__", "__getattribute__",
                    "__import__", "__loader__", "__spec__", "__self__", "__dict__"}
# The libraries whose names the reading looks up (imported in the trusted process when first needed).
LOOKED_UP = ("torch", "numpy", "math")
# Where torch looks operators up by name, or registers new ones: a route the reading cannot follow.
REGISTRIES = ("torch._C", "torch._ops", "torch.ops", "torch.library", "torch.utils.cpp_extension")
# A string that names an operator (`aten::layer_norm`) or is a library function's name.
OPERATOR_NAME = re.compile(r"^[A-Za-z_][\w.]*(::[\w.]+)+$")
NAME_LIKE = re.compile(r"^[A-Za-z_][\w.]*$")
SUSPICIOUS_PATHS = {"sys.modules", "sys._getframe", "sys.settrace", "sys.setprofile", "sys.addaudithook",
                    "sys.meta_path", "sys.path_hooks",
                    "os.fork", "os.forkpty", "os.kill", "os.killpg", "os.system", "os.popen", "os.posix_spawn",
                    "os.posix_spawnp", "os.dup2", "os.setsid", "os.unshare", "os.register_at_fork",
                    "os.environ", "os.open", "os.write", "os.read"}
SUSPICIOUS_PREFIXES = ("os.exec", "os.spawn", "os.wait")


@dataclass
class Finding:
    cell: str
    line: int
    what: str

    def where(self) -> str:
        return f"cell {self.cell}, line {self.line}"


@dataclass
class Report:
    """Per solution cell: the library versions it uses and the constructs to flag."""

    library: dict[str, list[Finding]] = field(default_factory=dict)
    suspicious: dict[str, list[Finding]] = field(default_factory=dict)


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
    """Names bound to imported modules or their members, over all cells (flow-insensitive)."""

    def __init__(self, trees: list[ast.AST]):
        self.names: dict[str, str] = {}
        changed = True
        while changed:
            changed = False
            for tree in trees:
                for node in ast.walk(tree):
                    for name, path in self._binds(node):
                        if path and self.names.get(name) != path:
                            self.names[name] = path
                            changed = True

    def _binds(self, node):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield (a.asname, a.name) if a.asname else (a.name.split(".")[0], a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    yield a.asname or a.name, f"{node.module}.{a.name}"
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            path = self.resolve(node.value)
            for t in targets:
                if isinstance(t, ast.Name):
                    yield t.id, path

    def resolve(self, node) -> str | None:
        parts = _dotted(node)
        if not parts or parts[0] not in self.names:
            return None
        return ".".join([self.names[parts[0]], *parts[1:]])


def _library_path(path: str) -> bool:
    return any(LIBRARY.search(p) for p in path.split("."))


def _module_like(path: str) -> bool:
    """Whether `path` names a module (or one of torch's operator namespaces), as far as the trusted process can tell
    without importing anything: a path it cannot look up is a module when it is a bare name."""
    parts = path.split(".")
    if parts[0] in LOOKED_UP and parts[0] not in sys.modules:
        importlib.import_module(parts[0])
    obj = sys.modules.get(parts[0])
    if obj is None:
        return len(parts) == 1
    for name in parts[1:]:
        try:
            obj = getattr(obj, name)
        except Exception:  # noqa: BLE001 - a path the reading cannot follow: not known to be a module
            return False
    return isinstance(obj, types.ModuleType) or type(obj).__module__ == "torch._ops"


def _parents(tree: ast.AST) -> dict:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _module_as_value(node, parent, scope) -> bool:
    """Whether a module-naming expression `node` is used as a value: anything but an attribute's base, a call's
    function, the first argument of getattr/hasattr, or the whole right side of a plain alias `name = module` (not
    in a class's body, where the name is an attribute the reading does not follow)."""
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return False
    if isinstance(parent, ast.Call) and (parent.func is node or (
            isinstance(parent.func, ast.Name) and parent.func.id in ("getattr", "hasattr") and parent.args
            and parent.args[0] is node)):
        return False
    if isinstance(parent, ast.Assign) and parent.value is node and all(isinstance(t, ast.Name) for t in parent.targets):
        return isinstance(scope, ast.ClassDef)
    return not isinstance(parent, ast.Expr)


def _plain_object(node) -> bool:
    """`self` or `cls`: an object of the learner's own (getattr with a computed name on it stays in its code)."""
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _scan(tree: ast.AST, aliases: _Aliases, cell: str) -> tuple[list[Finding], list[Finding]]:
    library, suspicious = [], []

    def flag(node, what):
        suspicious.append(Finding(cell, getattr(node, "lineno", 0), what))

    parents = _parents(tree)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(getattr(node, "ctx", None), ast.Load):
            path = aliases.resolve(node)
            parent = parents.get(node)
            is_getattr = isinstance(node, ast.Name) and node.id == "getattr" and node.id not in aliases.names
            if is_getattr and not (isinstance(parent, ast.Call) and parent.func is node):
                flag(node, "uses getattr as a value")
            if path and _module_like(path) and _module_as_value(node, parent, parents.get(parent)):
                flag(node, f"uses the module {path} as a value")
            if path and path.startswith(REGISTRIES) and not _library_path(path) and not (
                    isinstance(parent, ast.Attribute) and aliases.resolve(parent)):
                flag(node, f"uses torch's operator registry ({path})")
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if _library_path(a.name):
                    library.append(Finding(cell, line, a.name))
                if top in SUSPICIOUS_MODULES:
                    flag(node, f"imports {a.name}")
                if a.name.startswith(REGISTRIES) and not _library_path(a.name):
                    flag(node, f"imports torch's operator registry ({a.name})")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                flag(node, "a relative import")
            if module.split(".")[0] in SUSPICIOUS_MODULES:
                flag(node, f"imports from {module}")
            for a in node.names:
                if f"{module}.{a.name}".startswith(REGISTRIES) and not _library_path(f"{module}.{a.name}"):
                    flag(node, f"imports from torch's operator registry ({module}.{a.name})")
                if a.name == "*":
                    flag(node, f"imports every name of {module} (from {module} import *)")
                elif _library_path(f"{module}.{a.name}"):
                    library.append(Finding(cell, line, f"{module}.{a.name}"))
        elif isinstance(node, (ast.Attribute, ast.Call)) or isinstance(node, ast.Name):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                fname = node.func.id
                if fname in SUSPICIOUS_CALLS and fname not in aliases.names:
                    flag(node, f"calls {fname}()")
                if fname in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2:
                    target = aliases.resolve(node.args[0])
                    name = node.args[1].value if isinstance(node.args[1], ast.Constant) else None
                    constant = isinstance(name, str)
                    if target and (fname in ("setattr", "delattr") or not constant):
                        flag(node, f"{fname}() on {target}" + ("" if constant else " with a computed name"))
                    elif target and fname == "getattr":
                        if _library_path(f"{target}.{name!s}"):
                            library.append(Finding(cell, line, f"{target}.{name!s}"))
                        elif _module_like(target):
                            flag(node, f"getattr() on the module {target}")
                    elif not target and fname == "getattr" and not constant and not _plain_object(node.args[0]):
                        flag(node, "getattr() with a computed name on an object the reading cannot name")
                continue
            if isinstance(node, ast.Attribute):
                if node.attr in SUSPICIOUS_ATTRS:
                    flag(node, f"uses .{node.attr}")
                path = aliases.resolve(node)
                if path:
                    if _library_path(path):
                        library.append(Finding(cell, line, path))
                    if path in SUSPICIOUS_PATHS or path.startswith(SUSPICIOUS_PREFIXES):
                        flag(node, f"uses {path}")
                    if node.attr.startswith("__") and node.attr.endswith("__") and node.attr != "__name__":
                        flag(node, f"uses {path}")
                    if isinstance(node.ctx, (ast.Store, ast.Del)):
                        flag(node, f"assigns into a library module ({path})")
            elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
                flag(node, f"uses {node.id}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.strip()
            if "/proc" in text:
                flag(node, "names a /proc file")
            elif OPERATOR_NAME.match(text):
                flag(node, f"names the operator {text[:80]!r} in a string")
            elif NAME_LIKE.match(text) and _library_path(text):
                flag(node, f"names {text[:80]!r}, a library version of an exercise, in a string")
    return _shortest(library), _shortest(suspicious)


def _shortest(findings: list[Finding]) -> list[Finding]:
    """Each finding once; of `a.b` and `a.b.c` on one line (one expression), only `a.b`."""
    keys = {(f.line, f.what) for f in findings}
    seen, out = set(), []
    for f in findings:
        parts = f.what.split(".")
        shorter = any((f.line, ".".join(parts[:i])) in keys for i in range(1, len(parts)))
        if not shorter and (f.line, f.what) not in seen:
            seen.add((f.line, f.what))
            out.append(f)
    return out


def _defined(tree: ast.AST) -> set[str]:
    """The names a cell binds at its top level: definitions, assignments and imports."""
    names = set()
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name != "*"}
    return names


def _used(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def analyse(cells: list[dict], graded: set[str]) -> Report:
    """Findings per cell id for the learner's `cells` ({"id", "source"}, setup cells included).

    `graded` are the contract names graded on their own: a cell that uses another graded part does not
    inherit that part's findings; it does inherit those of any other name (a helper, an ungraded part
    pasted from an earlier exercise) defined in a cell with findings."""
    trees = {}
    for c in cells:
        try:
            trees[c["id"]] = ast.parse(c["source"])
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            trees[c["id"]] = ast.Module(body=[], type_ignores=[])
    aliases = _Aliases(list(trees.values()))
    report = Report()
    for cid, tree in trees.items():
        report.library[cid], report.suspicious[cid] = _scan(tree, aliases, cid)
    defined = {cid: _defined(t) for cid, t in trees.items()}
    used = {cid: _used(t) for cid, t in trees.items()}
    changed = True
    while changed:
        changed = False
        for cid in trees:
            for other in trees:
                if other == cid or not (used[cid] & (defined[other] - graded)):
                    continue
                for kind in (report.library, report.suspicious):
                    new = [f for f in kind[other] if f not in kind[cid]]
                    if new:
                        kind[cid] += new
                        changed = True
    return report
