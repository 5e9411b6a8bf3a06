"""Blind corpus, fused_attention: plausible learners' kernels, each with what it claims to be.

The kernels are written as edits of one plain kernel (the spec's), each edit what a learner would have typed."""
import inspect

import spec_fused_attention as _S

ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


PART1 = _S.CONSTANTS + "\n\n" + inspect.getsource(_S.attention_kernel.fn)
PART2 = inspect.getsource(_S.causal_attention_kernel.fn)


def edit(source, *pairs):
    for old, new in pairs:
        assert source.count(old) >= 1, old
        source = source.replace(old, new)
    return source


# ------------------------------------------------------------------------------------------------------------ mistakes

entry("fa_running_max_starts_at_zero", "mistake", {"attention_kernel": edit(PART1, (
    'm = tl.full([BLOCK_M], float("-inf"), tl.float32)', 'm = tl.zeros([BLOCK_M], tl.float32)'))},
    "Starts the running max at 0: rows whose every score is far below 0 underflow (l = 0, O = 0/0); breaks 'scores "
    "around 1e3 do not overflow, and rows whose every score is far below 0 do not underflow' (hint 2: 'Start with m = "
    "-inf').",
    shown_by='''
g = torch.Generator().manual_seed(0)
q = torch.randn(1, 1, 20, 16, generator=g).abs() + 10
k = -(torch.randn(1, 1, 30, 16, generator=g).abs() + 10)
v = torch.randn(1, 1, 30, 16, generator=g)
out, lse = flash_attention(q, k, v)
want, _ = spec.attention_reference(q, k, v)
shown = not H.same(out, want, atol=1e-3, dtype=False)
detail = f"scores ~ -4e2: {torch.isnan(out).sum().item()} NaN of {out.numel()}"
''')

entry("fa_unit_feature_stride", "mistake", {"attention_kernel": edit(
    PART1, ("dims[None, :] * stride_qd", "dims[None, :]"), ("dims[:, None] * stride_kd", "dims[:, None]"),
    ("dims[None, :] * stride_vd", "dims[None, :]"), ("dims[None, :] * stride_od", "dims[None, :]"))},
    "Uses every stride but the features', assuming they are adjacent: views of (B, L, H, d) tensors pass, features "
    "that are strided do not; breaks 'Element [b, h, i, c] of Q is at ... + c * stride_qd (the arguments may be views "
    "that are not contiguous: use the strides)'.",
    shown_by='''
g = torch.Generator().manual_seed(1)
q, k, v = (torch.randn(1, 1, 16, L, generator=g).transpose(-1, -2) for L in (20, 24, 24))      # (1, 1, L, 16)
out, _ = flash_attention(q, k, v)
want, _ = spec.attention_reference(q, k, v)
good, _ = flash_attention(q.contiguous(), k.contiguous(), v.contiguous())
shown = not H.same(out, want, atol=1e-3, dtype=False) and H.same(good, want, atol=1e-4, dtype=False)
detail = f"features strided (stride_qd = {q.stride(-1)}): off by {H.maxdiff(out, want):.3g}; contiguous copies right"
''')

entry("fa_offsets_from_shapes", "mistake", {"attention_kernel": edit(
    PART1,
    ("Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd",
     "Q + bh * Lq * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :]"),
    ("K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd",
     "K + bh * Lk * HEAD_DIM + keys[None, :] * HEAD_DIM + dims[:, None]"),
    ("V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd",
     "V + bh * Lk * HEAD_DIM + keys[:, None] * HEAD_DIM + dims[None, :]"),
    ("O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od",
     "O + bh * Lq * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :]"))},
    "Computes offsets from the shapes, as for contiguous tensors; the visible checks (contiguous) pass, heads cut "
    "from a (B, L, H, d) tensor by transpose(1, 2) do not; breaks 'the arguments may be views that are not "
    "contiguous: use the strides'.",
    shown_by='''
g = torch.Generator().manual_seed(2)
q, k, v = (torch.randn(1, L, 2, 16, generator=g).transpose(1, 2) for L in (20, 24, 24))       # (1, 2, L, 16)
out, _ = flash_attention(q, k, v)
want, _ = spec.attention_reference(q, k, v)
shown = not H.same(out, want, atol=1e-3, dtype=False)
detail = f"q, k, v = (B, L, H, d).transpose(1, 2): off by {H.maxdiff(out, want):.2f}"
''')

