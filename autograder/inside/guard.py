"""The course's library policy, enforced while a learner's code runs (RestrictedPython's model).

A learner's cells are rewritten before they run (`compile_cell`): every attribute read, write and deletion goes
through a guard, every import through an allow-list, and the builtins they see are the course's (`Policy.builtins`):
no `eval`, `exec`, `compile`, `open`, `globals`, `vars`, and `getattr`, `setattr`, `delattr`, `hasattr` guarded. So
a name computed while the code runs meets the same policy as a name written in the source:

- no attribute of a frame, code object or traceback, no generator's or coroutine's frame (`gi_frame`, `f_back`,
  `f_builtins`, ... whatever the object), no underscore attribute of an object the learner's code did not make, no
  dunder attribute beyond the constructor's, names' and operators' (`DUNDERS`);
- no module outside the allowed ones (`Policy.modules`), reached by an import or as an attribute; no object the policy
  denies (the exercise's library versions, evaluators such as `typing.get_type_hints`, loaders such as `numpy.load`),
  whatever route reached it: a denied one raises `RefusedError`, which the trusted side reads as data;
- no write into a module, a class or a function the learner's code did not make (torch.backends' switches aside), and
  no class with a protocol attribute that hands numpy raw memory (`__array_interface__`).

The rewriting keeps line numbers, so a traceback names the learner's lines. This file is copied into the sandbox; it
imports nothing of the course, and the worker removes it from `sys.modules` before learner code runs.
"""
from __future__ import annotations
import __future__

import _string
import ast
import builtins
import enum
import keyword
import operator
import re
import string
import sys
import types
import weakref

PREFIX = "__g_"           # the names the rewriting adds (`__g_attr__`, ...); learner code that names one is refused
REFUSED = "the library version of an exercise was called"

# Attributes of the interpreter's insides, refused on any object (RestrictedPython's INSPECT_ATTRIBUTES and more).
INSPECT = frozenset({
    "f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_lasti", "f_lineno", "f_trace", "f_trace_lines",
    "f_trace_opcodes", "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "gi_suspended", "cr_frame", "cr_code",
    "cr_await", "cr_origin", "cr_running", "cr_suspended", "ag_frame", "ag_code", "ag_await", "ag_running",
    "tb_frame", "tb_next", "tb_lasti", "tb_lineno", "co_code", "co_consts", "co_names", "co_varnames",
    "co_cellvars", "co_freevars", "co_filename", "co_lnotab", "co_linetable", "co_exceptiontable",
    # a Cython function's (numpy.random's): its module's namespace, Python's own builtins in it, its code
    "func_globals", "func_code", "func_closure", "func_dict",
    # a class's method resolution order: of `type` (the policy's), Python's own `type`, which makes a class of any
    # namespace
    "mro"})
INSIDES = (types.FrameType, types.CodeType, types.TracebackType)
# Dunder attributes honest code reads (constructors, names, operators); any other reaches an object's internals.
DUNDERS = frozenset({
    "__init__", "__name__", "__qualname__", "__doc__", "__class__", "__len__", "__call__", "__repr__", "__str__",
    "__iter__", "__next__", "__enter__", "__exit__", "__getitem__", "__setitem__", "__contains__", "__eq__", "__ne__",
    "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__", "__version__", "__add__", "__sub__", "__mul__",
    "__matmul__", "__truediv__", "__floordiv__", "__mod__", "__pow__", "__neg__", "__pos__", "__abs__", "__radd__",
    "__rsub__", "__rmul__", "__rtruediv__", "__rmatmul__", "__and__", "__or__", "__xor__", "__invert__",
    "__float__", "__int__", "__index__", "__annotations__", "__module__", "__init_subclass__"})
# Dunder names a learner's code may use as names (a module's own name, a class's cell for super()).
NAMES = frozenset({"__name__", "__doc__", "__class__", "__debug__", "__annotations__", "__qualname__", "__module__",
                   "__slots__", "__all__"}) | DUNDERS
# Class attributes through which numpy and torch read raw memory: no class of the learner's may define them.
RAW_MEMORY = frozenset({"__array_interface__", "__array_struct__", "__cuda_array_interface__"})
# Dunder methods no class of the learner's may define: the state `copy` restores without the guards (it sets the
# attributes a reduction names on the object it makes), and the hook that answers every attribute read. (A class's
# `__getattr__` is kept, but never answers the names of RAW_MEMORY: Policy._own_class.)
CLASS_REFUSED = RAW_MEMORY | {"__reduce__", "__reduce_ex__", "__getstate__", "__getattribute__"}
# A named tuple's public methods and fields, whose names start with an underscore so as not to meet its fields'.
NAMED_TUPLE = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})
# Builtins a course's code never needs: each refuses with its name.
REFUSED_BUILTINS = ("eval", "exec", "compile", "open", "globals", "locals", "vars", "breakpoint", "input", "help",
                    "exit", "quit", "memoryview", "__import__", "__loader__", "__spec__", "id")


class RefusedError(RuntimeError):
    """What the policy refuses: a library version of the exercise (`what` names it: REFUSED in the message) or, as a
    PolicyError, a reach into the interpreter's or the grader's insides."""

    def __init__(self, message: str, what: str = ""):
        super().__init__(message)
        self.what = what


def refuse_library(what: str):
    """A library version of the exercise was reached: it fails, naming itself (the trusted side scores 0 the part
    whose test met it, from the error's `what`)."""
    raise RefusedError(f"{REFUSED} ({what}): write this part yourself", what)


class PolicyError(RefusedError):
    """A reach the policy refuses that is not a library version: into the interpreter, the grader, or a module
    outside the allowed ones."""


def _refuse(what: str):
    raise PolicyError(f"{what} is not allowed in the course's code (the grader enforces its library policy while "
                      "your code runs)")


