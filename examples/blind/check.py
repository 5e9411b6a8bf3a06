"""Check the blind corpus: every entry is what it claims to be.

Run: .venv/bin/python examples/blind/check.py [assignment ...] [-k substring] [--no-visible] [--train] [--round N]
(--train also runs the transformer notebook's visible training cell for each transformer entry: slow, informational;
--round N checks round N's corpus, examples/blind/roundN/, against that round's own specs where it wrote them)

For every entry of examples/blind/<assignment>.py:
  * its namespace is built as the notebook builds it: the notebook's setup (and tools) cells, then every solution
    cell in notebook order, the entry's own source where it gives one (IPython magics stripped, its extra cells run
    just before the cell they precede), the spec's source (spec_<assignment>.py) everywhere else;
  * kind="mistake": its `shown_by` code must set `shown = True` (it compares with the spec, which is in scope as
    `spec`, and the checker's helpers as `H`);
  * kind="correct": it must agree with the spec on many random inputs across what the notebook's text allows
    (the per-part comparators below), and must not be shown different by anything;
  * kind="slow": it must agree with the spec on (smaller) random inputs, and its `shown_by` must show the cost.
It also reports, for information, which of the notebook's visible check cells the entry passes.
fused_attention (Triton) runs in Triton's interpreter without an NVIDIA GPU (TRITON_INTERPRET=1, set at start as the
notebook's environment cell sets it); its namespace also runs the environment and launchers cells, and H.count_bytes
counts the bytes each tl.load / tl.store touches under its mask, by argument (what the text holds kernels to).
Prints a table and exits non-zero if any entry fails its claim.
"""
import contextlib
import copy
import importlib
import inspect
import io
import json
import linecache
import math
import os
import statistics
import sys
import time
import traceback
import types

os.environ.setdefault("MPLBACKEND", "Agg")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
EXERCISES = os.path.join(HERE, "..", "..", "exercises")
ASSIGNMENTS = ["positional_encoding", "attention", "residual", "transformer", "fused_attention"]
# cells (by grade_id) that every namespace runs, in notebook order, before and between the solution cells
SETUP_CELLS = ("environment", "setup", "launchers", "tools")

import torch  # noqa: E402
from torch import nn  # noqa: E402

if not torch.cuda.is_available():   # as fused_attention's environment cell does, before anything imports Triton (torch
    os.environ.setdefault("TRITON_INTERPRET", "1")   # itself may, while checking another assignment)

torch.set_num_threads(1)


# ----------------------------------------------------------------------------------------------------------------------
# Notebooks and namespaces
# ----------------------------------------------------------------------------------------------------------------------

def strip_magics(source):
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%"))


def load_notebook(assignment):
    nb = json.load(open(f"{EXERCISES}/{assignment}/{assignment}.ipynb"))
    cells = []
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        meta = c.get("metadata", {}).get("nbgrader", {})
        cells.append(dict(gid=meta.get("grade_id"), solution=meta.get("solution", False), source="".join(c["source"])))
    return cells


NOTEBOOKS = {}
SPECS = {}


def notebook(assignment):
    if assignment not in NOTEBOOKS:
        NOTEBOOKS[assignment] = load_notebook(assignment)
    return NOTEBOOKS[assignment]


def spec_module(assignment):
    if assignment not in SPECS:
        SPECS[assignment] = importlib.import_module(f"spec_{assignment}")
    return SPECS[assignment]


def _source_of(obj):
    """A spec name's source: a string is the source itself (a cell's constants); a @triton.jit kernel's is its
    function's, decorator included."""
    if isinstance(obj, str):
        return obj
    return inspect.getsource(getattr(obj, "fn", obj))


def spec_source(assignment, gid):
    mod = spec_module(assignment)
    return "\n\n\n".join(_source_of(getattr(mod, name)) for name in mod.PARTS[gid])


_RUNS = 0


def run_source(source, filename, ns):
    """exec source in ns, registered in linecache as a notebook cell is, so that inspect (and @triton.jit, which
    reads its kernel's source) finds it."""
    global _RUNS
    _RUNS += 1
    filename = f"{filename[:-1]}#{_RUNS}>"                  # unique: a kernel may read its source again later
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)


def solution_ids(assignment):
    return [c["gid"] for c in notebook(assignment) if c["solution"]]


def build_namespace(assignment, entry=None):
    """The notebook's namespace after its setup and tools cells and every solution cell (the entry's or the spec's)."""
    ns = {"__name__": "__main__"}
    cells = (entry or {}).get("cells", {})
    extras = (entry or {}).get("extra_cells", [])
    for c in notebook(assignment):
        if c["gid"] in SETUP_CELLS:
            run_source(c["source"], f"<{assignment}:{c['gid']}>", ns)
        elif c["solution"]:
            for extra in extras:
                if extra["before"] == c["gid"]:
                    run_source(strip_magics(extra["source"]), f"<extra before {c['gid']}>", ns)
            source = cells[c["gid"]] if c["gid"] in cells else spec_source(assignment, c["gid"])
            with contextlib.redirect_stdout(io.StringIO()):
                run_source(strip_magics(source), f"<{assignment}:{c['gid']}>", ns)
    return ns


def run_training_cell(assignment, entry=None):
    """The accuracy the notebook's visible training run reaches with this entry (transformer only), or an error."""
    cell = [c for c in notebook(assignment) if c["gid"] is None and "Visible training run" in c["source"]]
    if not cell:
        return None
    ns = build_namespace(assignment, entry)
    source = cell[0]["source"].replace("assert acc >= target", "_ = acc >= target")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, "<training>", "exec"), ns)
    except Exception as e:  # noqa: BLE001
        return f"error {type(e).__name__}"
    finally:
        torch.set_num_threads(1)
    return f"acc {ns['acc']:.2f}"


def run_visible_checks(assignment, entry=None):
    """Names of the notebook's visible check cells (grade_id *_checks) that fail with this entry."""
    failed = []
    try:
        ns = build_namespace(assignment, entry)
    except Exception as e:  # noqa: BLE001
        return [f"(cells fail to run: {type(e).__name__})"]
    for c in notebook(assignment):
        if c["gid"] and c["gid"].endswith("_checks"):
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(c["source"], f"<{c['gid']}>", "exec"), ns)
            except Exception:  # noqa: BLE001
                failed.append(c["gid"][: -len("_checks")])
    return failed


# ----------------------------------------------------------------------------------------------------------------------
# Helpers, available to shown_by code as H
# ----------------------------------------------------------------------------------------------------------------------

