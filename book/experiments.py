"""The book's shared experiment code: runs over seeds, training, the tasks and models several pages use.

Every number about a trained model comes from `seeds`, which runs an experiment once per seed and keeps
every result; `glue_stat` puts one into the prose as "mean ± sd", and `plot_seeds` draws every seed and
the mean. The exercises' functions are the reference solutions, loaded from the solution notebooks
(`reference`), never copied here.

References: Press et al. 2022 (ALiBi), Su et al. 2021 (RoPE), Elhage et al. 2021 (attention-only models).
"""
import math
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from myst_nb import glue

from autograder.notebooks import reference_namespace

ROOT = Path(__file__).resolve().parent.parent

N_SEEDS = 5
torch.set_num_threads(1)  # tiny models: one thread each is fastest, and leaves the other core free


def reference(assignment):
    """The names the solution notebook of `assignment` defines, executed as the grader does."""
    return SimpleNamespace(**reference_namespace(assignment))


# --- runs over seeds -------------------------------------------------------------------------------

class Stat:
    """One measured quantity over seeds: `values` (n_seeds, ...), and its mean and sd over the seeds."""

    def __init__(self, values):
        if isinstance(values, (list, tuple)):
            values = torch.stack([torch.as_tensor(v, dtype=torch.float64) for v in values])
        self.values = torch.as_tensor(values, dtype=torch.float64)

    n = property(lambda self: self.values.shape[0])
    mean = property(lambda self: self.values.mean(0))
    sd = property(lambda self: self.values.std(0) if self.n > 1 else torch.zeros_like(self.values[0]))

    def __getitem__(self, i):
        return Stat(self.values[:, i])

    def __sub__(self, other):
        """The difference seed by seed (paired: seed s of self minus seed s of other)."""
        return Stat(self.values - (other.values if isinstance(other, Stat) else other))

    def above(self, other):
        """True when every seed of self is above every seed of `other` (a number or a Stat)."""
        top = other.values.max() if isinstance(other, Stat) else torch.tensor(other)
        return bool(self.values.min() > top)

    def separated(self, other):
        """True when one of the two is above the other on every pair of seeds."""
        return self.above(other) or other.above(self)

    def __format__(self, spec):
        return f"{self.mean.item():{spec}} ± {self.sd.item():{spec}}"

    def __repr__(self):
        return f"Stat({self:.3g}, n={self.n})"


def stack(stats):
    """Stats of one quantity at several settings as one Stat of shape (n_seeds, settings)."""
    return Stat(torch.stack([s.values for s in stats], dim=1))


class Runs:
    """The results of one experiment over seeds: `runs[key]` is a Stat, `runs.each(key)` the raw values."""

    def __init__(self, results):
        self.results = results

    def __getitem__(self, key):
        return Stat([r[key] for r in self.results])

    def each(self, key):
        return [r[key] for r in self.results]


_seed = None  # the seed of the run in progress, inside `seeds`


def seeds(experiment, n=N_SEEDS):
    """Run `experiment(seed)` for seeds 0..n-1, torch seeded first; it returns a dict of results."""
    global _seed
    results = []
    for seed in range(n):
        torch.manual_seed(seed)
        _seed = seed
        try:
            results.append(experiment(seed))
        finally:
            _seed = None
    return Runs(results)


def check(claim, holds):
    """Stop the build when a sentence of the prose is no longer what the measurements show."""
    if not holds:
        raise AssertionError(f"the text says: {claim}; the measurements no longer show it")


class _Shown:
    """A glued value that the prose shows as this text."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def glue_text(key, text):
    """Glue a string that the prose shows as it is (a glued str would show its quotes)."""
    glue(key, _Shown(text), display=False)


def glue_stat(key, stat, fmt=".1f"):
    """Glue `key` as the text "mean ± sd", `key_sd` as the sd and `key_n` as the number of seeds."""
    glue_text(key, format(stat, fmt))
    glue(f"{key}_sd", stat.sd.item(), display=False)
    glue(f"{key}_n", stat.n, display=False)


def plot_seeds(ax, x, stat, label=None, **kw):
    """Every seed as a thin line, their mean as a thick one, in one colour."""
    (line,) = ax.plot(x, stat.mean, lw=2, label=label, **kw)
    kw.pop("marker", None)
    for v in stat.values:
        ax.plot(x, v, lw=0.7, alpha=0.35, color=line.get_color(), **{k: w for k, w in kw.items() if k != "color"})
    return line


def points_seeds(ax, x, stat, label=None, color=None, width=0.25):
    """Every seed as a dot (spread sideways), the mean ± sd as a bar with an error bar."""
    x = torch.as_tensor(x, dtype=torch.float64).reshape(-1)                    # (k,)
    values = stat.values.reshape(stat.n, -1)                                     # (n_seeds, k)
    bars = ax.bar(x, values.mean(0), width=width, yerr=stat.sd.reshape(-1), capsize=3, alpha=0.55,
                  label=label, color=color)
    spread = torch.linspace(-width / 3, width / 3, stat.n)[:, None]             # (n_seeds, 1)
    ax.scatter((x + spread).flatten(), values.flatten(), s=6, color="black", zorder=3)
    return bars


# --- training --------------------------------------------------------------------------------------

def token_loss(logits, target):
    """Cross-entropy over every position whose target is not -100."""
    return F.cross_entropy(logits.flatten(0, -2), target.flatten(), ignore_index=-100)


def fit(model, batch, steps, lr=3e-3, warmup=0, betas=(0.9, 0.999), loss=token_loss, after_step=None):
    """Adam on `batch(gen)` for `steps` steps with a linear warm-up over `warmup` steps; returns the losses.

    `after_step(step, model)`, when given, is called after every step (to measure the model while it trains).
    Only inside `seeds`: the data order comes from the run's seed, so every trained model is one seed of
    an experiment that is run several times."""
    if _seed is None:
        raise RuntimeError("fit trains only inside seeds(): a trained model is one seed of an experiment")
    gen = torch.Generator().manual_seed(1000 + _seed)
    opt = torch.optim.Adam(model.parameters(), lr, betas=betas)
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / warmup) if warmup else lr
        inputs, target = batch(gen)
        value = loss(model(inputs), target)
        opt.zero_grad()
        value.backward()
        opt.step()
        losses.append(value.item())
        if after_step is not None:
            after_step(step, model)
    return losses


@torch.no_grad()
def accuracy(model, inputs, target):
    """The fraction of scored positions (target not -100) where the model's top guess is the target."""
    scored = target != -100
    return (model(inputs).argmax(-1) == target)[scored].float().mean().item()


