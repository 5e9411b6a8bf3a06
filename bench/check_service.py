"""The check service (`autograder.service`) measured through its real HTTP endpoint on loopback.

    .venv/bin/python bench/check_service.py [ASSIGNMENT ...] [--checks 3] [--crowd 8] [--out FILE]

- one learner alone, per assignment: the median time from request to answer over `--checks` checks of the
  reference notebook, against the time `nbgrader autograde` takes per notebook in a warm batch of four (the
  issue's target: at most 1.5x);
- `--crowd` learners checking positional_encoding at once (2 gradings at a time), the first of them sending a burst
  of three: every answer, the p50 and p95, each check's wait in the queue, and the most checks of any one other
  learner that started while a check waited (the issue's target: at most one);
- 1,000 requests from a learner over the rate limit: the server's CPU time for them (target: under 1 s).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import tempfile
import time
from pathlib import Path

import nbformat
import psutil

from autograder import ROOT
from autograder.authoring import variants
from autograder.classroom import grade
from autograder.service.local import LocalService
from autograder.service.roster import new_roster


def batch_per_notebook(asg: str, n: int = 4) -> float:
    """Seconds per notebook of one `nbgrader autograde` over `n` reference submissions."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        grade.prepare(d, [asg])
        for i in range(n):
            grade.submit(d, f"l{i}", asg, variants.submission(asg))
        t = time.monotonic()
        r = grade.autograde(d, asg, capture_output=True)
        assert r.returncode == 0, r.stderr[-2000:]
        return (time.monotonic() - t) / n


def timed_check(service: LocalService, learner: str, asg: str, nb) -> tuple[float, int, dict]:
    t = time.monotonic()
    status, answer = service.check(learner, nb, asg)
    return time.monotonic() - t, status, answer


def at_once(service: LocalService, crowd: list[str], nb, burst: int = 3) -> dict:
    """Every learner of `crowd` checks `nb` at the same moment, the first `burst` times: the answers, the times, and
    the most checks of one other learner that started between a check's arrival and its own start."""
    def one(learner: str) -> dict:
        sent = time.monotonic()
        status, answer = service.check(learner, nb, "positional_encoding")
        done = time.monotonic()
        return {"learner": learner, "status": status, "sent": sent, "done": done,
                "start": sent + answer["seconds"]["queued"]}

    checks = [crowd[0]] * burst + crowd[1:]
    with concurrent.futures.ThreadPoolExecutor(len(checks)) as pool:
        results = list(pool.map(one, checks))
    times = sorted(r["done"] - r["sent"] for r in results)
    behind = max(sum(y["learner"] == other and x["sent"] < y["start"] < x["start"] for y in results)
                 for x in results for other in set(crowd) - {x["learner"]})
    return {"learners": len(crowd), "checks": len(checks), "answered": sum(r["status"] == 200 for r in results),
            "p50_s": round(statistics.median(times), 2),
            "p95_s": round(times[min(len(times) - 1, round(0.95 * (len(times) - 1)))], 2),
            "queued_s": [round(r["start"] - r["sent"], 2) for r in results], "most_behind_one_learner": behind}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("assignments", nargs="*", default=["positional_encoding", "attention", "residual", "transformer"])
    p.add_argument("--checks", type=int, default=3)
    p.add_argument("--crowd", type=int, default=8)
    p.add_argument("--out", type=Path, default=ROOT / "_build" / "bench" / "check_service.json")
    a = p.parse_args()
    crowd = [f"learner{i}" for i in range(a.crowd)]
    roster = new_roster(["solo", "over", *crowd], a.assignments)
    roster.update(rate=[1000, 3600], max_concurrent=2)
    out: dict = {"alone": {}}
    with tempfile.TemporaryDirectory() as tmp:
        service = LocalService(Path(tmp), roster)
        try:
            for asg in a.assignments:
                nb = variants.submission(asg)
                per = batch_per_notebook(asg)
                times = []
                for _ in range(a.checks):
                    s, status, answer = timed_check(service, "solo", asg, nb)
                    assert status == 200 and answer["total"] == answer["points"], answer
                    times.append(s)
                p50 = statistics.median(times)
                out["alone"][asg] = {"check_p50_s": round(p50, 2), "batch_per_notebook_s": round(per, 2),
                                     "ratio": round(p50 / per, 2), "checks_s": [round(x, 2) for x in times]}
                print(f"{asg}: one check p50 {p50:.1f} s; warm batch {per:.1f} s a notebook; ratio {p50 / per:.2f}",
                      flush=True)
            out["crowd"] = at_once(service, crowd, variants.submission("positional_encoding"))
            print(f"{len(crowd)} learners at once ({crowd[0]} sending 3): {out['crowd']['answered']} of "
                  f"{out['crowd']['checks']} answered, p50 {out['crowd']['p50_s']} s, p95 {out['crowd']['p95_s']} s; "
                  f"at most {out['crowd']['most_behind_one_learner']} check of any one learner started while a "
                  f"check waited", flush=True)
            over = dict(roster, rate=[1, 3600])
            limited = LocalService(Path(tmp) / "limited", over)
            try:
                body = nbformat.writes(nb).encode()
                token = over["learners"]["over"]
                assert limited.post("/check/positional_encoding", b"[]", token)[0] == 400     # the one check
                proc = psutil.Process(limited.proc.pid)
                before = sum(proc.cpu_times()[:2])
                t = time.monotonic()
                statuses = {limited.post("/check/positional_encoding", body, token)[0] for _ in range(1000)}
                cpu = sum(proc.cpu_times()[:2]) - before
                out["refused"] = {"requests": 1000, "statuses": sorted(statuses), "server_cpu_s": round(cpu, 3),
                                  "wall_s": round(time.monotonic() - t, 2)}
                print(f"1000 requests over the rate limit: statuses {sorted(statuses)}, server CPU {cpu:.2f} s",
                      flush=True)
            finally:
                limited.close()
        finally:
            service.close()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
