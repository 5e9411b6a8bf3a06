"""The GPU path. Here, on any machine: the device setting, what a GPU sandbox sees, timed runs sent back as shapes and
projections, the course's parts keeping their device, one measured comparison at a time on a GPU. With a CUDA device
(`make gpu-check` runs them on one; skipped elsewhere with the reason): the speed rule, and GPU memory that learner code
cannot hide from the driver's reading."""
import os
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
import torch
from helpers import ROOT

from autograder import config
from autograder.authoring import variants
from autograder.notebooks import learner_cells, read, source_notebook
from autograder.sandbox import box as sandbox
from autograder.sandbox import gpu
from autograder.verdict.learner import Learner
from autograder.verdict.suites import checks
from autograder.verdict.suites import test_attention as suite
from autograder.verdict.timing import Target, compare, gpu_lane, peak_memory, same_outputs

CUDA = torch.cuda.is_available()
_NO_CUDA = pytest.mark.skipif(not CUDA, reason="no CUDA device here: `make gpu-check` runs these on one")


def needs_cuda(test):
    """A test of the gpu tier, skipped where no CUDA device is."""
    return pytest.mark.gpu(_NO_CUDA(test))


SDPA = "scaled_dot_product_attention"
ATTENTION = {v.name: v.cells for v in variants.load("attention")}
LOOP = ATTENTION["sdpa_query_loop"]
WHERE = {SDPA: ATTENTION["where_and_float64_blocks"][SDPA]}


def worker(cells: dict | None = None) -> Learner:
    return Learner(learner_cells(variants.submission("attention", cells)))


@pytest.fixture
def device(request, monkeypatch):
    """The grading device of a test (its workers are made after it is set)."""
    monkeypatch.setenv("GRADER_DEVICE", request.param)
    return request.param


DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, _NO_CUDA])]


# -- on any machine ------------------------------------------------------------------------------------------------
def test_the_device_is_a_setting(monkeypatch):
    assert config.Settings().device == "cpu" and not sandbox.Limits().gpu and not gpu.on_gpu()
    monkeypatch.setenv("GRADER_DEVICE", "cuda")
    s = config.current()
    assert s.device == "cuda" and sandbox.Limits.of(s, wall_s=1).gpu and gpu.on_gpu()
    assert sandbox.Limits.of(s, wall_s=1).gpu_paths == gpu.Nvidia.driver_files, "its vendor's driver files"
    assert "/proc/driver/nvidia" in gpu.Nvidia.driver_files
    monkeypatch.setenv("GRADER_GPU_PATHS", "/proc/driver/nvidia:/sys")
    assert sandbox.Limits.of(config.current(), wall_s=1).gpu_paths == ("/proc/driver/nvidia", "/sys"), "as set"


def test_a_device_is_served_by_its_vendor():
    """The device's type names its vendor (its nodes, driver files, visibility, driver); the CPU has none, and a
    device no vendor serves is refused with the reason."""
    assert isinstance(gpu.vendor("cuda"), gpu.Nvidia) and isinstance(gpu.vendor("cuda:1"), gpu.Nvidia)
    assert gpu.vendor("cpu") is None and gpu.vendor("tpu") is None
    assert gpu.driver("cpu") is None and gpu.memory_of([os.getpid()], "cpu") is None
    with pytest.raises(sandbox.SandboxUnavailable, match="no GPU vendor serves"):
        sandbox.Sandbox(sandbox.Limits(device="tpu"))


