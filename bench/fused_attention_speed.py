"""The GPU speed rule of fused_attention measured (`make bench`, `make gpu-check`): numbers, not pass/fail.

Known answers' kernels (examples/variants/fused_attention.py: the reference, correct alternatives, a correct kernel
with 16 x 16 blocks and one warp, the mistakes only a measurement sees) compiled on the GPU and timed against torch's
flash backend by the suite's own rule (test_fused_attention.gpu_ratios) at each of its GPU_SPEED_CALLS, N gradings
each: the ratio's median, min and max, and in how many gradings the rule (GPU_SPEED_FACTOR) fails the answer. Without
a CUDA device it says so and measures nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

SMALL_BLOCKS = ("BLOCK_M, BLOCK_N = 64, 64\nNUM_WARPS, NUM_STAGES = 4, 2",
                "BLOCK_M, BLOCK_N = 16, 16\nNUM_WARPS, NUM_STAGES = 1, 1")


def answers(variants, reference: dict) -> list[tuple[str, dict, tuple[str, ...]]]:
    """(label, the cells it replaces, the parts timed): what a correct answer may be, and what the rule must fail."""
    known = {v.name: v for v in variants.load("fused_attention")}
    both = ("flash_attention", "flash_attention_causal")
    assert SMALL_BLOCKS[0] in reference["attention_kernel"]
    tiny = {"attention_kernel": reference["attention_kernel"].replace(*SMALL_BLOCKS)}
    return [("reference", {}, both),
            ("exp2_with_log2e (correct)", known["exp2_with_log2e"].cells, both[:1]),
            ("small_query_blocks (correct)", known["small_query_blocks"].cells, both),
            ("16 x 16 blocks, 1 warp, 1 stage (correct)", tiny, both),
            ("causal_skips_no_block (mistake)", known["causal_skips_no_block"].cells, both[1:]),
            ("q_read_per_key_block (mistake)", known["q_read_per_key_block"].cells, both[:1]),
            ("scores_written_out (mistake)", known["scores_written_out"].cells, both[:1])]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gradings", type=int, default=5, help="gradings of each answer, part and call (default 5)")
    p.add_argument("--out", help="also write the table here (markdown)")
    a = p.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("bench/fused_attention_speed.py: skipped: no CUDA device here (torch.cuda.is_available() is False), "
              "so the GPU speed rule of fused_attention was not measured; run it on an NVIDIA GPU (make gpu-check)")
        return 0
    os.environ.setdefault("GRADER_DEVICE", "cuda")       # the workers make their inputs and run on the GPU

    from autograder.authoring import variants
    from autograder.notebooks import learner_cells
    from autograder.verdict.learner import Learner, LearnerError, WorkerDied
    from autograder.verdict.suites import test_fused_attention as suite

    reference = variants.reference_sources("fused_attention")
    setup = [c for c in learner_cells(variants.submission("fused_attention")) if c["id"] == "setup"]
    flash = Learner([*setup, {"id": "sdpa_flash", "source": suite.SDPA_FLASH}], role="reference")
    rows = []
    try:
        for label, cells, parts in answers(variants, reference):
            mine = Learner(suite.worker_cells(learner_cells(variants.submission("fused_attention", cells))),
                           refuse=suite.REFUSED_OPS, library=suite.LIBRARY)
            mine.modules = suite.ALLOWED_MODULES
            try:
                for part in parts:
                    for call in suite.GPU_SPEED_CALLS:
                        ratios, failed, said = [], 0, set()
                        for _ in range(a.gradings):
                            try:
                                got, mismatch = suite.gpu_ratios(mine, flash, part, call)
                            except (LearnerError, WorkerDied) as e:
                                got, mismatch = [], str(e)[:120]
                            best = min(got) if got and mismatch is None else float("inf")
                            ratios.append(best)
                            failed += best > suite.GPU_SPEED_FACTOR
                            said |= {mismatch} - {None}
                        rows.append([label, part, suite.where(call), len(ratios), f"{statistics.median(ratios):.2f}",
                                     f"{min(ratios):.2f}", f"{max(ratios):.2f}", f"{failed}/{len(ratios)}",
                                     "; ".join(sorted(said)) or "-"])
                        print(" | ".join(map(str, rows[-1])), flush=True)
            finally:
                mine.close()
    finally:
        flash.close()
    header = ["answer", "part", "call", "gradings", "median ratio", "min", "max", "failed", "mismatch"]
    text = "\n".join([f"# fused_attention on {torch.cuda.get_device_name()}: time against torch's flash backend",
                      "", f"The rule: at most {suite.GPU_SPEED_FACTOR:g}x (test_fused_attention.GPU_SPEED_FACTOR); "
                      "a ratio is the best of the rule's measurements in one grading.", "",
                      "| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
                      *("| " + " | ".join(map(str, r)) + " |" for r in rows)])
    print("\n" + text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
