"""Blind corpus, fused_attention: plausible learners' answers, each with what it claims to be.

Most learners here start from a working kernel and change a few lines: each entry's cell is this round's spec
kernel (spec_fused_attention.py) with the edits `edit` makes, asserted to apply, so that the full source of the
learner's cell is what the entry gives."""
import os

ENTRIES = []


def entry(name, kind, cells, why, shown_by="shown = True", extra_cells=None):
    e = dict(name=name, kind=kind, cells=cells, why=why, shown_by=shown_by)
    if extra_cells:
        e["extra_cells"] = extra_cells
    ENTRIES.append(e)


with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "spec_fused_attention.py")) as _f:
    _SPEC = _f.read()


def _kernel(name):
    start = _SPEC.index(f"@triton.jit\ndef {name}(")
    return _SPEC[start:_SPEC.index("\n\n\n", start)] + "\n"


def edit(src, *pairs):
    for old, new in pairs:
        assert old in src, f"edit does not apply: {old!r}"
        src = src.replace(old, new)
    return src


def blocks(bm=64, bn=64, warps=4, stages=2):
    return (f"# Your block sizes: BLOCK_M and BLOCK_N each one of 16, 32, 64, 128; NUM_WARPS one of 1, 2, 4, 8; "
            f"NUM_STAGES one of\n# 1, 2, 3, 4.\nBLOCK_M, BLOCK_N = {bm}, {bn}\nNUM_WARPS, NUM_STAGES = {warps}, "
            f"{stages}\n\n\n")


FWD = _kernel("attention_kernel")
CAUSAL = _kernel("causal_attention_kernel")

# edits shared by both kernels (their loop bodies are the same text)
MASK_TAIL = ('        visible = keys[None, :] < Lk\n        if CAUSAL:\n            visible = visible & (keys[None, :] <= '
             'rows[:, None])\n        s = tl.where(visible, s, float("-inf"))\n')
Q_PTRS = "Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd"
K_PTRS = "K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd"
V_PTRS = "V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd"
O_PTRS = "O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od"
GUARD = ('        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)\n        alpha = tl.exp(m_i - m_safe)\n'
         '        p = tl.exp(s - m_safe[:, None])\n')


def compare(causal_kernel=False):
    """shown_by text: (out, lse) of the entry on the given inputs against the float64 reference."""
    call = "flash_attention_causal(q, k, v)" if causal_kernel else "flash_attention(q, k, v, causal=causal)"
    ref = "spec.attention_reference(q, k, v, True)" if causal_kernel else "spec.attention_reference(q, k, v, causal)"
    return f'''
out, lse = {call}
want_out, want_lse = {ref}
e_out, e_lse = H.maxdiff(out, want_out), H.maxdiff(lse, want_lse)
'''


# ---------------------------------------------------------------- attention_kernel: mistakes
entry("fa_lse_in_base_2", "mistake", {"attention_kernel": blocks() + edit(
    FWD,
    ("s = tl.dot(q, k) * scale", "s = tl.dot(q, k) * (scale * 1.4426950408889634)   # log2(e): exp2 is faster"),
    (GUARD, GUARD.replace("tl.exp(", "tl.exp2(")),
    ("m_i + tl.log(l_i)", "m_i + tl.log2(l_i)"))},
    "Works in base 2 as Triton's tutorial does (scores times log2 e, exp2), and stores m + log2(l): the output is "
    "right but the log-sum-exp is in base 2, log2(e) times the natural one the text defines "
    "(LSE = log(sum_j exp(scale q_i k_j^T))).",
    shown_by='''
q, k, v = (torch.randn(1, 2, 20, 16, generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3))
causal = False
''' + compare() + '''
shown = e_lse > 1e-3 and e_out < 1e-4
detail = f"output off by {e_out:.1e}, log-sum-exp off by {e_lse:.3f}"
''')

entry("fa_padded_keys_score_zero", "mistake", {"attention_kernel": blocks() + edit(
    FWD, (MASK_TAIL, '        if CAUSAL:\n            s = tl.where(keys[None, :] <= rows[:, None], s, float("-inf"))\n'))},
    "The ragged tail of K is loaded as zeros (other=0.0) but its scores are not set to -inf: every missing key gets "
    "score 0 and a share of the softmax when Lk is not a multiple of BLOCK_N ('mask the loads and stores of the "
    "ragged tail').",
    shown_by='''
q, k, v = (torch.randn(1, 1, 16, 16, generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3))
k, v = k[:, :, :10], v[:, :, :10]
causal = False
''' + compare() + '''
shown = e_out > 1e-3
detail = f"Lk = 10 (block of 64): output off by {e_out:.3f}"
''')

