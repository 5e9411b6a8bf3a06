#!/usr/bin/env bash
# `make gpu-check` on a machine with an NVIDIA GPU and no network: the course installed the ordinary way, in a
# virtual environment on the machine's own CUDA build of torch, then the sandbox and GPU tests and bench/gpu_check.py
# (the speed rule's calibration, GPU memory, a class graded by the real nbgrader), every number in
# _build/gpu-check.txt and _build/gpu-check.json. About 5 minutes on one H200.
#
# The environment: .venv when its torch sees the GPU; else .venv-gpu, made here from the machine's Python
# (GPU_PYTHON, default python3, whose torch must see the GPU) with a .pth file naming that Python's package folders,
# and the packages it lacks installed into it from the wheels in .whl/ (`make gpu-wheels` downloads them beforehand,
# where PyPI is reachable; bench/gpu-requirements.txt lists them). GRADER_DEVICE=cpu rehearses everything on the CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
export GRADER_DEVICE=${GRADER_DEVICE:-cuda} PYTHONUNBUFFERED=1
out=_build
mkdir -p "$out"
log=$out/gpu-check.txt
py=${GPU_PYTHON:-python3}
sees_gpu() { [ "$GRADER_DEVICE" = cpu ] || "$1" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; }

venv=.venv
if ! { [ -x $venv/bin/python ] && sees_gpu $venv/bin/python; }; then
  venv=.venv-gpu
  if ! { [ -x $venv/bin/python ] && sees_gpu $venv/bin/python; }; then
    sees_gpu "$py" || { echo "gpu-check: $py has no torch that sees a GPU (set GPU_PYTHON)"; exit 1; }
    ls .whl/*.whl >/dev/null 2>&1 || { echo "gpu-check: no wheels in .whl/ (run \`make gpu-wheels\` first)"; exit 1; }
    rm -rf $venv
    "$py" -m venv --without-pip $venv || exit 1
    site=$($venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    "$py" -c "import sys; print('\n'.join(p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))))" \
      > "$site/machine-packages.pth"
    # the machine's pip (found through the .pth file) installs into this environment, touching nothing of the machine's
    $venv/bin/python -m pip install -q --no-index --no-deps --ignore-installed --no-compile --no-warn-script-location \
      --disable-pip-version-check .whl/*.whl || exit 1
    # and the course itself, in editable mode as `make` installs it (built with the machine's setuptools, offline)
    $venv/bin/python -m pip install -q --no-index --no-deps --no-build-isolation --disable-pip-version-check -e . \
      || exit 1
  fi
fi
py=$venv/bin/python

json=$out/gpu-check.json
rm -f "$json"
{
  echo "# make gpu-check, $(date -u '+%Y-%m-%d %H:%M UTC'), device $GRADER_DEVICE, environment $venv"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "## the machine, and a sandboxed worker on the device (bench/gpu_check.py)"
  timeout 120 $py bench/gpu_check.py --out "$json" --steps facts,probe
  # the probe widens what the sandbox sees of the driver's files only where the default view was not enough
  paths=$($py -c "import json; print(json.load(open('$json')).get('probe', {}).get('gpu_paths', ''))" 2>/dev/null)
  [ -n "$paths" ] && export GRADER_GPU_PATHS=$paths
  echo "## the sandbox and the measures on this machine's cgroups, grading on the CPU"
  GRADER_DEVICE=cpu timeout 240 $py -m pytest -q -p no:cacheprovider --durations=5 -k "not another_user" \
    tests/test_sandbox.py tests/test_timing.py
  echo "## the GPU tests"
  timeout 240 $py -m pytest -rs -s -q -p no:cacheprovider tests/test_gpu.py
  echo "## measurements (bench/gpu_check.py)"
  timeout 600 $py bench/gpu_check.py --out "$json" --steps calibration,memory,class "$@"
  echo "## fused_attention's Triton kernels against torch's flash backend (bench/fused_attention_speed.py)"
  timeout 600 $py bench/fused_attention_speed.py --gradings 3
} 2>&1 | tee "$log"
echo "results written to $log and $out/gpu-check.json"
