"""GPU speed checks: run by `make gpu-check` on a CUDA machine, skipped elsewhere with the reason.

On CUDA the timing clock is the grader's wall clock around a request that ends with a device-wide
synchronise (work on side streams counts), with the L2 cache flushed before each run.
"""
import os

import pytest
import torch

from autograder import variants
from autograder.learner import Learner
from autograder.notebooks import learner_cells, read, source_notebook
from autograder.suites.checks import SPEED_FACTOR
from autograder.timing import Target, compare, peak_memory

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device here: the GPU speed checks run with `make gpu-check` on one")

SDPA = "scaled_dot_product_attention"
LOOP = '''import math
import torch

def scaled_dot_product_attention(q, k, v, mask=None):
    rows = [torch.softmax(q[..., i:i + 1, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ v
            for i in range(q.shape[-2])]
    return torch.cat(rows, dim=-2), None
'''
FULL_MATRIX = {v.name: v for v in variants.load("attention")}["blockwise_full_matrix"].cells


@pytest.fixture(scope="module")
def workers():
    os.environ["GRADER_DEVICE"] = "cuda"
    ws = {name: Learner(cells) for name, cells in (
        ("ref", learner_cells(read(source_notebook("attention")))),
        ("same", learner_cells(read(source_notebook("attention")))),
        ("loop", [{"id": "loop", "source": LOOP}]),
        ("full", learner_cells(variants.submission("attention", FULL_MATRIX))))}
    yield ws
    for w in ws.values():
        w.close()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_reference_passes_its_own_check_on_cuda(workers, dtype):
    inputs = [{"kind": "randn", "shape": [8, 16, 1024, 64], "dtype": dtype}] * 3
    c = compare(Target(workers["same"], SDPA), Target(workers["ref"], SDPA), inputs, reps=15, rtol=2e-2)
    print(f"cuda {dtype} reference vs reference: ratio {c.ratio:.3f}, spread {c.spread():.1%}, "
          f"{len(c.reference)} repetitions, standard error {c.standard_error():.2%}")
    assert c.mismatch is None and c.ratio <= SPEED_FACTOR


def test_query_loop_fails_on_cuda(workers):
    inputs = [{"kind": "randn", "shape": [8, 16, 1024, 64]}] * 3
    c = compare(Target(workers["loop"], SDPA), Target(workers["ref"], SDPA), inputs, reps=5)
    print(f"cuda float32 query loop vs reference: ratio {c.ratio:.1f}")
    assert c.mismatch is not None or c.ratio > SPEED_FACTOR


def test_blockwise_memory_on_cuda(workers):
    """The allocator's peak (read through functions bound before learner code ran) separates the two."""
    L = 16384
    inputs, matrix = [{"kind": "randn", "shape": [1, 4, L, 64]}] * 3, 4 * L * L * 4
    blockwise = peak_memory(Target(workers["ref"], "blockwise_attention"), inputs, {"block_size": 64})[0]
    full = peak_memory(Target(workers["full"], "blockwise_attention"), inputs, {"block_size": 64})[0]
    print(f"cuda blockwise_attention peak extra memory at L = {L}, 4 heads: reference {blockwise / 2**20:.0f} MiB, "
          f"whole score matrix {full / 2**20:.0f} MiB ({matrix / 2**20:.0f} MiB per copy)")
    assert blockwise < matrix / 4 <= full