def test_a_gpu_sandbox_sees_every_gpu_and_maps_what_cuda_needs(monkeypatch):
    """CUDA_VISIBLE_DEVICES passes as it is set, and unset stays unset (an empty value hides every GPU); a GPU
    sandbox's processes have no address-space limit (CUDA maps far more than it uses when it starts)."""
    import resource

    gpu, cpu = sandbox.Limits(device="cuda"), sandbox.Limits()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert "CUDA_VISIBLE_DEVICES" not in sandbox._env(gpu, "/h", "/c")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert sandbox._env(gpu, "/h", "/c")["CUDA_VISIBLE_DEVICES"] == "0"
    assert "CUDA_VISIBLE_DEVICES" not in sandbox._env(cpu, "/h", "/c")
    assert sandbox._env(gpu, "/h", "/c")["GRADER_DEVICE"] == "cuda"
    assert resource.RLIMIT_AS not in dict(sandbox._rlimits(gpu))
    assert dict(sandbox._rlimits(cpu))[resource.RLIMIT_AS] == cpu.memory


@pytest.mark.skipif(bool(gpu.Nvidia().nodes()), reason="this machine has a GPU")
def test_a_cuda_grading_without_a_gpu_stops_with_the_reason():
    with pytest.raises(sandbox.SandboxUnavailable, match="no NVIDIA GPU"):
        sandbox.Sandbox(sandbox.Limits(device="cuda"))


def test_packages_outside_the_environment_are_seen_and_the_course_is_not(tmp_path):
    """A folder on PYTHONPATH (as `pip install --target` makes) is importable in the sandbox, read-only; the course
    root on the same path is not there."""
    (tmp_path / "extra_package.py").write_text("ANSWER = 42\n")
    probe = textwrap.dedent(f"""
        from autograder.verdict.learner import Learner
        cell = '''import os, extra_package
        def answer():
            return [extra_package.ANSWER, os.path.exists({str(ROOT / "solutions")!r}), os.access(extra_package.__file__, os.W_OK)]
        '''
        w = Learner([{{"id": "c", "source": cell}}], guarded=False)
        print(w.fn("answer")(), w.cell_errors)
        w.close()
    """)  # noqa: E501 - the probe's code, kept as it runs
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[42, False, False] []", r.stdout + r.stderr[-2000:]


def test_a_run_projected_as_on_a_gpu_compares_shapes_exactly_and_values_by_projection():
    """What a GPU run sends back of each output: its shape, and its last dimension projected on a vector drawn from
    the run's seed; the same inputs give the same projections, a slightly wrong output or shape does not."""
    wrong_value = {SDPA: ATTENTION["softmax_einsum"][SDPA].replace("/ math.sqrt(q.size(-1))",
                                                                   "/ math.sqrt(q.size(-1)) * 1.01")}
    extra_column = {SDPA: "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                          "    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)\n"
                          "    return torch.cat([w @ v, v[..., :1, :1].expand(*v.shape[:-2], q.shape[-2], 1)], -1), "
                          "w\n"}
    workers = [worker(), worker(), worker(wrong_value), worker(extra_column)]
    inputs = [{"kind": "randn", "shape": [2, 3, 16, 8]}] * 3
    try:
        ref, same, wrong, wider = (Target(w, SDPA).request("run", seed=11, inputs=inputs, kwargs={}, count=2,
                                                           project=True)
                                   for w in workers)
        assert [o["shape"] for o in ref] == [[2, 3, 16, 8]] * 2 and tuple(ref[0]["projection"].shape) == (2, 3, 16)
        assert same_outputs(same, ref)
        assert not same_outputs(wrong, ref), "1 % off in every score"
        assert not same_outputs(wider, ref), "one more column"
        other = Target(workers[1], SDPA).request("run", seed=12, inputs=inputs, kwargs={}, count=2, project=True)
        assert not same_outputs(other, ref), "other inputs and another vector"
    finally:
        for w in workers:
            w.close()


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_the_course_s_parts_keep_the_device_of_their_inputs(device):
    """MultiHeadAttention timed with the course's scaled_dot_product_attention: the stand-in's tensors go to the
    course's worker and come back on the device the learner's module computes on."""
    learner, reference, course = worker(), worker(), worker()
    try:
        mine, ref = checks.module_targets(learner, reference, "MultiHeadAttention", 64, 4)
        with learner.course_parts([SDPA], course), reference.course_parts([SDPA], course):
            c = compare(mine, ref, [{"kind": "randn", "shape": [2, 32, 64]}], calls=2, reps=3, until_se=0)
        assert c.mismatch is None and len(c.learner) == 3
    finally:
        for w in (learner, reference, course):
            w.close()