class Policy:
    """What learner code may reach, from the request's plain data: {"modules": allowed module names, a package
    allowing what is under it; "denied": dotted names of modules and objects refused; "library": the exercise's
    pattern of library versions, refused in torch's namespaces; "writable": dotted names of module attributes code
    may set}."""

    def __init__(self, data: dict | None):
        data = data or {}
        self.modules = tuple(str(m) for m in data.get("modules", ()))
        self.denied_names = tuple(str(d) for d in data.get("denied", ()))
        self.library = re.compile(str(data["library"])) if data.get("library") else None
        self.library_names: dict[str, bool] = {}          # attribute name -> whether the library pattern names it
        self.writable = frozenset(str(w) for w in data.get("writable", ()))
        # classes whose instances read and write the attributes of an object the caller chose (found by name, as the
        # denied objects are): learner code reads and writes no attribute of theirs
        self.proxies: tuple[type, ...] = ()
        # id -> (an object of an allowed module that reaches past the guards, what learner code gets instead)
        self.substitutes: dict[int, tuple[object, object]] = {}
        # id -> (the object, kept alive; its name; whether it is a library version of the exercise)
        self.denied: dict[int, tuple[object, str, bool]] = {}
        self.module_ok: dict[str, bool] = {}
        self.pending = list(self.denied_names)              # denied names whose module is not imported yet
        self.pending_proxies = [str(p) for p in data.get("proxies", ())]
        self.seen_modules = 0                               # len(sys.modules) when the policy last looked
        self.swept: set[str] = set()                        # the names of the modules whose classes are sealed
        # method name -> the classes on whose objects it is refused, and why ({"module.Class.method": why} in the data)
        self.methods: dict[str, tuple[type, ...]] = {}
        self.pending_methods = [str(m) for m in data.get("methods", {})]
        self.methods_why = {str(m).rpartition(".")[2]: str(why) for m, why in data.get("methods", {}).items()}
        self.foreign = tuple(str(m) for m in data.get("foreign", ()))    # modules none of whose objects is held
        self.foreign_modules: dict[str, bool] = {}          # module -> whether it is under an entry of `foreign`
        self.owned: weakref.WeakSet = weakref.WeakSet()     # the classes the learner's code made
        self.ns: dict = {}
        self.type_ = _guarded_type(self)                     # `type` as learner code sees it
    # -- what is denied, found once before learner code runs -------------------------------------------------
    def prepare(self):
        """Resolve the denied names of the modules imported so far, and the exercise's library versions, to the
        objects they name (a module imported later resolves its own when it is imported: `module`)."""
        import dataclasses
        import functools
        import importlib
        import sys

        for original, substitute in ((functools.update_wrapper, self.update_wrapper), (functools.wraps, self.wraps),
                                     (dataclasses.dataclass, self.dataclass)):
            self.substitutes[id(original)] = (original, substitute)
        self.seen_modules = len(sys.modules)
        self.swept = set(sys.modules)
        self.resolve_denied()
        seal_classes()
        if self.library is not None and "torch" in sys.modules:
            torch = sys.modules["torch"]
            spaces = [("torch", torch), ("torch.nn", torch.nn), ("torch.nn.functional", torch.nn.functional),
                      ("torch.Tensor", torch.Tensor), ("torch.special", torch.special), ("torch.linalg", torch.linalg)]
            for mod in list(sys.modules):
                if mod.startswith("torch.nn.modules.") and mod.count(".") == 3:
                    spaces.append((mod, importlib.import_module(mod)))
            for where, space in spaces:
                for attr in dir(space):
                    if attr.startswith("_") or not self.library.search(attr):
                        continue
                    try:
                        obj = getattr(space, attr)
                    except Exception:  # noqa: BLE001 - a lazy attribute that cannot load is nothing to refuse
                        continue
                    if callable(obj) and not isinstance(obj, types.ModuleType):
                        self.denied[id(obj)] = (obj, f"{where}.{attr}", True)

    def resolve_denied(self):
        """The denied names of the modules imported by now, as objects (without importing anything)."""
        pending = []
        for name in self.pending:
            found, obj = _lookup(name)
            if not found:
                pending.append(name)
            elif obj is not None and not isinstance(obj, types.ModuleType):
                self.denied[id(obj)] = (obj, name, False)
        self.pending = pending
        proxies = []
        for name in self.pending_proxies:
            found, obj = _lookup(name)
            if not found:
                proxies.append(name)
            elif isinstance(obj, type):
                self.proxies += (obj,)
        self.pending_proxies = proxies
        methods = []
        for dotted in self.pending_methods:
            where, _, name = dotted.rpartition(".")
            found, cls = _lookup(where)
            if not found:
                methods.append(dotted)
            elif isinstance(cls, type):
                self.methods[name] = (*self.methods.get(name, ()), cls)
        self.pending_methods = methods

    def imported(self):
        """The modules imported since the policy last looked (by learner code, or by a library in a call): their
        denied names resolved, their classes sealed before learner code holds one of their objects."""
        self.seen_modules = len(sys.modules)
        new = [m for name, m in list(sys.modules.items()) if name not in self.swept and isinstance(m, types.ModuleType)]
        self.swept.update(sys.modules)
        if self.pending or self.pending_proxies or self.pending_methods:
            self.resolve_denied()
        seal_classes(new)

    def allowed_module(self, name: str) -> bool:
        ok = self.module_ok.get(name)
        if ok is None:
            parts = name.split(".")
            allow, deny = _longest(name, self.modules), _longest(name, self.denied_names)
            ok = (not any(p.startswith("_") or p == "tests" for p in parts) and allow >= 0 and allow > deny
                  and not (self.library is not None and parts[0] == "torch"
                           and any(self.library.search(p) for p in parts[1:])))
            self.module_ok[name] = ok
        return ok

    def owns(self, obj) -> bool:
        """Whether the learner's code made `obj`: a class of its own, an instance of one, a function of its own."""
        try:
            if isinstance(obj, type):
                return obj in self.owned
            if type(obj) in self.owned:
                return True
            return type(obj) is types.FunctionType and obj.__globals__ is self.ns
        except TypeError:                     # not weakly referenceable: not a class the learner's code made
            return False

    def checked(self, value, what: str):
        """`value` as learner code may hold it: an allowed module, or anything the policy does not deny."""
        if (type(value) is types.BuiltinMethodType and isinstance(value.__self__, str)
                and value.__name__ in ("format", "format_map")) or value is str.format or value is str.format_map:
            return self.formatting(value)
        if len(sys.modules) != self.seen_modules:
            self.imported()
        if isinstance(value, types.ModuleType):
            name = getattr(value, "__name__", None)
            if type(name) is not str or not self.allowed_module(name):
                _refuse(f"the module {name}")
            return value
        if isinstance(value, type) and (issubclass(value, type) or type(value) is not type):
            if value is type:
                return self.type_
            if value is types.SimpleNamespace:
                return _Namespace
            if issubclass(value, type) and not self.owns(value) and value is not _Namespace:
                _refuse(f"the metaclass {getattr(value, '__name__', '?')}")     # it makes classes of any namespace
            if isinstance(value, enum.EnumMeta):
                _refuse(f"the enumeration {getattr(value, '__name__', '?')}")   # its functional API does too
        elif value is types.SimpleNamespace:
            return _Namespace
        home = self.foreign_home(value)
        if home:
            _refuse(f"{what}, an object of {home}")
        hit = self.denied.get(id(value))
        if hit is not None and hit[0] is value:
            if hit[2]:
                refuse_library(hit[1])
            _refuse(hit[1])
        sub = self.substitutes.get(id(value))
        if sub is not None and sub[0] is value:
            return sub[1]
        if self.proxies and isinstance(value, self.proxies):
            _refuse(f"a {type(value).__name__}, which reads and writes another object's attributes")
        return value

    def foreign_home(self, value) -> str:
        """The module of FOREIGN (autograder.verdict.policy) that made `value` (a class, a function, or an instance of
        either), wherever an allowed module holds it; "" when none did."""
        cls = type(value)
        homes = [_MODULE_OF(cls)]
        if isinstance(value, type):
            homes.append(_MODULE_OF(value))
        elif cls in _FUNCTIONS:
            homes.append(getattr(value, "__module__", None))
        for home in homes:
            if type(home) is str and self.foreign_module(home):
                return home
        return ""

    def foreign_module(self, module: str) -> bool:
        """Whether `module` is or is under an entry of FOREIGN."""
        hit = self.foreign_modules.get(module)
        if hit is None:
            hit = self.foreign_modules[module] = _longest(module, self.foreign) >= 0
        return hit

    def library_name(self, obj, name: str) -> None:
        """A name of the exercise's library versions read from one of torch's modules or classes (wherever it lives:
        torch.ao's copies too) is the library version, whatever object it names."""
        if self.library is None:
            return
        if isinstance(obj, types.ModuleType):
            module = vars(obj).get("__name__")
        elif isinstance(obj, type):
            module = vars(obj).get("__module__")
        else:
            return
        if type(module) is not str or module.split(".")[0] != "torch":
            return
        hit = self.library_names.get(name)
        if hit is None:
            hit = self.library_names[name] = bool(self.library.search(name))
        if hit:
            where = module if isinstance(obj, types.ModuleType) else \
                f"{module}.{type.__dict__['__qualname__'].__get__(obj)}"
            refuse_library(f"{where}.{name}")

    # -- the guards ------------------------------------------------------------------------------------------
    def readable(self, obj, name) -> None:
        if type(name) is not str:
            raise TypeError("attribute name must be a string")
        if name in INSPECT or isinstance(obj, INSIDES):
            _refuse(f"the attribute {name}")
        if isinstance(obj, types.ModuleType):          # a module a call returned: the import's allow-list holds too
            where = vars(obj).get("__name__")
            if type(where) is not str or not self.allowed_module(where):
                _refuse(f"the module {where}")
        if self.proxies and isinstance(obj, self.proxies):
            _refuse(f"the attribute {name} of a {type(obj).__name__}, which reads another object's attributes")
        home = self.foreign_home(obj)
        if home:
            _refuse(f"the attribute {name} of an object of {home}")
        classes = self.methods.get(name)
        if classes:
            if type(obj) is super:                      # super(C, obj).name: the method of obj's classes
                obj = super.__dict__["__self_class__"].__get__(obj) or super.__dict__["__thisclass__"].__get__(obj)
            if isinstance(obj, classes) or (isinstance(obj, type) and issubclass(obj, classes)):
                _refuse(f"{name} on a {getattr(obj, '__name__', type(obj).__name__)} ({self.methods_why[name]})")
        if name[:1] == "_":
            if name[:2] == "__" and name[-2:] == "__":
                if name not in DUNDERS or (name == "__annotations__" and not self.owns(obj)):
                    _refuse(f"the attribute {name}")     # a library's annotations hold Python's own `type`
            elif not self.owns(obj) and not (name in NAMED_TUPLE and (isinstance(obj, tuple) or (
                    isinstance(obj, type) and issubclass(obj, tuple)))):
                _refuse(f"the private attribute {name} of a {type(obj).__name__}")

    def getattr(self, obj, name, *default):
        self.readable(obj, name)
        self.library_name(obj, name)
        return self.checked(getattr(obj, name, *default), name)

    def hasattr(self, obj, name) -> bool:
        try:
            self.getattr(obj, name)
        except AttributeError:
            return False
        return True

    def writable_on(self, obj, name) -> None:
        if type(name) is not str:
            raise TypeError("attribute name must be a string")
        if name in INSPECT or (name[:2] == "__" and name[-2:] == "__"):
            _refuse(f"setting the attribute {name}")
        if self.proxies and isinstance(obj, self.proxies):
            _refuse(f"setting the attribute {name} of a {type(obj).__name__}, which sets another object's attributes")
        if self.owns(obj):
            return
        if name[:1] == "_":
            _refuse(f"setting the private attribute {name} of a {type(obj).__name__}")
        if hasattr(type(obj), "__get__"):      # a descriptor's state (cached_property.attrname) names what it sets
            _refuse(f"setting {name} on a {type(obj).__name__} your code did not make")
        if isinstance(obj, types.ModuleType):
            if f"{getattr(obj, '__name__', '')}.{name}" not in self.writable:
                _refuse(f"setting {name} in the module {getattr(obj, '__name__', '?')}")
            return
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
            _refuse(f"setting {name} on {getattr(obj, '__name__', type(obj).__name__)}, which your code did not make")

    def setattr(self, obj, name, value):
        self.writable_on(obj, name)
        setattr(obj, name, value)

    def delattr(self, obj, name):
        self.writable_on(obj, name)
        delattr(obj, name)

    def module(self, name):
        """`import name` (the module itself; the rewriting binds its top package where Python would)."""
        import importlib

        if type(name) is not str or not self.allowed_module(name):
            _refuse(f"importing {name}")
        mod = importlib.import_module(name)
        return self.checked(mod, name)

    def top(self, name):
        """`import a.b.c` binds `a`."""
        self.module(name)
        return self.module(name.partition(".")[0])

    def names(self, module: str, names: tuple):
        """`from module import a, b`: each as an attribute read, or a submodule's import."""
        mod = self.module(module)
        out = []
        for n in names:
            self.readable(mod, n)
            self.library_name(mod, n)
            try:
                value = getattr(mod, n)
            except AttributeError:
                value = self.module(f"{module}.{n}")
            out.append(self.checked(value, n))
        return tuple(out)

    def formatting(self, method):
        """str.format or str.format_map (bound to a string, or not) as learner code gets it: Python's own read each
        field's attributes and items (`{0.__traceback__.tb_frame}`) in C, past the guards; these read each through
        them, as the learner's own code would."""
        policy, bound = self, getattr(method, "__self__", None)
        name = method.__name__

        class Fields(string.Formatter):
            def get_field(self, field_name, args, kwargs):
                first, rest = _string.formatter_field_name_split(field_name)
                obj = self.get_value(first, args, kwargs)
                for is_attr, key in rest:
                    obj = policy.getattr(obj, key) if is_attr else obj[key]
                return obj, first

        def format(*args, **kwargs):
            template, args = (bound, args) if isinstance(bound, str) else (args[0], args[1:])
            if type(template) is not str and not isinstance(template, str):
                raise TypeError(f"descriptor '{name}' requires a 'str' object")
            if name == "format_map":
                (mapping,) = args
                return Fields().vformat(template, (), mapping)
            return Fields().vformat(template, args, kwargs)

        format.__name__ = format.__qualname__ = name
        return format

    def build_class(self, func, name, *bases, **kw):
        # What a base's __mro_entries__ puts in its place meets the policy as a base named in the source does:
        # typing.Type[int] stands for Python's own `type`, a metaclass of any namespace. Resolved once: the bases
        # checked are those the metaclass is chosen from.
        resolved = types.resolve_bases(bases)
        for base in resolved:
            if any(base is b for b in bases):
                continue                                   # one the learner's code holds: it met the policy
            if isinstance(base, type) and self.foreign_metaclass(base):
                _refuse(f"a class derived from {getattr(base, '__name__', '?')}, which makes classes of any namespace")
            self.checked(base, "a base class")
        meta = kw.pop("metaclass", type(resolved[0]) if resolved else type)
        if isinstance(meta, type):                # the metaclass Python would choose: the most derived of them
            for base in resolved:
                if type(base) not in _MRO_OF(meta):
                    if meta not in _MRO_OF(type(base)):
                        raise TypeError("metaclass conflict: the metaclass of a derived class must be a (non-strict) "
                                        "subclass of the metaclasses of all its bases")
                    meta = type(base)
        cls = builtins.__build_class__(func, name, *bases, metaclass=_ClassStatement(self, meta), **kw)
        self._own_class(cls)
        return cls

    def class_namespace(self, namespace) -> None:
        """A class body's namespace meets the policy before its class is made (and its descriptors' __set_name__ and
        its bases' __init_subclass__ run: learner code that may keep the class and stop its making before _own_class):
        no name of CLASS_REFUSED, no name but a plain string (Python's own view of a dict's keys, whatever a subclass
        of dict says), and the class safe from its first moment (_harden)."""
        if isinstance(namespace, dict):
            odd = [k for k, v in dict.items(namespace)
                   if type(k) is not str or (k in CLASS_REFUSED and not _safe(k, v))]
            if odd:
                _refuse(f"a class attribute {odd[0]!r}")
            _harden(namespace)

    def foreign_metaclass(self, cls: type) -> bool:
        """Whether `cls` is a metaclass not derived from the policy's `type`: one that makes classes of any namespace
        (its MRO read as Python's own `type` reads it, whatever the class says)."""
        return issubclass(cls, type) and self.type_ not in type.__dict__["__mro__"].__get__(cls)

    def _own_class(self, cls):
        if self.foreign_metaclass(cls):
            _refuse("a metaclass not derived from the policy's type")      # it would make classes of any namespace
        space = vars(cls)
        raw = [n for n in CLASS_REFUSED.intersection(space) if not _safe(n, space[n])]
        if raw:
            _refuse(f"a class attribute {sorted(raw)[0]}")
        # numpy asks an object for RAW_MEMORY: a class of the learner's answers nothing, whatever its instances hold
        # (a class attribute that is a data descriptor comes first) and whatever its __getattr__ would say
        for name in RAW_MEMORY:
            type.__setattr__(cls, name, _NO_RAW_MEMORY)
        _seal(cls)                              # a __getattr__ of its own or inherited (nn.Module's answers buffers)
        self.owned.add(cls)

    # -- what learner code gets for functools' wrappers and dataclasses.dataclass -----------------------------------
    def update_wrapper(self, wrapper, wrapped, assigned=None, updated=None):
        """functools.update_wrapper as learner code gets it: onto an object of its own, the attributes functools copies
        by default (readable anyway) and the public names of `wrapped`'s namespace (another object's attributes named
        by the caller, or its private names, would be read past the guards)."""
        import functools

        assigned = functools.WRAPPER_ASSIGNMENTS if assigned is None else tuple(assigned)
        updated = functools.WRAPPER_UPDATES if updated is None else tuple(updated)
        if not all(type(a) is str and a in functools.WRAPPER_ASSIGNMENTS for a in assigned) or not all(
                type(u) is str and u in functools.WRAPPER_UPDATES for u in updated):
            _refuse("functools.update_wrapper with attributes of your choice")
        if not self.owns(wrapper):
            _refuse(f"functools.update_wrapper onto a {type(wrapper).__name__} your code did not make")
        if updated and isinstance(wrapped, (type, types.ModuleType)) and not self.owns(wrapped):
            _refuse(f"functools.update_wrapper copying the namespace of {getattr(wrapped, '__name__', '?')}")
        out = functools.update_wrapper(wrapper, wrapped, assigned, ())
        space = getattr(wrapped, "__dict__", None) if updated else None
        if isinstance(space, (dict, types.MappingProxyType)):
            mine = getattr(wrapper, "__dict__", None)
            if type(mine) is dict:
                mine.update({k: v for k, v in space.items() if type(k) is str and k[:1] != "_"})
        return out

    def wraps(self, wrapped, assigned=None, updated=None):
        import functools

        return functools.partial(self.update_wrapper, wrapped=wrapped, assigned=assigned, updated=updated)

    def dataclass(self, cls=None, /, **kwargs):
        """dataclasses.dataclass as learner code gets it: for a class of its own, whose fields have plain names
        (dataclasses writes each name into the code of the methods it compiles, and sets it on every instance)."""
        import dataclasses

        def wrap(c):
            if not self.owns(c) or not isinstance(c, type):
                _refuse(f"dataclasses.dataclass on {getattr(c, '__name__', type(c).__name__)}, which your code did "
                        "not make")
            names = vars(c).get("__annotations__", {})
            odd = [k for k in names if type(k) is not str or not k.isidentifier() or keyword.iskeyword(k)
                   or (k[:2] == "__" and k[-2:] == "__")]
            if odd:
                _refuse(f"a dataclass field named {odd[0]!r}")
            made = dataclasses.dataclass(c, **kwargs)
            if made is not c:                          # a class made anew (slots=True): made by the learner's code
                self._own_class(made)
            return made

        return wrap if cls is None else wrap(cls)

    def type(self, *args, **kwargs):
        if len(args) == 1 and not kwargs:
            return self.checked(type(args[0]), "type")
        if len(args) == 3 and isinstance(args[2], dict):
            odd = [k for k, v in dict.items(args[2]) if type(k) is not str or (
                k[:2] == "__" and k not in NAMES and k not in DUNDERS and not _safe(k, v))]
            if odd:
                _refuse(f"a class attribute {odd[0]!r}")
            namespace = dict(dict.items(args[2]))
            _harden(namespace)
            args = (args[0], args[1], namespace)
        cls = type(*args, **kwargs)
        self._own_class(cls)
        return cls

    # -- the names learner code is given ---------------------------------------------------------------------
    def builtins(self, run_cell) -> dict:
        """The builtins of the learner's module: Python's, with the guards in place of what reaches past the policy.
        `run_cell(source)`: runs a cell's code, for the IPython magics that run one (`%%time`, `%%capture`)."""
        safe = {k: v for k, v in vars(builtins).items() if k not in REFUSED_BUILTINS and not k.startswith("__")}

        def refused(name):
            def refuse(*args, **kwargs):
                _refuse(f"{name}()")
            refuse.__name__ = refuse.__qualname__ = name
            return refuse

        safe.update({name: refused(name) for name in REFUSED_BUILTINS if not name.startswith("__")})
        safe.update({"getattr": self.getattr, "setattr": self.setattr, "delattr": self.delattr,
                     "hasattr": self.hasattr, "type": self.type_, "__build_class__": self.build_class,
                     # what C code that runs in a learner's frame imports with (PyImport_Import reads the frame's
                     # builtins): no name of learner code reaches it, as the rewriting refuses `__import__`
                     "__import__": builtins.__import__, "__name__": "builtins",
                     "get_ipython": lambda: _IPython(run_cell),
                     f"{PREFIX}attr__": self.getattr, f"{PREFIX}set__": self.setattr, f"{PREFIX}del__": self.delattr,
                     f"{PREFIX}module__": self.module, f"{PREFIX}top__": self.top, f"{PREFIX}names__": self.names,
                     f"{PREFIX}inplace__": _inplace})
        return safe


