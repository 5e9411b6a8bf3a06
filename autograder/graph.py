"""The network as a graph: trace a module to plain data, name how two structures differ, draw them.

`trace` exports the module with `torch.export` (non-strict) down to ATen operations, each tagged with the module
call it runs in (its `nn_module_stack`), with the shape and dtype of every tensor; the backward graph is autograd's
own: the exported graph runs once on real tensors and every `grad_fn` is mapped back to the node that made it.
Why `torch.export` and not `torch.fx.symbolic_trace`: fx's proxies cannot pass through Python that reads a shape
(`B, T = tokens.shape; assert T <= max_len`, `math.sqrt(q.shape[-1])`), which the course's own models do; export
runs that code with concrete shapes and fails only where control flow depends on a tensor's values, which is what
"cannot be traced" should mean (and the answer is then a dict with an "error" note, never an exception).

`differences` and `side_by_side_html` treat a graph as untrusted data (a learner's sandbox made it): types and sizes
are checked, counts and lengths capped, labels escaped. Drawing goes through Graphviz's `dot` (`make` installs it).

This module imports only torch and the standard library at its top, so that the sandboxed worker can use a copy.

The command line, for an instructor or a learner on their own machine (not the grader: a notebook's code runs
unsandboxed there, in a separate process):
    python -m autograder.graph exercises/residual/residual.ipynb TransformerBlock --out block.svg
    python -m autograder.graph transformer TinyTransformer --backward --out backward.svg    (the course's reference)
"""
from __future__ import annotations

import argparse
import contextlib
import html
import io
import json
import logging
import re
import subprocess
import sys
import traceback
import warnings
from collections import deque
from pathlib import Path

FORMAT = "course-graph/1"
MAX_NODES, MAX_EDGES, MAX_GROUPS = 20_000, 80_000, 5_000   # what a graph read from data may hold
MAX_STR, MAX_DIFFS, MAX_DRAWN = 300, 20, 1_500              # a string, the differences named, nodes drawn
MAX_BLOCKS = 64                                             # blocks compared
DOT_TIMEOUT = 120.0

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

ROLES = {
    "block": {"TransformerBlock", "TransformerEncoderLayer", "TransformerDecoderLayer", "Block", "DecoderBlock"},
    "attention": {"MultiHeadAttention", "MultiheadAttention", "SelfAttention", "CausalSelfAttention", "Attention"},
    "ff": {"FeedForward", "MLP", "FFN", "PositionwiseFeedForward"},
    "norm": {"LayerNorm", "RMSNorm"},
    "embedding": {"Embedding"},
    "dropout": {"Dropout", "Identity"},
}
PASS = {"dropout", "clone", "contiguous", "alias", "detach", "_to_copy", "to", "type_as", "lift_fresh_copy"}
ACTS = {"relu", "gelu", "silu", "tanh", "sigmoid", "leaky_relu", "elu", "selu", "celu", "softplus", "mish", "relu6",
        "hardtanh", "glu"}
ADDS = {"add", "add_"}
SUBLAYER = {"attention": "attention", "ff": "feed-forward"}
COLORS = {"stream": "#fde9c9", "branch": "#cfe3f7", "mask": "#e6e6e6", "hit": "#ffb3b3", "group": "#f6f6f6"}


# --- tracing (runs where the model is: the sandboxed worker, the book, the CLI) ------------------------------------

def trace(module, *example_inputs, **kwargs) -> dict:
    """The forward and backward graph of module(*example_inputs, **kwargs) as plain data, or {"error": ...}."""
    import torch

    root = {"format": FORMAT, "root": type(module).__name__}
    try:
        with _quiet():
            ep = torch.export.export(module, tuple(example_inputs), dict(kwargs), strict=False)
    except Exception as e:  # the learner's forward, whatever it raises, is reported, never re-raised
        return {**root, "error": _why(e)}
    g = {**root, **_forward(ep, module)}
    try:
        with _quiet():
            g["backward"] = _backward(ep, module, example_inputs, kwargs, g)
    except Exception as e:
        g["backward"] = {"error": f"no backward graph: {type(e).__name__}: {str(e)[:MAX_STR]}"}
    return g


def example(name: str, **overrides):
    """(constructor args, constructor kwargs, forward args, forward kwargs) of the default example for a contract name."""
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
    except Exception as e:
        return {"format": FORMAT, "root": name, "error": f"{name}({', '.join(map(str, args))}) raised "
                                                         f"{type(e).__name__}: {str(e)[:MAX_STR]}"}
    return trace(module, *fargs, **fkw)


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
    first_user = {}
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


# --- reading a graph that may be junk --------------------------------------------------------------------------------

class Unreadable(ValueError):
    """A graph that is not what trace() returns."""


_KINDS = {"call", "input", "parameter", "buffer", "constant", "output", "grad"}
_SAFE = re.compile(r"[^A-Za-z0-9_.@]")


def _s(v, what, limit=MAX_STR, default=None) -> str:
    if v is None and default is not None:
        return default
    if not isinstance(v, str):
        raise Unreadable(f"{what} is not a string")
    return v[:limit]


def _safe(name: str, limit=40) -> str:
    """A module path or type from a learner's graph, reduced to characters that are safe in any text."""
    return _SAFE.sub("?", name)[:limit] or "?"


