"""Blind corpus, fused_attention: plausible learners' answers, each with what it claims to be."""
ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


def variant(source, *edits):
    """source with each (old, new) edit made once (old must be there exactly once): a learner's cell that differs
    from a base answer in a few lines."""
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


# A learner's straightforward answer to part 1 (the base the entries below vary).
KERNEL = '''
# Your block sizes: BLOCK_M and BLOCK_N each one of 16, 32, 64, 128; NUM_WARPS one of 1, 2, 4, 8; NUM_STAGES one of
# 1, 2, 3, 4 (the hidden tests compile your kernel with them and count its bytes with them).
BLOCK_M, BLOCK_N = 64, 64
NUM_WARPS, NUM_STAGES = 4, 2


@triton.jit
def attention_kernel(Q, K, V, O, LSE,
                     stride_qb, stride_qh, stride_qm, stride_qd,
                     stride_kb, stride_kh, stride_kn, stride_kd,
                     stride_vb, stride_vh, stride_vn, stride_vd,
                     stride_ob, stride_oh, stride_om, stride_od,
                     H, Lq, Lk, scale,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=rows[:, None] < Lq, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, Lk, BLOCK_N):
        keys = start_n + cols
        k_ptrs = K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd
        k = tl.load(k_ptrs, mask=keys[None, :] < Lk, other=0.0)                 # (HEAD_DIM, BLOCK_N)
        s = tl.dot(q, k) * scale
        allowed = keys[None, :] < Lk
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        v_ptrs = V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd
        v = tl.load(v_ptrs, mask=keys[:, None] < Lk, other=0.0)                 # (BLOCK_N, HEAD_DIM)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    out = acc / tl.where(l == 0.0, 1.0, l)[:, None]
    o_ptrs = O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=rows[:, None] < Lq)
    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)
'''

# A learner's straightforward answer to part 2.
CAUSAL_KERNEL = '''
@triton.jit
def causal_attention_kernel(Q, K, V, O, LSE,
                            stride_qb, stride_qh, stride_qm, stride_qd,
                            stride_kb, stride_kh, stride_kn, stride_kd,
                            stride_vb, stride_vh, stride_vn, stride_vd,
                            stride_ob, stride_oh, stride_om, stride_od,
                            H, Lq, Lk, scale,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd,
                mask=rows[:, None] < Lq, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    end = tl.minimum(Lk, (start_m + 1) * BLOCK_M)              # no query of this block sees a key past it
    for start_n in range(0, end, BLOCK_N):
        keys = start_n + cols
        k = tl.load(K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd,
                    mask=keys[None, :] < Lk, other=0.0)
        s = tl.dot(q, k) * scale
        s = tl.where((keys[None, :] < Lk) & (keys[None, :] <= rows[:, None]), s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=keys[:, None] < Lk, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    out = acc / tl.where(l == 0.0, 1.0, l)[:, None]
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od,
             out.to(O.dtype.element_ty), mask=rows[:, None] < Lq)
    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)
'''


def same_as_float64(causal, *shape, prepare=""):
    """shown_by code: the entry's kernel (causal="part2": flash_attention_causal) against attention in float64 on
    qkv(*shape), after `prepare`."""
    f = "flash_attention_causal(q, k, v)" if causal == "part2" else f"flash_attention(q, k, v, causal={causal})"
    return f"""
q, k, v = qkv{shape}
{prepare}
out, lse = {f}
want, want_lse = spec.attention_reference(q, k, v, {causal is not False})
gap_o, gap_l = H.maxdiff(out, want), H.maxdiff(lse, want_lse)
shown = gap_o > 1e-3 or gap_l > 1e-3
detail = f"qkv{shape}: out off by {{gap_o:.2e}}, log-sum-exp by {{gap_l:.2e}}"
"""


# ----------------------------------------------------------------------------------------------------------------------
# attention_kernel: mistakes
# ----------------------------------------------------------------------------------------------------------------------