class _NoRawMemory:
    """A class attribute, under each name of RAW_MEMORY, of every class the learner's code makes: it answers nothing
    (a data descriptor of the class comes before what an instance's namespace holds) and cannot be set."""

    __slots__ = ()

    def __get__(self, obj, owner=None):
        raise AttributeError("a raw-memory protocol attribute")

    def __set__(self, obj, value):
        _refuse("setting a raw-memory protocol attribute")

    def __delete__(self, obj):
        _refuse("deleting a raw-memory protocol attribute")


_NO_RAW_MEMORY = _NoRawMemory()


def _bound(hook, obj):
    return hook.__get__(obj, type(obj)) if hasattr(type(hook), "__get__") else hook


def _without_raw_memory(hook):
    """A class's `__getattr__` that never answers the names through which numpy reads raw memory."""
    def __getattr__(self, name):
        if name in RAW_MEMORY:
            raise AttributeError(name)
        return _bound(hook, self)(name)

    _SEALED.add(__getattr__)
    return __getattr__


def _raw_memory_as_declared(hook):
    """A class's `__getattribute__` that answers the names through which numpy reads raw memory as its classes declare
    them (ndarray's own, for numpy.recarray), never from what the hook would compute."""
    def __getattribute__(self, name):
        if name in RAW_MEMORY:
            declared = _declared(type(self), name)
            if declared is _MISSING:
                raise AttributeError(name)
            return _bound(declared, self)
        return _bound(hook, self)(name)

    _SEALED.add(__getattribute__)
    return __getattribute__


