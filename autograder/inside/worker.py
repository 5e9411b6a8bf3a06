"""The sandboxed worker: executes a learner's code cells, then answers calls with plain data.

Runs inside the sandbox as `python worker.py`, talking on its original stdin/stdout (moved to private
descriptors at start; the learner's own prints go to /dev/null).  It imports torch (and the modules named on
its command line: what a suite's drawing needs, `tracer` and torch.export), says it is waiting, and only
then receives the learner's cells, so a worker can be started before its learner is known.  It imports nothing
of the course but `protocol`, `parts` and `tracer`.  It computes; it never judges.  The learner's code shares
this interpreter and can change anything in it, this file included, so the trusted side believes
nothing this process says about itself: it uses only the outputs it gets back for inputs it chose,
and what the kernel measures from outside (autograder.sandbox.cgroups).
"""
from __future__ import annotations

import json
import linecache
import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICE = os.environ.get("GRADER_DEVICE", "cpu")
FLUSH_BYTES = 256 << 20       # written before each timed run on a GPU: more than its L2 cache
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _EXACT_HEAP = -1, -3, 128 << 10   # mallopt options; glibc's default threshold


def _cpu_synchronize() -> None:
    """On the CPU a call has ended when it returns: nothing to wait for."""


# On a GPU, bound by _bind_device before learner code runs.
_synchronize: Callable[[], None] = _cpu_synchronize
_device_memory: Callable[[bool], dict] | None = None
_release: Callable[[], None] | None = None
_flush_buffer: torch.Tensor | None = None


def _setup_torch():
    import torch

    torch.set_num_threads(int(os.environ.get("GRADER_THREADS", "1")))


def _bind_device():
    """On a GPU: start CUDA, make the buffer that flushes the L2 cache (so it is part of what the worker holds before
    learner code runs), and take the device-wide synchronise and the allocator's functions from torch's C extension
    before learner code runs. Learner code can still reset the allocator's statistics: the trusted side polls the
    driver from outside (autograder.verdict.learner)."""
    global _synchronize, _device_memory, _release, _flush_buffer
    if DEVICE != "cpu":
        import torch

        torch.cuda.init()
        index = torch.device(DEVICE).index
        index = torch.cuda.current_device() if index is None else index
        sync, reset, stats = torch._C._cuda_synchronize, torch._C._cuda_resetPeakMemoryStats, torch._C._cuda_memoryStats
        empty_cache = torch._C._cuda_emptyCache

        def device_memory(reset_peak: bool) -> dict:
            if reset_peak:
                reset(index)
            allocated = stats(index)["allocated_bytes"]["all"]
            return {"current": allocated["current"], "peak": allocated["peak"]}

        def release():
            import gc

            gc.collect()
            sync()
            empty_cache()

        _flush_buffer = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=DEVICE)
        sync()
        _synchronize, _device_memory, _release = sync, device_memory, release


def _flush_l2():
    """Write a buffer larger than the GPU's L2 cache, so no timed run starts with warm caches."""
    assert _flush_buffer is not None, "a GPU's flush buffer is made by _bind_device"
    _flush_buffer.zero_()
    _synchronize()


def _error(e: BaseException) -> dict:
    tb = traceback.extract_tb(e.__traceback__)
    learner_frames = [f for f in tb if f.filename.startswith("<cell")]
    lines = traceback.format_list(learner_frames[-3:])
    out = {"type": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__],
           "message": str(e)[:2000], "traceback": "".join(lines)[-4000:]}
    guard = _HELPERS.get("guard")
    what = getattr(e, "what", "") if guard is not None and type(e) is guard.RefusedError else ""
    if what:                                     # a library version of the exercise, by name
        out["refused"] = str(what)[:200]
    return out