class CountOps(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.count, self.largest = 0, 0

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.count += 1
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                try:
                    self.largest = max(self.largest, t.untyped_storage().nbytes())
                except Exception:  # noqa: BLE001
                    pass
        return out


def op_count(f, *args, **kwargs):
    with torch.no_grad(), CountOps() as counted:
        f(*args, **kwargs)
    return counted.count


def largest_bytes(f, *args, **kwargs):
    with torch.no_grad(), CountOps() as counted:
        f(*args, **kwargs)
    return counted.largest


def cpu_time(f, *args, repeats=5, **kwargs):
    """Median CPU seconds of one call (one thread, after one warm-up call)."""
    with torch.no_grad():
        f(*args, **kwargs)
        times = []
        for _ in range(repeats):
            start = time.process_time()
            f(*args, **kwargs)
            times.append(time.process_time() - start)
    return statistics.median(times)


def time_ratio(f, g, *args, repeats=5, **kwargs):
    """Median CPU time of f over that of g, taking turns."""
    with torch.no_grad():
        f(*args, **kwargs)
        g(*args, **kwargs)
        tf, tg = [], []
        for r in range(repeats):
            for h, ts in ((f, tf), (g, tg)) if r % 2 else ((g, tg), (f, tf)):
                start = time.process_time()
                h(*args, **kwargs)
                ts.append(time.process_time() - start)
    return statistics.median(tf) / max(statistics.median(tg), 1e-9)


def raises(f, *args, **kwargs):
    """The name of the exception f raises, or None."""
    try:
        f(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__
    return None


def maxdiff(a, b):
    """Largest |a - b| (as float64); inf when shapes differ; nan propagates as inf."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
        return float("inf")
    d = (a.detach().double() - b.detach().double()).abs()
    if d.numel() == 0:
        return 0.0
    if torch.isnan(d).any():
        return float("inf")
    return d.max().item()


def same(a, b, atol, rtol=0.0, dtype=True):
    """a and b are tensors of the same shape (and dtype), equal within atol + rtol * |b|, no NaN where b has none."""
    if not isinstance(a, torch.Tensor) or a.shape != b.shape or (dtype and a.dtype != b.dtype):
        return False
    if a.device.type == "meta" or b.device.type == "meta":
        return a.device == b.device
    a64, b64 = a.detach().double(), b.detach().double()
    if not torch.equal(torch.isnan(a64), torch.isnan(b64)):
        return False
    a64, b64 = torch.nan_to_num(a64), torch.nan_to_num(b64)
    return bool(((a64 - b64).abs() <= atol + rtol * b64.abs()).all())


def grads_of(module_params, loss):
    for p in module_params:
        p.grad = None
    loss.backward()
    return [None if p.grad is None else p.grad.clone() for p in module_params]


def copy_linear(dst, src):
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        if src.bias is not None or dst.bias is not None:
            dst.bias.copy_(src.bias)


def load_mha(dst, src):
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        copy_linear(getattr(dst, name), getattr(src, name))


def load_ln(dst, src):
    with torch.no_grad():
        dst.weight.copy_(src.weight.reshape(dst.weight.shape))
        dst.bias.copy_(src.bias.reshape(dst.bias.shape))


def load_ff(dst, src):
    copy_linear(dst.linear1, src.linear1)
    copy_linear(dst.linear2, src.linear2)


def load_block(dst, src):
    load_mha(dst.attn, src.attn)
    load_ff(dst.ff, src.ff)
    load_ln(dst.norm1, src.norm1)
    load_ln(dst.norm2, src.norm2)


def randomize(module, scale=0.5, generator=None):
    """Draw every parameter (the norms' too)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * scale)
    return module


def tiny_parts(model, V, d, n_layers):
    """The parameters of a TinyTransformer as the notebook's text tells them apart: one ModuleList of n_layers
    blocks; outside it one (V, d) embedding, one LayerNorm(d) (weight, bias) and the head, told from the embedding
    by its bias (V,), or, without one, by coming second. Raises ValueError when the model does not hold exactly
    these parameters."""
    lists = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) == n_layers]
    if len(lists) != 1:
        raise ValueError(f"{len(lists)} ModuleLists of {n_layers} blocks")
    prefix = lists[0][0] + "."
    others = [(n, p) for n, p in model.named_parameters() if not n.startswith(prefix)]
    mats = [(n, p) for n, p in others if tuple(p.shape) == (V, d)]
    vec_v = [(n, p) for n, p in others if tuple(p.shape) == (V,)]
    vec_d = [(n, p) for n, p in others if tuple(p.shape) == (d,)]
    if len(mats) != 2 or len(vec_v) > 1 or len(vec_d) != 2 or len(others) != 4 + len(vec_v):
        raise ValueError(f"not exactly the stated parameters: {[(n, tuple(p.shape)) for n, p in others]}")
    if vec_v:
        head_prefix = vec_v[0][0].rsplit(".", 1)[0]
        head = [p for n, p in mats if n.rsplit(".", 1)[0] == head_prefix]
        emb = [p for n, p in mats if n.rsplit(".", 1)[0] != head_prefix]
        if len(head) != 1 or len(emb) != 1:
            raise ValueError("cannot tell the head from the embedding")
        head_w, emb_w, head_b = head[0], emb[0], vec_v[0][1]
    else:
        emb_w, head_w, head_b = mats[0][1], mats[1][1], None
    ln_w = [p for n, p in vec_d if n.endswith("weight")]
    ln_b = [p for n, p in vec_d if n.endswith("bias")]
    if len(ln_w) != 1 or len(ln_b) != 1:
        raise ValueError("cannot find the final LayerNorm's weight and bias")
    return dict(blocks=list(lists[0][1]), emb=emb_w, head_w=head_w, head_b=head_b, ln_w=ln_w[0], ln_b=ln_b[0])


def load_tiny(dst, src, V, d, n_layers):
    """Put the weights of the spec's TinyTransformer src into dst, by the rules of the notebook's text."""
    parts = tiny_parts(dst, V, d, n_layers)
    with torch.no_grad():
        for b_dst, b_src in zip(parts["blocks"], src.blocks):
            load_block(b_dst, b_src)
        parts["emb"].copy_(src.embed.weight)
        parts["head_w"].copy_(src.head.weight)
        if parts["head_b"] is not None:
            parts["head_b"].copy_(src.head.bias)
        else:
            src.head.bias.zero_()          # the course model without a bias
        parts["ln_w"].copy_(src.norm.weight)
        parts["ln_b"].copy_(src.norm.bias)
    return parts


class count_bytes:
    """Counts, while Triton's interpreter runs, the bytes every tl.load and tl.store touches under its mask, by the
    tensor they fall in: `with H.count_bytes(Q=q, K=k, V=v) as c: ...`, then c.reads and c.writes map each name (and
    "other", for the tensors the launcher makes: O and LSE) to bytes."""

    def __init__(self, **tensors):
        self.ranges = []
        for name, t in tensors.items():
            st = t.untyped_storage()
            self.ranges.append((name, st.data_ptr(), st.data_ptr() + st.nbytes()))
        self.reads = {name: 0 for name in [*tensors, "other"]}
        self.writes = {name: 0 for name in [*tensors, "other"]}

    def _add(self, table, ptrs, mask):
        import numpy as np
        addr = np.asarray(ptrs.data)
        on = np.broadcast_to(np.asarray(mask.data).astype(bool), addr.shape)
        addr = addr[on]
        size = ptrs.get_element_ty().primitive_bitwidth // 8
        named = 0
        for name, lo, hi in self.ranges:
            n = int(((addr >= lo) & (addr < hi)).sum())
            table[name] += n * size
            named += n
        table["other"] += (addr.size - named) * size

    def __enter__(self):
        from triton.runtime import interpreter
        builder = interpreter.InterpreterBuilder
        self.saved = builder.create_masked_load, builder.create_masked_store
        load, store = self.saved
        counter = self

        def create_masked_load(self_, ptrs, mask, other, *args, **kwargs):
            counter._add(counter.reads, ptrs, mask)
            return load(self_, ptrs, mask, other, *args, **kwargs)

        def create_masked_store(self_, ptrs, value, mask, *args, **kwargs):
            counter._add(counter.writes, ptrs, mask)
            return store(self_, ptrs, value, mask, *args, **kwargs)

        builder.create_masked_load, builder.create_masked_store = create_masked_load, create_masked_store
        return self

    def __exit__(self, *exc):
        from triton.runtime import interpreter
        interpreter.InterpreterBuilder.create_masked_load, interpreter.InterpreterBuilder.create_masked_store = self.saved
        return False


H = types.SimpleNamespace(count_bytes=count_bytes, op_count=op_count, largest_bytes=largest_bytes, cpu_time=cpu_time, time_ratio=time_ratio,
                          raises=raises, maxdiff=maxdiff, same=same, grads_of=grads_of, load_mha=load_mha,
                          load_ln=load_ln, load_ff=load_ff, load_block=load_block, randomize=randomize,
                          tiny_parts=tiny_parts, load_tiny=load_tiny, copy_linear=copy_linear)


# ----------------------------------------------------------------------------------------------------------------------
# Comparators for correct (and slow) entries: random inputs across what each notebook's text allows
# ----------------------------------------------------------------------------------------------------------------------

class Mismatch(Exception):
    pass


def need(cond, what):
    if not cond:
        raise Mismatch(what)


def tol_for(dtype):
    return {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 2e-2, torch.bfloat16: 6e-2}[dtype]


def cmp_sinusoidal(ns, spec, g, quick=False):
    f, ref = ns["sinusoidal_encoding"], spec.sinusoidal_encoding
    sizes = [(1, 2), (1, 8), (6, 4), (97, 6), (13, 2), (5, 30)] + ([] if quick else [(2048, 512), (2500, 8)])
    sizes += [(int(torch.randint(1, 300, (1,), generator=g)), 2 * int(torch.randint(1, 40, (1,), generator=g)))
              for _ in range(6)]
    for L, d in sizes:
        for base_args in [((), {}), ((100.0,), {}), ((), {"base": 500.5}), ((25000,), {}), ((), {"base": 10000.0})]:
            out = f(L, d, *base_args[0], **base_args[1])
            want = ref(L, d, *base_args[0], **base_args[1])
            need(same(out, want, atol=1e-6), f"sinusoidal_encoding{(L, d, base_args)} differs "
                                               f"(max diff {maxdiff(out, want):.2e}, dtype {getattr(out, 'dtype', None)})")
    for d in (1, 3, 7):
        need(raises(f, 4, d) == "ValueError", f"odd d_model = {d} does not raise ValueError")
    a = f(7, 4)
    a.add_(1.0)
    need(same(f(7, 4), ref(7, 4), atol=1e-6), "a table changed by its caller changes the next call's answer")


def cmp_rope(ns, spec, g, quick=False):
    f, ref = ns["rope"], spec.rope
    shapes = [(5, 4), (2, 5, 4), (2, 3, 7, 8), (1, 1, 1, 2), (3, 1, 6), (2, 1, 3, 2, 4), (17, 2)]
    if not quick:
        shapes += [(1024, 16), (1500, 6), (2, 1500, 4)]
    for i, shape in enumerate(shapes):
        for dtype in (torch.float32, torch.float64):
            for layout in ("plain", "transposed", "strided", "expanded"):
                if layout == "expanded":                     # one vector at every position (as in the book)
                    x = torch.randn(*shape[:-2], 1, shape[-1], generator=g, dtype=dtype).expand(shape)
                elif layout == "plain":
                    x = torch.randn(shape, generator=g, dtype=dtype)
                elif layout == "transposed":
                    x = torch.randn(*shape[:-2], shape[-1], shape[-2], generator=g, dtype=dtype).transpose(-1, -2)
                else:
                    x = torch.randn(*shape[:-1], 2 * shape[-1], generator=g, dtype=dtype)[..., ::2]
                before = x.clone()
                args = [((), {}), ((500.0,), {}), ((), {"base": 12345.0})][i % 3]
                out = f(x, *args[0], **args[1])
                want = ref(x, *args[0], **args[1])
                need(torch.equal(x, before), f"rope modified x ({shape}, {dtype}, {layout})")
                need(same(out, want, atol=tol_for(dtype) * 4), f"rope{shape} {dtype} {layout} {args} differs from "
                     f"the spec (max diff {maxdiff(out, want):.2e}, dtype {getattr(out, 'dtype', None)})")
                need(out.data_ptr() != x.data_ptr(), "rope returned (a view of) x itself")
    for dtype in (torch.float32, torch.float64):             # heads cut from (B, L, H, d) by transpose(1, 2)
        x = torch.randn(2, 7, 3, 8, generator=g, dtype=dtype).transpose(1, 2)
        out, want = f(x), ref(x)
        need(same(out, want, atol=tol_for(dtype) * 4), f"rope on (B, L, H, d).transpose(1, 2), {dtype}: "
             f"max diff {maxdiff(out, want):.2e}")
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(2, 9, 8, generator=g).to(dtype)
        out, want = f(x), ref(x)
        need(out.dtype == dtype and maxdiff(out, want) < tol_for(dtype) * 4,
             f"rope on {dtype}: dtype {out.dtype}, max diff {maxdiff(out, want):.2e}")
    x = torch.randn(2, 5, 6, device="meta")
    out = f(x)
    need(out.device.type == "meta" and out.shape == x.shape and out.dtype == x.dtype, "rope on the meta device")
    for d in (1, 3, 5):
        need(raises(f, torch.randn(3, d)) == "ValueError", f"odd d = {d} does not raise ValueError")
    x = torch.randn(1, 4, generator=g)
    out = f(x)
    need(out.data_ptr() != x.data_ptr(), "one position: rope returned x itself")


def cmp_alibi(ns, spec, g, quick=False):
    f, ref = ns["alibi_bias"], spec.alibi_bias
    for n in range(1, 41):
        for L in (1, 2, int(torch.randint(3, 40, (1,), generator=g))) + (() if quick or n % 8 else (150,)):
            out, want = f(n, L), ref(n, L)
            need(same(out, want, atol=1e-6, rtol=1e-6), f"alibi_bias({n}, {L}) differs (max diff "
                                                        f"{maxdiff(out, want):.2e}, dtype {getattr(out, 'dtype', None)})")
    a = f(4, 5)
    a.masked_fill_(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
    need(same(f(4, 5), ref(4, 5), atol=1e-6), "a bias changed by its caller changes the next call's answer")


def _sdpa_case(g, dtype, lead, Lq, Lk, d, dv, mask_kind, scale_kind, layout):
    q = torch.randn(*lead, Lq, d, generator=g, dtype=torch.float64)
    k = torch.randn(*lead, Lk, d, generator=g, dtype=torch.float64)
    v = torch.randn(*lead, Lk, dv, generator=g, dtype=torch.float64)
    mask = None
    if mask_kind == "keys":
        mask = torch.rand(Lk, generator=g) > 0.3
    elif mask_kind == "2d":
        mask = torch.rand(Lq, Lk, generator=g) > 0.4
    elif mask_kind == "lead":
        shape = (*lead[:1], *([1] * (len(lead) - 1)), Lq, Lk) if lead else (Lq, Lk)
        mask = torch.rand(shape, generator=g) > 0.4
    elif mask_kind == "full":
        mask = torch.rand(*lead, Lq, Lk, generator=g) > 0.5
    if mask is not None and mask.ndim >= 2 and Lq > 1:
        mask[..., 0, :] = False                                     # a query with no key to attend to
    if scale_kind == "large":
        q, k = 40 * q, 40 * k                                       # scores around 1e3 .. 1e4
    elif scale_kind == "below":                                     # every score far below 0
        q = q.abs() + 30
        k = -(k.abs() + 30)
    elif scale_kind == "masked_largest" and mask is not None:       # the masked keys have the largest scores
        q = q.abs() + 10
        k = k.abs() * 0.1 - 5
        masked_keys = torch.rand(Lk, generator=g) > 0.5
        k[..., masked_keys, :] = 300.0
        mask = mask & ~masked_keys
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if layout == "transposed":
        if len(lead) >= 2:                     # heads as MultiHeadAttention makes them: (B, L, H, d) transposed
            q, k, v = (t.movedim(-2, 1).contiguous().movedim(1, -2) for t in (q, k, v))
        else:                                  # keys and values with a strided last dimension
            k = k.transpose(-1, -2).contiguous().transpose(-1, -2)
            v = v.transpose(-1, -2).contiguous().transpose(-1, -2)
    return q, k, v, mask


def cmp_sdpa(ns, spec, g, quick=False):
    f, ref = ns["scaled_dot_product_attention"], spec.scaled_dot_product_attention
    cases = []
    leads = [(), (2,), (2, 3), (1, 2, 3)]
    for i in range(12 if quick else 48):
        lead = leads[i % 4]
        Lq, Lk = int(torch.randint(1, 14, (1,), generator=g)), int(torch.randint(1, 14, (1,), generator=g))
        d, dv = [(4, 6), (1, 1), (24, 10), (8, 8), (3, 5)][i % 5]
        mask_kind = ["none", "keys", "2d", "lead", "full"][(i // 4) % 5]
        scale_kind = ["normal", "large", "below", "masked_largest"][(i // 2) % 4]
        dtype = torch.float64 if i % 3 == 0 else torch.float32
        cases.append((dtype, lead, Lq, Lk, d, dv, mask_kind, scale_kind, "transposed" if i % 3 == 1 else "plain"))
    cases += [(torch.float32, (2,), 13, 97, 24, 10, "none", "normal", "plain"),
              (torch.float64, (2, 3), 13, 97, 24, 10, "lead", "normal", "plain"),
              (torch.float32, (2, 2), 1, 1, 4, 4, "none", "normal", "plain"),
              (torch.float16, (2,), 5, 7, 8, 8, "2d", "normal", "plain"),
              (torch.bfloat16, (2, 2), 5, 7, 8, 8, "lead", "normal", "plain")]
    for case in cases:
        dtype = case[0]
        q, k, v, mask = _sdpa_case(g, *case)
        saved = [t.clone() for t in (q, k, v)] + ([mask.clone()] if mask is not None else [])
        out, w = f(q, k, v, mask)
        want_out, want_w = ref(q, k, v, mask)
        atol = tol_for(dtype) * (20 if case[7] != "normal" and dtype == torch.float32 else 1)
        need(same(w, want_w, atol=atol) and same(out, want_out, atol=atol * 4),
             f"sdpa {case} differs: weights {maxdiff(w, want_w):.2e}, out {maxdiff(out, want_out):.2e}, dtypes "
             f"{getattr(out, 'dtype', None)}/{getattr(w, 'dtype', None)}")
        now = [q, k, v] + ([mask] if mask is not None else [])
        need(all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(now, saved)), f"sdpa {case} modified an argument")
        if dtype == torch.float64:                          # gradients reach q, k and v as autograd gives them
            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            out, w = f(*leaves, mask)
            want_out, want_w = ref(*leaves, mask)
            r1 = torch.randn(want_out.shape, generator=g, dtype=dtype)
            r2 = torch.randn(want_w.shape, generator=g, dtype=dtype)
            gm = grads_of(leaves, (out * r1).sum() + (w * r2).sum())
            gt = grads_of(leaves, (want_out * r1).sum() + (want_w * r2).sum())
            need(all(a is not None and same(a, b, atol=1e-8, rtol=1e-7) for a, b in zip(gm, gt)),
                 f"sdpa {case}: gradients of q, k, v differ from autograd's through the spec "
                 f"{[None if a is None else maxdiff(a, b) for a, b in zip(gm, gt)]}")
    q, k, v = (torch.randn(2, 3, L, 8, device="meta") for L in (5, 7, 7))
    out, w = f(q, k, v, torch.ones(2, 1, 5, 7, dtype=torch.bool, device="meta"))
    need(out.device.type == "meta" and out.shape == (2, 3, 5, 8) and w.shape == (2, 3, 5, 7), "sdpa on the meta device")


def cmp_causal(ns, spec, g, quick=False):
    f, ref = ns["causal_mask"], spec.causal_mask
    for L in (1, 2, 5, 97, 300, 600):
        for how in ("none", "kw_cpu", "pos_cpu", "kw_meta", "pos_meta", "kw_device"):
            if how == "none":
                out, want = f(L), ref(L)
            elif how.startswith("kw"):
                dev = {"kw_cpu": "cpu", "kw_meta": "meta", "kw_device": torch.device("cpu")}[how]
                out, want = f(L, device=dev), ref(L, device=dev)
            else:
                dev = how.split("_")[1]
                out, want = f(L, dev), ref(L, dev)
            need(isinstance(out, torch.Tensor) and out.dtype == torch.bool and out.shape == want.shape
                 and out.device == want.device, f"causal_mask({L}, {how}): {getattr(out, 'dtype', None)} "
                 f"{getattr(out, 'shape', None)} {getattr(out, 'device', None)}")
            if want.device.type != "meta":
                need(torch.equal(out, want), f"causal_mask({L}, {how}) values")
    a = f(6)
    a[:, 0] = False
    need(torch.equal(f(6), ref(6)), "a mask changed by its caller changes the next call's answer")


def _mha_pair(ns, spec, g, d_model, H_, bias):
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=g)))
    mine = ns["MultiHeadAttention"](d_model, H_, bias=bias) if bias is not True else ns["MultiHeadAttention"](d_model, H_)
    theirs = spec.MultiHeadAttention(d_model, H_, bias=bias)
    randomize(theirs, 0.4, g)
    load_mha(mine, theirs)
    return mine, theirs


def cmp_mha(ns, spec, g, quick=False):
    cls = ns["MultiHeadAttention"]
    need(raises(cls, 10, 3) == "ValueError" and raises(cls, 12, 5) == "ValueError", "n_heads not dividing d_model")
    configs = [(16, 4, True), (48, 6, False), (8, 1, True), (8, 8, False), (12, 3, True), (6, 2, False)]
    for i, (d_model, H_, bias) in enumerate(configs * (1 if quick else 2)):
        mine, theirs = _mha_pair(ns, spec, g, d_model, H_, bias)
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            lin = getattr(mine, name)
            need(isinstance(lin, nn.Linear) and lin.weight.shape == (d_model, d_model)
                 and (lin.bias is not None) == bias, f"{name} is not nn.Linear({d_model}, {d_model}, bias={bias})")
        for trial in range(4):
            B = int(torch.randint(1, 4, (1,), generator=g))
            Lq = int(torch.randint(1, 9, (1,), generator=g))
            Lk = Lq if trial < 2 else int(torch.randint(1, 9, (1,), generator=g))
            dtype = torch.float64 if (i + trial) % 2 else torch.float32
            m_, t_ = (mine.double(), theirs.double()) if dtype == torch.float64 else (mine.float(), theirs.float())
            query = torch.randn(B, Lq, d_model, generator=g, dtype=dtype, requires_grad=True)
            key = torch.randn(B, Lk, d_model, generator=g, dtype=dtype) if trial >= 2 else None
            value = torch.randn(B, Lk, d_model, generator=g, dtype=dtype) if trial == 3 else None
            mask = None
            if trial == 1:
                mask = torch.ones(Lq, Lk, dtype=torch.bool).tril()
            elif trial >= 2:
                mask = torch.rand(B, 1, Lq, Lk, generator=g) > 0.3
                mask[0, 0, 0] = False
            saved = [t.detach().clone() if t is not None else None for t in (query, key, value, mask)]
            kwargs = {"mask": mask} if mask is not None else {}
            args = (query,) if key is None else ((query, key) if value is None else (query, key, value))
            out = m_(*args, **kwargs)
            want = t_(*args, **kwargs)
            need(same(out, want, atol=tol_for(dtype) * 2), f"MHA({d_model}, {H_}, bias={bias}) trial {trial} {dtype}"
                 f" differs: {maxdiff(out, want):.2e}")
            r = torch.randn(out.shape, generator=g, dtype=dtype)
            gm = grads_of([query] + [getattr(m_, n).weight for n in ("q_proj", "k_proj", "v_proj", "out_proj")],
                          (out * r).sum())
            gt = grads_of([query] + [getattr(t_, n).weight for n in ("q_proj", "k_proj", "v_proj", "out_proj")],
                          (want * r).sum())
            need(all(a is not None and same(a, b, atol=tol_for(dtype) * 10) for a, b in zip(gm, gt)),
                 f"MHA gradients differ (trial {trial})")
            now = (query, key, value, mask)
            need(all(s is None or (n.shape == s.shape and torch.equal(n.detach(), s)) for n, s in zip(now, saved)),
                 "MHA modified an argument")
    m_meta = copy.deepcopy(cls(16, 4)).to("meta")
    out = m_meta(torch.randn(2, 5, 16, device="meta"), torch.randn(2, 7, 16, device="meta"),
                 mask=torch.ones(5, 7, dtype=torch.bool, device="meta"))
    need(out.device.type == "meta" and out.shape == (2, 5, 16), "MultiHeadAttention moved to the meta device")


def cmp_blockwise(ns, spec, g, quick=False):
    f, ref = ns["blockwise_attention"], spec.blockwise_attention
    cases = [((1,), 50, 97, 8, 8, 32), ((), 97, 97, 4, 4, 32), ((2, 2), 10, 37, 8, 5, 16), ((1,), 3, 5, 2, 2, 2)]
    for i in range(10 if quick else 30):
        lead = [(), (2,), (2, 3)][i % 3]
        Lq, Lk = int(torch.randint(1, 40, (1,), generator=g)), int(torch.randint(1, 40, (1,), generator=g))
        d, dv = [(4, 4), (8, 3), (1, 1), (6, 10)][i % 4]
        bs = [1, 3, 16, Lk, Lk + 5, 64, 7][i % 7]
        cases.append((lead, Lq, Lk, d, dv, bs))
    for j, (lead, Lq, Lk, d, dv, bs) in enumerate(cases):
        for causal in (False, True):
            scale_kind = ["normal", "large", "below"][j % 3] if j >= 4 else "normal"
            dtype = torch.float64 if (j + causal) % 2 or scale_kind != "normal" else torch.float32
            q = torch.randn(*lead, Lq, d, generator=g, dtype=torch.float64)
            k = torch.randn(*lead, Lk, d, generator=g, dtype=torch.float64)
            v = torch.randn(*lead, Lk, dv, generator=g, dtype=torch.float64)
            if scale_kind == "large":
                q, k = 40 * q, 40 * k
            elif scale_kind == "below":
                q, k = q.abs() + 30, -(k.abs() + 30)
            q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
            saved = [t.clone() for t in (q, k, v)]
            out = f(q, k, v, causal=causal, block_size=bs) if j % 2 else f(q, k, v, causal, bs)
            want = ref(q, k, v, causal, bs)
            need(same(out, want, atol=tol_for(dtype) * 5), f"blockwise {lead, Lq, Lk, d, dv, bs} causal={causal} "
                 f"{dtype} {scale_kind}: max diff {maxdiff(out, want):.2e}, dtype {getattr(out, 'dtype', None)}")
            need(all(torch.equal(a, b) for a, b in zip((q, k, v), saved)), "blockwise modified q, k or v")
    q, k, v = torch.randn(3, 2, 37, 8, generator=g).unbind(0)
    need(same(f(q, k, v), ref(q, k, v), atol=2e-5), "default arguments (block_size=64, causal=False)")
    for causal in (False, True):
        out = f(*(torch.randn(2, 37, 8, device="meta") for _ in range(3)), causal=causal, block_size=16)
        need(out.device.type == "meta" and out.shape == (2, 37, 8), "blockwise_attention on the meta device")


def cmp_layernorm(ns, spec, g, quick=False):
    cls = ns["LayerNorm"]
    for d in (1, 2, 8, 97, 33):
        ln = cls(d)
        params = dict(ln.named_parameters())
        need(set(params) == {"weight", "bias"} and params["weight"].shape == (d,) and params["bias"].shape == (d,)
             and torch.equal(params["weight"].detach(), torch.ones(d)) and torch.equal(params["bias"].detach(), torch.zeros(d)),
             f"LayerNorm({d}) parameters")
        for eps in (1e-5, 1e-3, 0.1):
            mine = cls(d, eps=eps) if eps != 1e-5 else cls(d)
            theirs = spec.LayerNorm(d, eps)
            randomize(theirs, 1.0, g)
            load_ln(mine, theirs)
            for shape in ((d,), (3, d), (2, 3, 4, d)):
                for kind in ("normal", "flat", "offset"):
                    x = torch.randn(shape, generator=g, dtype=torch.float64)
                    if kind == "flat":
                        x = 1e-3 * x
                    elif kind == "offset":
                        x = 50.0 + 1e-3 * x
                    for dtype in (torch.float64, torch.float32):
                        if dtype == torch.float32 and kind == "offset":
                            continue
                        m_, t_ = (mine.double(), theirs.double()) if dtype == torch.float64 else (mine.float(), theirs.float())
                        xx = x.detach().to(dtype).clone().requires_grad_(True)
                        saved = xx.detach().clone()
                        out, want = m_(xx), t_(xx)
                        atol = 1e-9 if dtype == torch.float64 else 1e-4
                        need(same(out, want, atol=atol), f"LayerNorm({d}, eps={eps}) {shape} {kind} {dtype}: "
                             f"{maxdiff(out, want):.2e}")
                        r = torch.randn(out.shape, generator=g, dtype=dtype)
                        gm = grads_of([xx, m_.weight, m_.bias], (out * r).sum())
                        gt = grads_of([xx, t_.weight, t_.bias], (want * r).sum())
                        need(all(a is not None and same(a, b, atol=atol * 100, dtype=False) for a, b in zip(gm, gt)),
                             f"LayerNorm gradients differ ({shape}, {kind}, {dtype}, eps={eps}): "
                             f"{[None if a is None else maxdiff(a, b) for a, b in zip(gm, gt)]}")
                        need(torch.equal(xx.detach(), saved), "LayerNorm modified x")
    out = copy.deepcopy(cls(8)).to("meta")(torch.randn(2, 3, 8, device="meta"))
    need(out.device.type == "meta" and out.shape == (2, 3, 8), "LayerNorm moved to the meta device")


def cmp_feedforward(ns, spec, g, quick=False):
    cls = ns["FeedForward"]
    for d_model, d_ff in ((8, 32), (24, 97), (1, 3), (5, 1), (16, 16)):
        mine, theirs = cls(d_model, d_ff), spec.FeedForward(d_model, d_ff)
        need(isinstance(mine.linear1, nn.Linear) and isinstance(mine.linear2, nn.Linear)
             and mine.linear1.weight.shape == (d_ff, d_model) and mine.linear2.weight.shape == (d_model, d_ff)
             and mine.linear1.bias is not None and mine.linear2.bias is not None, "linear1 / linear2")
        randomize(theirs, 0.5, g)
        load_ff(mine, theirs)
        for shape in ((d_model,), (3, d_model), (2, 3, d_model), (1, 2, 3, d_model)):
            for dtype in (torch.float32, torch.float64):
                m_, t_ = (mine.double(), theirs.double()) if dtype == torch.float64 else (mine.float(), theirs.float())
                if len(shape) == 3:                         # a transposed view, not contiguous in memory
                    x = torch.randn(shape[0], shape[2], shape[1], generator=g, dtype=dtype).transpose(1, 2)
                    x.requires_grad_(True)
                else:
                    x = torch.randn(shape, generator=g, dtype=dtype, requires_grad=True)
                saved = x.detach().clone()
                out, want = m_(x), t_(x)
                need(same(out, want, atol=tol_for(dtype)), f"FeedForward{(d_model, d_ff)} {shape} {dtype}")
                r = torch.randn(out.shape, generator=g, dtype=dtype)
                gm = grads_of([x, m_.linear1.weight, m_.linear2.bias], (out * r).sum())
                gt = grads_of([x, t_.linear1.weight, t_.linear2.bias], (want * r).sum())
                need(all(a is not None and same(a, b, atol=tol_for(dtype) * 10) for a, b in zip(gm, gt)),
                     "FeedForward gradients")
                need(torch.equal(x.detach(), saved), "FeedForward modified x")
    out = copy.deepcopy(cls(8, 32)).to("meta")(torch.randn(2, 3, 8, device="meta"))
    need(out.device.type == "meta" and out.shape == (2, 3, 8), "FeedForward moved to the meta device")


def cmp_block(ns, spec, g, quick=False):
    cls = ns["TransformerBlock"]
    configs = [(16, 4, 32), (48, 6, 64), (8, 1, 8), (12, 3, 5)]
    for d_model, H_, d_ff in configs[: 2 if quick else 4]:
        for norm_first in (True, False):
            torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=g)))
            mine = cls(d_model, H_, d_ff) if norm_first else cls(d_model, H_, d_ff, norm_first=False)
            theirs = spec.TransformerBlock(d_model, H_, d_ff, norm_first)
            names = {n for n, _ in mine.named_children()}
            need({"attn", "ff", "norm1", "norm2"} <= names, f"submodules {names}")
            randomize(theirs, 0.4, g)
            load_block(mine, theirs)
            for trial in range(5):
                B, L = int(torch.randint(1, 4, (1,), generator=g)), [1, 5, 7, 3, 6][trial]
                dtype = torch.float64 if trial % 2 else torch.float32
                m_, t_ = (mine.double(), theirs.double()) if dtype == torch.float64 else (mine.float(), theirs.float())
                x = torch.randn(B, L, d_model, generator=g, dtype=dtype, requires_grad=True)
                saved = x.detach().clone()
                if trial in (0, 4):                          # no mask: every position attends everywhere
                    out, want = m_(x), t_(x)
                elif trial == 1:
                    mask = torch.ones(L, L, dtype=torch.bool).tril()
                    out, want = m_(x, mask), t_(x, mask)
                else:
                    mask = torch.rand(B, 1, L, L, generator=g) > 0.3
                    out, want = m_(x, mask=mask), t_(x, mask=mask)
                need(same(out, want, atol=tol_for(dtype) * 5), f"TransformerBlock({d_model}, {H_}, {d_ff}, "
                     f"norm_first={norm_first}) trial {trial} {dtype}: {maxdiff(out, want):.2e}")
                r = torch.randn(out.shape, generator=g, dtype=dtype)
                gm = grads_of([x, m_.norm1.weight, m_.ff.linear1.weight, m_.attn.q_proj.weight], (out * r).sum())
                gt = grads_of([x, t_.norm1.weight, t_.ff.linear1.weight, t_.attn.q_proj.weight], (want * r).sum())
                need(all(a is not None and same(a, b, atol=tol_for(dtype) * 50, dtype=False) for a, b in zip(gm, gt)),
                     f"TransformerBlock gradients (trial {trial})")
                need(torch.equal(x.detach(), saved), "TransformerBlock modified x")
    for norm_first in (True, False):
        m_meta = copy.deepcopy(cls(16, 4, 32, norm_first=norm_first)).to("meta")
        out = m_meta(torch.randn(2, 5, 16, device="meta"), torch.ones(5, 5, dtype=torch.bool, device="meta").tril())
        need(out.device.type == "meta" and out.shape == (2, 5, 16), "TransformerBlock moved to the meta device")


