"""Execute a learner's notebook inside the sandbox, to record its outputs for the feedback.

Runs as `python execute.py IN.ipynb CELL_TIMEOUT MAX_CHARS MAX_OUTPUTS`.  The kernel and this client both
live inside the sandbox.  After each code cell it writes one line of JSON to its stdout,
`{"index": i, "outputs": [...]}`, so the trusted side keeps what ran before a kill or a limit, reads
no more than it allows, and never reads a file the sandbox wrote.  A cell that raises, hangs past its
timeout, or kills its kernel gets an error output that says so; execution goes on with a fresh kernel
where it can.  Each cell keeps at most MAX_OUTPUTS outputs and MAX_CHARS characters of each text.
Nothing here decides a grade, and nothing here is trusted: the trusted side checks every line again.
"""
from __future__ import annotations

import json
import os
import sys

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

CUT = "\n[output cut: too long]\n"


def cap_outputs(outputs: list, max_chars: int, max_outputs: int) -> list:
    """At most `max_outputs` outputs, each text at most `max_chars` characters (stream text in total)."""
    kept, total = [], 0
    for out in outputs:
        if len(kept) >= max_outputs:
            kept.append(nbformat.v4.new_output("stream", name="stdout", text=f"[{len(outputs) - len(kept)} more outputs cut]\n"))
            break
        if out.get("output_type") == "stream":
            text = out.get("text", "")
            if total + len(text) > max_chars:
                out["text"] = text[: max(0, max_chars - total)] + CUT
                kept.append(out)
                break
            total += len(text)
        kept.append(out)
    return kept


def error_output(name: str, message: str):
    return nbformat.v4.new_output("error", ename=name, evalue=message, traceback=[f"{name}: {message}"])


class Client(NotebookClient):
    """Drops outputs past the caps while the cell runs, so a cell printing gigabytes cannot exhaust memory."""

    max_chars = 100_000
    max_outputs = 50

    def output(self, outs, msg, display_id, cell_index):
        if len(outs) > self.max_outputs or sum(len(str(o.get("text", ""))) for o in outs) > self.max_chars:
            return None
        return super().output(outs, msg, display_id, cell_index)


def main():
    src, timeout, max_chars, max_outputs = sys.argv[1], int(float(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4])
    out = os.fdopen(os.dup(1), "w")        # private: the kernel (learner code) inherits /dev/null as stdout
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    nb = nbformat.read(src, as_version=4)
    client = Client(nb, timeout=timeout, allow_errors=True, interrupt_on_timeout=True,
                    kernel_name="python3", record_timing=False, resources={"metadata": {"path": "."}})
    client.max_chars, client.max_outputs = max_chars, max_outputs
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
            out.write(json.dumps({"index": index, "outputs": cap_outputs(cell.outputs, max_chars, max_outputs)}) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
