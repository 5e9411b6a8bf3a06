"""Stand-ins for the course's versions of the parts a learner's part uses, inside the learner's worker.

While the grader checks one part, the names of the parts it uses (`scaled_dot_product_attention` inside
`MultiHeadAttention`, `LayerNorm` inside `TransformerBlock`, ...) are bound to these stand-ins: each sends
its tensors, through the grader, to a worker that runs the course's solution, and returns that worker's
outputs (and, under autograd, its gradients).  So a correct part scores full marks whatever the parts it
uses do, and no course code enters this process: a stand-in knows only the contract of its part (its
name, its arguments, the names and shapes of its parameters), never how the course computes it.

This file is copied into the sandbox; it imports nothing of the course.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def _plain(x):
    """What the protocol can carry: a torch.device or dtype becomes its name."""
    if isinstance(x, (torch.device, torch.dtype)):
        return str(x).removeprefix("torch.")
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


class _Call:
    """One call of a part: its state and arguments, with every tensor in one flat list for autograd."""

    tensors: list

    def __init__(self, part: Part, state: dict, args, kwargs):
        self.part, self.tensors, self.as_tuple = part, [], False
        self.state = {k: self._take(v) for k, v in state.items()}
        self.args = [self._take(a) for a in args]
        self.kwargs = {k: self._take(v) for k, v in kwargs.items()}

    def _take(self, v):
        if isinstance(v, torch.Tensor):
            self.tensors.append(v)
            return ("t", len(self.tensors) - 1)
        return ("v", _plain(v))

    def filled(self, tensors):
        put = lambda s: tensors[s[1]] if s[0] == "t" else s[1]  # noqa: E731
        return ({k: put(v) for k, v in self.state.items()}, [put(a) for a in self.args],
                {k: put(v) for k, v in self.kwargs.items()})


class _Remote(torch.autograd.Function):
    """A part computed by the course's worker; its backward asks that worker for the gradients."""

    @staticmethod
    def forward(ctx, call: _Call, *tensors):
        need = list(ctx.needs_input_grad[1:])
        state, args, kwargs = call.filled(tensors)
        # The messages carry tensors on the CPU: the course's worker computes on this call's device, and what
        # comes back goes where the call's tensors are (a GPU run's stay on the GPU).
        device = next((t.device for t in tensors if t.device.type != "cpu"), torch.device("cpu"))
        reply = call.part.request({"op": "part", "state": state, "args": args, "kwargs": kwargs,
                                   "grad": need if any(need) else None, "device": str(device)})
        outs = [o.to(device) for o in reply["outputs"]]
        ctx.call, ctx.grad_id, ctx.n = call, reply.get("grad_id"), len(tensors)
        ctx.devices = [t.device for t in tensors]
        call.as_tuple = bool(reply.get("tuple"))
        ctx.mark_non_differentiable(*[o for o in outs if not o.is_floating_point()])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        if ctx.grad_id is None:
            return (None, *[None] * ctx.n)
        got = ctx.call.part.request({"op": "part_backward", "grad_id": ctx.grad_id, "grads": list(grads)})["grads"]
        return (None, *[g if g is None else g.to(d) for g, d in zip(got, ctx.devices)])


class Part:
    """One part of the course, called through the grader (`send` is the worker's callback)."""

    def __init__(self, name: str, send, ctor=(), ctor_kwargs=None):
        self.name, self.send = name, send
        self.ctor, self.ctor_kwargs = _plain(list(ctor)), _plain(dict(ctor_kwargs or {}))

    def request(self, msg: dict) -> dict:
        return self.send({**msg, "name": self.name, "ctor": self.ctor, "ctor_kwargs": self.ctor_kwargs})

    def __call__(self, state: dict, args, kwargs):
        call = _Call(self, state, args, kwargs)
        outs = _Remote.apply(call, *call.tensors)
        return tuple(outs) if call.as_tuple else outs[0]


def _function(name: str, send):
    def stand_in(*args, **kwargs):
        return Part(name, send)({}, args, kwargs)

    stand_in.__name__ = stand_in.__qualname__ = name
    return stand_in


class _Module(nn.Module):
    """A course module: the contract's parameters live here, its forward is computed by the course's worker."""

    _part_name = ""
    _send = None

    def forward(self, *args, **kwargs):
        state = {**dict(self.named_parameters()), **dict(self.named_buffers())}
        return Part(self._part_name, type(self)._send, self._ctor, self._ctor_kwargs)(state, args, kwargs)


def _mha(self, d_model, n_heads, bias=True):
    if d_model % n_heads:
        raise ValueError(f"d_model = {d_model} is not divisible by n_heads = {n_heads}")
    self.q_proj, self.k_proj = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)
    self.v_proj, self.out_proj = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)


def _feed_forward(self, d_model, d_ff):
    self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)


def _layer_norm(self, d_model, eps=1e-5):
    self.weight, self.bias = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))


def _block(self, d_model, n_heads, d_ff, norm_first=True):
    parts = type(self)._parts
    self.attn = parts["MultiHeadAttention"](d_model, n_heads)
    self.ff = parts["FeedForward"](d_model, d_ff)
    self.norm1, self.norm2 = parts["LayerNorm"](d_model), parts["LayerNorm"](d_model)


# The contract of each course module: the submodules and parameters its constructor makes (the names and
# shapes the notebooks specify), never its forward.
CONTRACT: dict[str, Callable[..., None]] = {"MultiHeadAttention": _mha, "FeedForward": _feed_forward,
                                            "LayerNorm": _layer_norm, "TransformerBlock": _block}


def _module(name: str, send, parts: dict):
    build = CONTRACT[name]

    def __init__(self, *args, **kwargs):
        nn.Module.__init__(self)
        self._ctor, self._ctor_kwargs = list(args), dict(kwargs)
        build(self, *args, **kwargs)

    return type(name, (_Module,), {"__init__": __init__, "_part_name": name, "_send": staticmethod(send),
                                   "_parts": parts, "__qualname__": name})


_SAVED: dict = {}


def install(ns: dict, names: list[str], send):
    """Bind `names` in the learner's namespace to stand-ins; every name bound before goes back to the learner's own."""
    for name, value in _SAVED.items():
        if value is None:
            ns.pop(name, None)
        else:
            ns[name] = value
    _SAVED.clear()
    parts: dict = {}
    for name in ("MultiHeadAttention", "FeedForward", "LayerNorm"):
        parts[name] = _module(name, send, parts)
    for name in names:
        _SAVED[name] = ns.get(name)
        ns[name] = _module(name, send, parts) if name in CONTRACT else _function(name, send)
