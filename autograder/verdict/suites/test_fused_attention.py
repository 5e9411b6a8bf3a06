"""Hidden suite: fused_attention (attention_kernel, causal_attention_kernel: FlashAttention's forward pass in Triton).

The learner's kernels are data. The trusted side reads them from the notebook (triton_kernels.read: their
`@triton.jit` functions and number constants, and only the Triton subset the course runs); the course's launcher runs
them in Triton's interpreter in the learner's worker, which holds nothing else (WORKER_CELLS) and where the course's
instrument counts every byte they move (autograder.inside.kernels); a worker per kernel, holding the kernels alone,
compiles it for sm_80 and sm_90. Oracle: softmax attention in float64; the plain computation at the inputs' precision
sets the tolerance (checks.close). Limits of its own: KERNEL_CALL_S a call, COMPILE_S a kernel's compiling.
"""
import dataclasses
import math
import os
import time

import pytest
import torch

from autograder.inside.calls import fresh, strided
from autograder.verdict import known, measure
from autograder.verdict.learner import WALL_PER_CPU, Learner, LearnerError, WorkerDied

from . import families
from . import triton_kernels as tk
from .checks import NOT_IMPLEMENTED, Diagnosis, allowed_error, check, close, max_error
from .contract import Call, Draw, Expected, Part, Promises, drawn_calls, expected_of, run_learner, scores_slack
from .library import ATTENTION_OPS
from .oracles import plain_attention

# The known mistakes, run here on a failed check's inputs (course code), run in Triton's interpreter too.
os.environ.setdefault("TRITON_INTERPRET", "1")

A = "fused_attention"
LIBRARY = r"(?i)(attention|multihead|multi_head|transformer)"
REFUSED_OPS = ATTENTION_OPS
# What the learner's worker needs: Triton (its language and triton.jit; autograder.verdict.policy denies the rest),
# its interpreter, and the course's byte counter in place before the kernels are defined.
ALLOWED_MODULES = ("triton",)
WORKER_ENV = {"TRITON_INTERPRET": "1"}
WORKER_INSTRUMENTS = ("kernels.count_bytes",)
# No WORKER_PRELOAD of Triton: its language defines some functions (tl.max, tl.sum) as kernels when it is imported,
# interpreted or compiled as TRITON_INTERPRET says then, so it is imported after the worker's environment is set.
SETUP = ("setup", "launchers")          # the course's cells the worker runs: the imports and the launcher

# The graded parts: the course's launcher (the contract's name) of each kernel (the learner's solution cell).
KERNELS = {"flash_attention": "attention_kernel", "flash_attention_causal": "causal_attention_kernel"}
PARAMS = ["Q", "K", "V", "O", "LSE", *(f"stride_{t}{a}" for t, n in zip("qkvo", "mnnm")
                                        for a in ("b", "h", n, "d")), "H", "Lq", "Lk", "scale",
          "HEAD_DIM", "BLOCK_M", "BLOCK_N", "CAUSAL"]
SIGNATURES = {"attention_kernel": PARAMS, "causal_attention_kernel": PARAMS[:-1]}
BOUNDS = {"BLOCK_M": (16, 32, 64, 128), "BLOCK_N": (16, 32, 64, 128), "NUM_WARPS": (1, 2, 4, 8),
          "NUM_STAGES": (1, 2, 3, 4)}
