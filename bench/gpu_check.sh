#!/usr/bin/env bash
# `make gpu-check`: every GPU test and GPU benchmark, results in one file. Under 5 minutes on one GPU.
#
# The Python is the machine's python3 when its torch sees a GPU and this project's .venv does not (a
# GPU machine's image usually holds a CUDA build of torch; the pinned CPU build cannot use the GPU);
# otherwise .venv, where without a GPU the tests are skipped with the reason.
# Packages that Python lacks come as wheels in .whl/ (`make gpu-wheels` downloads them for
# CPython 3.12 on x86-64), installed into a private folder, never into the machine's Python.
set -uo pipefail
cd "$(dirname "$0")/.."
out=_build/gpu-check.txt
mkdir -p _build
sees_gpu() { "$1" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; }
py=${GPU_PYTHON:-python3}
if [ -x .venv/bin/python ] && { sees_gpu .venv/bin/python || ! sees_gpu "$py"; }; then py=.venv/bin/python; fi
if [ "$py" != .venv/bin/python ] && ls .whl/*.whl >/dev/null 2>&1; then
  site=$(mktemp -d)
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl || exit 1
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
{
  echo "# gpu-check $(date -u +%FT%TZ)"
  "$py" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda',
      torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
  GRADER_DEVICE=cuda timeout 270 "$py" -m pytest -rs -s -q -p no:cacheprovider tests/test_gpu.py
} 2>&1 | tee "$out"
echo "results written to $out"