def make_inputs(specs: list[dict], seed: int) -> list:
    """The inputs of one timed call, from a seed the grader drew for this request: made on the device itself (its own
    generator: the learner's and the reference's workers make the same inputs from the same seed)."""
    import torch

    where = {} if DEVICE == "cpu" else {"device": DEVICE}
    g = torch.Generator(**where).manual_seed(seed)
    args = []
    for spec in specs:
        dtype = getattr(torch, spec.get("dtype", "float32"))
        if spec["kind"] == "randn":
            t = torch.randn(spec["shape"], generator=g, dtype=torch.float32, **where).to(dtype)  # type: ignore[call-overload]
        elif spec["kind"] == "tokens":
            t = torch.randint(0, spec["high"], spec["shape"], generator=g, **where)  # type: ignore[call-overload]
        elif spec["kind"] == "causal":
            n = spec["shape"][-1]
            t = torch.ones(n, n, dtype=torch.bool, **where).tril()  # type: ignore[call-overload]
        else:
            raise ValueError(f"unknown input kind {spec['kind']}")
        args.append(t)
    return args


def project(out, seed: int) -> dict:
    """What a GPU run sends back of an output: its shape, and its last dimension projected on a random vector drawn
    from the request's seed (so a run's reply stays small however large its outputs; a wrong output projects to
    other numbers). Computed within the timed request, after the call."""
    import torch

    if out.dim() == 0:
        return {"shape": [], "projection": out.float()}
    g = torch.Generator(device=out.device).manual_seed(seed)
    r = torch.randn(out.shape[-1], generator=g, device=out.device, dtype=torch.float32)
    return {"shape": list(out.shape), "projection": out.float() @ r}


# The library versions of what the exercises ask for, at torch's dispatcher: in a learner's worker they fail when
# called, whatever route reached them (a reading of the source proves or flags the routes it sees; this is the second
# line). The suite names the operators it refuses (its REFUSED_OPS, sent with the cells); these are the default.
LIBRARY_OPS = ("scaled_dot_product_attention", "_scaled_dot_product_attention_math",
               "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
               "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
               "_native_multi_head_attention", "_transformer_encoder_layer_fwd", "layer_norm", "native_layer_norm",
               "group_norm", "native_group_norm", "instance_norm", "batch_norm", "native_batch_norm",
               "_native_batch_norm_legit", "rms_norm", "_fused_rms_norm")
COURSE = "--course"                        # a worker of course code: nothing refused
FROM_GRADER = 1 << 31                      # what the grader sends is read whole (a notebook's cells: any size)
KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CPU", "CUDA")


