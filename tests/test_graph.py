"""autograder/graph/ and autograder/inside/tracer.py: the traced structure of the course's models, the differences it
names for the known answers, its drawings, and what it does with a model it cannot trace or a graph that is junk."""
import json
import re
import subprocess
import sys
import time

import pytest
import torch
from helpers import ROOT, leaks, secret_lines
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autograder import graph
from autograder.authoring import variants
from autograder.notebooks import learner_cells, read, source_notebook
from autograder.verdict.learner import Learner

B, L, D, D_FF = graph.SIZES["B"], graph.SIZES["L"], graph.SIZES["d_model"], graph.SIZES["d_ff"]
MODEL = {"residual": "TransformerBlock", "transformer": "TinyTransformer"}

# The known mistakes that change the structure, and what their difference must say, per norm_first (None: the
# mistake lives only in the other branch, and the graph must match the reference's).
STRUCTURAL = {
    "ff_no_relu": {True: "no nonlinearity", False: "no nonlinearity"},
    "block_placement_swapped": {True: "normalises after the addition (post-LN) when norm_first=True",
                                False: "normalises before the sublayers (pre-LN) when norm_first=False"},
    "block_no_attention_residual": {True: "no residual connection around the attention",
                                    False: "no residual connection around the attention"},
    "block_mask_ignored": {True: "no mask reaches your block's attention",
                           False: "no mask reaches your block's attention"},
    "block_in_place": {True: "in place (x += ...)", False: None},
    # run once per sequence: named as such, not as a missing residual (what the pieces join is read through a cat)
    "block_loop_over_batch": {True: "runs its attention 2 times in one forward pass",
                              False: "runs its attention 2 times in one forward pass"},
    "block_library_norms": {True: "norm1 and norm2 are torch.nn.LayerNorm", False: "are torch.nn.LayerNorm"},
    "no_positions": {True: "your model never adds positions", False: "your model never adds positions"},
    "no_causal_mask": {True: "no mask reaches your blocks' attention", False: "no mask reaches your blocks' attention"},
    "mask_first_block_only": {True: "no mask reaches the second block's attention",
                              False: "no mask reaches the second block's attention"},
    "shared_block": {True: "one block is shared by all layers", False: "one block is shared by all layers"},
    "embeddings_scaled": {True: "scales the token embeddings", False: "scales the token embeddings"},
    "logits_transposed": {True: "returns shape (B, vocab_size, L)", False: "returns shape (B, vocab_size, L)"},
    "library_blocks": {True: "torch.nn.TransformerEncoderLayer, not your own TransformerBlock",
                       False: "torch.nn.TransformerEncoderLayer, not your own TransformerBlock"},
    "ff_gelu": {True: "applies gelu where the reference applies relu",
                False: "applies gelu where the reference applies relu"},
    # pre-LN without the residual around the feed-forward also reads as the attention's sum normalised twice
    "block_no_ff_residual": {True: ("no residual connection around the feed-forward", "normalises both before"),
                             False: "no residual connection around the feed-forward"},
    "block_stream_normalised": {True: "normalises after the addition (post-LN) when norm_first=True", False: None},
    "post_ln_no_final_norm": {True: None, False: "no final LayerNorm between the last block and the head"},
}
# Mistakes in the arithmetic inside a part, or in what a module keeps between calls: the network's structure is the
# reference's.
NOT_STRUCTURAL = {"ln_unbiased_variance", "ln_eps_outside_sqrt", "ln_no_affine", "ln_eps_ignored", "ln_wrong_dim",
                  "ff_relu_after", "block_norms_swapped", "pasted_layernorm_unbiased", "pasted_attention_unscaled",
                  "mask_cached_by_length"}
UNTRACEABLE = {"pasted_block_missing": "name 'TransformerBlock' is not defined"}


def namespace(asg, cells=None):
    """The names the solution notebook defines, with a variant's cells in place of the reference's."""
    ref = variants.reference_sources(asg)
    ns = {"__name__": f"variant_{asg}"}
    for cell in learner_cells(read(source_notebook(asg))):
        source = (cells or {}).get(cell["id"]) or ref.get(cell["id"]) or cell["source"]
        exec(compile(source, f"<{asg}:{cell['id']}>", "exec"), ns)
    return ns