class Graph:
    """A forward (or backward) graph read from plain data, checked, with its group tree and its edges both ways."""

    def __init__(self, data, part: str = "forward"):
        if not isinstance(data, dict):
            raise Unreadable("the graph is not a dict")
        groups = data.get("groups", [])
        body = data if part == "forward" else data.get("backward")
        if not isinstance(body, dict) or "error" in body:
            raise Unreadable(f"the graph has no {part} part")
        nodes, edges = body.get("nodes"), body.get("edges")
        if not isinstance(groups, list) or len(groups) > MAX_GROUPS:
            raise Unreadable("groups is not a list of at most %d" % MAX_GROUPS)
        if not isinstance(nodes, list) or len(nodes) > MAX_NODES:
            raise Unreadable("nodes is not a list of at most %d" % MAX_NODES)
        if not isinstance(edges, list) or len(edges) > MAX_EDGES:
            raise Unreadable("edges is not a list of at most %d" % MAX_EDGES)
        self.root = _s(data.get("root"), "root", 80, "?")
        self.groups = {"": {"id": "", "path": "", "type": self.root, "qualname": self.root, "library": False,
                            "parent": None, "module": ""}}
        for gr in groups:
            if not isinstance(gr, dict):
                raise Unreadable("a group is not a dict")
            gid = _s(gr.get("id"), "a group's id")
            if gid == "":
                self.groups[""].update(type=_s(gr.get("type"), "type", 80, self.root),
                                       qualname=_s(gr.get("qualname"), "qualname", default=self.root))
                continue
            self.groups[gid] = {"id": gid, "path": _s(gr.get("path"), "path", default=gid),
                                "type": _s(gr.get("type"), "type", 80, "?"),
                                "qualname": _s(gr.get("qualname"), "qualname", default="?"),
                                "library": gr.get("library") is True, "parent": gr.get("parent"),
                                "module": _s(gr.get("module"), "module", default=gid)}
        for gr in self.groups.values():
            if gr["id"] and (not isinstance(gr["parent"], str) or gr["parent"] not in self.groups):
                gr["parent"] = ""
        for gid in self.groups:                       # a cycle of parents, or a chain too deep, is cut
            chain, p = {gid}, self.groups[gid]["parent"]
            while p:
                if p in chain or len(chain) > 64:
                    self.groups[gid]["parent"] = ""
                    break
                chain.add(p)
                p = self.groups[p]["parent"]
        self.kids = {gid: [] for gid in self.groups}
        for gid, gr in self.groups.items():
            if gid:
                self.kids[gr["parent"]].append(gid)
        self.nodes, self.order = {}, []
        for node in nodes:
            if not isinstance(node, dict):
                raise Unreadable("a node is not a dict")
            nid = _s(node.get("id"), "a node's id", 200)
            if nid in self.nodes:
                raise Unreadable("two nodes have one id")
            shape = node.get("shape")
            if shape is not None and not (isinstance(shape, list) and len(shape) <= 12 and all(
                    type(s) is int and 0 <= s < 2 ** 40 for s in shape)):
                shape = None
            kind = node.get("kind") if isinstance(node.get("kind"), str) and node["kind"] in _KINDS else "call"
            group = node.get("group") if isinstance(node.get("group"), str) and node["group"] in self.groups else ""
            self.nodes[nid] = {"id": nid, "kind": kind, "op": _s(node.get("op"), "op", 60, "?"),
                               "target": _s(node.get("target"), "target", default=""), "group": group,
                               "shape": shape, "dtype": _s(node.get("dtype"), "dtype", 30, ""),
                               "args": _s(node.get("args"), "args", 120, ""), "code": _s(node.get("code"), "code",
                                                                                       160, ""),
                               "forward": node.get("forward") if isinstance(node.get("forward"), str) else None}
            self.order.append(nid)
        self.index = {nid: i for i, nid in enumerate(self.order)}
        self.ins = {nid: [] for nid in self.order}
        self.outs = {nid: [] for nid in self.order}
        for e in edges:
            if not (isinstance(e, (list, tuple)) and len(e) == 2 and all(isinstance(x, str) for x in e)):
                raise Unreadable("an edge is not a pair of node ids")
            a, b = e
            if a not in self.nodes or b not in self.nodes:
                raise Unreadable("an edge names a node that is not there")
            self.ins[b].append(a)
            self.outs[a].append(b)
        self.members = {gid: [] for gid in self.groups}
        for nid in self.order:
            self.members[self.nodes[nid]["group"]].append(nid)
        self._sub: dict[str, set] = {}
        self._dep: dict[str, bool] = {}

    def subtree(self, gid) -> set:
        if gid not in self._sub:
            out, todo = set(), [gid]
            while todo:
                g = todo.pop()
                if g not in out:
                    out.add(g)
                    todo += self.kids[g]
            self._sub[gid] = out
        return self._sub[gid]

    def child_of(self, top, gid):
        """The child of group `top` that holds group `gid`."""
        while gid and self.groups[gid]["parent"] != top:
            gid = self.groups[gid]["parent"]
        return gid

    def role(self, gid) -> str:
        t = self.groups[gid]["type"]
        return next((r for r, names in ROLES.items() if t in names), "other")

    def tensor_ins(self, nid):
        return [i for i in self.ins[nid] if self.nodes[i]["kind"] != "parameter"]

    def from_input(self, nid) -> bool:
        """Whether node nid depends on an input of the model (its tokens, its x)."""
        stack, visiting = [(nid, False)], set()
        while stack:
            n, done = stack.pop()
            if n in self._dep:
                continue
            if done:
                visiting.discard(n)
                self._dep[n] = self.nodes[n]["kind"] == "input" or any(self._dep.get(i, False) for i in self.ins[n])
            elif n not in visiting:                 # a node already on the way is a cycle: cut it there
                visiting.add(n)
                stack.append((n, True))
                stack += [(i, False) for i in self.ins[n] if i not in self._dep and i not in visiting]
        return self._dep[nid]

    def descendants(self, starts) -> set:
        """The nodes that depend on any of `starts`, these included."""
        seen, todo = set(), list(starts)
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += self.outs[n]
        return seen