entry("fa_contiguous_offsets", "mistake", {"attention_kernel": blocks() + edit(
    FWD,
    (Q_PTRS, "Q + bh * Lq * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :]"),
    (K_PTRS, "K + bh * Lk * HEAD_DIM + keys[None, :] * HEAD_DIM + dims[:, None]"),
    (V_PTRS, "V + bh * Lk * HEAD_DIM + keys[:, None] * HEAD_DIM + dims[None, :]"),
    (O_PTRS, "O + bh * Lq * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :]"))},
    "Offsets computed for contiguous (B, H, L, d) tensors, ignoring the strides it is given: a view such as "
    "(B, L, H, d).transpose(1, 2) is read in the wrong order ('the arguments may be views that are not contiguous: "
    "use the strides').",
    shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 24, 2, 16, generator=g).transpose(1, 2) for _ in range(3))
causal = False
''' + compare() + '''
shown = e_out > 1e-3
detail = f"(B, L, H, d).transpose(1, 2) views: output off by {e_out:.3f}"
''')

entry("fa_bh_times_head_stride", "mistake", {"attention_kernel": blocks() + edit(
    FWD,
    (Q_PTRS, "Q + bh * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd"),
    (K_PTRS, "K + bh * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd"),
    (V_PTRS, "V + bh * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd"),
    (O_PTRS, "O + bh * stride_ob // stride_ob * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od"))},
    "Treats (batch, head) as one flattened index, bh * stride_h: equal to b * stride_b + h * stride_h only when "
    "stride_b = H * stride_h, as for contiguous tensors; a non-contiguous view with B > 1 is read from the wrong "
    "sequence ('Element [b, h, i, c] of Q is at Q + b * stride_qb + h * stride_qh + ...').",
    shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 20, 2, 16, generator=g).transpose(1, 2) for _ in range(3))
causal = False
''' + compare() + '''
shown = e_out > 1e-3
detail = f"B = 2, H = 2, transposed views: output off by {e_out:.3f}"
''')

entry("fa_running_max_from_zero", "mistake", {"attention_kernel": blocks() + edit(
    FWD, ('m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)', "m_i = tl.zeros([BLOCK_M], dtype=tl.float32)"))},
    "Starts the running max at 0 instead of -inf: a row whose every score is far below 0 keeps the max 0, every "
    "exponential underflows and the row gets out 0 and LSE -inf ('rows whose every score is far below 0 do not "
    "underflow').",
    shown_by='''
g = torch.Generator().manual_seed(0)
q = torch.full((1, 1, 8, 16), 12.0) + torch.randn(1, 1, 8, 16, generator=g)
k = -torch.full((1, 1, 24, 16), 12.0) + torch.randn(1, 1, 24, 16, generator=g)   # scores ~ -576
v = torch.randn(1, 1, 24, 16, generator=g)
causal = False
''' + compare() + '''
shown = not (e_out < 1e-3 and e_lse < 1e-3)
detail = f"scores ~ -576: output off by {e_out:.3g}, log-sum-exp off by {e_lse:.3g}"
''')

entry("fa_no_running_max", "mistake", {"attention_kernel": blocks() + edit(
    FWD,
    ('    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)\n', ""),
    ("        m_new = tl.maximum(m_i, tl.max(s, 1))\n" + GUARD,
     "        p = tl.exp(s)                              # scores are small: no max needed\n"),
    ("        l_i = l_i * alpha + tl.sum(p, 1)\n", "        l_i = l_i + tl.sum(p, 1)\n"),
    ("        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32))\n        m_i = m_new\n",
     "        acc = acc + tl.dot(p, v.to(tl.float32))\n"),
    ("m_i + tl.log(l_i)", "tl.log(l_i)"))},
    "Plain exponentials without a running max: right for the small scores of random inputs (all the visible "
    "checks), but exp overflows float32 once scores pass ~88 ('scores around 1e3 do not overflow').",
    shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 1, 12, 16, generator=g) for _ in range(3))
q = q * 100                                           # scores in the hundreds
causal = False
''' + compare() + '''
shown = not (e_out < 1e-3)
detail = f"scores up to {float((q @ k.transpose(-2, -1)).abs().max() / 4):.0f}: output off by {e_out:.3g}"
''')

entry("fa_blocks_256_queries", "mistake", {"attention_kernel": blocks(bm=256, bn=64, warps=8, stages=2) + FWD},
    "BLOCK_M = 256 to read K and V fewer times: the kernel is right in the interpreter, but the text bounds the "
    "blocks ('BLOCK_M and BLOCK_N each one of 16, 32, 64, 128').",
    shown_by='''
