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

VARIANTS = [
    Correct("rsqrt_and_modules",
            {"LayerNorm": LN_RSQRT, "FeedForward": FF_MODULES, "TransformerBlock": BLOCK_TORCH_STYLE},
            "torch.var(unbiased=False) with rsqrt, nn.ReLU as a module, a helper for the attention sublayer"),
    Correct("centred_sums_and_named_stream", {"LayerNorm": LN_CENTRED, "TransformerBlock": BLOCK_STREAM_NAMES},
            "mean and variance from sums, the residual stream named resid_pre / resid_mid / resid_post"),
    Bug("ln_unbiased_variance", {"LayerNorm": LN_RSQRT.replace("unbiased=False", "unbiased=True")},
        {"LayerNorm_tests": "unbiased"},
        "torch.var's default, unbiased; a right block loses only its test with the learner's own parts, which says why",
        together={"TransformerBlock_tests": "your LayerNorm gives wrong results on its own"}),
    Bug("ln_eps_outside_sqrt", {"LayerNorm": LN_CENTRED.replace("(var + self.eps).sqrt()", "(var.sqrt() + self.eps)")},
        {"LayerNorm_tests": "eps is outside the sqrt"},
        "a small error on ordinary rows, a large one on nearly constant rows",
        together={"TransformerBlock_tests": "your LayerNorm gives wrong results on its own"}),
    Bug("ff_no_relu", {"FeedForward": FF_MODULES.replace("self.act(self.linear1(x))", "self.linear1(x)")},
        {"FeedForward_tests": "ReLU is missing"},
        together={"TransformerBlock_tests": "your FeedForward gives wrong results on its own"}),
    Bug("block_placement_swapped", {"TransformerBlock": BLOCK_TORCH_STYLE.replace("if self.norm_first:",
                                                                                "if not self.norm_first:")},
        {"TransformerBlock_tests": "Pre-LN/Post-LN placement swapped"}),
    Bug("block_no_attention_residual", {"TransformerBlock": BLOCK_STREAM_NAMES.replace(
        "resid_mid = resid_pre + self.attn(self.norm1(resid_pre), mask=mask)",
        "resid_mid = self.attn(self.norm1(resid_pre), mask=mask)").replace(
        "resid_mid = self.norm1(resid_pre + self.attn(resid_pre, mask=mask))",
        "resid_mid = self.norm1(self.attn(resid_pre, mask=mask))")},
        {"TransformerBlock_tests": "residual is missing around the attention"}),
    Bug("block_mask_ignored", {"TransformerBlock": BLOCK_TORCH_STYLE.replace("self.attn(x, x, x, mask=mask)",
                                                                             "self.attn(x, x, x)")},
        {"TransformerBlock_tests": "the mask is not passed to the attention"},
        "mask is an argument of forward, never used"),
    Bug("block_in_place", {"TransformerBlock": '''class TransformerBlock(nn.Module):
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
'''}, {"TransformerBlock_tests": "modifies x in place"}, "x += ... in the Pre-LN branch"),
    Bug("block_library_norms", {"TransformerBlock": BLOCK_TORCH_STYLE.replace(
        "self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)",
        "self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)")},
        {"TransformerBlock_tests": "library version"}, "torch.nn.LayerNorm instead of the learner's own"),
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
}
# The known mistakes no visible check can see, and why: only the hidden tests catch them.
HIDDEN_ONLY = {
    "block_library_norms": "right values: the grader sees the library call",
}
