"""Known answers to the fused attention exercise (see autograder/authoring/variants.py): Triton kernels, each a change
of the reference's (`changed`), so that each differs from a right kernel in one idea."""
from autograder.authoring.variants import Bug, Correct, reference_sources

KERNEL, CAUSAL = "attention_kernel", "causal_attention_kernel"
_REFERENCE = reference_sources("fused_attention")
FORWARD, SKIPPING = _REFERENCE[KERNEL], _REFERENCE[CAUSAL]


def changed(source: str, old: str, new: str, count: int = 1) -> str:
    """`source` with `old` replaced by `new` (which must be there: a variant that changes nothing is no variant)."""
    assert old in source, old
    return source.replace(old, new, count)


def bug(name: str, cells: dict, cause: str, about: str = ""):
    """A known mistake whose graded cell names `cause`."""
    return Bug(name, cells, {f"{next(iter(cells))}_tests": cause}, about, cause=cause)


def observed(name: str, cells: dict, text: str, about: str = ""):
    """A known mistake only a measurement sees (bytes moved, the compiled kernel): right values, slow on a GPU; the
    measurement says what it saw, and no cause is named."""
    return Bug(name, cells, {f"{next(iter(cells))}_tests": text}, about, kind="speed")


# -- correct kernels written otherwise ------------------------------------------------------------------------------
LOG2E = 1.4426950408889634
EXP2 = changed(changed(changed(changed(FORWARD,
    "        s = tl.dot(q, k) * scale                                          # (BLOCK_M, BLOCK_N) scores\n",
    "        s = tl.dot(q, k) * (scale * 1.4426950408889634)                   # scores in base 2: exp2 is cheaper\n"),
    "        p = tl.exp(s - m_safe[:, None])\n", "        p = tl.exp2(s - m_safe[:, None])\n"),
    "        alpha = tl.exp(m_i - m_safe)                                      # rescales what was summed so far\n",
    "        alpha = tl.exp2(m_i - m_safe)\n"),
    "    tl.store(LSE + bh * Lq + rows, m_i + tl.log(l_safe), mask=rows < Lq)",
    "    tl.store(LSE + bh * Lq + rows, (m_i + tl.log2(l_safe)) / 1.4426950408889634, mask=rows < Lq)")

# the key blocks from the last to the first (an online softmax takes them in any order). Correct in float16 too: on
# inputs of float16 (B = 2, H = 2, Lq = 150, Lk = 141, d = 64, causal or not) its outputs are within one float16 ulp
# (4.9e-4) of the reference kernel's, its largest error against attention in float64 the reference's (9.0e-4), and
# its log-sum-exp within 4.8e-7 of the reference's: no check can tell it from the reference, and none should.
# Compiled, Triton's code generator turns the constant negative step into an ascending loop over the same blocks
# (code_generator.visit_For).
REVERSED = changed(FORWARD, "    for start_n in range(0, Lk, BLOCK_N):\n",
                   "    for start_n in range((tl.cdiv(Lk, BLOCK_N) - 1) * BLOCK_N, -1, -BLOCK_N):\n")
# smaller blocks of queries than of keys, and the causal kernel's loop bound written in key blocks
SMALL_BLOCKS = changed(FORWARD, "BLOCK_M, BLOCK_N = 64, 64", "BLOCK_M, BLOCK_N = 32, 64")
BLOCKS_COUNTED = changed(SKIPPING, "    for start_n in range(0, last, BLOCK_N):\n",
                         "    for j in range(0, tl.cdiv(last, BLOCK_N)):\n        start_n = j * BLOCK_N\n")

# -- known mistakes -------------------------------------------------------------------------------------------------
NO_RESCALE = "when a block raises the running max from m to m', what was summed before it (l and acc) is not " \
             "multiplied by exp(m - m')"
OFF_BY_ONE = "the diagonal is off by one: key j is visible to query i when j <= i, itself included"
RAGGED = "the ragged tail is not masked: keys past Lk are weighed (mask the scores of the last block with keys < Lk, " \
         "so that they are -inf)"
EXP2_WITHOUT_LOG2E = "tl.exp2 computes 2^x: the scores must be multiplied by log2(e) = 1.4427 first (and the " \
                     "log-sum-exp divided by it)"
LSE_WITHOUT_MAX = "the log-sum-exp is log(l) without the running max: it is m + log(l)"
K_STRIDES = "K is addressed with Q's strides: each tensor has its own (stride_kn, stride_kd)"

