"""The check service (`autograder.service`) measured through its real HTTP endpoint on loopback.

    .venv/bin/python bench/check_service.py [ASSIGNMENT ...] [--learners 30] [--checks 3] [--window 60] [--no-dask]
                                            [--burst 200] [--out FILE]

- the warm batch: seconds per notebook of one `nbgrader autograde` over four reference submissions, per assignment
  (the yardstick: the rush's p95 should stay under 3x it);
- one learner alone, per assignment: the median time from request to answer over three checks of the reference;
- a deadline rush: `--learners` learners (an assignment each, in turn) check `--checks` times, each check planned at a
  moment drawn within `--window` seconds and sent then or, when the learner's previous check is still unanswered,
  as soon as it is (check() waits for its answer): two known mistakes, then the reference. Per assignment the p50 and
  p95 from request to answer; the longest any check waited in the queue and the most checks of one other learner
  that started meanwhile; the memory of the service's processes (its graders and their sandboxes included) at the
  start, at its peak and at the end; every check answered, with the score its notebook earns, and the instructor's
  table counting each once. Then the same with the gradings on a Dask cluster of two local workers (`--scheduler`),
  whose processes' memory is counted too;
- a burst: two slow checks hold both graders while `--burst` checks of 1,000,000 bytes from `--burst / 5` learners
  send their headers at once, then their bodies: how many were admitted and refused (503 with Retry-After, before
  their bodies were read), and the service's memory before, at its peak and after;
- 1,000 requests from a learner over the rate limit: the server's CPU time for them.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import logging
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import psutil

from autograder import ROOT
from autograder.authoring import variants
from autograder.classroom import grade
from autograder.service.local import LocalService, RawCheck
from autograder.service.roster import new_roster

MIB = 1 << 20


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


def p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, round(q * (len(xs) - 1)))], 2)


class Memory:
    """The resident memory of some processes (`own`) and of them with all their descendants (`all`: graders, kernels
    and sandboxes; pages they share are counted in each), sampled every half second, in MiB."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.samples: list[tuple[int, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> tuple[int, int]:
        own = everything = 0
        for pid in self.pids:
            try:
                top = psutil.Process(pid)
                own += top.memory_info().rss
                procs = [top, *top.children(recursive=True)]
            except psutil.Error:
                continue
            for proc in procs:
                try:
                    everything += proc.memory_info().rss
                except psutil.Error:
                    pass
        return own // MIB, everything // MIB

    def _run(self):
        while not self.stop.is_set():
            self.samples.append(self.now())
            time.sleep(0.5)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def summary(self) -> dict:
        return {which: {"start": self.samples[0][i], "peak": max(x[i] for x in self.samples),
                        "end": self.samples[-1][i]} for i, which in enumerate(("own", "all"))}


def plan(learners: list[str], assignments: list[str], checks: int, window: float, seed: int = 0) -> list[dict]:
    """Each learner's assignment and checks: when each is planned, and the notebook (known mistakes, then the
    reference, which earns full marks)."""
    rng = random.Random(seed)
    out = []
    for i, learner in enumerate(learners):
        asg = assignments[i % len(assignments)]
        bugs = [v for v in variants.load(asg) if isinstance(v, variants.Bug)]
        picked = [rng.choice(bugs) for _ in range(checks - 1)]
        nbs = [(variants.submission(asg, b.cells), False) for b in picked] + [(variants.submission(asg), True)]
        times = sorted(rng.uniform(0, window) for _ in range(checks))
        out.append({"learner": learner, "assignment": asg,
                    "checks": [{"at": t, "body": nbformat.writes(nb).encode(), "full": full}
                               for t, (nb, full) in zip(times, nbs)]})
    return out