_SEALED: weakref.WeakSet = weakref.WeakSet()      # the hooks made here
_MISSING = object()


_MRO_OF = type.__dict__["__mro__"].__get__        # type's own, whatever a class or its metaclass says
_MODULE_OF = type.__dict__["__module__"].__get__
_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType)
_NAMESPACE_OF = type.__dict__["__dict__"].__get__


def _declared(cls, name):
    """What `cls` or the first of its bases that has `name` declares under it (Python's lookup on a class, whatever
    the class says its bases are), or _MISSING."""
    for klass in _MRO_OF(cls):
        space = _NAMESPACE_OF(klass)
        if name in space:
            return space[name]
    return _MISSING
_HOOKS = {"__getattr__": _without_raw_memory, "__getattribute__": _raw_memory_as_declared}


def _sealed(hook) -> bool:
    try:
        return hook in _SEALED
    except TypeError:                        # not weakly referenceable: none of the hooks made here
        return False


def _safe(name: str, value) -> bool:
    """Whether `value` under `name` is what the guards themselves put in a class (a raw-memory name answering nothing,
    an attribute hook sealed) or dataclasses' own state of a frozen class with slots (the values of its fields)."""
    import dataclasses

    return (name in RAW_MEMORY and value is _NO_RAW_MEMORY) or (name in _HOOKS and _sealed(value)) or (
        name == "__getstate__" and value is getattr(dataclasses, "_dataclass_getstate", None))