VARIANTS = [
    Correct("exp2_with_log2e", {KERNEL: EXP2}, "tl.exp2 on scores scaled by log2(e), as the Triton tutorial does"),
    Correct("key_blocks_reversed", {KERNEL: REVERSED}, "the key blocks from the last to the first"),
    Correct("small_query_blocks", {KERNEL: SMALL_BLOCKS, CAUSAL: BLOCKS_COUNTED},
            "BLOCK_M = 32 < BLOCK_N = 64, and the causal loop counted in key blocks"),
    bug("running_sum_not_rescaled", {KERNEL: changed(FORWARD, "        l_i = l_i * alpha + tl.sum(p, 1)\n",
                                                     "        l_i = l_i + tl.sum(p, 1)\n")}, NO_RESCALE),
    bug("diagonal_off_by_one", {KERNEL: changed(FORWARD, "keys[None, :] <= rows[:, None]",
                                                "keys[None, :] < rows[:, None]")}, OFF_BY_ONE),
    bug("ragged_tail_unmasked", {KERNEL: changed(FORWARD, "        visible = keys[None, :] < Lk\n",
                                                 "        visible = keys[None, :] >= 0\n")}, RAGGED,
        "the loads of the last block are masked, its scores are not: keys past Lk score 0 and are weighed"),
    bug("exp2_without_log2e", {KERNEL: changed(changed(FORWARD, "        p = tl.exp(s - m_safe[:, None])\n",
                                                       "        p = tl.exp2(s - m_safe[:, None])\n"),
                                               "        alpha = tl.exp(m_i - m_safe)",
                                               "        alpha = tl.exp2(m_i - m_safe)")},
        EXP2_WITHOUT_LOG2E),
    bug("lse_without_max", {KERNEL: changed(FORWARD, "m_i + tl.log(l_safe), mask=rows < Lq",
                                            "tl.log(l_safe), mask=rows < Lq")}, LSE_WITHOUT_MAX),
    bug("k_strides_of_q", {KERNEL: changed(FORWARD, "keys[None, :] * stride_kn + dims[:, None] * stride_kd",
                                           "keys[None, :] * stride_qm + dims[:, None] * stride_qd")}, K_STRIDES),
    observed("causal_skips_no_block", {CAUSAL: changed(SKIPPING, "    for start_n in range(0, last, BLOCK_N):\n",
                                                       "    for start_n in range(0, Lk, BLOCK_N):\n")},
             "times the", "the causal kernel masks the blocks above the diagonal but still reads them"),
    observed("q_read_per_key_block", {KERNEL: changed(changed(FORWARD, "        s = tl.dot(q, k) * scale ",
        "        q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm\n"
        "                    + dims[None, :] * stride_qd,\n"
        "                    mask=rows[:, None] < Lq, other=0.0)\n        s = tl.dot(q, k) * scale "),
        "    q = tl.load(Q + b * stride_qb",
        "    q = tl.zeros([BLOCK_M, HEAD_DIM], Q.dtype.element_ty)\n    qq = tl.load(Q + b * stride_qb")},
             "bytes of Q", "Q's block loaded again for every key block"),
    observed("scores_written_out", {KERNEL: changed(FORWARD, "        m_new = tl.maximum(m_i, tl.max(s, 1))\n",
        "        tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + cols[None, :] * stride_od,\n"
        "                 s.to(O.dtype.element_ty), mask=(rows[:, None] < Lq) & (cols[None, :] < HEAD_DIM))\n"
        "        m_new = tl.maximum(m_i, tl.max(s, 1))\n")},
             "bytes of O", "each block of scores stored to global memory (in O, overwritten at the end)"),
    # the blocks, chosen in part 1's cell, are both kernels' blocks: both lose their compile check
    Bug("blocks_too_large", {KERNEL: changed(FORWARD, "BLOCK_M, BLOCK_N = 64, 64\nNUM_WARPS, NUM_STAGES = 4, 2",
                                             "BLOCK_M, BLOCK_N = 128, 128\nNUM_WARPS, NUM_STAGES = 4, 4")},
        {f"{KERNEL}_tests": "the blocks are too large for 4 warps", f"{CAUSAL}_tests": "the blocks are too large"},
        "blocks of 128 x 128 with 4 warps and 4 stages: at d = 128 the registers spill and the shared memory of "
        "four stages does not fit", kind="speed"),
]
# The known mistakes each visible check catches: variant -> (visible-check cell, text of the check's message).
VISIBLE = {
    "running_sum_not_rescaled": ("attention_kernel_checks", "rescale what was summed"),
    "diagonal_off_by_one": ("attention_kernel_checks", "the output is wrong"),
    "ragged_tail_unmasked": ("attention_kernel_checks", "the output is wrong"),
    "exp2_without_log2e": ("attention_kernel_checks", "the output is wrong"),
    "lse_without_max": ("attention_kernel_checks", "the log-sum-exp is wrong"),
}
# The known mistakes no visible check can see, and why.
HIDDEN_ONLY: dict[str, str] = {
    "k_strides_of_q": "the visible checks' inputs are contiguous, where Q's row and feature strides are K's: only "
                      "inputs that are not contiguous show it",
    "causal_skips_no_block": "its values are right: only the bytes it moves show it",
    "q_read_per_key_block": "its values are right: only the bytes it moves show it",
    "scores_written_out": "its values are right: only the bytes it moves show it",
    "blocks_too_large": "its values are right: only compiling it for a GPU shows it",
}

# The book's section that teaches each mistake, where it is not the one section its part's description names (the
# class report's re-teach link): `<page>#<id>`, book/<page>.md and the id Sphinx gives the heading.
SECTIONS = {
    "running_sum_not_rescaled": "fused_attention#the-online-softmax-recalled",
    "lse_without_max": "fused_attention#the-online-softmax-recalled",
    "exp2_without_log2e": "fused_attention#the-online-softmax-recalled",
    "diagonal_off_by_one": "fused_attention#causal-attention-reads-half-the-keys",
}