_refs = {}


def reference(asg, norm_first=True):
    if (asg, norm_first) not in _refs:
        _refs[asg, norm_first] = graph.trace_named(namespace(asg), MODEL[asg], norm_first=norm_first)
    return _refs[asg, norm_first]


def by_id(nodes):
    return {n["id"]: n for n in nodes}


def stream_adds(g, block=""):
    """The additions a block's own code makes: its residual stream."""
    return [n for n in g["nodes"] if n["kind"] == "call" and n["group"] == block and n["op"] == "add"]


# --- the reference block and model ---------------------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [True, False])
def test_reference_block_has_two_adds_on_a_stream_of_width_d_model(norm_first):
    g = reference("residual", norm_first)
    nodes = by_id(g["nodes"])
    adds = stream_adds(g)
    assert len(adds) == 2, [n["id"] for n in adds]
    assert all(n["shape"] == [B, L, D] for n in adds)
    assert nodes[g["outputs"][0]]["shape"] == [B, L, D] and nodes["x"]["shape"] == [B, L, D]
    if norm_first:                                            # the stream: x -> add -> add -> output
        reads = {n: [a for a, b in g["edges"] if b == n] for n in nodes}
        assert g["outputs"] == [adds[1]["id"]] and adds[0]["id"] in reads[adds[1]["id"]] and "x" in reads[adds[0]["id"]]
    wide = {n["group"] for n in g["nodes"] if n["kind"] == "call" and D_FF in (n["shape"] or [])}
    assert wide and all(gr == "ff" or gr.startswith("ff.") for gr in wide), wide
    groups = {gr["id"]: gr["type"] for gr in g["groups"]}
    assert {groups[k] for k in ("attn", "ff", "norm1", "norm2")} == {"MultiHeadAttention", "FeedForward",
                                                                     "LayerNorm"}
    attn_ops = {n["op"] for n in g["nodes"] if n["group"].startswith("attn")}
    assert {"linear", "matmul", "masked_fill", "exp", "transpose"} <= attn_ops
    assert json.loads(json.dumps(g)) == g                     # plain data


@pytest.mark.parametrize("norm_first", [True, False])
def test_backward_fans_out_at_each_residual_add(norm_first):
    g = reference("residual", norm_first)
    fwd, back = by_id(g["nodes"]), g["backward"]
    bnodes = by_id(back["nodes"])
    for add in stream_adds(g):
        grads = [n for n in back["nodes"] if n["forward"] == add["id"]]
        assert [n["op"] for n in grads] == ["AddBackward0"], add["id"]
        nexts = [bnodes[e[1]] for e in back["edges"] if e[0] == grads[0]["id"]]
        assert len(nexts) == 2, f"{add['id']}: the gradient goes to {len(nexts)} places"
        into = {fwd[n["forward"]]["group"].split(".")[0] for n in nexts}
        branch = "attn" if add["id"] == stream_adds(g)[0]["id"] else "ff"
        assert branch in into, (add["id"], into)              # one copy into the branch, one along the stream
    assert {"AccumulateGrad", "AddBackward0", "ExpBackward0", "MaskedFillBackward0"} <= {n["op"] for n in back["nodes"]}
    assert any(n["forward"] == "x" for n in back["nodes"])    # the gradient reaches the block's input


def test_reference_model_graph():
    g = reference("transformer")
    types = {gr["id"]: gr["type"] for gr in g["groups"]}
    assert [k for k, t in types.items() if t == "TransformerBlock"] == ["blocks.0", "blocks.1"]
    assert {"blocks.0.attn", "blocks.1.ff", "embed", "norm", "head"} <= set(types)
    assert len(stream_adds(g)) == 1                           # the positional encoding
    assert all(len(stream_adds(g, b)) == 2 for b in ("blocks.0", "blocks.1"))
    assert by_id(g["nodes"])[g["outputs"][0]]["shape"] == [B, L, graph.SIZES["vocab_size"]]
    assert graph.differences(g, g) == []


# --- the known answers ---------------------------------------------------------------------------------------------

def _variants():
    return [(asg, v, nf) for asg in MODEL for v in variants.load(asg) for nf in (True, False)]


