"""Known answers to the residual exercise (see autograder/authoring/variants.py)."""
from autograder.authoring.variants import Bug, Correct

LN_RSQRT = '''class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mu) * torch.rsqrt(var + self.eps) + self.bias
'''

LN_CENTRED = '''class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        centred = x - x.sum(dim=-1, keepdim=True) / self.d_model
        var = (centred * centred).sum(dim=-1, keepdim=True) / self.d_model
        return centred / (var + self.eps).sqrt() * self.weight + self.bias
'''

FF_MODULES = '''class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.act = nn.ReLU()
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(self.act(self.linear1(x)))
'''

BLOCK_TORCH_STYLE = '''class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.norm_first = norm_first

    def _sa_block(self, x, mask):
        return self.attn(x, x, x, mask=mask)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), mask)
            x = x + self.ff(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, mask))
            x = self.norm2(x + self.ff(x))
        return x
'''

BLOCK_STREAM_NAMES = '''class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.pre = norm_first
        self.norm1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.norm2 = LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff)

    def forward(self, x, mask=None):
        resid_pre = x
        if self.pre:
            resid_mid = resid_pre + self.attn(self.norm1(resid_pre), mask=mask)
            resid_post = resid_mid + self.ff(self.norm2(resid_mid))
        else:
            resid_mid = self.norm1(resid_pre + self.attn(resid_pre, mask=mask))
            resid_post = self.norm2(resid_mid + self.ff(resid_mid))
        return resid_post
'''

FF_SEQUENTIAL_ALIASES = """class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.linear1, nn.ReLU(), self.linear2)     # the same layers, listed in order

    def forward(self, x):
        return self.net(x)
"""

# ... made first, the contract's names given after: its parameters come first under the Sequential's names
FF_SEQUENTIAL_FIRST = """class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.linear1, self.linear2 = self.net[0], self.net[2]

    def forward(self, x):
        return self.net(x)
"""

# A LayerNorm checked against torch's own when its cell runs: the library there is a self-check, not the part's use.
LN_SELF_CHECKED = LN_RSQRT + """

DEBUG = False
_x = torch.randn(3, 8)
assert torch.allclose(LayerNorm(8)(_x), torch.nn.functional.layer_norm(_x, (8,)), atol=1e-5)
if DEBUG:
    print("layernorm checked against torch.nn.functional.layer_norm")
"""


def changed(source: str, old: str, new: str) -> str:
    """`source` with `old` replaced by `new` (which must be there: a variant that changes nothing is no variant)."""
    assert old in source, old
    return source.replace(old, new)


def bug(name: str, cells: dict, cause: str, together: str = "", about: str = ""):
    """A known mistake whose graded cell names `cause`; `together`: what the block's test with the learner's own
    parts says of it (a mistake in a part the block uses)."""
    part = next(iter(cells))
    return Bug(name, cells, {f"{part}_tests": cause}, about, cause=cause,
               together={"TransformerBlock_tests": together} if together else {})


LN_OWN = "your LayerNorm gives wrong results on its own"
FF_OWN = "your FeedForward gives wrong results on its own"
# The self-check first, of a helper, then the class: where the grader refuses the library call, that statement alone
# is skipped and the cell goes on, as in Jupyter it runs on (autograder.inside.guard.run_statements).
LN_CHECKED_FIRST = """def _norm(x, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(((x - mean) ** 2).mean(dim=-1, keepdim=True) + eps)


_x = torch.randn(2, 5, 8)
assert torch.allclose(_norm(_x), torch.nn.functional.layer_norm(_x, (8,)), atol=1e-5)


""" + LN_RSQRT


