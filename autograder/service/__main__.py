"""python -m autograder.service [--roster FILE] [--state DIR] [--host H] [--port P] [--scheduler ADDRESS] [--hub]
python -m autograder.service tokens --learners ada ben --assignments attention [--instructors prof] [--out FILE]"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.service.roster import default_path, new_roster, write_roster
from autograder.service.server import serve


def main(argv: list[str] | None = None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["tokens"]:
        p = argparse.ArgumentParser(prog="python -m autograder.service tokens",
                                    description="Write a roster with a fresh token for each learner and instructor, "
                                                "readable by you alone.")
        p.add_argument("--learners", nargs="+", required=True)
        p.add_argument("--assignments", nargs="+", required=True)
        p.add_argument("--instructors", nargs="+", default=["instructor"])
        p.add_argument("--out", type=Path, default=default_path(), help="default: %(default)s")
        p.add_argument("--force", action="store_true", help="replace an existing roster (and its tokens)")
        a = p.parse_args(argv[1:])
        write_roster(new_roster(a.learners, a.assignments, tuple(a.instructors)), a.out, a.force)
        print(f"wrote {a.out} (mode 0600): hand each learner their token from it")
        return
    p = argparse.ArgumentParser(prog="python -m autograder.service", description=__doc__)
    p.add_argument("--roster", type=Path, default=default_path(), help="default: %(default)s")
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
