"""What each graded cell grades, written from its hidden suite so that the notebook and the suite cannot drift.

A graded cell `<name>_tests` holds no code: its comment tells the learner what the hidden tests check. This module
renders that comment from the suite itself: one line per hidden test marked with the cell (its docstring, the
sentence the feedback shows when the test passes) with its share of the cell's points, and the numbers the suite
grades by, read from the suite's own constants: the speed factor, the memory limit, the training run. The visible
training cell of the transformer notebook takes its settings from the same constants.

    python -m autograder.authoring.criteria ASSIGNMENT...            # write them into solutions/ (make criteria)
    python -m autograder.authoring.criteria --check ASSIGNMENT...    # exit 1 where solutions/ is out of date
"""
from __future__ import annotations

import argparse
import ast
import copy
import importlib
import inspect
import sys
import textwrap
from dataclasses import dataclass

import nbformat

from autograder import config, notebooks
from autograder.notebooks import CHECK_CELL, COURSE_TAG, is_graded_test, nbgrader_meta
from autograder.verdict import hidden
from autograder.verdict.static import EXAMPLES
from autograder.verdict.suites import checks

WIDTH = 118
TRAINING_CELL = "TinyTransformer_training"     # the cell id of the visible training run (a plain, editable cell)


@dataclass
class HiddenTest:
    name: str
    cell: str | None
    weight: float
    doc: str
    calls: dict          # name of a called function -> its ast.Call, for the ones the criteria quote
    gpu: bool = False    # graded only where the grading's device is a GPU (the suites' `gpu` mark)


def _calls(fn: ast.FunctionDef) -> dict:
    """The calls in a test whose numbers the criteria quote: a speed check, a memory check, a training run."""
    found: dict = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            training = name == "train" and any(k.arg == "steps" for k in node.keywords)
            if name in ("fast_enough", "peak_memory") or training:
                found.setdefault(name, node)
    return found


def suite(assignment: str):
    return importlib.import_module(f"autograder.verdict.suites.test_{assignment}")


def hidden_tests(assignment: str) -> list[HiddenTest]:
    """The suite's tests in the order they are written, with the cell each scores and its weight."""
    mod = suite(assignment)
    tree = ast.parse(hidden.suite_path(assignment).read_text())
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    tests = []
    for name, fn in vars(mod).items():
        if not (name.startswith("test_") and callable(fn) and getattr(fn, "__module__", None) == mod.__name__):
            continue
        if any(m.name == "feedback" for m in getattr(fn, "pytestmark", [])):
            continue                  # adds to the feedback, scores nothing
        marks = {m.name: m.args[0] for m in getattr(fn, "pytestmark", []) if m.args}
        doc = (fn.__doc__ or "").strip().splitlines()
        tests.append(HiddenTest(name, marks.get("cell"), float(marks.get("weight", 1)), doc[0] if doc else name,
                                _calls(defs[name]) if name in defs else {},
                                any(m.name == "gpu" for m in getattr(fn, "pytestmark", []))))
    return tests


def _argument(call: ast.Call, fn, name: str, mod):
    """The value of argument `name` in `call` of `fn`: a literal or a module constant, else fn's default."""
    for kw in call.keywords:
        if kw.arg == name:
            node = kw.value
            return getattr(mod, node.id) if isinstance(node, ast.Name) else ast.literal_eval(node)
    return inspect.signature(fn).parameters[name].default


def sentence(test: HiddenTest, mod) -> str:
    """What one hidden test checks, with the numbers it grades by."""
    if "train" in test.calls:
        return (f"trains your TinyTransformer(vocab_size={mod.V}, d_model={mod.D_MODEL}, n_heads={mod.N_HEADS}, "
                f"d_ff={mod.D_FF}, n_layers={mod.N_LAYERS}, max_len={mod.T}) for {mod.STEPS} steps of AdamW "
                f"(learning rate {mod.LR:g}, batches of {mod.BATCH} sequences of {mod.T} tokens, within "
                f"{config.current().train_timeout:g} s) to repeat the token K places back, with a new offset and new "
                f"sequences: accuracy at least {mod.ACCURACY:g} on sequences it was not trained on, from below "
                f"{mod.BEFORE:g} before training")
    text = test.doc
    if "fast_enough" in test.calls:
        call = test.calls["fast_enough"]
        factor = _argument(call, checks.fast_enough, "factor", mod)
        attempts = _argument(call, checks.fast_enough, "attempts", mod)
        limit = (f"{factor:g}x" if factor else
                 f"{checks.SPEED_FACTOR:g}x (graded on a GPU: {checks.GPU_SPEED_FACTOR:g}x, on larger inputs)")
        text += (f"; at most {limit} the reference solution's time on the same inputs (a time near the limit is "
                 f"measured again, up to {attempts} times, and the best counts)")
    if "peak_memory" in test.calls:
        cpu, gpu = (mod.score_matrix_bytes(shape) / 2 ** 20 for shape in (mod.MEMORY_SHAPE, mod.MEMORY_GPU_SHAPE))
        text += (f"; at Lq = Lk = {mod.MEMORY_SEQ_LEN}, one call may add at most {cpu * mod.MEMORY_FRACTION:g} "
                 f"MiB, {mod.MEMORY_FRACTION:g} of the {cpu:g} MiB float32 score matrix (graded on a GPU: q, k, v "
                 f"of shape {tuple(mod.MEMORY_GPU_SHAPE)}, at most {gpu * mod.MEMORY_FRACTION:g} MiB of GPU memory)")
    if test.gpu:
        text += " (graded without a GPU, this check is not run and the others share its points)"
    return text


