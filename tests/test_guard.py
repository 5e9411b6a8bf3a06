"""The library policy enforced while a learner's code runs (autograder.inside.guard), here in this process as the worker
runs it: every route the static reading proves or flags is refused when it runs, whatever name the code computes;
the routes the red teams found into the worker are refused; every honest idiom, every known correct answer and every
known mistake runs as it would in Jupyter."""
import pytest
import torch
from helpers import ASSIGNMENTS, BINDINGS, CONSTRUCTS, IDIOMS, LOOKUPS, MODULES, all_variants, route
from hypothesis import given, settings
from hypothesis import strategies as st

from autograder.authoring import variants
from autograder.inside import guard
from autograder.notebooks import as_python, learner_cells
from autograder.verdict import policy
from autograder.verdict.suites import contract

SETUP = "import math\n\nimport torch\nfrom torch import nn\n"
REFUSALS = (guard.RefusedError, guard.CellRefused)


def load(*sources: str, library: str | None = policy.COURSE_LIBRARY, errors: list | None = None,
         modules: tuple[str, ...] = (), setup: str = SETUP, **names) -> dict:
    """The names of `sources` run as a learner's cells are (the setup cell first), with `names` given; a cell's
    exception is raised, or, given `errors`, kept there as the worker keeps it (the cell's names so far stay).
    `modules`: those the exercise allows beyond the course's (its suite's ALLOWED_MODULES)."""
    pol = guard.Policy(policy.runtime(library, modules))
    pol.prepare()
    ns = guard.learner_module(pol).__dict__
    ns.update(names)
    for _cell, codes, error in guard.compile_cells([{"id": f"cell-{i}", "source": s}
                                                   for i, s in enumerate((setup, *sources))]):
        try:
            if error is not None:
                raise error
            guard.run_statements(codes, ns, ns.setdefault("__skipped__", []))
        except Exception as e:
            if errors is None:
                raise
            errors.append(e)
    return ns


def qkv():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 5, 4, generator=g) for _ in range(3)]


def refused(*sources: str, call: str = "scaled_dot_product_attention") -> bool:
    """Whether running `sources` (then calling `call` on q, k, v, and `f` on q when a source defined one) meets a
    refusal of the policy (at a cell's top level, it skips the statement: guard.run_cell)."""
    q, k, v = qkv()
    try:
        errors: list = []
        ns = load(*sources, errors=errors, things=[torch.nn.functional], name="scaled_dot_product_attention", q=q,
                  k=k, v=v, x=q)
        if ns.get("__skipped__") or any(isinstance(e, REFUSALS) for e in errors):   # a top-level one: skipped
            return True
        if errors:
            return False
        if call in ns:
            ns[call](q, k, v)
        if callable(ns.get("f")):
            ns["f"](q)
    except REFUSALS:
        return True
    except Exception:  # noqa: BLE001 - any other failure is not the policy's refusal
        return False
    return False


@pytest.mark.parametrize("source,why", CONSTRUCTS)
def test_every_construct_a_reading_cannot_follow_is_refused_while_it_runs(source, why):
    assert refused(source), source


@pytest.mark.parametrize("b", range(len(BINDINGS)), ids=BINDINGS)
def test_every_single_binding_route_is_refused_while_it_runs(b):
    """Each binding with each lookup, the module turning with both: every pair of binding, lookup and module meets
    (each run prepares a policy, whose walk over the process's classes is most of its time)."""
    for j, lookup in enumerate(LOOKUPS):
        source = route(MODULES[(b + j) % len(MODULES)], [BINDINGS[b]], lookup)
        assert refused(source), source


def test_the_single_binding_routes_meet_every_pair():
    pairs = {(b, j, (b + j) % len(MODULES)) for b in range(len(BINDINGS)) for j in range(len(LOOKUPS))}
    assert {(b, m) for b, _, m in pairs} == {(b, m) for b in range(len(BINDINGS)) for m in range(len(MODULES))}
    assert {(j, m) for _, j, m in pairs} == {(j, m) for j in range(len(LOOKUPS)) for m in range(len(MODULES))}


@settings(max_examples=150, derandomize=True, deadline=None)
@given(st.sampled_from(MODULES), st.lists(st.sampled_from(BINDINGS), min_size=1, max_size=3),
       st.sampled_from(LOOKUPS))
def test_no_obfuscated_route_runs(module, bindings, lookup):
    assert refused(route(module, bindings, lookup))


