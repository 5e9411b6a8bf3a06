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


def call_twice(f, args, kwargs, layout=None, last_rows: int | None = None) -> dict:
    """{"first", "second", "args_after": [[...], [...]]}: `f` called on fresh copies of `args` and `kwargs`, autograd
    off, then on other fresh copies, autograd on (each copy laid out in memory by `layout`, when given); the arguments
    as each call left them, the keyword arguments after the positional ones, in their order. With `last_rows`, each
    output as its last rows only (`tail`: an answer too large to send whole, read where its precision is tested)."""
    import torch

    outs, after = [], []
    for grad in (False, True):
        with torch.set_grad_enabled(grad):          # the copies too: made as the call's own inputs would be
            copies = [fresh(a, grad) for a in args]
            named = {k: fresh(v, grad) for k, v in kwargs.items()}
            if layout is not None:
                copies, named = [layout(a) for a in copies], {k: layout(v) for k, v in named.items()}
            out = detached(f(*copies, **named))
        outs.append(tail(out, last_rows) if last_rows else out)
        after.append([detached(a) for a in (*copies, *named.values())])
    return {"first": outs[0], "second": outs[1], "args_after": after}


def tail(out, rows: int):
    """Each tensor of `out` (in tuples too) as its last `rows` rows (its dimension -2), copied."""
    import torch

    if isinstance(out, (tuple, list)):
        return type(out)(tail(o, rows) for o in out)
    if isinstance(out, torch.Tensor) and out.dim() >= 2:
        return out[..., -rows:, :].clone()
    return out


# -- the families: promises every part keeps, checked the same way on every part (autograder.verdict.suites.families)
FAMILIES = ("strided", "changed", "float64", "meta", "train")


def strided(a):
    """`a` with the same values in memory that is not contiguous, as a caller's view of a transposed tensor (heads
    split by `transpose(1, 2)`, say) or a slice is: every dimension in the reverse order in memory, so that no two
    neighbours merge (`view` fails wherever `reshape` would copy) and the last is not the densest; or, with one
    dimension of more than one element, every other element of a wider tensor."""
    import torch

    if not isinstance(a, torch.Tensor) or a.dim() == 0 or a.numel() < 2 or a.device.type == "meta":
        return a
    if sum(n > 1 for n in a.shape) >= 2:
        order = list(range(a.dim()))[::-1]
        out = a.permute(order).contiguous().permute(order)
    else:
        wide = torch.zeros(*a.shape[:-1], 2 * a.shape[-1], dtype=a.dtype, device=a.device)
        wide[..., ::2] = a
        out = wide[..., ::2]
    return out.requires_grad_(a.requires_grad) if out.is_leaf and a.requires_grad else out


def _change(out):
    """Change a result or the arguments of a call in place, as a caller may (the tensors of a tuple or list too); one
    that cannot be written in place (an expanded view) is left as it is: no caller can change it."""
    import torch

    for t in out if isinstance(out, (tuple, list)) else [out]:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta" or not t.numel():
            continue
        try:
            if t.dtype == torch.bool:
                t.logical_not_()
            else:
                t.add_(1)
        except RuntimeError:
            pass


def _put_back(obj, copy):
    """Each tensor of `obj` given back the values of its `copy` (_copied), where it can be written."""
    import torch

    if isinstance(obj, torch.Tensor) and obj.device.type != "meta" and isinstance(copy, torch.Tensor):
        try:
            obj.copy_(copy)
        except RuntimeError:
            pass
    elif isinstance(obj, (tuple, list)) and isinstance(copy, (tuple, list)):
        for o, c in zip(obj, copy):
            _put_back(o, c)