entry("fa_lse_rounded_to_input_dtype", "mistake", {"attention_kernel": edit(
    PART1, ("tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)",
            "tl.store(LSE + bh * Lq + rows, (m + tl.log(l)).to(Q.dtype.element_ty), mask=rows < Lq)"))},
    "Casts both results to the inputs' dtype before storing: with float16 inputs the log-sum-exp goes through "
    "float16's rounding; breaks 'LSE[b, h, i] = log(sum_j exp(scale * q_i k_j^T)) in float32'.",
    shown_by='''
g = torch.Generator().manual_seed(3)
q, k, v = (torch.randn(1, 2, L, 16, generator=g).half() for L in (24, 40, 40))
q = q * 3
out, lse = flash_attention(q, k, v)
_, want = spec.attention_reference(q, k, v)
err = H.maxdiff(lse, want)
shown = err > 1e-3
detail = f"float16 inputs: lse off by {err:.1e} (allowed: 1e-3)"
''')

entry("fa_causal_one_block_too_many", "mistake", {"causal_attention_kernel": edit(
    PART2, ("tl.minimum(Lk, (start_m + 1) * BLOCK_M)", "tl.minimum(Lk, (start_m + 1) * BLOCK_M + BLOCK_N)"))},
    "Runs the causal loop one key block past the diagonal 'to be safe': the values are right (the mask removes the "
    "extra keys) but K and V are read above the diagonal; breaks 'reads K and V only in the blocks on or below the "
    "diagonal'.",
    shown_by='''
g = torch.Generator().manual_seed(4)
q, k, v = (torch.randn(1, 1, L, 16, generator=g) for L in (70, 70, 70))
with H.count_bytes(Q=q, K=k, V=v) as c:
    out, lse = flash_attention_causal(q, k, v)
want = spec.minimum_bytes(q, k, v, BLOCK_M, BLOCK_N, True)
right = H.same(out, spec.attention_reference(q, k, v, True)[0], atol=1e-4, dtype=False)
shown = right and c.reads["K"] > want["reads"]["K"]
detail = f"right values, but {c.reads['K']} bytes of K read (blocks on or below the diagonal: {want['reads']['K']})"
''')

entry("fa_causal_bound_from_first_query", "mistake", {"causal_attention_kernel": edit(
    PART2, ("tl.minimum(Lk, (start_m + 1) * BLOCK_M)", "tl.minimum(Lk, start_m * BLOCK_M + 1)"))},
    "Stops at the block holding the diagonal of the program's FIRST query: with BLOCK_M = 32 > BLOCK_N = 16 the later "
    "queries of a program miss their last keys; breaks 'whose loop over key blocks stops at the block that holds the "
    "diagonal of its last query'.",
    shown_by='''
g = torch.Generator().manual_seed(5)
q, k, v = (torch.randn(1, 1, 40, 16, generator=g) for _ in range(3))
out, _ = flash_attention_causal(q, k, v)
want, _ = spec.attention_reference(q, k, v, True)
shown = BLOCK_M > BLOCK_N and not H.same(out, want, atol=1e-3, dtype=False)
detail = f"BLOCK_M = {BLOCK_M}, BLOCK_N = {BLOCK_N}: off by {H.maxdiff(out, want):.2f}"
''')

entry("fa_reloads_q_each_block", "mistake", {"attention_kernel": edit(
    PART1,
    ("    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd,\n"
     "                mask=rows[:, None] < Lq, other=0.0)\n", ""),
    ("        keys = start_n + cols\n",
     "        keys = start_n + cols\n"
     "        q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd,\n"
     "                    mask=rows[:, None] < Lq, other=0.0)\n"))},
    "Right values, but loads the block of queries again for every block of keys: Q is read cdiv(Lk, BLOCK_N) times; "
    "breaks 'Read Q's block once' ('moves the fewest bytes its blocks allow: Q ... once').",
    shown_by='''
g = torch.Generator().manual_seed(6)
q, k, v = (torch.randn(1, 1, L, 16, generator=g) for L in (40, 50, 50))
with H.count_bytes(Q=q, K=k, V=v) as c:
    flash_attention(q, k, v)
want = spec.minimum_bytes(q, k, v, BLOCK_M, BLOCK_N, False)
shown = c.reads["Q"] >= 3 * want["reads"]["Q"]
detail = f"{c.reads['Q']} bytes of Q read, {c.reads['Q'] / want['reads']['Q']:.0f}x the {want['reads']['Q']} of reading it once"
''')

# ------------------------------------------------------------------------------------------------------------ correct