# The learner's choices (the reference's until a learner's notebook is read): the drawn sizes follow the blocks, so
# that every grading holds calls with several blocks of queries and of keys and ragged tails.
CHOSEN = {"BLOCK_M": 64, "BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 2}
COMPILE_HEAD_DIM = 128        # the head size the kernels are compiled at (the largest of common models)


def worker_cells(cells: list[dict]) -> list[dict]:
    """The cells the learner's worker runs: the course's imports and launcher, then the learner's kernels and
    constants that pass the Triton reading, and nothing else of the notebook."""
    return [c for c in cells if c["id"] in SETUP] + tk.read(cells).cells()


WORKER_CELLS = worker_cells


# -- the reading of the learner's kernels ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def kernels(grading) -> tk.Reading:
    """The learner's kernels and constants, read once per grading from the cells the grader was sent; their blocks,
    when within the bounds, size the contract's calls (CHOSEN: this process grades one learner)."""
    r = tk.read(grading.cells)
    for name, params in SIGNATURES.items():
        k = r.kernels.get(name)
        if k is not None and k.params != params:
            k.problems.append(f"its parameters are ({', '.join(k.params)}); the course's launcher passes "
                              f"({', '.join(params)}), in this order")
    if not block_problems(r):
        CHOSEN.update({n: int(r.values[n]) for n in BOUNDS})   # type: ignore[call-overload]  # checked ints
    return r


def block_problems(r: tk.Reading) -> list[str]:
    return [f"{n} = {r.values.get(n, 'not set')!r}: one of {', '.join(map(str, BOUNDS[n]))}, a number in the cell"
            for n in BOUNDS if r.values.get(n) not in BOUNDS[n] or isinstance(r.values.get(n), bool)]


def runnable(r: tk.Reading, kernel: str):
    """The kernel `kernel` of the learner (in the reading `r`) is one the grader runs: a Diagnosis that says why not."""
    k = r.kernels.get(kernel)
    check(k is not None, f"no @triton.jit function {kernel} in your notebook")
    assert k is not None
    if k.unanswered:
        raise Diagnosis(NOT_IMPLEMENTED, unanswered=True)
    check(not k.problems, f"your {kernel} is not the Triton the grader runs, so it was not run: "
                          f"{'; '.join(k.problems[:4])}")
    blocks = block_problems(r)
    check(not blocks, f"your block sizes are not within the bounds: {'; '.join(blocks)}")


# One call of a kernel in the learner's worker (the interpreter) may use this much CPU time (the kernel's count for
# its sandbox: a loaded machine does not shorten it). The reference's largest call here takes under 1 s; a call past
# it is a loop that never ends (or a kernel hundreds of times too slow), and every later call of the same part fails
# at once with the same words (they share its name, and autograder.verdict.learner remembers a call that hung): a hung
# kernel costs its part one limit and a restart of the worker, and leaves the other part its time.
KERNEL_CALL_S = 10.0


@pytest.fixture(autouse=True)
def kernel_read(request):
    """Before each test of a part: its kernel passed the reading (else the test says why it could not run it); its
    calls are held to KERNEL_CALL_S."""
    cell = request.node.get_closest_marker("cell")
    if cell is not None and "learner" in request.fixturenames:
        learner = request.getfixturevalue("learner")
        learner.call_timeout = min(learner.call_timeout, KERNEL_CALL_S)
        request.getfixturevalue("compiling")           # started beside the tests of values
        runnable(request.getfixturevalue("kernels"), cell.args[0].removesuffix("_tests"))
    yield


# -- the contract: calls drawn over everything the notebook allows, sized by the learner's blocks --------------------
def _qkv(d: Draw, B: int, H: int, Lq: int, Lk: int, dim: int, dtype=torch.float32):
    """q, k, v with scores of order 1, around 1e3, or all far below 0 in some rows."""
    kind = d.choice(("plain", "plain", "large", "negative"))
    scale = d.uniform(10.0, 30.0) if kind == "large" else 1.0
    q, k = d.randn(B, H, Lq, dim, scale=scale), d.randn(B, H, Lk, dim, scale=scale)
    if kind == "negative":
        k = d.randn(B, H, Lk, dim, scale=0.1, shift=1.0)
        rows = d.randn(B, H, Lq, 1, dtype=torch.float64) > 0
        q = torch.where(rows, d.randn(B, H, Lq, dim, scale=2.0, shift=-30.0), q)
    v = d.randn(B, H, Lk, dim, scale=d.choice((1.0, 10.0)))
    return (q.to(dtype), k.to(dtype), v.to(dtype)), kind


def _sizes(d: Draw) -> tuple[int, int, int, int, int]:
    bm, bn = CHOSEN["BLOCK_M"], CHOSEN["BLOCK_N"]
    B, H = d.choice(((1, 1), (1, 2), (2, 1)))
    Lq = d.size(1, 2 * bm + bm // 2)
    Lk = Lq if d.chance(0.3) else d.size(1, 2 * bn + bn // 2)
    return B, H, Lq, Lk, d.choice((16, 16, 32))


def draw_forward(d: Draw) -> Call:
    B, H, Lq, Lk, dim = _sizes(d)
    args, kind = _qkv(d, B, H, Lq, Lk, dim)
    causal = d.chance(0.5)
    return Call("flash_attention", args, {"causal": causal} if causal or d.chance(0.5) else {},
                about="" if kind == "plain" else f"scores {kind}")


def draw_causal(d: Draw) -> Call:
    B, H, Lq, Lk, dim = _sizes(d)
    args, kind = _qkv(d, B, H, Lq, Lk, dim)
    return Call("flash_attention_causal", args, about="" if kind == "plain" else f"scores {kind}")


def causal_bool(Lq: int, Lk: int) -> torch.Tensor:
    """Key j is visible to query i when j <= i, counted from the start of both (is_causal)."""
    return torch.arange(Lk)[None, :] <= torch.arange(Lq)[:, None]


def attention_pair(q, k, v, causal: bool, dtype=None):
    """(out, lse) of softmax attention computed plainly in `dtype` (the inputs' own by default): out in the inputs'
    dtype, the log-sum-exp in float32 (float64 when computed in float64)."""
    dtype = dtype or q.dtype
    q, k, v = (t.to(dtype) for t in (q, k, v))
    mask = causal_bool(q.shape[-2], k.shape[-2]) if causal else None
    out = plain_attention(q, k, v, mask)[0]
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)
    return out, lse if dtype == torch.float64 else lse.float()


def _causal(c: Call) -> bool:
    return c.part == "flash_attention_causal" or bool(c.kwargs.get("causal"))


def _truth(c: Call):
    q, k, v = c.args[:3]
    return attention_pair(q, k, v, _causal(c), torch.float64)


def _plain(c: Call):
    """A plain computation at the precision the notebook asks for: float32 inside for float16 inputs, the output in
    their dtype."""
    q, k, v = c.args[:3]
    if q.dtype in LOW:
        out, lse = attention_pair(q, k, v, _causal(c), torch.float32)
        return out.to(q.dtype), lse
    return attention_pair(q, k, v, _causal(c))


def _oracle(causal: bool):
    def f(q, k, v, **kwargs):
        out, lse = attention_pair(q, k, v, causal or bool(kwargs.get("causal")), torch.float64)
        return out.to(q.dtype), lse.float()
    return f


# What the course's answer is, for every call (the launcher's outputs: out in q's dtype, lse in float32).
ORACLE = {"flash_attention": _oracle(False), "flash_attention_causal": _oracle(True)}
# float16 only: Triton 3.9's interpreter computes tl.dot of bfloat16 operands wrong (it multiplies their bits as
# integers), so no kernel can be graded on bfloat16 there; compiling for sm_80 and sm_90 does not depend on the dtype.
LOW = (torch.float16,)


def edges(part: str):
    """One query and one key; a ragged tail whose last keys raise the running max; scores all far below 0; and, causal,
    Lq > Lk and Lq < Lk."""
    def calls(d: Draw) -> list[Call]:
        bm, bn = CHOSEN["BLOCK_M"], CHOSEN["BLOCK_N"]
        kw = {"causal": True} if part == "flash_attention" else {}
        q, k, v = d.randn(1, 1, bm + 3, 16), d.randn(1, 1, 2 * bn + 5, 16), d.randn(1, 1, 2 * bn + 5, 16)
        k[..., -bn:, :] *= 4.0
        low = (d.randn(1, 2, 9, 16, scale=2.0, shift=-30.0), d.randn(1, 2, bn + 2, 16, scale=0.1, shift=1.0),
               d.randn(1, 2, bn + 2, 16))
        out = [Call(part, (d.randn(1, 1, 1, 16), d.randn(1, 1, 1, 16), d.randn(1, 1, 1, 16)), about="one key"),
               Call(part, (q, k, v), about="ragged blocks, the last keys raising the running max"),
               Call(part, low, about="every score far below 0")]
        if kw or part == "flash_attention_causal":
            out += [Call(part, (d.randn(1, 1, bm + 5, 16), d.randn(1, 1, 7, 16), d.randn(1, 1, 7, 16)), kw,
                         about="causal, Lq > Lk"),
                    Call(part, (d.randn(1, 1, 5, 16), d.randn(1, 1, bn + 9, 16), d.randn(1, 1, bn + 9, 16)), kw,
                         about="causal, Lq < Lk")]
        return out
    return calls


def long_flat(d: Draw) -> list[Call]:
    """4,000 keys of nearly equal scores: the running sum grows to about 4,000, where float16 counts in steps of 2 to
    4, so a sum kept in float16 puts the log-sum-exp off by 1e-3 (float32 inside: 1e-6). The causal kernel is not held
    to it here: its long sequence would take the interpreter seconds a grading does not have."""
    return [Call("flash_attention", (d.randn(1, 1, 16, 16, scale=0.01), d.randn(1, 1, 4000, 16),
                                     d.randn(1, 1, 4000, 16)), about="4,000 keys of nearly equal scores")]


CONTRACT = {
    "flash_attention": Part(draw_forward, _truth, _plain, slack=scores_slack,
                            promises=Promises(low_precision=LOW, differentiable=False, meta=False,
                                              edges=edges("flash_attention"), precise=long_flat)),
    "flash_attention_causal": Part(draw_causal, _truth, _plain, slack=scores_slack,
                                   promises=Promises(low_precision=LOW, differentiable=False, meta=False,
                                                     edges=edges("flash_attention_causal"))),
}
DRAWN = 2                       # calls drawn per part and grading, besides the edges (each runs the kernel twice in
#                                 the interpreter, about 0.1-0.5 s a run: the grading of a notebook stays within 60 s)


# -- naming a cause: the known mistakes of a kernel, run here on the call that failed ------------------------------
# The known mistakes' runs stop after this much CPU time of this process in a grading (the interpreter runs here, on
# one core: CPU time, not the wall clock, so that a busy machine names the same causes as a quiet one).
EXPLAIN_CPU_S = 6.0
_SPENT = [0.0]
_NAMESPACES: dict = {}


def _bug_namespace(bug):
    if bug.name not in _NAMESPACES:
        _NAMESPACES[bug.name] = known.namespace(A, bug)
    return _NAMESPACES[bug.name]


def _apart(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest difference of two answers, equal values (infinities included) apart by 0."""
    same = a.double() == b.double()
    return max_error(torch.where(same, 0.0, a.double()), torch.where(same, 0.0, b.double()))


def explain(part: str, call: Call, got: dict, expected, family: str | None = None) -> tuple[list[str], list[str]]:
    """(causes, ruled out): the known mistakes of the part's kernel whose answer to `call` (laid out as `family` lays
    out its arguments: "strided") is the learner's `got` (and wrong), and those whose answer is not."""
    kernel = KERNELS[part]
    matched: list[str] = []
    ruled_out: list[str] = []
    mine = got.get("first")
    if not isinstance(mine, (tuple, list)) or _SPENT[0] > EXPLAIN_CPU_S:
        return matched, ruled_out
    started = time.process_time()
    truths = expected.truth if isinstance(expected.truth, (tuple, list)) else (None, None)
    layout = strided if family == "strided" else (lambda a: a)
    for bug in (b for b in known.load_cached(A) if isinstance(b, known.Bug) and kernel in b.cells and b.cause):
        if time.process_time() - started + _SPENT[0] > EXPLAIN_CPU_S:
            break
        ns = _bug_namespace(bug)
        if ns is None:
            continue
        try:
            with torch.no_grad():
                theirs = ns[part](*(layout(fresh(a, False)) for a in call.args), **call.kwargs)
        except Exception:  # noqa: BLE001 - a mistake that raises here explains no answer
            ruled_out.append(bug.cause)
            continue
        same, wrong = True, False
        for have, their, truth in zip(mine, theirs, truths):
            if not (isinstance(have, torch.Tensor) and isinstance(truth, torch.Tensor)) or have.shape != truth.shape:
                continue
            allowed = allowed_error(truth, have.dtype) + expected.slack
            mine_wrong, theirs_wrong = max_error(have, truth) > allowed, max_error(their, truth) > allowed
            wrong = wrong or theirs_wrong
            if mine_wrong or theirs_wrong:
                apart = _apart(have, their)
                same = same and (apart <= allowed or apart <= 0.1 * max_error(have, truth))
        (matched if same and wrong else ruled_out).append(bug.cause)
    _SPENT[0] += time.process_time() - started
    return matched, ruled_out


class KernelSide(families.Learner):
    """The learner's kernels through the worker, as the families check them, with causes named by `explain` on the
    arguments laid out as the family laid them out."""

    family: str | None = None

    def run(self, call: Call, family: str | None = None):
        self.family = family
        return super().run(call, family)

    def explain(self, call: Call, got, expected):
        return explain(call.part, call, got, expected, self.family)


def drawn(grading, learner, part: str, label: int, count: int = DRAWN):
    """The learner's part meets its contract on the edges and on `count` calls drawn for this grading."""
    for call in drawn_calls(CONTRACT[part], grading.seeded(label).initial_seed(), count):
        expected = expected_of(CONTRACT[part], call, ORACLE)
        got = run_learner(learner, call)
        wrong = expected.judge(call, got)
        if wrong:
            raise Diagnosis(f"on an input drawn for this grading, {call}: {wrong}", *explain(part, call, got, expected))


def family(grading, learner, part: str, name: str, label: int):
    """The family `name` of checks (autograder.verdict.suites.families) on one edge of its own (below) and CALLS drawn
    calls: a rectangular ragged call for strides (Q's and K's strides differ), the running max's edge for float16."""
    contract = dataclasses.replace(CONTRACT[part], promises=dataclasses.replace(
        CONTRACT[part].promises, edges=lambda d: [FAMILY_EDGES[name](part, d)]))
    families.check(KernelSide(learner, contract), ORACLE, contract, name, grading.seeded(label).initial_seed())


def _rectangular(part: str, d: Draw) -> Call:
    """Lq != Lk, over two sequences of two heads: (batch, head) taken as one index times the head's stride lands on
    the right rows only where the batch's stride is the heads' times their number (a contiguous tensor)."""
    bm, bn = CHOSEN["BLOCK_M"], CHOSEN["BLOCK_N"]
    return Call(part, (d.randn(2, 2, bm + 5, 16), d.randn(2, 2, bn + 11, 16), d.randn(2, 2, bn + 11, 16)),
                about="Lq != Lk, B = 2")


def _rising(part: str, d: Draw) -> Call:
    return edges(part)(d)[1]


FAMILY_EDGES = {"strided": _rectangular, "low precision": _rising}


def pair(result, what: str):
    check(isinstance(result, (tuple, list)) and len(result) == 2,
          f"{what} should return (out, lse), but it returned {type(result).__name__}")
    return result


def right(learner, part: str, q, k, v, what: str, **kwargs):
    """The learner's (out, lse) on q, k, v against attention in float64, at q's precision (one run)."""
    call = Call(part, (q, k, v), kwargs)
    try:
        got = pair(learner.fn(part)(q, k, v, **kwargs), what)
    except LearnerError as e:
        raise Diagnosis(f"{what}: it raised {e}") from None
    truth, plain = _truth(call), _plain(call)
    expected = Expected({"first": tuple(truth)}, truth, plain, scores_slack(call))
    for i, name in enumerate(("the output", "the log-sum-exp")):
        try:
            close(got[i], truth[i], f"{name} of {what}", baseline=plain[i], dtype=q.dtype if i == 0 else torch.float32,
                  atol=None if not expected.slack else allowed_error(truth[i], plain[i].dtype) + expected.slack)
        except Diagnosis as e:
            raise Diagnosis(str(e), *explain(part, call, {"first": tuple(got)}, expected)) from None


def qkv(grading, B, H, Lq, Lk, dim, seed, dtype=torch.float32, scale=1.0):
    g = grading.seeded(seed)
    return tuple((torch.randn(B, H, L, dim, generator=g, dtype=torch.float64) * scale).to(dtype)
                 for L in (Lq, Lk, Lk))


# -- the compiled kernels: a worker that holds the kernels alone compiles them for sm_80 and sm_90 -----------------
# It starts with the grading's first test and compiles beside the interpreter's runs of the kernels (the tests that
# read the compile facts come last, so that they rarely wait). The rule on registers (triton_kernels.spill_budget):
# spills within a few words, or a quarter of the K and V bytes a thread loads per key block. A kernel over it is
# compared with the course's own kernel compiled at the same blocks, warps and stages, in a worker of course code: the
# diagnosis says whether the blocks are too large (the course's kernel spills there too) or the kernel keeps more in
# registers than it needs (the course's does not).
# One kernel compiled for both targets, in CPU seconds of its worker's sandbox (the kernel's count, not the wall time a
# loaded machine stretches it to): the course's kernel takes about 3 s of CPU at any blocks that fit their warps, and
# up to 16 s at blocks too large for their warps (the compiler spills thousands of bytes). Past this, the kernel's
# compile check fails (a tl.static_range of 10^6 steps unrolls into code the compiler does not finish). The wall
# time is bounded by the learner's deadline and COMPILE_WALL_S, for a machine so loaded that CPU time barely moves.
COMPILE_S = 45.0
COMPILE_WALL_S = 300.0


def compile_request(kernel: str) -> dict:
    """The request for the compile facts of `kernel` (autograder.inside.kernels.facts): at COMPILE_HEAD_DIM in float16,
    specialised as Triton's launcher specialises contiguous inputs (unit strides as constants, pointers and the other
    strides divisible by 16), with the learner's blocks, warps and stages."""
    params = SIGNATURES[kernel]
    signature = {p: "i32" for p in params}
    signature.update({p: "*fp16" for p in ("Q", "K", "V", "O")}, LSE="*fp32", scale="fp32")
    consts = {"HEAD_DIM": COMPILE_HEAD_DIM, "BLOCK_M": CHOSEN["BLOCK_M"], "BLOCK_N": CHOSEN["BLOCK_N"],
              **({"CAUSAL": False} if "CAUSAL" in params else {}), **{f"stride_{t}d": 1 for t in "qkvo"}}
    signature.update({c: "constexpr" for c in consts})
    divisible = ["Q", "K", "V", "O", "LSE", *(p for p in params if p.startswith("stride") and not p.endswith("d"))]
    return {"op": "kernel_facts", "kernel": kernel, "signature": signature, "constexprs": consts,
            "divisible": divisible, "targets": [list(t) for t in tk.TARGETS], "num_warps": CHOSEN["NUM_WARPS"],
            "num_stages": CHOSEN["NUM_STAGES"]}


def _spilling(facts) -> bool:
    return isinstance(facts, dict) and bool(tk.over_budget(facts, CHOSEN["BLOCK_N"], COMPILE_HEAD_DIM,
                                                           CHOSEN["NUM_WARPS"]))


def _compile(grading, cells: list[dict], kernel: str, role: str):
    """The compile facts of `kernel`, or a Diagnosis, from a sandboxed worker that holds `cells` alone (the course's
    imports and the kernels), within COMPILE_S of CPU and the learner's deadline."""
    worker = Learner(cells, role=role, refuse=REFUSED_OPS if role == "learner" else None,
                     library=LIBRARY if role == "learner" else None, grading=grading)
    worker.modules, worker.instruments = ALLOWED_MODULES, ("kernels.ready",)
    limit = measure.CpuLimit(worker, COMPILE_S)
    try:
        worker.start()
        with limit:
            # the request's own limit in CPU (past COMPILE_S) and on the wall clock (COMPILE_WALL_S)
            return worker.request(compile_request(kernel), timeout=COMPILE_WALL_S / WALL_PER_CPU,
                                  what=f"compiling {kernel}")["ok"]
    except LearnerError as e:
        return Diagnosis(f"compiling your {kernel} failed: {e}")
    except WorkerDied as e:
        if limit.hit:
            return Diagnosis(f"compiling your {kernel} for sm_80 and sm_90 used more than {COMPILE_S:g} s of CPU (the "
                             "course's kernel takes about 3 s): blocks too large for their warps make the compiler "
                             "spill registers, slowly, and a loop unrolled many times (tl.static_range) makes more "
                             "code than it can finish")
        return Diagnosis(f"compiling your {kernel} failed: {e}")
    finally:
        worker.close()


@pytest.fixture(scope="session")
def compiling(grading, kernels) -> dict:
    """Compile each of the learner's kernels that passed the reading, each in a thread and a sandboxed worker of its
    own (the course's imports and the kernels, nothing else), within COMPILE_S and the learner's deadline: the
    compiling is the learner's, and a kernel that does not finish leaves the other its own time. A kernel that spills
    over the budget is followed by the course's kernel at the same blocks, in a worker of course code, for the
    diagnosis. {"threads": kernel -> its thread, "results": what each found, "deadline"}."""
    import threading

    from autograder.notebooks import learner_cells, read, source_notebook

    r = kernels
    names = [] if block_problems(r) else [k for k in SIGNATURES if k in r.kernels and not r.kernels[k].problems]
    cells = [c for c in grading.cells if c["id"] == "setup"] + r.cells()
    results: dict = {}

    def work(kernel: str):
        try:
            results[kernel] = _compile(grading, cells, kernel, "learner")
            if _spilling(results[kernel]):
                course = learner_cells(read(source_notebook(A)))
                course = [c for c in course if c["id"] == "setup"] + tk.read(course).cells()
                theirs = _compile(grading, course, kernel, "reference")
                if isinstance(theirs, dict):
                    results[f"course {kernel}"] = theirs
        except Exception as e:  # noqa: BLE001 - a grader fault, raised by the test that waits for it
            results.setdefault("fault", e)

    threads = {k: threading.Thread(target=work, args=(k,), name=f"compiling {k}", daemon=True) for k in names}
    for thread in threads.values():
        thread.start()
    return {"threads": threads, "results": results, "deadline": grading.deadline}


def compiled(compiling: dict, kernel: str) -> dict:
    """The compile facts of the learner's `kernel` for each target, when its compiling thread has them."""
    thread = compiling["threads"].get(kernel)
    if thread is not None:
        thread.join(timeout=max(0.0, compiling["deadline"] - time.time()))
    results = compiling["results"]
    if "fault" in results:
        raise results["fault"]
    got = results.get(kernel)
    if isinstance(got, Diagnosis):
        raise got
    check(got is not None, f"compiling your {kernel} did not finish within the time for grading your notebook")
    return got


def compiles(compiling: dict, kernel: str):
    facts = compiled(compiling, kernel)
    check(isinstance(facts, dict), f"compiling your {kernel} gave the grader nothing it can read")
    bm, bn, warps, stages = (CHOSEN[n] for n in BOUNDS)
    problems = tk.compile_problems(facts, bm, bn, COMPILE_HEAD_DIM, warps)[:4]
    if problems and _spilling(facts):      # what the spills say, after at most four problems of the targets
        theirs = compiling["results"].get(f"course {kernel}")
        over = tk.over_budget(theirs, bn, COMPILE_HEAD_DIM, warps) if isinstance(theirs, dict) else None
        if over:
            problems.append(f"the course's own kernel spills at these sizes too ({', '.join(over)}): the blocks are "
                            f"too large for {warps} warps; choose smaller blocks or more warps")
        elif over == []:
            problems.append("the course's own kernel compiled at these sizes stays within the budget: yours keeps "
                            "more in registers than it needs (a tile held across the loop, a copy of a block)")
    check(not problems, f"your {kernel} with BLOCK_M = {bm}, BLOCK_N = {bn}, NUM_WARPS = {warps}, NUM_STAGES = "
                        f"{stages}, compiled at d = {COMPILE_HEAD_DIM} in float16: {'; '.join(problems)}")


# -- bytes moved: the course's instrument of the interpreter, in the learner's worker ------------------------------
def bytes_moved(learner, part: str, q, k, v, causal: bool, what: str, **kwargs):
    """One call counted by the course's instrument: its outputs right, and no more bytes than its tiling needs."""
    try:
        res = learner.request({"op": "counted_call", "name": part, "args": [q, k, v], "kwargs": kwargs},
                              what=f"{part}()")["ok"]          # the part's name: a call that hung before fails at once
    except LearnerError as e:
        raise Diagnosis(f"{what}: it raised {e}") from None
    check(isinstance(res, dict) and isinstance(res.get("bytes"), dict), f"{what}: the grader could not count it")
    out = pair(res.get("out"), what)
    truth, plain = attention_pair(q, k, v, causal, torch.float64), attention_pair(q, k, v, causal)
    close(out[0], truth[0], f"the output of {what}", baseline=plain[0], dtype=q.dtype)
    close(out[1], truth[1], f"the log-sum-exp of {what}", baseline=plain[1], dtype=torch.float32)
    B, H, Lq, dim = q.shape
    minimum = tk.minimum_bytes(B, H, Lq, k.shape[2], dim, q.element_size(), CHOSEN["BLOCK_M"], CHOSEN["BLOCK_N"],
                               causal)
    counted = res["bytes"]
    check(int(counted.get("launches", 0)) == 1, f"{what}: the kernel was launched {counted.get('launches')} times")
    problems = tk.bytes_problems(counted, minimum)
    check(not problems, f"{what}, with BLOCK_M = {CHOSEN['BLOCK_M']} and BLOCK_N = {CHOSEN['BLOCK_N']}: "
                        f"{'; '.join(problems[:3])}")


# -- attention_kernel ------------------------------------------------------------------------------------------------
KERNEL = pytest.mark.cell("attention_kernel_tests")


@KERNEL
def test_attention_kernel_is_triton(learner, kernels):
    """is a @triton.jit kernel of the course's signature, in Triton alone, with block sizes within the bounds"""
    runnable(kernels, "attention_kernel")


@KERNEL
@pytest.mark.weight(2)
def test_attention_kernel_values(grading, learner):
    """out and the log-sum-exp equal softmax attention (ragged blocks, Lq != Lk, batch and heads)"""
    bm, bn = CHOSEN["BLOCK_M"], CHOSEN["BLOCK_N"]
    q, k, v = qkv(grading, 2, 2, bm + 7, 2 * bn + 5, 32, seed=1)
    k[..., -bn:, :] *= 3.0                                      # the last keys raise the running max
    right(learner, "flash_attention", q, k, v, f"attention with Lq = {bm + 7}, Lk = {2 * bn + 5}, d = 32")


@KERNEL
def test_attention_kernel_causal(grading, learner):
    """causal=True: key j visible to query i when j <= i, with Lq = Lk, Lq > Lk and Lq < Lk"""
    bm, bn = CHOSEN["BLOCK_M"], CHOSEN["BLOCK_N"]
    for Lq, Lk in ((bm + bn + 3, bm + bn + 3), (2 * bm + 1, bn // 2 + 1), (5, 2 * bn + 3)):
        q, k, v = qkv(grading, 1, 1, Lq, Lk, 16, seed=2 + Lq)
        right(learner, "flash_attention", q, k, v, f"causal attention with Lq = {Lq}, Lk = {Lk}", causal=True)


@KERNEL
def test_attention_kernel_extreme_scores(grading, learner):
    """scores around 1e3 do not overflow, and rows whose every score is far below 0 do not underflow"""
    bn = CHOSEN["BLOCK_N"]
    q, k, v = qkv(grading, 1, 1, 9, 2 * bn + 1, 16, seed=3, scale=10.0)
    right(learner, "flash_attention", q, k, v, "attention with scores around 1e3")
    q, k, v = qkv(grading, 1, 1, 9, bn + 4, 16, seed=4)
    right(learner, "flash_attention", q - 30.0, k * 0.1 + 1.0, v, "attention with every score around -120")


@KERNEL
@pytest.mark.weight(2)
@pytest.mark.drawn
def test_attention_kernel_on_drawn_inputs(grading, learner):
    """on inputs drawn for this grading: sizes around the blocks, causal or not, extreme scores, the edges"""
    drawn(grading, learner, "flash_attention", 9031)


@KERNEL
@pytest.mark.family
def test_attention_kernel_strided(grading, learner):
    """arguments that are not contiguous in memory (views of transposed tensors): the kernel uses the strides"""
    family(grading, learner, "flash_attention", "strided", 7301)


@KERNEL
@pytest.mark.family
def test_attention_kernel_low_precision(grading, learner):
    """float16 arguments, answered in float16 (float32 inside the kernel)"""
    family(grading, learner, "flash_attention", "low precision", 7302)


@KERNEL
@pytest.mark.weight(2)
@pytest.mark.measured
def test_attention_kernel_bytes(grading, learner):
    """moves the fewest bytes its blocks allow: Q, O and the log-sum-exp once, K and V once per block of queries"""
    bm, bn = CHOSEN["BLOCK_M"], CHOSEN["BLOCK_N"]
    Lq, Lk = 2 * bm + bm // 2 + 1, 2 * bn + 3
    q, k, v = qkv(grading, 1, 2, Lq, Lk, 32, seed=5, dtype=torch.float16)
    bytes_moved(learner, "flash_attention", q, k, v, False, f"attention with Lq = {Lq}, Lk = {Lk} in float16")


# -- causal_attention_kernel -----------------------------------------------------------------------------------------
CAUSAL = pytest.mark.cell("causal_attention_kernel_tests")


@CAUSAL
def test_causal_attention_kernel_is_triton(learner, kernels):
    """is a @triton.jit kernel of the course's signature, in Triton alone"""
    runnable(kernels, "causal_attention_kernel")


@CAUSAL
@pytest.mark.weight(2)
def test_causal_attention_kernel_values(grading, learner):
    """equals causal attention with Lq = Lk, Lq > Lk and Lq < Lk, over several blocks"""
    bm, bn = CHOSEN["BLOCK_M"], CHOSEN["BLOCK_N"]
    for Lq, Lk in ((2 * max(bm, bn) + 3, 2 * max(bm, bn) + 3), (2 * bm + 1, bn + 2), (bm // 2 + 1, 2 * bn + 3)):
        q, k, v = qkv(grading, 1, 2, Lq, Lk, 16, seed=10 + Lq + Lk)
        right(learner, "flash_attention_causal", q, k, v, f"causal attention with Lq = {Lq}, Lk = {Lk}")


@CAUSAL
@pytest.mark.drawn
def test_causal_attention_kernel_on_drawn_inputs(grading, learner):
    """on inputs drawn for this grading: sizes around the blocks, extreme scores, float16, the edges"""
    drawn(grading, learner, "flash_attention_causal", 9032)
    family(grading, learner, "flash_attention_causal", "low precision", 7303)


@CAUSAL
@pytest.mark.family
def test_causal_attention_kernel_strided(grading, learner):
    """arguments that are not contiguous in memory (views of transposed tensors): the kernel uses the strides"""
    family(grading, learner, "flash_attention_causal", "strided", 7304)


@CAUSAL
@pytest.mark.weight(2)
@pytest.mark.measured
def test_causal_attention_kernel_bytes(grading, learner):
    """reads K and V only in the blocks on or below the diagonal (and Q, O, the log-sum-exp once)"""
    L = 3 * max(CHOSEN["BLOCK_M"], CHOSEN["BLOCK_N"]) + 5
    q, k, v = qkv(grading, 1, 1, L, L, 32, seed=20, dtype=torch.float16)
    bytes_moved(learner, "flash_attention_causal", q, k, v, True, f"causal attention with Lq = Lk = {L} in float16")


# -- the compile facts of both kernels, last: the compiling runs beside the tests above ----------------------------
@KERNEL
@pytest.mark.weight(2)
@pytest.mark.measured
def test_attention_kernel_compiles(learner, compiling):
    """compiles for sm_80 and sm_90 at d = 128 in float16: its shared memory fits, no register spills, no tile larger
    than a block"""
    compiles(compiling, "attention_kernel")


@CAUSAL
@pytest.mark.measured
def test_causal_attention_kernel_compiles(learner, compiling):
    """compiles for sm_80 and sm_90 at d = 128 in float16: its shared memory fits, no register spills"""
    compiles(compiling, "causal_attention_kernel")


# -- speed, on a GPU only: the learner's kernels compiled and timed against torch's FlashAttention ---------------------
# Timed only where the grading's device is a GPU (the `gpu` mark: elsewhere these tests are not collected, and the
# cell's other checks share their points). The learner's kernels run compiled, in a worker of their own (the course's
# imports and launcher, the kernels: WORKER_CELLS, without the interpreter); the other side is torch's own
# F.scaled_dot_product_attention with its flash backend, in a worker of course code. One short and one long sequence,
# each in one of the two half-precision dtypes.
GPU_SPEED_CALLS = [((4, 16, 1024, 64), "float16"), ((1, 8, 16384, 64), "bfloat16")]     # (B, H, L, d), dtype
# The rule: at most this many times the flash backend's time. Not yet calibrated on a GPU (none was lent so far):
# bench/fused_attention_speed.py, in `make bench` and `make gpu-check`, measures it on the reference, correct
# alternatives (16 x 16 blocks and one warp among them) and the mistakes only a measurement sees.
GPU_SPEED_FACTOR = 3.0
SDPA_FLASH = '''from torch.nn.attention import SDPBackend, sdpa_kernel


def sdpa_flash(q, k, v):
    """torch's own attention, its flash backend (FlashAttention-2) only."""
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def sdpa_flash_causal(q, k, v):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
'''
@pytest.fixture(scope="session")
def timed_kernels(grading):
    """(the learner's kernels compiled, torch's flash attention): two workers on the GPU, made on first use."""
    made: dict = {}

    def get() -> tuple[Learner, Learner]:
        if not made:
            mine = Learner(worker_cells(grading.cells), refuse=REFUSED_OPS, library=LIBRARY, grading=grading)
            mine.modules = ALLOWED_MODULES
            setup = [c for c in grading.cells if c["id"] == "setup"]
            theirs = Learner([*setup, {"id": "sdpa_flash", "source": SDPA_FLASH}], role="reference", grading=grading)
            made.update(mine=mine, theirs=theirs)
        return made["mine"], made["theirs"]

    yield get
    for w in made.values():
        w.close()


FLASH = {"flash_attention": "sdpa_flash", "flash_attention_causal": "sdpa_flash_causal"}
# A timed run's outputs are compared with the flash backend's (timing.same_outputs: each output projected on a random
# vector, within this share of the largest projection): two right kernels differ by an ulp or two of each output in
# float16, by about eight times more in bfloat16; a wrong one by the size of the output.
GPU_RTOL = {"float16": 1e-2, "bfloat16": 5e-2}


def where(call) -> str:
    (B, H, L, d), dtype = call
    return f"at B = {B}, H = {H}, L = {L}, d = {d} in {dtype}"


def gpu_ratios(mine: Learner, theirs: Learner, part: str, call) -> tuple[list[float], str | None]:
    """(the ratios the speed rule measured, the mismatch of a wrong output or None): the kernel of `part` in the worker
    `mine` timed against torch's flash backend in `theirs` at `call` (one of GPU_SPEED_CALLS), each side called once
    on the inputs before the clock (the first call compiles). A LearnerError of the learner's kernel is raised."""
    from autograder.verdict.timing import Target

    from .checks import speed_ratios

    (B, H, L, d), dtype = call
    inputs = [{"kind": "randn", "shape": [B, H, L, d], "dtype": dtype}] * 3
    ours, flash = Target(mine, part), Target(theirs, FLASH[part])
    flash.run(0, inputs, timeout=120.0)
    ours.run(0, inputs, timeout=120.0)
    return speed_ratios(ours, flash, inputs, factor=GPU_SPEED_FACTOR, rtol=GPU_RTOL[dtype])


def on_gpu_within(timed_kernels, part: str, what: str):
    """The learner's kernel `part` within GPU_SPEED_FACTOR of the flash backend at each of GPU_SPEED_CALLS (its
    outputs compared with the flash backend's on every timed run)."""
    mine, theirs = timed_kernels()
    for call in GPU_SPEED_CALLS:
        said = f"{what} {where(call)}"
        try:
            ratios, mismatch = gpu_ratios(mine, theirs, part, call)
        except LearnerError as e:
            raise Diagnosis(f"{said}: it raised {e}") from None
        check(mismatch is None, f"{said}: {mismatch}")
        check(min(ratios) <= GPU_SPEED_FACTOR,
              f"{said} takes {min(ratios):.1f}x the time of torch's FlashAttention-2 (F.scaled_dot_product_attention, "
              f"its flash backend) on the same inputs (allowed {GPU_SPEED_FACTOR:g}x)")


@KERNEL
@pytest.mark.gpu
@pytest.mark.weight(2)
@pytest.mark.measured
def test_attention_kernel_speed_on_a_gpu(learner, timed_kernels):
    """on a GPU only: within 3x the time of torch's FlashAttention-2 at L = 1024 (float16) and 16384 (bfloat16)"""
    on_gpu_within(timed_kernels, "flash_attention", "attention_kernel")


@CAUSAL
@pytest.mark.gpu
@pytest.mark.measured
def test_causal_attention_kernel_speed_on_a_gpu(learner, timed_kernels):
    """on a GPU only: within 3x the time of FlashAttention-2 with is_causal=True at L = 1024 and 16384"""
    on_gpu_within(timed_kernels, "flash_attention_causal", "causal_attention_kernel")
