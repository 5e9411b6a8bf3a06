"""Round 6's own spec of the fused attention exercise (Triton), written from the notebook's text alone."""
import math

import torch
import triton
import triton.language as tl

PARTS = {"attention_kernel": ["BLOCKS", "attention_kernel"], "causal_attention_kernel": ["causal_attention_kernel"]}

BLOCKS = """\
# Your block sizes: BLOCK_M and BLOCK_N each one of 16, 32, 64, 128; NUM_WARPS one of 1, 2, 4, 8; NUM_STAGES one of
# 1, 2, 3, 4 (the hidden tests compile your kernel with them and count its bytes with them).
BLOCK_M, BLOCK_N = 64, 64
NUM_WARPS, NUM_STAGES = 4, 2
"""
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
    b = bh // H
    h = bh % H
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd,
                mask=rows[:, None] < Lq, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, Lk, BLOCK_N):
        keys = start_n + cols
        k = tl.load(K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd,
                    mask=keys[None, :] < Lk, other=0.0)
        s = tl.dot(q, k) * scale
        visible = keys[None, :] < Lk
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=keys[:, None] < Lk, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od,
             out.to(O.dtype.element_ty), mask=rows[:, None] < Lq)
    tl.store(LSE + bh * Lq + rows, m_i + tl.log(l_i), mask=rows < Lq)


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
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    stop = tl.minimum(Lk, (start_m + 1) * BLOCK_M)
    for start_n in range(0, stop, BLOCK_N):
        keys = start_n + cols
        k = tl.load(K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd,
                    mask=keys[None, :] < Lk, other=0.0)
        s = tl.dot(q, k) * scale
        visible = (keys[None, :] < Lk) & (keys[None, :] <= rows[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=keys[:, None] < Lk, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od,
             out.to(O.dtype.element_ty), mask=rows[:, None] < Lq)
    tl.store(LSE + bh * Lq + rows, m_i + tl.log(l_i), mask=rows < Lq)


def attention_reference(q, k, v, causal=False):
    """(out, lse) of softmax attention in float64; with causal, key j visible to query i when j <= i."""
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        Lq, Lk = s.shape[-2:]
        s = s.masked_fill(torch.arange(Lk)[None, :] > torch.arange(Lq)[:, None], float("-inf"))
    return torch.softmax(s, -1) @ v.double(), torch.logsumexp(s, -1)


def minimum_bytes(q, k, v, BLOCK_M, BLOCK_N, skipping):
    """The bytes a kernel with these blocks must move: Q, O and the log-sum-exp once, K and V once per block of
    queries (with skipping, only the key blocks up to the one holding the diagonal of the program's last query)."""
    B, H, Lq, d = q.shape
    Lk = k.shape[2]
    n_m = triton.cdiv(Lq, BLOCK_M)
    if skipping:
        keys = 0
        for m in range(n_m):
            stop = min(Lk, (m + 1) * BLOCK_M)
            keys += min(Lk, triton.cdiv(stop, BLOCK_N) * BLOCK_N)
    else:
        keys = n_m * Lk
    reads = {"Q": B * H * Lq * d * q.element_size(), "K": B * H * keys * d * k.element_size(),
             "V": B * H * keys * d * v.element_size()}
    writes = {"O": B * H * Lq * d * q.element_size(), "LSE": B * H * Lq * 4}
    return {"reads": reads, "writes": writes}