entry("fa_acc_not_rescaled", "mistake", {"attention_kernel": variant(
    KERNEL, ("        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)\n",
             "        acc = acc + tl.dot(p.to(v.dtype), v)\n"))},
    "The running sum l is rescaled when a block raises the running max, but the running output acc is not: what was "
    "summed before is weighted by the old max. The text asks to \"update the running max m, the running sum l and the "
    "running output acc as the online softmax does\"; hint 2: \"acc = acc * alpha + p @ v\".",
    shown_by=same_as_float64(False, 1, 1, 20, 150, 16, prepare="k[..., 100:, :] *= 4.0"))

entry("fa_assumes_contiguous", "mistake", {"attention_kernel": variant(
    KERNEL,
    ("    q_ptrs = Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd\n",
     "    q_ptrs = Q + bh * Lq * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :]          # (B, H, L, d) in order\n"),
    ("        k_ptrs = K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd\n",
     "        k_ptrs = K + bh * Lk * HEAD_DIM + keys[None, :] * HEAD_DIM + dims[:, None]\n"),
    ("        v_ptrs = V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd\n",
     "        v_ptrs = V + bh * Lk * HEAD_DIM + keys[:, None] * HEAD_DIM + dims[None, :]\n"),
    ("    o_ptrs = O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od\n",
     "    o_ptrs = O + bh * Lq * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :]\n"))},
    "The offsets assume contiguous (B, H, L, d) tensors and ignore the strides the launcher passes: heads cut from "
    "(B, L, H, d) by transpose(1, 2) are read from the wrong places. The text: \"Element [b, h, i, c] of Q is at Q + "
    "b * stride_qb + h * stride_qh + i * stride_qm + c * stride_qd (the arguments may be views that are not "
    "contiguous: use the strides)\".",
    shown_by="""
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, L, 2, 16, generator=g).transpose(1, 2) for L in (40, 50, 50))
out, lse = flash_attention(q, k, v)
want, want_lse = spec.attention_reference(q, k, v, False)
gap = H.maxdiff(out, want)
shown = gap > 1e-3
detail = f"heads cut from (B, L, H, d) by transpose(1, 2): out off by {gap:.2f}"
""")

entry("fa_padded_keys_scored", "mistake", {"attention_kernel": variant(
    KERNEL, ("""        allowed = keys[None, :] < Lk
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))
""", """        if CAUSAL:                                          # the loads are masked: the tail is 0 already
            s = tl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
"""))},
    "The loads of the ragged tail are masked (other=0.0), but the scores of those padding keys are not: they score 0 "
    "and take part in the softmax. The text: O is \"softmax(scale * q_i k_j^T over the keys j)\", and \"Lq and Lk "
    "need not be multiples of the blocks\"; hint 2: \"Masked scores are -inf\".",
    shown_by=same_as_float64(False, 1, 2, 70, 45, 16))

entry("fa_lse_offset_without_heads", "mistake", {"attention_kernel": variant(
    KERNEL, ("    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)\n",
             "    tl.store(LSE + b * Lq + rows, m + tl.log(l), mask=rows < Lq)\n"))},
    "The log-sum-exp is stored at LSE + b * Lq + i, forgetting the head: with several heads they overwrite each "
    "other. The text: \"LSE[b, h, i] at LSE + bh * Lq + i\".",
    shown_by=same_as_float64(False, 1, 2, 70, 45, 16))

entry("fa_causal_local_indices", "mistake", {"attention_kernel": variant(
    KERNEL, ("            allowed = allowed & (keys[None, :] <= rows[:, None])\n",
             "            allowed = allowed & (cols[None, :] <= tl.arange(0, BLOCK_M)[:, None])\n"))},
    "The causal test compares the indices within the blocks, not the positions: every block of keys is masked as if "
    "it were on the diagonal. The text: \"with CAUSAL, key j is visible to query i only when j <= i, counted from the "
    "start of both\".",
    shown_by=same_as_float64(True, 1, 1, 100, 100, 16))

