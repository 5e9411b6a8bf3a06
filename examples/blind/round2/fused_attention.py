"""Blind corpus (round 2) for exercises/fused_attention."""

ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


def variant(base, *pairs):
    """base with each (old, new) replaced once (each old must occur exactly once)."""
    for old, new in pairs:
        assert base.count(old) == 1, old
        base = base.replace(old, new)
    return base


# A learner's correct answer to part 1, the base of the variants below (the course's signature, the hints' steps).
ATTN = '''# Your block sizes: BLOCK_M and BLOCK_N each one of 16, 32, 64, 128; NUM_WARPS one of 1, 2, 4, 8; NUM_STAGES one of
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
    """One block of BLOCK_M queries of one (batch, head): O = softmax(Q K^T * scale) V over every key (with CAUSAL,
    key j only for queries i >= j), LSE = the log-sum-exp of each query's scores."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
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
        k = tl.load(k_ptrs, mask=keys[None, :] < Lk, other=0.0)
        s = tl.dot(q, k) * scale
        s = tl.where(keys[None, :] < Lk, s, float("-inf"))
        if CAUSAL:
            s = tl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        v_ptrs = V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd
        v = tl.load(v_ptrs, mask=keys[:, None] < Lk, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    o_ptrs = O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od
    tl.store(o_ptrs, (acc / l[:, None]).to(O.dtype.element_ty), mask=rows[:, None] < Lq)
    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)
'''

# A learner's correct answer to part 2.
CAUSAL = '''@triton.jit
def causal_attention_kernel(Q, K, V, O, LSE,
                            stride_qb, stride_qh, stride_qm, stride_qd,
                            stride_kb, stride_kh, stride_kn, stride_kd,
                            stride_vb, stride_vh, stride_vn, stride_vd,
                            stride_ob, stride_oh, stride_om, stride_od,
                            H, Lq, Lk, scale,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Causal attention of one block of BLOCK_M queries (key j only for queries i >= j), reading only the key blocks
    on or below the diagonal; O and LSE as attention_kernel's."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd,
                mask=rows[:, None] < Lq, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, tl.minimum(Lk, (start_m + 1) * BLOCK_M), BLOCK_N):
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
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od,
             (acc / l[:, None]).to(O.dtype.element_ty), mask=rows[:, None] < Lq)
    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)
'''

BLOCKS_64 = "BLOCK_M, BLOCK_N = 64, 64"

# shown_by helpers: q, k, v of shape (B, H, L, d) from a seeded generator; the exact answer in float64 is
# spec.attention_reference(q, k, v, causal).
QKV = '''
def qkv_(B, H_, Lq, Lk, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H_, L, d, generator=g).to(dtype) for L in (Lq, Lk, Lk))
'''


# ----------------------------------------------------------------------------------------------------------------------
# Part 1: attention_kernel
# ----------------------------------------------------------------------------------------------------------------------

entry("fa_sum_not_rescaled", "mistake", {"attention_kernel": variant(ATTN, (
    "        l = l * alpha + tl.sum(p, axis=1)\n", "        l = l + tl.sum(p, axis=1)\n"))},
    why="The running sum is not multiplied by exp(m - m') when a block raises the max (only acc is): the text's "
        "'multiply l and acc by e^(m - m') before adding the block's terms'.",
    shown_by=QKV + '''
q, k, v = qkv_(1, 1, 20, 150, 16, seed=1)
k[..., 100:, :] *= 4.0                                   # the last keys raise the running max
out, lse = flash_attention(q, k, v)
want, want_lse = spec.attention_reference(q, k, v)
shown = H.maxdiff(out, want) > 1e-3
detail = f"a later block raises the max: out off by {H.maxdiff(out, want):.3f}"
''')

