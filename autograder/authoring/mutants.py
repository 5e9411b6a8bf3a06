"""Mutants of a reference part: its source with one mechanical change, the kind of slip a learner makes.

cosmic-ray's operators (a maintained mutation-testing library, on parso's syntax trees) change operators,
comparisons, unary operators, booleans, numbers (by one either way), `break`/`continue`, and loops (made to run
no iteration). The course's own operators, written against the same interface, make the slips of tensor code:
`DropCall` (a call replaced by its only argument, or a method such as `.float()`, `.tril()` dropped from a chain),
`DropKeyword` (`dtype=`, `device=`, `keepdim=`, `mask=` left out), `SwapArguments` (two neighbouring positional
arguments swapped), `InPlace` (`masked_fill` -> `masked_fill_`, `x = x + y` -> `x += y`), `SwapDtype` (float64 for
float32 and back), `FiniteInfinity` (`float("-inf")` -> `-1e9`), `OffByOne` (a bound of a `range` or a slice that
is not a literal moved by one); and two whole-function slips, as text: `LoopExitsEarly` (a `break` at the end of a
loop's body) and `CacheBySize` (the first answer kept for inputs of the same sizes, whatever the other arguments).

The learners' own slips (`LEARNER_OPERATORS`), seen in the blind corpus (examples/blind) and not made by edits of
the classic kind: `ViewForReshape` (`reshape` -> `view`), `Detach` and `Float32` (`.detach()`, `.float()` after a
step), and whole-function ones, as text: `NoGrad` (the body under `torch.no_grad()`), `LruCache` (a function cached
by its arguments), `InputAtEdge` (the first argument itself returned when it has one row), `PlainBuffer` (a buffer
kept as a plain attribute, which `.to()` does not move).
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

import parso
from cosmic_ray.mutating import MutationVisitor
from cosmic_ray.operators.operator import Example, Operator
from cosmic_ray.plugins import get_operator, operator_names


@dataclass(frozen=True)
class Mutant:
    cell: str               # the grade_id of the solution cell it changes
    operator: str
    occurrence: int
    source: str             # the cell's whole source, mutated
    line: int               # the first line that differs (1-based)
    before: str             # that line, before and after
    after: str

    @property
    def name(self) -> str:
        return f"{self.cell}:{self.operator}#{self.occurrence}"


def _expr(code: str, prefix: str):
    """A parso node for the expression `code`, with `prefix` (the whitespace before the node it replaces)."""
    node = parso.parse(code).children[0]
    node.get_first_leaf().prefix = prefix
    return node


def _text(node) -> str:
    return node.get_code(include_prefix=False)


def _call_trailers(node) -> list:
    return [c for c in getattr(node, "children", [])[1:] if c.type == "trailer"]


def _is_call(trailer) -> bool:
    return trailer.children[0].value == "("


def _args_of(trailer) -> list:
    """The argument nodes of a call trailer `( ... )`."""
    inner = trailer.children[1] if len(trailer.children) == 3 else None
    if inner is None:
        return []
    if inner.type == "arglist":
        return [c for c in inner.children if c.type != "operator"]
    return [inner]


def _keyword(arg) -> bool:
    return arg.type == "argument" and len(arg.children) == 3 and arg.children[1].value == "="


MODULES = ("torch", "math", "nn", "F", "np", "self", "torch.nn", "torch.nn.functional")


def _drop_call_options(node) -> list[str]:
    """The texts `node` may become: a call by its only argument, a chain without its last method."""
    kids = getattr(node, "children", [])
    if node.type not in ("atom_expr", "power") or kids[-1].type != "trailer" or not _is_call(kids[-1]):
        return []
    options = []
    args = _args_of(kids[-1])
    if len(args) == 1 and not _keyword(args[0]) and not _text(args[0]).startswith("*"):
        options.append(f"({_text(args[0])})")                              # f(x) -> x
    if len(kids) >= 3 and kids[-2].type == "trailer" and kids[-2].children[0].value == ".":
        rest = "".join(_text(c) for c in kids[:-2])
        if rest not in MODULES:
            options.append(rest)                                            # a.b(...) -> a
    return options


class DropCall(Operator):
    """A call replaced by its only argument, or the last method of a chain dropped."""

    def mutation_positions(self, node):
        for _ in _drop_call_options(node):
            yield (node.start_pos, node.end_pos)

    def mutate(self, node, index):
        return _expr(_drop_call_options(node)[index], node.get_first_leaf().prefix)

    @classmethod
    def examples(cls):
        return (Example("y = torch.relu(h)\n", "y = (h)\n"), Example("y = x.float()\n", "y = x\n"))


class DropKeyword(Operator):
    """One keyword argument of a call left out."""

    def mutation_positions(self, node):
        if node.type == "trailer" and _is_call(node):
            for arg in _args_of(node):
                if _keyword(arg):
                    yield (arg.start_pos, arg.end_pos)

    def mutate(self, node, index):
        args = _args_of(node)
        keywords = [a for a in args if _keyword(a)]
        kept = [_text(a) for a in args if a is not keywords[index]]
        return _expr(f"f({', '.join(kept)})", "").children[1]

    @classmethod
    def examples(cls):
        return (Example("torch.ones(2, dtype=x.dtype)\n", "torch.ones(2)\n"),)


class SwapArguments(Operator):
    """Two neighbouring positional arguments of a call swapped."""

    def mutation_positions(self, node):
        if node.type == "trailer" and _is_call(node):
            args = _args_of(node)
            for a, b in zip(args, args[1:]):
                if not _keyword(a) and not _keyword(b) and _text(a) != _text(b) \
                        and not _text(a).startswith("*") and not _text(b).startswith("*"):
                    yield (a.start_pos, b.end_pos)

    def mutate(self, node, index):
        args = _args_of(node)
        pairs = [i for i, (a, b) in enumerate(zip(args, args[1:]))
                 if not _keyword(a) and not _keyword(b) and _text(a) != _text(b)
                 and not _text(a).startswith("*") and not _text(b).startswith("*")]
        i = pairs[index]
        texts = [_text(a) for a in args]
        texts[i], texts[i + 1] = texts[i + 1], texts[i]
        return _expr(f"f({', '.join(texts)})", "").children[1]

    @classmethod
    def examples(cls):
        return (Example("x.view(B, H, dh)\n", "x.view(H, B, dh)\n"),)


IN_PLACE = {"masked_fill", "add", "sub", "mul", "div", "exp", "clamp", "tril", "triu", "relu", "sqrt", "neg", "abs",
            "pow", "transpose", "fill", "zero", "nan_to_num", "clamp_min", "unsqueeze", "squeeze"}


class InPlace(Operator):
    """An operation made in place: a method by its in-place twin, `x = x + y` by `x += y`."""

    def mutation_positions(self, node):
        if node.type == "trailer" and node.children[0].value == "." and node.children[1].value in IN_PLACE:
            nxt = node.get_next_sibling()
            if nxt is not None and nxt.type == "trailer" and _is_call(nxt):
                yield (node.start_pos, node.end_pos)
        if node.type == "expr_stmt" and len(node.children) == 3 and node.children[1].value == "=" \
                and node.children[0].type == "name" and node.children[2].type in ("arith_expr", "term") \
                and _text(node.children[2].children[0]) == node.children[0].value \
                and node.children[2].children[1].value in ("+", "-", "*", "/"):
            yield (node.start_pos, node.end_pos)

    def mutate(self, node, index):
        if node.type == "trailer":
            return _expr(f"x.{node.children[1].value}_", "").children[1]
        target, expr = node.children[0].value, node.children[2]
        op = expr.children[1].value
        rest = "".join(_text(c) if i == 0 else c.get_code() for i, c in enumerate(expr.children[2:]))
        if len(expr.children) > 3:
            rest = f"({rest})"
        prefix = node.get_first_leaf().prefix
        return _expr(f"{target} {op}= {rest}", prefix)

    @classmethod
    def examples(cls):
        return (Example("y = s.masked_fill(m, 0)\n", "y = s.masked_fill_(m, 0)\n"), Example("x = x + y\n", "x += y\n"))


class SwapDtype(Operator):
    """float64 for float32 and back, as a dtype or a cast."""

    SWAP = {"float64": "float32", "float32": "float64", "double": "float", "float": "double"}

    def mutation_positions(self, node):
        if node.type == "trailer" and node.children[0].value == "." and node.children[1].value in self.SWAP:
            yield (node.start_pos, node.end_pos)

    def mutate(self, node, index):
        return _expr(f"x.{self.SWAP[node.children[1].value]}", "").children[1]

    @classmethod
    def examples(cls):
        return (Example("torch.zeros(2, dtype=torch.float64)\n", "torch.zeros(2, dtype=torch.float32)\n"),)


class FiniteInfinity(Operator):
    """An infinity made a large finite number: `float("-inf")` -> `-1e9`."""

    def mutation_positions(self, node):
        if _infinity(node):
            yield (node.start_pos, node.end_pos)

    def mutate(self, node, index):
        return _expr("-1e9" if _infinity(node) < 0 else "1e9", node.get_first_leaf().prefix)

    @classmethod
    def examples(cls):
        return (Example('x = float("-inf")\n', "x = -1e9\n"),)


def _infinity(node) -> int:
    """The sign of the infinity `node` spells (-1 or 1), 0 when it spells none."""
    if node.type in ("atom_expr", "power"):
        text = _text(node).replace("'", '"').replace(" ", "")
        if text in ('float("-inf")', 'float("inf")', "math.inf", "torch.inf"):
            return -1 if "-" in text else 1
    return 0


class OffByOne(Operator):
    """A bound of a `range` or of a slice that is not a literal, moved by one either way."""

    def mutation_positions(self, node):
        for bound in _bounds(node):
            yield (bound.start_pos, bound.end_pos)
            yield (bound.start_pos, bound.end_pos)

    def mutate(self, node, index):
        bound = _bounds(node)[index // 2]
        new = _expr(f"({_text(bound)}) {'+' if index % 2 == 0 else '-'} 1", bound.get_first_leaf().prefix)
        parent = bound.parent
        parent.children[parent.children.index(bound)] = new
        new.parent = parent
        return node

    @classmethod
    def examples(cls):
        return (Example("range(0, n, b)\n", "range(0, (n) + 1, b)\n", occurrence=0),)


def _bounds(node) -> list:
    """The non-literal bounds `node` holds directly: a `range(...)` call's arguments, a slice's start and stop."""
    out = []
    if node.type in ("atom_expr", "power") and _text(node.children[0]) == "range" and len(node.children) == 2:
        out = [a for a in _args_of(node.children[1]) if not _keyword(a)]
    elif node.type == "subscript":
        out = [c for c in node.children if c.type != "operator" and c.type != "sliceop"]
    return [b for b in out if b.type != "number" and not (b.type == "factor" and b.children[1].type == "number")]


class ViewForReshape(Operator):
    """`reshape` written `view`, which fails on an argument that is not contiguous (a learner's slip)."""

    def mutation_positions(self, node):
        if node.type == "trailer" and node.children[0].value == "." and node.children[1].value == "reshape":
            yield (node.start_pos, node.end_pos)

    def mutate(self, node, index):
        return _expr("x.view", "").children[1]

    @classmethod
    def examples(cls):
        return (Example("y = x.reshape(B, L, H, dh)\n", "y = x.view(B, L, H, dh)\n"),)


class _AfterCall(Operator):
    """A method call appended to the result of a call of a module's function or of a tensor method."""

    SUFFIX = ""

    def mutation_positions(self, node):
        if node.type in ("atom_expr", "power") and _call_trailers(node) and _is_call(_call_trailers(node)[-1]) \
                and node.children[-1].type == "trailer":
            yield (node.start_pos, node.end_pos)

    def mutate(self, node, index):
        return _expr(f"({_text(node)}).{self.SUFFIX}()", node.get_first_leaf().prefix)


class Detach(_AfterCall):
    """A step's result detached from autograd's graph (`.detach()`): no gradient reaches what came before."""

    SUFFIX = "detach"

    @classmethod
    def examples(cls):
        return (Example("y = torch.relu(h)\n", "y = (torch.relu(h)).detach()\n"),)


class Float32(_AfterCall):
    """A step's result cast to float32 (`.float()`): a float32 intermediate in a float64 or half computation."""

    SUFFIX = "float"

    @classmethod
    def examples(cls):
        return (Example("w = torch.softmax(s, -1)\n", "w = (torch.softmax(s, -1)).float()\n"),)


COURSE_OPERATORS = {cls.__name__: cls for cls in (DropCall, DropKeyword, SwapArguments, InPlace, SwapDtype,
                                                   FiniteInfinity, OffByOne, ViewForReshape, Detach, Float32)}
# The operators that make the slips learners made in the blind corpus and the red teams' notebooks (examples/blind),
# which edits of the reference by the classic operators do not make: their mutants show promises the contract does
# not draw by itself (arguments not contiguous, fresh results, gradients, devices, low precision). The mutation
# score is reported with and without them.
LEARNER_OPERATORS = ("ViewForReshape", "Detach", "Float32", "NoGrad", "LruCache", "InputAtEdge", "PlainBuffer")
# cosmic-ray's operators that make random or meaningless changes here: variables replaced by random numbers, a
# decorator removed (the parts have none), the operator that changes nothing.
SKIPPED = ("VariableReplacer", "VariableInserter", "RemoveDecorator", "NoOp")
ARITHMETIC, BITWISE = {"Add", "Sub", "Mul", "Div", "FloorDiv", "Mod", "Pow"}, {"RShift", "LShift", "BitOr", "BitAnd",
                                                                                "BitXor"}


def library_operators() -> list[str]:
    """cosmic-ray's operators used here (binary operators only within their family: `+` becomes `-`, `*`, ..., never
    `>>`, which no learner writes for `+`)."""
    names = []
    for name in operator_names():
        short = name.split("/", 1)[-1]
        if short.startswith(SKIPPED):
            continue
        if short.startswith("ReplaceBinaryOperator_"):
            a, b = short.removeprefix("ReplaceBinaryOperator_").split("_")
            if not ({a, b} <= ARITHMETIC or {a, b} <= BITWISE):
                continue
        names.append(name)
    return names


SIZE_CACHE = """def _by_size(f, skip):
    memo = {}
    def cached(*a, **k):
        key = tuple(getattr(x, "shape", x) for x in a[skip:])
        if key not in memo:
            memo[key] = f(*a, **k)
        return memo[key]
    return cached


"""


def _whole_function_mutants(source: str) -> Iterator[tuple[str, str, int, str, str]]:
    """(operator, mutated source, line, the line before, after) of the slips that change a whole function."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    for loop in (n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While))):
        last = loop.body[-1]
        indent = " " * loop.body[0].col_offset
        end = last.end_lineno or last.lineno
        yield ("LoopExitsEarly", "".join(lines[:end] + [f"{indent}break\n"] + lines[end:]), end + 1, "",
               f"{indent.strip()}break  (at the end of the loop of line {loop.lineno})")
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        if fn.name == "__init__" or not fn.args.args:
            continue
        at = (fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno) - 1
        skip = int(fn.args.args[0].arg == "self")
        mutated = SIZE_CACHE + "".join(lines[:at] + [f"{' ' * fn.col_offset}@lambda f: _by_size(f, {skip})\n"]
                                       + lines[at:])
        yield ("CacheBySize", mutated, fn.lineno, lines[fn.lineno - 1].strip(),
               f"{fn.name} keeps its first answer for arguments of the same sizes")


def _learner_function_mutants(tree: ast.Module, lines: list[str]) -> Iterator[tuple[str, str, int, str, str]]:
    """Whole-function slips of learners: a body under torch.no_grad(), a function cached by its arguments
    (functools.lru_cache), the first argument itself returned at one position, a buffer kept as a plain attribute."""
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        if fn.name == "__init__" or not fn.args.args:
            continue
        first = fn.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and len(fn.body) > 1:
            first = fn.body[1]                                         # after the docstring
        at, end = first.lineno - 1, fn.body[-1].end_lineno or fn.body[-1].lineno
        indent = " " * first.col_offset
        body = ["    " + line if line.strip() else line for line in lines[at:end]]
        yield ("NoGrad", "".join(lines[:at] + [f"{indent}with torch.no_grad():\n"] + body + lines[end:]),
               first.lineno, lines[at].strip(), f"with torch.no_grad(): around the body of {fn.name}")
        top = (fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno) - 1
        if fn.col_offset == 0:
            yield ("LruCache", "".join(["import functools\n"] + lines[:top] + ["@functools.lru_cache(maxsize=None)\n"]
                                       + lines[top:]), fn.lineno, lines[fn.lineno - 1].strip(),
                   f"@functools.lru_cache on {fn.name}")
        args = [a.arg for a in fn.args.args if a.arg != "self"]
        if args:
            x = args[0]
            guard = (f"{indent}if getattr({x}, 'dim', lambda: 0)() >= 2 and {x}.shape[-2] == 1:\n"
                     f"{indent}    return {x}\n")
            yield ("InputAtEdge", "".join(lines[:at] + [guard] + lines[at:]), first.lineno, lines[at].strip(),
                   f"{fn.name} returns {x} itself when it has one row")
    source = "".join(lines)
    for stmt in (n for n in ast.walk(tree) if isinstance(n, ast.Expr)):
        call = stmt.value
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "register_buffer"
                and len(call.args) >= 2 and isinstance(call.args[0], ast.Constant)
                and isinstance(call.args[0].value, str)):
            i, end = stmt.lineno - 1, stmt.end_lineno or stmt.lineno
            name, value = call.args[0].value, ast.get_source_segment(source, call.args[1])
            pad = " " * stmt.col_offset
            yield ("PlainBuffer", "".join(lines[:i] + [f"{pad}self.{name} = {value}\n"] + lines[end:]), stmt.lineno,
                   lines[i].strip(), f"self.{name} = {value} (a plain attribute, not a buffer)")


def mutants(cell: str, source: str) -> list[Mutant]:
    """Every mutant of the cell `source` that compiles and differs from it."""
    out: list[Mutant] = []
    seen = {source}
    ops: list[tuple[str, Operator]] = [(n.split("/", 1)[-1], get_operator(n)()) for n in library_operators()]
    ops += [(name, cls()) for name, cls in COURSE_OPERATORS.items()]
    for name, op in ops:
        occurrence = 0
        while True:
            try:
                mutated = MutationVisitor.mutate_code(source, op, occurrence)
            except Exception:  # noqa: BLE001 - an operator that cannot apply here: no mutant
                mutated = None
            if mutated is None:
                break
            _keep(out, seen, cell, name, occurrence, source, mutated)
            occurrence += 1
    for i, (name, mutated, line, before, after) in enumerate(_whole_function_mutants(source)):
        _keep(out, seen, cell, name, i, source, mutated, (line, before, after))
    lines = source.splitlines(keepends=True)
    for i, (name, mutated, line, before, after) in enumerate(_learner_function_mutants(ast.parse(source), lines)):
        _keep(out, seen, cell, name, i, source, mutated, (line, before, after))
    return out


def _keep(out: list, seen: set, cell: str, name: str, occurrence: int, source: str, mutated: str,
          where: tuple[int, str, str] | None = None):
    if mutated in seen:
        return
    try:
        compile(mutated, cell, "exec")
    except (SyntaxError, ValueError):
        return
    seen.add(mutated)
    if where is None:
        old, new = source.splitlines(), mutated.splitlines()
        i = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        where = (i + 1, old[i].strip() if i < len(old) else "", new[i].strip() if i < len(new) else "")
    out.append(Mutant(cell, name, occurrence, mutated, *where))
