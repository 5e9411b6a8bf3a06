"""Triton kernels as the course measures them, inside the sandbox: the global-memory bytes a kernel moves when Triton's
interpreter runs it (`count_bytes`), and what compiling it for NVIDIA targets makes of it (`facts`).

The counter wraps the interpreter's memory operations (`InterpreterBuilder.create_masked_load`, `create_masked_store`,
which `create_load`, `create_store` and the tensor descriptors' loads and stores go through, and the atomics) before
learner code runs: every element a kernel reads or writes, under its mask, is counted there whatever Python computed
its pointer, and attributed to the kernel argument whose memory holds it (elsewhere: outside every argument). The
counts live in this module's closure; the worker takes this module out of `sys.modules` before learner code runs.

This file is copied into the sandbox; it imports nothing of the course.
"""
from __future__ import annotations

import os
import re
import sys

_STATE: dict = {}


def ready() -> None:
    """Nothing to install: this module imported before learner code runs (a worker that only compiles kernels)."""


def count_bytes() -> None:
    """Wrap the interpreter's memory operations with the counter (once, before learner code runs)."""
    if _STATE:
        return
    import inspect

    import numpy as np
    from triton.runtime import interpreter as it

    state = _STATE
    state.update(reads={}, writes={}, launches=0, ranges=[])
    builder = it.InterpreterBuilder
    load, store, rmw, cas = (builder.create_masked_load, builder.create_masked_store, builder.create_atomic_rmw,
                             builder.create_atomic_cas)
    init_args = it.GridExecutor._init_args_hst

    def launched(self, args_dev, kwargs):
        """A launch: the memory of each tensor argument, by the kernel's parameter names."""
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        named = inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)
        ranges = []
        for name, value in named.items():
            if hasattr(value, "untyped_storage"):
                storage = value.untyped_storage()
                ranges.append((int(storage.data_ptr()), int(storage.data_ptr()) + int(storage.nbytes()), name))
        state["ranges"] = sorted(ranges)
        state["launches"] += 1
        return args_hst, kwargs_hst

    def tally(kind: str, ptrs, mask) -> None:
        addresses = np.asarray(ptrs.data).astype(np.uint64)
        if mask is not None:
            addresses = addresses[np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)]
        else:
            addresses = addresses.reshape(-1)
        if not addresses.size:
            return
        size = max(1, int(ptrs.get_element_ty().primitive_bitwidth) // 8)
        ranges = state["ranges"]
        where = np.full(addresses.shape, -1)
        if ranges:
            starts = np.array([r[0] for r in ranges], dtype=np.uint64)
            at = np.searchsorted(starts, addresses, side="right") - 1
            ends = np.array([r[1] for r in ranges], dtype=np.uint64)
            inside = (at >= 0) & (addresses + np.uint64(size) <= ends[np.maximum(at, 0)])
            where = np.where(inside, at, -1)
        counts = np.bincount(where + 1, minlength=len(ranges) + 1)
        table = state[kind]
        for i, n in enumerate(counts):
            if n:
                name = "elsewhere" if i == 0 else ranges[i - 1][2]
                table[name] = table.get(name, 0) + int(n) * size

    def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        tally("reads", ptrs, mask)
        return load(self, ptrs, mask, other, cache_policy, is_volatile)

    def masked_store(self, ptrs, value, mask, cache_policy):
        tally("writes", ptrs, mask)
        return store(self, ptrs, value, mask, cache_policy)

    def atomic_rmw(self, op, ptr, val, mask, sem, scope):
        tally("reads", ptr, mask)
        tally("writes", ptr, mask)
        return rmw(self, op, ptr, val, mask, sem, scope)

    def atomic_cas(self, ptr, cmp, val, sem, scope):
        tally("reads", ptr, None)
        tally("writes", ptr, None)
        return cas(self, ptr, cmp, val, sem, scope)

    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = atomic_rmw, atomic_cas
    it.GridExecutor._init_args_hst = launched


def counted() -> dict:
    """The bytes counted since the last call, by argument ({"reads": {name: bytes}, "writes": ..., "launches": n}),
    and a fresh count."""
    if not _STATE:
        raise RuntimeError("the byte counter is not installed in this worker")
    out = {"reads": dict(_STATE["reads"]), "writes": dict(_STATE["writes"]), "launches": _STATE["launches"]}
    _STATE.update(reads={}, writes={}, launches=0)
    return out


# -- compiling for NVIDIA targets ----------------------------------------------------------------------------------
_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_TILE = re.compile(r"tensor<((?:\d+x)+)[a-z]")


def _compile_logged(src, target, options):
    """triton.compile with ptxas's own report (`-v`: registers, stack frame, spills), which Triton prints."""
    import tempfile

    import triton

    triton.knobs.nvidia.dump_ptxas_log = True
    with tempfile.TemporaryFile() as log:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(log.fileno(), 1)
        try:
            kernel = triton.compile(src, target=target, options=options)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        log.seek(0)
        return kernel, log.read().decode("utf-8", "replace")


def facts(ns: dict, req: dict) -> dict:
    """The kernel `req["kernel"]` of `ns` compiled for each of `req["targets"]` ([backend, arch, warp size]) with the
    signature, constants and options of `req`, as plain data: {"sm_90": {"shared": bytes, "registers": n,
    "stack": bytes, "spill_stores": bytes, "spill_loads": bytes, "largest_tile": elements} or {"error": text}}."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    os.environ["TRITON_CACHE_DIR"] = os.path.join(os.environ.get("HOME") or "/tmp", "triton-cache")
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"         # never a kernel from a cache: this one, compiled here
    kernel = ns.get(str(req["kernel"]))
    if kernel is None or not hasattr(kernel, "arg_names"):
        raise NameError(f"no Triton kernel named {req['kernel']!r}")
    signature = {str(k): str(v) for k, v in req["signature"].items()}
    constants = {str(k): v for k, v in req.get("constexprs", {}).items()}
    attrs = {(kernel.arg_names.index(str(n)),): [["tt.divisibility", 16]] for n in req.get("divisible", [])
             if str(n) in kernel.arg_names}
    options = {"num_warps": int(req.get("num_warps", 4)), "num_stages": int(req.get("num_stages", 2))}
    out: dict = {}
    for backend, arch, warp in req["targets"]:
        name = f"sm_{int(arch)}"
        try:
            compiled, log = _compile_logged(ASTSource(kernel, signature, constexprs=constants, attrs=attrs),
                                            GPUTarget(str(backend), int(arch), int(warp)), options)
        except Exception as e:  # noqa: BLE001 - a kernel that does not compile: its error is the answer
            out[name] = {"error": f"{type(e).__name__}: {str(e).strip()[:1500]}"}
            continue
        registers, spills = _REGISTERS.search(log), _SPILLS.search(log)
        tiles = [_product(m) for m in _TILE.findall(compiled.asm.get("ttir", ""))]
        out[name] = {"shared": int(compiled.metadata.shared),
                     "registers": int(registers.group(1)) if registers else None,
                     "stack": int(spills.group(1)) if spills else None,
                     "spill_stores": int(spills.group(2)) if spills else None,
                     "spill_loads": int(spills.group(3)) if spills else None,
                     "largest_tile": max(tiles, default=1)}
    return out


def _product(dims: str) -> int:
    n = 1
    for d in dims.rstrip("x").split("x"):
        n *= int(d)
    return n