def cmp_tiny(ns, spec, g, quick=False):
    cls = ns["TinyTransformer"]
    configs = [(11, 16, 2, 32, 2, 20), (10, 32, 4, 64, 2, 16), (7, 12, 3, 8, 1, 9), (13, 8, 1, 16, 3, 5)]
    for V, d, H_, d_ff, n_layers, max_len in configs[: 2 if quick else 4]:
        for norm_first in (True, False):
            torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=g)))
            args = (V, d, H_, d_ff, n_layers, max_len)
            mine = cls(*args) if norm_first else cls(*args, norm_first=False)
            theirs = spec.TinyTransformer(*args, norm_first=norm_first)
            randomize(theirs, 0.5, g)
            load_tiny(mine, theirs, V, d, n_layers)
            for T in (1, max_len, int(torch.randint(1, max_len + 1, (1,), generator=g))):
                for dtype in (torch.float32, torch.float64):
                    m_, t_ = (mine.double(), theirs.double()) if dtype == torch.float64 else (mine.float(), theirs.float())
                    tokens = torch.randint(0, V, (3, T), generator=g)
                    saved = tokens.clone()
                    out, want = m_(tokens), t_(tokens)
                    m_.eval()
                    t_.eval()
                    tokens_t = tokens.t().contiguous().t()          # the same ids, not contiguous in memory
                    with torch.no_grad():
                        out_e, want_e = m_(tokens_t), t_(tokens_t)
                    m_.train()
                    t_.train()
                    need(same(out_e, want_e, atol=tol_for(dtype) * 20), f"TinyTransformer{args} norm_first="
                         f"{norm_first} T={T} {dtype} in eval(), tokens not contiguous: {maxdiff(out_e, want_e):.2e}")
                    need(same(out, want, atol=tol_for(dtype) * 20), f"TinyTransformer{args} norm_first={norm_first} "
                         f"T={T} {dtype}: {maxdiff(out, want):.2e}")
                    need(torch.equal(tokens, saved), "TinyTransformer modified tokens")
                    parts_m, parts_t = tiny_parts(m_, V, d, n_layers), tiny_parts(t_, V, d, n_layers)
                    r = torch.randn(out.shape, generator=g, dtype=dtype)
                    keys = ("emb", "head_w", "ln_w")
                    gm = grads_of([parts_m[k_] for k_ in keys], (out * r).sum())
                    gt = grads_of([parts_t[k_] for k_ in keys], (want * r).sum())
                    need(all(a is not None and same(a, b, atol=tol_for(dtype) * 100) for a, b in zip(gm, gt)),
                         f"TinyTransformer gradients (T={T})")
            m_meta = copy.deepcopy(mine).float().to("meta")
            out = m_meta(torch.randint(0, V, (2, max_len), device="meta"))
            need(out.device.type == "meta" and out.shape == (2, max_len, V), "TinyTransformer moved to another device")