entry("fa_no_running_max", "mistake", {"attention_kernel": variant(
    KERNEL,
    ("""        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, axis=1)
""", """        p = tl.exp(s)                                 # exp(-inf) = 0 for the masked keys
        l = l + tl.sum(p, axis=1)
"""),
    ("        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)\n        m = m_new\n",
     "        acc = acc + tl.dot(p.to(v.dtype), v)\n"),
    ("    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)\n",
     "    tl.store(LSE + bh * Lq + rows, tl.log(l), mask=rows < Lq)\n"))},
    "No running max: exp of the raw scores overflows float32 once a score passes 88. The text asks to \"update the "
    "running max m, the running sum l and the running output acc as the online softmax does\", and the graded cell "
    "holds it to \"scores around 1e3 do not overflow\".",
    shown_by="""
q, k, v = qkv(1, 1, 40, 84, 16)
q, k = 8 * q, 8 * k                                   # scores of a few hundred
out, lse = flash_attention(q, k, v)
want, want_lse = spec.attention_reference(q, k, v, False)
gap = H.maxdiff(out, want)
shown = gap > 1e-3
detail = f"scores up to {(q @ k.transpose(-1, -2)).abs().max().item() / 4:.0f}: out off by {gap}"
""")

entry("fa_exp2_without_log2e", "mistake", {"attention_kernel": variant(
    KERNEL,
    ("        alpha = tl.exp(m - m_safe)\n        p = tl.exp(s - m_safe[:, None])\n",
     "        alpha = tl.exp2(m - m_safe)                   # exp2 is the fast one on a GPU\n"
     "        p = tl.exp2(s - m_safe[:, None])\n"),
    ("    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)\n",
     "    tl.store(LSE + bh * Lq + rows, m + tl.log2(l), mask=rows < Lq)\n"))},
    "exp2 in place of exp, as fast kernels do, but without multiplying the scores by log2(e): the softmax has base 2. "
    "The text: \"O[b, h, i] = softmax(scale * q_i k_j^T over the keys j) @ v\" and \"LSE[b, h, i] = "
    "log(sum_j exp(scale * q_i k_j^T))\".",
    shown_by=same_as_float64(False, 1, 2, 70, 45, 16))

entry("fa_causal_bottom_right", "mistake", {"attention_kernel": variant(
    KERNEL, ("            allowed = allowed & (keys[None, :] <= rows[:, None])\n",
             "            allowed = allowed & (keys[None, :] <= rows[:, None] + Lk - Lq)      # the last query sees every key\n"))},
    "The diagonal is aligned to the bottom right (query i sees keys j <= i + Lk - Lq, as some decoding kernels do). "
    "The text: \"key j is visible to query i only when j <= i, counted from the start of both (as "
    "F.scaled_dot_product_attention(is_causal=True)\", and \"Lq != Lk is allowed\".",
    shown_by=same_as_float64(True, 2, 1, 37, 90, 32))

entry("fa_m_starts_at_zero", "mistake", {"attention_kernel": variant(
    KERNEL, ("    m = tl.full([BLOCK_M], float(\"-inf\"), dtype=tl.float32)\n",
             "    m = tl.zeros([BLOCK_M], dtype=tl.float32)\n"))},
    "The running max starts at 0, not -inf: a row whose scores are all far below 0 keeps the max 0 and every exp "
    "underflows to 0. Hint 2: \"Start with m = -inf\"; the graded cell: \"rows whose every score is far below 0 do "
    "not underflow\".",
    shown_by="""
q, k, v = qkv(1, 1, 30, 50, 16)
q, k = q.abs() + 10, -(k.abs() + 10)                   # every score about -400
out, lse = flash_attention(q, k, v)
want, want_lse = spec.attention_reference(q, k, v, False)
gap_o, gap_l = H.maxdiff(out, want), H.maxdiff(lse, want_lse)
shown = gap_o > 1e-3 or gap_l > 1e-3
detail = f"scores far below 0: out off by {gap_o:.2e}, log-sum-exp by {gap_l}"
""")

entry("fa_q_loaded_per_key_block", "mistake", {"attention_kernel": variant(
    KERNEL,
    ("    q = tl.load(q_ptrs, mask=rows[:, None] < Lq, other=0.0)\n", ""),
    ("        keys = start_n + cols\n",
     "        keys = start_n + cols\n        q = tl.load(q_ptrs, mask=rows[:, None] < Lq, other=0.0)\n"))},
    "Q's block is loaded again for every block of keys: right values, but Q is read once per key block. The text: "
    "\"Read Q's block once, then loop over the key blocks ... the hidden tests count every byte your kernel reads and "
    "writes\"; graded: \"Q, O and the log-sum-exp once\".",
    shown_by="""
q, k, v = qkv(1, 1, 40, 200, 16)
with H.count_bytes(Q=q, K=k, V=v) as c:
    flash_attention(q, k, v)
want = spec.minimum_bytes(q, k, v, BLOCK_M, BLOCK_N, False)
shown = c.reads["Q"] > want["reads"]["Q"]
detail = f"read {c.reads['Q']} bytes of Q, not {want['reads']['Q']}"
""")