def test_one_measured_comparison_at_a_time_on_a_gpu(monkeypatch):
    """The GPU lane: a second grading process waits for the first to finish its measured calls, and its learner's
    time budget is not charged for the wait. On the CPU (a cgroup's CPU time is the clock) no lane is taken."""
    holder = textwrap.dedent("""
        import time
        from types import SimpleNamespace
        from autograder.verdict.timing import gpu_lane
        with gpu_lane(SimpleNamespace(deadline=0.0)):
            print("held", flush=True)
            time.sleep(1.5)
    """)
    monkeypatch.setenv("GRADER_DEVICE", "cuda")
    first = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert first.stdout.readline().strip() == "held"
        learner = SimpleNamespace(deadline=1000.0)
        started = time.monotonic()
        with gpu_lane(learner):
            waited = time.monotonic() - started
        assert waited > 0.8, waited
        assert learner.deadline >= 1000.0 + waited - 0.05
    finally:
        first.wait(10)
    monkeypatch.setenv("GRADER_DEVICE", "cpu")
    started = time.monotonic()
    with gpu_lane(SimpleNamespace(deadline=0.0)):
        assert time.monotonic() - started < 0.1


# -- with a CUDA device ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cuda_workers():
    mp = pytest.MonkeyPatch()
    mp.setenv("GRADER_DEVICE", "cuda")
    ws = {"reference": Learner(learner_cells(read(source_notebook("attention"))), role="reference"),
          "same": worker(), "where": worker(WHERE), "loop": worker(LOOP),
          "full": worker(ATTENTION["blockwise_full_matrix"]),
          "unseen": worker(ATTENTION["blockwise_full_matrix_unseen"])}
    yield ws
    for w in ws.values():
        w.close()
    mp.undo()


def sdpa_ratio(ws, name: str, dtype: str = "float32") -> tuple[float, str | None]:
    inputs = [{"kind": "randn", "shape": suite.SDPA_GPU_SPEED_SHAPE, "dtype": dtype}] * 3
    ratios, mismatch = checks.speed_ratios(Target(ws[name], SDPA), Target(ws["reference"], SDPA), inputs,
                                           calls=suite.SDPA_GPU_SPEED_CALLS)
    print(f"cuda {dtype} {name} against the reference: ratios {[round(r, 2) for r in ratios]}, mismatch {mismatch}")
    return min(ratios) if ratios else float("inf"), mismatch


@needs_cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_reference_passes_its_own_speed_check_on_cuda(cuda_workers, dtype):
    ratio, mismatch = sdpa_ratio(cuda_workers, "same", dtype)
    assert mismatch is None and ratio <= checks.GPU_SPEED_FACTOR


@needs_cuda
def test_a_correct_answer_with_more_passes_passes_on_cuda(cuda_workers):
    ratio, mismatch = sdpa_ratio(cuda_workers, "where")
    assert mismatch is None and ratio <= checks.GPU_SPEED_FACTOR


@needs_cuda
def test_a_loop_over_query_positions_fails_on_cuda(cuda_workers):
    ratio, mismatch = sdpa_ratio(cuda_workers, "loop")
    assert mismatch is not None or ratio > checks.GPU_SPEED_FACTOR