def _fa_inputs(g, B, H_, Lq, Lk, d, dtype, layout, scale_kind):
    """q (B, H, Lq, d), k, v (B, H, Lk, d) of the given memory layout and score scale."""
    def make(L):
        if layout == "transposed":                       # (B, L, H, d) seen as (B, H, L, d)
            return torch.randn(B, L, H_, d, generator=g, dtype=torch.float64).transpose(1, 2)
        if layout == "dims":                             # the features strided: (B, H, d, L) transposed
            return torch.randn(B, H_, d, L, generator=g, dtype=torch.float64).transpose(-1, -2)
        if layout == "sliced":                           # every other feature of a wider tensor
            return torch.randn(B, H_, L, 2 * d, generator=g, dtype=torch.float64)[..., ::2]
        return torch.randn(B, H_, L, d, generator=g, dtype=torch.float64)
    q, k, v = make(Lq), make(Lk), make(Lk)
    if scale_kind == "large":                            # scores around 1e3
        q, k = q * 8, k * 8
    elif scale_kind == "below":                          # every score far below 0
        q, k = q.abs() + 10, -(k.abs() + 10)
    return tuple(t.to(dtype) for t in (q, k, v))


def _fa_check(f, spec, q, k, v, causal, what, extreme=False):
    saved = [t.clone() for t in (q, k, v)]
    out, lse = f(q, k, v)
    want_out, want_lse = spec.attention_reference(q, k, v, causal)
    half = q.dtype == torch.float16
    loose = 10 if extreme else 1                         # scores near 1e3 carry float32's rounding of 1e3
    need(isinstance(out, torch.Tensor) and out.shape == q.shape and out.dtype == q.dtype,
         f"{what}: out {getattr(out, 'shape', None)} {getattr(out, 'dtype', None)}")
    need(lse.shape == q.shape[:-1] and lse.dtype == torch.float32, f"{what}: lse {lse.shape} {lse.dtype}")
    need(same(out, want_out, atol=(2e-3 if half else 1e-4) * loose, rtol=1e-4, dtype=False),
         f"{what}: out differs from attention in float64 by {maxdiff(out, want_out):.2e}")
    need(same(lse, want_lse, atol=1e-3 if half else 1e-4, rtol=1e-6, dtype=False),
         f"{what}: lse differs from the log-sum-exp in float64 by {maxdiff(lse, want_lse):.2e}")
    need(all(torch.equal(a, b) for a, b in zip((q, k, v), saved)), f"{what}: modified q, k or v")