def _harden(namespace: dict) -> None:
    """A class's namespace as the class must hold it from its first moment, before its making runs any learner code:
    its raw-memory names answer nothing, its own attribute hooks are sealed (a class kept by a __set_name__ or an
    __init_subclass__ that then stops its making never meets Policy._own_class)."""
    for name in RAW_MEMORY:
        dict.__setitem__(namespace, name, _NO_RAW_MEMORY)
    for name, seal in _HOOKS.items():
        hook = dict.get(namespace, name)
        if hook is not None and not _sealed(hook) and not isinstance(
                hook, (types.WrapperDescriptorType, types.MethodWrapperType)):
            dict.__setitem__(namespace, name, seal(hook))


def _seal(cls) -> None:
    """`cls`'s attribute hooks, its own or inherited, never answer a name of RAW_MEMORY from what an object holds: a
    class whose `__getattr__` answers from a dict code may fill (nn.Module's buffers, matplotlib's Spines) would hand
    numpy an address of the learner's choosing. Python's own hooks (written in C) answer from the class's declarations
    and the instance's namespace, into which no guard lets a dunder name be written."""
    for name, seal in _HOOKS.items():
        hook = _declared(cls, name)
        if hook is _MISSING or hook is None or hook in _SEALED or isinstance(
                hook, (types.WrapperDescriptorType, types.MethodWrapperType)):
            continue
        try:
            type.__setattr__(cls, name, seal(hook))
        except TypeError:                   # a class whose metaclass sets its attributes (pybind11's), or of C
            try:
                setattr(cls, name, seal(hook))
            except (TypeError, AttributeError):     # a class of C whose namespace cannot change: its hook is C's
                pass