def refuse_library(ops) -> tuple[list, list[str]]:
    """Register, for each library op, a kernel that refuses to run: (the registrations, which the caller keeps alive,
    and the operators refused)."""
    import warnings

    import torch

    lib = torch.library.Library("aten", "IMPL")
    refused = []
    for op in ops:
        qualified = f"aten::{op}"
        try:
            torch._C._dispatch_find_schema_or_throw(qualified, "")
        except RuntimeError:
            continue

        def refuse(*args, _op=qualified, **kwargs):
            _helper("guard").refuse_library(_op)

        keys = [key for key in KEYS if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for key in keys:
                lib.impl(op, refuse, key)
        if keys:                                   # an operator with no kernel here (a GPU's own) needs no refusal
            refused.append(qualified)
    return [lib], refused


def undone(refused: list[str]) -> list[str]:
    """Of the refused operators, those torch no longer dispatches to this file's refusing kernel."""
    import torch

    here = os.path.basename(__file__)
    return [op for op in refused
            if not any(here in line and "(inactive)" not in line for line in torch._C._dispatch_dump(op).splitlines())]


MAX_GRAPHS = 256       # course parts' autograd graphs kept for a backward that may come
# This folder's own modules the worker uses, imported before learner code runs and then taken out of sys.modules, so
# that no import (the learner's is guarded anyway: autograder.inside.guard) finds the ones this process uses.
_HELPERS: dict = {}
HELPERS = ("calls", "parts", "protocol", "guard", "tracer", "kernels")


def _helper(name: str):
    """One of this folder's modules, as imported before learner code ran (tracer: imported when first asked for, when
    the worker was not told to import it ahead)."""
    if name not in _HELPERS:
        import importlib

        _HELPERS[name] = importlib.import_module(name)
    return _HELPERS[name]


class Worker:
    def __init__(self, ns: dict, send=None, receive=None, refused: list[str] | None = None):
        self.ns = ns
        self.refused = refused or []
        self.handles: dict[int, object] = {}
        self.send, self.receive = send, receive
        self.modules: dict[str, torch.nn.Module] = {}      # course parts built for `part` requests
        self.graphs: dict[int, tuple] = {}
        self.next_graph = 0

    # -- the parts a learner's part uses, from the course (autograder.inside.parts) --------------------
    def callback(self, msg: dict):
        """Ask the grader for a course part's result, in the middle of a request."""
        self.send({"callback": msg})
        reply = self.receive()
        if not isinstance(reply, dict) or "ok" not in reply:
            raise RuntimeError(str(reply.get("error", "the grader refused the call")) if isinstance(reply, dict)
                               else "the grader refused the call")
        return reply["ok"]

    def op_use_parts(self, req):
        """While the grader checks one part, the parts it uses are the course's (through `callback`)."""
        _HELPERS["parts"].install(self.ns, [str(n) for n in req.get("names", [])], self.callback)
        return None

    def op_part(self, req):
        """Compute a course part for a learner's stand-in: a function, or a module with the given state."""
        import torch

        name, state = req["name"], req.get("state") or {}
        args, kwargs, need = list(req.get("args", [])), dict(req.get("kwargs", {})), req.get("grad")
        flat = [(state, k) for k in state] + [(args, i) for i in range(len(args))] + [(kwargs, k) for k in kwargs]
        flat = [(box, key) for box, key in flat if isinstance(box[key], torch.Tensor)]
        device = _device_of(req)
        for box, key in flat:                 # computed where the stand-in's tensors were (a GPU run's stay there)
            box[key] = box[key].to(device)
        inputs = []
        for (box, key), wants in zip(flat, need or []):
            if wants:
                box[key] = box[key].detach().requires_grad_(True)
                inputs.append(box[key])
        with torch.enable_grad() if need else torch.no_grad():
            if state:
                key = json.dumps([name, req.get("ctor", []), req.get("ctor_kwargs", {})])
                if key not in self.modules:
                    self.modules[key] = self.ns[name](*req.get("ctor", []), **req.get("ctor_kwargs", {}))
                out = torch.func.functional_call(self.modules[key], state, tuple(args), kwargs)
            else:
                out = self.ns[name](*args, **kwargs)
        as_tuple = isinstance(out, tuple)
        outs = list(out) if as_tuple else [out]
        if not all(type(o) is torch.Tensor for o in outs):
            raise TypeError(f"the course's {name} returned something other than tensors")
        reply = {"outputs": [o.detach() for o in outs], "tuple": as_tuple}
        if inputs:
            self.next_graph += 1
            self.graphs[self.next_graph] = (inputs, outs, need)
            while len(self.graphs) > MAX_GRAPHS:
                self.graphs.pop(next(iter(self.graphs)))
            reply["grad_id"] = self.next_graph
        return reply

    def op_part_backward(self, req):
        import torch

        inputs, outs, need = self.graphs.pop(req["grad_id"])
        pairs = [(o, g.to(o.device)) for o, g in zip(outs, req["grads"]) if g is not None and o.requires_grad]
        got = (torch.autograd.grad([o for o, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True)
               if pairs else [])
        grads, it = [], iter(got)
        for wants in need:
            grads.append(next(it, None) if wants else None)
        return {"grads": grads}

    def obj(self, handle):
        if handle not in self.handles:
            raise KeyError(f"unknown handle {handle}")
        return self.handles[handle]

    def target(self, req):
        if req.get("handle"):
            return self.obj(req["handle"])
        fn = self.ns.get(req["name"])
        if fn is None:
            raise NameError(f"name '{req['name']}' is not defined")
        return fn

    def op_call(self, req):
        return self.target(req)(*req.get("args", []), **req.get("kwargs", {}))

    def op_call_twice(self, req):
        """Two calls, each on its own fresh copies of the arguments, the first with autograd off and the second with
        it on, and the arguments as each call left them (calls.call_twice)."""
        calls = _HELPERS["calls"]
        rows = int(req["last_rows"]) if req.get("last_rows") else None
        if req.get("family"):
            return calls.call_family(self.target(req), req.get("args", []), req.get("kwargs", {}), str(req["family"]),
                                     last_rows=rows)
        return calls.call_twice(self.target(req), req.get("args", []), req.get("kwargs", {}), last_rows=rows)

    def op_gradients(self, req):
        """The gradients of one call with respect to its floating arguments and the module's parameters
        (calls.gradients), in float64 when asked (a module is converted first)."""
        return _HELPERS["calls"].gradients(self.target(req), req.get("args", []), req.get("kwargs", {}),
                                          list(req.get("grads") or []))

    def op_new(self, req):
        obj = self.op_call(req)
        handle = len(self.handles) + 1
        self.handles[handle] = obj
        return {"handle": handle}

    def op_method(self, req):
        return getattr(self.obj(req["handle"]), req["method"])(*req.get("args", []), **req.get("kwargs", {}))

    def op_state_dict(self, req):
        return {k: v for k, v in self.obj(req["handle"]).state_dict().items()}

    def op_load_state_dict(self, req):
        self.obj(req["handle"]).load_state_dict(req["state"], strict=req.get("strict", True) is not False)
        return None

    def op_train(self, req):
        """Train a model handle with AdamW on batches of the data the grader sends."""
        import torch

        model = self.obj(req["handle"])
        opt = torch.optim.AdamW(model.parameters(), lr=req["lr"], weight_decay=0.0)
        x, y = req["x"], req["y"]
        g = torch.Generator().manual_seed(req["seed"])
        model.train()
        for _ in range(req["steps"]):
            idx = torch.randint(0, x.shape[0], (req["batch_size"],), generator=g)
            logits = model(x[idx])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[idx].reshape(-1),
                                                     ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        return None

    def op_backward(self, req):
        """Call a handle's forward, backpropagate the given output gradient, return input/param grads."""
        import torch

        obj = self.obj(req["handle"])
        args = [a.clone().requires_grad_(True) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                for a in req.get("args", [])]
        out = obj(*args, **req.get("kwargs", {}))
        obj.zero_grad(set_to_none=True)
        out.backward(req["grad"])
        return {"out": out, "input_grads": [a.grad if isinstance(a, torch.Tensor) else None for a in args],
                "param_grads": {n: p.grad for n, p in obj.named_parameters(remove_duplicate=False)
                                if p.grad is not None}}

    def op_run(self, req):
        """One timed run: make `count` calls on fresh inputs built here from the request's seed and return
        their outputs.  The grader's clock measures this whole request from outside."""
        import torch

        target = self.target(req)
        if DEVICE != "cpu" and isinstance(target, torch.nn.Module):
            target.to(DEVICE)                 # a module made for a GPU run computes there (parameters and buffers)
        outputs = []
        for i in range(req.get("count", 1)):
            out = target(*make_inputs(req["inputs"], req["seed"] + i), **req.get("kwargs", {}))
            if isinstance(out, (tuple, list)):
                out = out[0]
            if type(out) is not torch.Tensor:
                raise TypeError(f"returned a {type(out).__name__}, not a plain torch.Tensor")
            outputs.append(out)
        reply: list = [project(o, req["seed"] + i) for i, o in enumerate(outputs)] if req.get("project") else outputs
        if DEVICE != "cpu":
            _synchronize()
        return reply

    def op_graph(self, req):
        """The learner's module `name`, built with the graph module's example sizes, as a graph of plain data
        (tracer): for the feedback's drawing, never for a score."""
        return _helper("tracer").trace_named(self.ns, str(req["name"]))

    def op_counted_call(self, req):
        """One call, and the global-memory bytes the kernels it launched moved in Triton's interpreter, counted by the
        course's instrument (kernels.count_bytes, installed before learner code ran): {"out", "bytes"}."""
        kernels = _HELPERS["kernels"]
        kernels.counted()
        out = _HELPERS["calls"].detached(self.target(req)(*req.get("args", []), **req.get("kwargs", {})))
        return {"out": out, "bytes": kernels.counted()}

    def op_kernel_facts(self, req):
        """A Triton kernel of the cells compiled for NVIDIA targets, as plain data (kernels.facts)."""
        return _HELPERS["kernels"].facts(self.ns, req)

    def op_refused(self, req):
        """The refused operators whose refusal no longer holds (the trusted side asks before each test)."""
        return undone(self.refused)

    def op_echo(self, req):
        """The grader's check that a shared worker of course code still answers, and in turn."""
        return req.get("token")

    def op_forget(self, req):
        """Drop what earlier gradings left: module handles, course parts built, autograd graphs, stand-ins."""
        self.handles.clear()
        self.modules.clear()
        self.graphs.clear()
        _HELPERS["parts"].install(self.ns, [], self.callback)
        return None

    def op_flush(self, req):
        """Before a timed run on a GPU: cold L2 cache."""
        if DEVICE != "cpu":
            _flush_l2()
        return None

    def op_device_memory(self, req):
        """Bytes the GPU's caching allocator holds for tensors: now, and at most since the last reset."""
        if _device_memory is None:
            raise RuntimeError("no GPU in this worker")
        return _device_memory(bool(req.get("reset")))

    def op_release(self, req):
        """Before a memory measurement: give back what no tensor uses any more, the C heap's free pages to the kernel
        and, on a GPU, what the allocator caches to the driver (what the worker still holds afterwards counts against
        the measured call: autograder.verdict.timing). `exact`: until the next release, every tensor of more than
        128 KiB gets pages of its own, given back when it is freed, so that the peak is what the call holds at once,
        not how the heap happened to fragment; else the heap keeps freed memory for the next tensor again (the
        sandbox's MALLOC_ settings, autograder.sandbox.box)."""
        import ctypes
        import gc

        gc.collect()
        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.malloc_trim(0)
            for option, name in ((_M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_"),
                                 (_M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_")):
                libc.mallopt(option, _EXACT_HEAP if req.get("exact") else int(os.environ.get(name, _EXACT_HEAP)))
        except (OSError, AttributeError):       # not glibc: its heap keeps what it keeps
            pass
        if _release is not None:
            _release()
        return None

    def op_seed(self, req):
        import torch

        torch.manual_seed(req["seed"])
        return None

    def handle(self, req):
        import torch

        op = getattr(self, "op_" + str(req.get("op")), None)
        if op is None:
            return {"error": {"type": "ProtocolError", "mro": [], "message": "unknown op", "traceback": ""}}
        try:
            with torch.no_grad() if req.get("no_grad", True) and req["op"] not in (
                    "train", "backward", "part", "part_backward", "gradients") else _null():
                return {"ok": op(req)}
        except BaseException as e:  # noqa: BLE001 - the learner's exception is data here
            return {"error": _error(e)}


def _device_of(req):
    """The device a course part computes on: the one its stand-in's tensors were on, where this worker has it."""
    import torch

    wanted = str(req.get("device") or "cpu")
    if wanted == "meta":                  # no data: shapes and dtypes only, wherever the worker runs
        return torch.device("meta")
    return torch.device(wanted if DEVICE != "cpu" and wanted.startswith("cuda") else "cpu")


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def main():
    from protocol import ProtocolError, read_message, write_message

    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    _setup_torch()
    modules = [a for a in sys.argv[1:] if not a.startswith("-")]
    for name in modules:                 # imported ahead for a suite's drawing, which only adds to the feedback
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - in the grading log; the drawing that needs it says it could not be made
            traceback.print_exc()
    for name in ("calls", "parts", "guard"):
        _helper(name)
    if "tracer" in sys.modules:
        _helper("tracer")
    guard = _HELPERS["guard"]
    _bind_device()
    write_message(proto_out, {"waiting": True})
    try:
        request = read_message(proto_in, max_header=FROM_GRADER)
        cells = request["cells"]
        ops = LIBRARY_OPS if request.get("refuse") is None else tuple(str(o) for o in request["refuse"])
        # the policy compiled into the cells (None: the grader's own probe, run as it is)
        policy = guard.Policy(request["policy"]) if request.get("policy") is not None else None
        env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}      # the exercise's (its suite's)
        instruments = [str(i) for i in request.get("instruments") or ()]
        seal = str(request.get("seal") or "")
    except (EOFError, ProtocolError, KeyError, TypeError, ValueError, AttributeError):
        return

    def send(msg: dict):
        """A message to the grader, with the key it gave with the cells: learner code can write bytes into these pipes
        (a path under /proc/self/fd), but holds no key (a local of this function's, which no guarded code reaches)."""
        write_message(proto_out, {**msg, "seal": seal} if seal else msg)

    def receive():
        """A message of the grader's, which carries the key too: one without it came from learner code, and this
        process ends (the grader says the learner's code interfered with its messages)."""
        msg = read_message(proto_in, max_header=FROM_GRADER)
        if seal and (not isinstance(msg, dict) or msg.pop("seal", None) != seal):
            os._exit(70)
        return msg
    os.environ.update(env)
    if request.get("imports"):
        # the modules the learner's cells import (the grader chose them from its allow-list), imported before the
        # grader reads the memory this sandbox holds with no learner code run: a module's own memory is not theirs
        for name in request["imports"]:
            try:
                __import__(str(name))
            except Exception:  # noqa: BLE001 - the cell that imports it meets the same error, as the learner's
                pass
        send({"imported": True})
        try:
            if receive() != {"go": True}:
                return
        except (EOFError, ProtocolError):
            return
    for instrument in instruments:                 # the course's instruments, in place before learner code runs
        module, _, function = instrument.partition(".")
        if module in HELPERS:
            getattr(_helper(module), function)()
    kept, refused = refuse_library(ops) if COURSE not in sys.argv[1:] else ([], [])   # kept alive while it runs
    if policy is not None:
        policy.prepare()
    # The learner's cells run in a module of their own, which `import __main__` would give them (the policy refuses
    # it): nothing of this file's (the refusals, the buffers) is reachable from theirs by a name, and each cell is
    # compiled with the policy's guards (guard.compile_cell) before any of them runs.
    learner = guard.learner_module(policy)
    ns = learner.__dict__
    compiled = guard.compile_cells(cells, guarded=policy is not None)
    for name in HELPERS:
        sys.modules.pop(name, None)
    sys.modules["__main__"] = learner
    # Learner code may print to stderr: from here on it goes to /dev/null, what came before (import
    # errors of the worker itself) stays in the grading log.
    os.dup2(devnull, 2)
    cell_errors, skipped = [], []
    for cell, codes, error in compiled:
        send({"loading": cell["id"]})
        # the cell's source where inspect finds it (tracebacks show its lines; Triton's @triton.jit reads it)
        linecache.cache[f"<cell {cell['id']}>"] = (len(cell["source"]), None, cell["source"].splitlines(True),
                                                   f"<cell {cell['id']}>")
        try:
            if error is not None:
                raise error
            refusals: list = []
            try:
                guard.run_statements(codes, ns, refusals)
            finally:                                     # refused at the cell's top level: skipped
                skipped += [{"cell": cell["id"], "line": line, **_error(e)} for line, e in refusals]
        except BaseException as e:  # noqa: BLE001 - SystemExit, KeyboardInterrupt too: record and go on
            cell_errors.append({"cell": cell["id"], **_error(e)})
    worker = Worker(ns, send, receive, refused)
    send({"ready": True, "cell_errors": cell_errors, "skipped": skipped})
    while True:
        try:
            req = receive()
        except (EOFError, ProtocolError):
            return
        resp = worker.handle(req)
        try:
            send(resp)
        except TypeError as e:
            send({"error": {"type": "TypeError", "mro": ["TypeError"],
                            "message": f"returned a value the grader cannot read: {e}", "traceback": ""}})
        except MemoryError:
            del resp
            send({"error": {"type": "MemoryError", "mro": ["MemoryError"], "traceback": "",
                            "message": "returned a value too large to send to the grader within the memory limit"}})


if __name__ == "__main__":
    main()
