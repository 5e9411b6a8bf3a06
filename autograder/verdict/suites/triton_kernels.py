"""A learner's Triton kernels as data, for the suites of kernel exercises: read from the notebook's cells in the trusted
process (Python's `ast`), checked to be Triton the course's workers may run, and judged from what the course's
instruments measure (autograder.inside.kernels).

`read(cells)` takes from each cell only its `@triton.jit` functions and its constants (a name bound to a number), and
refuses a kernel that is not the Triton subset the course runs: names other than its own, its parameters, `tl`,
`triton`, `math`, the notebook's other kernels and constants and a few builtins; attributes other than the public
language's; no imports, nested functions, classes, lambdas, comprehensions, `with`, `try`, `global`. Triton's code
generator calls whatever Python a kernel names at compile time, and its interpreter runs the kernel's body as Python
outside the guards: what passes this reading can reach nothing but Triton's language, and a kernel that does not pass
never reaches a worker. `minimum_bytes` is what a tiling must move; `compile_problems` what a target does not allow.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field

# Builtins a kernel may name (Triton's code generator knows them; the interpreter runs them as Python).
BUILTINS = frozenset({"range", "min", "max", "float", "int", "abs", "len", "bool", "print", "isinstance"})
MODULES = frozenset({"tl", "triton", "math"})
TRITON = frozenset({"jit", "cdiv", "next_power_of_2", "language"})
# Attributes of values a kernel may not read: the interpreter's data and the compiler's handles behind a tensor.
HIDDEN = frozenset({"handle", "data", "to_ir", "from_ir", "fn", "keywords", "func", "args", "builder", "semantic",
                    "cache_key", "src", "run", "warmup", "type_id", "mangle"})
FORBIDDEN = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.With, ast.AsyncWith, ast.Try,
             ast.Global, ast.Nonlocal, ast.Await, ast.Yield, ast.YieldFrom, ast.Delete, ast.NamedExpr,
             ast.JoinedStr, ast.Starred, ast.Raise)
# Limits of the targets the kernels are compiled for: shared memory per block, with the opt-in (NVIDIA's CUDA C++
# Programming Guide, "Technical Specifications per Compute Capability": 163 KB for 8.0, 227 KB for 9.0).
SHARED_LIMIT = {"sm_80": 163 * 1024, "sm_90": 227 * 1024}
TARGETS = (("cuda", 80, 32), ("cuda", 90, 32))


def _language_names() -> tuple[frozenset, frozenset]:
    """(the public names of triton.language, of triton.language.math), from the installed Triton."""
    import triton.language as tl

    names = frozenset(n for n in dir(tl) if not n.startswith("_")) - {"core", "semantic", "standard"}
    return names, frozenset(n for n in dir(tl.math) if not n.startswith("_"))


@dataclass
class Kernel:
    name: str
    cell: str
    params: list[str]
    source: str                       # the function, its decorator included
    problems: list[str] = field(default_factory=list)
    unanswered: bool = False          # the release's stub: its body raises NotImplementedError


@dataclass
class Reading:
    kernels: dict[str, Kernel] = field(default_factory=dict)
    constants: dict[str, tuple[str, str]] = field(default_factory=dict)     # name -> (cell, source of the statement)
    values: dict[str, object] = field(default_factory=dict)                 # name -> its number

    def cells(self) -> list[dict]:
        """One cell per notebook cell that holds kernels or constants: its constants, then its kernels that pass
        the reading (a kernel that does not is left out: its name is not defined in a worker)."""
        by_cell: dict[str, list[str]] = {}
        for cell, text in self.constants.values():
            by_cell.setdefault(cell, []).append(text)
        for k in self.kernels.values():
            if not k.problems:
                by_cell.setdefault(k.cell, []).append(k.source)
        return [{"id": cell, "source": "\n\n\n".join(texts) + "\n"} for cell, texts in by_cell.items()]


def _jit(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Attribute) and d.attr == "jit" and isinstance(d.value, ast.Name)
               and d.value.id == "triton" for d in fn.decorator_list)


def _number(node) -> object | None:
    """The number a constant's value is: a literal, `tl.constexpr(literal)`, or a tuple of them."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "constexpr" \
            and len(node.args) == 1 and not node.keywords:
        node = node.args[0]
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    flat = value if isinstance(value, tuple) else (value,)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in flat):
        return value
    return None


