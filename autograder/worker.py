"""The sandboxed worker: executes a learner's code cells, then answers calls with plain data.

Runs inside the sandbox as `python worker.py CELLS.json`, talking on its original stdin/stdout
(moved to private descriptors at start; the learner's own prints go to /dev/null).  It imports
nothing of the course but `protocol`.  It computes; it never judges: every comparison, tolerance
and score is decided by the trusted side with what this process sends back.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

# The library versions of what learners implement; the worker counts calls to them.
WATCHED = {
    "torch.nn.functional.scaled_dot_product_attention": ("torch.nn.functional", "scaled_dot_product_attention"),
    "torch.nn.functional.multi_head_attention_forward": ("torch.nn.functional", "multi_head_attention_forward"),
    "torch.nn.functional.layer_norm": ("torch.nn.functional", "layer_norm"),
    "torch.layer_norm": ("torch", "layer_norm"),
    "torch.nn.MultiheadAttention": ("torch.nn.MultiheadAttention", "forward"),
    "torch.nn.LayerNorm": ("torch.nn.LayerNorm", "forward"),
    "torch.nn.TransformerEncoderLayer": ("torch.nn.TransformerEncoderLayer", "forward"),
}
forbidden_calls: dict[str, int] = {}


def _watch_library():
    import importlib

    import torch

    for label, (owner_path, attr) in WATCHED.items():
        mod_path, _, cls_name = owner_path.rpartition(".")
        try:
            owner = importlib.import_module(owner_path)
        except ImportError:
            owner = getattr(importlib.import_module(mod_path), cls_name)
        original = getattr(owner, attr)

        def wrapper(*a, __original=original, __label=label, **k):
            forbidden_calls[__label] = forbidden_calls.get(__label, 0) + 1
            return __original(*a, **k)

        setattr(owner, attr, wrapper)
    torch.set_num_threads(int(os.environ.get("GRADER_THREADS", "1")))


DEVICE = os.environ.get("GRADER_DEVICE", "cpu")
_synchronize = None
_device_memory = None


def _bind_device():
    """Take the device-wide synchronise and the allocator's statistics from torch's C extension before
    learner code runs, so that patching torch.cuda cannot replace them."""
    global _synchronize, _device_memory
    if DEVICE != "cpu":
        import torch

        torch.cuda.init()
        index = torch.device(DEVICE).index
        index = torch.cuda.current_device() if index is None else index
        sync, reset, stats = torch._C._cuda_synchronize, torch._C._cuda_resetPeakMemoryStats, torch._C._cuda_memoryStats

        def device_memory(reset_peak: bool) -> dict:
            if reset_peak:
                reset(index)
            allocated = stats(index)["allocated_bytes"]["all"]
            return {"current": allocated["current"], "peak": allocated["peak"]}

        _synchronize, _device_memory = sync, device_memory


def _flush_l2():
    """Write a buffer larger than the GPU's L2 cache, so no timed run starts with warm caches."""
    import torch

    buf = torch.empty(256 << 20, dtype=torch.uint8, device=DEVICE)
    buf.zero_()
    _synchronize()
    del buf


def _error(e: BaseException) -> dict:
    tb = traceback.extract_tb(e.__traceback__)
    learner_frames = [f for f in tb if f.filename.startswith("<cell")]
    lines = traceback.format_list(learner_frames[-3:])
    return {"type": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__],
            "message": str(e)[:2000], "traceback": "".join(lines)[-4000:]}


