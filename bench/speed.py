"""Speed and memory measurements (`make bench`): numbers, not pass/fail.

1. The reference solutions against torch's own layers, CPU time per call (ratio > 1: ours slower).
2. blockwise_attention's peak extra memory against sequence length, next to plain attention's.
3. The speed check's calibration: the reference timed against itself and a Python loop over query
   positions timed against the reference, N gradings each: the ratio's median, min and max.
4. The same for the checks timed with the course's parts (MultiHeadAttention, TransformerBlock): the reference,
   a correct answer that is slower (a loop over heads), and a loop over positions (N / 4 gradings: each takes
   seconds).
(Where a notebook's grading time goes: bench/profile.py.)
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from autograder.authoring import variants
from autograder.notebooks import learner_cells, read, reference_namespace, source_notebook
from autograder.verdict.learner import Learner
from autograder.verdict.suites import test_attention, test_residual
from autograder.verdict.suites.checks import SPEED_FACTOR, module_targets, speed_ratios
from autograder.verdict.suites.test_attention import SDPA_SPEED_CALLS, SDPA_SPEED_SHAPE
from autograder.verdict.timing import Target, compare, peak_memory

LOOP_SDPA = '''import math
import torch

def scaled_dot_product_attention(q, k, v, mask=None):
    rows, weights = [], []
    for i in range(q.shape[-2]):
        s = q[..., i:i + 1, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask[..., i:i + 1, :], float("-inf"))
        w = torch.softmax(s, dim=-1).nan_to_num(0.0)
        rows.append(w @ v)
        weights.append(w)
    return torch.cat(rows, dim=-2), torch.cat(weights, dim=-2)
'''


# Loops over positions in the checks timed with the course's parts: each position's call to a part is one more
# round trip to the course's worker.
LOOP_MHA = '''
class MultiHeadAttention(MultiHeadAttention):
    def forward(self, query, key=None, value=None, mask=None):
        return torch.cat([super(MultiHeadAttention, self).forward(query[:, i:i + 1], key if key is not None else query,
                                                                    value, mask) for i in range(query.shape[1])], dim=1)
'''
LOOP_BLOCK = '''
class TransformerBlock(TransformerBlock):
    def forward(self, x, mask=None):
        x = x + self.attn(self.norm1(x), mask=mask)
        return x + torch.cat([self.ff(self.norm2(x[:, i:i + 1])) for i in range(x.shape[1])], dim=1)
'''


def cpu_time(fn, reps=20):
    times = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def table(title, header, rows):
    print(f"\n{title}")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, *rows]:
        print("  " + "  ".join(str(x).rjust(w) for x, w in zip(row, widths)))


def vs_torch():
    torch.set_num_threads(1)
    att, res = reference_namespace("attention"), reference_namespace("residual")
    rows = []
    with torch.no_grad():
        for B, H, L, d in [(1, 2, 256, 16), (4, 8, 512, 64)]:
            q, k, v = (torch.randn(B, H, L, d) for _ in range(3))
            ours = cpu_time(lambda q=q, k=k, v=v: att["scaled_dot_product_attention"](q, k, v))
            theirs = cpu_time(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v))
            rows.append(["scaled_dot_product_attention", f"{B}x{H}x{L}x{d}", f"{ours*1e3:.2f}", f"{theirs*1e3:.2f}",
                         f"{ours/theirs:.2f}"])
        for B, L, D, H in [(2, 128, 64, 4), (4, 512, 256, 8)]:
            x = torch.randn(B, L, D)
            mha = att["MultiHeadAttention"](D, H).eval()
            ref = torch.nn.MultiheadAttention(D, H, batch_first=True).eval()
            ours = cpu_time(lambda mha=mha, x=x: mha(x))
            theirs = cpu_time(lambda ref=ref, x=x: ref(x, x, x, need_weights=False))
            rows.append(["MultiHeadAttention", f"{B}x{L}x{D} h{H}", f"{ours*1e3:.2f}", f"{theirs*1e3:.2f}",
                         f"{ours/theirs:.2f}"])
            blk = res["TransformerBlock"](D, H, 4 * D).eval()
            enc = torch.nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, batch_first=True, norm_first=True).eval()
            ours = cpu_time(lambda blk=blk, x=x: blk(x))
            theirs = cpu_time(lambda enc=enc, x=x: enc(x))
            rows.append(["TransformerBlock", f"{B}x{L}x{D} h{H}", f"{ours*1e3:.2f}", f"{theirs*1e3:.2f}",
                         f"{ours/theirs:.2f}"])
    table("Reference solutions against torch's own layers (CPU, 1 thread, median CPU ms per call)",
          ["layer", "shape", "ours ms", "torch ms", "ratio"], rows)


def blockwise_memory():
    worker = Learner(learner_cells(read(source_notebook("attention"))))
    rows = []
    try:
        for L in (1024, 2048, 4096, 8192):
            inputs = [{"kind": "randn", "shape": [1, 1, L, 64]}] * 3
            peaks = {}
            for name in ("blockwise_attention", "scaled_dot_product_attention"):
                peaks[name] = peak_memory(Target(worker, name), inputs, timeout=300)[0] / 2**20
            rows.append([L, f"{L * L * 4 / 2**20:.0f}", f"{peaks['blockwise_attention']:.1f}",
                         f"{peaks['scaled_dot_product_attention']:.1f}"])
    finally:
        worker.close()
    table("Peak extra memory of one call, MiB (the sandboxed worker's cgroup peak), d=64, block_size=64",
          ["L", "L x L float32", "blockwise", "full attention"], rows)


def calibration(n):
    """The suite's own rule (checks.speed_ratios: early stop, re-measure near the limit), n gradings each."""
    ref = Learner(learner_cells(read(source_notebook("attention"))), role="reference")
    same = Learner(learner_cells(read(source_notebook("attention"))))
    loop = Learner([{"id": "loop", "source": LOOP_SDPA}])
    inputs = [{"kind": "randn", "shape": SDPA_SPEED_SHAPE}] * 3
    rows = []
    try:
        for label, proxy in (("reference vs reference", same), ("loop over queries vs reference", loop)):
            ratios, spreads, measured = [], [], []
            for _ in range(n):
                got, mismatch = speed_ratios(Target(proxy, "scaled_dot_product_attention"),
                                             Target(ref, "scaled_dot_product_attention"), inputs,
                                             calls=SDPA_SPEED_CALLS)
                ratios.append(min(got) if got and mismatch is None else float("inf"))
                measured.append(len(got))
                c = compare(Target(proxy, "scaled_dot_product_attention"), Target(ref, "scaled_dot_product_attention"),
                            inputs, calls=SDPA_SPEED_CALLS)
                spreads.append(c.spread())
            fails = sum(r > SPEED_FACTOR for r in ratios)
            rows.append([label, n, f"{statistics.median(ratios):.2f}", f"{min(ratios):.2f}", f"{max(ratios):.2f}",
                         f"{statistics.median(spreads) * 100:.1f}%", f"{sum(measured) / n:.1f}", f"{fails}/{n}"])
    finally:
        for w in (ref, same, loop):
            w.close()
    table(f"Speed check calibration: scaled_dot_product_attention, {'x'.join(map(str, SDPA_SPEED_SHAPE))}, "
          f"{SDPA_SPEED_CALLS} calls per run, "
          f"allowed ratio {SPEED_FACTOR:g} (the ratio the suite's rule keeps; spread from a full 7-repetition run)",
          ["comparison", "gradings", "median ratio", "min", "max", "run-to-run spread", "measurements", "failed"], rows)


