"""The static reading of a learner's source (autograder.verdict.static): every route to a library version of
an exercise is proven, every construct a reading cannot follow is flagged, honest code is neither."""
import pytest
from helpers import ASSIGNMENTS, BINDINGS, CONSTRUCTS, IDIOMS, LOOKUPS, MODULES, in_part, route
from hypothesis import given, settings
from hypothesis import strategies as st

from autograder.authoring import variants
from autograder.notebooks import TESTS_SUFFIX, graded_cells, learner_cells
from autograder.verdict import static

SETUP = "import math\n\nimport torch\nfrom torch import nn\n"
GRADED = {"scaled_dot_product_attention", "MultiHeadAttention", "LayerNorm"}


def findings(source: str, cell: str = "scaled_dot_product_attention", extra: list | None = None):
    cells = [{"id": "setup", "source": SETUP}, {"id": cell, "source": source}, *(extra or [])]
    r = static.analyse(cells, GRADED)
    return [f.what for f in r.library[cell]], [f.what for f in r.suspicious[cell]]


@pytest.mark.parametrize("source,path", [
    ("import torch.nn.functional as F\nF.scaled_dot_product_attention(q, k, v)",
     "torch.nn.functional.scaled_dot_product_attention"),
    ("torch.nn.functional.scaled_dot_product_attention(q, k, v)", "torch.nn.functional.scaled_dot_product_attention"),
    ("torch._C._nn.scaled_dot_product_attention(q, k, v)", "torch._C._nn.scaled_dot_product_attention"),
    ("torch.ops.aten._scaled_dot_product_attention_math(q, k, v)", "torch.ops.aten._scaled_dot_product_attention_math"),
    ("torch.native_layer_norm(x, (4,), None, None, 1e-5)", "torch.native_layer_norm"),
    ("torch.ops.aten.layer_norm.default(x, (4,))", "torch.ops.aten.layer_norm"),
    ("from torch.nn.functional import layer_norm as ln\nln(x, (4,))", "torch.nn.functional.layer_norm"),
    ("from torch.nn import MultiheadAttention", "torch.nn.MultiheadAttention"),
    ("G = torch.nn.functional\nH = G\nH.layer_norm(x, (4,))", "torch.nn.functional.layer_norm"),
    ("getattr(torch.nn, 'LayerNorm')(4)", "torch.nn.LayerNorm"),
    ("nn.LayerNorm(4)", "torch.nn.LayerNorm"),
    ("nn.modules.normalization.LayerNorm(4)", "torch.nn.modules.normalization.LayerNorm"),
    ("nn.TransformerEncoderLayer(8, 2)", "torch.nn.TransformerEncoderLayer"),
    ("torch._native_multi_head_attention(q, k, v, 8, 2, w, b, w2, b2)", "torch._native_multi_head_attention"),
    ("F = torch.nn.functional\nF.group_norm(x, 1)", "torch.nn.functional.group_norm"),
    ("import torch._refs\ntorch._refs.native_layer_norm(x, (4,), None, None, 1e-5)", "torch._refs.native_layer_norm"),
])
def test_every_route_to_a_library_version_is_proven(source, path):
    library, _ = findings("def scaled_dot_product_attention(q, k, v, mask=None):\n    x = q\n" +
                          "\n".join("    " + line for line in source.splitlines()))
    assert path in library, library


@pytest.mark.parametrize("source,why", CONSTRUCTS)
def test_constructs_a_reading_cannot_follow_are_flagged(source, why):
    """In a graded part's own code, flagged (autograder.verdict.static); the same code is refused while it runs
    (tests/test_guard.py)."""
    _, suspicious = findings(in_part(source))
    assert any(why in s for s in suspicious), suspicious


@pytest.mark.parametrize("source", [
    "name = 'scaled_dot_product_attention'",
    "getattr(torch, 'nn')",
    "class LayerNorm(nn.Module):\n    def forward(self, x):\n        return self.layer_norm(x)",
    "def layer_norm(x):\n    return x\nlayer_norm(torch.zeros(2))",
    "class M(nn.Module):\n    def __init__(self):\n        for n in ('a', 'b'):\n"
    "            setattr(self, n, nn.Linear(2, 2))",
    "y = torch.softmax(torch.einsum('...id,...jd->...ij', q, k) / math.sqrt(4), -1)",
    "out = scaled_dot_product_attention(q, k, v)[0]",
    "mask = torch.ones(3, 3, dtype=torch.bool).tril()",
    "x = getattr(self, 'q_proj')(x)",
])
def test_honest_code_is_neither_proven_nor_flagged(source):
    assert findings(source) == ([], [])


