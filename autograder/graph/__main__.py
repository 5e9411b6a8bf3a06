"""The command line, for an instructor or a learner on their own machine (not the grader: a notebook's code runs
unsandboxed there, in a separate process):

    python -m autograder.graph exercises/residual/residual.ipynb TransformerBlock --out block.svg
    python -m autograder.graph transformer TinyTransformer --backward --out backward.svg    (the course's reference)
"""
from __future__ import annotations

import argparse
import contextlib
import html
import json
import subprocess
import sys
from pathlib import Path

from autograder import ROOT
from autograder.graph.compare import differences
from autograder.graph.draw import side_by_side_html, to_dot, to_svg
from autograder.inside.tracer import EXAMPLES, trace_named

# --- the command line ------------------------------------------------------------------------------------------------

def _load_namespace(source: str) -> dict:
    """The names a notebook's learner cells define (run here: call this in a separate process), or the reference's."""
    from autograder.notebooks import learner_cells, read, reference_namespace

    if not source.endswith(".ipynb"):
        return reference_namespace(source)
    ns: dict = {"__name__": "learner"}
    with contextlib.redirect_stdout(sys.stderr):
        for cell in learner_cells(read(Path(source))):
            exec(compile(cell["source"], f"<cell {cell['id']}>", "exec"), ns)
    return ns


def _child(source, name, settings, out):
    """In a separate process: run the notebook's code, trace `name`, write the graph as JSON to `out`."""
    Path(out).write_text(json.dumps(trace_named(_load_namespace(source), name, **json.loads(settings))))


def _setting(text):
    import ast

    key, _, value = text.partition("=")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise argparse.ArgumentTypeError(f"{text!r}: write key=value with a Python literal value") from None


def main(argv=None):
    import tempfile

    ap = argparse.ArgumentParser(prog="python -m autograder.graph", description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="a notebook (its solution and setup cells run in a separate process) or an "
                                   "assignment name (the course's reference solution)")
    ap.add_argument("name", help=f"the module to draw: {', '.join(EXAMPLES)}")
    ap.add_argument("--out", default=None,
                    help="output file: .svg (default NAME.svg), .dot, .json (the graph as data), "
                         ".html (beside the reference, differences named)")
    ap.add_argument("--set", dest="settings", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                    help="a constructor argument, e.g. --set norm_first=False --set d_model=32")
    ap.add_argument("--backward", action="store_true", help="draw the backward graph (autograd's grad_fn graph)")
    ap.add_argument("--compare", metavar="ASSIGNMENT", help="print the differences from this assignment's reference")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    settings = dict(args.settings)
    out = Path(args.out or f"{args.name}.svg")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "graph.json"
        r = subprocess.run([sys.executable, "-m", "autograder.graph", "--child", args.source, args.name,
                            json.dumps(settings), str(data)], cwd=ROOT,
                           timeout=args.timeout)
        if r.returncode != 0 or not data.exists():
            sys.exit(f"could not trace {args.name} from {args.source} (exit status {r.returncode})")
        graph = json.loads(data.read_text())
    if "error" in graph:
        sys.exit(graph["error"])
    reference = None
    if args.compare or out.suffix == ".html":
        asg = args.compare or Path(args.source).stem
        from autograder.notebooks import reference_namespace

        reference = trace_named(reference_namespace(asg), args.name, **settings)
        for line in differences(graph, reference) or ["the same structure as the reference"]:
            print(line)
    part = "backward" if args.backward else "forward"
    if out.suffix == ".json":
        out.write_text(json.dumps(graph, indent=1))
    elif out.suffix == ".dot":
        out.write_text(to_dot(graph, part=part))
    elif out.suffix == ".html":
        out.write_text(f"<!doctype html><meta charset=utf-8><title>{html.escape(args.name)}</title>"
                       + side_by_side_html(graph, reference))
    else:
        out.write_text(to_svg(graph, part=part))
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        _child(*sys.argv[2:])
    else:
        main()