entry("fa_two_pass_softmax", "mistake", {"attention_kernel": variant(
    KERNEL,
    ("    for start_n in range(0, Lk, BLOCK_N):\n        keys = start_n + cols\n",
     """    for start_n in range(0, Lk, BLOCK_N):                   # pass 1: each row's maximum score
        keys = start_n + cols
        k = tl.load(K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd,
                    mask=keys[None, :] < Lk, other=0.0)
        s = tl.dot(q, k) * scale
        allowed = keys[None, :] < Lk
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        m = tl.maximum(m, tl.max(tl.where(allowed, s, float("-inf")), axis=1))
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    for start_n in range(0, Lk, BLOCK_N):                   # pass 2: the sum and the output, with the exact max
        keys = start_n + cols
"""),
    ("""        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, axis=1)
""", """        p = tl.exp(s - m_safe[:, None])
        l = l + tl.sum(p, axis=1)
"""),
    ("        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)\n        m = m_new\n",
     "        acc = acc + tl.dot(p.to(v.dtype), v)\n"))},
    "A two-pass softmax: a first loop over the keys finds each row's max, a second computes the sum and the output. "
    "The values are right, but K is read twice. The text: \"load K's and V's block once each\", \"the hidden tests "
    "count every byte your kernel reads and writes\"; graded: \"K and V once per block of queries\".",
    shown_by="""
q, k, v = qkv(1, 1, 40, 200, 16)
with H.count_bytes(Q=q, K=k, V=v) as c:
    flash_attention(q, k, v)
want = spec.minimum_bytes(q, k, v, BLOCK_M, BLOCK_N, False)
shown = c.reads["K"] >= 2 * want["reads"]["K"]
detail = f"read {c.reads['K']} bytes of K, not {want['reads']['K']}"
""")

entry("fa_blocks_past_the_bounds", "mistake", {"attention_kernel": variant(
    KERNEL, ("BLOCK_M, BLOCK_N = 64, 64\n",
             "BLOCK_M, BLOCK_N = 128, 256          # bigger key blocks: fewer trips round the loop\n"))},
    "BLOCK_N = 256 is outside the bounds the cell gives, chosen to read K fewer times. The cell: \"BLOCK_M and BLOCK_N each one of 16, 32, 64, 128\"; the text: \"Choose BLOCK_M, "
    "BLOCK_N, NUM_WARPS, NUM_STAGES within the bounds in the cell\".",
    shown_by="""
shown = BLOCK_N not in (16, 32, 64, 128) or BLOCK_M not in (16, 32, 64, 128)
detail = f"BLOCK_M, BLOCK_N = {BLOCK_M}, {BLOCK_N}"
""")

# ----------------------------------------------------------------------------------------------------------------------
# causal_attention_kernel: mistakes
# ----------------------------------------------------------------------------------------------------------------------

CAUSAL_BYTES = """
q, k, v = qkv(1, 1, 200, 200, 16)
with H.count_bytes(Q=q, K=k, V=v) as c:
    out, lse = flash_attention_causal(q, k, v)
want = spec.minimum_bytes(q, k, v, BLOCK_M, BLOCK_N, True)
gap = H.maxdiff(out, spec.attention_reference(q, k, v, True)[0])
shown = c.reads["K"] > want["reads"]["K"] and gap < 1e-4
detail = (f"right values (off by {gap:.1e}) but read {c.reads['K']} bytes of K; the blocks on or below the diagonal "
          f"hold {want['reads']['K']}")
"""