def seal_classes(modules=None) -> None:
    """Every class of the process (or those of `modules`, and their subclasses), as `_seal` leaves it: every class
    before learner code runs, and each module's imported after (a class a library makes later, in a call, inherits its
    base's sealed hook; a class of the learner's code is sealed when it is made)."""
    stack: list[type] = [object] if modules is None else \
        [c for m in modules for c in list(vars(m).values()) if isinstance(c, type)]
    seen = {id(c) for c in stack}
    for cls in stack:
        _seal(cls)
    while stack:
        cls = stack.pop()
        subclasses: list[type] = type.__subclasses__(cls)
        for sub in subclasses:
            if id(sub) not in seen:
                seen.add(id(sub))
                _seal(sub)
                stack.append(sub)


class _ClassStatement:
    """The metaclass a class statement of the learner's code is made with: the one Python would choose, called once the
    class body's namespace met the policy (Policy.class_namespace). A descriptor's __set_name__ runs while its class is
    made, before the class itself can be refused: functools.cached_property keeps the name it is given, under which it
    later sets an attribute of an instance (a __reduce_ex__, which copy.copy runs without the guards)."""

    def __init__(self, policy: Policy, meta):
        self.policy, self.meta = policy, meta

    def __prepare__(self, name, bases, **kwargs):
        prepare = getattr(self.meta, "__prepare__", None)
        return prepare(name, bases, **kwargs) if prepare is not None else {}

    def __call__(self, name, bases, namespace, **kwargs):
        self.policy.class_namespace(namespace)
        return self.meta(name, bases, namespace, **kwargs)


class _Namespace(types.SimpleNamespace):
    """types.SimpleNamespace as learner code gets it: its attributes are set as by the guards (no dunder names)."""

    def __init__(self, mapping=(), /, **kwargs):
        given = {**dict(mapping), **kwargs}
        odd = [k for k in given if type(k) is not str or k[:2] == "__"]
        if odd:
            _refuse(f"a namespace attribute {odd[0]!r}")
        super().__init__(**given)


_Namespace.__name__ = _Namespace.__qualname__ = "SimpleNamespace"


def _guarded_type(policy: Policy):
    """`type` as learner code sees it: `type(x)` is x's class, `isinstance(c, type)` holds for every class, and a class
    made by `type(name, bases, namespace)` meets the policy's checks (Policy.type)."""

    class _Meta(type):
        def __instancecheck__(cls, obj):
            return isinstance(obj, type)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, type)

    class guarded(type, metaclass=_Meta):
        def __new__(cls, *args, **kwargs):
            return policy.type(*args, **kwargs)

    guarded.__name__ = guarded.__qualname__ = "type"
    return guarded