VARIANTS = [
    Correct("rsqrt_and_modules",
            {"LayerNorm": LN_RSQRT, "FeedForward": FF_MODULES, "TransformerBlock": BLOCK_TORCH_STYLE},
            "torch.var(unbiased=False) with rsqrt, nn.ReLU as a module, a helper for the attention sublayer"),
    Correct("centred_sums_and_named_stream", {"LayerNorm": LN_CENTRED, "TransformerBlock": BLOCK_STREAM_NAMES},
            "mean and variance from sums, the residual stream named resid_pre / resid_mid / resid_post"),
    Correct("self_checked_layernorm", {"LayerNorm": LN_SELF_CHECKED},
            "a self-check against F.layer_norm and a print under `if DEBUG:`, run when the cell runs"),
    Correct("self_check_before_layernorm", {"LayerNorm": LN_CHECKED_FIRST},
            "a helper checked against F.layer_norm before the class, in the same cell, run when the cell runs"),
    Correct("ff_sequential_aliases", {"FeedForward": FF_SEQUENTIAL_ALIASES},
            "linear1 and linear2 kept, and listed again in an nn.Sequential: more names in state_dict, the same "
            "layers"),
    Correct("ff_sequential_first", {"FeedForward": FF_SEQUENTIAL_FIRST},
            "an nn.Sequential made first, linear1 and linear2 named after it: named_parameters() lists the layers "
            "under the Sequential's names only"),
    bug("ln_unbiased_variance", {"LayerNorm": changed(LN_RSQRT, "unbiased=False", "unbiased=True")},
        "the variance is the unbiased one (divided by d_model - 1); LayerNorm divides by d_model", LN_OWN,
        "torch.var's default"),
    bug("ln_eps_outside_sqrt", {"LayerNorm": changed(LN_CENTRED, "(var + self.eps).sqrt()",
                                                     "(var.sqrt() + self.eps)")},
        "eps is outside the square root: divide by sqrt(var + eps), not sqrt(var) + eps", LN_OWN,
        "a small error on ordinary rows, a large one on nearly constant rows"),
    bug("ln_no_affine", {"LayerNorm": changed(LN_RSQRT,
                                              "return self.weight * (x - mu) * torch.rsqrt(var + self.eps) + self.bias",
                                              "return (x - mu) * torch.rsqrt(var + self.eps)")},
        "weight and bias are not applied: the output is the normalised x * weight + bias", LN_OWN),
    bug("ln_eps_ignored", {"LayerNorm": changed(LN_RSQRT, "torch.rsqrt(var + self.eps)", "torch.rsqrt(var + 1e-5)")},
        "the eps argument is ignored: 1e-5 is used whatever it is"),
    bug("ln_wrong_dim", {"LayerNorm": changed(changed(LN_RSQRT, "mu = x.mean(-1, keepdim=True)",
                                                      "mu = x.mean(1, keepdim=True)"),
                                              "var = x.var(-1, keepdim=True, unbiased=False)",
                                              "var = x.var(1, keepdim=True, unbiased=False)")},
        "the mean and variance are taken over dim 1, not the last dimension: each vector along dim -1 is normalised "
        "on its own", LN_OWN),
    bug("ff_no_relu", {"FeedForward": changed(FF_MODULES, "self.act(self.linear1(x))", "self.linear1(x)")},
        "the ReLU between linear1 and linear2 is missing", FF_OWN),
    bug("ff_gelu", {"FeedForward": changed(FF_MODULES, "nn.ReLU()", "nn.GELU()")},
        "the activation is GELU; this exercise uses ReLU", FF_OWN),
    bug("ff_relu_after", {"FeedForward": changed(FF_MODULES, "return self.linear2(self.act(self.linear1(x)))",
                                                 "return self.act(self.linear2(self.act(self.linear1(x))))")},
        "a ReLU is applied after linear2 too: the output is linear2(...) as it is", FF_OWN),
    bug("block_placement_swapped", {"TransformerBlock": changed(BLOCK_TORCH_STYLE, "if self.norm_first:",
                                                                "if not self.norm_first:")},
        "Pre-LN and Post-LN are swapped: with norm_first=True, x = x + attn(norm1(x)), then x = x + ff(norm2(x)); "
        "with norm_first=False, x = norm1(x + attn(x)), then x = norm2(x + ff(x))"),
    bug("block_no_attention_residual", {"TransformerBlock": changed(changed(BLOCK_STREAM_NAMES,
        "resid_mid = resid_pre + self.attn(self.norm1(resid_pre), mask=mask)",
        "resid_mid = self.attn(self.norm1(resid_pre), mask=mask)"),
        "resid_mid = self.norm1(resid_pre + self.attn(resid_pre, mask=mask))",
        "resid_mid = self.norm1(self.attn(resid_pre, mask=mask))")},
        "the residual around the attention is missing: its output is added to x (x = x + ...)"),
    bug("block_no_ff_residual", {"TransformerBlock": changed(changed(BLOCK_STREAM_NAMES,
        "resid_post = resid_mid + self.ff(self.norm2(resid_mid))", "resid_post = self.ff(self.norm2(resid_mid))"),
        "resid_post = self.norm2(resid_mid + self.ff(resid_mid))", "resid_post = self.norm2(self.ff(resid_mid))")},
        "the residual around the feed-forward is missing: its output is added to x (x = x + ...)"),
    bug("block_norms_swapped", {"TransformerBlock": changed(changed(changed(changed(BLOCK_STREAM_NAMES,
        "self.attn(self.norm1(resid_pre)", "self.attn(self.norm2(resid_pre)"),
        "self.ff(self.norm2(resid_mid))", "self.ff(self.norm1(resid_mid))"),
        "resid_mid = self.norm1(resid_pre +", "resid_mid = self.norm2(resid_pre +"),
        "resid_post = self.norm2(resid_mid +", "resid_post = self.norm1(resid_mid +")},
        "norm1 and norm2 are swapped: norm1 goes with the attention, norm2 with the feed-forward"),
    bug("block_stream_normalised", {"TransformerBlock": changed(BLOCK_STREAM_NAMES,
        """            resid_mid = resid_pre + self.attn(self.norm1(resid_pre), mask=mask)
            resid_post = resid_mid + self.ff(self.norm2(resid_mid))""",
        """            h = self.norm1(resid_pre)
            resid_mid = h + self.attn(h, mask=mask)
            h = self.norm2(resid_mid)
            resid_post = h + self.ff(h)""")},
        "the residual stream itself is normalised: in Pre-LN only what each sublayer reads is, "
        "x = x + attn(norm1(x)), and x is carried on as it is"),
    bug("block_mask_ignored", {"TransformerBlock": changed(BLOCK_TORCH_STYLE, "self.attn(x, x, x, mask=mask)",
                                                           "self.attn(x, x, x)")},
        "the mask is not passed to the attention: self.attn(..., mask=mask)",
        about="mask is an argument of forward, never used"),
    bug("block_in_place", {"TransformerBlock": """class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            x += self.attn(self.norm1(x), mask=mask)
            x += self.ff(self.norm2(x))
            return x
        x = self.norm1(x + self.attn(x, mask=mask))
        return self.norm2(x + self.ff(x))
"""}, "x += ... writes the sublayer's output into the caller's x; write x = x + ...", about="x += ... in the "
      "Pre-LN branch"),
    Bug("block_loop_over_batch", {"TransformerBlock": changed(changed(BLOCK_STREAM_NAMES,
        "self.attn(self.norm1(resid_pre), mask=mask)", "self._attend(self.norm1(resid_pre), mask)"),
        "self.attn(resid_pre, mask=mask)", "self._attend(resid_pre, mask)") + """
    def _attend(self, x, mask):
        per_sequence = mask is not None and mask.dim() > 2 and mask.shape[0] > 1
        return torch.cat([self.attn(x[b:b + 1], mask=mask[b:b + 1] if per_sequence else mask)
                          for b in range(x.shape[0])])
"""}, {"TransformerBlock_tests": "the reference solution calls it once"},
        "right values, but attention called once per sequence of the batch", kind="speed"),
    Bug("block_library_norms", {"TransformerBlock": changed(BLOCK_TORCH_STYLE,
        "self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)",
        "self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)")},
        {"TransformerBlock_tests": "library version"}, "torch.nn.LayerNorm instead of the learner's own",
        kind="library"),
]