# --- the structure of a graph: blocks, sublayers, the residual stream -------------------------------------------------

def _float(node):
    return node["dtype"].startswith(("float", "bfloat", "complex"))


def _block(G: Graph, b: str) -> dict:
    """One block call: its sublayers, what each reads, its residual add, where its norms are, whether a mask arrives."""
    sub = G.subtree(b)
    inside = {nid for gid in sub for nid in G.members[gid] if G.nodes[nid]["kind"] == "call"}
    info = {"id": b, "library": G.groups[b]["library"], "type": G.groups[b]["type"], "nodes": inside,
            "units": {}, "sublayers": {}}
    outs = [n for n in G.order if n in inside and any(u not in inside for u in G.outs[n])]
    floats = [n for n in outs if _float(G.nodes[n]) and G.nodes[n]["shape"]]
    if not floats:
        return info
    out = floats[-1]
    S = G.nodes[out]["shape"]
    info.update(out=out, shape=S)

    def rep(n):
        node = G.nodes[n]
        if n not in inside:
            return ("in", n)
        if node["group"] == b:
            return ("op", n)
        return ("unit", G.child_of(b, node["group"]))

    ext = {}                                       # unit -> nodes outside it that it reads, in order
    for n in G.order:
        if n in inside and G.nodes[n]["group"] != b:
            c = G.child_of(b, G.nodes[n]["group"])
            for i in G.tensor_ins(n):
                if i not in inside or G.child_of(b, G.nodes[i]["group"]) != c or G.nodes[i]["group"] == b:
                    ext.setdefault(c, []).append(i)

    def stream(n):
        node = G.nodes[n]
        return _float(node) and node["shape"] == S

    def back(r):
        """r, or what it passes on unchanged (dropout, clone, a dtype conversion)."""
        for _ in range(32):
            kind, n = r
            ins = G.tensor_ins(n) if kind == "op" and G.nodes[n]["op"] in PASS else \
                ext.get(n, []) if kind == "unit" and G.role(n) == "dropout" else None
            if not ins or len(ins) != 1:
                return r
            r = rep(ins[0])
        return r

    def reads(c):
        found = [back(rep(i)) for i in ext.get(c, []) if stream(i)]
        return max(set(found), key=found.count) if found else None

    x_in = next((i for n in G.order if n in inside for i in G.tensor_ins(n) if i not in inside and stream(i)), None)
    info["x_in"] = x_in
    for c in G.kids[b]:
        info["units"].setdefault(G.role(c), []).append(c)
    adds = [n for n in G.members[b] if G.nodes[n]["kind"] == "call" and G.nodes[n]["op"] in ADDS]
    add_ins = {a: {back(rep(i)) for i in G.tensor_ins(a)} for a in adds}
    L = S[-2] if len(S) >= 2 else None
    for role in SUBLAYER:
        if not info["units"].get(role):
            continue
        c = info["units"][role][0]
        r, me = reads(c), ("unit", c)
        s = {"unit": c, "residual": None, "inplace": False, "pre": None, "post": None}
        tries = [(r, None)]
        if r and r[0] == "unit" and G.role(r[1]) == "norm":
            tries.append((reads(r[1]), r[1]))
        for state, pre in tries:
            a = next((a for a in adds if me in add_ins[a] and state in add_ins[a]), None)
            if a:
                s.update(residual=a, pre=pre, inplace=G.nodes[a]["op"].endswith("_"))
                after = {rep(u) for u in G.outs[a] if u in inside}      # a post-norm is all the stream goes on to
                if len(after) == 1 and next(iter(after))[0] == "unit" and G.role(next(iter(after))[1]) == "norm":
                    s["post"] = next(iter(after))[1]
                break
        else:
            s["pre"] = r[1] if r and r[0] == "unit" and G.role(r[1]) == "norm" else None
        s["placement"] = {(True, False): "pre", (False, True): "post", (True, True): "both",
                          (False, False): "none"}[(s["pre"] is not None, s["post"] is not None)]
        csub = G.subtree(c)
        cnodes = [n for n in G.order if G.nodes[n]["group"] in csub and G.nodes[n]["kind"] == "call"]
        if role == "attention":
            def masklike(n):
                node = G.nodes[n]
                return node["dtype"] == "bool" or (_float(node) and node["shape"] is not None and L is not None and
                                                   len(node["shape"]) >= 2 and node["shape"][-2:] == [L, L])

            masks = G.descendants(n for n in G.order if n not in inside and masklike(n))   # masks from outside
            s["mask"] = any(masklike(i) and i in masks for i in ext.get(c, [])) or \
                any("is_causal=True" in G.nodes[n]["args"] for n in cnodes)
        else:
            s["acts"] = [G.nodes[n]["op"] for n in cnodes if G.nodes[n]["op"] in ACTS]
            widths = [G.nodes[n]["shape"][-1] for n in cnodes if G.nodes[n]["op"] in ("linear", "addmm", "matmul")
                      and G.nodes[n]["shape"]]
            s["width"] = widths[0] if widths else None
        info["sublayers"][role] = s
    return info


