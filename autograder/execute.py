"""Execute a learner's notebook inside the sandbox, to record its outputs for feedback.

Runs as `python execute.py IN.ipynb OUT.ipynb CELL_TIMEOUT MAX_OUTPUT_CHARS`.  The kernel and
this client both live inside the sandbox.  A cell that raises, hangs past its timeout, or kills
its kernel gets an error output that says so; execution goes on with a fresh kernel where it
can.  Each cell's text output is capped.  Nothing here decides a grade.
"""
from __future__ import annotations

import sys

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError


def cap_outputs(cell, limit: int):
    total = 0
    kept = []
    for out in cell.get("outputs", []):
        text = out.get("text") if out.get("output_type") == "stream" else None
        if text is not None:
            if total + len(text) > limit:
                out["text"] = text[: max(0, limit - total)] + "\n[output cut: too long]\n"
                kept.append(out)
                break
            total += len(text)
        kept.append(out)
    cell["outputs"] = kept


def error_output(name: str, message: str):
    return nbformat.v4.new_output("error", ename=name, evalue=message, traceback=[f"{name}: {message}"])


class Client(NotebookClient):
    """Caps each cell's output while it runs, so a cell printing gigabytes cannot exhaust memory."""

    max_chars = 100_000

    def output(self, outs, msg, display_id, cell_index):
        if sum(len(o.get("text", "")) for o in outs) > self.max_chars:
            return None
        return super().output(outs, msg, display_id, cell_index)


def main():
    src, dst, timeout, max_chars = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    nb = nbformat.read(src, as_version=4)
    client = Client(nb, timeout=timeout, allow_errors=True, interrupt_on_timeout=True,
                    kernel_name="python3", record_timing=False, resources={"metadata": {"path": "."}})
    client.max_chars = max_chars
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            try:
                client.execute_cell(cell, index)
            except CellTimeoutError:
                cell.outputs.append(error_output("TimeoutError", f"this cell did not finish within {timeout} s"))
            except DeadKernelError:
                cell.outputs.append(error_output("DeadKernelError",
                                                 "this cell ended the Python process (sys.exit, os._exit, or out of memory); "
                                                 "the cells after it ran in a fresh one"))
                client.km.restart_kernel(now=True)
                client.kc.stop_channels()
                client.kc = client.km.client()
                client.kc.start_channels()
                client.kc.wait_for_ready(timeout=60)
            cap_outputs(cell, max_chars)
            nbformat.write(nb, dst)
    nbformat.write(nb, dst)


if __name__ == "__main__":
    main()
