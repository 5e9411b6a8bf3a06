"""The course's library policy as data: what a learner's code may reach. One policy, read twice: by the static reading
of the source in the trusted process (autograder.verdict.static: proven, noted or flagged, for the learner's
explanation) and by the guards its worker compiles into the learner's cells (autograder.inside.guard: enforced while
the code runs, whatever name the code computes).

A module is allowed when the longest entry of ALLOWED or DENIED that it is under (or is) is in ALLOWED; no part of its
path may be private or a package's tests. An object named in DENIED is refused whatever route reaches it, as is any
object a module of FOREIGN made and the exercise's library versions (its suite's LIBRARY, a pattern over names in
torch's namespaces).
"""
from __future__ import annotations

# Packages and modules a course's code may use, with everything under them unless something longer in DENIED says
# otherwise (`numpy.random`, `collections.abc`, `torch.utils.checkpoint` included).
ALLOWED = ("math", "cmath", "functools", "operator", "itertools", "types", "dataclasses", "typing", "collections",
           "abc", "copy", "numbers", "random", "statistics", "time", "warnings", "contextlib", "string", "heapq",
           "bisect", "fractions", "decimal", "numpy", "torch", "torch.utils.checkpoint", "matplotlib",
           "IPython.display", "tqdm")
# What a course's code never needs: modules that run code from strings or files (compilers, loaders, pickles), reach
# the process or the dispatcher (torch.ops, torch.library, torch.overrides), reset what the grader reads (the GPU
# allocator's statistics), or make code and classes outside the class statement; and the objects of allowed modules
# that do so.
# torch's compilers, loaders, dispatcher, processes and test tools, as modules: none is imported (DENIED), and no object
# of one is held where torch re-exports it (FOREIGN).
TORCH_MACHINERY = ("torch.library", "torch.overrides", "torch.jit", "torch.compiler", "torch.fx", "torch.export",
                   "torch.onnx", "torch.package", "torch.hub", "torch.distributed", "torch.multiprocessing",
                   "torch.serialization", "torch.testing._internal")
DENIED = (
    # torch: compilers, loaders, the dispatcher, processes, the allocator's statistics
    *TORCH_MACHINERY, "torch.ops", "torch.classes", "torch.compile", "torch.utils", "torch.load", "torch.save",
    "torch.from_file", "torch.PyTorchFileReader", "torch.PyTorchFileWriter",
    "torch.cuda.memory", "torch.cuda.reset_peak_memory_stats", "torch.cuda.empty_cache",
    "torch.cuda.caching_allocator_alloc", "torch.cuda.caching_allocator_delete", "torch.cuda.MemPool",
    "torch.cuda.CUDAPluggableAllocator", "torch.autograd.graph",
    "torch.autograd.function",
    # torch: quantization (its own copies of the library versions: torch.ao.nn.quantizable.MultiheadAttention runs
    # none of the refused operators) and what sees every operator the process runs (a dispatch mode entered and left
    # open sees the worker's own copies of the arguments)
    "torch.ao", "torch.quantization", "torch.nn.quantized", "torch.nn.quantizable", "torch.nn.qat",
    "torch.nn.intrinsic", "torch.utils.checkpoint.TorchDispatchMode", "torch.utils.checkpoint.LoggingTensorMode",
    "torch.utils.checkpoint.create_selective_checkpoint_contexts", "torch.utils.checkpoint.capture_logs",
    # numpy: loaders and writers of files, raw memory, compilers
    "numpy.ctypeslib", "numpy.f2py", "numpy.distutils", "numpy.lib.format", "numpy.lib.npyio", "numpy.load",
    "numpy.memmap", "numpy.fromfile", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt",
    "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromregex", "numpy.lib.stride_tricks.as_strided",
    "numpy.testing.runstring", "numpy.testing.rundocs", "numpy.testing.extbuild", "numpy.testing.measure",
    "numpy.testing.decorate_methods",
    # matplotlib: backends imported by name
    "matplotlib.use", "matplotlib.backends", "matplotlib.pyplot.switch_backend", "matplotlib.testing",
    "matplotlib.backend_bases.register_backend", "matplotlib.cbook.get_sample_data",
    # matplotlib: animations run the program rcParams names (`animation.ffmpeg_path`)
    "matplotlib.animation",
    # tqdm: what is not its progress bar (the command line, its wrappers of other objects, its integrations)
    "tqdm.utils", "tqdm.cli", "tqdm.contrib", "tqdm.gui", "tqdm.tk", "tqdm.rich", "tqdm.dask", "tqdm.keras",
    # the standard library's evaluators and makers of code, modules and classes
    "typing.get_type_hints", "typing.ForwardRef", "functools.singledispatch", "functools.singledispatchmethod",
    "operator.attrgetter", "operator.methodcaller", "types.FunctionType", "types.CodeType", "types.ModuleType",
    "types.MethodType", "types.FrameType", "types.LambdaType", "types.new_class",
    "dataclasses.make_dataclass", "abc.ABCMeta",
    # ... and its readers and writers of any attribute: a Formatter's get_field, the table of copy's reductions
    "string.Formatter", "copy.dispatch_table",
    # ... and what gives Python's own `type` (which makes a class of any namespace: the guards give their own)
    "types.prepare_class", "types.resolve_bases", "typing.get_origin",
    # Triton, where an exercise allows it (its suite's ALLOWED_MODULES): its language and `triton.jit`, never its
    # compiler, runtime (the interpreter the course's instruments count in), backends, settings or tools
    "triton.runtime", "triton.compiler", "triton.backends", "triton.knobs", "triton.tools", "triton.testing",
    "triton.experimental", "triton.profiler", "triton.compile", "triton.autotune", "triton.language.core.builtin",
)
# Modules (with everything under them) whose objects a course's code never needs, wherever an allowed module re-exports
# one (torch.xpu's names from ctypes read and write any address; matplotlib.Path is pathlib's, a reader and writer of
# files; torch.CompilationUnit is torch.jit's, a compiler of strings): an object one of them made (a class, a function,
# or an instance of either) is refused when learner code reads it or an attribute of it.
FOREIGN = ("ctypes", "_ctypes", "pathlib", "io", "_io", "os", "posix", "sys", "gc", "inspect", "importlib", "weakref",
           "_weakref", "subprocess", "socket", "_socket", "pickle", "_pickle", "marshal", "shutil", "tempfile", "mmap",
           "signal", "threading", "_thread", "multiprocessing", "code", "codeop", "runpy", "zipimport",
           *TORCH_MACHINERY, "torch.utils.dlpack", "torch._dynamo")
