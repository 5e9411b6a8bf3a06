"""Trace a module to plain data: torch.export down to ATen operations grouped by the module calls they run in, and
autograd's backward graph mapped back onto them. Runs where the model is: the sandboxed worker (this package is
copied into the sandbox), the trusted side for the course's own modules, the book, the command line.

Why `torch.export` and not `torch.fx.symbolic_trace`: fx's proxies cannot pass through Python that reads a shape
(`B, T = tokens.shape`), which the course's own models do; export runs that code with concrete shapes and fails only
where control flow depends on a tensor's values, which is what "cannot be traced" should mean (the answer is then
a dict with an "error" note, never an exception). Imports only torch and the standard library."""
from __future__ import annotations

import contextlib
import io
import logging
import re
import traceback
import warnings
from collections import deque
from pathlib import Path

FORMAT = "course-graph/1"
MAX_NODES, MAX_STR = 20_000, 300          # nodes of a backward graph; a string
# Sizes of the example inputs, all distinct so that every size in a shape can be named.
SIZES = dict(B=2, L=7, d_model=24, n_heads=3, d_head=8, d_ff=40, vocab_size=23, max_len=32, n_layers=2)
# Contract name -> (constructor arguments, constructor keywords, example inputs: x, mask, tokens).
EXAMPLES = {
    "LayerNorm": (("d_model",), {}, ("x",)),
    "FeedForward": (("d_model", "d_ff"), {}, ("x",)),
    "MultiHeadAttention": (("d_model", "n_heads"), {}, ("x", "mask")),
    "TransformerBlock": (("d_model", "n_heads", "d_ff"), {"norm_first": True}, ("x", "mask")),
    "TinyTransformer": (("vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "max_len"), {"norm_first": True},
                        ("tokens",)),
}


# --- tracing (runs where the model is: the sandboxed worker, the book, the CLI) ------------------------------------

def trace(module, *example_inputs, **kwargs) -> dict:
    """The forward and backward graph of module(*example_inputs, **kwargs) as plain data, or {"error": ...}."""
    import torch

    root = {"format": FORMAT, "root": type(module).__name__}
    try:
        with _quiet():
            ep = torch.export.export(module, tuple(example_inputs), dict(kwargs), strict=False)
    except Exception as e:  # noqa: BLE001 - the learner's forward, whatever it raises, is reported, never re-raised
        return {**root, "error": _why(e)}
    g = {**root, **_forward(ep, module)}
    try:
        with _quiet():
            g["backward"] = _backward(ep, module, example_inputs, kwargs, g)
    except Exception as e:  # noqa: BLE001 - the learner's backward too: reported, never re-raised
        g["backward"] = {"error": f"no backward graph: {type(e).__name__}: {str(e)[:MAX_STR]}"}
    return g


def example(name: str, **overrides):
    """(constructor args, constructor kwargs, forward args, forward kwargs) of the default example for a contract
    name."""
    import torch

    if name not in EXAMPLES:
        raise KeyError(f"no default example for {name!r}; known: {', '.join(EXAMPLES)}")
    names, kw, inputs = EXAMPLES[name]
    s = SIZES
    sizes = {k: overrides.pop(k) for k in list(overrides) if k in names}
    args = [sizes.get(n, s[n]) for n in names]
    kw = {**kw, **overrides}
    L, d = s["L"], sizes.get("d_model", s["d_model"])
    g = torch.Generator().manual_seed(0)
    made = {"x": torch.randn(s["B"], L, d, generator=g),
            "mask": torch.ones(L, L, dtype=torch.bool).tril(),                                  # (L, L), causal
            "tokens": torch.randint(0, sizes.get("vocab_size", s["vocab_size"]), (s["B"], L), generator=g)}
    fargs = tuple(made[i] for i in inputs if i != "mask")
    fkw = {"mask": made["mask"]} if "mask" in inputs else {}
    return args, kw, fargs, fkw


def trace_named(namespace: dict, name: str, **overrides) -> dict:
    """Build namespace[name] with the default example's arguments (overrides win) and trace it."""
    import torch

    args, kw, fargs, fkw = example(name, **overrides)
    try:
        torch.manual_seed(0)
        module = namespace[name](*args, **kw)
    except Exception as e:  # noqa: BLE001 - the learner's constructor, whatever it raises, is reported
        return {"format": FORMAT, "root": name, "error": f"{name}({', '.join(map(str, args))}) raised "
                                                         f"{type(e).__name__}: {str(e)[:MAX_STR]}"}
    return trace(module, *fargs, **fkw)


def without_code(g: dict) -> dict:
    """The graph without the source line of each operation: how the course's own code is drawn, for the book's readers
    and beside a learner's graph in their feedback (its lines are the solutions' own)."""
    def strip(part):
        if isinstance(part, dict) and isinstance(part.get("nodes"), list):
            part = {**part, "nodes": [{k: v for k, v in n.items() if k != "code"} for n in part["nodes"]]}
        return part

    out = strip(g)
    if "backward" in g:
        out["backward"] = strip(g["backward"])
    return out


@contextlib.contextmanager
def _quiet():
    """Silence what torch.export logs and warns while it traces."""
    log = logging.getLogger("torch")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        log.setLevel(level)


def _why(e: BaseException) -> str:
    """A note a learner can act on, for a forward that cannot be traced."""
    text = str(e)
    where = _user_frame(e)
    if "data-dependent" in text or "GuardOnDataDependent" in type(e).__name__:
        note = ("the graph cannot be traced: forward decides something from the values in a tensor (an `if` or "
                "`while` on a tensor, `.item()`, `.tolist()`), so its operations depend on the data; decide from "
                "shapes and arguments only")
    else:
        first = next((line for line in text.splitlines() if line.strip()), "")
        note = f"the graph cannot be traced: forward raised {type(e).__name__}: {first[:200]}"
    return note + (f" (at {where})" if where else "")


def _user_frame(e: BaseException) -> str:
    """The last frame of the traceback outside torch and this module: file name, line and code."""
    import torch

    skip = (str(Path(torch.__file__).parent), __file__, str(Path(contextlib.__file__).parent))
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith(skip)]
    if not frames:
        return ""
    f = frames[-1]
    code = f" `{f.line.strip()[:120]}`" if f.line else ""
    return f"{Path(f.filename).name}, line {f.lineno}{code}"


