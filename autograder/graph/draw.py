"""Drawing graphs with Graphviz's `dot` (`make` installs it): SVG, DOT, the book's explorer data, and a learner's
module beside the reference's with the differences marked. Every label from a graph is escaped."""
from __future__ import annotations

import html
import subprocess
import time
from typing import Any

from autograder.graph.compare import compare_graphs, differences, names_of, nodes_of, shape_text
from autograder.graph.model import Graph, Unreadable, above, analyse

MAX_DRAWN = 1_500                         # nodes drawn
DOT_TIMEOUT = 120.0
# A learner's graph is drawn only when it is at most this many times the reference's (or this many nodes more), and
# its layout gets at most LEARNER_DOT_S seconds of what is left of the learner's grading budget.
LEARNER_SCALE, LEARNER_EXTRA, LEARNER_DOT_S = 4, 200, 10.0
COLORS = {"stream": "#fde9c9", "branch": "#cfe3f7", "mask": "#e6e6e6", "hit": "#ffb3b3", "group": "#f6f6f6"}


# --- drawing ---------------------------------------------------------------------------------------------------------

def _q(text) -> str:
    """A DOT string: quoted, with backslashes and quotes escaped and Graphviz's escapes (\\N, \\G, ...) disarmed."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def parts(G: Graph, F: Graph | None = None, highlight=(), names=None, prefix="", params=False) -> dict:
    """The drawing of G (F: its forward graph, when G is a backward one) as pieces of DOT for assemble()."""
    F = F or G
    a = analyse(F)
    if names is None:
        names = names_of(F, a)
    highlight = set(highlight)
    visible = [n for n in G.order if params or not _hidden(G, F, n)]
    shown = set(visible)
    if len(visible) > MAX_DRAWN or sum(len(G.outs[n]) for n in visible) > 4 * MAX_DRAWN:
        raise Unreadable(f"{len(visible)} nodes, too many to draw (at most {MAX_DRAWN})")
    dot_id = {n: f"{prefix}n{i}" for i, n in enumerate(visible)}
    chain = {n: {G.nodes[n]["group"], *above(G, G.nodes[n]["group"])} for n in visible}   # its groups, nested
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
    out: dict[str, Any] = {"graph": 'rankdir=TB; nodesep=0.25; ranksep=0.3; fontname="Helvetica"; '
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
        hit = any(n in highlight for n in nodes_of(G, gid))
        last = leaving.get(gid)
        shape = shape_text(G.nodes[last]["shape"], names) if last and G.nodes[last]["shape"] is not None else ""
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
                            "shape": shape_text(node["shape"], names) if node["shape"] is not None else "",
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
        label += "\n" + shape_text(node["shape"], names)
    tip = [f"{node['op']}  {node['target']}", f"in {node['group'] or '(top)'}"]
    if node["shape"] is not None:
        tip.append(f"{shape_text(node['shape'], names)} {node['dtype']}")
    if node["args"]:
        tip.append(f"arguments: {node['args']}")
    tip += [f"{w['target']} {shape_text(w['shape'], names)}" for w in weights]
    if node["forward"]:
        tip.append(f"gradient of {node['forward']}")
    if node["code"]:
        tip.append(node["code"])
    return label, "\n".join(tip)


def assemble(p: dict, collapsed=()) -> str:
    """DOT source from parts(): a collapsed cluster becomes one node, edges into it end at that node."""
    collapsed = set(collapsed)
    kids: dict[str | None, list[dict]]
    members: dict[str | None, list[dict]]
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


def _dot_svg(source: str, timeout: float = DOT_TIMEOUT) -> str:
    try:
        r = subprocess.run(["dot", "-Tsvg"], input=source, capture_output=True, text=True, timeout=timeout)
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


def side_by_side_html(learner_graph, reference_graph, deadline: float = float("inf")) -> str:
    """An HTML fragment: the differences in words, then the learner's graph beside the reference's, differences red
    (the learner's alone where it has the reference's structure: a second drawing of it would say nothing more).

    The learner's graph is traced from their module, so its size is theirs to choose: one much larger than the
    reference's is not drawn, and each layout stops at `deadline` (time.time()) or after LEARNER_DOT_S seconds."""
    R = Graph(reference_graph)
    notes, L, lhit, rhit = [], None, set(), set()
    if isinstance(learner_graph, dict) and "error" in learner_graph:
        notes = differences(learner_graph, reference_graph)
    else:
        try:
            L = Graph(learner_graph)
            found = compare_graphs(L, R)
            notes = [m for m, _, _ in found]
            for _, ln, rn in found:
                lhit |= ln
                rhit |= rn
        except Unreadable as e:
            notes = [f"your model's graph could not be read ({e}), so its structure was not compared"]
        except Exception as e:  # noqa: BLE001 - an odd graph must never cost the learner their feedback
            notes = [f"your model's graph could not be compared with the reference's ({type(e).__name__})"]
    names = names_of(R, analyse(R))
    most = max(LEARNER_SCALE * len(R.order), len(R.order) + LEARNER_EXTRA)

    def drawing(G, hit, prefix):
        if G is None:
            return "<p>(no graph)</p>"
        if len(G.order) > most:
            return (f"<p>(not drawn: your traced module has {len(G.order)} operations, more than {most}, "
                    f"{LEARNER_SCALE} times the reference's)</p>")
        left = min(LEARNER_DOT_S, deadline - time.time())
        if left < 1.0:
            return "<p>(not drawn: the time for grading this notebook was spent)</p>"
        try:
            p = parts(G, None, hit, names, prefix)
            norms = {c["id"] for c in p["clusters"]
                     if G.role(c["group"]) == "norm" and not (nodes_of(G, c["group"]) & hit)}
            return _dot_svg(assemble(p, norms), timeout=left)
        except subprocess.TimeoutExpired:
            return f"<p>(not drawn: its layout took more than {left:.0f} s)</p>"
        except (Unreadable, RuntimeError) as e:
            return f"<p>(the graph could not be drawn: {html.escape(str(e)[:200])})</p>"

    items = "".join(f"<li>{html.escape(m)}</li>" for m in notes) if notes else \
        "<li>Your model has the reference's structure.</li>"
    cell = 'style="margin:0;flex:1 1 0;min-width:0"'
    mine = f"<figure {cell}><figcaption>your model</figcaption>{drawing(L, lhit, 'l')}</figure>"
    figures = (mine.replace("your model<", "your model, with the reference's structure<") if L is not None and not notes
               else mine + f"<figure {cell}><figcaption>the reference</figcaption>{drawing(R, rhit, 'r')}</figure>")
    return ('<section class="graph-compare" style="font-family:sans-serif">'
            "<h3>The structure of your model beside the reference's</h3>"
            "<p>Drawn from your module as <code>torch.export</code> traced it, which can differ from the forward "
            "the tests ran and graded.</p>"
            f"<ul>{items}</ul>"
            '<div style="display:flex;gap:1.5em;align-items:flex-start;overflow-x:auto">'
            f"{figures}</div></section>")
