"""Mutation testing of the hidden suites: of the wrong answers a slip in the reference makes, how many each suite
catches (`make mutation`; results in bench/results/mutation.md).

1. Mutants: every graded part's reference code with one mechanical change (autograder.authoring.mutants).
2. The oracle: each mutant is run in this process's fork, on calls drawn over the part's whole contract (the suite's
   `CONTRACT`, autograder.verdict.suites.contract, with many more draws than a grading makes), against the
   reference, and through the families of promises every part keeps (autograder.verdict.suites.families: arguments
   not contiguous, fresh results, "meta", low precision, gradients, a module moved and reloaded). A mutant that meets
   the contract everywhere is equivalent and set aside; one that does not is kept with what shows it (the witness).
3. Each non-equivalent mutant is graded by its suite through the real grading engine (autograder.verdict.hidden: a
   sandboxed worker, a trusted suite process), the mutated part's tests only. It is caught when its graded cell
   loses points. The score of a suite is caught / non-equivalent; every survivor is listed with its witness.

A kernel exercise's graded parts are Triton kernels that the course's launcher runs (the suite's `KERNELS`, launcher ->
kernel): the contract is the launcher's, so the oracle runs each mutated kernel through the launcher, in Triton's
interpreter, on KERNEL_DRAWS of its drawn calls and its edges (fixed by the seed) and through the families, against the
reference kernel. `--max-mutants N` takes N mutants per part, spread evenly over them all (a kernel has about 500,
each judged and graded in the interpreter, with the kernels compiled: 5 to 30 s each).

    python -m autograder.authoring.mutation [ASSIGNMENT ...] [--draws 60] [--only CELL] [--out DIR] [--max-mutants N]
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

from autograder import ROOT, config
from autograder.authoring import variants
from autograder.authoring.mutants import LEARNER_OPERATORS, Mutant, mutants
from autograder.notebooks import TESTS_SUFFIX, graded_cells

ORACLE_S = 120           # one mutant's oracle run, at most
ORACLE_MEMORY = 6 << 30
KERNEL_DRAWS = 6         # drawn calls of a kernel's launcher, besides its edges (each runs in Triton's interpreter)


def contract_name(suite, part: str) -> str:
    """The name of `part` in the suite's CONTRACT: its own, or for a kernel the launcher's that runs it."""
    if part in suite.CONTRACT:
        return part
    launchers = [name for name, kernel in getattr(suite, "KERNELS", {}).items() if kernel == part]
    if len(launchers) != 1 or launchers[0] not in suite.CONTRACT:
        raise KeyError(f"{part}: neither a part of the suite's CONTRACT nor a kernel of one of its launchers (KERNELS)")
    return launchers[0]


def sample(found: list, cap: int | None) -> list:
    """At most `cap` of `found`, spread evenly over them (all of them without a cap)."""
    if not cap or len(found) <= cap:
        return found
    return [found[i * len(found) // cap] for i in range(cap)]


def graded_parts(assignment: str) -> list[str]:
    """The parts of `assignment` that a graded cell scores (a solution cell `name` with a graded `name_tests`)."""
    graded = graded_cells(variants.submission(assignment))
    return [cell for cell in variants.reference_sources(assignment) if cell + TESTS_SUFFIX in graded]


class Oracle:
    """The contract's calls of one part, drawn once, with the reference's answers; `witness` runs a mutant on them."""

    def __init__(self, assignment: str, part: str, draws: int, seed: int = 1):
        import torch

        from autograder.verdict.suites import contract

        torch.set_num_threads(1)         # the oracle forks: a thread pool at work in a fork deadlocks the child
        self.contract = contract
        suite = importlib.import_module(f"autograder.verdict.suites.test_{assignment}")
        self.launcher = contract_name(suite, part)
        self.part = suite.CONTRACT[self.launcher]
        self.assignment, self.name = assignment, part
        if self.launcher != part:                   # a kernel: its launcher's calls, each run in the interpreter
            draws = min(draws, KERNEL_DRAWS)
        reference = self.reference = variants.executed(assignment, {})
        self.seed = seed
        self.calls = [(call, contract.expected_of(self.part, call, reference))
                      for call in contract.drawn_calls(self.part, seed, draws)]
        raised = [e.outcome for _, e in self.calls if "raised" in e.outcome]
        if self.launcher != part and raised:        # every mutant would raise as the reference does: all "equivalent"
            raise RuntimeError(f"the reference {part} raised through {self.launcher}: {raised[0].get('message')}; its "
                               "kernels run in Triton's interpreter only where TRITON_INTERPRET=1 was set before "
                               "triton was first imported (torch._dynamo imports it)")

    def witness(self, mutant: Mutant) -> str | None:
        """The first drawn call on which `mutant` breaks the contract, said; None: it meets it on every call."""
        from autograder.verdict.suites import families

        ns = variants.executed(self.assignment, {mutant.cell: mutant.source})
        for call, expected in self.calls:
            wrong = expected.judge(call, self.contract.run_here(ns, call, rename=self.part.rename))
            if wrong:
                return f"{call}: {wrong}"
        return families.witness(self.part, self.reference, ns, self.seed)    # the promises every part keeps

    def witness_in_child(self, mutant: Mutant) -> str | None:
        """`witness` in a forked process with a time and memory limit (a mutant may loop or allocate forever)."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                                    # pragma: no cover - the child
            os.close(r)
            resource.setrlimit(resource.RLIMIT_AS, (ORACLE_MEMORY, ORACLE_MEMORY))
            signal.alarm(ORACLE_S)
            try:
                found = self.witness(mutant)
            except BaseException as e:  # noqa: BLE001 - whatever the mutant does is its answer
                found = f"the mutant ended the oracle's run ({type(e).__name__})"
            os.write(w, json.dumps({"witness": found}).encode())
            os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 1 << 16):
            data += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
            return f"it did not finish within {ORACLE_S} s on the contract's calls"
        if not data:
            return f"the mutant ended the oracle's run (exit status {status})"
        return json.loads(data)["witness"]