def _library_names() -> str:
    return ", ".join(f"`{n}`" for n in EXAMPLES)


def _comment(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent="# " + indent, subsequent_indent="# " + " " * len(indent))


def graded_comment(assignment: str, grade_id: str, points: float) -> str:
    """The source of graded cell `grade_id`: its criteria, each with its share of the points."""
    mod = suite(assignment)
    tests = [t for t in hidden_tests(assignment) if t.cell == grade_id]
    if not tests:
        raise ValueError(f"{assignment}: no hidden test scores {grade_id}")
    total = sum(t.weight for t in tests)
    lines = _comment(f"Graded cell: `{grade_id.removesuffix(notebooks.TESTS_SUFFIX)}`, {points:g} points. Hidden tests "
                     "check it when your notebook is graded, on inputs you have not seen; the points of each:")
    for t in tests:
        lines += _comment(sentence(t, mod), indent=f"{points * t.weight / total:4.2f}  ")
    lines += _comment(f"Using torch's own version of a part, by any route ({_library_names()}, ...), gives this "
                      "part 0 points: the grader refuses it where your code runs. What else your code may use, and "
                      "what every part promises, is said at the top of the notebook (\"What every part promises\").")
    lines += _comment("Your score and what to fix appear here in your feedback.")
    return "\n".join(lines)


PROMISES_CELL = "promises"        # the cell id of the release's promises of every part, after the introduction


def promises_source(assignment: str) -> str:
    """What every part of the exercise promises, from its suite's contract (autograder.verdict.suites.families, which
    check each promise on every part), and the library policy the grader enforces while the code runs."""
    from autograder.verdict import policy
    from autograder.verdict.suites.families import applies

    contract = getattr(suite(assignment), "CONTRACT", {})

    def parts(family: str) -> list[str]:
        return [f"`{n}`" for n, p in contract.items() if applies(p, None, family)]

    def listed(names: list[str]) -> str:
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]

    items = []
    if parts("strided"):
        items.append(f"A tensor argument may be a view that is not contiguous in memory, a slice or a transposed "
                     f"tensor ({listed(parts('strided'))}): where you reshape an argument, use `reshape`, not `view`.")
    items.append("Every result is a new tensor: a caller who changes it in place changes no argument and no later "
                 "result, and one who changes an argument afterwards changes no result (no cache that hands out the "
                 "same tensor twice, never an argument itself or a view of one, as `expand` gives).")
    functions = [n for n in parts("meta") if n not in parts("float64")]
    if functions:
        items.append(f"A result is made on its arguments' device ({listed(functions)}): the tests also call with "
                     "tensors on `\"meta\"`, which hold no data, so make new tensors with `device=x.device` (or "
                     "`torch.zeros_like`, `x.new_zeros`).")
    low = [f"`{n}`" for n, p in contract.items() if p.promises.low_precision]
    if low:
        one = len(low) == 1
        dtypes = list(dict.fromkeys(str(d).removeprefix("torch.") for p in contract.values()
                                    for d in p.promises.low_precision))
        items.append(f"{listed(low)} also take{'s' if one else ''} {listed(dtypes)} arguments, and "
                     f"answer{'s' if one else ''} in {'their dtype' if len(dtypes) > 1 else dtypes[0]} at its "
                     "precision (compute inside in float32 where sums and exponentials in the lower dtype would lose "
                     "too much, then convert the answer).")
    if parts("gradients"):
        items.append(f"Gradients reach every floating argument and every parameter ({listed(parts('gradients'))}), "
                     "as autograd gives them through your computation: no `.detach()`, `.data` or `torch.no_grad()` "
                     "on a path by which an input changes an output (a softmax's shift by its row maximum changes no "
                     "output, so it may be detached).")
    if parts("float64"):
        items.append(f"A module ({listed(parts('float64'))}) moves every tensor it uses with `.to(torch.float64)` and "
                     "`.to(\"meta\")` (keep constant tensors in buffers, `register_buffer`), computes in float64 once "
                     "moved there, answers the same when made anew and given its `state_dict()`, and answers the "
                     "same in `train()` as in `eval()`: no dropout.")
    items.append("Edge sizes count: one position, one key, one head, a width of 1, and long sequences.")
    allowed = [m for m in (*policy.ALLOWED, *getattr(suite(assignment), "ALLOWED_MODULES", ()))
               if "." not in m or m.startswith(("torch.", "IPython."))]
    return "\n".join([
        "## What every part promises",
        "",
        "Besides what each part below asks, the hidden tests hold every part to these, on inputs drawn when your "
        "notebook is graded:",
        "",
        *[f"- {item}" for item in items],
        "",
        "**What your code may use.** " + ", ".join(f"`{m}`" for m in allowed) + " (and their public modules), but "
        "not torch's own version of a part you are asked to write, nor what reaches past the notebook: files "
        "(`open`), other processes (`os`, `sys`), code built from strings (`eval`, `exec`), the interpreter's "
        "insides (frames, `__globals__`, `torch._C`, `torch.ops`). The grader refuses these where your code runs, "
        "whatever name it computes; a self-check or a plot at the end of a cell is fine (a library call there "
        "stops only that cell's last lines when graded). Cells you add run when your notebook is graded only if "
        "they define something your answers use (a helper function, a constant), and `%magics` cost nothing.",
    ])