def _fa_bytes(f, spec, ns, q, k, v, skipping, what, exact_kv=True):
    with count_bytes(Q=q, K=k, V=v) as c:
        f(q, k, v)
    want = spec.minimum_bytes(q, k, v, ns["BLOCK_M"], ns["BLOCK_N"], skipping)
    need(c.reads["Q"] == want["reads"]["Q"], f"{what}: read {c.reads['Q']} bytes of Q, not {want['reads']['Q']} "
         "(Q once)")
    for name in ("K", "V"):
        ok = c.reads[name] == want["reads"][name] if exact_kv else c.reads[name] <= want["reads"][name]
        need(ok, f"{what}: read {c.reads[name]} bytes of {name}, not {'' if exact_kv else 'at most '}"
                 f"{want['reads'][name]} (once per block of queries{', the blocks on or below the diagonal' if skipping else ''})")
    total = sum(want["writes"].values())
    need(c.writes["other"] == total and c.writes["Q"] == c.writes["K"] == c.writes["V"] == 0,
         f"{what}: wrote {c.writes} bytes, not O and the log-sum-exp once ({total})")
    need(c.reads["other"] == 0, f"{what}: read {c.reads['other']} bytes of O or the log-sum-exp")


def _fa_structure(ns, name):
    kernel = ns[name]
    need(hasattr(kernel, "fn") and callable(getattr(kernel, "__getitem__", None)), f"{name} is not a @triton.jit kernel")
    for const, allowed in (("BLOCK_M", (16, 32, 64, 128)), ("BLOCK_N", (16, 32, 64, 128)), ("NUM_WARPS", (1, 2, 4, 8)),
                           ("NUM_STAGES", (1, 2, 3, 4))):
        need(ns.get(const) in allowed, f"{const} = {ns.get(const)} is not one of {allowed}")