entry("fca_loops_over_every_block", "mistake", {"causal_attention_kernel": variant(
    CAUSAL_KERNEL,
    ("    end = tl.minimum(Lk, (start_m + 1) * BLOCK_M)              # no query of this block sees a key past it\n"
     "    for start_n in range(0, end, BLOCK_N):\n",
     "    for start_n in range(0, Lk, BLOCK_N):                      # the mask removes the keys past the diagonal\n"))},
    "Every key block is loaded and then masked: right values, but the blocks above the diagonal are read for "
    "nothing. The text: \"a kernel that masks them still reads them ... whose loop over key blocks stops at the block "
    "that holds the diagonal of its last query\".",
    shown_by=CAUSAL_BYTES)

entry("fca_stops_before_the_diagonal", "mistake", {"causal_attention_kernel": variant(
    CAUSAL_KERNEL,
    ("    end = tl.minimum(Lk, (start_m + 1) * BLOCK_M)              # no query of this block sees a key past it\n",
     "    end = tl.minimum(Lk, start_m * BLOCK_M)                    # the blocks before this block of queries\n"))},
    "The loop stops before the block on the diagonal, so each query misses its own block of keys (the first block "
    "of queries sees no key at all). The text: the loop \"stops at the block that holds the diagonal of its last "
    "query\"; key j is visible to query i when j <= i, \"the diagonal included\".",
    shown_by=same_as_float64("part2", 1, 2, 90, 90, 16))

entry("fca_no_mask_on_the_diagonal", "mistake", {"causal_attention_kernel": variant(
    CAUSAL_KERNEL,
    ("        s = tl.where((keys[None, :] < Lk) & (keys[None, :] <= rows[:, None]), s, float(\"-inf\"))\n",
     "        s = tl.where(keys[None, :] < Lk, s, float(\"-inf\"))      # the loop already stops at the diagonal\n"))},
    "Skipping the blocks past the diagonal is taken for the whole causal mask: within the diagonal block each "
    "query still sees the keys after it. Hint 2: \"inside the loop the mask keys[None, :] <= rows[:, None] for the "
    "block on the diagonal (where the loop's last block is only partly visible)\".",
    shown_by=same_as_float64("part2", 1, 1, 90, 90, 16))

entry("fca_end_counted_in_key_blocks", "mistake", {
    "attention_kernel": variant(KERNEL, ("BLOCK_M, BLOCK_N = 64, 64\n", "BLOCK_M, BLOCK_N = 64, 32\n")),
    "causal_attention_kernel": variant(
        CAUSAL_KERNEL,
        ("    end = tl.minimum(Lk, (start_m + 1) * BLOCK_M)              # no query of this block sees a key past it\n",
         "    end = tl.minimum(Lk, (start_m + 1) * BLOCK_N)              # up to the key block of the diagonal\n"))},
    "The end of the loop is counted in key blocks, (start_m + 1) * BLOCK_N: right only while BLOCK_N = BLOCK_M; with "
    "BLOCK_N = 32 < BLOCK_M = 64 the queries past the first half never see their nearest keys. Hint 1: \"No query of "
    "the program sees a key at or past (start_m + 1) * BLOCK_M\"; the text: \"Its outputs are attention_kernel's "
    "with CAUSAL=True\", whatever the block sizes chosen within the bounds.",
    shown_by=same_as_float64("part2", 1, 1, 130, 130, 16))

# ----------------------------------------------------------------------------------------------------------------------
# correct alternatives
# ----------------------------------------------------------------------------------------------------------------------

entry("fa_exp2_with_log2e", "correct", {"attention_kernel": variant(
    KERNEL,
    ("        s = tl.dot(q, k) * scale\n",
     "        s = tl.dot(q, k) * (scale * 1.4426950408889634)          # in base 2: exp(x) = exp2(x * log2(e))\n"),
    ("        alpha = tl.exp(m - m_safe)\n        p = tl.exp(s - m_safe[:, None])\n",
     "        alpha = tl.exp2(m - m_safe)\n        p = tl.exp2(s - m_safe[:, None])\n"),
    ("    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)\n",
     "    tl.store(LSE + bh * Lq + rows, (m + tl.log2(l)) * 0.6931471805599453, mask=rows < Lq)     # back to ln\n"))},
    "exp2 with the scores multiplied by log2(e), as FlashAttention-2's Triton kernel does; the log-sum-exp turned "
    "back to natural log by ln 2.")