class _IPython:
    """What `get_ipython()` gives a cell that IPython's input transformer rewrote (a `%magic` line): magics are the
    notebook's conveniences, not the graded code, so they do nothing here; `%%time` and `%%capture` run their cell's
    code once, as Jupyter does."""

    def __init__(self, run_cell):
        self._run_cell = run_cell

    def run_line_magic(self, magic, line, *args, **kwargs):
        if magic == "time":
            self._run_cell(line)
        return None

    def run_cell_magic(self, magic, line, cell):
        if magic in ("time", "capture"):
            self._run_cell(cell)
        return None

    def system(self, *args, **kwargs):
        return None

    getoutput = system


_INPLACE = {ast.Add: operator.iadd, ast.Sub: operator.isub, ast.Mult: operator.imul, ast.MatMult: operator.imatmul,
            ast.Div: operator.itruediv, ast.FloorDiv: operator.ifloordiv, ast.Mod: operator.imod,
            ast.Pow: operator.ipow, ast.LShift: operator.ilshift, ast.RShift: operator.irshift,
            ast.BitOr: operator.ior, ast.BitXor: operator.ixor, ast.BitAnd: operator.iand}
_INPLACE_BY_NAME = {op.__name__: fn for op, fn in _INPLACE.items()}


def _inplace(op: str, a, b):
    return _INPLACE_BY_NAME[op](a, b)


def _longest(path: str, entries) -> int:
    """The length of the longest entry that `path` is or is under (-1: none): the longer of an allowed and a denied
    entry decides (autograder.verdict.policy)."""
    return max((len(e) for e in entries if path == e or path.startswith(e + ".")), default=-1)


