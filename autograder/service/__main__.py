"""python -m autograder.service [--roster roster.json] [--state DIR] [--host H] [--port P] [--scheduler ADDRESS] [--hub]
python -m autograder.service tokens --learners ada ben --assignments attention > roster.json"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from autograder.service.roster import new_roster
from autograder.service.server import serve


def main(argv: list[str] | None = None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["tokens"]:
        p = argparse.ArgumentParser(prog="python -m autograder.service tokens",
                                    description="Write a roster with a fresh token for each learner.")
        p.add_argument("--learners", nargs="+", required=True)
        p.add_argument("--assignments", nargs="+", required=True)
        a = p.parse_args(argv[1:])
        print(json.dumps(new_roster(a.learners, a.assignments), indent=2))
        return
    p = argparse.ArgumentParser(prog="python -m autograder.service", description=__doc__)
    p.add_argument("--roster", type=Path, default=Path("roster.json"))
    p.add_argument("--state", type=Path, default=Path("_build/checks"), help="scratch gradings and the check log")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--scheduler", help="a Dask scheduler's address: gradings run on its workers, which must share "
                                       "the state folder")
    p.add_argument("--hub", action="store_true", help="run as a JupyterHub service (started by the hub, which names "
                                                        "its address and says who is asking)")
    a = p.parse_args(argv)
    serve(a.roster, a.state, a.host, a.port, a.scheduler, a.hub)


if __name__ == "__main__":
    main()