def training_settings(assignment: str) -> dict[str, str]:
    """The settings lines of the visible training cell: the hidden training run's sizes and steps."""
    m = suite(assignment)
    return {"vocab_size, seq_len, d_model, n_heads, d_ff, n_layers = ":
            f"{m.V}, {m.T}, {m.D_MODEL}, {m.N_HEADS}, {m.D_FF}, {m.N_LAYERS}",
            "steps, batch_size, lr, target = ": f"{m.STEPS}, {m.BATCH}, {m.LR!r}, {m.ACCURACY!r}"}


def _with_settings(source: str, settings: dict[str, str]) -> str:
    lines = source.split("\n")
    for lhs, rhs in settings.items():
        at = [i for i, ln in enumerate(lines) if ln.startswith(lhs)]
        if len(at) != 1:
            raise ValueError(f"the training cell needs one line starting with {lhs!r}")
        lines[at[0]] = lhs + rhs
    return "\n".join(lines)


def check_cell_source(assignment: str) -> str:
    """The `check()` cell: the client's function, bound to this assignment."""
    from autograder.authoring import check_client

    code = inspect.getsource(check_client.check).replace("{ASSIGNMENT}", assignment)
    return ("# Check your work while you go: check() sends this notebook, as last saved, to the course's check\n"
            "# service and prints what the hidden tests say (it changes no grade). Save first, then run check().\n"
            + code.rstrip("\n"))


def render(assignment: str, nb=None):
    """The source notebook with every generated cell written from the hidden suite (and the `check()` cell, put
    after the setup cell when it is missing)."""
    nb = copy.deepcopy(nb or notebooks.read(notebooks.source_notebook(assignment)))
    if not any(c.get("id") == CHECK_CELL for c in nb.cells):
        at = next(i for i, c in enumerate(nb.cells) if "setup" in c.metadata.get("tags", [])
                  or nbgrader_meta(c).get("grade_id") == "setup")
        cell = nbformat.v4.new_code_cell("")
        cell["id"] = CHECK_CELL
        nb.cells.insert(at + 1, cell)
    if not any(c.get("id") == PROMISES_CELL for c in nb.cells):
        at = next(i for i, c in enumerate(nb.cells) if nbgrader_meta(c).get("grade_id") == "intro")
        cell = nbformat.v4.new_markdown_cell("")
        cell["id"] = PROMISES_CELL
        cell.metadata["nbgrader"] = {"grade": False, "grade_id": PROMISES_CELL, "locked": True, "schema_version": 3,
                                     "solution": False, "task": False}
        nb.cells.insert(at + 1, cell)
    for cell in nb.cells:
        if cell.get("id") == PROMISES_CELL:
            cell.source = promises_source(assignment)
        if cell.get("id") in (CHECK_CELL, TRAINING_CELL):      # the course's plain cells: never the learner's code
            tags = cell.metadata.setdefault("tags", [])
            if COURSE_TAG not in tags:
                tags.append(COURSE_TAG)
        if cell.get("id") == CHECK_CELL:
            cell.source = check_cell_source(assignment)
        meta = nbgrader_meta(cell)
        if is_graded_test(cell):
            cell.source = graded_comment(assignment, meta["grade_id"], float(meta["points"]))
        elif cell.get("id") == TRAINING_CELL:
            cell.source = _with_settings(cell.source, training_settings(assignment))
    return nb


def stale(assignment: str) -> list[str]:
    """The grade_ids of the cells whose source differs from what `render` writes."""
    nb = notebooks.read(notebooks.source_notebook(assignment))
    return [nbgrader_meta(old).get("grade_id") or old.get("id") for old, new in
            zip(nb.cells, render(assignment, nb).cells)
            if old.source != new.source or old.metadata.get("tags") != new.metadata.get("tags")]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("assignments", nargs="+")
    p.add_argument("--check", action="store_true", help="only report the cells that are out of date")
    a = p.parse_args()
    out_of_date = {asg: cells for asg in a.assignments if (cells := stale(asg))}
    if a.check:
        for asg, cells in out_of_date.items():
            print(f"{asg}: out of date with its hidden suite: {', '.join(cells)} (run `make criteria`)")
        sys.exit(1 if out_of_date else 0)
    for asg in out_of_date:
        nbformat.write(render(asg), str(notebooks.source_notebook(asg)))
        print(f"{asg}: wrote {', '.join(out_of_date[asg])}")


if __name__ == "__main__":
    main()