entry("fa_scale_in_the_exponent", "correct", {"attention_kernel": variant(
    KERNEL,
    ("        s = tl.dot(q, k) * scale\n", "        s = tl.dot(q, k)                                   # raw scores\n"),
    ("        alpha = tl.exp(m - m_safe)\n        p = tl.exp(s - m_safe[:, None])\n",
     "        alpha = tl.exp((m - m_safe) * scale)               # scale > 0: the max of the raw scores\n"
     "        p = tl.exp((s - m_safe[:, None]) * scale)\n"),
    ("    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)\n",
     "    tl.store(LSE + bh * Lq + rows, m * scale + tl.log(l), mask=rows < Lq)\n"))},
    "The running max kept on the raw scores q.k and the scale applied inside the exponentials (the max commutes "
    "with a positive scale); the log-sum-exp is scale * m + log l.")

entry("fa_pointers_advanced", "correct", {"attention_kernel": '''
BLOCK_M, BLOCK_N = 32, 64
NUM_WARPS, NUM_STAGES = 4, 3


@triton.jit
def attention_kernel(Q, K, V, O, LSE,
                     stride_qb, stride_qh, stride_qm, stride_qd,
                     stride_kb, stride_kh, stride_kn, stride_kd,
                     stride_vb, stride_vh, stride_vn, stride_vd,
                     stride_ob, stride_oh, stride_om, stride_od,
                     H, Lq, Lk, scale,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_b = pid_bh // H
    off_h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < Lq
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=row_ok[:, None], other=0.0)
    kT_ptrs = K + off_b * stride_kb + off_h * stride_kh + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd
    v_ptrs = V + off_b * stride_vb + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, Lk, BLOCK_N):
        key_ok = (start_n + offs_n) < Lk
        kT = tl.load(kT_ptrs, mask=key_ok[None, :], other=0.0)
        vb = tl.load(v_ptrs, mask=key_ok[:, None], other=0.0)
        keep = key_ok[None, :]
        if CAUSAL:
            keep = keep & ((start_n + offs_n)[None, :] <= offs_m[:, None])
        qk = tl.dot(q, kT) * scale + tl.where(keep, 0.0, float("-inf"))      # an additive mask
        row_max = tl.max(qk, 1)
        m_ij = tl.maximum(m_i, row_max)
        shift = tl.where(m_ij > float("-inf"), m_ij, 0.0)
        p = tl.exp(qk - shift[:, None])
        corr = tl.exp(m_i - shift)
        l_i = l_i * corr + tl.sum(p, 1)
        acc = acc * corr[:, None]
        acc += tl.dot(p.to(vb.dtype), vb)
        m_i = m_ij
        kT_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    l_div = tl.where(l_i > 0.0, l_i, 1.0)
    tl.store(O + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
             (acc / l_div[:, None]).to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + pid_bh * Lq + offs_m, m_i + tl.log(l_i), mask=row_ok)
'''}, "The Triton tutorial's style: pointers advanced by BLOCK_N rows at each step, an additive -inf mask, other "
      "block sizes within the bounds (32 x 64, 3 stages), V loaded next to K.")

entry("fca_end_without_minimum", "correct", {"causal_attention_kernel": variant(
    CAUSAL_KERNEL,
    ("    end = tl.minimum(Lk, (start_m + 1) * BLOCK_M)              # no query of this block sees a key past it\n",
     "    end = (start_m + 1) * BLOCK_M                              # past Lk the loads are masked: nothing read\n"))},
    "The loop's end not capped by Lk: with Lq > Lk the blocks past Lk load nothing (their mask is all False) and "
    "score -inf, so the values and the bytes read are the same.")