shown = BLOCK_M not in (16, 32, 64, 128) or BLOCK_N not in (16, 32, 64, 128)
detail = f"BLOCK_M = {BLOCK_M}, BLOCK_N = {BLOCK_N}"
''')

# ---------------------------------------------------------------- attention_kernel: correct
entry("fa_exp2_base_change", "correct", {"attention_kernel": blocks() + edit(
    FWD,
    ("s = tl.dot(q, k) * scale", "s = tl.dot(q, k) * (scale * 1.4426950408889634)   # base 2: exp(x) = 2^(x log2 e)"),
    (GUARD, GUARD.replace("tl.exp(", "tl.exp2(")),
    ("m_i + tl.log(l_i)", "(m_i + tl.log2(l_i)) * 0.6931471805599453"))},
    "Base-2 exponentials (scores times log2 e, exp2) and the log-sum-exp converted back to natural log with ln 2: "
    "the same output and LSE within float32 rounding.")

entry("fa_trans_k_tile", "correct", {"attention_kernel": blocks(bm=32, bn=64, warps=4, stages=2) + edit(
    FWD,
    (K_PTRS + ",\n                    mask=keys[None, :] < Lk, other=0.0)",
     "K + b * stride_kb + h * stride_kh + keys[:, None] * stride_kn + dims[None, :] * stride_kd,\n"
     "                    mask=keys[:, None] < Lk, other=0.0)              # (BLOCK_N, HEAD_DIM)"),
    ("s = tl.dot(q, k) * scale", "s = tl.dot(q, tl.trans(k)) * scale"))},
    "K's block loaded as (BLOCK_N, HEAD_DIM), like V's, and transposed with tl.trans for the dot; blocks of 32 "
    "queries and 64 keys: the same values and, for its blocks, the fewest bytes.")

entry("fa_without_minus_inf_guard", "correct", {"attention_kernel": blocks() + edit(
    FWD,
    (GUARD, "        alpha = tl.exp(m_i - m_new)\n        p = tl.exp(s - m_new[:, None])\n"),
    ("    l_safe = tl.where(l_i == 0.0, 1.0, l_i)\n    out = acc / l_safe[:, None]\n",
     "    out = acc / l_i[:, None]\n"))},
    "No guard for a -inf maximum: the first key block always holds key 0, which every query sees (causal or not), "
    "so after it the running max is finite and the running sum positive; the guard never fires in this kernel.")

entry("fa_p_in_v_dtype", "correct", {"attention_kernel": blocks() + edit(
    FWD, ("tl.dot(p, v.to(tl.float32))", "tl.dot(p.to(v.dtype), v)"))},
    "FlashAttention's own idiom: the probabilities cast to V's dtype for the second dot (float32 accumulation): "
    "for float32 inputs nothing changes, for float16 the output stays within float16's precision.")

# ---------------------------------------------------------------- attention_kernel: right values, too many bytes
entry("fa_q_reloaded_per_key_block", "mistake", {"attention_kernel": blocks() + edit(
    FWD,
    ("    q = tl.load(" + Q_PTRS + ",\n                mask=rows[:, None] < Lq, other=0.0)\n", ""),
    ("        keys = start_n + cols\n",
     "        keys = start_n + cols\n        q = tl.load(" + Q_PTRS + ",\n"
     "                    mask=rows[:, None] < Lq, other=0.0)\n"))},
    "Right values, but Q's block is loaded inside the loop over key blocks: Q is read once per key block instead of "
    "once ('Read Q's block once'; 'Q, O and the log-sum-exp once').",
    shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = torch.randn(1, 1, 64, 16, generator=g), torch.randn(1, 1, 200, 16, generator=g), torch.randn(1, 1, 200, 16, generator=g)
with H.count_bytes(Q=q, K=k, V=v) as c:
    flash_attention(q, k, v)
least = spec.minimum_bytes(q, k, v, BLOCK_M, BLOCK_N, False)
shown = c.reads["Q"] > least["reads"]["Q"]
detail = f"Lk = 200: Q read {c.reads['Q']} bytes, once is {least['reads']['Q']}"
''')

TWO_PASS = '''
@triton.jit
def attention_kernel(Q, K, V, O, LSE,
                     stride_qb, stride_qh, stride_qm, stride_qd,
                     stride_kb, stride_kh, stride_kn, stride_kd,
                     stride_vb, stride_vh, stride_vn, stride_vd,
                     stride_ob, stride_oh, stride_om, stride_od,
                     H, Lq, Lk, scale,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """Two passes over the keys: first the row max and sum, then the weighted values with final statistics."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd,
                mask=rows[:, None] < Lq, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    for start_n in range(0, Lk, BLOCK_N):                  # pass 1: statistics only
        keys = start_n + cols
        k = tl.load(K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd,
                    mask=keys[None, :] < Lk, other=0.0)
        s = tl.dot(q, k) * scale
        ok = keys[None, :] < Lk
        if CAUSAL:
            ok = ok & (keys[None, :] <= rows[:, None])
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(s - m_new[:, None]), 1)
        m_i = m_new
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, Lk, BLOCK_N):                  # pass 2: normalised weights times V
        keys = start_n + cols
        k = tl.load(K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd,
                    mask=keys[None, :] < Lk, other=0.0)
        s = tl.dot(q, k) * scale
        ok = keys[None, :] < Lk
        if CAUSAL:
            ok = ok & (keys[None, :] <= rows[:, None])
        s = tl.where(ok, s, float("-inf"))
        p = tl.exp(s - m_i[:, None]) / l_i[:, None]
        v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=keys[:, None] < Lk, other=0.0)
        acc += tl.dot(p, v.to(tl.float32))
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od,
             acc.to(O.dtype.element_ty), mask=rows[:, None] < Lq)
    tl.store(LSE + bh * Lq + rows, m_i + tl.log(l_i), mask=rows < Lq)
'''