def parts_calibration(n):
    """The checks timed with the course's parts, as the suites run them (`timed_reference`): both sides' parts are
    computed by a worker of course code, through the grader."""
    att, res = (learner_cells(read(source_notebook(asg))) for asg in ("attention", "residual"))
    head_loop = next(v for v in variants.load("attention") if v.name == "mha_head_loop").cells
    slow = max(1, n // 4)
    checks = [(att, "MultiHeadAttention", (64, 4), ["scaled_dot_product_attention"],
               test_attention.MHA_SPEED_SHAPE, test_attention.MHA_SPEED_CALLS,
               [("reference vs reference", att, n),
                ("a loop over heads (charged by the count of its calls)",
                 learner_cells(variants.submission("attention", head_loop)), n),
                ("a loop over query positions", att + [{"id": "loop", "source": LOOP_MHA}], slow)]),
              (res, "TransformerBlock", (64, 4, 128), ["MultiHeadAttention", "FeedForward", "LayerNorm"],
               test_residual.BLOCK_SPEED_SHAPE, test_residual.BLOCK_SPEED_CALLS,
               [("reference vs reference", res, n),
                ("FeedForward in a loop over positions", res + [{"id": "loop", "source": LOOP_BLOCK}], slow)])]
    for cells, name, args, parts, shape, calls, answers in checks:
        ref, course = Learner(cells, role="reference"), Learner(cells, role="course parts")
        rows = []
        try:
            for label, answer, gradings in answers:
                mine = Learner(answer)
                ratios, seconds, stopped = [], [], set()
                try:
                    with mine.course_parts(parts, course), ref.course_parts(parts, course):
                        for _ in range(gradings):
                            t0 = time.perf_counter()
                            got, mismatch = speed_ratios(*module_targets(mine, ref, name, *args),
                                                         [{"kind": "randn", "shape": shape}], calls=calls)
                            seconds.append(time.perf_counter() - t0)
                            ratios.append(min(got) if got and mismatch is None else float("inf"))
                            stopped |= {mismatch} - {None}
                finally:
                    mine.close()
                rows.append([label, gradings, f"{statistics.median(ratios):.2f}", f"{min(ratios):.2f}",
                             f"{max(ratios):.2f}", f"{statistics.median(seconds):.2f}",
                             f"{sum(r > SPEED_FACTOR for r in ratios)}/{gradings}", "; ".join(stopped) or "-"])
        finally:
            ref.close()
            course.close()
        table(f"Speed check calibration: {name} with the course's {', '.join(parts)}, {'x'.join(map(str, shape))}, "
              f"{calls} calls per run, allowed ratio {SPEED_FACTOR:g}",
              ["comparison", "gradings", "median ratio", "min", "max", "s per check", "failed", "stopped because"],
              rows)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--gradings", type=int, default=20)
    a = p.parse_args()
    vs_torch()
    blockwise_memory()
    calibration(a.gradings)
    parts_calibration(a.gradings)


if __name__ == "__main__":
    main()