entry("fa_tail_keys_not_masked", "mistake", {"attention_kernel": variant(ATTN, (
    "        s = tl.where(keys[None, :] < Lk, s, float(\"-inf\"))\n", ""))},
    why="The keys past Lk in the last, ragged block are loaded as 0 (masked load) but their scores are left at 0, not "
        "-inf: they take weight, against 'Lk need not be a multiple of the blocks (mask ... the ragged tail)'.",
    shown_by=QKV + '''
q, k, v = qkv_(1, 2, 70, 45, 16)
out, lse = flash_attention(q, k, v)
want, want_lse = spec.attention_reference(q, k, v)
shown = H.maxdiff(out, want) > 1e-3 and H.maxdiff(lse, want_lse) > 1e-3
detail = f"Lk = 45, BLOCK_N = 64: out off by {H.maxdiff(out, want):.3f}, lse by {H.maxdiff(lse, want_lse):.3f}"
''')

entry("fa_contiguous_offsets", "mistake", {"attention_kernel": variant(ATTN, (
    "    q_ptrs = Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd\n",
    "    q_ptrs = Q + bh * Lq * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :]          # (B, H, L, d) in a row\n"), (
    "        k_ptrs = K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd\n",
    "        k_ptrs = K + bh * Lk * HEAD_DIM + keys[None, :] * HEAD_DIM + dims[:, None]\n"), (
    "        v_ptrs = V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd\n",
    "        v_ptrs = V + bh * Lk * HEAD_DIM + keys[:, None] * HEAD_DIM + dims[None, :]\n"))},
    why="Q, K and V are addressed as if contiguous (B, H, L, d) tensors: a view that is not contiguous (heads "
        "transposed out of (B, L, H, d)) is misread, against 'the arguments may be views that are not contiguous: "
        "use the strides'; the visible checks use contiguous tensors only.",
    shown_by=QKV + '''
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, L, 2, 16, generator=g).transpose(1, 2) for L in (40, 50, 50))   # (B, H, L, d) views
out, lse = flash_attention(q, k, v)
want, want_lse = spec.attention_reference(q, k, v)
ok_contig = H.maxdiff(flash_attention(*(t.contiguous() for t in (q, k, v)))[0], want) < 1e-4
shown = H.maxdiff(out, want) > 1e-2 and ok_contig
detail = f"transposed views (B, L, H, d) -> (B, H, L, d): out off by {H.maxdiff(out, want):.2f} (right when contiguous)"
''')

entry("fa_kv_row_strides_from_q", "mistake", {"attention_kernel": variant(ATTN, (
    "        k_ptrs = K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd\n",
    "        k_ptrs = K + b * stride_kb + h * stride_kh + keys[None, :] * stride_qm + dims[:, None] * stride_qd\n"), (
    "        v_ptrs = V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd\n",
    "        v_ptrs = V + b * stride_vb + h * stride_vh + keys[:, None] * stride_qm + dims[None, :] * stride_qd\n"))},
    why="K and V are stepped along their rows and features with Q's strides: right while all three share a layout, "
        "wrong for a K (or V) view laid out otherwise, against 'element [b, h, i, c] of Q is at ... (use the "
        "strides)' for each argument.",
    shown_by=QKV + '''
q, k, v = qkv_(1, 1, 40, 50, 16)
k = k.transpose(-1, -2).contiguous().transpose(-1, -2)    # the same values, K's features strided
out, lse = flash_attention(q, k, v)
want, want_lse = spec.attention_reference(q, k, v)
shown = H.maxdiff(out, want) > 1e-2
detail = f"K a transposed view (stride_kd = Lk), Q contiguous: out off by {H.maxdiff(out, want):.2f}"
''')

