"""A traced graph read back from plain data that may be junk (a learner's sandbox made it): types and sizes
checked, counts and lengths capped; and its structure: blocks, sublayers, the residual stream."""
from __future__ import annotations

import re
from typing import Any

from autograder.inside.tracer import MAX_NODES, MAX_STR

MAX_EDGES, MAX_GROUPS, MAX_BLOCKS = 80_000, 5_000, 64       # what a graph read from data may hold; blocks compared
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


def safe(name: str, limit=40) -> str:
    """A module path or type from a learner's graph, reduced to characters that are safe in any text."""
    return _SAFE.sub("?", name)[:limit] or "?"


class Graph:
    """A forward (or backward) graph read from plain data, checked, with its group tree and its edges both ways."""

    groups: dict[str, dict[str, Any]]               # group id -> its record
    kids: dict[str, list[str]]
    nodes: dict[str, dict[str, Any]]                # node id -> its record
    order: list[str]
    ins: dict[str, list[str]]
    outs: dict[str, list[str]]
    members: dict[str, list[str]]

    def __init__(self, data, part: str = "forward"):
        if not isinstance(data, dict):
            raise Unreadable("the graph is not a dict")
        groups = data.get("groups", [])
        body = data if part == "forward" else data.get("backward")
        if not isinstance(body, dict) or "error" in body:
            raise Unreadable(f"the graph has no {part} part")
        nodes, edges = body.get("nodes"), body.get("edges")
        if not isinstance(groups, list) or len(groups) > MAX_GROUPS:
            raise Unreadable(f"groups is not a list of at most {MAX_GROUPS}")
        if not isinstance(nodes, list) or len(nodes) > MAX_NODES:
            raise Unreadable(f"nodes is not a list of at most {MAX_NODES}")
        if not isinstance(edges, list) or len(edges) > MAX_EDGES:
            raise Unreadable(f"edges is not a list of at most {MAX_EDGES}")
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

    ext: dict[str, list[str]] = {}                 # unit -> nodes outside it that it reads, in order
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


def analyse(G: Graph) -> dict:
    """The structure of a traced model: its blocks in call order, and for a whole model its embedding and head."""
    top = [g for g in sorted(G.groups, key=lambda g: min((G.index[n] for n in G.members[g]), default=1 << 40))
           if G.role(g) == "block" and not any(G.role(a) == "block" for a in above(G, g))]
    top = [""] if G.role("") == "block" else top
    a: dict[str, Any] = {"blocks": [_block(G, b) for b in top[:MAX_BLOCKS]], "n_blocks": len(top),
                         "is_block": top == [""]}
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
    path: list[str]
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


def above(G, gid):
    out = []
    while gid:
        gid = G.groups[gid]["parent"]
        out.append(gid)
    return out