entry("fa_exp2_folded_scale", "correct", {"attention_kernel": '''
BLOCK_M, BLOCK_N = 64, 32
NUM_WARPS, NUM_STAGES = 4, 3


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
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_b = pid_bh // H
    off_h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = Q + off_b * stride_qb + off_h * stride_qh
    k_base = K + off_b * stride_kb + off_h * stride_kh
    v_base = V + off_b * stride_vb + off_h * stride_vh
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=offs_m[:, None] < Lq,
                other=0.0)
    qk_scale = scale * 1.4426950408889634                  # exp(x) = exp2(x * log2(e))
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, Lk, BLOCK_N):
        cur = start_n + offs_n
        kt = tl.load(k_base + cur[None, :] * stride_kn + offs_d[:, None] * stride_kd, mask=cur[None, :] < Lk,
                     other=0.0)
        vv = tl.load(v_base + cur[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=cur[:, None] < Lk,
                     other=0.0)
        qk = tl.dot(q, kt) * qk_scale                          # scores in base-2 units
        keep = cur[None, :] < Lk
        if CAUSAL:
            keep = keep & (cur[None, :] <= offs_m[:, None])
        qk = tl.where(keep, qk, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        m_ij_safe = tl.where(m_ij > -float("inf"), m_ij, 0.0)
        p = tl.math.exp2(qk - m_ij_safe[:, None])
        alpha = tl.math.exp2(m_i - m_ij_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc += tl.dot(p.to(vv.dtype), vv)
        m_i = m_ij
    acc = acc / l_i[:, None]
    o_ptrs = O + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=offs_m[:, None] < Lq)
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453      # back to natural log
    tl.store(LSE + pid_bh * Lq + offs_m, lse, mask=offs_m < Lq)
'''}, "The FlashAttention-2 tutorial's form: the scale folded with log2(e) into exp2, LSE converted back from base 2, "
      "other block sizes (64 x 32, 3 stages) within the bounds: the same softmax and log-sum-exp.")

entry("fa_causal_two_stages", "correct", {"causal_attention_kernel": '''
@triton.jit
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
    b = bh // H
    h = bh % H
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd,
                mask=rows[:, None] < Lq, other=0.0)
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # stage 1: whole key blocks that every query of the program sees (before its first query, inside Lk): no mask
    full_end = (tl.minimum(Lk, start_m * BLOCK_M) // BLOCK_N) * BLOCK_N
    for start_n in range(0, full_end, BLOCK_N):
        keys = start_n + cols
        k = tl.load(k_base + keys[None, :] * stride_kn + dims[:, None] * stride_kd)
        v = tl.load(v_base + keys[:, None] * stride_vn + dims[None, :] * stride_vd)
        s = tl.dot(q, k) * scale
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    # stage 2: the blocks that hold the diagonal (or the end of the keys): masked
    for start_n in range(full_end, tl.minimum(Lk, (start_m + 1) * BLOCK_M), BLOCK_N):
        keys = start_n + cols
        k = tl.load(k_base + keys[None, :] * stride_kn + dims[:, None] * stride_kd, mask=keys[None, :] < Lk, other=0.0)
        v = tl.load(v_base + keys[:, None] * stride_vn + dims[None, :] * stride_vd, mask=keys[:, None] < Lk, other=0.0)
        s = tl.dot(q, k) * scale
        s = tl.where((keys[None, :] < Lk) & (keys[None, :] <= rows[:, None]), s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    out = acc / l[:, None]
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od,
             out.to(O.dtype.element_ty), mask=rows[:, None] < Lq)
    tl.store(LSE + bh * Lq + rows, m + tl.log(l), mask=rows < Lq)
'''}, "Two loops as in the Triton tutorial: the key blocks wholly before the program's first query without any mask, "
      "then the diagonal blocks masked; reads exactly the blocks on or below the diagonal, as the text asks.")

entry("fa_part1_causal_skips_too", "correct", {"attention_kernel": edit(
    PART1, ("    for start_n in range(0, Lk, BLOCK_N):\n",
            "    hi = Lk\n"
            "    if CAUSAL:                                     # no key past the program's last query is visible\n"
            "        hi = tl.minimum(Lk, (start_m + 1) * BLOCK_M)\n"
            "    for start_n in range(0, hi, BLOCK_N):\n"))},
    "Part 1 with CAUSAL also stops at the diagonal: the text asks part 1 to mask ('here by masking the scores: part 2 "
    "skips the blocks') but skipping masked blocks gives the same values and reads fewer bytes.")
