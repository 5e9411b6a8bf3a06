"""The trusted baselines the hidden suites share: the plain computation at the learner's precision, and torch's own
layers in float64 holding the same random weights. (The known mistakes are examples/variants: autograder.verdict.known
runs them on a failed check's inputs.)"""
import math

import torch
import torch.nn.functional as F

from .checks import max_error, rounded_runs

NEG = float("-inf")
NORM_PARAMS = ("weight", "bias")


def plain_attention(q, k, v, mask=None, scale=None, dim=-1):
    """softmax(q k^T * scale) v at q's precision; a query with no allowed key gets zero weights."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, NEG)
    w = torch.softmax(s, dim=dim).nan_to_num(0.0)
    return w @ v, w


def oracle_attention(q, k, v, mask=None, is_causal=False):
    """torch's own attention in float64 (for masks that leave every query at least one key)."""
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, is_causal=is_causal)


def random_mask(*shape, g: torch.Generator, p=0.5, keep_one=True):
    """A random bool mask drawn from `g`; with keep_one, every query row keeps at least one key."""
    m = torch.rand(*shape, generator=g) < p
    if keep_one:
        first = torch.randint(0, shape[-1], shape[:-1], generator=g)
        m = m | F.one_hot(first, shape[-1]).bool()
    return m


def torch_mha(state, d_model, n_heads, bias=True, prefix=""):
    """torch.nn.MultiheadAttention (float64) holding the weights `state` of a MultiHeadAttention."""
    m = torch.nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True).double().eval()
    w = {n: state[prefix + n].double() for n in ("q_proj.weight", "k_proj.weight", "v_proj.weight", "out_proj.weight")}
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([w["q_proj.weight"], w["k_proj.weight"], w["v_proj.weight"]]))
        m.out_proj.weight.copy_(w["out_proj.weight"])
        if bias:
            m.in_proj_bias.copy_(torch.cat([state[prefix + n + "_proj.bias"].double() for n in "qkv"]))
            m.out_proj.bias.copy_(state[prefix + "out_proj.bias"].double())
    return m


def oracle_mha(state, n_heads, query, key=None, value=None, *, mask=None, bias=True, prefix=""):
    key = query if key is None else key
    value = key if value is None else value
    B, Lq, D = query.shape
    attn_mask = None
    if mask is not None:       # torch's attn_mask: True = blocked, shape (Lq, Lk) or (B * n_heads, Lq, Lk)
        attn_mask = (~mask if mask.dim() == 2
                     else (~mask).expand(B, n_heads, Lq, key.shape[1]).reshape(-1, Lq, key.shape[1]))
    with torch.no_grad():
        return torch_mha(state, D, n_heads, bias, prefix)(query.double(), key.double(), value.double(),
                                                          attn_mask=attn_mask, need_weights=False)[0]


def plain_mha(state, n_heads, query, key=None, value=None, *, mask=None, prefix=""):
    """MultiHeadAttention computed plainly with `state`, at the inputs' precision."""
    key = query if key is None else key
    value = key if value is None else value
    B, Lq, D = query.shape
    Lk, H = key.shape[1], n_heads
    dh = D // H

    def proj(name, x):
        b = state.get(prefix + name + ".bias")
        return F.linear(x, state[prefix + name + ".weight"].to(x.dtype), None if b is None else b.to(x.dtype))

    def heads(x, L):
        return x.reshape(B, L, H, dh).transpose(1, 2)

    q, k, v = heads(proj("q_proj", query), Lq), heads(proj("k_proj", key), Lk), heads(proj("v_proj", value), Lk)
    out, _ = plain_attention(q, k, v, mask)
    return proj("out_proj", out.transpose(1, 2).reshape(B, Lq, D))


def random_mha_state(d_model, g: torch.Generator, bias=True, prefix=""):
    state = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        state[f"{prefix}{name}.weight"] = (torch.randn(d_model, d_model, generator=g, dtype=torch.float64)
                                           / math.sqrt(d_model)).float()
        if bias:
            state[f"{prefix}{name}.bias"] = (0.5 * torch.randn(d_model, generator=g, dtype=torch.float64)).float()
    return state


def random_norm_state(d, g: torch.Generator, prefix=""):
    return {prefix + "weight": (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).float(),
            prefix + "bias": (0.5 * torch.randn(d, generator=g, dtype=torch.float64)).float()}


def random_ff_state(d, d_ff, g: torch.Generator, prefix=""):
    r = lambda *shape, scale: (scale * torch.randn(*shape, generator=g, dtype=torch.float64)).float()  # noqa: E731
    return {prefix + "linear1.weight": r(d_ff, d, scale=1 / math.sqrt(d)), prefix + "linear1.bias": r(d_ff, scale=0.5),
            prefix + "linear2.weight": r(d, d_ff, scale=1 / math.sqrt(d_ff)), prefix + "linear2.bias": r(d, scale=0.5)}


