"""Plain-data messages between the trusted grader and the sandboxed worker.

One message is a frame: 4-byte header length, a JSON header, 8-byte payload length, and a
payload of tensors in the safetensors format (no pickle anywhere, so nothing the worker sends
can run code on the trusted side; what arrives is read and checked by safetensors itself).
Inside the header, a tensor is `{"$t": "<key>"}` naming a payload entry; tuples, lists, dicts
of str keys, numbers, strings, booleans and None pass as they are.  This file is copied into
the sandbox: it imports nothing of the course.
"""
from __future__ import annotations

import json
import os
import select
import struct
import time

MAX_HEADER = 1 << 20           # 1 MiB of JSON
MAX_PAYLOAD = 64 << 20         # 64 MiB of tensors (the trusted side reads with its own, smaller cap)


# The safetensors names of the dtypes `encode` writes itself; a tensor of another dtype goes through safetensors.
SAFETENSORS_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
                      "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


DEVICES = ("cpu", "cuda", "meta")         # the devices a message may name


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed message, or nothing in time."""


def _payload(tensors: dict) -> bytes:
    """Contiguous CPU tensors in the safetensors format, in their order (safetensors.torch.save sorts them, and first
    searches for tensors that share memory, which costs more than the writing for the few small tensors of a call)."""
    import torch

    dtypes = {k: SAFETENSORS_DTYPES.get(str(t.dtype).removeprefix("torch.")) for k, t in tensors.items()}
    if None in dtypes.values():
        from safetensors.torch import save

        return save({k: t.clone() for k, t in tensors.items()})
    header, chunks, offset = {}, [], 0
    for key, t in tensors.items():
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        header[key] = {"dtype": dtypes[key], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def encode(obj) -> bytes:
    import torch

    tensors: dict[str, torch.Tensor] = {}

    def enc(o):
        if isinstance(o, torch.Tensor) and o.device.type == "meta":      # no data: where and what it would be
            return {"$meta": {"shape": list(o.shape), "dtype": str(o.dtype).removeprefix("torch.")}}
        if isinstance(o, torch.Tensor):
            key = f"t{len(tensors)}"
            t = o.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            tensors[key] = t.contiguous()
            return {"$t": key}
        if isinstance(o, tuple):
            return {"$tuple": [enc(x) for x in o]}
        if isinstance(o, list):
            return [enc(x) for x in o]
        if isinstance(o, dict):
            if not all(isinstance(k, str) for k in o):
                raise TypeError("only dicts with string keys can be sent")
            return {"$dict": {k: enc(v) for k, v in o.items()}}
        if o is None or isinstance(o, (bool, int, float, str)):
            if isinstance(o, float) and o != o:
                return {"$float": "nan"}
            if isinstance(o, float) and o in (float("inf"), float("-inf")):
                return {"$float": "inf" if o > 0 else "-inf"}
            return o
        if isinstance(o, (torch.dtype,)):
            return {"$dtype": str(o).removeprefix("torch.")}
        if isinstance(o, torch.device):
            return {"$device": str(o)}
        raise TypeError(f"cannot send a value of type {type(o).__name__}")

    header = json.dumps(enc(obj)).encode()
    payload = _payload(tensors) if tensors else b""
    return struct.pack("<I", len(header)) + header + struct.pack("<Q", len(payload)) + payload


def decode(header: bytes, payload: bytes, seal: str | None = None):
    """The message a frame carries; with `seal`, only one whose header holds it (taken out), checked before anything
    of the payload is read. Whatever is wrong with the bytes is a ProtocolError: a reader takes them from a pipe
    that learner code can write to."""
    try:
        return _decode(header, payload, seal)
    except ProtocolError:
        raise
    except Exception as e:  # noqa: BLE001 - any fault of the bytes: safetensors', torch's, a type the JSON holds
        raise ProtocolError(f"malformed message: {type(e).__name__}: {str(e)[:200]}") from None


def _decode(header: bytes, payload: bytes, seal: str | None):
    import torch
    from safetensors.torch import load

    message = json.loads(header)          # what is wrong with it is a ProtocolError (`decode`)
    if seal is not None:                   # a sealed message is a dict ({"$dict": {..., "seal": seal}})
        fields = message.get("$dict") if isinstance(message, dict) and set(message) == {"$dict"} else None
        if not isinstance(fields, dict) or fields.pop("seal", None) != seal:
            raise ProtocolError("a message without the worker's seal: your code wrote into the grader's pipe")
    tensors = load(payload) if payload else {}

    def dec(o):
        if isinstance(o, list):
            return [dec(x) for x in o]
        if isinstance(o, dict):
            if set(o) == {"$t"}:
                if o["$t"] not in tensors:
                    raise ProtocolError("a message names a tensor it does not carry")
                return tensors[o["$t"]]
            if set(o) == {"$tuple"}:
                return tuple(dec(x) for x in o["$tuple"])
            if set(o) == {"$dict"}:
                return {str(k): dec(v) for k, v in o["$dict"].items()}
            if set(o) == {"$float"}:
                return float(o["$float"])
            if set(o) == {"$dtype"}:
                return _dtype(o["$dtype"])
            if set(o) == {"$device"}:
                if not (isinstance(o["$device"], str) and o["$device"].split(":")[0] in DEVICES):
                    raise ProtocolError("unknown device")
                return torch.device(o["$device"])
            if set(o) == {"$meta"} and isinstance(o["$meta"], dict):
                shape = o["$meta"].get("shape")
                if not (isinstance(shape, list) and len(shape) <= 16 and all(type(n) is int and n >= 0 for n in shape)):
                    raise ProtocolError("malformed meta tensor")
                return torch.empty(shape, dtype=_dtype(o["$meta"].get("dtype")), device="meta")
            raise ProtocolError("malformed message")
        return o

    def _dtype(name):
        dtype = getattr(torch, str(name), None)
        if not isinstance(dtype, torch.dtype):
            raise ProtocolError("unknown dtype")
        return dtype

    return dec(message)


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, min(n - got, 1 << 22))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_message(fd: int, deadline: float | None = None, max_payload: int = MAX_PAYLOAD,
                 max_header: int = MAX_HEADER):
    """Read one frame; TimeoutError past the deadline, EOFError when the other side closed,
    ProtocolError for a malformed frame or one larger than `max_header` or `max_payload` bytes (never read)."""
    return read_frame(fd, deadline, max_payload, max_header)[0]


def read_frame(fd: int, deadline: float | None = None, max_payload: int = MAX_PAYLOAD,
               max_header: int = MAX_HEADER, seal: str | None = None) -> tuple[object, int]:
    """One frame as `read_message` reads it (with `seal`, one that holds it: `decode`), and its size in bytes."""
    (hlen,) = struct.unpack("<I", _read_exact(fd, 4, deadline))
    if hlen > max_header:
        raise ProtocolError(f"message header of {hlen} bytes is too large")
    header = _read_exact(fd, hlen, deadline)
    (plen,) = struct.unpack("<Q", _read_exact(fd, 8, deadline))
    if plen > max_payload:
        raise ProtocolError(f"message payload of {plen} bytes is too large (at most {max_payload})")
    payload = _read_exact(fd, plen, deadline)
    return decode(header, payload, seal), 12 + hlen + plen


def write_message(fd: int, obj) -> None:
    data = memoryview(encode(obj))
    while data:
        n = os.write(fd, data[: 1 << 22])
        data = data[n:]