def grade(assignment: str, mutant: Mutant, settings: config.Settings) -> tuple[float, float, str]:
    """(score, points, what the grading said) of the mutated part, graded by its own tests up to the first that
    fails."""
    from autograder.verdict import hidden

    gid = mutant.cell + TESTS_SUFFIX
    grading = hidden.grade(variants.submission(assignment, {mutant.cell: mutant.source}), assignment, settings,
                           only=(gid,), first_failure=True)
    if grading.fault:
        return float("nan"), 0.0, f"grader fault: {grading.fault}"
    v = grading.verdicts[gid]
    return v.score, v.points, "; ".join(v.failed)[:300]


def settings(suites_dir: str = "") -> config.Settings:
    """The grading settings of a mutant: a shorter budget (a mutant may loop), and the suites of `suites_dir` when
    given (to measure another version of them)."""
    return dataclasses.replace(config.current(), learner_budget=300.0, call_timeout=20.0,
                               suites_dir=suites_dir or config.current().suites_dir)


def run(assignment: str, draws: int, only: str | None, log, suites_dir: str = "", cap: int | None = None,
        operators: tuple[str, ...] = ()) -> dict:
    """Mutants, oracle and grading of one assignment's graded parts: the counts and every mutant's fate (of at most
    `cap` mutants a part, spread evenly over them; of `operators`' mutants alone when given)."""
    grading = settings(suites_dir)
    result: dict = {"assignment": assignment, "parts": {}}
    for part in graded_parts(assignment):
        if only and part != only:
            continue
        started = time.time()
        oracle = Oracle(assignment, part, draws)
        rows = []
        found = [m for m in mutants(part, variants.reference_sources(assignment)[part])
                 if not operators or m.operator in operators]
        for m in sample(found, cap):
            witness = oracle.witness_in_child(m)
            row: dict = {"name": m.name, "operator": m.operator, "line": m.line, "before": m.before, "after": m.after,
                   "witness": witness}
            if witness is not None:
                score, points, said = grade(assignment, m, grading)
                row.update(score=score, points=points, caught=score < points, said=said)
            rows.append(row)
            log(f"{assignment}/{m.name}: " + ("equivalent" if witness is None else
                                               ("caught" if row["caught"] else "SURVIVED") + f" ({row['score']:g})"))
        distinct = [r for r in rows if r["witness"] is not None]
        caught = sum(bool(r["caught"]) for r in distinct)
        result["parts"][part] = {"mutants": len(rows), "equivalent": len(rows) - len(distinct),
                                 "distinct": len(distinct), "caught": caught,
                                 "score": caught / len(distinct) if distinct else 1.0,
                                 "seconds": round(time.time() - started), "rows": rows,
                                 **({"of": len(found)} if len(rows) < len(found) else {}),
                                 **({"launcher": oracle.launcher} if oracle.launcher != part else {})}
    return result