def _forward(ep, module) -> dict:
    """Nodes (one per operation, input, parameter), edges in argument order, and the module calls as groups."""
    import torch
    from torch.export.graph_signature import InputKind

    specs = {s.arg.name: s for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")}
    kinds = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer", InputKind.CONSTANT_TENSOR: "constant"}
    canon: dict[int, str] = {}
    for path, m in module.named_modules(remove_duplicate=False):
        canon.setdefault(id(m), path)
    groups = {"": _group_entry("", "", type(module), None, "")}
    nodes, edges, inputs, outputs = [], [], [], []
    for n in ep.graph.nodes:
        if n.op == "call_function" and _op_name(n.target).startswith("_assert"):
            continue                                 # export's own checks of shapes and dtypes, not the model's
        node = {"id": n.name, "kind": "call", "op": _op_name(n.target), "target": str(n.target)[:MAX_STR], "group": ""}
        if n.op == "placeholder":
            spec = specs.get(n.name)
            node["kind"] = kinds.get(spec.kind, "input") if spec else "input"
            node["op"] = node["kind"]
            node["target"] = (spec.target if spec is not None and spec.target else n.name)[:MAX_STR]
            if node["kind"] == "input":
                inputs.append(n.name)
        elif n.op == "output":
            node.update(kind="output", op="output", target="output")
            outputs = [a.name for a in n.all_input_nodes]
        else:
            node["group"] = _group_of(n, groups, module, canon)
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            try:
                node["shape"] = [int(s) for s in val.shape]
            except (TypeError, ValueError):
                node["shape"] = None
            node["dtype"] = str(val.dtype).removeprefix("torch.")
        args = _args_text(n)
        if args:
            node["args"] = args
        code = _code_line(n.meta.get("stack_trace"))
        if code:
            node["code"] = code
        nodes.append(node)
        edges += [[a.name, n.name] for a in _node_args(n)]
    first_user: dict[str, str] = {}
    for src, dst in edges:
        first_user.setdefault(src, dst)
    by_id = {node["id"]: node for node in nodes}
    for node in nodes:                               # a parameter belongs to the module call that first uses it
        if node["kind"] in ("parameter", "buffer", "constant") and node["id"] in first_user:
            node["group"] = by_id[first_user[node["id"]]]["group"]
    return {"inputs": inputs, "outputs": outputs, "groups": list(groups.values()), "nodes": nodes, "edges": edges}


def _group_entry(gid, path, cls, parent, canonical):
    qual = cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
    return {"id": gid, "path": path, "type": qual.rsplit(".", 1)[-1][:MAX_STR], "qualname": qual[:MAX_STR],
            "library": qual.startswith("torch."), "parent": parent, "module": canonical}


def _group_of(n, groups, module, canon) -> str:
    """The id of the innermost module call node n runs in ("" for the traced module; "path@k" for a k-th call)."""
    parent = ""
    for key, value in (n.meta.get("nn_module_stack") or {}).items():
        path, cls = value[0], value[1]
        call = key.rsplit("@", 1)[1] if "@" in key and key.rsplit("@", 1)[1].isdigit() else ""
        gid = f"{path}@{call}" if call else path
        if gid and gid not in groups:
            try:
                canonical = canon.get(id(module.get_submodule(path)), path)
            except AttributeError:
                canonical = path
            groups[gid] = _group_entry(gid, path, cls, parent, canonical)
        parent = gid or parent
    return parent


def _op_name(target) -> str:
    packet = getattr(target, "overloadpacket", None)
    return str(getattr(packet, "__name__", None) or getattr(target, "__name__", None) or target)[:60]


def _node_args(n):
    import torch.fx

    found = []
    torch.fx.node.map_arg((n.args, n.kwargs), lambda a: found.append(a))
    return found


def _args_text(n) -> str:
    """The arguments of an operation that are not tensors, e.g. `1, 2` for transpose or `-inf` for masked_fill."""
    import torch.fx

    def short(a):
        if isinstance(a, (list, tuple)):
            return "[" + ", ".join(short(x) for x in a) + "]"
        if isinstance(a, float):
            return "-inf" if a == float("-inf") else "inf" if a == float("inf") else f"{a:.4g}"
        return str(a).removeprefix("torch.")

    def has_node(a):
        found = []
        torch.fx.node.map_arg(a, lambda x: found.append(x))
        return bool(found)

    if n.op != "call_function":
        return ""
    parts = [short(a) for a in n.args if not has_node(a)]
    parts += [f"{k}={short(v)}" for k, v in n.kwargs.items() if not has_node(v) and v is not None]
    return ", ".join(parts)[:120]


def _code_line(stack: str | None) -> str:
    """The model's own line of source that made a node (the last frame of its stack trace outside torch)."""
    import torch

    lib = str(Path(torch.__file__).parent)
    frames = re.findall(r'File "([^"]*)", line \d+, in [^\n]*\n([^\n]*)', stack or "")
    mine = [code.strip() for path, code in frames if not path.startswith(lib) and not code.strip().startswith("File ")]
    return mine[-1][:160] if mine else ""


def _backward(ep, module, inputs, kwargs, g) -> dict:
    """autograd's graph for one run of the exported graph: grad_fn nodes, each with the forward node that made it."""
    import torch
    from torch.export.graph_signature import InputKind
    from torch.utils._pytree import tree_flatten

    state = dict(module.named_parameters(remove_duplicate=False))
    state.update(module.named_buffers(remove_duplicate=False))

    def run(leaf_inputs: bool):
        user = iter(tree_flatten((tuple(inputs), dict(kwargs)))[0])
        flat, leaves, made = [], {}, {}
        for spec in ep.graph_signature.input_specs:
            if spec.kind == InputKind.PARAMETER:
                t = state[spec.target].detach().clone().requires_grad_(True)
            elif spec.kind == InputKind.BUFFER:
                t = state[spec.target].detach().clone()
            elif spec.kind == InputKind.CONSTANT_TENSOR:
                t = ep.constants[spec.target]
            elif spec.kind == InputKind.USER_INPUT:
                t = next(user)
                if isinstance(t, torch.Tensor):
                    t = t.detach().clone()
                    if t.is_floating_point():
                        t.requires_grad_(True)
                        if not leaf_inputs:          # an in-place update of an input needs a non-leaf tensor
                            leaves[id(t)] = spec.arg.name
                            t = t.clone()
                            made[t.grad_fn] = spec.arg.name
            else:
                raise ValueError(f"an input of kind {spec.kind.name}")
            if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is None:
                leaves[id(t)] = spec.arg.name
            flat.append(t)

        class Recorder(torch.fx.Interpreter):
            def run_node(self, n):
                out = super().run_node(n)
                for t in tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor) and t.grad_fn is not None and t.grad_fn not in made:
                        made[t.grad_fn] = n.name
                return out

        with torch.enable_grad():
            out = Recorder(ep.graph_module).run(*flat)
        return out, flat, leaves, made

    try:
        out, flat, leaves, made = run(True)
    except RuntimeError:
        out, flat, leaves, made = run(False)
    fwd = {n["id"]: n for n in g["nodes"]}
    roots = [t.grad_fn for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    ids: dict
    nodes: list[dict]
    queue: deque
    ids, nodes, edges, queue = {}, [], [], deque()

    def visit(fn, group):
        if fn in ids:
            return ids[fn]
        if len(nodes) >= MAX_NODES:
            raise ValueError(f"more than {MAX_NODES} backward nodes")
        name = made.get(fn)
        if name is None and hasattr(fn, "variable"):
            name = leaves.get(id(fn.variable))
        f = fwd.get(name, {})
        node = {"id": f"g{len(nodes)}", "kind": "grad", "op": type(fn).__name__[:60], "forward": name,
                "group": f.get("group", group), "shape": f.get("shape"), "dtype": f.get("dtype")}
        ids[fn] = node["id"]
        nodes.append(node)
        queue.append((fn, node))
        return node["id"]

    for r in roots:
        visit(r, "")
    while queue:
        fn, node = queue.popleft()
        for nxt, _ in fn.next_functions:
            if nxt is not None:
                edges.append([node["id"], visit(nxt, node["group"])])
    return {"nodes": nodes, "edges": edges, "roots": [ids[r] for r in roots]}