entry("fa_exp2_without_log2e", "mistake", {"attention_kernel": variant(ATTN, (
    "        alpha = tl.exp(m - m_safe)\n        p = tl.exp(s - m_safe[:, None])\n",
    "        alpha = tl.exp2(m - m_safe)                                   # exp2 is the fast one on GPUs\n"
    "        p = tl.exp2(s - m_safe[:, None])\n"), (
    "    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)\n",
    "    tl.store(LSE + bh * Lq + rows, m + tl.log2(l), mask=rows < Lq)\n"))},
    why="exp2 in place of exp without multiplying the scores by log2(e): a softmax in base 2, of the scores times "
        "ln 2, not the text's softmax(scale * q k^T) (and its log-sum-exp in base 2).",
    shown_by=QKV + '''
q, k, v = qkv_(1, 1, 30, 40, 16)
out, lse = flash_attention(q, k, v)
want, want_lse = spec.attention_reference(q, k, v)
shown = H.maxdiff(out, want) > 1e-3
detail = f"out off by {H.maxdiff(out, want):.3f}, lse by {H.maxdiff(lse, want_lse):.3f}"
''')

entry("fa_running_max_starts_at_zero", "mistake", {"attention_kernel": variant(ATTN, (
    "    m = tl.full([BLOCK_M], float(\"-inf\"), dtype=tl.float32)\n",
    "    m = tl.zeros([BLOCK_M], dtype=tl.float32)                       # no -inf: no NaN from -inf - (-inf)\n"))},
    why="The running max starts at 0, so it never falls below 0: when every score of a row is far below 0 "
        "(around -400) every exponential underflows, l = 0 and the output is NaN, against 'rows whose every score "
        "is far below 0 do not underflow'; the visible checks' scores are all near 0.",
    shown_by=QKV + '''
q, k, v = qkv_(1, 1, 20, 30, 16)
q, k = q.abs() + 10, -(k.abs() + 10)                     # every score far below 0
out, lse = flash_attention(q, k, v)
want, want_lse = spec.attention_reference(q, k, v)
shown = H.maxdiff(out, want) > 1e-3
detail = f"scores near {float(want_lse.mean()):.0f}: out {'NaN' if out.isnan().any() else f'off by {H.maxdiff(out, want):.2e}'}"
''')

entry("fa_fp16_running_sum", "mistake", {"attention_kernel": variant(ATTN, (
    "    l = tl.zeros([BLOCK_M], dtype=tl.float32)\n    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)\n",
    "    l = tl.zeros([BLOCK_M], dtype=Q.dtype.element_ty)              # in the inputs' dtype: fewer registers\n"
    "    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=Q.dtype.element_ty)\n"), (
    "        l = l * alpha + tl.sum(p, axis=1)\n",
    "        l = (l * alpha + tl.sum(p, axis=1)).to(Q.dtype.element_ty)\n"), (
    "        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)\n",
    "        acc = (acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)).to(Q.dtype.element_ty)\n"), (
    "    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)\n",
    "    tl.store(LSE + bh * Lq + rows, m + tl.log(l.to(tl.float32)), mask=rows < Lq)\n"))},
    why="The running sum and output are kept in the inputs' dtype: right for float32, but with float16 inputs the "
        "sum stalls at 2048 (float16's step there is 2) and long sequences lose their tail, against 'float16 ... "
        "(float32 inside the kernel)' and 'long sequences'.",
    shown_by=QKV + '''
q, k, v = qkv_(1, 1, 16, 4000, 16, dtype=torch.float16)
q = q * 0.01                                             # near-uniform weights: l grows to about Lk
out, lse = flash_attention(q, k, v)
want, want_lse = spec.attention_reference(q, k, v)
ref_lse = launch(spec.attention_kernel, q, k, v, CAUSAL=False)[1]       # the spec's kernel, float32 inside
mine, theirs = H.maxdiff(lse, want_lse), H.maxdiff(ref_lse, want_lse)
shown = mine > 1e-3 and theirs < 1e-4
detail = f"float16, Lk = 4000: the log-sum-exp off by {mine:.1e} (float32 inside: {theirs:.1e}); out by " \
         f"{H.maxdiff(out, want):.1e}"
''')