@needs_cuda
@pytest.mark.parametrize("part", ["flash_attention", "flash_attention_causal"])
def test_the_fused_attention_reference_kernels_pass_their_speed_check_on_cuda(part, monkeypatch):
    """fused_attention's reference kernels, compiled on the GPU in a learner's worker, within the suite's
    GPU_SPEED_FACTOR of torch's flash backend at each of its GPU_SPEED_CALLS, their outputs the flash backend's (the
    rule's numbers for the other known answers: bench/fused_attention_speed.py)."""
    monkeypatch.setenv("GRADER_DEVICE", "cuda")
    from autograder.verdict.suites import test_fused_attention as fused

    cells = learner_cells(variants.submission("fused_attention"))
    mine = Learner(fused.worker_cells(cells), refuse=fused.REFUSED_OPS, library=fused.LIBRARY)
    mine.modules = fused.ALLOWED_MODULES
    flash = Learner([c for c in cells if c["id"] == "setup"] + [{"id": "sdpa_flash", "source": fused.SDPA_FLASH}],
                    role="reference")
    try:
        for call in fused.GPU_SPEED_CALLS:
            ratios, mismatch = fused.gpu_ratios(mine, flash, part, call)
            print(f"cuda {part} {fused.where(call)}: ratios {[round(r, 2) for r in ratios]}, mismatch {mismatch}")
            assert mismatch is None and min(ratios) <= fused.GPU_SPEED_FACTOR, (call, ratios, mismatch)
    finally:
        mine.close()
        flash.close()


@needs_cuda
def test_gpu_memory_the_learner_hides_is_still_counted(cuda_workers):
    """At the suite's GPU shape: the reference's blockwise attention stays under the limit; the whole score matrix
    does not, nor does it when the allocator's cache is emptied and its peak statistics reset after the call."""
    shape = suite.MEMORY_GPU_SHAPE
    inputs, kwargs = [{"kind": "randn", "shape": shape}] * 3, {"block_size": 64}
    warmup = [{"kind": "randn", "shape": [*shape[:2], 256, shape[3]]}] * 3
    limit = suite.score_matrix_bytes(shape) * suite.MEMORY_FRACTION
    extra = {name: peak_memory(Target(cuda_workers[name], "blockwise_attention"), inputs, kwargs, warmup=warmup)[0]
             for name in ("reference", "full", "unseen")}
    print("cuda blockwise_attention extra GPU memory, MiB:", {k: round(v / 2**20) for k, v in extra.items()},
          f"limit {limit / 2**20:.0f}")
    assert extra["reference"] < limit <= min(extra["full"], extra["unseen"])


@needs_cuda
def test_the_driver_is_read_only_by_the_process_that_started_reading_it():
    """NVML is not fork-safe: a process forked after its parent read the driver gets no reading from it (the warm
    suite server, which forks each learner's process, never reads the driver; each learner's process does)."""
    assert gpu.memory_of([os.getpid()], "cuda") is not None
    pid = os.fork()
    if pid == 0:
        os._exit(0 if gpu.memory_of([os.getpid()], "cuda") is None else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0



@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_the_fused_kernels_answer_float32_at_its_precision(device):
    """On an NVIDIA GPU, tl.dot rounds float32 inputs to TF32 (10 bits of mantissa) unless told otherwise: errors of
    1e-3 where the notebook's checks hold a float32 answer to 1e-4. The notebook's environment cell tells Triton to
    multiply them in IEEE float32: its code, run as a learner's kernel runs it (a process of its own, its kernels
    compiled on a GPU, in Triton's interpreter without one), answers within 1e-4."""
    probe = textwrap.dedent(f"""
        import torch
        from autograder.notebooks import nbgrader_meta, read, source_notebook
        ns = {{}}
        for cell in read(source_notebook("fused_attention")).cells:
            if nbgrader_meta(cell).get("grade_id") in ("environment", "setup", "launchers", "attention_kernel"):
                exec(cell.source, ns)
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 2, n, 64, generator=g) for n in (80, 70, 70))
        out, lse = ns["flash_attention"](q.to("{device}"), k.to("{device}"), v.to("{device}"))
        s = q.double() @ k.double().transpose(-2, -1) / 8.0
        print(float((out.double().cpu() - torch.softmax(s, -1) @ v.double()).abs().max()),
              float((lse.double().cpu() - torch.logsumexp(s, -1)).abs().max()))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert all(float(e) < 1e-4 for e in r.stdout.split()), r.stdout