entry("fa_two_pass_softmax", "mistake", {"attention_kernel": blocks() + TWO_PASS.lstrip("\n")},
    "Right values without rescaling, by a first pass for the max and the sum and a second for the output: K is read "
    "twice per block of queries ('load K's and V's block once each'; 'K and V once per block of queries').",
    shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = torch.randn(1, 1, 64, 16, generator=g), torch.randn(1, 1, 130, 16, generator=g), torch.randn(1, 1, 130, 16, generator=g)
with H.count_bytes(Q=q, K=k, V=v) as c:
    flash_attention(q, k, v)
least = spec.minimum_bytes(q, k, v, BLOCK_M, BLOCK_N, False)
shown = c.reads["K"] > least["reads"]["K"]
detail = f"K read {c.reads['K']} bytes, the fewest is {least['reads']['K']}"
''')

# ---------------------------------------------------------------- causal_attention_kernel
entry("fa_causal_bound_uses_block_n", "mistake", {
    "attention_kernel": blocks(bm=64, bn=32) + FWD,
    "causal_attention_kernel": edit(CAUSAL, ("(start_m + 1) * BLOCK_M)", "(start_m + 1) * BLOCK_N)"))},
    "Stops the loop at (start_m + 1) * BLOCK_N: the same as BLOCK_M while the two blocks are equal (64 and 64), but "
    "with BLOCK_N = 32 the later queries of each block never see keys BLOCK_N ... BLOCK_M - 1 of their diagonal "
    "('stops at the block that holds the diagonal of its last query').",
    shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 1, 100, 16, generator=g) for _ in range(3))
''' + compare(True) + '''
shown = e_out > 1e-3
detail = f"BLOCK_M = 64, BLOCK_N = 32, L = 100: output off by {e_out:.3f}"
''')

entry("fa_causal_no_mask_on_diagonal", "mistake", {"causal_attention_kernel": edit(
    CAUSAL,
    ("        visible = (keys[None, :] < Lk) & (keys[None, :] <= rows[:, None])\n",
     "        visible = keys[None, :] < Lk          # the loop already stops at the diagonal\n"))},
    "Relies on the loop bound alone: the block that holds the diagonal is read whole, so its queries also see the "
    "keys after them in that block (hint 2: the mask keys <= rows for the block on the diagonal).",
    shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 1, 40, 16, generator=g) for _ in range(3))
''' + compare(True) + '''
shown = e_out > 1e-3
detail = f"L = 40: output off by {e_out:.3f}"
''')

entry("fa_causal_hi_uncapped", "correct", {"causal_attention_kernel": edit(
    CAUSAL, ("hi = tl.minimum(Lk, (start_m + 1) * BLOCK_M)", "hi = (start_m + 1) * BLOCK_M"))},
    "The loop bound not capped at Lk: the blocks past the last key load nothing (their loads are masked, so they "
    "count no bytes) and their scores are all -inf, which leaves m, l and acc as they were.")

entry("fa_causal_reads_every_block", "mistake", {"causal_attention_kernel": edit(
    CAUSAL, ("    hi = tl.minimum(Lk, (start_m + 1) * BLOCK_M)\n    for start_n in range(0, hi, BLOCK_N):",
             "    for start_n in range(0, Lk, BLOCK_N):               # every key block, masked"))},
    "Right values, but the loop runs over every key block and masks the ones above the diagonal: it reads K and V "
    "there too ('reads K and V only in the blocks on or below the diagonal').",
    shown_by='''
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 1, 192, 16, generator=g) for _ in range(3))
with H.count_bytes(Q=q, K=k, V=v) as c:
    flash_attention_causal(q, k, v)
least = spec.minimum_bytes(q, k, v, BLOCK_M, BLOCK_N, True)
shown = c.reads["K"] > least["reads"]["K"]
detail = f"L = 192: K read {c.reads['K']} bytes, on or below the diagonal {least['reads']['K']}"
''')