entry("fa_q_reloaded_per_block", "mistake", {"attention_kernel": variant(ATTN, (
    "    q = tl.load(q_ptrs, mask=rows[:, None] < Lq, other=0.0)\n", ""), (
    "        s = tl.dot(q, k) * scale\n",
    "        q = tl.load(q_ptrs, mask=rows[:, None] < Lq, other=0.0)     # next to where it is used\n"
    "        s = tl.dot(q, k) * scale\n"))},
    why="Q's block is loaded again for every block of keys: the right values, but Q is read cdiv(Lk, BLOCK_N) times, "
        "against 'Read Q's block once' and 'moves the fewest bytes its blocks allow: Q ... once'.",
    shown_by=QKV + '''
q, k, v = qkv_(1, 1, 64, 256, 16)
with H.count_bytes(Q=q, K=k, V=v) as c:
    flash_attention(q, k, v)
shown = c.reads["Q"] > q.numel() * q.element_size()
detail = f"Lk = 256, BLOCK_N = 64: {c.reads['Q']} bytes of Q read, Q holds {q.numel() * q.element_size()}"
''')

entry("fa_exp2_log2e", "correct", {"attention_kernel": variant(ATTN, (
    "        s = tl.dot(q, k) * scale\n",
    "        s = tl.dot(q, k) * (scale * 1.4426950408889634)                 # scores in base 2: e^x = 2^(x log2 e)\n"), (
    "        alpha = tl.exp(m - m_safe)\n        p = tl.exp(s - m_safe[:, None])\n",
    "        alpha = tl.exp2(m - m_safe)\n        p = tl.exp2(s - m_safe[:, None])\n"), (
    "    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)\n",
    "    tl.store(LSE + bh * Lq + rows, (m + tl.log2(l)) * 0.6931471805599453, mask=rows < Lq)   # back to base e\n"))},
    why="The Triton tutorial's form: scores times log2(e) and exp2, the same softmax; the log-sum-exp, in base 2 "
        "inside, is turned back into base e (times ln 2) before it is stored.")

entry("fa_reversed_key_blocks", "correct", {"attention_kernel": variant(ATTN, (
    "BLOCK_M, BLOCK_N = 64, 64\n", "BLOCK_M, BLOCK_N = 32, 16\n"), (
    "    for start_n in range(0, Lk, BLOCK_N):\n        keys = start_n + cols\n",
    "    n_blocks = tl.cdiv(Lk, BLOCK_N)\n"
    "    for i in range(0, n_blocks):                                      # the key blocks from the last\n"
    "        keys = (n_blocks - 1 - i) * BLOCK_N + cols\n"))},
    why="The key blocks in reverse order: the online softmax does not depend on the order, and the -inf guard keeps "
        "the causal rows that see no key of the first blocks read (the last keys) free of NaN.")


# ----------------------------------------------------------------------------------------------------------------------
# Part 2: causal_attention_kernel
# ----------------------------------------------------------------------------------------------------------------------

entry("fa_causal_bound_plus_one", "mistake", {"causal_attention_kernel": variant(CAUSAL, (
    "    for start_n in range(0, tl.minimum(Lk, (start_m + 1) * BLOCK_M), BLOCK_N):\n",
    "    for start_n in range(0, tl.minimum(Lk, (start_m + 1) * BLOCK_M) + 1, BLOCK_N):   # + 1: the end is excluded\n"))},
    why="The loop's end gets a + 1 'to include the diagonal': the values are right (the masks hide the extra keys) "
        "but each program reads one more block of K and V, wholly above the diagonal, against 'K and V only in the "
        "blocks on or below the diagonal'.",
    shown_by=QKV + '''
q, k, v = qkv_(1, 1, 256, 256, 16)
with H.count_bytes(Q=q, K=k, V=v) as c:
    out, lse = flash_attention_causal(q, k, v)
want = spec.minimum_bytes(q, k, v, BLOCK_M, BLOCK_N, skipping=True)["reads"]["K"]
right = H.maxdiff(out, spec.attention_reference(q, k, v, True)[0]) < 1e-4
shown = c.reads["K"] > want and right
detail = f"L = 256, blocks of 64: {c.reads['K']} bytes of K read, the blocks on or below the diagonal hold {want} " \
         f"(values right: {right})"
''')