def held_out(batch, seed=99):
    """One fixed batch from a generator no training run uses."""
    return batch(torch.Generator().manual_seed(seed))


# --- tasks -----------------------------------------------------------------------------------------

def reverse_batch(B, vocab_size, seq_len):
    """Reverse the sequence: the target at position i is the input token at L - 1 - i."""
    def batch(gen):
        tokens = torch.randint(0, vocab_size, (B, seq_len), generator=gen)
        return tokens, tokens.flip(1)
    return batch


def previous_batch(B, vocab_size, seq_len):
    """Copy the previous token: the target at position i is the input token at i - 1 (none at 0)."""
    def batch(gen):
        tokens = torch.randint(0, vocab_size, (B, seq_len), generator=gen)
        target = torch.cat([torch.full((B, 1), -100), tokens[:, :-1]], dim=1)
        return tokens, target
    return batch


def repeat_batch(B, vocab_size, seq_len, periods=(4, 12)):
    """A random block of distinct tokens repeated with a period in `periods`; predict the next token.

    After the first period the next token can be read off the previous occurrence of the current one;
    targets in the first period, which nothing predicts, are -100."""
    def batch(gen):
        period = torch.randint(periods[0], periods[1] + 1, (B, 1), generator=gen)        # (B, 1)
        block = torch.rand(B, vocab_size, generator=gen).argsort(-1)                      # (B, vocab_size)
        tokens = block.gather(1, torch.arange(seq_len + 1)[None, :] % period)           # (B, L + 1)
        target = tokens[:, 1:].masked_fill(torch.arange(1, seq_len + 1)[None, :] < period, -100)
        return tokens[:, :-1], target                                                    # (B, L), (B, L)
    return batch


# --- a small causal model with a choice of positions ------------------------------------------------

_pe = reference("positional_encoding")
_attn = reference("attention")


class CausalAttention(nn.Module):
    """Causal multi-head self-attention; `pos` "rope" rotates q and k, "alibi" biases the scores.

    `keep` (n_heads,) scales each head's output (0 switches a head off); `weights` holds the last pattern."""

    def __init__(self, d_model, n_heads, pos=None):
        super().__init__()
        self.n_heads, self.pos = n_heads, pos
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model, bias=False)
                                                                for _ in range(4))
        self.register_buffer("keep", torch.ones(n_heads), persistent=False)

    def forward(self, x):                                                  # (B, L, d_model)
        B, L, D = x.shape
        H, dh = self.n_heads, D // self.n_heads
        q, k, v = (p(x).view(B, L, H, dh).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        if self.pos == "rope":
            q, k = _pe.rope(q), _pe.rope(k)                                # (B, H, L, d_head)
        s = q @ k.transpose(-2, -1) / math.sqrt(dh)                        # (B, H, L, L)
        if self.pos == "alibi":
            s = s + _pe.alibi_bias(H, L)                                   # causal: only j <= i is kept
        s = s.masked_fill(~_attn.causal_mask(L), float("-inf"))
        self.weights = s.softmax(-1)                                       # (B, H, L, L)
        out = (self.weights @ v) * self.keep[:, None, None]                # (B, H, L, d_head)
        return self.out_proj(out.transpose(1, 2).reshape(B, L, D))


class AttentionOnly(nn.Module):
    """Token embedding, a positional scheme, `n_layers` residual attention layers, a linear read-out.

    pos: "sinusoidal" or "learned" (added to the embeddings, `max_len` rows), "alibi" or "rope"."""

    def __init__(self, vocab_size, d_model, n_heads, n_layers, pos, max_len):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        if pos == "learned":
            self.pe = nn.Parameter(torch.randn(max_len, d_model))
        elif pos == "sinusoidal":
            self.register_buffer("pe", _pe.sinusoidal_encoding(max_len, d_model), persistent=False)
        else:
            self.pe = None
        self.layers = nn.ModuleList(CausalAttention(d_model, n_heads, pos) for _ in range(n_layers))
        self.out = nn.Linear(d_model, vocab_size)

    def forward(self, tokens):                                             # (B, L)
        x = self.emb(tokens)                                               # (B, L, d_model)
        if self.pe is not None:
            x = x + self.pe[: tokens.shape[1]]
        for attn in self.layers:
            x = x + attn(x)
        return self.out(x)                                                 # (B, L, vocab_size)
