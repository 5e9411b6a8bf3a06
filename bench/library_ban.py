"""The library ban measured: what the static reading proves, flags and notes for honest idioms and for routes to a
library version, each beside the reference it changes, and how long the reading takes as code grows.

    python bench/library_ban.py [--grade] [--out bench/results]

For each case the table gives, per graded part of the notebook: proven (a library version reached: 0 points),
flagged (the instructor decides), noted (library use at module level, told to the learner). `--grade` also grades
each case through the hidden suite (the trusted path of `nbgrader autograde` without nbgrader) and gives the score.
The reading's time is the median of 3 readings of a correct notebook holding a dead `if False:` block with an alias
chain of N names (each name bound to the next, the last to torch.nn.functional).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

from autograder.authoring import variants
from autograder.notebooks import TESTS_SUFFIX, graded_cells, learner_cells
from autograder.verdict import hidden, static
from autograder.verdict.suites import test_attention, test_residual

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = {"attention": test_attention.LIBRARY, "residual": test_residual.LIBRARY}
REF = {asg: variants.reference_sources(asg) for asg in LIBRARY}
LN, FF, MHA = REF["residual"]["LayerNorm"], REF["residual"]["FeedForward"], REF["attention"]["MultiHeadAttention"]
LN_FORWARD = "    def forward(self, x):\n"
MHA_FORWARD = "    def forward(self, query, key=None, value=None, mask=None):\n"


def _with(source: str, anchor: str, added: str, before: str = "") -> str:
    assert anchor in source, anchor
    return before + source.replace(anchor, anchor + added, 1)


# name -> (assignment, {part: source}, what a good reading does)
HONEST = {
    "forward-reference type hint": ("attention", {"MultiHeadAttention": _with(
        MHA, "        self.out_proj = nn.Linear(d_model, d_model, bias=bias)\n",
        "\n    def like(self) -> \"MultiHeadAttention\":\n        return self\n")}, "nothing"),
    "dict key 'attention'": ("attention", {"MultiHeadAttention": _with(
        MHA, MHA_FORWARD, "        stats = {\"attention\": query.shape}\n        del stats\n")}, "nothing"),
    "nn.Module.__init__(self) with a lambda": ("residual", {"LayerNorm": _with(
        LN.replace("super().__init__()", "nn.Module.__init__(self)"), "        self.eps = eps\n",
        "        self.centre = lambda t: t - t.mean(dim=-1, keepdim=True)\n")}, "nothing"),
    "functools.reduce(operator.mul, shape)": ("residual", {"LayerNorm": _with(
        LN, LN_FORWARD, "        size = functools.reduce(operator.mul, x.shape, 1)\n        del size\n",
        "import functools\nimport operator\n\n")}, "nothing"),
    "types.SimpleNamespace": ("residual", {"LayerNorm": _with(
        LN, "        self.eps = eps\n", "        self.cfg = types.SimpleNamespace(d_model=d_model, eps=eps)\n",
        "import types\n\n")}, "nothing"),
    "print under `if DEBUG:`": ("residual", {"LayerNorm": _with(
        LN, LN_FORWARD, "        if DEBUG:\n            print(\"layernorm\", x.shape)\n", "DEBUG = False\n\n")},
        "nothing"),
    "module-level self-check against F.layer_norm": ("residual", {"LayerNorm": LN + (
        "\n\n_x = torch.randn(2, 4)\n"
        "assert torch.allclose(LayerNorm(4)(_x), torch.nn.functional.layer_norm(_x, (4,)), atol=1e-6)\n")},
        "a note on LayerNorm"),
    "getattr(F, activation), the name a parameter": ("residual", {"FeedForward": FF.replace(
        "def __init__(self, d_model, d_ff):", "def __init__(self, d_model, d_ff, activation=\"relu\"):").replace(
        "        self.linear2 = nn.Linear(d_ff, d_model)\n",
        "        self.linear2 = nn.Linear(d_ff, d_model)\n        self.act = getattr(torch.nn.functional, activation)\n"
    ).replace("torch.relu(self.linear1(x))", "self.act(self.linear1(x))")},
        "FeedForward flagged, allowed names listed"),
    "torch._refs in LayerNorm's cell only": ("residual", {"LayerNorm": "import torch._refs\n\n" + LN.replace(
        "((x - mean) ** 2).mean(dim=-1, keepdim=True)", "torch._refs.var(x, -1, correction=0, keepdim=True)")},
        "LayerNorm flagged; FeedForward and TransformerBlock untouched"),
}

# The routes to a library version, as tests/trust_attacks.py writes them (each cell beside the control's).
sys.path.insert(0, str(ROOT / "tests"))
import trust_attacks  # noqa: E402

ATTACKS = {
    "torch.overrides by __name__": ("attention", "overrides_route", "MultiHeadAttention flagged"),
    "torch._decomp by __name__": ("residual", "decomp_route", "LayerNorm flagged"),
    "__main__._refusals.clear()": ("attention", "main_refusals", "every part flagged"),
    "4,000-name dead alias chain": ("attention", "alias_chain", "read in time, graded like the control"),
    "the attention attackers' control": ("attention", "control", "nothing"),
    "the residual attackers' control": ("residual", "control", "nothing"),
}
ATTACKS = {name: (asg, trust_attacks.CLASSES[asg][who], expected) for name, (asg, who, expected) in ATTACKS.items()}


def read(assignment: str, cells: dict[str, str]):
    nb = variants.submission(assignment, cells)
    graded = {g.removesuffix(TESTS_SUFFIX) for g in graded_cells(nb)}
    started = time.perf_counter()
    report = static.analyse(learner_cells(nb), graded, LIBRARY[assignment])
    return nb, report, time.perf_counter() - started


def parts(found: dict) -> str:
    return ", ".join(sorted(p for p, fs in found.items() if fs)) or "-"


def score(nb, assignment: str) -> str:
    grading = hidden.grade(nb, assignment)
    if grading.fault:
        return f"grader fault: {grading.fault}"
    return ", ".join(f"{gid.removesuffix(TESTS_SUFFIX)} {v.score:g}/{v.points:g}"
                     for gid, v in sorted(grading.verdicts.items()))


def chain_notebook(n: int) -> dict[str, str]:
    """The dead alias chain of trust_attacks.ALIAS_CHAIN, N names long, in a correct LayerNorm cell."""
    chain = "".join(f"    _a{i} = _a{i + 1}\n" for i in range(n)) + f"    _a{n} = torch.nn.functional\n"
    return {"LayerNorm": LN + "\n\nif False:\n" + chain}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grade", action="store_true", help="grade each case through the hidden suite too")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    lines = ["# The library ban: what the static reading proves, flags and notes", "",
             f"Measured {time.strftime('%Y-%m-%d')} by `bench/library_ban.py{' --grade' if args.grade else ''}`.", "",
             "| case | expected | proven (0 points) | flagged | noted | cells flagged |"
             + (" score |" if args.grade else ""),
             "| --- | --- | --- | --- | --- | --- |" + (" --- |" if args.grade else "")]
    for title, cases in (("honest", HONEST), ("attack", ATTACKS)):
        for name, (asg, cells, expected) in cases.items():
            nb, r, _ = read(asg, cells)
            flagged = sum(1 for fs in r.suspicious.values() if fs)
            row = (f"| {title}: {name} ({asg}) | {expected} | {parts(r.library)} | {parts(r.suspicious)} | "
                   f"{parts(r.notes)} | {flagged} of {len(r.suspicious)} |")
            lines.append(row + (f" {score(nb, asg)} |" if args.grade else ""))
            print(row, flush=True)
    lines += ["", "## The reading's time against code size", "",
              "A correct residual notebook whose LayerNorm cell ends with a dead `if False:` block of N aliases.", "",
              "| N names | median of 3 (s) | too large | LayerNorm flagged |", "| --- | --- | --- | --- |"]
    for n in (500, 1000, 2000, 4000, 8000):
        times, r = [], None
        for _ in range(3):
            _, r, took = read("residual", chain_notebook(n))
            times.append(took)
        row = (f"| {n} | {statistics.median(times):.3f} | {r.too_large} | "
               f"{'; '.join(f.what for f in r.suspicious['LayerNorm']) or '-'} |")
        lines.append(row)
        print(row, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "library-ban.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