def rush(service: LocalService, learners: list[dict], memory_of: list[int]) -> dict:
    """Every learner checks as planned, one check at a time; a 503 is sent again after its Retry-After."""
    t0 = time.monotonic()
    done: list[dict] = []

    def one(entry: dict):
        token = service.roster["learners"][entry["learner"]]
        for c in entry["checks"]:
            time.sleep(max(0.0, t0 + c["at"] - time.monotonic()))
            sent = time.monotonic()
            tries = 0
            while True:
                tries += 1
                status, answer, headers = service.post(f"/check/{entry['assignment']}", c["body"], token)
                if status != 503 or tries > 20:
                    break
                time.sleep(int(headers.get("Retry-After", "5")))
            got = time.monotonic()
            seconds = answer.get("seconds", {})
            done.append({"learner": entry["learner"], "assignment": entry["assignment"], "status": status,
                         "right": status == 200 and (answer["total"] == answer["points"]) == c["full"],
                         "sent": sent - t0, "answered": got - t0, "queued": seconds.get("queued", 0.0),
                         "graded": seconds.get("graded", 0.0), "tries": tries})

    with Memory(memory_of) as mem, concurrent.futures.ThreadPoolExecutor(len(learners)) as pool:
        list(pool.map(one, learners))
    table = service.table()
    expected = {e["learner"]: len(e["checks"]) for e in learners}
    counted = {row["learner"]: int(row["checks"]) for row in table if row["learner"] in expected}
    per: dict = {}
    for asg in sorted({d["assignment"] for d in done}):
        mine = [d for d in done if d["assignment"] == asg]
        times = [d["answered"] - d["sent"] for d in mine]
        per[asg] = {"checks": len(mine), "p50_s": p(times, 0.5), "p95_s": p(times, 0.95),
                    "graded_p50_s": p([d["graded"] for d in mine], 0.5)}
    behind = 0
    for x in done:
        start = x["sent"] + x["queued"]
        others = {y["learner"] for y in done} - {x["learner"]}
        behind = max([behind, *(sum(y["learner"] == o and x["sent"] < y["sent"] + y["queued"] < start for y in done)
                                for o in others)])
    return {"per_assignment": per, "answered": sum(d["status"] == 200 for d in done), "checks": len(done),
            "right_scores": sum(d["right"] for d in done), "retried_503": sum(d["tries"] > 1 for d in done),
            "counted_once": counted == expected, "grader_failures": sum(int(r["grader failures"]) for r in table),
            "last_sent_s": round(max(d["sent"] for d in done), 1), "all_answered_s": round(max(d["answered"]
                                                                                              for d in done), 1),
            "worst_queue_wait_s": round(max(d["queued"] for d in done), 2), "most_behind_one_learner": behind,
            "memory": mem.summary()}