def _fa_cases(ns, g, quick, causal_only):
    BM, BN = ns["BLOCK_M"], ns["BLOCK_N"]
    cases = [  # B, H, Lq, Lk, d, causal, dtype, layout, scale_kind
        (1, 2, 70, 45, 16, False, torch.float32, "plain", "normal"),
        (2, 1, 37, 90, 32, True, torch.float32, "plain", "normal"),
        (1, 1, 1, 1, 16, False, torch.float32, "plain", "normal"),
        (1, 1, 1, 1, 16, True, torch.float32, "plain", "normal"),
        (1, 1, 2 * BM + 1, BN + 3, 16, True, torch.float32, "plain", "normal"),        # Lq > Lk
        (1, 1, BM - 1, 2 * BN + 5, 16, True, torch.float32, "transposed", "normal"),   # Lq < Lk
        (1, 2, BM + 1, 2 * BN + 1, 16, False, torch.float32, "transposed", "normal"),
        (2, 1, 33, BN + 7, 16, True, torch.float32, "dims", "normal"),
        (1, 1, 40, BN + 20, 16, False, torch.float32, "plain", "large"),
        (1, 1, BM + 5, BN + 20, 16, True, torch.float32, "plain", "below"),
        (1, 2, 24, 40, 16, False, torch.float16, "plain", "normal"),
        (1, 1, 2 * BM + 3, 2 * BM + 3, 32, True, torch.float16, "sliced", "normal"),   # Lq = Lk, several blocks
    ]
    if not quick:
        for _ in range(4):
            Lq = max(1, int(torch.randint(1, 3 * BM + 2, (1,), generator=g)))
            Lk = max(1, int(torch.randint(1, 3 * BN + 2, (1,), generator=g)))
            d = [16, 32, 64][int(torch.randint(0, 3, (1,), generator=g))]
            cases.append((1, int(torch.randint(1, 3, (1,), generator=g)), Lq, Lk, d, bool(torch.randint(0, 2, (1,), generator=g)),
                          [torch.float32, torch.float16][int(torch.randint(0, 2, (1,), generator=g))],
                          ["plain", "transposed", "dims"][int(torch.randint(0, 3, (1,), generator=g))],
                          ["normal", "large", "below"][int(torch.randint(0, 3, (1,), generator=g))]))
    return [c for c in cases if c[5] or not causal_only]