entry("fca_two_loops", "correct", {"causal_attention_kernel": '''
@triton.jit
def causal_attention_kernel(Q, K, V, O, LSE,
                            stride_qb, stride_qh, stride_qm, stride_qd,
                            stride_kb, stride_kh, stride_kn, stride_kd,
                            stride_vb, stride_vh, stride_vn, stride_vd,
                            stride_ob, stride_oh, stride_om, stride_od,
                            H, Lq, Lk, scale,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    Kb = K + b * stride_kb + h * stride_kh
    Vb = V + b * stride_vb + h * stride_vh
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd,
                mask=rows[:, None] < Lq, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    first = start_m * BLOCK_M                          # keys before it are visible to every query of the block
    below = tl.minimum(Lk, first)
    # 1. the keys wholly below the diagonal: no causal test needed
    for start_n in range(0, below, BLOCK_N):
        keys = start_n + cols
        ok = keys < below
        k = tl.load(Kb + keys[None, :] * stride_kn + dims[:, None] * stride_kd, mask=ok[None, :], other=0.0)
        v = tl.load(Vb + keys[:, None] * stride_vn + dims[None, :] * stride_vd, mask=ok[:, None], other=0.0)
        s = tl.where(ok[None, :], tl.dot(q, k) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    # 2. the keys of the diagonal block: key j for query i only when j <= i
    for start_n in range(below, tl.minimum(Lk, first + BLOCK_M), BLOCK_N):
        keys = start_n + cols
        k = tl.load(Kb + keys[None, :] * stride_kn + dims[:, None] * stride_kd, mask=keys[None, :] < Lk, other=0.0)
        v = tl.load(Vb + keys[:, None] * stride_vn + dims[None, :] * stride_vd, mask=keys[:, None] < Lk, other=0.0)
        seen = (keys[None, :] < Lk) & (keys[None, :] <= rows[:, None])
        s = tl.where(seen, tl.dot(q, k) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_use)
        p = tl.exp(s - m_use[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od,
             (acc / tl.where(l == 0.0, 1.0, l)[:, None]).to(O.dtype.element_ty), mask=rows[:, None] < Lq)
    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)
'''}, "FlashAttention-2's two stages: the keys wholly below the diagonal without the causal test (the first block "
      "holds key 0, visible to every query, so the max is finite there), then the diagonal block with it.")

# ----------------------------------------------------------------------------------------------------------------------
# slow answer
# ----------------------------------------------------------------------------------------------------------------------

entry("fca_masked_loads_full_loop", "slow", {"causal_attention_kernel": variant(
    CAUSAL_KERNEL,
    ("    end = tl.minimum(Lk, (start_m + 1) * BLOCK_M)              # no query of this block sees a key past it\n"
     "    for start_n in range(0, end, BLOCK_N):\n        keys = start_n + cols\n",
     "    last = start_m * BLOCK_M + BLOCK_M - 1                     # the block's last query\n"
     "    for start_n in range(0, Lk, BLOCK_N):\n        keys = start_n + cols\n"
     "        live = (keys < Lk) & (keys <= last)                    # past the diagonal: masked, so never read\n"),
    ("                    mask=keys[None, :] < Lk, other=0.0)\n", "                    mask=live[None, :], other=0.0)\n"),
    ("                    mask=keys[:, None] < Lk, other=0.0)\n", "                    mask=live[:, None], other=0.0)\n"))},
    "The loads past the diagonal are masked off, so the bytes read are the minimum, but the loop still runs over "
    "every key block, each with its two tl.dot and exponentials on nothing: about twice the work of a loop that "
    "stops. The text: \"whose loop over key blocks stops at the block that holds the diagonal of its last query\".",
    shown_by="""
from triton.runtime import interpreter
builder = interpreter.InterpreterBuilder
plain_dot = builder.create_dot
dots = [0]


def counted_dot(self, *args, **kwargs):
    dots[0] += 1
    return plain_dot(self, *args, **kwargs)


builder.create_dot = counted_dot
try:
    q, k, v = qkv(1, 1, 512, 512, 16)
    with H.count_bytes(Q=q, K=k, V=v) as c:
        out, lse = flash_attention_causal(q, k, v)
    mine, dots[0] = dots[0], 0
    launch(spec.causal_attention_kernel, q, k, v)
    theirs = dots[0]
finally:
    builder.create_dot = plain_dot
want = spec.minimum_bytes(q, k, v, BLOCK_M, BLOCK_N, True)
shown = mine >= 1.5 * theirs and c.reads["K"] <= want["reads"]["K"]
detail = (f"512 causal positions: {mine} tl.dot against {theirs} for a loop that stops at the diagonal "
          f"(bytes of K {c.reads['K']} <= {want['reads']['K']})")
""")