class Worker:
    def __init__(self, ns: dict):
        self.ns = ns
        self.handles: dict[int, object] = {}
        self.prepared = None
        self.last_outputs = []

    def obj(self, handle):
        if handle not in self.handles:
            raise KeyError(f"unknown handle {handle}")
        return self.handles[handle]

    def describe(self, obj) -> dict:
        import torch

        info = {"type": type(obj).__name__, "mro": [c.__name__ for c in type(obj).__mro__],
                "module": isinstance(obj, torch.nn.Module)}
        if info["module"]:
            info["params"] = {n: list(p.shape) for n, p in obj.named_parameters()}
            info["children"] = {n: {"type": type(m).__name__, "mro": [c.__name__ for c in type(m).__mro__]}
                                for n, m in obj.named_modules() if n}
            info["linear_bias"] = {n: m.bias is not None for n, m in obj.named_modules()
                                   if isinstance(m, torch.nn.Linear)}
        return info

    def op_names(self, req):
        import inspect

        out = {}
        for name in req["names"]:
            v = self.ns.get(name)
            out[name] = ("missing" if name not in self.ns else "class" if inspect.isclass(v)
                         else "function" if callable(v) else "other")
        return out

    def op_call(self, req):
        fn = self.ns.get(req["name"])
        if fn is None:
            raise NameError(f"name '{req['name']}' is not defined")
        return fn(*req.get("args", []), **req.get("kwargs", {}))

    def op_new(self, req):
        obj = self.op_call(req)
        handle = len(self.handles) + 1
        self.handles[handle] = obj
        return {"handle": handle, "info": self.describe(obj)}

    def op_method(self, req):
        return getattr(self.obj(req["handle"]), req["method"])(*req.get("args", []), **req.get("kwargs", {}))

    def op_state_dict(self, req):
        return {k: v for k, v in self.obj(req["handle"]).state_dict().items()}

    def op_load_state_dict(self, req):
        self.obj(req["handle"]).load_state_dict(req["state"], strict=True)
        return None

    def op_train(self, req):
        """Train a model handle with plain SGD-style steps on batches the grader sends."""
        import torch

        model = self.obj(req["handle"])
        opt = torch.optim.AdamW(model.parameters(), lr=req["lr"], weight_decay=0.0)
        x, y = req["x"], req["y"]
        steps, bs = req["steps"], req["batch_size"]
        g = torch.Generator().manual_seed(req["seed"])
        losses = []
        model.train()
        for _ in range(steps):
            idx = torch.randint(0, x.shape[0], (bs,), generator=g)
            logits = model(x[idx])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[idx].reshape(-1),
                                                     ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
        model.eval()
        return losses

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
                "param_grads": {n: p.grad for n, p in obj.named_parameters() if p.grad is not None}}

    def op_prepare(self, req):
        """Make fresh inputs for the next timed `run` from a seed the grader chose (not timed)."""
        import torch

        g = torch.Generator().manual_seed(req["seed"])
        self.prepared = [(self._inputs(req["inputs"], g), req.get("kwargs", {})) for _ in range(req.get("count", 1))]
        if DEVICE != "cpu":
            _flush_l2()
        return None

    @staticmethod
    def _inputs(specs, g):
        import torch

        args = []
        for spec in specs:
            dtype = getattr(torch, spec.get("dtype", "float32"))
            if spec["kind"] == "randn":
                t = torch.randn(spec["shape"], generator=g, dtype=torch.float32).to(dtype)
            elif spec["kind"] == "tokens":
                t = torch.randint(0, spec["high"], spec["shape"], generator=g)
            elif spec["kind"] == "causal":
                n = spec["shape"][-1]
                t = torch.ones(n, n, dtype=torch.bool).tril()
            else:
                raise ValueError(f"unknown input kind {spec['kind']}")
            args.append(t.to(DEVICE))
        return args

    def op_run(self, req):
        """Run the prepared call once; the grader's clock measures this request from outside."""
        import torch

        prepared, self.prepared = self.prepared, None
        target = self.obj(req["handle"]) if req.get("handle") else self.ns.get(req["name"])
        outputs = []
        for args, kwargs in prepared:
            out = target(*args, **kwargs)
            if isinstance(out, (tuple, list)):
                out = out[0]
            if type(out) is not torch.Tensor:
                raise TypeError(f"returned a {type(out).__name__}, not a plain torch.Tensor")
            outputs.append(out)
        if DEVICE != "cpu":
            _synchronize()
        self.last_outputs = outputs
        return None

    def op_checksum(self, req):
        """A random projection of the last timed output: proves the work was done (not timed)."""
        import torch

        g = torch.Generator().manual_seed(req["seed"])
        sums = []
        for out in self.last_outputs:
            out = out.detach().to("cpu", torch.float64)
            proj = torch.randn(out.shape, generator=g, dtype=torch.float64)
            sums.append({"checksum": float((out * proj).sum()), "scale": float(out.abs().sum()),
                         "shape": list(out.shape), "finite": bool(torch.isfinite(out).all())})
        return sums

    def op_device_memory(self, req):
        """Bytes the GPU's caching allocator holds for tensors: now, and at most since the last reset."""
        if _device_memory is None:
            raise RuntimeError("no GPU in this worker")
        return _device_memory(bool(req.get("reset")))

    def op_seed(self, req):
        import torch

        torch.manual_seed(req["seed"])
        return None

    def handle(self, req):
        import torch

        op = getattr(self, "op_" + str(req.get("op")), None)
        if op is None:
            return {"error": {"type": "ProtocolError", "mro": [], "message": "unknown op", "traceback": ""}}
        forbidden_calls.clear()
        args = req.get("args", [])
        t0 = time.perf_counter()
        try:
            with torch.no_grad() if req.get("no_grad", True) and req["op"] not in ("train", "backward") else _null():
                value = op(req)
            resp = {"ok": value}
        except BaseException as e:  # noqa: BLE001 - the learner's exception is data here
            resp = {"error": _error(e)}
        resp["worker_seconds"] = time.perf_counter() - t0
        resp["forbidden"] = dict(forbidden_calls)
        if req.get("return_args"):
            resp["args_after"] = list(args)
        return resp


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def main():
    from protocol import ProtocolError, read_message, write_message

    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)

    _watch_library()
    _bind_device()
    with open(sys.argv[1]) as f:
        cells = json.load(f)
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    cell_errors = []
    for cell in cells:
        write_message(proto_out, {"loading": cell["id"]})
        try:
            exec(compile(cell["source"], f"<cell {cell['id']}>", "exec"), ns)
        except BaseException as e:  # noqa: BLE001 - SystemExit, KeyboardInterrupt too: record and go on
            cell_errors.append({"cell": cell["id"], **_error(e)})
    worker = Worker(ns)
    write_message(proto_out, {"ready": True, "cell_errors": cell_errors, "forbidden": dict(forbidden_calls)})
    while True:
        try:
            req = read_message(proto_in)
        except (EOFError, ProtocolError):
            return
        resp = worker.handle(req)
        try:
            write_message(proto_out, resp)
        except TypeError as e:
            write_message(proto_out, {"error": {"type": "TypeError", "mro": ["TypeError"],
                                                "message": f"returned a value the grader cannot read: {e}",
                                                "traceback": ""},
                                      "worker_seconds": resp.get("worker_seconds", 0.0), "forbidden": {}})


if __name__ == "__main__":
    main()
