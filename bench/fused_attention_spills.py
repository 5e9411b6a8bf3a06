"""The register rule of fused_attention measured (`make bench`): numbers, not pass/fail.

The course's attention_kernel compiled for sm_80 and sm_90 at d = 128 in float16, as the suite compiles a learner's
(test_fused_attention.compile_request), at every BLOCK_M, BLOCK_N and NUM_WARPS the notebook allows: registers, spilled
bytes a thread, shared memory, and whether the suite's rule (triton_kernels.compile_problems, spill_budget) fails it.
No GPU needed: Triton compiles for NVIDIA targets on any machine. About 10 minutes of one core.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys


def measure(stages: int) -> list[dict]:
    os.environ["TRITON_INTERPRET"] = "0"            # compiled, not interpreted (before Triton is imported)
    from autograder.inside import kernels
    from autograder.notebooks import reference_namespace
    from autograder.verdict.suites import test_fused_attention as suite

    ns = reference_namespace("fused_attention")
    rows = []
    for bm, bn, warps in itertools.product(*(suite.BOUNDS[n] for n in ("BLOCK_M", "BLOCK_N", "NUM_WARPS"))):
        suite.CHOSEN.update(BLOCK_M=bm, BLOCK_N=bn, NUM_WARPS=warps, NUM_STAGES=stages)
        facts = kernels.facts(ns, suite.compile_request("attention_kernel"))
        rows.append({"bm": bm, "bn": bn, "warps": warps, "stages": stages, "facts": facts})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def report(rows: list[dict]) -> str:
    from autograder.verdict.suites import test_fused_attention as suite
    from autograder.verdict.suites import triton_kernels as tk

    def cell(f: dict) -> str:
        if "error" in f:
            return "does not compile"
        return f"{f['registers']} / {f['spill_stores'] + f['spill_loads']:,} / {f['shared']:,}"

    lines = ["| BLOCK_M x BLOCK_N, warps, stages | sm_80: registers / spilled bytes / shared bytes | sm_90: the same "
             "| spill budget | the rule |", "| --- | --- | --- | ---: | --- |"]
    failed = 0
    for r in rows:
        problems = tk.compile_problems(r["facts"], r["bm"], r["bn"], suite.COMPILE_HEAD_DIM, r["warps"])
        failed += bool(problems)
        lines.append(f"| {r['bm']} x {r['bn']}, {r['warps']}, {r['stages']} | {cell(r['facts']['sm_80'])} | "
                     f"{cell(r['facts']['sm_90'])} | {tk.spill_budget(r['bn'], suite.COMPILE_HEAD_DIM, r['warps'])} | "
                     f"{'fails: ' + problems[0].split(' (')[0] if problems else 'passes'} |")
    head = (f"# fused_attention: the course's attention_kernel compiled at d = {suite.COMPILE_HEAD_DIM} in float16\n\n"
            f"{len(rows) - failed} of {len(rows)} choices pass the register and shared-memory rule, {failed} fail "
            "(bench/fused_attention_spills.py).\n\n")
    return head + "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--jsonl", help="report these measurements (lines of JSON, as this script writes to stderr) "
                                   "instead of compiling")
    p.add_argument("--out", help="also write the table here (markdown)")
    a = p.parse_args()
    if a.jsonl:
        with open(a.jsonl) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    else:
        rows = measure(a.stages)
    text = report(rows)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