def cmp_attention_kernel(ns, spec, g, quick=False):
    _fa_structure(ns, "attention_kernel")
    f = ns["flash_attention"]
    for B, H_, Lq, Lk, d, causal, dtype, layout, scale_kind in _fa_cases(ns, g, quick, causal_only=False):
        q, k, v = _fa_inputs(g, B, H_, Lq, Lk, d, dtype, layout, scale_kind)
        _fa_check(lambda q, k, v, causal=causal: f(q, k, v, causal=causal), spec, q, k, v, causal,
                  f"flash_attention {(B, H_, Lq, Lk, d)} causal={causal} {dtype} {layout} {scale_kind}",
                  extreme=scale_kind != "normal")
    BM, BN = ns["BLOCK_M"], ns["BLOCK_N"]
    for (B, H_, Lq, Lk, d), dtype in (((1, 2, 2 * BM + 3, 2 * BN + 5, 16), torch.float16),
                                      ((2, 1, BM - 3, 3 * BN, 32), torch.float32)):
        q, k, v = _fa_inputs(g, B, H_, Lq, Lk, d, dtype, "plain", "normal")
        for causal in (False, True):
            _fa_bytes(lambda q, k, v, causal=causal: f(q, k, v, causal=causal), spec, ns, q, k, v, False,
                      f"flash_attention {(B, H_, Lq, Lk, d)} causal={causal} {dtype}", exact_kv=not causal)


def cmp_causal_attention_kernel(ns, spec, g, quick=False):
    _fa_structure(ns, "causal_attention_kernel")
    f = ns["flash_attention_causal"]
    for B, H_, Lq, Lk, d, _causal, dtype, layout, scale_kind in _fa_cases(ns, g, quick, causal_only=True):
        q, k, v = _fa_inputs(g, B, H_, Lq, Lk, d, dtype, layout, scale_kind)
        _fa_check(f, spec, q, k, v, True, f"flash_attention_causal {(B, H_, Lq, Lk, d)} {dtype} {layout} {scale_kind}",
                  extreme=scale_kind != "normal")
    BM, BN = ns["BLOCK_M"], ns["BLOCK_N"]
    for (B, H_, Lq, Lk, d), dtype in (((1, 2, 3 * BM + 3, 3 * BM + 3, 16), torch.float16),
                                      ((1, 1, 2 * BM + 1, BN + 2, 16), torch.float32),
                                      ((1, 1, BM + 2, 4 * BM + 1, 32), torch.float32)):
        q, k, v = _fa_inputs(g, B, H_, Lq, Lk, d, dtype, "plain", "normal")
        _fa_bytes(f, spec, ns, q, k, v, True, f"flash_attention_causal {(B, H_, Lq, Lk, d)} {dtype}", exact_kv=False)