def _analyse(G: Graph) -> dict:
    """The structure of a traced model: its blocks in call order, and for a whole model its embedding and head."""
    top = [g for g in sorted(G.groups, key=lambda g: min((G.index[n] for n in G.members[g]), default=1 << 40))
           if G.role(g) == "block" and not any(G.role(a) == "block" for a in _above(G, g))]
    top = [""] if G.role("") == "block" else top
    a = {"blocks": [_block(G, b) for b in top[:MAX_BLOCKS]], "n_blocks": len(top), "is_block": top == [""]}
    top = top[:MAX_BLOCKS]
    outs = [i for n in G.order if G.nodes[n]["kind"] == "output" for i in G.ins[n]]
    a["out"] = outs[0] if outs else None
    a["out_shape"] = G.nodes[outs[0]]["shape"] if outs else None
    if a["is_block"] or not top:
        return a
    modules = [G.groups[b]["module"] for b in top]
    params = [{i for n in blk["nodes"] for i in G.ins[n] if G.nodes[i]["kind"] == "parameter"} for blk in a["blocks"]]
    a["shared"] = [(i, j) for i in range(len(top)) for j in range(i + 1, len(top))
                   if modules[i] == modules[j] or params[i] & params[j]]
    first = a["blocks"][0].get("x_in")
    path, cur = [], first
    a["positions"] = a["scaled"] = False
    while cur is not None and len(path) < 64:
        node = G.nodes[cur]
        if node["kind"] != "call" or node["op"] == "embedding" or G.role(node["group"]) == "embedding":
            break
        ins = G.tensor_ins(cur)
        tok = [i for i in ins if G.from_input(i)]
        if node["op"] in ADDS and tok and len(tok) < len(ins):
            a["positions"] = True
            path.append(cur)
        if node["op"] in ("mul", "div", "mul_", "div_") and len(tok) == 1:
            a["scaled"] = True
            path.append(cur)
        cur = tok[0] if len(tok) == 1 else None
    a["embedding_path"] = path
    last = a["blocks"][-1].get("out")
    norms = []
    cur = a["out"]
    for _ in range(64):
        if cur is None or cur == last or cur in a["blocks"][-1]["nodes"]:
            break
        top = G.child_of("", G.nodes[cur]["group"])
        if top and G.role(top) == "norm" and top not in norms:
            norms.append(top)
        ins = [i for i in G.tensor_ins(cur) if _float(G.nodes[i])]
        cur = ins[0] if ins else None
    a["final_norm"] = norms
    return a


def _above(G, gid):
    out = []
    while gid:
        gid = G.groups[gid]["parent"]
        out.append(gid)
    return out


# --- differences ---------------------------------------------------------------------------------------------------

def _names(R: Graph, a: dict) -> dict:
    """size -> its name in the glossary (B, L, d_model, d_ff, vocab_size), read off the reference's graph."""
    named = {}
    first = next((n for n in R.order if R.nodes[n]["kind"] == "input" and R.nodes[n]["shape"]), None)
    if first and len(R.nodes[first]["shape"]) >= 2:
        named["B"], named["L"] = R.nodes[first]["shape"][:2]
    if a["blocks"] and a["blocks"][0].get("shape"):
        named["d_model"] = d = a["blocks"][0]["shape"][-1]
        attn = a["blocks"][0]["sublayers"].get("attention")
        views = [R.nodes[n]["shape"] for n in sorted(_nodes(R, attn["unit"]), key=R.index.get) if attn and
                 R.nodes[n]["op"] == "view" and len(R.nodes[n]["shape"] or ()) == 4] if attn else []
        heads = [s for s in views if s[2] * s[3] == d]
        if heads:
            named["n_heads"], named["d_head"] = heads[0][2:]
        ff = a["blocks"][0]["sublayers"].get("ff")
        if ff and ff.get("width"):
            named["d_ff"] = ff["width"]
    if not a["is_block"] and a["out_shape"]:
        named["vocab_size"] = a["out_shape"][-1]
    values = list(named.values())
    return {v: k for k, v in named.items() if values.count(v) == 1}


def _shape(shape, names) -> str:
    if shape is None:
        return "(no tensor)"
    return "(" + ", ".join(names.get(s, str(s)) for s in shape) + ")"


def _ordinal(i):
    words = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"]
    return words[i] if i < len(words) else f"{i + 1}th"


def _compare(L: Graph, R: Graph):
    """[(message, learner node ids, reference node ids)] for the structural differences of L from R."""
    la, ra = _analyse(L), _analyse(R)
    names = _names(R, ra)
    found = []
    if not ra["blocks"]:
        return found
    lb, rb = la["blocks"], ra["blocks"]
    if not lb:
        what = "a TransformerBlock" if ra["is_block"] else "TransformerBlock modules"
        return [(f"no {what} found in your model's graph: the blocks are the modules of type TransformerBlock",
                 set(), set())]
    if not ra["is_block"]:
        if la["n_blocks"] != ra["n_blocks"]:
            n = la["n_blocks"]
            found.append((f"your model runs {n} block{'s' * (n != 1)}; the reference runs {len(rb)} "
                          f"(n_layers = {len(rb)})", set(), set()))
        if la.get("shared") and not ra.get("shared"):
            if len({L.groups[b['id']]["module"] for b in lb}) == 1 and len(lb) > 1:
                msg = (f"one block is shared by all layers: the same TransformerBlock, with one set of weights, runs "
                       f"{len(lb)} times; build a new TransformerBlock for each layer")
            else:
                i, j = la["shared"][0]
                msg = (f"the {_ordinal(i)} and the {_ordinal(j)} block are one module with one set of weights; "
                       "build a new TransformerBlock for each layer")
            found.append((msg, set().union(*(b["nodes"] for b in lb)), set()))
        if ra["positions"] and not la["positions"]:
            found.append(("your model never adds positions: the token embeddings reach the first block without the "
                          "positional encoding", set(la["embedding_path"]) | {lb[0].get("x_in")},
                          set(ra["embedding_path"])))
        if la["scaled"] and not ra["scaled"]:
            found.append(("your model scales the token embeddings before the first block (a multiplication on their "
                          "way in); the reference adds the positions to the unscaled embeddings",
                          set(la["embedding_path"]), set()))
        if ra.get("final_norm") and not la.get("final_norm"):
            found.append(("your model has no final LayerNorm between the last block and the head", set(), set()))
    if la["out_shape"] != ra["out_shape"]:
        what = "your block" if ra["is_block"] else "your model"
        found.append((f"{what} returns shape {_shape(la['out_shape'], names)}; the reference returns "
                      f"{_shape(ra['out_shape'], names)}", {la["out"]} - {None}, {ra["out"]} - {None}))
    per = {}                                     # key -> (message template, [block index], l nodes, r nodes)
    for i, (l, r) in enumerate(zip(lb, rb)):
        for key, template, ln, rn in _block_differences(L, R, l, r, ra["is_block"]):
            entry = per.setdefault(key, [template, [], set(), set()])
            entry[1].append(i)
            entry[2] |= ln
            entry[3] |= rn
    for key, (template, which, ln, rn) in per.items():
        if ra["is_block"]:
            where, whose = "your block", "your block's"
        elif len(which) == len(rb) > 1:
            where, whose = "each of your blocks", "your blocks'"
        else:
            where = " and ".join(f"the {_ordinal(i)} block" for i in which)
            whose = where + "'s"
        found.append((template.format(where=where, whose=whose), ln, rn))
    return found[:MAX_DIFFS]