@pytest.mark.parametrize("asg,variant,norm_first", _variants(),
                         ids=lambda x: getattr(x, "name", x if isinstance(x, str) else f"norm_first={x}"))
def test_variant_differences(asg, variant, norm_first):
    g = graph.trace_named(namespace(asg, variant.cells), MODEL[asg], norm_first=norm_first)
    if variant.name in UNTRACEABLE:
        assert UNTRACEABLE[variant.name] in g.get("error", ""), g
        return
    assert "error" not in g, g["error"]
    found = graph.differences(g, reference(asg, norm_first))
    expected = None if isinstance(variant, variants.Correct) or variant.name in NOT_STRUCTURAL else \
        STRUCTURAL[variant.name][norm_first]
    expected = (expected,) if isinstance(expected, str) else expected or ()
    assert len(found) == len(expected) and all(e in f for e, f in zip(expected, found)), (
        f"{variant.name}: expected {expected!r}, got {found}")


def test_every_known_mistake_is_classified():
    names = {v.name for asg in MODEL for v in variants.load(asg) if isinstance(v, variants.Bug)}
    assert names == set(STRUCTURAL) | NOT_STRUCTURAL | set(UNTRACEABLE)


def test_a_learners_model_is_traced_in_the_sandbox():
    """The learner's worker traces its model inside the sandbox (tracer.py is one of the worker's files); the
    trusted side gets plain data and names the difference."""
    bug = next(v for v in variants.load("transformer") if v.name == "shared_block")
    worker = Learner(learner_cells(variants.submission("transformer", bug.cells)))
    try:
        g = worker.request({"op": "graph", "name": "TinyTransformer"}, what="drawing")["ok"]
    finally:
        worker.close()
    assert graph.differences(g, reference("transformer")) == [
        "one block is shared by all layers: the same TransformerBlock, with one set of weights, runs 2 times; "
        "build a new TransformerBlock for each layer"]


# --- what cannot be traced, and junk ---------------------------------------------------------------------------------

class DataDependent(torch.nn.Module):
    def forward(self, x, mask=None):
        if x.sum() > 0:                      # a branch on a tensor's value
            return x * 2
        return x


class Raises(torch.nn.Module):
    def forward(self, x, mask=None):
        raise ValueError("not yet")


def test_a_model_that_cannot_be_traced_gets_a_note():
    x = torch.randn(B, L, D)
    g = graph.trace(DataDependent(), x)
    assert set(g) >= {"error", "root"} and "values in a tensor" in g["error"], g
    assert "x.sum() > 0" in g["error"]                        # the line that did it
    assert json.loads(json.dumps(g)) == g
    found = graph.differences(g, reference("residual"))
    assert len(found) == 1 and "cannot be traced" in found[0]
    page = graph.side_by_side_html(g, reference("residual"))
    assert "cannot be traced" in page and page.count("<svg") == 1
    g = graph.trace(Raises(), x)
    assert "ValueError: not yet" in g["error"]
    g = graph.trace_named({"TransformerBlock": lambda *a, **k: 1 / 0}, "TransformerBlock")
    assert "ZeroDivisionError" in g["error"]


class DrawnHeavy(torch.nn.Module):
    """A module that adds `extra` no-op operations, joined at random, only while torch.export traces it."""

    def __init__(self, extra):
        super().__init__()
        self.extra, self.lin = extra, torch.nn.Linear(D, D)

    def forward(self, x, mask=None):
        out = self.lin(x)
        if torch.compiler.is_exporting():
            vals = [out]
            for i in range(self.extra):
                n = len(vals)
                vals.append(torch.addcmul(vals[(i * 7919) % n], vals[(i * 104729 + 3) % n], vals[(i * 31 + 5) % n],
                                          value=0.0))
            out = vals[-1]
        return out