# Classes of allowed modules whose instances read and write the attributes of an object the caller chose: learner code
# reads and writes no attribute of theirs (autograder.inside.guard).
PROXIES = ("tqdm.utils.ObjectWrapper", "numpy.lib.user_array.container")
# Methods refused on every object of their class (autograder.inside.guard), with why: those that free memory a view of
# it still uses (a storage shrunk under its tensors, an array resized without its check of references: the view then
# reads and writes whatever the process puts there next), a storage's loader of files (torch.from_file's) and an
# array's writers of files.
FREES = "it frees memory a view still uses"
METHODS = {"torch.UntypedStorage.resize_": FREES, "torch.TypedStorage.resize_": FREES, "numpy.ndarray.resize": FREES,
           "numpy.ndarray.tofile": "it writes a file", "numpy.ndarray.dump": "it writes a file",
           "torch.UntypedStorage.from_file": "it reads a file", "torch.TypedStorage.from_file": "it reads a file"}
# Every exercise's library versions, where a reading or a worker is not told one exercise's (the suites declare their
# own LIBRARY).
COURSE_LIBRARY = r"(?i)(attention|multihead|multi_head|(layer|group|instance|batch|rms)_?norm|transformer)"
# Module attributes a course's code may set: torch's switches for deterministic or exact arithmetic.
WRITABLE = ("torch.backends.cudnn.deterministic", "torch.backends.cudnn.benchmark", "torch.backends.cudnn.enabled",
            "torch.backends.cudnn.allow_tf32")


def _longest(path: str, entries) -> int:
    """The length of the longest entry that `path` is or is under (-1: none)."""
    return max((len(e) for e in entries if path == e or path.startswith(e + ".")), default=-1)


def allowed(path: str, modules: tuple[str, ...] = ()) -> bool:
    """Whether a course's code may use the module or object `path` (no part of it private); `modules`: those an
    exercise allows beyond ALLOWED (its suite's ALLOWED_MODULES)."""
    if any(p.startswith("_") or p == "tests" for p in path.split(".")):
        return False
    allow, deny = _longest(path, (*ALLOWED, *modules)), _longest(path, DENIED)
    return allow >= 0 and allow > deny


def runtime(library: str | None, modules: tuple[str, ...] = ()) -> dict:
    """The policy a worker compiles into the learner's cells (autograder.inside.guard.Policy): the modules allowed
    (ALLOWED and the exercise's `modules`), those denied that sit under them (the worker resolves each name), the
    switches code may set and the exercise's library versions (`library`: a pattern over names; None for course
    code, which may use them)."""
    return {"modules": [*ALLOWED, *modules], "denied": list(DENIED), "writable": list(WRITABLE), "library": library,
            "proxies": list(PROXIES), "methods": METHODS, "foreign": list(FOREIGN)}