def _block_differences(L: Graph, R: Graph, l: dict, r: dict, is_block: bool):
    """(key, message template with {where} and {whose}, learner nodes, reference nodes) for one pair of blocks."""
    if l["library"] and not r["library"]:
        yield ("library", f"{{where}} is torch.nn.{_safe(l['type'])}, not your own {r['type']}: build the blocks "
                          f"from your {r['type']}", l["nodes"], set())
        return
    if not l.get("shape"):
        yield ("no-output", "{where} returns no tensor", l["nodes"], set())
        return
    for role, units in r["units"].items():
        if role not in SUBLAYER and role != "norm":
            continue
        mine = l["units"].get(role, [])
        kind = {"attention": "attention sublayer", "ff": "feed-forward sublayer", "norm": "LayerNorm"}[role]
        if len(mine) < len(units):
            yield (f"count-{role}", f"{{where}} has {len(mine)} {kind}{'s' * (len(mine) != 1)}; the reference "
                                    f"block has {len(units)}", l["nodes"], set())
        library = [c for c in mine if L.groups[c]["library"]]
        if library and not any(R.groups[u]["library"] for u in units):
            paths = " and ".join(_safe(L.groups[c]["path"].rsplit(".", 1)[-1]) for c in library[:4])
            verb = "are" if len(library) > 1 else "is"
            yield (f"library-{role}", f"{{whose}} {paths} {verb} torch.nn.{_safe(L.groups[library[0]]['type'])}; "
                                      f"the exercise asks for your own {R.groups[units[0]]['type']}",
                   set().union(*(_nodes(L, c) for c in library)), set())
    placement, inplace = {}, {}
    for role, rs in r["sublayers"].items():
        ls = l["sublayers"].get(role)
        name = SUBLAYER[role]
        if ls is None:
            continue
        ln, rn = _nodes(L, ls["unit"]), _nodes(R, rs["unit"])
        if rs["residual"] and not ls["residual"]:
            yield (f"residual-{role}", f"{{where}} does not add the {name}'s output to the residual stream: there "
                                       f"is no residual connection around the {name} (x = x + {name}(...))",
                   ln, rn | {rs["residual"]})
            continue
        if ls["inplace"] and not rs["inplace"]:
            inplace[role] = (ls["residual"], rs["residual"])
        if ls["placement"] != rs["placement"]:
            placement[role] = (ls, rs)
        if role == "attention" and rs.get("mask") and not ls.get("mask"):
            hint = "pass mask on to self.attn(..., mask=mask)" if is_block else "give every block the causal mask"
            yield ("mask", f"no mask reaches {{whose}} attention: {hint}", ln, rn)
        if role == "ff":
            if rs["acts"] and not ls["acts"]:
                yield ("ff-act", f"{{whose}} feed-forward has no nonlinearity between its linear layers (the "
                                 f"reference applies {rs['acts'][0]})", ln, rn)
            elif rs["acts"] and ls["acts"][:1] != rs["acts"][:1]:
                yield ("ff-act", f"{{whose}} feed-forward applies {_safe(ls['acts'][0])} where the reference "
                                 f"applies {rs['acts'][0]}", ln, rn)
            if rs["width"] and ls["width"] and ls["width"] != rs["width"]:
                yield ("ff-width", f"{{whose}} feed-forward widens to {ls['width']}, not d_ff = {rs['width']}",
                       ln, rn)
    if inplace:
        which = " and the ".join(SUBLAYER[k] + "'s" for k in inplace)
        yield ("inplace", f"{{where}} adds the {which} output in place (x += ...), which overwrites the caller's "
                          "tensor: write x = x + ...", {v[0] for v in inplace.values()}, {v[1] for v in inplace.values()})
    if placement:
        ls, rs = next(iter(placement.values()))
        which = " and ".join(SUBLAYER[k] for k in placement)
        ln = set().union(*(_nodes(L, s[0][k]) for s in placement.values() for k in ("pre", "post") if s[0][k]))
        rn = set().union(*(_nodes(R, s[1][k]) for s in placement.values() for k in ("pre", "post") if s[1][k]))
        ln |= {s[0]["residual"] for s in placement.values()} - {None}
        rn |= {s[1]["residual"] for s in placement.values()} - {None}
        if rs["placement"] == "pre" and ls["placement"] == "post":
            msg = ("{where} normalises after the addition (post-LN) when norm_first=True: normalise what each "
                   "sublayer reads, x = x + attn(norm1(x))")
        elif rs["placement"] == "post" and ls["placement"] == "pre":
            msg = ("{where} normalises before the sublayers (pre-LN) when norm_first=False: normalise the sum, "
                   "x = norm1(x + attn(x))")
        else:
            words = {"pre": "before the sublayer (pre-LN)", "post": "after the addition (post-LN)",
                     "both": "both before the sublayer and after the addition", "none": "nowhere"}
            msg = (f"around the {which}, {{where}} normalises {words[ls['placement']]}; the reference normalises "
                   f"{words[rs['placement']]}")
        yield ("placement", msg, ln, rn)


