"""The error a drawn call allows a correct answer, measured: how often a correct answer fails with the allowed error
set by two fixed float32 computations alone (the reference's answer and a plain one), and how near it comes to the
allowed error once the truth's runs under random rounding (checks.rounded_runs) are among the baselines.

    python bench/rounding.py [--gradings 100] [--calls 80] [--ill 3000] [--out bench/results]

For each graded part whose contract has a rounded computation, each grading draws the part's first `--calls` calls
from a seed of its own (new sizes and weights); every known correct answer (examples/variants) and the reference
answer each call. `--ill` gradings more of the TransformerBlock calls over two features among the first 32 show the
tail: there a LayerNorm sees rows whose entries nearly agree. The table gives, per
part and answer, the calls, the failures with the fixed baselines alone and with the rounded runs, and the largest
ratio of an answer's error to the error allowed it (1 fails). Written to rounding.md under --out.
"""
import argparse
import sys
import time
from pathlib import Path

import torch

from autograder.authoring import variants
from autograder.notebooks import reference_namespace
from autograder.verdict.suites import contract, test_residual, test_transformer
from autograder.verdict.suites.checks import ROUNDED_RUNS, allowed_error, max_error

SUITES = {"residual": test_residual, "transformer": test_transformer}
SEED = 70000                  # gradings SEED, SEED + 1, ...: the same ones at every run


def answers(asg: str, name: str) -> list[tuple[str, dict]]:
    return [("reference", reference_namespace(asg))] + [
        (v.name, variants.executed(asg, v.cells)) for v in variants.load(asg)
        if isinstance(v, variants.Correct) and name in v.cells]


def measure(asg: str, name: str, gradings: int, calls: list[int], rows: dict, features: int | None = None):
    """Each of `gradings` draws of the part's calls `calls` (those over `features` features alone, when given)."""
    part, reference = SUITES[asg].CONTRACT[name], reference_namespace(asg)
    who = answers(asg, name)
    for g in range(gradings):
        drawn = contract.drawn_calls(part, SEED + g, max(calls) + 1, edges=False)
        for i in calls:
            call = drawn[i]
            if features is not None and call.ctor[0] != features:
                continue
            expected = contract.expected_of(part, call, reference)
            if "raised" in expected.outcome:
                continue
            truth, fixed = expected.truth, [expected.outcome["first"], expected.plain]
            dtype = expected.outcome["first"].dtype
            before, now = allowed_error(truth, dtype, fixed), allowed_error(truth, dtype, fixed + expected.rounded)
            for label, ns in who:
                got = contract.run_here(ns, call, rename=part.rename)
                if "raised" in got:
                    continue
                err = max_error(got["first"], truth)
                row = rows.setdefault((asg, name, label), [0, 0, 0, 0.0, 0.0])
                row[0] += 1
                row[1] += err > before
                row[2] += expected.judge(call, got) is not None
                row[3], row[4] = max(row[3], err / before), max(row[4], err / now)


def table(rows: dict) -> list[str]:
    out = ["| part | answer | calls | failed, fixed baselines | failed, with rounded runs | largest error / allowed, "
           "fixed | largest error / allowed, with rounded runs |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for (asg, name, label), (n, before, now, r_before, r_now) in rows.items():
        out.append(f"| {asg} {name} | {label} | {n} | {before} | {now} | {r_before:.3f} | {r_now:.3f} |")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gradings", type=int, default=100)
    ap.add_argument("--calls", type=int, default=80)
    ap.add_argument("--ill", type=int, default=3000)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    started = time.time()
    sweep: dict = {}
    for asg, suite in SUITES.items():
        for name, part in suite.CONTRACT.items():
            if part.rounded is not None:
                measure(asg, name, a.gradings, list(range(a.calls)), sweep)
    ill: dict = {}
    measure("residual", "TransformerBlock", a.ill, list(range(32)), ill, features=2)
    lines = ["# The error a drawn call allows a correct answer", "",
             f"Made by `python bench/rounding.py --gradings {a.gradings} --calls {a.calls} --ill {a.ill}` "
             f"({time.time() - started:.0f} s, one thread, torch {torch.__version__}, "
             f"{torch.backends.cpu.get_cpu_capability()}). The allowed error is the larger of the dtype's floor and "
             f"twice the largest error of the baselines: the fixed ones are the reference's answer and a plain float32 "
             f"computation; with rounded runs, also {ROUNDED_RUNS} runs of the truth under random rounding "
             "(checks.rounded_runs). An answer fails where its error is over it. The reference's answer is itself a "
             "baseline: its ratio is never over 0.5, nor is that of an answer that computes as it does.", "",
             f"## Every part with rounded runs: {a.gradings} gradings, the first {a.calls} calls of each", "",
             *table(sweep), "",
             f"## The ill-conditioned calls: {a.ill} gradings of the TransformerBlock calls over two features", "",
             "A TransformerBlock over two features (two heads of one), Pre-LN, a mask: the second LayerNorm sees "
             "rows whose two entries nearly agree.", "", *table(ill), ""]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "rounding.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
