"""My reading of the fused_attention notebook's text."""
import math
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

CONSTANTS = """# Your block sizes: BLOCK_M and BLOCK_N each one of 16, 32, 64, 128; NUM_WARPS one of 1, 2, 4, 8; NUM_STAGES one of
# 1, 2, 3, 4 (the hidden tests compile your kernel with them and count its bytes with them).
BLOCK_M, BLOCK_N = 32, 16
NUM_WARPS, NUM_STAGES = 4, 2
"""

PARTS = {"attention_kernel": ["CONSTANTS", "attention_kernel"], "causal_attention_kernel": ["causal_attention_kernel"]}


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
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, Lk, BLOCK_N):
        keys = start_n + cols
        k = tl.load(K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd,
                    mask=keys[None, :] < Lk, other=0.0)
        v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=keys[:, None] < Lk, other=0.0)
        s = tl.dot(q, k) * scale
        visible = keys[None, :] < Lk
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        s = tl.where(visible, s, float("-inf"))
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
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, tl.minimum(Lk, (start_m + 1) * BLOCK_M), BLOCK_N):
        keys = start_n + cols
        k = tl.load(K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd,
                    mask=keys[None, :] < Lk, other=0.0)
        v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=keys[:, None] < Lk, other=0.0)
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


def attention_reference(q, k, v, causal=False):
    """(out, lse) of softmax attention in float64; key j visible to query i when j <= i if causal."""
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        Lq, Lk = s.shape[-2:]
        s = s.masked_fill(torch.arange(Lk)[None, :] > torch.arange(Lq)[:, None], float("-inf"))
    return torch.softmax(s, -1) @ v.double(), torch.logsumexp(s, -1)


def minimum_bytes(q, k, v, BLOCK_M, BLOCK_N, skipping):
    """The bytes the text allows: Q, O and LSE once; K and V once per block of queries (with skipping, only the key
    blocks that start at or before the block's last query)."""
    B, H, Lq, d = q.shape
    Lk = k.shape[2]
    es = q.element_size()
    n_m = triton.cdiv(Lq, BLOCK_M)
    if skipping:
        keys = sum(min(Lk, triton.cdiv((sm + 1) * BLOCK_M, BLOCK_N) * BLOCK_N) for sm in range(n_m))
    else:
        keys = n_m * Lk
    return {"reads": {"Q": B * H * Lq * d * es, "K": B * H * keys * d * k.element_size(),
                      "V": B * H * keys * d * v.element_size()},
            "writes": {"O": B * H * Lq * d * es, "LSE": B * H * Lq * 4}}