def test_a_helper_carries_its_findings_to_the_part_that_uses_it():
    helper = {"id": "helpers",
              "source": "def _fast(q, k, v):\n    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n"}
    library, _ = findings("def scaled_dot_product_attention(q, k, v, mask=None):\n    return _fast(q, k, v), None",
                          extra=[helper])
    assert library == ["torch.nn.functional.scaled_dot_product_attention"]


def test_an_import_in_a_cell_the_learner_added_counts_for_the_part_that_uses_it():
    added = {"id": "cell-3", "source": "from torch.nn.functional import scaled_dot_product_attention as _sdpa\n"}
    library, _ = findings("def scaled_dot_product_attention(q, k, v, mask=None):\n    return _sdpa(q, k, v), None",
                          extra=[added])
    assert library == ["torch.nn.functional.scaled_dot_product_attention"]


def test_another_graded_part_does_not_carry_its_findings():
    """MultiHeadAttention is graded on its own: calling the learner's scaled_dot_product_attention (which
    uses the library) costs the attention part, not this one."""
    sdpa = {"id": "scaled_dot_product_attention",
            "source": "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                      "    return torch.nn.functional.scaled_dot_product_attention(q, k, v), None\n"}
    library, _ = findings("class MultiHeadAttention(nn.Module):\n    def forward(self, x):\n"
                          "        return scaled_dot_product_attention(x, x, x)[0]", cell="MultiHeadAttention",
                          extra=[sdpa])
    assert library == []


def test_unparsable_source_gives_no_finding():
    assert findings("def broken(:\n") == ([], [])


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_no_correct_answer_is_proven_or_flagged(asg):
    """Read as the grader reads it: with the modules the exercise's suite allows beyond the course's (Triton)."""
    suite = __import__(f"autograder.verdict.suites.test_{asg}", fromlist=["A"])
    for v in [None, *[v for v in variants.load(asg) if isinstance(v, variants.Correct)]]:
        nb = variants.submission(asg, v.cells if v else None)
        r = static.analyse(learner_cells(nb), {g.removesuffix(TESTS_SUFFIX) for g in graded_cells(nb)},
                           modules=getattr(suite, "ALLOWED_MODULES", ()))
        assert not any(r.library.values()) and not any(r.suspicious.values()), (v and v.name, r)


# -- a generator of obfuscations (tests/helpers.py: ROUTES) -------------------------------------------------------
@pytest.mark.parametrize("binding", BINDINGS)
def test_no_single_binding_passes_as_honest_code(binding):
    for module in MODULES:
        for lookup in LOOKUPS:
            source = route(module, [binding], lookup)
            assert any(findings(source)), source


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.sampled_from(MODULES), st.lists(st.sampled_from(BINDINGS), min_size=1, max_size=3),
       st.sampled_from(LOOKUPS))
def test_no_obfuscated_route_passes_as_honest_code(module, bindings, lookup):
    source = route(module, bindings, lookup)
    assert any(findings(source)), source


# -- a finding belongs to the code that reaches it ------------------------------------------------------------------
def report(cells: dict[str, str], graded=frozenset({"LayerNorm", "FeedForward"}), **kw):
    return static.analyse([{"id": "setup", "source": SETUP}, *({"id": k, "source": v} for k, v in cells.items())],
                          set(graded), **kw)


LN = ("class LayerNorm(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
      "        self.w = nn.Parameter(torch.ones(d))\n\n    def forward(self, x):\n        return BODY\n")
FF = "class FeedForward(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"


def test_a_helper_s_finding_is_its_caller_s_alone():
    r = report({"LayerNorm": "import torch._refs\n\n\ndef _norm(x):\n    return torch._refs.var(x)\n\n\n"
                             + LN.replace("BODY", "_norm(x)"), "FeedForward": FF})
    assert [f.what for f in r.suspicious["LayerNorm"]] == ["uses torch._refs.var, outside the modules this course's "
                                                           "code uses"]
    assert r.suspicious["FeedForward"] == [] and r.library["FeedForward"] == []