def report(results: list[dict]) -> str:
    """The mutation score per suite and part, and every survivor with the input that shows it."""
    lines = ["# Mutation testing of the hidden suites", "",
             "Mutants of each graded part's reference (autograder/authoring/mutants.py); an oracle drew calls over the "
             "part's whole contract and set aside the mutants that met it everywhere (equivalent); the others were "
             "graded by the suite through the real grading engine, the part's own tests only. Made by "
             "`make mutation`.", "",
             "The learners' operators (`LEARNER_OPERATORS`: `view` for `reshape`, `.detach()`, float32 steps, "
             "`torch.no_grad()`, `lru_cache`, the input returned at one row, a buffer as a plain attribute) make the "
             "slips the blind corpus showed; the last columns count their mutants alone.", "",
             "| suite | part | mutants | equivalent | non-equivalent | caught | score | learners' ops caught | score |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def score(caught: int, distinct: int) -> str:
        return f"{100 * caught / distinct:.1f} %" if distinct else "-"

    for res in results:
        totals = [0, 0, 0, 0]
        for part, p in res["parts"].items():
            mine = [r for r in p["rows"] if r["witness"] is not None and r["operator"] in LEARNER_OPERATORS]
            lc = sum(bool(r["caught"]) for r in mine)
            lines.append(f"| {res['assignment']} | {part} | {p['mutants']} | {p['equivalent']} | {p['distinct']} | "
                         f"{p['caught']} | {100 * p['score']:.1f} % | {lc} / {len(mine)} | {score(lc, len(mine))} |")
            totals = [totals[0] + p["distinct"], totals[1] + p["caught"], totals[2] + len(mine), totals[3] + lc]
        if totals[0]:
            lines.append(f"| **{res['assignment']}** | all | | | {totals[0]} | {totals[1]} | "
                         f"**{score(totals[1], totals[0])}** | {totals[3]} / {totals[2]} | "
                         f"**{score(totals[3], totals[2])}** |")
    notes = [f"- `{res['assignment']}/{part}`: "
             + (f"{p['mutants']} of its {p['of']} mutants, spread evenly over them (`--max-mutants`). " if "of" in p
                else "")
             + (f"A Triton kernel: the oracle ran each mutant through the course's launcher `{p['launcher']}` in "
                "Triton's interpreter, on that launcher's edges and drawn calls and the families."
                if "launcher" in p else "")
             for res in results for part, p in res["parts"].items() if "of" in p or "launcher" in p]
    if notes:
        lines += ["", *notes]
    lines += ["", "## Survivors", ""]
    survivors = [(res["assignment"], r) for res in results for p in res["parts"].values() for r in p["rows"]
                 if r["witness"] is not None and not r["caught"]]
    if not survivors:
        lines.append("None: every non-equivalent mutant was caught.")
    for assignment, r in survivors:
        lines += [f"- `{assignment}/{r['name']}`, line {r['line']}: `{r['before']}` -> `{r['after']}`",
                  f"  - shown by: {r['witness']}", f"  - graded {r['score']:g} / {r['points']:g}"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("assignments", nargs="*", default=sorted(p.name for p in (ROOT / "solutions").iterdir()))
    ap.add_argument("--draws", type=int, default=60, help="calls the oracle draws per part")
    ap.add_argument("--only", help="one part (its solution cell's grade_id)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where mutation.md and mutation.json go")
    ap.add_argument("--suites", default="", help="grade with the suites in this folder (another version of them)")
    ap.add_argument("--max-mutants", type=int, default=None, help="at most this many mutants a part, spread evenly")
    ap.add_argument("--learners", action="store_true", help="the learners' operators' mutants alone "
                    "(LEARNER_OPERATORS): mutation-learners.md")
    args = ap.parse_args(argv)
    # A kernel exercise's parts run in Triton's interpreter here, chosen when triton is first imported (its language's
    # own functions are made then), which torch may do early (torch._dynamo): so before any part is run.
    os.environ.setdefault("TRITON_INTERPRET", "1")
    results = []
    for assignment in args.assignments:
        results.append(run(assignment, args.draws, args.only, lambda s: print(s, file=sys.stderr, flush=True),
                           args.suites, args.max_mutants, LEARNER_OPERATORS if args.learners else ()))
    text = report(results)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "mutation" if not args.only and len(args.assignments) > 1 else f"mutation-{'-'.join(args.assignments)}"
    name += "-learners" if args.learners else ""
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