entry("fa_causal_bound_block_n", "mistake", {
    "attention_kernel": variant(ATTN, ("BLOCK_M, BLOCK_N = 64, 64\n", "BLOCK_M, BLOCK_N = 32, 16\n")),
    "causal_attention_kernel": variant(CAUSAL, (
        "    for start_n in range(0, tl.minimum(Lk, (start_m + 1) * BLOCK_M), BLOCK_N):\n",
        "    for start_n in range(0, tl.minimum(Lk, start_m * BLOCK_M + BLOCK_N), BLOCK_N):   # up to the diagonal block\n"))},
    why="The loop stops at start_m * BLOCK_M + BLOCK_N, the end of the first key block on the diagonal, not at the "
        "block of the program's last query, (start_m + 1) * BLOCK_M: with BLOCK_N < BLOCK_M the queries below in "
        "the block lose keys they may see (right only when BLOCK_N = BLOCK_M).",
    shown_by=QKV + '''
q, k, v = qkv_(1, 1, 70, 70, 16)
out, lse = flash_attention_causal(q, k, v)
want, want_lse = spec.attention_reference(q, k, v, True)
shown = H.maxdiff(out, want) > 1e-3
detail = f"BLOCK_M = 32, BLOCK_N = 16, L = 70: out off by {H.maxdiff(out, want):.3f}"
''')

entry("fa_causal_bound_without_min", "correct", {"causal_attention_kernel": variant(CAUSAL, (
    "    for start_n in range(0, tl.minimum(Lk, (start_m + 1) * BLOCK_M), BLOCK_N):\n",
    "    for start_n in range(0, (start_m + 1) * BLOCK_M, BLOCK_N):    # keys past Lk: masked loads, read nothing\n"))},
    why="Without the minimum with Lk the loop may reach blocks past the last key, but their loads are masked "
        "(nothing is read) and their scores -inf: the same values and bytes.")

entry("fa_causal_two_loops", "correct", {
    "attention_kernel": variant(ATTN, ("BLOCK_M, BLOCK_N = 64, 64\n", "BLOCK_M, BLOCK_N = 64, 32\n")),
    "causal_attention_kernel": variant(CAUSAL, (
        "    for start_n in range(0, tl.minimum(Lk, (start_m + 1) * BLOCK_M), BLOCK_N):\n"
        "        keys = start_n + cols\n",
        "    # the blocks wholly below the diagonal (BLOCK_N divides BLOCK_M): every key < start_m * BLOCK_M <= i\n"
        "    for start_n in range(0, tl.minimum(Lk, start_m * BLOCK_M), BLOCK_N):\n"
        "        keys = start_n + cols\n"
        "        k = tl.load(K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd,\n"
        "                    mask=keys[None, :] < Lk, other=0.0)\n"
        "        s = tl.where(keys[None, :] < Lk, tl.dot(q, k) * scale, float(\"-inf\"))\n"
        "        m_new = tl.maximum(m, tl.max(s, axis=1))\n"
        "        alpha = tl.exp(m - m_new)\n"
        "        p = tl.exp(s - m_new[:, None])\n"
        "        l = l * alpha + tl.sum(p, axis=1)\n"
        "        v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd,\n"
        "                    mask=keys[:, None] < Lk, other=0.0)\n"
        "        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)\n"
        "        m = m_new\n"
        "    # the blocks on the diagonal: the causal mask\n"
        "    for start_n in range(start_m * BLOCK_M, tl.minimum(Lk, (start_m + 1) * BLOCK_M), BLOCK_N):\n"
        "        keys = start_n + cols\n"))},
    why="FlashAttention-2's split: the blocks wholly below the diagonal without the causal mask (no guard needed: "
        "key 0 comes first), then the diagonal blocks with it; with BLOCK_N dividing BLOCK_M these are the same "
        "blocks, the same values and the same bytes.")
