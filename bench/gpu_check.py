"""`make gpu-check`'s measurements on a machine with an NVIDIA GPU (bench/gpu_check.sh runs it), every number into one
JSON file and a readable report on stdout:

    python bench/gpu_check.py [--out FILE.json] [--gradings 20] [--steps facts,probe,calibration,memory,class]

- facts: the machine, its driver, torch and CUDA, the cgroup hierarchy, what a sandbox gets (protections);
- probe: a sandboxed worker computes on the GPU, and the driver sees its memory under the sandbox's processes;
- calibration: the suite's speed rule for scaled_dot_product_attention at its GPU inputs, `--gradings` times for the
  reference against itself, a correct answer with more passes (torch.where masks), a loop over query positions;
- memory: blockwise attention's extra GPU memory against the sequence length, for the reference, the whole score
  matrix, and the whole matrix with the allocator's cache emptied and its statistics reset after the call;
- class: a small class (reference, correct alternatives, loops, the whole matrix and its hidden version) of every
  assignment graded by the real `nbgrader autograde` through `autograder.classroom.classgrade`, on the GPU.

The device is the grading's setting (GRADER_DEVICE, default here: cuda); GRADER_DEVICE=cpu rehearses it all on the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from autograder import config, exercises
from autograder.authoring import variants
from autograder.classroom import grade
from autograder.notebooks import learner_cells, read, source_notebook
from autograder.sandbox import box as sandbox
from autograder.sandbox import cgroups
from autograder.verdict import measure
from autograder.verdict import record as stored
from autograder.verdict.learner import Learner
from autograder.verdict.suites import checks
from autograder.verdict.suites import test_attention as attention
from autograder.verdict.timing import Target, compare, peak_memory

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("GRADER_DEVICE", "cuda")   # before any grading reads the settings

SDPA, BLOCKWISE = "scaled_dot_product_attention", "blockwise_attention"
ATTENTION = {v.name: v.cells for v in variants.load("attention")}
MIB = 2 ** 20

# Correct values, one call per position (a known mistake of no exercise's variants).
BLOCK_LOOP = variants.reference_sources("residual")["TransformerBlock"].replace(
    "            x = x + self.ff(self.norm2(x))\n",
    "            x = x + torch.cat([self.ff(self.norm2(x[:, t:t + 1])) for t in range(x.shape[1])], dim=1)\n")
TINY_LOOP = variants.reference_sources("transformer")["TinyTransformer"].replace(
    "        return self.head(self.norm(x))",
    "        return torch.cat([self.head(self.norm(x[:, t:t + 1])) for t in range(T)], dim=1)")

# Loops over positions for the assignments whose known mistakes have none.
EXTRA = {
    "residual": {"ploop": ({"TransformerBlock": BLOCK_LOOP}, "the feed-forward applied one position at a time")},
    "transformer": {"ploop": ({"TinyTransformer": TINY_LOOP}, "the output head applied one position at a time")},
}


def known_class(per_exercise: int = 2) -> dict:
    """assignment -> learner -> (the solution cells that differ from the reference, what it is): for every exercise,
    the reference, its first correct alternatives, its first known speed and memory mistakes (what a GPU changes)."""
    out: dict = {}
    for asg in exercises.names():
        known = variants.load(asg)
        correct = [v for v in known if isinstance(v, variants.Correct)][:per_exercise]
        costly = [v for kind in ("speed", "memory")
                  for v in [v for v in known if isinstance(v, variants.Bug) and v.kind == kind][:per_exercise]]
        out[asg] = {"ref": ({}, "the reference solution"),
                    **{v.name: (v.cells, f"correct: {v.about or v.name}") for v in correct},
                    **{v.name: (v.cells, f"{v.kind}: {v.about or v.name}") for v in costly},
                    **EXTRA.get(asg, {})}
    return out


CLASS = known_class()


def device() -> str:
    return config.current().device


def say(*parts):
    print(*parts, flush=True)


# -- facts ------------------------------------------------------------------------------------------------------
def facts() -> dict:
    import torch

    f = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "device": device(),
         "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
         "kernel": platform.release(), "cpus": os.cpu_count()}
    if torch.cuda.is_available():
        f["gpu"] = torch.cuda.get_device_name(0)
        f["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2 ** 30, 1)
    try:
        import pynvml

        pynvml.nvmlInit()
        f["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception as e:  # noqa: BLE001 - reported as it is
        f["driver"] = f"NVML: {type(e).__name__}: {e}"
    f["cgroup"] = "v2" if (cgroups.ROOT / "cgroup.controllers").exists() else "v1"
    if f["cgroup"] == "v2":
        f["cgroup_v2_controllers"] = (cgroups.ROOT / "cgroup.controllers").read_text().split()
        f["cgroup_v2_own"] = cgroups._own_paths().get("", "/")
    f["root"] = os.geteuid() == 0
    f["bubblewrap"] = sandbox._bwrap()
    f["protections"] = sandbox.protections()
    f["missing"] = sandbox.missing_protections()
    f["mps"] = shutil.which("nvidia-cuda-mps-control")
    paths = ":".join(sandbox.Limits.of(config.current(), wall_s=0).gpu_paths)
    f["settings"] = {"device": device(), "speed_factor": checks.speed_factor(), "gpu_paths": paths,
                     "sdpa_speed": [attention.SDPA_GPU_SPEED_SHAPE, attention.SDPA_GPU_SPEED_CALLS],
                     "memory": [attention.MEMORY_GPU_SHAPE, attention.MEMORY_FRACTION]}
    for k, v in f.items():
        say(f"  {k}: {v}")
    return f


# -- probe ------------------------------------------------------------------------------------------------------
PROBE = '''import torch

def double(x):
    return x * 2

def where():
    return [str(torch.ones(1).cuda().device) if torch.cuda.is_available() else "no GPU", torch.cuda.device_count()]
'''


def probe() -> dict:
    """A sandboxed worker computes on the device; the driver counts its memory under the sandbox's processes. Where
    the sandbox's default view of the driver's files is not enough, the whole /sys is tried and kept (and said)."""
    result = {}
    for paths in (None, "/proc/driver/nvidia:/sys"):
        if paths:
            os.environ["GRADER_GPU_PATHS"] = paths
        w = Learner([{"id": "probe", "source": PROBE}])
        try:
            t0 = time.monotonic()
            w.start()
            result["worker_start_s"] = round(time.monotonic() - t0, 2)
            result["sees"] = w.fn("where")()
            out = Target(w, "double").request("run", seed=3, inputs=[{"kind": "randn", "shape": [4, 8]}], kwargs={},
                                              count=1, project=True)
            result["run"] = {"shape": out[0]["shape"], "projection": list(out[0]["projection"].shape)}
            result["pids"] = w.sandbox.pids()
            result["gpu_memory_at_start_mib"] = None if w.gpu_at_start is None else round(w.gpu_at_start / MIB)
            now = measure.gpu_memory(w.sandbox.pids(), w.grading)
            result["gpu_memory_now_mib"] = None if now is None else round(now / MIB)
            result["gpu_paths"] = ":".join(w.limits.gpu_paths)
            result["protections"] = w.sandbox.protections
            result["ok"] = True
            break
        except Exception as e:  # noqa: BLE001 - reported, then the wider view is tried
            result = {"ok": False, "error": f"{type(e).__name__}: {e}"[:3000],
                      "gpu_paths": ":".join(w.limits.gpu_paths)}
            say(f"  probe with gpu_paths {result['gpu_paths']}: {result['error']}")
        finally:
            w.close()
    for k, v in result.items():
        say(f"  {k}: {v}")
    return result


# -- calibration ------------------------------------------------------------------------------------------------
def workers(cells_by_name: dict) -> dict:
    ws = {"reference": Learner(learner_cells(read(source_notebook("attention"))), role="reference")}
    for name, cells in cells_by_name.items():
        ws[name] = Learner(learner_cells(variants.submission("attention", cells)))
    for w in ws.values():
        w.start()
    return ws


def calibration(gradings: int) -> dict:
    shape, calls = attention.on_device((attention.SDPA_SPEED_SHAPE, attention.SDPA_SPEED_CALLS),
                                       (attention.SDPA_GPU_SPEED_SHAPE, attention.SDPA_GPU_SPEED_CALLS))
    inputs, factor = [{"kind": "randn", "shape": shape}] * 3, checks.speed_factor()
    answers = {"same": {}, "where": {SDPA: ATTENTION["where_and_float64_blocks"][SDPA]},
               "einsum": {SDPA: ATTENTION["softmax_einsum"][SDPA]}, "loop": ATTENTION["sdpa_query_loop"]}
    ws = workers(answers)
    out = {"shape": shape, "calls": calls, "factor": factor, "gradings": gradings}
    try:
        ref = Target(ws["reference"], SDPA)
        # the reference's spread run to run, 21 timed runs against itself
        c = compare(Target(ws["same"], SDPA), ref, inputs, calls=calls, reps=21, until_se=0)
        out["reference_cv"] = round(c.spread(), 4)
        out["reference_run_ms"] = round(statistics.median(c.reference) * 1e3, 3)
        for name in answers:
            best, reps, fails, seconds = [], [], 0, time.monotonic()
            for _ in range(gradings):
                ratios, mismatch = checks.speed_ratios(Target(ws[name], SDPA), ref, inputs, calls=calls, factor=factor)
                verdict = mismatch is None and min(ratios) <= factor
                fails += not verdict
                best.append(min(ratios) if ratios else float("inf"))
                reps.append(len(ratios))
            finite = [b for b in best if b != float("inf")]
            out[name] = {"fails": fails, "median": round(statistics.median(finite), 3) if finite else None,
                         "min": round(min(finite), 3) if finite else None,
                         "max": round(max(finite), 3) if finite else None,
                         "measurements": sum(reps), "seconds": round(time.monotonic() - seconds, 1)}
            say(f"  {name}: {fails}/{gradings} fail at {factor:g}x; ratio median {out[name]['median']}, "
                f"range {out[name]['min']}-{out[name]['max']} ({out[name]['seconds']} s)")
        say(f"  reference against itself, 21 runs: CV {out['reference_cv']:.2%}, {out['reference_run_ms']} ms a run")
    finally:
        for w in ws.values():
            w.close()
    return out


# -- memory -----------------------------------------------------------------------------------------------------
def memory(lengths: list[int]) -> dict:
    names = {"reference": {}, "full": ATTENTION["blockwise_full_matrix"],
             "unseen": ATTENTION["blockwise_full_matrix_unseen"]}
    ws = workers({k: v for k, v in names.items() if k != "reference"})
    B, H, _, d = attention.on_device(attention.MEMORY_SHAPE, attention.MEMORY_GPU_SHAPE)
    rows = []
    try:
        for L in lengths:
            shape = [B, H, L, d]
            inputs, warmup = [{"kind": "randn", "shape": shape}] * 3, [{"kind": "randn", "shape": [B, H, 256, d]}] * 3
            row = {"L": L, "matrix_mib": round(attention.score_matrix_bytes(shape) / MIB)}
            for name in names:
                t0 = time.monotonic()
                extra = peak_memory(Target(ws[name], BLOCKWISE), inputs, {"block_size": 64}, warmup=warmup)[0]
                row[name] = round(extra / MIB, 1)
                row[f"{name}_s"] = round(time.monotonic() - t0, 2)
            rows.append(row)
            say(f"  L = {L}: score matrix {row['matrix_mib']} MiB; extra memory: reference {row['reference']} MiB, "
                f"whole matrix {row['full']} MiB, whole matrix hidden {row['unseen']} MiB")
        polls = ws["reference"].last_poll
    finally:
        for w in ws.values():
            w.close()
    return {"shape": [B, H, "L", d], "fraction": attention.MEMORY_FRACTION, "rows": rows, "driver_polls": polls}


# -- a class graded for real ------------------------------------------------------------------------------------
def graded_class(grading_dir: Path, timeout: float, per: int) -> dict:
    """Every assignment's learners graded at once, each assignment by its own `autograder.classroom.classgrade` with
    `per` Dask workers (every learner's grading holds a few CUDA processes: a kernel, its worker, the shared
    workers)."""
    asgs = list(CLASS)
    grade.prepare(grading_dir, asgs)
    for asg, learners in CLASS.items():
        for learner, (cells, _) in learners.items():
            grade.submit(grading_dir, learner, asg, variants.submission(asg, cells))
    t0 = time.monotonic()
    procs = {asg: subprocess.Popen([sys.executable, "-m", "autograder.classroom.classgrade", asg,
                                    "--grading-dir", str(grading_dir), "--workers", str(per), "--no-progress"],
                                   cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for asg in asgs}
    summaries = {}
    for asg, p in procs.items():
        try:
            summaries[asg] = p.communicate(timeout=max(1.0, timeout - (time.monotonic() - t0)))[0][-3000:]
        except subprocess.TimeoutExpired:
            p.kill()
            summaries[asg] = "(stopped: over the time of this step)\n" + (p.communicate()[0] or "")[-3000:]
    wall = time.monotonic() - t0
    rows = grade.scores(grading_dir, asgs)
    table = {}
    for r in rows:
        table.setdefault(f"{r.assignment}/{r.learner}", {})[r.cell.removesuffix("_tests")] = {
            "score": r.score, "points": r.points, "flagged": r.needs_manual_grade,
            "comment": (r.comment or "")[:300]}
    for asg, learners in CLASS.items():
        say(f"  {asg}:")
        for learner, (_, about) in learners.items():
            cells = table.get(f"{asg}/{learner}", {})
            got = sum(c["score"] or 0 for c in cells.values())
            total = sum(c["points"] for c in cells.values())
            lost = "; ".join(f"{name} {c['score']}/{c['points']:g}{' (flagged)' if c['flagged'] else ''}: "
                             f"{c['comment'][:160]}" for name, c in cells.items() if c["score"] != c["points"])
            say(f"    {learner:8s} {got:g}/{total:g}  {about}" + (f"\n             lost: {lost}" if lost else ""))
    record = stored.load(stored.path(grading_dir, "ref", "attention", "attention")) or {}
    n = sum(len(v) for v in CLASS.values())
    say(f"  {n} notebooks in {wall:.0f} s ({wall / n:.1f} s a notebook, {len(asgs)} assignments at once, {per} Dask "
        f"workers each); protections of a graded notebook: {record.get('protections')}; notes: {record.get('notes')}")
    for asg, text in summaries.items():
        say(f"  classgrade {asg}: " + text.strip().replace("\n", "\n    "))
    return {"wall_s": round(wall, 1), "notebooks": n, "per_notebook_s": round(wall / n, 1), "scores": table,
            "summaries": summaries, "protections": record.get("protections"), "notes": record.get("notes")}


STEPS = ("facts", "probe", "calibration", "memory", "class")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "_build" / "gpu-check.json")
    p.add_argument("--gradings", type=int, default=20)
    p.add_argument("--lengths", default="2048,4096,8192,16384")
    p.add_argument("--steps", default=",".join(STEPS))
    p.add_argument("--class-timeout", type=float, default=240.0)
    p.add_argument("--class-workers", type=int, default=2, help="Dask workers of each assignment's classgrade")
    a = p.parse_args()
    results = json.loads(a.out.read_text()) if a.out.exists() else {}
    for step in a.steps.split(","):
        say(f"== {step}")
        t0 = time.monotonic()
        try:
            if step == "facts":
                results[step] = facts()
            elif step == "probe":
                results[step] = probe()
            elif step == "calibration":
                results[step] = calibration(a.gradings)
            elif step == "memory":
                results[step] = memory([int(x) for x in a.lengths.split(",")])
            elif step == "class":
                results[step] = graded_class(ROOT / "_build" / "gpu-grading", a.class_timeout, a.class_workers)
        except Exception as e:  # noqa: BLE001 - one step's failure is a result; the next steps still run
            import traceback

            results[step] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
            say(traceback.format_exc()[-3000:])
        say(f"   ({time.monotonic() - t0:.0f} s)")
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