def test_a_self_check_at_module_level_is_a_note_not_the_part_s_use():
    check = ("\n_x = torch.randn(2, 4)\n"
             "assert torch.allclose(LayerNorm(4)(_x), torch.nn.functional.layer_norm(_x, (4,)))\n")
    r = report({"LayerNorm": LN.replace("BODY", "x * self.w") + check, "FeedForward": FF})
    assert r.library["LayerNorm"] == [] and r.suspicious["LayerNorm"] == []
    assert [f.what for f in r.notes["LayerNorm"]] == ["torch.nn.functional.layer_norm"]
    assert r.notes["FeedForward"] == []


def test_code_that_runs_with_its_cell_is_a_note_for_its_cell_s_parts():
    """A plot or a self-check at module level is no graded part's use: a note for the parts of its cell (the worker
    refuses, where it runs, whatever the policy does not allow: tests/test_guard.py), never a flag on every part."""
    r = report({"LayerNorm": LN.replace("BODY", "x") + "\nimport gc\n_all = gc.get_objects()\n", "FeedForward": FF})
    assert not any(r.suspicious.values())
    assert any("gc.get_objects" in f.what for f in r.notes["LayerNorm"]) and r.notes["FeedForward"] == []
    plot = ("\nimport matplotlib.pyplot as plt\nimport numpy as np\nnp.random.seed(0)\n"
            "plt.plot(np.linalg.norm(np.random.randn(3, 4), axis=1))\n")
    r = report({"LayerNorm": LN.replace("BODY", "x") + plot, "FeedForward": FF})
    assert not any(r.suspicious.values()) and not any(r.notes.values()), r


def test_a_name_built_while_the_code_runs_says_what_is_allowed():
    r = report({"FeedForward": "import torch.nn.functional as F\n\n\nclass FeedForward(nn.Module):\n"
                               "    def forward(self, x, activation='relu'):\n"
                               "        return getattr(F, activation)(x)\n"})
    said = [f.what for f in r.suspicious["FeedForward"]]
    assert len(said) == 1 and "torch.nn.functional" in said[0] and "allowed there" in said[0], said


def test_an_alias_chain_of_4000_names_is_read_in_linear_steps():
    """4,000 names, each bound to the next, in reverse order, the last to the module: resolved once each (a reading
    by rounds took two minutes), so the reading's steps grow with the code's size, not its square, and the route
    through them is proven. (Its time, 500 to 8,000 names, is measured by bench/library_ban.py.)"""
    def chain(n):
        return "\n".join(f"_a{i} = _a{i + 1}" for i in range(n)) + f"\n_a{n} = torch.nn.functional\n"

    small = report({"LayerNorm": chain(1000) + LN.replace("BODY", "_a0.layer_norm(x, (4,))")})
    r = report({"LayerNorm": chain(4000) + LN.replace("BODY", "_a0.layer_norm(x, (4,))")})
    assert not r.too_large
    assert [f.what for f in r.library["LayerNorm"]] == ["torch.nn.functional.layer_norm"]
    assert r.steps < 5 * small.steps, (small.steps, r.steps)     # 4 x the code: 4 x the steps, 16 x were it quadratic


def test_a_reading_past_its_deadline_flags_every_part_as_too_large():
    r = report({"LayerNorm": "\n".join(f"_b{i} = _b{i + 1}" for i in range(20000))}, deadline_s=0.0)
    assert r.too_large


# -- honest code, generated (tests/helpers.py: IDIOMS): every idiom a good learner writes, in any combination, is
# neither proven nor flagged ------------------------------------------------------------------------------------------
@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.lists(st.sampled_from(IDIOMS), min_size=1, max_size=6))
def test_generated_honest_code_is_neither_proven_nor_flagged(idioms):
    header = "import functools\nimport operator\nimport types\nimport itertools\nimport collections\n" \
             "import dataclasses\nimport typing\nimport numpy as np\nDEBUG = False\n\n\n"
    body = "\n".join("        " + line for idiom in idioms for line in idiom.splitlines())
    source = header + ("class LayerNorm(nn.Module):\n    def forward(self, x):\n" + body + "\n        return x\n")
    r = report({"LayerNorm": source}, graded={"LayerNorm"})
    assert r.library["LayerNorm"] == [] and r.suspicious["LayerNorm"] == [] and not r.too_large, (source, r)