# The known mistakes each visible check catches: variant -> (visible-check cell, text of its message).
VISIBLE = {
    "ln_unbiased_variance": ("LayerNorm_checks", "not d_model - 1"),
    "ln_eps_outside_sqrt": ("LayerNorm_checks", "eps goes inside the square root"),
    "ff_no_relu": ("FeedForward_checks", "the ReLU goes between linear1 and linear2"),
    "block_placement_swapped": ("TransformerBlock_checks", "Pre-LN: when the sublayers add 0"),
    "block_no_attention_residual": ("TransformerBlock_checks", "Pre-LN: when the sublayers add 0"),
    "block_in_place": ("TransformerBlock_checks", "modified x in place"),
    "block_mask_ignored": ("TransformerBlock_checks", "pass mask to self.attn"),
    "ln_wrong_dim": ("LayerNorm_checks", "yours has mean 0 over dimension 1"),
    "ff_relu_after": ("FeedForward_checks", "the ReLU goes between linear1 and linear2"),
    "block_no_ff_residual": ("TransformerBlock_checks", "Pre-LN: when the sublayers add 0"),
    "block_stream_normalised": ("TransformerBlock_checks", "Pre-LN: when the sublayers add 0"),
}
# The known mistakes no visible check can see, and why: only the hidden tests catch them.
HIDDEN_ONLY = {
    "block_library_norms": "right values: the grader sees the library call",
    "block_loop_over_batch": "right values: the grader counts the attention's calls as it serves them",
    "ln_no_affine": "the visible checks use the initial weight and bias, ones and zeros",
    "ln_eps_ignored": "the visible checks use the default eps",
    "ff_gelu": "the visible checks' inputs do not tell GELU from ReLU apart",
    "block_norms_swapped": "the visible checks use LayerNorms as constructed, which are alike",
}

# The book's section that teaches each mistake, where it is not the one section its part's description names (the
# class report's re-teach link): `<page>#<id>`, book/<page>.md and the id Sphinx gives the heading.
SECTIONS = {
    "ln_unbiased_variance": "residual#layernorm",
    "ln_eps_outside_sqrt": "residual#what-epsilon-is-for",
    "ln_no_affine": "residual#layernorm",
    "ln_eps_ignored": "residual#what-epsilon-is-for",
    "ln_wrong_dim": "residual#layernorm",
    "block_mask_ignored": "together#the-block",
}
