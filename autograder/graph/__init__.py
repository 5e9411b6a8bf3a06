"""The network as a graph: a module traced to plain data (`autograder.inside.tracer`, which runs in the sandbox too),
read back and checked (`model`), its differences from the reference named (`compare`), and drawn (`draw`);
`python -m autograder.graph` is the command line."""
from autograder.graph.compare import MAX_DIFFS, differences
from autograder.graph.draw import explorer_data, side_by_side_html, to_dot, to_svg
from autograder.graph.model import MAX_EDGES, Graph, Unreadable
from autograder.inside.tracer import EXAMPLES, MAX_NODES, SIZES, example, trace, trace_named, without_code

__all__ = ["EXAMPLES", "MAX_DIFFS", "MAX_EDGES", "MAX_NODES", "SIZES", "Graph", "Unreadable", "differences",
           "example", "explorer_data", "side_by_side_html", "to_dot", "to_svg", "trace", "trace_named",
           "without_code"]