def test_a_learner_s_drawing_stays_within_its_budget():
    """A traced graph far larger than the reference's is not drawn; a layout stops at the learner's deadline; each
    is said so in the page, and drawing never raises."""
    x, ref = torch.randn(B, L, D), reference("residual")
    most = max(4 * len(ref["nodes"]), len(ref["nodes"]) + 200)
    page = graph.side_by_side_html(graph.trace(DrawnHeavy(most + 50), x), ref)
    assert "not drawn: your traced module has" in page and page.count("<svg") == 1, page[-500:]
    ref = reference("transformer")                   # 160 operations: 600 more are drawn, in about 8 s
    heavy = graph.trace(DrawnHeavy(600), x)
    started = time.time()
    page = graph.side_by_side_html(heavy, ref, deadline=time.time() + 2.0)
    assert time.time() - started < 4.0
    assert "not drawn: its layout took more than 2 s" in page, page[-500:]
    page = graph.side_by_side_html(heavy, ref, deadline=time.time() - 1)
    assert page.count("not drawn: the time for grading this notebook was spent") == 2
    assert "as <code>torch.export</code> traced it" in page


def _junk_graphs():
    g = reference("residual")
    n0 = g["nodes"][5]["id"]
    yield from (None, 5, "graph", [], {}, {"nodes": "x"}, {"nodes": [], "edges": []}, {"nodes": [1], "edges": []})
    yield {**g, "nodes": g["nodes"] * 2}                                      # ids twice
    yield {**g, "edges": g["edges"] + [["x", "nowhere"]]}
    yield {**g, "edges": g["edges"] + [[n0, "x"], ["x", n0]]}                  # a cycle
    yield {**g, "nodes": [{**n, "shape": "big"} for n in g["nodes"]]}
    yield {**g, "nodes": [{**n, "shape": [-1, 10 ** 30]} for n in g["nodes"]]}
    yield {**g, "groups": [{**gr, "parent": gr["id"]} for gr in g["groups"]]}  # every group its own parent
    yield {**g, "groups": [{"id": "a", "parent": "b"}, {"id": "b", "parent": "a"}]}
    yield {**g, "nodes": [{"id": str(i), "op": "add"} for i in range(graph.MAX_NODES + 1)], "edges": []}
    yield {**g, "edges": [["x", "x"]] * (graph.MAX_EDGES + 1)}
    yield {**g, "groups": [{"id": "a" * 10 ** 6, "type": "<b>" * 1000}]}
    yield {**g, "backward": "junk", "root": ["not", "a", "string"]}


@pytest.mark.parametrize("junk", list(_junk_graphs()), ids=lambda j: type(j).__name__)
def test_junk_never_crashes(junk):
    found = graph.differences(junk, reference("residual"))
    assert isinstance(found, list) and all(isinstance(m, str) and len(m) <= 400 for m in found)
    assert len(found) <= graph.MAX_DIFFS
    page = graph.side_by_side_html(junk, reference("residual"))
    assert page.startswith("<section") and "<script" not in page


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_mangled_graph_never_crashes(data):
    """Any one field of any node, group or edge replaced by junk: a list of messages, never an exception."""
    g = json.loads(json.dumps(reference("transformer")))
    junk = st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=30), st.lists(st.integers(), max_size=5),
                     st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
    for _ in range(data.draw(st.integers(1, 5))):
        part = data.draw(st.sampled_from(["nodes", "groups", "edges"]))
        i = data.draw(st.integers(0, len(g[part]) - 1))
        if part == "edges":
            g["edges"][i] = data.draw(st.one_of(junk, st.lists(st.sampled_from([n["id"] for n in g["nodes"]]),
                                                                min_size=2, max_size=2)))
        else:
            key = data.draw(st.sampled_from(sorted(g[part][i])))
            g[part][i][key] = data.draw(junk)
    found = graph.differences(g, reference("transformer"))
    assert isinstance(found, list) and all(isinstance(m, str) for m in found)


def test_labels_from_learner_code_are_escaped():
    g = json.loads(json.dumps(reference("residual")))
    evil = '<script>alert("x")</script>\\N"&'
    for n in g["nodes"]:
        n["op"] = evil
        n["target"] = evil
    for gr in g["groups"]:
        gr["type"] = gr["path"] = evil
    page = graph.side_by_side_html(g, reference("residual"))
    assert "<script" not in page and "&lt;script&gt;" in page
    assert not re.search(r"\b(src|href)\s*=", page)          # self-contained: nothing to fetch


# --- drawing -------------------------------------------------------------------------------------------------------

