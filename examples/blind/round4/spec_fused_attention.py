"""Round 4 spec, fused_attention: the two Triton kernels as the notebook's text asks for them, and the same
attention in plain torch (flash_attention / flash_attention_causal: (out in q's dtype, lse in float32))."""
import math

import torch
import triton
import triton.language as tl

PARTS = {
    "attention_kernel": ["block_sizes", "attention_kernel"],
    "causal_attention_kernel": ["causal_attention_kernel"],
}

# The cell's block sizes, on one line so that inspect.getsource(block_sizes) gives the assignment with it.
BLOCK_M, BLOCK_N, NUM_WARPS, NUM_STAGES = 64, 64, 4, 2; block_sizes = lambda: (BLOCK_M, BLOCK_N, NUM_WARPS, NUM_STAGES)  # noqa: E501,E702,E731


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
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
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
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=keys[:, None] < Lk, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32))
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
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    hi = tl.minimum(Lk, (start_m + 1) * BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        keys = start_n + cols
        k = tl.load(K + b * stride_kb + h * stride_kh + keys[None, :] * stride_kn + dims[:, None] * stride_kd,
                    mask=keys[None, :] < Lk, other=0.0)
        s = tl.dot(q, k) * scale
        visible = (keys[None, :] < Lk) & (keys[None, :] <= rows[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + b * stride_vb + h * stride_vh + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=keys[:, None] < Lk, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32))
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + dims[None, :] * stride_od,
             out.to(O.dtype.element_ty), mask=rows[:, None] < Lq)
    tl.store(LSE + bh * Lq + rows, m_i + tl.log(l_i), mask=rows < Lq)


def attention_reference(q, k, v, causal=False):
    """(out in q's dtype, lse in float32) of softmax attention computed in float64, on q's device."""
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        Lq, Lk = s.shape[-2:]
        later = torch.arange(Lk, device=q.device)[None, :] > torch.arange(Lq, device=q.device)[:, None]
        s = s.masked_fill(later, float("-inf"))
    return (torch.softmax(s, -1) @ v.double()).to(q.dtype), torch.logsumexp(s, -1).float()


def flash_attention(q, k, v, causal=False):
    return attention_reference(q, k, v, causal)


def flash_attention_causal(q, k, v):
    return attention_reference(q, k, v, True)


def minimum_bytes(q, k, v, block_m, block_n, causal):
    """The fewest bytes the text allows a kernel to move: Q, O and the log-sum-exp once, K and V once per block of
    queries (for a causal kernel, only the key blocks up to the one that holds the diagonal of the block's last query),
    each load counted under its mask: {"reads": {"Q", "K", "V"}, "writes": {"O", "LSE"}}."""
    B, H, Lq, d = q.shape
    Lk = k.shape[2]
    row = d * q.element_size()
    keys = 0
    for start_m in range(triton.cdiv(Lq, block_m)):
        hi = min(Lk, (start_m + 1) * block_m) if causal else Lk
        keys += min(Lk, triton.cdiv(hi, block_n) * block_n)
    return {"reads": {"Q": B * H * Lq * row, "K": B * H * keys * d * k.element_size(),
                      "V": B * H * keys * d * v.element_size()},
            "writes": {"O": B * H * Lq * row, "LSE": B * H * Lq * 4}}