def _copied(obj):
    """`obj` (a call's output or argument) with each tensor copied out of autograd's graph, in tuples and lists too."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (tuple, list)):
        return type(obj)(_copied(o) for o in obj)
    return obj


def _to(a, where):
    import torch

    if not isinstance(a, torch.Tensor):
        return a
    if where == "meta":
        return a.to("meta")
    return a.to(where) if a.is_floating_point() else a


def _used(module, args, kwargs) -> None:
    """A module called once where and as it was made (on the device of its arguments, in float32), before the caller
    moves it: what it keeps of a call (a mask cached in a plain attribute) must move with it too."""
    import torch

    with torch.no_grad():
        module(*(fresh(a, False) for a in args), **{k: fresh(v, False) for k, v in kwargs.items()})


def call_family(f, args, kwargs, family: str, last_rows: int | None = None) -> dict:
    """`f` called as one family of checks calls it, with its answer as `call_twice` gives it (first, second,
    args_after): "strided" on arguments that are not contiguous; "changed" a second time (autograd on) after the
    caller changed the first call's result in place (the first call's arguments as that left them), its answer read
    again after the caller changed that call's arguments in place (as "first"; as it was, "second"; the first call's
    answer before the caller changed it, "returned"), what the caller
    changed then put back (state the code keeps, a table it hands out, is as before for the checks after); "meta" on
    arguments on the "meta" device (a module called once where it was made, then after `.to("meta")`); and for a
    module, "float64" after a call and `.to(torch.float64)` on float64 arguments, "train" in training mode (the two
    calls must agree: no dropout)."""
    import torch

    if family == "strided":
        return call_twice(f, args, kwargs, layout=strided, last_rows=last_rows)
    if family == "changed":
        with torch.no_grad():
            first_args, first_named = [fresh(a, False) for a in args], {k: fresh(v, False) for k, v in kwargs.items()}
            out = f(*first_args, **first_named)
            before = _copied(out)
            _change(out)
        with torch.enable_grad():                   # as call_twice's second call: what autograd alone does shows
            second_args, named = [fresh(a, True) for a in args], {k: fresh(v, True) for k, v in kwargs.items()}
            second = detached(f(*second_args, **named))
        sent = [*second_args, *named.values()]
        left, answered = [_copied(a) for a in sent], _copied(second)
        with torch.no_grad():                       # then the caller changes the arguments: the answer stays
            _change(sent)
        first, first_left = _copied(second), [_copied(a) for a in (*first_args, *first_named.values())]
        with torch.no_grad():       # and puts back what it changed: a table the code keeps is as it was for later calls
            _put_back(sent, left)
            _put_back(out, before)
        if last_rows:
            first, answered, before = tail(first, last_rows), tail(answered, last_rows), tail(before, last_rows)
        # "returned": the first call's answer as the code returned it, before the caller changed it (a known mistake
        # whose answers after the change agree is not the learner's code if it returned another answer at first)
        return {"first": first, "second": answered, "args_after": [first_left, left], "returned": before}
    if family == "meta":
        if isinstance(f, torch.nn.Module):
            _used(f, args, kwargs)
            f.to("meta")
        with torch.no_grad():
            out = detached(f(*(_to(a, "meta") for a in args), **{k: _to(v, "meta") for k, v in kwargs.items()}))
        out = tail(out, last_rows) if last_rows else out
        kept = [detached(a) for a in (*args, *kwargs.values())]
        return {"first": out, "second": out, "args_after": [kept, kept]}
    if not isinstance(f, torch.nn.Module):
        raise TypeError(f"the family {family} is for modules")
    if family == "float64":
        _used(f, [_to(a, torch.float32) for a in args], {k: _to(v, torch.float32) for k, v in kwargs.items()})
        f.to(torch.float64)
        return call_twice(f, [_to(a, torch.float64) for a in args],
                          {k: _to(v, torch.float64) for k, v in kwargs.items()}, last_rows=last_rows)
    if family == "train":
        f.train()
        try:
            return call_twice(f, args, kwargs, last_rows=last_rows)
        finally:
            f.eval()
    raise ValueError(f"unknown family {family}")


def gradients(f, args, kwargs, grads: list, double: bool = True) -> dict:
    """The gradients of sum_i <output_i, grads_i> (the floating outputs, in order) with respect to every floating
    argument and, for a module, every parameter: {"first": the outputs, "args": [a gradient or None per argument],
    "params": {name: gradient or None}}. None: no gradient reached it. With `double`, a module computes in float64
    (`.to(torch.float64)`) on float64 arguments."""
    import torch

    if double:
        if isinstance(f, torch.nn.Module):
            f.to(torch.float64)
        args = [_to(a, torch.float64) for a in args]
        kwargs = {k: _to(v, torch.float64) for k, v in kwargs.items()}

    leaves = [a.detach().clone().requires_grad_(True) if isinstance(a, torch.Tensor) and a.is_floating_point()
              else a for a in args]
    # every name of each parameter: one the contract names may be an alias (nn.Sequential's layer as `linear1`)
    params = dict(f.named_parameters(remove_duplicate=False)) if isinstance(f, torch.nn.Module) else {}
    for p in params.values():
        p.grad = None
    with torch.enable_grad():
        out = f(*leaves, **kwargs)
        outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
                if isinstance(o, torch.Tensor) and o.is_floating_point()]
        pairs = [(o, g.to(o.dtype)) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        wanted = [a for a in leaves if isinstance(a, torch.Tensor) and a.requires_grad] + list(params.values())
        got = torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True) \
            if pairs and wanted else [None] * len(wanted)
    it = iter(got)
    arg_grads = [next(it) if isinstance(a, torch.Tensor) and a.requires_grad else None for a in leaves]
    param_grads = {name: next(it) for name in params}
    return {"first": detached(out), "args": [detached(g) for g in arg_grads],
            "params": {k: detached(v) for k, v in param_grads.items()}}


def first_line(message: str) -> str:
    return str(message).strip().split("\n", 1)[0][:300]


def raised(e: BaseException) -> dict:
    """An exception as an answer: its type, its classes and its message's first line (two answers raised the same
    exception when all three agree: the same type alone is no evidence of the same mistake)."""
    return {"raised": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__], "message": first_line(str(e))}