def read(cells: list[dict]) -> Reading:
    """The kernels and constants of `cells` ({"id", "source"}), each kernel with what keeps it from running."""
    out = Reading()
    for cell in cells:
        try:
            tree = ast.parse(cell["source"])
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        lines = cell["source"].splitlines(True)
        for stmt in tree.body:
            if isinstance(stmt, ast.FunctionDef) and _jit(stmt):
                first = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
                text = "".join(lines[first - 1:stmt.end_lineno])
                params = [a.arg for a in (*stmt.args.posonlyargs, *stmt.args.args, *stmt.args.kwonlyargs)]
                out.kernels[stmt.name] = Kernel(stmt.name, cell["id"], params, text)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                names = [t for tgt in targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
                value = _number(stmt.value)
                if value is None or not all(isinstance(n, ast.Name) for n in names):
                    continue
                if isinstance(stmt, ast.AnnAssign) and not _constexpr_annotation(stmt.annotation):
                    continue
                text = "".join(lines[stmt.lineno - 1:stmt.end_lineno])
                for n in names:
                    out.constants[n.id] = (cell["id"], text)   # type: ignore[attr-defined]  # checked: Names
                values = value if len(names) > 1 and isinstance(value, tuple) else (value,) * len(names)
                if len(values) == len(names):
                    out.values.update({n.id: v for n, v in zip(names, values)})   # type: ignore[attr-defined]
    known = set(out.kernels) | set(out.constants)
    language, language_math = _language_names()
    for k in out.kernels.values():
        tree = ast.parse(k.source)
        fn = tree.body[0]
        assert isinstance(fn, ast.FunctionDef)
        k.problems = _problems(fn, known, language, language_math)
        k.unanswered = any(isinstance(node, ast.Raise) and _names(node.exc, "NotImplementedError")
                           for node in ast.walk(fn))
    return out


def _names(node, name: str) -> bool:
    """Whether `node` is the name `name` or a call of it."""
    node = node.func if isinstance(node, ast.Call) else node
    return isinstance(node, ast.Name) and node.id == name


def _constexpr_annotation(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "constexpr"


def _problems(fn: ast.FunctionDef, known: set[str], language: frozenset, language_math: frozenset) -> list[str]:
    """What in the kernel `fn` is not the Triton subset the course runs (empty: it may run)."""
    problems: list[str] = []

    def say(node, what: str):
        problems.append(f"line {getattr(node, 'lineno', '?')}: {what}")

    if len(fn.decorator_list) != 1:
        say(fn, "a kernel has one decorator, @triton.jit")
    args = fn.args
    if args.vararg or args.kwarg:
        say(fn, "a kernel takes named parameters only (no *args, **kwargs)")
    for a in (*args.posonlyargs, *args.args, *args.kwonlyargs):
        if a.annotation is not None and not _constexpr_annotation(a.annotation):
            say(a, f"the parameter {a.arg} is annotated with something other than tl.constexpr")
    for default in (*args.defaults, *args.kw_defaults):
        if default is not None and not isinstance(default, ast.Constant):
            say(default, "a parameter's default is a constant")
    local = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            local.add(node.id)
    names = local | known | MODULES | BUILTINS
    body = ast.Module(body=fn.body, type_ignores=[])
    for node in ast.walk(body):
        if isinstance(node, FORBIDDEN):
            say(node, f"{type(node).__name__} is not part of a Triton kernel")
        elif isinstance(node, ast.Name):
            if node.id.startswith("_") or node.id not in names:
                say(node, f"the name {node.id} is neither Triton's nor the kernel's")
        elif isinstance(node, ast.Attribute):
            problem = _attribute(node, language, language_math)
            if problem:
                say(node, problem)
        elif isinstance(node, ast.Constant) and isinstance(node.value, bytes):
            say(node, "bytes are not part of a Triton kernel")
    for default in fn.args.defaults:
        if isinstance(default, ast.Constant) and isinstance(default.value, (bytes, str)) \
                and len(str(default.value)) > 100:
            say(default, "a long string default")
    return problems


def _attribute(node: ast.Attribute, language: frozenset, language_math: frozenset) -> str | None:
    """Why a kernel may not read this attribute (None: it may)."""
    name = node.attr
    if name.startswith("_"):
        return f"the attribute {name}"
    base = node.value
    if isinstance(base, ast.Name) and base.id in MODULES:
        allowed = {"tl": language, "triton": TRITON, "math": frozenset(n for n in dir(math) if not n.startswith("_"))}
        return None if name in allowed[base.id] else f"{base.id}.{name} is not part of Triton's language"
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id in ("tl", "triton"):
        if base.value.id == "tl" and base.attr == "math":
            return None if name in language_math else f"tl.math.{name} is not part of Triton's language"
        if base.value.id == "triton" and base.attr == "language":
            return None if name in language else f"triton.language.{name} is not part of Triton's language"
        if base.value.id == "tl" and base.attr in language:
            return None if name not in HIDDEN else f"the attribute {name}"
        return f"{base.value.id}.{base.attr}.{name} is not part of Triton's language"
    return f"the attribute {name}" if name in HIDDEN else None


# -- what a tiling must move -------------------------------------------------------------------------------------
def minimum_bytes(B: int, H: int, Lq: int, Lk: int, d: int, size: int, block_m: int, block_n: int,
                  causal: bool) -> dict[str, int]:
    """The global-memory bytes a kernel with blocks of `block_m` queries and `block_n` keys needs at least, by
    argument: Q, O and the log-sum-exp once, K and V once per block of queries; with `causal`, only the key blocks on
    or below the diagonal of each query block (a key block is read whole, but past Lk)."""
    blocks = math.ceil(Lq / block_m)
    keys = 0
    for m in range(blocks):
        if causal:
            last = min((m + 1) * block_m, Lq) - 1             # the block's last query sees keys 0..last
            keys += min(Lk, (min(last, Lk - 1) // block_n + 1) * block_n)
        else:
            keys += Lk
    bh = B * H
    return {"Q": bh * Lq * d * size, "K": bh * keys * d * size, "V": bh * keys * d * size, "O": bh * Lq * d * size,
            "LSE": bh * Lq * 4}


def bytes_problems(counted: dict, minimum: dict[str, int]) -> list[str]:
    """What the counted bytes (autograder.inside.kernels.counted) show beyond the minimum of the tiling."""
    reads, writes = counted.get("reads", {}), counted.get("writes", {})
    problems = []
    for name in ("Q", "K", "V"):
        got = int(reads.get(name, 0))
        if got > minimum[name]:
            problems.append(f"it read {got:,} bytes of {name}, {got / minimum[name]:.2f} times the {minimum[name]:,} "
                            f"that its blocks need")
    for name in ("O", "LSE"):
        got = int(writes.get(name, 0))
        if got > minimum[name]:
            problems.append(f"it wrote {got:,} bytes of {name}, {got / minimum[name]:.2f} times its {minimum[name]:,} "
                            "bytes: each output is written once")
        if int(reads.get(name, 0)):
            problems.append(f"it read {int(reads[name]):,} bytes of {name}, an output: the running sums stay in "
                            "registers")
    for name in ("Q", "K", "V"):
        if int(writes.get(name, 0)):
            problems.append(f"it wrote {int(writes[name]):,} bytes into {name}, an input")
    for kind in ("reads", "writes"):
        got = int(counted.get(kind, {}).get("elsewhere", 0))
        if got:
            problems.append(f"it {'read' if kind == 'reads' else 'wrote'} {got:,} bytes outside the tensors it was "
                            "given")
    return problems


# Spills a thread may have whatever its blocks: a few words at the edge of the registers (ptxas gives a thread 255).
SPILL_FLOOR = 128


def spill_budget(block_n: int, head_dim: int, num_warps: int, size: int = 2) -> int:
    """The bytes of spill stores and loads a thread may have: SPILL_FLOOR, or a quarter of the bytes of K and V that
    each thread loads per block of keys when that is more (`block_n` keys of `head_dim` features of `size` bytes each,
    over 32 threads a warp). ptxas reports a thread's spills as the bytes of its spill instructions; were every one
    of them in the loop over key blocks, a quarter would add at most a quarter to the global-memory traffic of a loop
    step. Measured with Triton 3.9 on the course's kernel at d = 128 for sm_80 and sm_90, at each of the 64 BLOCK_M,
    BLOCK_N and NUM_WARPS the notebook allows (2 stages): 0 bytes at its own 64 x 64 blocks and 4 warps, as for the
    correct alternatives of examples/variants/; 8 to 72 bytes at six other choices and 212 at 32 x 128 with 2 warps,
    which this rule passes (44 choices in all); 324 bytes and more (up to 145,160) at the 20 where the blocks are too
    large for their warps (1 or 2 warps, or 128 x 64 and larger with 4), which it fails."""
    return max(SPILL_FLOOR, block_n * head_dim * 2 * size // (32 * num_warps) // 4)


def spills(f: dict) -> int | None:
    """A target's spill stores and loads, in bytes (None: ptxas did not say)."""
    if f.get("spill_stores") is None or f.get("spill_loads") is None:
        return None
    return int(f["spill_stores"]) + int(f["spill_loads"])


def compile_problems(facts: dict, block_m: int, block_n: int, head_dim: int, num_warps: int) -> list[str]:
    """What the compile facts of each target (autograder.inside.kernels.facts) do not allow."""
    problems = []
    tile = max(block_m * block_n, block_m * head_dim, block_n * head_dim)
    budget = spill_budget(block_n, head_dim, num_warps)
    for target, limit in SHARED_LIMIT.items():
        f = facts.get(target)
        if not isinstance(f, dict):
            problems.append(f"it was not compiled for {target}")
            continue
        if "error" in f:
            problems.append(f"it does not compile for {target}: {str(f['error'])[:600]}")
            continue
        if int(f.get("shared") or 0) > limit:
            problems.append(f"for {target} it needs {int(f['shared']):,} bytes of shared memory, more than the "
                            f"{limit:,} a block may have")
        spilled = spills(f)
        if spilled is None or spilled > budget:
            problems.append(f"for {target} its registers spill to local memory ({f.get('spill_stores')} bytes "
                            f"stored, {f.get('spill_loads')} loaded a thread, {f.get('registers')} registers; at "
                            f"most {budget} bytes of spills are allowed at these blocks and warps)")
        if int(f.get("largest_tile") or 0) > tile:
            problems.append(f"for {target} it holds a tile of {int(f['largest_tile']):,} elements, more than a block "
                            f"of scores or of queries ({tile:,}): a kernel never holds a row of the score matrix")
    return problems


def over_budget(facts: dict, block_n: int, head_dim: int, num_warps: int) -> list[str]:
    """The targets where these compile facts spill more than the budget (where they compiled)."""
    budget, out = spill_budget(block_n, head_dim, num_warps), []
    for target in SHARED_LIMIT:
        f = facts.get(target)
        if isinstance(f, dict) and "error" not in f:
            spilled = spills(f)
            if spilled is None or spilled > budget:
                out.append(target)
    return out