def _nodes(G: Graph, gid) -> set:
    return {n for g in G.subtree(gid) for n in G.members[g]}


def differences(learner_graph, reference_graph) -> list[str]:
    """The structural differences of the learner's graph from the reference's, in words; [] when they match."""
    R = Graph(reference_graph)                     # the course's own: a broken one is the grader's fault, raised
    if isinstance(learner_graph, dict) and "error" in learner_graph:
        note = learner_graph["error"]
        return [f"your model's graph: {note[:MAX_STR] if isinstance(note, str) else 'it could not be traced'}"]
    try:
        return [msg for msg, _, _ in _compare(Graph(learner_graph), R)]
    except Unreadable as e:
        return [f"your model's graph could not be read ({e}), so its structure was not compared"]
    except Exception as e:  # an odd graph must never cost the learner their feedback
        return [f"your model's graph could not be compared with the reference's ({type(e).__name__})"]


# --- drawing ---------------------------------------------------------------------------------------------------------

def _q(text) -> str:
    """A DOT string: quoted, with backslashes and quotes escaped and Graphviz's escapes (\\N, \\G, ...) disarmed."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def parts(G: Graph, F: Graph | None = None, highlight=(), names=None, prefix="", params=False) -> dict:
    """The drawing of G (F: its forward graph, when G is a backward one) as pieces of DOT for assemble()."""
    F = F or G
    a = _analyse(F)
    if names is None:
        names = _names(F, a)
    highlight = set(highlight)
    visible = [n for n in G.order if params or not _hidden(G, F, n)]
    shown = set(visible)
    if len(visible) > MAX_DRAWN or sum(len(G.outs[n]) for n in visible) > 4 * MAX_DRAWN:
        raise Unreadable(f"{len(visible)} nodes, too many to draw (at most {MAX_DRAWN})")
    dot_id = {n: f"{prefix}n{i}" for i, n in enumerate(visible)}
    chain = {n: {G.nodes[n]["group"], *_above(G, G.nodes[n]["group"])} for n in visible}   # its groups, nested
    count = {gid: 0 for gid in G.groups}
    for n in visible:
        for gid in chain[n]:
            count[gid] += 1
    clusters = {gid: f"{prefix}c{i}" for i, gid in enumerate(g for g in G.groups if g and count[g] >= 2)}

    def home(gid):
        while gid and gid not in clusters:
            gid = G.groups[gid]["parent"]
        return gid

    leaving = {}                                   # group -> the last node whose result leaves it
    for n in visible:
        for u in G.outs[n]:
            if u in shown:
                for gid in chain[n] - chain[u]:
                    leaving[gid] = n
    stream = _stream_nodes(F, a)
    out = {"graph": 'rankdir=TB; nodesep=0.25; ranksep=0.3; fontname="Helvetica"; '
                    'node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, height=0.3]; '
                    'edge [arrowsize=0.6, color="#555555"];',
           "clusters": [], "nodes": [], "edges": [], "info": {}}
    for gid, cid in clusters.items():
        g = G.groups[gid]
        parent = G.groups[gid]["parent"]
        rel = g["path"][len(G.groups[parent]["path"]) + 1:] if parent and g["path"].startswith(
            G.groups[parent]["path"] + ".") else g["path"]
        call = gid.rsplit("@", 1)[1] if "@" in gid else ""
        label = f"{rel}{' (call ' + call + ')' if call else ''} · {g['type']}"
        hit = any(n in highlight for n in _nodes(G, gid))
        last = leaving.get(gid)
        shape = _shape(G.nodes[last]["shape"], names) if last and G.nodes[last]["shape"] is not None else ""
        fill = COLORS["hit"] if hit else COLORS["branch"]
        out["clusters"].append({
            "id": cid, "group": gid, "parent": clusters.get(home(parent)) if parent else None, "label": label,
            "attrs": f'id={_q(cid)}; label={_q(label)}; style="rounded,filled"; fillcolor={_q(COLORS["group"])}; '
                     f'color={_q("#d62728" if hit else "#999999")}; penwidth={3 if hit else 1}; fontsize=10;',
            "node": f'{cid} [id={_q(cid)}, label={_q(label + (chr(10) + shape if shape else ""))}, shape=box3d, '
                    f'style=filled, fillcolor={_q(fill)}, tooltip={_q("click to expand " + label)}];'})
    for n in visible:
        node, did = G.nodes[n], dot_id[n]
        label, tip = _label(G, F, n, names)
        color = COLORS["hit"] if n in highlight else COLORS["stream"] if n in stream or (
            node["forward"] in stream) else COLORS["mask"] if node["dtype"] == "bool" else COLORS["branch"]
        border = ', color="#d62728", penwidth=3' if n in highlight else ""
        out["nodes"].append({"id": did, "cluster": clusters.get(home(node["group"])),
                             "stmt": f"{did} [id={_q(did)}, label={_q(label)}, tooltip={_q(tip)}, "
                                     f"fillcolor={_q(color)}{border}];"})
        out["info"][did] = {"name": n, "op": node["op"], "target": node["target"], "group": node["group"] or "(top)",
                            "shape": _shape(node["shape"], names) if node["shape"] is not None else "",
                            "dtype": node["dtype"], "args": node["args"], "code": node["code"],
                            "forward": node["forward"] or ""}
    for n in visible:
        for u in G.outs[n]:
            if u in shown:
                out["edges"].append([dot_id[n], dot_id[u]])
    return out


def _hidden(G, F, n) -> bool:
    """Parameters are left out of a drawing (each shows in its operation's tooltip), and where their gradients land."""
    node = G.nodes[n]
    if node["kind"] == "parameter":
        return True
    f = F.nodes.get(node["forward"]) if node["forward"] else None
    return node["kind"] == "grad" and f is not None and f["kind"] == "parameter"


def _stream_nodes(F: Graph, a: dict) -> set:
    """The residual stream: the model's inputs and output, each block's input, residual adds and output."""
    s = {n for n in F.order if F.nodes[n]["kind"] in ("input", "output") and F.nodes[n]["dtype"] != "bool"}
    s |= set(a.get("embedding_path", []))
    for b in a["blocks"]:
        s |= {b.get("x_in"), b.get("out")} - {None}
        for sl in b["sublayers"].values():
            s |= {sl["residual"]} - {None}
            if sl["post"]:
                s |= {n for n in F.members[sl["post"]] if F.outs[n] and any(
                    F.nodes[u]["group"] not in F.subtree(sl["post"]) for u in F.outs[n])}
    return s


def _label(G, F, n, names):
    """(label, tooltip) of a node: what it computes and the shape of its result."""
    node = G.nodes[n]
    op = node["op"]
    g = node["group"]
    alone = g and sum(not _hidden(G, F, m) for m in G.members[g]) == 1 and not G.kids[g]
    own = G.groups[g]["path"].rsplit(".", 1)[-1] if alone else ""
    if node["kind"] in ("input", "buffer", "constant"):
        op = f"{node['kind']} {node['target'].rsplit('.', 1)[-1]}"
    elif node["forward"] in F.nodes and F.nodes[node["forward"]]["kind"] == "input":
        op = f"{op} {F.nodes[node['forward']]['target']}"             # where the gradient of an input lands
    weights = [F.nodes[i] for i in F.ins.get(node["forward"] or n, []) if F.nodes[i]["kind"] == "parameter"]
    if op == "linear" and weights and weights[0]["shape"] and len(weights[0]["shape"]) == 2:
        o, i = weights[0]["shape"]
        op = f"linear {names.get(i, i)}→{names.get(o, o)}"
    label = f"{own}: {op}" if own else op
    if node["shape"] is not None:
        label += "\n" + _shape(node["shape"], names)
    tip = [f"{node['op']}  {node['target']}", f"in {node['group'] or '(top)'}"]
    if node["shape"] is not None:
        tip.append(f"{_shape(node['shape'], names)} {node['dtype']}")
    if node["args"]:
        tip.append(f"arguments: {node['args']}")
    tip += [f"{w['target']} {_shape(w['shape'], names)}" for w in weights]
    if node["forward"]:
        tip.append(f"gradient of {node['forward']}")
    if node["code"]:
        tip.append(node["code"])
    return label, "\n".join(tip)


def assemble(p: dict, collapsed=()) -> str:
    """DOT source from parts(): a collapsed cluster becomes one node, edges into it end at that node."""
    collapsed = set(collapsed)
    kids, members, parent = {}, {}, {}
    for c in p["clusters"]:
        kids.setdefault(c["parent"], []).append(c)
        parent[c["id"]] = c["parent"]
    for n in p["nodes"]:
        members.setdefault(n["cluster"], []).append(n)

    def owner(cluster, nid):
        top, c = nid, cluster
        while c is not None:
            if c in collapsed:
                top = c
            c = parent[c]
        return top

    def body(c):
        if c["id"] in collapsed:
            return c["node"]
        inner = [n["stmt"] for n in members.get(c["id"], [])] + [body(k) for k in kids.get(c["id"], [])]
        return f"subgraph cluster_{c['id']} {{ {c['attrs']} " + " ".join(inner) + " }"

    where = {n["id"]: n["cluster"] for n in p["nodes"]}
    lines = ["digraph G {", p["graph"]]
    lines += [n["stmt"] for n in members.get(None, [])] + [body(c) for c in kids.get(None, [])]
    seen = set()
    for a, b in p["edges"]:
        e = (owner(where[a], a), owner(where[b], b))
        if e[0] != e[1] and e not in seen:
            seen.add(e)
            lines.append(f"{e[0]} -> {e[1]};")
    return "\n".join(lines + ["}"])


def to_dot(graph, highlight=(), collapsed=(), part="forward", names=None) -> str:
    """DOT source of a graph's forward (or backward) part; `collapsed` names module groups drawn as one node."""
    p = parts(Graph(graph, part), Graph(graph), highlight, names)
    ids = {c["group"]: c["id"] for c in p["clusters"]}
    return assemble(p, {ids[g] for g in collapsed if g in ids})


def to_svg(graph, highlight=(), collapsed=(), part="forward", names=None) -> str:
    """The graph laid out by Graphviz's dot, as an SVG element (no XML prolog), highlighted nodes in red."""
    return _dot_svg(to_dot(graph, highlight, collapsed, part, names))


def _dot_svg(source: str) -> str:
    try:
        r = subprocess.run(["dot", "-Tsvg"], input=source, capture_output=True, text=True, timeout=DOT_TIMEOUT)
    except FileNotFoundError:
        raise RuntimeError("Graphviz's dot is not installed: `make` installs it (apt-get install graphviz)") from None
    if r.returncode != 0:
        raise RuntimeError(f"dot failed: {r.stderr.strip()[:500]}")
    svg = r.stdout[r.stdout.index("<svg"):]
    return svg.replace("<svg ", '<svg style="max-width:100%;height:auto" ', 1)      # shrinks to fit a page


def explorer_data(graph) -> dict:
    """What the book's interactive graph page draws: parts() of the forward and the backward graph, norms collapsed."""
    F, out = Graph(graph), {}
    for part in ("forward", "backward"):
        G = F if part == "forward" else Graph(graph, part)
        p = parts(G, F)
        p["collapsed"] = [c["id"] for c in p["clusters"] if F.role(c["group"]) == "norm"]
        out[part] = p
    return out


def side_by_side_html(learner_graph, reference_graph) -> str:
    """An HTML fragment: the differences in words, then the learner's graph beside the reference's, differences red."""
    R = Graph(reference_graph)
    notes, L, lhit, rhit = [], None, set(), set()
    if isinstance(learner_graph, dict) and "error" in learner_graph:
        notes = differences(learner_graph, reference_graph)
    else:
        try:
            L = Graph(learner_graph)
            found = _compare(L, R)
            notes = [m for m, _, _ in found]
            for _, ln, rn in found:
                lhit |= ln
                rhit |= rn
        except Unreadable as e:
            notes = [f"your model's graph could not be read ({e}), so its structure was not compared"]
        except Exception as e:
            notes = [f"your model's graph could not be compared with the reference's ({type(e).__name__})"]
    names = _names(R, _analyse(R))

    def drawing(G, hit, prefix):
        if G is None:
            return "<p>(no graph)</p>"
        try:
            p = parts(G, None, hit, names, prefix)
            norms = {c["id"] for c in p["clusters"] if G.role(c["group"]) == "norm" and not (_nodes(G, c["group"]) & hit)}
            return _dot_svg(assemble(p, norms))
        except (Unreadable, RuntimeError, subprocess.TimeoutExpired) as e:
            return f"<p>(the graph could not be drawn: {html.escape(str(e)[:200])})</p>"

    items = "".join(f"<li>{html.escape(m)}</li>" for m in notes) if notes else \
        "<li>Your model has the reference's structure.</li>"
    cell = 'style="margin:0;flex:1 1 0;min-width:0"'
    return ('<section class="graph-compare" style="font-family:sans-serif">'
            "<h3>The structure of your model beside the reference's</h3>"
            f"<ul>{items}</ul>"
            '<div style="display:flex;gap:1.5em;align-items:flex-start;overflow-x:auto">'
            f"<figure {cell}><figcaption>your model</figcaption>{drawing(L, lhit, 'l')}</figure>"
            f"<figure {cell}><figcaption>the reference</figcaption>{drawing(R, rhit, 'r')}</figure>"
            "</div></section>")


# --- the command line ------------------------------------------------------------------------------------------------

def _load_namespace(source: str) -> dict:
    """The names a notebook's learner cells define (run here: call this in a separate process), or the reference's."""
    from .notebooks import learner_cells, read, reference_namespace

    if not source.endswith(".ipynb"):
        return reference_namespace(source)
    ns: dict = {"__name__": "learner"}
    with contextlib.redirect_stdout(sys.stderr):
        for cell in learner_cells(read(Path(source))):
            exec(compile(cell["source"], f"<cell {cell['id']}>", "exec"), ns)
    return ns


def _child(source, name, settings, out):
    """In a separate process: run the notebook's code, trace `name`, write the graph as JSON to `out`."""
    Path(out).write_text(json.dumps(trace_named(_load_namespace(source), name, **json.loads(settings))))


def _setting(text):
    import ast

    key, _, value = text.partition("=")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise argparse.ArgumentTypeError(f"{text!r}: write key=value with a Python literal value") from None


def main(argv=None):
    import tempfile

    ap = argparse.ArgumentParser(prog="python -m autograder.graph", description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="a notebook (its solution and setup cells run in a separate process) or an "
                                   "assignment name (the course's reference solution)")
    ap.add_argument("name", help=f"the module to draw: {', '.join(EXAMPLES)}")
    ap.add_argument("--out", default=None, help="output file: .svg (default NAME.svg), .dot, .json (the graph as data), "
                                                ".html (beside the reference, differences named)")
    ap.add_argument("--set", dest="settings", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                    help="a constructor argument, e.g. --set norm_first=False --set d_model=32")
    ap.add_argument("--backward", action="store_true", help="draw the backward graph (autograd's grad_fn graph)")
    ap.add_argument("--compare", metavar="ASSIGNMENT", help="print the differences from this assignment's reference")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    settings = dict(args.settings)
    out = Path(args.out or f"{args.name}.svg")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "graph.json"
        r = subprocess.run([sys.executable, "-m", "autograder.graph", "--child", args.source, args.name,
                            json.dumps(settings), str(data)], cwd=Path(__file__).resolve().parent.parent,
                           timeout=args.timeout)
        if r.returncode != 0 or not data.exists():
            sys.exit(f"could not trace {args.name} from {args.source} (exit status {r.returncode})")
        graph = json.loads(data.read_text())
    if "error" in graph:
        sys.exit(graph["error"])
    reference = None
    if args.compare or out.suffix == ".html":
        asg = args.compare or Path(args.source).stem
        from .notebooks import reference_namespace

        reference = trace_named(reference_namespace(asg), args.name, **settings)
        for line in differences(graph, reference) or ["the same structure as the reference"]:
            print(line)
    part = "backward" if args.backward else "forward"
    if out.suffix == ".json":
        out.write_text(json.dumps(graph, indent=1))
    elif out.suffix == ".dot":
        out.write_text(to_dot(graph, part=part))
    elif out.suffix == ".html":
        out.write_text(f"<!doctype html><meta charset=utf-8><title>{html.escape(args.name)}</title>"
                       + side_by_side_html(graph, reference))
    else:
        out.write_text(to_svg(graph, part=part))
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        _child(*sys.argv[2:])
    else:
        main()