def _lookup(dotted: str) -> tuple[bool, object]:
    """(whether the module `dotted` lives in is imported, the object it names there or None), importing nothing."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        obj = sys.modules.get(".".join(parts[:i]))
        if obj is None:
            continue
        for p in parts[i:]:              # a module's own names only: its lazy ones (torch.onnx) are modules
            if isinstance(obj, types.ModuleType):
                obj = vars(obj).get(p)
                if obj is None:          # a submodule not imported yet (numpy.testing): looked up when it is
                    return False, None
            else:
                obj = getattr(obj, p, None)
            if obj is None:
                break
        return True, obj
    return False, None


# -- the rewriting ----------------------------------------------------------------------------------------------
class CellRefused(SyntaxError):
    """A cell the rewriting refuses (a name or a construct the policy does not allow); the cell does not run."""


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=f"{PREFIX}{name}__", ctx=ast.Load()), args=list(args), keywords=[])


def _const(v) -> ast.Constant:
    return ast.Constant(value=v)


class _Rewrite(ast.NodeTransformer):
    """Attribute reads, writes and deletions through the guards; imports through the allow-list."""

    def __init__(self, lazy_annotations: bool = False):
        self.temps = 0
        self.lazy = lazy_annotations     # `from __future__ import annotations`: annotations are text, never run

    def visit_arg(self, node: ast.arg):
        return node if self.lazy else self.generic_visit(node)

    def _function(self, node):
        if self.lazy and node.returns is not None:
            returns, node.returns = node.returns, None
            self.generic_visit(node)
            node.returns = returns
            return node
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def temp(self) -> str:
        self.temps += 1
        return f"{PREFIX}t{self.temps}__"

    def refuse(self, node, what: str):
        raise CellRefused(f"{what} is not allowed in the course's code", ("<cell>", getattr(node, "lineno", 1),
                                                                            getattr(node, "col_offset", 0), ""))

    def visit_Name(self, node: ast.Name):
        if node.id.startswith(PREFIX) or (node.id[:2] == "__" and node.id[-2:] == "__" and node.id not in NAMES):
            self.refuse(node, f"the name {node.id}")
        return node

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):        # a target the statements below did not rewrite
            self.refuse(node, f"assigning to the attribute {node.attr} there")
        return ast.copy_location(_call("attr", node.value, _const(node.attr)), node)

    # -- targets ---------------------------------------------------------------------------------------------
    def _targets(self, target, after: list) -> ast.expr:
        """`target` with each attribute in it replaced by a temporary name; `after` gets the guarded writes."""
        if isinstance(target, ast.Attribute):
            name = self.temp()
            obj = self.visit(target.value)
            after.append(ast.Expr(_call("set", obj, _const(target.attr), ast.Name(id=name, ctx=ast.Load()))))
            return ast.Name(id=name, ctx=ast.Store())
        if isinstance(target, (ast.Tuple, ast.List)):
            target.elts = [self._targets(e, after) for e in target.elts]
            return target
        if isinstance(target, ast.Starred):
            target.value = self._targets(target.value, after)
            return target
        return self.visit(target)

    def _assigning(self, node, targets: list):
        after: list = []
        new = [self._targets(t, after) for t in targets]
        return new, after

    def visit_Assign(self, node: ast.Assign):
        node.value = self.visit(node.value)
        node.targets, after = self._assigning(node, node.targets)
        return [node, *after] if after else node

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if isinstance(node.target, ast.Attribute):
            obj = self.visit(node.target.value)
            value = self.visit(node.value) if node.value is not None else None
            if value is None:
                return ast.copy_location(ast.Expr(obj if self.lazy else self.visit(node.annotation)), node)
            return ast.copy_location(ast.Expr(_call("set", obj, _const(node.target.attr), value)), node)
        if self.lazy:
            node.target = self.visit(node.target)
            node.value = self.visit(node.value) if node.value is not None else None
            return node
        return self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign):
        if not isinstance(node.target, ast.Attribute):
            return self.generic_visit(node)
        obj, name = self.temp(), node.target.attr
        hold = ast.Assign(targets=[ast.Name(id=obj, ctx=ast.Store())], value=self.visit(node.target.value))
        current = _call("attr", ast.Name(id=obj, ctx=ast.Load()), _const(name))
        new = _call("inplace", _const(type(node.op).__name__), current, self.visit(node.value))
        write = ast.Expr(_call("set", ast.Name(id=obj, ctx=ast.Load()), _const(name), new))
        return [ast.copy_location(hold, node), ast.copy_location(write, node)]

    def visit_Delete(self, node: ast.Delete):
        out: list = []
        for t in node.targets:
            if isinstance(t, ast.Attribute):
                out.append(ast.copy_location(ast.Expr(_call("del", self.visit(t.value), _const(t.attr))), node))
            else:
                out.append(ast.copy_location(ast.Delete(targets=[self.visit(t)]), node))
        return out

    def _loop(self, node):
        after: list = []
        node.target = self._targets(node.target, after)
        node.iter = self.visit(node.iter)
        node.body = [*after, *self._body(node.body)]
        node.orelse = self._body(node.orelse)
        return node

    def _body(self, stmts: list) -> list:
        out: list = []
        for s in stmts:
            r = self.visit(s)
            out.extend(r if isinstance(r, list) else [r])
        return out

    def visit_For(self, node):
        return self._loop(node)

    def visit_AsyncFor(self, node):
        return self._loop(node)

    def visit_withitem(self, node: ast.withitem):
        if node.optional_vars is not None and any(isinstance(n, ast.Attribute) for n in ast.walk(node.optional_vars)):
            self.refuse(node.context_expr, "an attribute as the target of `with ... as`")
        return self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension):
        if any(isinstance(n, ast.Attribute) for n in ast.walk(node.target)):
            self.refuse(node.iter, "an attribute as the target of a comprehension")
        return self.generic_visit(node)

    def visit_MatchClass(self, node: ast.MatchClass):
        if node.kwd_attrs or node.patterns:
            self.refuse(node, "a class pattern with attributes in `match`")
        return self.generic_visit(node)

    # -- imports ---------------------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import):
        out = []
        for a in node.names:
            if a.asname:
                value, name = _call("module", _const(a.name)), a.asname
            else:
                value, name = _call("top", _const(a.name)), a.name.partition(".")[0]
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value), node))
        return out

    def visit_ImportFrom(self, node: ast.ImportFrom):
        if node.module == "__future__" and not node.level:
            return node                          # a compiler directive (`annotations`), no module imported
        if node.level or not node.module:
            self.refuse(node, "a relative import")
        if any(a.name == "*" for a in node.names):
            self.refuse(node, f"`from {node.module} import *`")
        targets = ast.Tuple(elts=[ast.Name(id=a.asname or a.name, ctx=ast.Store()) for a in node.names],
                            ctx=ast.Store())
        value = _call("names", _const(node.module), ast.Tuple(elts=[_const(a.name) for a in node.names],
                                                               ctx=ast.Load()))
        return ast.copy_location(ast.Assign(targets=[targets], value=value), node)


def compile_cell(source: str, filename: str) -> list[types.CodeType]:
    """The cell's top-level statements, each compiled on its own and rewritten so that the policy holds while it runs
    (CellRefused, a SyntaxError, when the cell names what the policy refuses or holds a construct it does not
    rewrite): the worker runs them in turn, as one cell, and skips one the policy refuses (compile_cells)."""
    tree = ast.parse(source, filename)
    try:
        lazy = any(isinstance(s, ast.ImportFrom) and s.module == "__future__" and not s.level
                   and any(a.name == "annotations" for a in s.names) for s in tree.body)
        tree = _Rewrite(lazy).visit(tree)
    except CellRefused as e:
        e.filename = filename
        raise
    ast.fix_missing_locations(tree)
    compile(tree, filename, "exec", dont_inherit=True)       # the whole cell's errors (a misplaced __future__ import)
    flags = __future__.annotations.compiler_flag if lazy else 0
    return [compile(ast.Module([stmt], []), filename, "exec", flags=flags, dont_inherit=True) for stmt in tree.body]


def run_statements(codes: list, ns: dict, skipped: list):
    """Run a cell's statements (compile_cell's) in turn in `ns`; one that the policy refuses at the cell's top level
    (a self-check against the library version, say: in Jupyter it runs) is skipped, and the cell goes on: its (first
    line, refusal) is added to `skipped`. Any other exception stops the cell, as in Jupyter."""
    for code in codes:
        try:
            exec(code, ns)
        except RefusedError as e:
            skipped.append((min((line for *_, line in code.co_lines() if line), default=1), e))


def learner_module(policy: Policy | None) -> types.ModuleType:
    """The module a learner's cells run in (named `__main__`, as in Jupyter), with the policy's builtins (Python's
    own without a policy: the grader's own probes, which the trusted side alone can ask for)."""
    module = types.ModuleType("__main__")
    ns = module.__dict__
    if policy is None:
        ns["__builtins__"] = builtins
        return module
    policy.ns = ns

    def run_cell(source: str):
        """A cell's code that an IPython cell magic runs (`%%time`), compiled as the cells are."""
        run_statements(compile_cell(str(source), "<cell magic>"), ns, [])

    ns["__builtins__"] = policy.builtins(run_cell)
    return module


def compile_cells(cells: list[dict], guarded: bool = True) -> list[tuple[dict, list, BaseException | None]]:
    """Each cell ({"id", "source"}) compiled with the guards, a code object per top-level statement (or, not
    `guarded`, as it is, in one), before any of them runs: (cell, codes, None), or (cell, [], why it does not
    compile). Where the policy refuses what a statement at a cell's top level reaches (a self-check against the
    library version, say), that statement is skipped and the cell goes on: in Jupyter it would have run."""
    out: list[tuple[dict, list, BaseException | None]] = []
    for cell in cells:
        name = f"<cell {cell['id']}>"
        try:
            out.append((cell, compile_cell(cell["source"], name) if guarded
                        else [compile(cell["source"], name, "exec", dont_inherit=True)], None))
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            out.append((cell, [], e))
    return out