def burst(service: LocalService, n: int, size: int = 1_000_000) -> dict:
    """Two slow checks hold both graders; `n` checks of `size` bytes from n/5 learners send their headers at once,
    then their bodies (not notebooks: answered at their turn without grading)."""
    slow = variants.submission("positional_encoding")
    slow.cells.append(nbformat.v4.new_code_cell("import time\ntime.sleep(25)"))
    names = [f"burst{i}" for i in range(n // 5)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool, Memory([service.proc.pid]) as mem:
        time.sleep(1.0)
        slow_checks = [pool.submit(service.check, f"slow{i}", slow, "positional_encoding") for i in range(2)]
        time.sleep(5.0)
        raw = [RawCheck(service.port, "/check/positional_encoding", service.roster["learners"][name], b"x" * size)
               for name in names for _ in range(5)]
        time.sleep(1.0)
        early = [c for c in raw if c.answered()]
        for c in raw:
            if c not in early:
                c.send_body()
        statuses = [c.answer()[0] for c in raw]
        assert all(f.result()[0] == 200 for f in slow_checks)
    counts = {str(s): statuses.count(s) for s in sorted(set(statuses))}
    return {"requests": n, "bytes_each": size, "statuses": counts, "refused_before_body": len(early),
            "memory": mem.summary()}


def started(service: LocalService) -> dict:
    return {k: service.started[k] for k in ("first_answer_s", "first_status", "ready_s")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("assignments", nargs="*", default=["positional_encoding", "attention", "residual"])
    ap.add_argument("--learners", type=int, default=30)
    ap.add_argument("--checks", type=int, default=3)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--burst", type=int, default=200)
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "_build" / "bench" / "check_service.json")
    a = ap.parse_args()
    learners = [f"learner{i}" for i in range(a.learners)]
    names = ["solo", "over", *learners, *(f"slow{i}" for i in range(2)), *(f"burst{i}" for i in range(a.burst // 5))]
    roster = new_roster(names, a.assignments)
    out: dict = {"batch_per_notebook_s": {}, "alone": {}}
    for asg in a.assignments:
        out["batch_per_notebook_s"][asg] = round(batch_per_notebook(asg), 2)
        print(f"{asg}: warm batch {out['batch_per_notebook_s'][asg]:.2f} s a notebook", flush=True)
    planned = plan(learners, a.assignments, a.checks, a.window)
    with tempfile.TemporaryDirectory() as tmp:
        service = LocalService(Path(tmp) / "local", roster)
        out["start"] = started(service)
        print(f"start: first answer (503 warming up) after {out['start']['first_answer_s']} s, ready after "
              f"{out['start']['ready_s']} s", flush=True)
        try:
            for asg in a.assignments:
                times = []
                for _ in range(3):
                    t = time.monotonic()
                    status, answer = service.check("solo", variants.submission(asg), asg)
                    assert status == 200 and answer["total"] == answer["points"], answer
                    times.append(time.monotonic() - t)
                out["alone"][asg] = round(statistics.median(times), 2)
                print(f"{asg}: one check alone p50 {out['alone'][asg]:.2f} s", flush=True)
            out["rush"] = rush(service, planned, [service.proc.pid])
            show("rush", out["rush"], out["batch_per_notebook_s"])
            out["burst"] = burst(service, a.burst)
            b = out["burst"]
            m = b["memory"]["own"]
            print(f"burst of {b['requests']} checks of {b['bytes_each']} bytes: statuses {b['statuses']} "
                  f"({b['refused_before_body']} refused before their bodies); the service's own process "
                  f"{m['start']} MiB before, {m['peak']} at the peak, {m['end']} after", flush=True)
        finally:
            service.close()
        if not a.no_dask:
            from distributed import LocalCluster

            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                              silence_logs=logging.ERROR, memory_limit=0) as cluster:
                workers = [nanny.process.pid for nanny in cluster.workers.values()]
                dask = LocalService(Path(tmp) / "dask", roster, args=("--scheduler", cluster.scheduler_address))
                try:
                    out["rush_dask"] = rush(dask, planned, [dask.proc.pid, *workers])
                    show("rush on Dask (2 local workers)", out["rush_dask"], out["batch_per_notebook_s"])
                finally:
                    dask.close()
        over = dict(roster, rate=[1, 3600])
        limited = LocalService(Path(tmp) / "limited", over)
        try:
            body = nbformat.writes(variants.submission(a.assignments[0])).encode()
            token = over["learners"]["over"]
            assert limited.post(f"/check/{a.assignments[0]}", b"[]", token)[0] == 400     # the one check
            proc = psutil.Process(limited.proc.pid)
            before = sum(proc.cpu_times()[:2])
            statuses = {limited.post(f"/check/{a.assignments[0]}", body, token)[0] for _ in range(1000)}
            cpu = sum(proc.cpu_times()[:2]) - before
            out["refused"] = {"requests": 1000, "statuses": sorted(statuses), "server_cpu_s": round(cpu, 3)}
            print(f"1000 requests over the rate limit: statuses {sorted(statuses)}, server CPU {cpu:.2f} s", flush=True)
        finally:
            limited.close()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {a.out}")


def show(title: str, r: dict, batch: dict):
    print(f"{title}: {r['checks']} checks, the last sent at {r['last_sent_s']} s, all answered by "
          f"{r['all_answered_s']} s", flush=True)
    print(f"  {'assignment':<20} {'checks':>6} {'p50 s':>7} {'p95 s':>7} {'graded p50':>10} {'batch s':>8} "
          f"{'p95/batch':>9}")
    for asg, x in r["per_assignment"].items():
        print(f"  {asg:<20} {x['checks']:>6} {x['p50_s']:>7.2f} {x['p95_s']:>7.2f} {x['graded_p50_s']:>10.2f} "
              f"{batch[asg]:>8.2f} {x['p95_s'] / batch[asg]:>9.1f}")
    print(f"  answered {r['answered']} of {r['checks']} ({r['right_scores']} with the score their notebook earns, "
          f"{r['retried_503']} sent again after a 503); counted once each: {r['counted_once']}; grader failures "
          f"{r['grader_failures']}", flush=True)
    print(f"  longest wait in the queue {r['worst_queue_wait_s']} s; at most {r['most_behind_one_learner']} checks of "
          f"one other learner started while a check waited", flush=True)
    for which, label in (("own", "the service's own process"), ("all", "with its graders and sandboxes")):
        m = r["memory"][which]
        print(f"  memory, {label}: {m['start']} MiB at the start, {m['peak']} at the peak, {m['end']} at the end",
              flush=True)


if __name__ == "__main__":
    main()