def test_svg_is_laid_out_by_graphviz_with_groups_that_collapse():
    g = reference("transformer")
    full = graph.to_svg(g)
    assert full.startswith("<svg") and full.count('class="cluster"') == 11     # 2 x (block, attn, ff, 2 norms), norm
    folded = graph.to_svg(g, collapsed=["blocks.0", "blocks.1"])
    assert folded.count('class="node"') < full.count('class="node"') / 3
    assert "blocks.0 · TransformerBlock" in folded
    back = graph.to_svg(g, part="backward")
    assert "AddBackward0" in back


def test_side_by_side_highlights_the_differences():
    asg, bug = "residual", next(v for v in variants.load("residual") if v.name == "block_placement_swapped")
    g = graph.trace_named(namespace(asg, bug.cells), "TransformerBlock")
    page = graph.side_by_side_html(g, reference(asg))
    assert page.count("<svg") == 2 and "post-LN" in page
    learner_svg = page[page.index("<svg"):page.index("</svg>")]
    assert "#d62728" in learner_svg                            # highlighted nodes
    same = graph.side_by_side_html(reference(asg), reference(asg))
    assert "has the reference's structure" in same and "#d62728" not in same
    assert same.count("<svg") == 1 and "your model, with the reference's structure" in same    # drawn once


@pytest.mark.full     # make test draws a learner's structure in its feedback
def test_command_line_draws_a_learners_notebook(tmp_path):
    bug = next(v for v in variants.load("residual") if v.name == "block_mask_ignored")
    notebook = tmp_path / "residual.ipynb"
    variants.write(variants.submission("residual", bug.cells), notebook)
    out = tmp_path / "block.svg"
    r = subprocess.run([sys.executable, "-m", "autograder.graph", str(notebook), "TransformerBlock", "--out", str(out),
                        "--compare", "residual", "--set", "norm_first=False"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "no mask reaches your block's attention" in r.stdout
    assert out.read_text().startswith("<svg")
    r = subprocess.run([sys.executable, "-m", "autograder.graph", "transformer", "TinyTransformer", "--backward",
                        "--out", str(tmp_path / "tiny.json")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((tmp_path / "tiny.json").read_text())["root"] == "TinyTransformer"


# --- in the feedback ------------------------------------------------------------------------------------------

UNTRACEABLE_BLOCK = '''class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.norm_first = norm_first

    def forward(self, x, mask=None):
        # data-dependent Python control flow: torch.export cannot trace it ("meta" tensors hold no data to test)
        if x.device.type != "meta" and float(x.abs().max()) == 0:
            return x
        if self.norm_first:
            x = x + self.attn(self.norm1(x), mask=mask)
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.attn(x, mask=mask))
        return self.norm2(x + self.ff(x))
'''


def test_the_feedback_names_and_draws_a_learners_structure():
    """Graded through the hidden suite: the learner's block traced in its worker, compared and drawn by the trusted
    side, as an output of the graded cell; a block that cannot be traced gets a note and loses nothing for it."""
    from autograder.pipeline.score import structure_output
    from autograder.verdict import hidden

    swapped = {v.name: v for v in variants.load("residual")}["block_placement_swapped"]
    grading = hidden.grade(variants.submission("residual", swapped.cells), "residual")
    st = grading.structure["TransformerBlock_tests"]
    assert any(STRUCTURAL["block_placement_swapped"][True] in d for d in st["differences"]), st["differences"]
    out = structure_output(st)
    assert "<svg" in out.data["text/html"] and STRUCTURAL["block_placement_swapped"][True] in out.data["text/plain"]
    # the course's graph beside the learner's shows no line of the solutions that the notebook does not hold itself
    theirs = {ln.strip() for c in learner_cells(variants.submission("residual", swapped.cells))
              for ln in c["source"].splitlines()}
    shown = [ln for ln in leaks(out.data["text/html"], secret_lines()) if ln not in theirs]
    assert not shown, shown

    grading = hidden.grade(variants.submission("residual", {"TransformerBlock": UNTRACEABLE_BLOCK}), "residual")
    assert grading.fault is None, grading.fault
    st = grading.structure["TransformerBlock_tests"]
    assert "could not be drawn" in st["note"], st
    assert grading.verdicts["TransformerBlock_tests"].score == 5.0, grading.verdicts["TransformerBlock_tests"].failed