COMPARATORS = {
    "sinusoidal_encoding": cmp_sinusoidal, "rope": cmp_rope, "alibi_bias": cmp_alibi,
    "scaled_dot_product_attention": cmp_sdpa, "causal_mask": cmp_causal, "MultiHeadAttention": cmp_mha,
    "blockwise_attention": cmp_blockwise, "LayerNorm": cmp_layernorm, "FeedForward": cmp_feedforward,
    "TransformerBlock": cmp_block, "TinyTransformer": cmp_tiny,
    "attention_kernel": cmp_attention_kernel, "causal_attention_kernel": cmp_causal_attention_kernel,
}
GRADED = {
    "positional_encoding": ["sinusoidal_encoding", "rope", "alibi_bias"],
    "attention": ["scaled_dot_product_attention", "causal_mask", "MultiHeadAttention", "blockwise_attention"],
    "residual": ["LayerNorm", "FeedForward", "TransformerBlock"],
    "transformer": ["TinyTransformer"],
    "fused_attention": ["attention_kernel", "causal_attention_kernel"],
}


USES_PASTED = {"residual": {"MultiHeadAttention": ["TransformerBlock"]}}


def targets(assignment, entry):
    """The graded parts an entry is about: the graded cells it replaces, or, where it replaces only pasted cells,
    the assignment's graded parts that use them."""
    own = [gid for gid in entry["cells"] if gid in GRADED[assignment]]
    if own:
        return own
    users = [p for gid in entry["cells"] for p in USES_PASTED.get(assignment, {}).get(gid, GRADED[assignment])]
    return list(dict.fromkeys(users))


# ----------------------------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------------------------

def check_entry(assignment, entry, seed):
    """(ok, detail) for the entry's claim."""
    spec = spec_module(assignment)
    ns = build_namespace(assignment, entry)
    kind = entry["kind"]
    if kind in ("correct", "slow"):
        for part in targets(assignment, entry):
            g = torch.Generator().manual_seed(seed)
            try:
                COMPARATORS[part](ns, spec, g, quick=(kind == "slow"))
            except Mismatch as e:
                return False, f"{part}: {e}"
            except Exception as e:  # noqa: BLE001
                return False, f"{part}: {type(e).__name__}: {e}"[:300]
        if kind == "correct":
            return True, f"agrees with the spec on {', '.join(targets(assignment, entry))}"
    caught = None
    if kind == "mistake" and os.environ.get("CHECK_COMPARATORS", "1") == "1":
        caught = False
        for part in targets(assignment, entry):
            g = torch.Generator().manual_seed(seed)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    COMPARATORS[part](build_namespace(assignment, entry), spec, g)
            except Exception:  # noqa: BLE001
                caught = True
    env = ns
    env["spec"], env["H"] = spec, H
    env.pop("shown", None)
    torch.manual_seed(seed)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(entry["shown_by"], f"<shown_by {entry['name']}>", "exec"), env)
    except Exception as e:  # noqa: BLE001
        return False, f"shown_by raised {type(e).__name__}: {e}"[:300]
    shown = env.get("shown")
    detail = env.get("detail", "")
    if shown is not True:
        return False, f"shown_by did not show it ({detail})"
    if caught is not None:
        detail = f"[random comparator {'also catches it' if caught else 'misses it'}] {detail}"
    return True, str(detail)


def main(argv):
    chosen = [a for a in argv if a in ASSIGNMENTS] or ASSIGNMENTS
    pattern = argv[argv.index("-k") + 1] if "-k" in argv else None
    visible = "--no-visible" not in argv
    corpus = int(argv[argv.index("--round") + 1]) if "--round" in argv else 1     # round N's corpus: roundN/
    folder = os.path.join(HERE, f"round{corpus}")
    if corpus != 1 and any(f.startswith("spec_") for f in os.listdir(folder)):
        sys.path.insert(0, folder)          # a round that wrote its own specs is checked against them
    rows, failures = [], 0
    for assignment in chosen:
        if "--train" in argv and assignment == "transformer":
            print(f"[{assignment}] the spec's visible training run: {run_training_cell(assignment)}")
        if visible:
            spec_failed = run_visible_checks(assignment)
            print(f"[{assignment}] the spec passes the notebook's visible checks: "
                  f"{'yes' if not spec_failed else 'NO: ' + ', '.join(spec_failed)}")
            failures += bool(spec_failed)
        mod = importlib.import_module(assignment if corpus == 1 else f"round{corpus}.{assignment}")
        names = set()
        valid_ids = set(solution_ids(assignment))
        for i, entry in enumerate(mod.ENTRIES):
            problems = []
            if entry["name"] in names:
                problems.append("duplicate name")
            names.add(entry["name"])
            if entry["kind"] not in ("mistake", "correct", "slow"):
                problems.append("bad kind")
            bad_ids = [gid for gid in entry["cells"] if gid not in valid_ids]
            bad_ids += [x["before"] for x in entry.get("extra_cells", []) if x["before"] not in valid_ids]
            if bad_ids:
                problems.append(f"unknown grade_ids {bad_ids}")
            if pattern and pattern not in entry["name"]:
                continue
            start = time.perf_counter()
            if problems:
                ok, detail = False, "; ".join(problems)
            else:
                try:
                    ok, detail = check_entry(assignment, entry, seed=1000 + i)
                except Exception as e:  # noqa: BLE001
                    ok, detail = False, f"could not build: {type(e).__name__}: {e}"[:300]
                    traceback.print_exc()
            vis = run_visible_checks(assignment, entry) if visible else None
            if "--train" in argv and assignment == "transformer":
                detail = f"[visible training run: {run_training_cell(assignment, entry)}] {detail}"
            seconds = time.perf_counter() - start
            rows.append((assignment, entry["name"], entry["kind"], ",".join(targets(assignment, entry)), ok, vis,
                         seconds, detail))
            failures += not ok
            status = "ok  " if ok else "FAIL"
            vis_text = "-" if vis is None else ("pass" if not vis else "fail:" + ",".join(vis))
            print(f"{status} {assignment:<19} {entry['kind']:<7} {entry['name']:<44} visible={vis_text:<28} "
                  f"{seconds:5.1f}s  {detail[:110]}", flush=True)
    print()
    print("=" * 100)
    print(f"{'assignment':<20}{'kind':<9}{'entries':>8}{'claims hold':>13}{'pass visible checks':>22}")
    for assignment in chosen:
        for kind in ("mistake", "correct", "slow"):
            sel = [r for r in rows if r[0] == assignment and r[2] == kind]
            if not sel:
                continue
            held = sum(r[4] for r in sel)
            vis = sum(1 for r in sel if r[5] is not None and not r[5])
            print(f"{assignment:<20}{kind:<9}{len(sel):>8}{held:>13}{vis:>22}")
    total = len(rows)
    print(f"{'TOTAL':<29}{total:>8}{total - failures if failures <= total else 0:>13}")
    by_part = {}
    for r in rows:
        for p in r[3].split(","):
            by_part.setdefault(p, {"mistake": 0, "correct": 0, "slow": 0})[r[2]] += 1
    print("\nby part:", ", ".join(f"{p} {c['mistake']}m/{c['correct']}c/{c['slow']}s" for p, c in by_part.items()))
    if failures:
        print(f"\n{failures} FAILED")
        for r in rows:
            if not r[4]:
                print(f"  {r[0]}/{r[1]}: {r[7]}")
    else:
        print("\nall entries are what they claim")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