def random_block_state(d, d_ff, g: torch.Generator):
    return {**random_mha_state(d, g, prefix="attn."), **random_ff_state(d, d_ff, g, prefix="ff."),
            **random_norm_state(d, g, prefix="norm1."), **random_norm_state(d, g, prefix="norm2.")}


def torch_norm(state, x, eps=1e-5, dtype=torch.float64):
    with torch.no_grad():
        return F.layer_norm(x.to(dtype), x.shape[-1:], state["weight"].to(dtype), state["bias"].to(dtype), eps)


def norm_baseline(state, x, eps=1e-5):
    """The float32 LayerNorm (torch's or the plain two-pass one) that is further from the float64 result."""
    exact = torch_norm(state, x, eps)
    return max((torch_norm(state, x, eps, dtype=torch.float32), plain_norm(state, x, eps)),
               key=lambda y: max_error(y, exact))


def plain_norm(state, x, eps=1e-5, prefix=""):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return (x - mean) / (var + eps).sqrt() * state[prefix + "weight"].to(x.dtype) + state[prefix + "bias"].to(x.dtype)


def plain_ff(state, x, prefix=""):
    w = {k: v.to(x.dtype) for k, v in state.items()}
    return F.linear(torch.relu(F.linear(x, w[prefix + "linear1.weight"], w[prefix + "linear1.bias"])),
                    w[prefix + "linear2.weight"], w[prefix + "linear2.bias"])


def torch_block(state, d, H, d_ff, norm_first, dtype=torch.float64):
    layer = torch.nn.TransformerEncoderLayer(d, H, d_ff, dropout=0.0, activation="relu", batch_first=True,
                                             norm_first=norm_first).to(dtype).eval()
    s = {k: v.to(dtype) for k, v in state.items()}
    mapped = {
        "self_attn.in_proj_weight": torch.cat([s[f"attn.{n}_proj.weight"] for n in "qkv"]),
        "self_attn.in_proj_bias": torch.cat([s[f"attn.{n}_proj.bias"] for n in "qkv"]),
        "self_attn.out_proj.weight": s["attn.out_proj.weight"], "self_attn.out_proj.bias": s["attn.out_proj.bias"],
        **{name: s["ff." + name] for name in ("linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias")},
        **{name: s[name] for name in ("norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias")},
    }
    layer.load_state_dict(mapped)
    return layer


def oracle_block(state, H, x, mask=None, norm_first=True, dtype=torch.float64):
    d, d_ff = x.shape[-1], state["ff.linear1.weight"].shape[0]
    with torch.no_grad():
        return torch_block(state, d, H, d_ff, norm_first, dtype)(x.to(dtype), src_mask=None if mask is None else ~mask)


def in_float64(plain, state, x, **rest):
    """`plain(state, x=x, **rest)` with the weights and `x` in float64, converted now: made ready to run under random
    rounding (checks.rounded_runs)."""
    state64, x64 = {k: v.double() for k, v in (state or {}).items()}, x.double()
    return lambda: plain(state64, x=x64, **rest)


def block_baselines(state, H, x, mask=None, norm_first=True) -> tuple[torch.Tensor, ...]:
    """Correct computations of the block at float32's precision, torch's layer, a plain one and the plain one in
    float64 under random rounding (checks.rounded_runs): `close`'s allowed error is twice the largest of their errors.
    One alone fell under a correct answer's about once in 3,000 drawn sizes; the two fixed ones, in 2 of 200 gradings
    of a block over two features on 480 rows, where a LayerNorm sees rows whose entries nearly agree."""
    runs = rounded_runs(in_float64(plain_block, state, x, H=H, mask=mask, norm_first=norm_first), torch.float32,
                        torch.Generator().manual_seed(x.numel()))
    return (oracle_block(state, H, x, mask, norm_first, dtype=torch.float32),
            plain_block(state, H, x, mask, norm_first), *runs)


def plain_block(state, H, x, mask=None, norm_first=True):
    """The block computed plainly, at x's precision (torch's layer takes no per-batch mask)."""
    def attn(h):
        return plain_mha(state, H, h, mask=mask, prefix="attn.")

    def ff(h):
        return plain_ff(state, h, prefix="ff.")

    def norm(h, p):
        return plain_norm(state, h, prefix=p)

    if norm_first:
        x = x + attn(norm(x, "norm1."))
        return x + ff(norm(x, "norm2."))
    x = norm(x + attn(x), "norm1.")
    return norm(x + ff(x), "norm2.")
