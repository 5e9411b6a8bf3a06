"""The speed check's inputs for scaled_dot_product_attention, and others beside them: every known sdpa answer that is
correct or slow (the known answers of examples/variants/ and every blind round's), each in a learner's worker warmed
up as a grading's is after its correctness tests, against the reference worker, by the suite's own rule
(checks.speed_ratios, one attempt each), `--reps` times per input. A correct answer must stay well under the factor
on every input, a slow one over it on at least one.

    .venv/bin/python bench/sdpa_speed_inputs.py [--hogs 0] [--reps 3] [--rounds 1 2 3 4 5] [-k NAME ...]
                                                [--others 1x2x128x32:20 ...] [--out FILE]
"""
from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from self_speed import hog  # noqa: E402 - beside this file

FN = "scaled_dot_product_attention"
# (shape, calls per timed run), by their names in the suite: the two it times
INPUTS = [("SDPA_SPEED_SHAPE", "SDPA_SPEED_CALLS"), ("SDPA_HEADS_SPEED_SHAPE", "SDPA_HEADS_SPEED_CALLS")]
# and beside them, by default: the one it timed before, and a longer sequence
OTHERS = ["1x2x128x32:20", "1x2x512x32:4"]
# what a grading's worker has run before its speed check: calls of many sizes
WARM_UP = [[2, 4, 64, 16], [1, 2, 300, 32], [3, 1, 17, 8], [1, 2, 128, 32], [2, 2, 256, 32]] * 6


def answers(rounds: list[int]) -> list[tuple[str, str, dict]]:
    import blind

    from autograder.authoring import variants

    out = [("reference", "correct", {})]
    for v in variants.load("attention"):
        if FN in v.cells and (isinstance(v, variants.Correct) or isinstance(v, variants.Bug) and v.kind == "speed"):
            out.append((v.name, "correct" if isinstance(v, variants.Correct) else "slow", {FN: v.cells[FN]}))
    for r in rounds:
        out += [(f"round {r}: {e['name']}", e["kind"], {FN: e["cells"][FN]}) for e in blind.entries("attention", r)
                if FN in e["cells"] and e["kind"] in ("correct", "slow")]
    return out


def main():
    from autograder.authoring import variants
    from autograder.notebooks import learner_cells, read, source_notebook
    from autograder.verdict.learner import Learner
    from autograder.verdict.suites import checks
    from autograder.verdict.suites import test_attention as suite
    from autograder.verdict.timing import Target

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hogs", type=int, default=0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, nargs="*", default=[1, 2, 3, 4, 5])
    ap.add_argument("-k", nargs="*", default=[""], help="only answers whose name holds one of these")
    ap.add_argument("--others", nargs="*", default=OTHERS, help="more inputs, each as shape:calls")
    ap.add_argument("--out")
    a = ap.parse_args()
    others = [([int(n) for n in shape.split("x")], int(calls)) for shape, calls in (o.split(":") for o in a.others)]
    inputs = [(getattr(suite, s), getattr(suite, c)) for s, c in INPUTS] + others
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=hog, args=(stop,), daemon=True) for _ in range(a.hogs)]
    for h in hogs:
        h.start()
    reference = Learner(learner_cells(read(source_notebook("attention"))), role="reference")
    rows, started = [], time.time()
    try:
        for name, kind, cells in [x for x in answers(a.rounds) if any(k in x[0] for k in a.k)]:
            mine = Learner(learner_cells(variants.submission("attention", cells)))
            try:
                for i, shape in enumerate(WARM_UP):
                    for target in (Target(mine, FN), Target(reference, FN)):
                        target.run(1000 + i, [{"kind": "randn", "shape": shape}] * 3, None, 5)
                cols = []
                for shape, calls in inputs:
                    ratios: list[float] = []
                    for _ in range(a.reps):
                        got, mismatch = checks.speed_ratios(Target(mine, FN), Target(reference, FN),
                                                            [{"kind": "randn", "shape": shape}] * 3, calls=calls,
                                                            attempts=1)
                        ratios += got if mismatch is None else [float("nan")]
                    cols.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
            finally:
                mine.close()
            rows.append((name, kind, cols))
            print(f"{name:45s} {kind:8s} " + "  ".join(cols), flush=True)
    finally:
        reference.close()
        stop.set()
    heads = [f"{'x'.join(map(str, s))}, {c} calls" + (" (graded)" if i < len(INPUTS) else "")
             for i, (s, c) in enumerate(inputs)]
    lines = [f"Speed ratio against the reference, median (min-max) of {a.reps} measurements by the suite's rule, each "
             f"answer in a warmed-up learner worker, {a.hogs} CPU hogs beside ({time.time() - started:.0f} s):", "",
             "| answer | kind | " + " | ".join(heads) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in heads) + " |"]
    lines += [f"| {n} | {k} | " + " | ".join(c) + " |" for n, k, c in rows]
    print("\n".join(lines))
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
