"""How the structure of a learner's graph differs from the reference's, in words."""
from __future__ import annotations

from autograder.graph.model import SUBLAYER, Graph, Unreadable, analyse, safe
from autograder.inside.tracer import MAX_STR

MAX_DIFFS = 20                            # differences named


# --- differences ---------------------------------------------------------------------------------------------------

def names_of(R: Graph, a: dict) -> dict:
    """size -> its name in the glossary (B, L, d_model, d_ff, vocab_size), read off the reference's graph."""
    named = {}
    first = next((n for n in R.order if R.nodes[n]["kind"] == "input" and R.nodes[n]["shape"]), None)
    if first and len(R.nodes[first]["shape"]) >= 2:
        named["B"], named["L"] = R.nodes[first]["shape"][:2]
    if a["blocks"] and a["blocks"][0].get("shape"):
        named["d_model"] = d = a["blocks"][0]["shape"][-1]
        attn = a["blocks"][0]["sublayers"].get("attention")
        views = [R.nodes[n]["shape"] for n in sorted(nodes_of(R, attn["unit"]), key=R.index.get) if attn and  # type: ignore[arg-type]
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


def shape_text(shape, names) -> str:
    if shape is None:
        return "(no tensor)"
    return "(" + ", ".join(names.get(s, str(s)) for s in shape) + ")"


def _ordinal(i):
    words = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"]
    return words[i] if i < len(words) else f"{i + 1}th"


def compare_graphs(L: Graph, R: Graph):
    """[(message, learner node ids, reference node ids)] for the structural differences of L from R."""
    la, ra = analyse(L), analyse(R)
    names = names_of(R, ra)
    found: list[tuple[str, set, set]] = []
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
        found.append((f"{what} returns shape {shape_text(la['out_shape'], names)}; the reference returns "
                      f"{shape_text(ra['out_shape'], names)}", {la["out"]} - {None}, {ra["out"]} - {None}))
    per: dict[str, list] = {}                    # key -> (message template, [block index], l nodes, r nodes)
    for i, (l, r) in enumerate(zip(lb, rb)):
        for key, template, ln, rn in _block_differences(L, R, l, r, ra["is_block"]):
            entry = per.setdefault(key, [template, [], set(), set()])
            entry[1].append(i)
            entry[2] |= ln
            entry[3] |= rn
    for _key, (template, which, ln, rn) in per.items():
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
        yield ("library", f"{{where}} is torch.nn.{safe(l['type'])}, not your own {r['type']}: build the blocks "
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
            paths = " and ".join(safe(L.groups[c]["path"].rsplit(".", 1)[-1]) for c in library[:4])
            verb = "are" if len(library) > 1 else "is"
            yield (f"library-{role}", f"{{whose}} {paths} {verb} torch.nn.{safe(L.groups[library[0]]['type'])}; "
                                      f"the exercise asks for your own {R.groups[units[0]]['type']}",
                   set().union(*(nodes_of(L, c) for c in library)), set())
    # a sublayer run more than once in one forward pass (a loop over the sequences of the batch, or over positions):
    # what its output joins is read through the pieces put together again, so its residual and placement are not
    repeated = set()
    for role in SUBLAYER:
        mine = [L.groups[c].get("module") for c in l["units"].get(role, [])]
        theirs = [R.groups[c].get("module") for c in r["units"].get(role, [])]
        if len(mine) > len(set(mine)) and len(theirs) == len(set(theirs)):
            repeated.add(role)
            yield (f"repeated-{role}", f"{{where}} runs its {SUBLAYER[role]} {len(mine)} times in one forward pass, "
                                       f"where the reference runs it once, on the whole batch (a loop over the "
                                       f"sequences or the positions?)", l["nodes"], set())
    placement, inplace = {}, {}
    for role, rs in r["sublayers"].items():
        ls = l["sublayers"].get(role)
        name = SUBLAYER[role]
        if ls is None or role in repeated:
            continue
        ln, rn = nodes_of(L, ls["unit"]), nodes_of(R, rs["unit"])
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
                yield ("ff-act", f"{{whose}} feed-forward applies {safe(ls['acts'][0])} where the reference "
                                 f"applies {rs['acts'][0]}", ln, rn)
            if rs["width"] and ls["width"] and ls["width"] != rs["width"]:
                yield ("ff-width", f"{{whose}} feed-forward widens to {ls['width']}, not d_ff = {rs['width']}",
                       ln, rn)
    if inplace:
        which = " and the ".join(SUBLAYER[k] + "'s" for k in inplace)
        yield ("inplace", f"{{where}} adds the {which} output in place (x += ...), which overwrites the caller's "
                          "tensor: write x = x + ...",
               {v[0] for v in inplace.values()}, {v[1] for v in inplace.values()})
    if placement:
        ls, rs = next(iter(placement.values()))
        which = " and ".join(SUBLAYER[k] for k in placement)
        ln = set().union(*(nodes_of(L, s[0][k]) for s in placement.values() for k in ("pre", "post") if s[0][k]))
        rn = set().union(*(nodes_of(R, s[1][k]) for s in placement.values() for k in ("pre", "post") if s[1][k]))
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


def nodes_of(G: Graph, gid) -> set:
    return {n for g in G.subtree(gid) for n in G.members[g]}


def differences(learner_graph, reference_graph) -> list[str]:
    """The structural differences of the learner's graph from the reference's, in words; [] when they match."""
    R = Graph(reference_graph)                     # the course's own: a broken one is the grader's fault, raised
    if isinstance(learner_graph, dict) and "error" in learner_graph:
        note = learner_graph["error"]
        return [f"your model's graph: {note[:MAX_STR] if isinstance(note, str) else 'it could not be traced'}"]
    try:
        return [msg for msg, _, _ in compare_graphs(Graph(learner_graph), R)]
    except Unreadable as e:
        return [f"your model's graph could not be read ({e}), so its structure was not compared"]
    except Exception as e:  # noqa: BLE001 - an odd graph must never cost the learner their feedback
        return [f"your model's graph could not be compared with the reference's ({type(e).__name__})"]