# The red teams' routes into the worker's insides and to the library versions (issue: the ban enforced while the code
# runs), each as its notebook wrote it.
RED_TEAM = {
    "torch's file writer, where open() is refused": "def f(q):\n    return torch.PyTorchFileWriter('x.pt')\n",
    "torch's file reader, where open() is refused": "def f(q):\n    return torch.PyTorchFileReader('x.pt')\n",
    "a storage's loader of files, where torch.from_file is refused": (
        "def f(q):\n    return torch.UntypedStorage.from_file('x.pt', False, 8)\n"),
    "a typed storage's loader of files": "def f(q):\n    return torch.FloatStorage.from_file('x.pt', False, 2)\n",
    "a real metaclass through typing.Type[int]'s __mro_entries__": (
        "import typing\nclass _Meta(typing.Type[int]):\n    pass\n"
        "def f(q):\n    return _Meta('C', (), {'__array_interface__': {}})\n"),
    "Python's own type as what types.resolve_bases returns for typing.Type[int]": (
        "import types, typing\nT = types.resolve_bases((typing.Type[int],))[0]\n"
        "def f(q):\n    return T('C', (), {'__array_interface__': {}})\n"),
    "str.format reading a traceback's frames": (
        "def f(q):\n    try:\n        raise ValueError()\n    except ValueError as e:\n"
        "        return '{0.__traceback__.tb_frame.f_back.f_locals}'.format(e)\n"),
    "str.format_map reading a function's globals": (
        "def f(q):\n    return '{a.forward.__globals__}'.format_map({'a': torch.nn.Linear(1, 1)})\n"),
    "str.format unbound, through super() of a str of its own": (
        "class S(str):\n    def g(self, e):\n        return super().format(e)\n"
        "def f(q):\n    return S('{0.__traceback__}').g(ValueError()), str.format('{0.__class__.__mro__}', 1)\n"),
    "a generator's frame chain up to the worker's main()": (
        "def _g():\n    yield 1\n"
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    g = _g()\n    f = g.gi_frame.f_back\n    return f.f_builtins['getattr'](f, 'f_locals'), None\n"),
    "f_builtins['getattr'] for F.multi_head_attention_forward": (
        "import sys\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    get = sys._getframe(0).f_builtins['getattr']\n"
        "    return get(torch.nn.functional, 'multi_head_attention_forward'), None\n"),
    "a string annotation evaluated by singledispatch's register": (
        "import functools\n"
        "def _f(x: 'torch.nn.functional.multi_head_attention_forward'):\n    return x\n"
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    functools.singledispatch(lambda x: x).register(_f)\n    return q, None\n"),
    "annotations copied by update_wrapper, then typing's evaluator": (
        "import functools, typing, types\n"
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    src = types.SimpleNamespace(__annotations__={'a': 'torch.nn.functional.layer_norm'})\n"
        "    f = functools.update_wrapper(lambda: 0, src)\n    return typing.get_type_hints(f)['a'], None\n"),
    "a pickle read back by np.load": (
        "import numpy as np\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    return np.load('/tmp/x.npy', allow_pickle=True), None\n"),
    "the worker's own calls.call_twice replaced": (
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    import calls\n    calls.call_twice = lambda f, a, k: {}\n    return q, None\n"),
    "__import__ from a builtins table": (
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    return __builtins__['__import__']('calls'), None\n"),
    "a class of any namespace through type's metaclass": (
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    T = type(type(q))\n    C = T('C', (), {'__array_interface__': {'data': (0, False)}})\n"
        "    return q, None\n"),
    "type() of a class, then type's call": (
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    T = type(int)\n    T('C', (), {'__array_interface__': {}})\n    return q, None\n"),
    "a raw-memory protocol set on an instance": (
        "class _Box:\n    pass\n"
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    b = _Box()\n    setattr(b, '__array_interface__', {})\n    return q, None\n"),
    "numpy's strided view of any address": (
        "import numpy as np\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    return np.lib.stride_tricks.as_strided(np.zeros(1), (10 ** 6,), (8,)), None\n"),
    "a class pattern of match reading a frame": (
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    match (x for x in ()):\n        case object(gi_frame=f):\n            return f, None\n"),
    "operator.attrgetter": (
        "import operator\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    return operator.attrgetter('scaled_dot_product_attention')(torch.nn.functional)(q, k, v), None\n"),
    "an object's own __getattribute__ slot": (
        "class _O:\n    pass\n"
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    return _O.__getattribute__(torch, '_C'), None\n"),
    # the sixth round (with the guards' source): library objects that read, write or compile what they are told
    "string.Formatter's get_field: a traceback's frames, unguarded": (
        "import string\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    try:\n        1 / 0\n    except ZeroDivisionError as e:\n"
        "        return string.Formatter().get_field('0.__traceback__.tb_frame.f_globals', (e,), {})[0], None\n"),
    "functools.wraps copying attributes of one's choice (getattr's own policy)": (
        "import functools\nclass _C:\n    got = []\n    def __setattr__(self, name, value):\n"
        "        _C.got.append(value)\n"
        "functools.wraps(getattr, assigned=('__self__',), updated=())(_C())\n_C.got[0].denied.clear()\n"),
    "functools.update_wrapper with a str that says it is __doc__": (
        "import functools\nclass _S(str):\n    def __eq__(self, other):\n        return True\n"
        "    def __hash__(self):\n        return hash('__doc__')\n"
        "class _C:\n    def __setattr__(self, name, value):\n        pass\n"
        "functools.update_wrapper(_C(), getattr, assigned=(_S('__self__'),), updated=())\n"),
    "functools.update_wrapper copying torch's namespace, private names included": (
        "import functools\ndef _mine():\n    pass\nfunctools.update_wrapper(_mine, torch)\n"
        "sys = _mine._import_dotted_name('sys')\n"),
    "functools.update_wrapper onto an object the learner did not make": (
        "import functools\ndef _mine():\n    pass\n_mine.course_probe = 1\n"
        "functools.update_wrapper(torch.nn.Identity(), _mine)\n"),
    "numpy.testing.measure: a string run in the caller's globals": (
        "import numpy as np\nnp.testing.measure('import sys', 1)\n"),
    "numpy.testing.decorate_methods: a class of torch's rewritten": (
        "import numpy as np\nnp.testing.decorate_methods(torch.nn.Identity, lambda f: f, 'no_method_has_this_name')\n"),
    "a dataclass field named __array_interface__ (its __init__ sets it)": (
        "import dataclasses\nclass _K:\n    a: int\n    __annotations__['__array_interface__'] = dict\n"
        "_K = dataclasses.dataclass(_K)\n"),
    "a dataclass field whose name is code (dataclasses compiles it)": (
        "import dataclasses\nclass _K:\n    a: int\n    __annotations__['b=0): pass\\n#'] = int\n"
        "_K = dataclasses.dataclass(_K)\n"),
    "dataclasses.dataclass on a class of torch's": (
        "import dataclasses\n"
        "dataclasses.dataclass(init=False, repr=False, eq=False, match_args=False)(torch.nn.Softsign)\n"),
    "copy restoring a reduction's state onto a module": (
        "import copy\nclass _R:\n    def __reduce_ex__(self, protocol):\n"
        "        return (_module, (), (None, {'course_probe': 1}))\n"
        "def _module():\n    return torch.nn.functional\ncopy.copy(_R())\n"),
    "a class's __getstate__, whose state copy sets without the guards": (
        "import copy\nclass _K:\n    def __getstate__(self):\n        return (None, {'course_probe': 1})\n"
        "copy.copy(_K())\n"),
    "a cached_property renamed __reduce_ex__, then copy.deepcopy": (
        "import copy, functools\ndef _reduce(protocol):\n    return (_module, (), (None, {'course_probe': 1}))\n"
        "def _module():\n    return torch.nn.functional\nclass _K:\n    pass\n"
        "_cp = functools.cached_property(lambda self: _reduce)\n_K.x = _cp\n_cp.attrname = '__reduce_ex__'\n"
        "_o = _K()\n_o.x\ncopy.deepcopy(_o)\n"),
    "copy's table of reductions": (
        "import copy\ncopy.dispatch_table[type(None)] = None\n"),
    "tqdm's wrapper of another object writing into a module": (
        "import tqdm.std\ntqdm.std.DisableOnWriteError(torch.nn.functional, None).course_probe = 1\n"),
    "a progress bar's file wrapper (tqdm(...).fp)": (
        "from tqdm import tqdm\nclass _F:\n    def write(self, s):\n        pass\n    def flush(self):\n        pass\n"
        "_w = tqdm([1], file=_F()).fp\n"),
    "tqdm's ObjectWrapper reading any attribute": (
        "import tqdm.utils\ntqdm.utils.ObjectWrapper(getattr).wrapper_getattr('__self__').denied.clear()\n"),
    "numpy's user_array.container writing into a module": (
        "import numpy.lib.user_array as u\n_c = u.container([1])\n_c.array = torch.nn.functional\n"
        "_c.course_probe = 1\n"),
    "torch.ao's quantizable MultiheadAttention (none of the refused operators)": (
        "import torch.ao.nn.quantizable as tq\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    return tq.MultiheadAttention(q.shape[-1], 1, batch_first=True)(q, k, v)\n"),
    "a dispatch mode torch.utils.checkpoint imports": (
        "from torch.utils.checkpoint import TorchDispatchMode\n"),
    "selective checkpointing's mode, which sees every operator": (
        "import torch.utils.checkpoint as c\n_seen = c.create_selective_checkpoint_contexts(lambda *a, **k: None)\n"),
    "a package's tests (numpy.tests: subprocesses, eval)": (
        "import numpy.tests.test_public_api\n"),
    "matplotlib's animation writers (they run the program rcParams names)": (
        "import matplotlib.animation\n"),
    # Python's own `type`, which makes a class of any namespace (numpy reads raw memory through one)
    "type.mro(type): Python's own type after the policy's": (
        "T = type.mro(type)[1]\nC = T('C', (), {'__array_interface__': {}})\n"),
    "super()'s mro of the policy's type": (
        "T = super(type, type).mro(type)[1]\nC = T('C', (), {'__array_interface__': {}})\n"),
    "types.prepare_class's metaclass": (
        "import types\nT = types.prepare_class('X', (int,))[0]\nC = T('C', (), {'__array_interface__': {}})\n"),
    "typing.get_origin of typing.Type": (
        "import typing\nT = typing.get_origin(typing.Type)\nC = T('C', (), {'__array_interface__': {}})\n"),
    "a library function's annotations": (
        "import numpy.typing.mypy_plugin as p\nT = p.plugin.__annotations__['return']\n"
        "C = T('C', (), {'__array_interface__': {}})\n"),
    # memory a view still uses, freed: the view reads and writes what the process puts there next
    "a storage shrunk under its tensor's view": (
        "t = torch.zeros(1000)\nv = t[500:]\nt.untyped_storage().resize_(0)\n"),
    "a storage shrunk through super()": (
        "t = torch.zeros(1000)\nv = t[500:]\ns = t.untyped_storage()\nsuper(type(s), s).resize_(0)\n"),
    "a storage's resize_ read from its class": (
        "t = torch.zeros(1000)\nv = t[500:]\ntorch.UntypedStorage.resize_(t.untyped_storage(), 0)\n"),
    "a typed storage shrunk": (
        "t = torch.zeros(1000)\nv = t[500:]\nt.storage().resize_(0)\n"),
    "numpy's resize without its check of references": (
        "import numpy as np\na = np.zeros(1000)\nv = a[500:]\na.resize(0, refcheck=False)\n"),
    # the seventh round (with the grader's source): objects of denied modules that allowed ones re-export, and a
    # Cython function's insides
    "torch.xpu's ctypes: a pointer cast to any address": (
        "LP = type(torch.xpu.pointer(torch.xpu.c_void_p(0)))\nw = torch.xpu.cast(torch.xpu.c_void_p(8), LP)\n"),
    "ctypes' cast reached through torch.xpu": "w = torch.xpu.cast\n",
    "matplotlib.Path, pathlib's reader and writer of files": (
        "import matplotlib\nt = matplotlib.Path('/etc/hostname').read_text()\n"),
    "a Cython function's module namespace (numpy.random.seed.func_globals)": (
        "import numpy as np\nb = np.random.seed.func_globals['__builtins__']\n"),
    "a Cython function's code": "import numpy as np\nc = np.random.seed.func_code\n",
    "tqdm.notebook's weakref.proxy": "import tqdm.notebook\np = tqdm.notebook.proxy\n",
    "torch.CompilationUnit (torch.jit's) compiling a library version from a string": (
        "cu = torch.CompilationUnit('def f(x):\\n    return torch.layer_norm(x, [4])\\n')\n"),
    "numpy's writer of text files": "import numpy as np\nnp.savetxt('/dev/null', np.zeros(2))\n",
    "numpy's reader of text files": "import numpy as np\nt = np.loadtxt('/etc/hostname', dtype=str)\n",
    "an array written to a file": "import numpy as np\nnp.zeros(2).tofile('/dev/null')\n",
    "matplotlib's opener of any file": (
        "import matplotlib.cbook\nf = matplotlib.cbook.get_sample_data('/etc/hostname')\n"),
}

# A class kept by learner code that runs while Python makes it (a descriptor's __set_name__, a base's
# __init_subclass__), whose making it then stops before the guards' look at the made class (Policy._own_class); the
# class's own __getattr__ answers numpy's raw-memory protocol with an address (a tensor's, here).
_KEPT_WHILE_MADE = (
    "t = torch.zeros(4)\nheld = []\nclass Spy:\n    def __set_name__(self, owner, name):\n        held.append(owner)\n"
    "        raise ValueError('stop')\n"
    "try:\n    class X:\n        s = Spy()\n        def __getattr__(self, name):\n"
    "            if name != '__array_interface__':\n                raise AttributeError(name)\n"
    "            return {'version': 3, 'shape': (4,), 'typestr': '<f4', 'data': (t.data_ptr(), False)}\n"
    "except Exception:\n    pass\n")
_KEPT_BY_A_BASE = (
    "t = torch.zeros(4)\nheld = []\nclass Base:\n    def __init_subclass__(cls, **kw):\n        held.append(cls)\n"
    "        raise ValueError('stop')\n"
    "try:\n    class X(Base):\n        def __getattr__(self, name):\n"
    "            if name != '__array_interface__':\n                raise AttributeError(name)\n"
    "            return {'version': 3, 'shape': (4,), 'typestr': '<f4', 'data': (t.data_ptr(), False)}\n"
    "except Exception:\n    pass\n")

# A class statement whose body binds a cached_property as __reduce_ex__, the property kept by a decorator: refused
# once Python had made the class, so after cached_property's __set_name__ had kept the name.
_NAMED_BEFORE_REFUSED = (
    "import copy, functools\nheld = []\ndef keep(cp):\n    held.append(cp)\n    return cp\n"
    "class A:\n    @keep\n    @functools.cached_property\n    def __reduce_ex__(self):\n        return None\n")
# The same name put in a class body's namespace by a dict whose __setitem__ renames what the body binds.
_RENAMED_IN_THE_NAMESPACE = (
    "import functools\nheld = []\nclass _D(dict):\n    def __setitem__(self, key, value):\n"
    "        if key == 'x':\n            held.append(value)\n            key = '__reduce' + '_ex__'\n"
    "        dict.__setitem__(self, key, value)\n"
    "class M(type):\n    @classmethod\n    def __prepare__(mcs, name, bases):\n        return _D()\n"
    "class A(metaclass=M):\n    x = functools.cached_property(lambda self: None)\n")
# ... and by a namespace given to type() whose __iter__ hides it from the policy's look at the keys.
_HIDDEN_FROM_THE_LOOK = (
    "import functools\nheld = [functools.cached_property(lambda self: None)]\n"
    "class _D(dict):\n    def __iter__(self):\n        return iter(['x'])\n"
    "d = _D(x=1)\nd['__reduce' + '_ex__'] = held[0]\nC = type('C', (), d)\n")


@pytest.mark.parametrize("route_name", sorted(RED_TEAM))
def test_the_red_teams_routes_are_refused_while_they_run(route_name):
    assert refused(RED_TEAM[route_name]), RED_TEAM[route_name]


@pytest.mark.parametrize("source", [_NAMED_BEFORE_REFUSED, _RENAMED_IN_THE_NAMESPACE, _HIDDEN_FROM_THE_LOOK],
                         ids=["decorated", "renamed", "hidden"])
def test_a_descriptor_refused_with_its_class_never_learns_the_refused_name(source):
    """Red team, seventh round: a cached_property that had learnt the name __reduce_ex__ from its refused class, then
    attached to a class of the learner's, wrote a __reduce_ex__ into an instance; copy.copy ran it without the guards,
    and its state set any attribute (a raw-memory protocol: numpy read and wrote any address). A class body's namespace
    now meets the policy before the class is made, and so before any descriptor's __set_name__."""
    errors: list = []
    ns = load(source, errors=errors)
    assert ns["__skipped__"] or errors, "the class statement was not refused"
    assert all(isinstance(e, REFUSALS) for e in errors), errors
    assert ns["held"] and all(cp.attrname is None for cp in ns["held"]), [cp.attrname for cp in ns["held"]]


@pytest.mark.parametrize("source", [_KEPT_WHILE_MADE, _KEPT_BY_A_BASE], ids=["__set_name__", "__init_subclass__"])
def test_a_class_kept_while_it_is_made_is_safe_from_its_first_moment(source):
    """Red team, seventh round, again: learner code that runs while Python makes a class kept it and stopped its making
    before the guards looked at it; the class's own __getattr__ then gave numpy an address to read and write. A class
    body's raw-memory names answer nothing and its hooks are sealed before the class exists."""
    import numpy as np

    ns = load(source)
    (cls,) = ns["held"]
    got = np.asarray(cls())
    assert got.shape == () and got.dtype == object, (got.shape, got.dtype)


def _probes() -> list:
    """What learner code can hold and hand the standard library's functions of types: generic aliases (whose
    __mro_entries__ stand for classes), classes, and containers of them; made afresh for each call (some change
    them). typing's spellings are the point here, not annotations."""
    import typing

    alias = typing.Type[int]  # noqa: UP006
    return [alias, typing.Type, typing.Type[typing.Any], typing.List[int], list[int], int, (alias,), [alias],  # noqa: UP006
            {"a": alias}, typing.Optional[alias], typing.Callable[[int], int], typing.Tuple[alias]]  # noqa: UP006, UP045


def _held(value, depth: int = 0):
    """`value` and what learner code reaches in it by a subscript or a loop, which no guard reads."""
    import itertools

    yield value
    if depth < 3 and isinstance(value, (tuple, list, set, frozenset, dict)):
        for item in itertools.islice(value.items() if isinstance(value, dict) else value, 20):
            yield from _held(item, depth + 1)


def test_no_function_of_the_standard_library_hands_learner_code_a_metaclass():
    """Python's own `type` (or any metaclass) in learner code's hands makes a class of any namespace: one that hands
    numpy raw memory. Attribute reads and names meet the guards, which swap `type` for the policy's; what a call
    returns does not. So no allowed function of the modules of types and classes returns one, or a container of one,
    for what learner code can hold (types.resolve_bases did, for typing.Type[int]: a red team's route)."""
    import abc
    import collections.abc
    import contextlib
    import copy
    import dataclasses
    import functools
    import itertools
    import numbers
    import operator
    import string
    import types
    import typing

    from autograder.verdict import policy

    found, n = set(), len(_probes())
    arguments = [(i,) for i in range(n)] + [(i, j) for i in range(6) for j in range(6)]
    for module in (typing, types, functools, operator, itertools, copy, abc, collections, collections.abc,
                   dataclasses, numbers, contextlib, string):
        for name in dir(module):
            path = f"{module.__name__}.{name}"
            f = getattr(module, name)
            if name.startswith("_") or not callable(f) or not policy.allowed(path) or f is typing.reveal_type:
                continue
            for which in arguments:
                probes = _probes()
                try:
                    out = f(*(probes[i] for i in which))
                except Exception:  # noqa: BLE001 - refused arguments: nothing handed back
                    continue
                if any(isinstance(v, type) and issubclass(v, type) for v in _held(out)):
                    found.add(path)
    assert not found, sorted(found)


# Objects whose attribute hook answers numpy's read of __array_interface__ from a dict code may fill: with an address
# of the learner's choosing, numpy reads and writes the worker's memory (a red team's full escapes, 5/5 for a library
# call against 0/5 written plainly). IFACE: a real address, so that an answer read would give an array of bytes.
RAW_MEMORY_ROUTES = {
    "an nn.Module's buffers, through the __getattr__ a learner's module inherits":
        "class Box(nn.Module):\n    pass\nbox = Box()\nbox._buffers['__array_interface__'] = IFACE\n"
        "a = np.asarray(box)\n",
    "matplotlib's Spines, through its __getattr__":
        "import matplotlib.spines\ns = matplotlib.spines.Spines()\ns['__array_interface__'] = IFACE\n"
        "a = np.asarray(s)\n",
    "a parametrization's property, on the class torch.nn.utils.parametrize makes for a module's buffer": (
        "import torch.nn.utils.parametrize as P\nclass Box(nn.Module):\n    pass\n"
        "class Give(nn.Module):\n    def forward(self, x):\n        return x if self.training else IFACE\n"
        "box = Box()\nbox.register_buffer('__array_interface__', torch.zeros(3))\n"
        "P.register_parametrization(box, '__array_interface__', Give())\nbox.parametrizations.eval()\n"
        "a = np.asarray(box)\n"),
    "numpy's Arrayterator, whose __getattr__ asks the object it holds":
        "import matplotlib.spines\ns = matplotlib.spines.Spines()\ns['__array_interface__'] = IFACE\n"
        "it = np.lib.Arrayterator(np.zeros(3))\nit.var = s\na = np.asarray(it)\n",
}


@pytest.mark.parametrize("route_name", sorted(RAW_MEMORY_ROUTES))
def test_numpy_reads_no_raw_memory_through_an_attribute_hook(route_name):
    import numpy as np

    buffer = np.arange(3, dtype=np.uint8)
    iface = {"data": (buffer.ctypes.data, False), "shape": (3,), "typestr": "|u1", "version": 3}
    errors: list = []
    ns = load("import numpy as np\n" + RAW_MEMORY_ROUTES[route_name], errors=errors, IFACE=iface)
    a = ns.get("a")
    assert a is None or np.asarray(a).dtype != np.uint8, (route_name, a)


def test_no_class_answers_numpy_s_raw_memory_names_from_what_it_holds():
    """Every class of the worker's process, those of the modules imported before learner code runs and those a
    learner's import brings (matplotlib's, here imported only then), has attribute hooks that answer the names of
    guard.RAW_MEMORY as Python's own (C's) do, or sealed: the generic form of the routes above."""
    import subprocess
    import sys

    script = """
import sys, types
import numpy, torch
from autograder.inside import guard
from autograder.verdict import policy
assert "matplotlib.spines" not in sys.modules
pol = guard.Policy(policy.runtime(policy.COURSE_LIBRARY))
pol.prepare()
pol.module("matplotlib.pyplot"), pol.module("matplotlib.spines"), pol.module("numpy.lib")
seen, stack, open_ = set(), [object], []
while stack:
    for sub in type.__subclasses__(stack.pop()):
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        stack.append(sub)
        for name in ("__getattr__", "__getattribute__"):
            hook = next((vars(k)[name] for k in sub.__mro__ if name in vars(k)), None)
            if hook is not None and not isinstance(hook, types.WrapperDescriptorType) and hook not in guard._SEALED:
                open_.append(f"{sub.__module__}.{sub.__qualname__}.{name}")
print(len(seen), "classes")
assert "matplotlib.spines" in sys.modules
assert not open_, open_
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_numpy_reads_no_raw_memory_from_a_class_of_the_learner_s():
    """numpy asks an object for `__array_interface__` (an address and a size): no class of the learner's answers, not
    by its __getattr__ nor by what its instances hold. (The answer here has no address: numpy would say it lacks a
    typestr if it read it.)"""
    ns = load("import numpy as np\nclass A:\n    def __getattr__(self, name):\n"
              "        if name == '__array_interface__':\n            return {'shape': (1,)}\n"
              "        raise AttributeError(name)\n"
              "a = np.asarray(A())\n")
    assert ns["a"].dtype == object


def test_a_module_outside_the_allow_list_answers_nothing_however_it_was_reached():
    """A module a call returned (torch.backends.opt_einsum.get_opt_einsum gives one) meets the import's allow-list."""
    import sys

    (line, e), = load("m = given.modules\n", given=sys)["__skipped__"]     # at a cell's top level: skipped
    assert isinstance(e, guard.PolicyError) and "the module sys" in str(e) and line == 1


def test_a_refused_library_version_names_itself_and_the_rest_is_the_policy_s():
    """A library version of the exercise raises RefusedError naming it (the trusted side scores the part 0 from the
    error's type); anything else the policy refuses is a PolicyError that says what."""
    q, k, v = qkv()
    ns = load("def f(q):\n    return torch.nn.functional.scaled_dot_product_attention(q, q, q)\n",
              library=r"(?i)attention")
    with pytest.raises(guard.RefusedError, match="scaled_dot_product_attention") as e:
        ns["f"](q)
    assert not isinstance(e.value, guard.PolicyError)
    (_, e), = load("import os\n")["__skipped__"]
    assert isinstance(e, guard.PolicyError) and "importing os" in str(e)


def test_course_code_may_use_the_library_learner_code_may_not():
    ns = load("def f(q):\n    return torch.nn.functional.scaled_dot_product_attention(q, q, q)\n", library=None)
    assert ns["f"](qkv()[0]).shape == (2, 5, 4)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(st.lists(st.sampled_from(IDIOMS), min_size=1, max_size=6))
def test_generated_honest_code_runs(idioms):
    header = "import functools\nimport operator\nimport types\nimport itertools\nimport collections\n" \
             "import dataclasses\nimport typing\nimport numpy as np\nDEBUG = False\n\n\n"
    body = "\n".join("        " + line for idiom in idioms for line in idiom.splitlines())
    source = header + ("class LayerNorm(nn.Module):\n    def forward(self, x):\n" + body + "\n        return x\n")
    ns = load(source)
    assert ns["LayerNorm"]()(torch.ones(2, 3)).shape == (2, 3)


HONEST = {
    "str.format and format_map with specs, conversions, indexes and attributes": (
        "t = torch.zeros(2, 3)\nclass D(dict):\n    def __missing__(self, k):\n        return '?' + k\n"
        "assert '{:.3f}'.format(1.23456) == '1.235' and '{0} {name} {0!r:>6}'.format('a', name=2) == \"a 2    'a'\"\n"
        "assert '{a[0]} {x.shape}'.format(a=[1], x=t) == '1 torch.Size([2, 3])' and str.format('{}', 1) == '1'\n"
        "assert '{a} {b}'.format_map(D(a=1)) == '1 ?b' and '{:{w}d}'.format(5, w=4) == '   5'\n"
        "assert list(map('{:02d}'.format, range(2))) == ['00', '01']\n"),
    "a named tuple's own methods and fields, whose names start with an underscore": (
        "import collections\nPair = collections.namedtuple('Pair', 'a b')\np = Pair(1, 2)._replace(b=3)\n"
        "assert p._asdict() == {'a': 1, 'b': 3} and Pair._fields == p._fields == ('a', 'b')\n"
        "assert Pair._make([4, 5]) == (4, 5)\n"),
    "a plot and a seeded self-check at the end of a cell": (
        "import matplotlib\nimport matplotlib.pyplot as plt\nimport numpy as np\nnp.random.seed(0)\n"
        "fig, ax = plt.subplots()\nax.plot(np.linalg.norm(np.random.randn(3, 4), axis=1))\nplt.close(fig)\n"),
    "public submodules of allowed packages": (
        "import collections.abc\nimport numpy.random\nimport numpy.linalg\nfrom torch.utils.checkpoint import "
        "checkpoint\nassert isinstance([], collections.abc.Sequence)\n"),
    "torch's switches for deterministic arithmetic": (
        "torch.backends.cudnn.deterministic = True\ntorch.backends.cudnn.benchmark = False\n"),
    "a module's own state, buffers and private attributes": (
        "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self._cache = {}\n"
        "        self.register_buffer('pe', torch.zeros(3))\n        self.steps = 0\n"
        "    def forward(self, x):\n        self.steps += 1\n        self._cache[x.shape] = x\n"
        "        a, self.last = x.sum(), x.mean()\n        del self.last\n        return x + self.pe.sum()\n"
        "m = M()\nassert m(torch.ones(3)).shape == (3,) and m.steps == 1\n"),
    "a dataclass, a namedtuple, a property and a metaclass of its own": (
        "import dataclasses, collections, typing\n@dataclasses.dataclass\nclass Cfg:\n    d: int = 4\n"
        "P = collections.namedtuple('P', 'a b')\nclass Meta(type):\n    pass\nclass K(metaclass=Meta):\n"
        "    @property\n    def twice(self):\n        return 2\nassert K().twice == 2 and isinstance(K, type)\n"
        "assert Cfg().d == 4 and P(1, 2).b == 2 and typing.cast(int, 3) == 3\n"),
    "functools' wrappers, a cached property, a dataclass and lazy annotations": (
        "from __future__ import annotations\nimport functools, dataclasses\n"
        "def deco(f):\n    @functools.wraps(f)\n    def inner(*a, **k):\n        return f(*a, **k)\n    return inner\n"
        "@deco\ndef twice(x: torch.Tensor) -> torch.Tensor:\n    return 2 * x\n"
        "@dataclasses.dataclass(frozen=True)\nclass Cfg:\n    d_model: int = 4\n"
        "class M(nn.Module):\n    @functools.cached_property\n    def scale(self) -> float:\n        return 0.5\n"
        "assert twice.__name__ == 'twice' and twice(torch.ones(1)).item() == 2 and M().scale == 0.5\n"
        "assert Cfg().d_model == 4 and twice.__annotations__['x'] == 'torch.Tensor'\n"),
    "a progress bar": (
        "from tqdm import tqdm\nfrom tqdm.auto import trange\ntotal = sum(i for i in tqdm(range(3), disable=True))\n"
        "assert total == 3 and list(trange(2, disable=True)) == [0, 1]\n"),
    "a frozen dataclass with slots, and a registry of subclasses through __init_subclass__": (
        "import dataclasses\n@dataclasses.dataclass(slots=True, frozen=True)\nclass Cfg:\n    d: int\n    h: int = 2\n"
        "class Reg:\n    subs = []\n    def __init_subclass__(cls, tag=None, **kw):\n"
        "        super().__init_subclass__(**kw)\n        Reg.subs.append((cls.__name__, tag))\n"
        "class S(Reg, tag='x'):\n    pass\nassert Cfg(4).h == 2 and Reg.subs == [('S', 'x')]\n"),
    "tensors' attributes set, gradients read": (
        "w = torch.ones(3)\nw.requires_grad = True\n(w * 2).sum().backward()\nassert w.grad is not None\n"
        "w.grad = None\n"),
}


@pytest.mark.parametrize("what", sorted(HONEST))
def test_honest_idioms_run(what):
    load(HONEST[what])


def test_ipython_syntax_runs_as_in_jupyter():
    """A magic left in a cell costs nothing: `%timeit` does nothing, `%time` and `%%time` run their code."""
    cell = as_python("def f(x):\n    return x + 1\n%timeit f(1)\n%time y = f(2)\n!echo hi\n")
    ns = load(cell)
    assert ns["f"](1) == 2 and ns["y"] == 3
    ns = load(as_python("%%time\ndef g():\n    return 7\n"))
    assert ns["g"]() == 7


def test_a_helper_cell_the_learner_added_runs_only_when_the_answers_use_it():
    nb = variants.submission("positional_encoding", {"sinusoidal_encoding": (
        "def sinusoidal_encoding(seq_len, d_model, base=10000.0):\n    return _angles(seq_len, d_model, base)\n")})
    at = next(i for i, c in enumerate(nb.cells) if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
              == "sinusoidal_encoding")
    import nbformat

    helper = nbformat.v4.new_code_cell("import math\n\ndef _angles(L, d, base):\n    return torch.zeros(L, d)\n")
    plot = nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 2])\n")
    nb.cells[at:at] = [helper, plot]
    ids = [c["id"] for c in learner_cells(nb)]
    assert f"cell-{at}" in ids and f"cell-{at + 1}" not in ids, ids


def _draws(asg: str) -> list:
    """Six calls drawn per part, or as many as a grading draws where that is fewer (fused_attention's kernels run in
    Triton's interpreter, about a second a call)."""
    suite = __import__(f"autograder.verdict.suites.test_{asg}", fromlist=["CONTRACT"])
    count = min(6, getattr(suite, "DRAWN", 6))
    return [call for name, part in suite.CONTRACT.items() for call in contract.drawn_calls(part, 7, count)]


@pytest.mark.parametrize("asg", ASSIGNMENTS)
@pytest.mark.full     # make test grades every correct answer and a sample of mistakes under it (test_variants.py)
def test_every_known_answer_runs_under_the_policy(asg):
    """Every known answer (correct or not) and the course's own loads without a refusal and answers the contract's
    calls as it does without the guards: the policy refuses nothing a learner honestly writes."""
    suite = __import__(f"autograder.verdict.suites.test_{asg}", fromlist=["LIBRARY"])
    calls = _draws(asg)
    for variant in [None, *(v for a, v in all_variants() if a == asg)]:
        cells = learner_cells(variants.submission(asg, variant.cells if variant else None))
        errors: list = []
        guarded = load(*(c["source"] for c in cells[1:]), library=suite.LIBRARY, errors=errors,
                       modules=getattr(suite, "ALLOWED_MODULES", ()), setup=cells[0]["source"])
        # a self-check against the library at module level stops where it stands (the static reading notes it)
        assert all(type(e) is guard.RefusedError for e in errors), (variant and variant.name, errors)
        plain = variants.executed(asg, variant.cells if variant else {})
        for call in calls:
            got, want = contract.run_here(guarded, call), contract.run_here(plain, call)
            if got.get("raised") == "RefusedError" and isinstance(variant, variants.Bug):
                assert "library" in " ".join(variant.fails.values()), variant.name     # the mistake is its use
                continue
            assert got.get("raised") == want.get("raised"), (variant and variant.name, str(call), got, want)


def test_a_statement_the_policy_refuses_at_a_cell_s_top_level_is_skipped_and_the_cell_goes_on():
    """A self-check against the library version before the part, in the part's cell: in Jupyter the cell runs on, so
    here the refused statement alone is skipped (its line said), and the class after it is defined."""
    ns = load("def _norm(x):\n    return x - x.mean(-1, keepdim=True)\n\n"
              "_x = torch.randn(2, 8)\nassert torch.allclose(_norm(_x), torch.nn.functional.layer_norm(_x, (8,)))\n"
              "class LayerNorm(nn.Module):\n    pass\n")
    (line, e), = ns["__skipped__"]
    assert line == 5 and "torch.nn.functional.layer_norm" in str(e) and "LayerNorm" in ns
    errors: list = []
    ns = load("assert torch.nn.functional.layer_norm is None\nx = undefined_name\ny = 1\n", errors=errors)
    assert len(ns["__skipped__"]) == 1 and isinstance(errors[0], NameError) and "y" not in ns   # any other error
