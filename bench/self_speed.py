"""The speed rule's ratio for correct code: the course's own solution, submitted as a learner, against itself, and every
correct alternative of the known answers, each in a learner's fresh worker against the shared reference worker, as a
grading times them (autograder.verdict.suites.checks.speed_ratios, the suites' inputs). Prints the spread of the ratio
over repetitions and where each side's CPU time went (user, system), quiet or beside CPU hogs (`--hogs N`).

    .venv/bin/python bench/self_speed.py [--reps 10] [--hogs 0] [--out FILE]
"""
from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from pathlib import Path

TARGETS = [  # (function, inputs, calls), as the attention suite times them on the CPU
    ("scaled_dot_product_attention", "SDPA_SPEED_SHAPE", "SDPA_SPEED_CALLS"),
    ("scaled_dot_product_attention", "SDPA_HEADS_SPEED_SHAPE", "SDPA_HEADS_SPEED_CALLS"),
    ("blockwise_attention", "BLOCKWISE_SPEED_SHAPE", "BLOCKWISE_SPEED_CALLS"),
]


def hog(stop):
    x = 0
    while not stop.is_set():
        x += 1


def main():
    from autograder.authoring import variants
    from autograder.notebooks import learner_cells, read, source_notebook
    from autograder.verdict.learner import Learner
    from autograder.verdict.suites import checks
    from autograder.verdict.suites import test_attention as suite
    from autograder.verdict.timing import Target

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--hogs", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args()
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=hog, args=(stop,), daemon=True) for _ in range(a.hogs)]
    for h in hogs:
        h.start()
    reference = Learner(learner_cells(read(source_notebook("attention"))), role="reference")
    answers = [("reference", {})] + [(v.name, v.cells) for v in variants.load("attention")
                                     if isinstance(v, variants.Correct)]
    rows = []
    started = time.time()
    try:
        for name, cells in answers:
            for fn, shape, calls in TARGETS:
                if cells and fn not in cells:
                    continue
                ratios, split = [], []
                for _ in range(a.reps):
                    mine = Learner(learner_cells(variants.submission("attention", cells)))
                    try:
                        before = [w.sandbox.cgroup.cpu_split() if w.sandbox else (0, 0) for w in (mine, reference)]
                        got, _ = checks.speed_ratios(Target(mine, fn), Target(reference, fn),
                                                     [{"kind": "randn", "shape": getattr(suite, shape)}] * 3,
                                                     calls=getattr(suite, calls), attempts=1)
                        after = [w.sandbox.cgroup.cpu_split() for w in (mine, reference)]
                        ratios += got
                        split.append([(u1 - u0, s1 - s0) for (u0, s0), (u1, s1) in zip(before, after)])
                    finally:
                        mine.close()
                mine_sys = statistics.mean(s[0][1] / max(1e-9, sum(s[0])) for s in split)
                ref_sys = statistics.mean(s[1][1] / max(1e-9, sum(s[1])) for s in split)
                timed = f"{fn} {tuple(getattr(suite, shape))}"
                rows.append((name, timed, ratios, mine_sys, ref_sys))
                print(f"{name:28s} {timed:48s} median {statistics.median(ratios):.2f} min {min(ratios):.2f} "
                      f"max {max(ratios):.2f}  system share: mine {mine_sys:.0%}, reference {ref_sys:.0%}", flush=True)
    finally:
        reference.close()
        stop.set()
    lines = [f"Speed ratio of correct code against the reference, {a.reps} fresh learner workers each, "
             f"{a.hogs} CPU hogs beside ({time.time() - started:.0f} s):", "",
             "| answer | timed | median | min | max | system share (learner, reference) |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    lines += [f"| {n} | {fn} | {statistics.median(r):.2f} | {min(r):.2f} | {max(r):.2f} | {ms:.0%}, {rs:.0%} |"
              for n, fn, r, ms, rs in rows]
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
