"""A call of a part as the grader makes it: twice, each time on fresh copies of the arguments, autograd off then on,
with the arguments as each call left them. The learner's worker makes it so (worker.Worker.op_call_twice), and so
does the trusted process where it runs the course's code or a known mistake on the same call
(autograder.verdict.known, autograder.verdict.suites.contract): one function, so their answers compare.

This file is copied into the sandbox; it imports nothing of the course.
"""
from __future__ import annotations


def fresh(a, grad: bool):
    """A copy of an argument (a tensor: out of any graph; with `grad`, a floating-point one enters autograd's graph
    as a layer's input does, so that changing it in place is allowed)."""
    import torch

    if not isinstance(a, torch.Tensor):
        return a
    t = a.detach().clone()
    return t.requires_grad_(True).clone() if grad and t.is_floating_point() else t


def detached(obj):
    """A call's output or argument as plain data: tensors out of autograd's graph, in tuples and lists too."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if isinstance(obj, (tuple, list)):
        return type(obj)(detached(o) for o in obj)
    return obj


def call_twice(f, args, kwargs) -> dict:
    """{"first", "second", "args_after": [[...], [...]]}: `f` called on fresh copies of `args`, autograd off, then on
    other fresh copies, autograd on."""
    import torch

    outs, after = [], []
    for grad in (False, True):
        copies = [fresh(a, grad) for a in args]
        with torch.set_grad_enabled(grad):
            outs.append(detached(f(*copies, **kwargs)))
        after.append([detached(a) for a in copies])
    return {"first": outs[0], "second": outs[1], "args_after": after}
