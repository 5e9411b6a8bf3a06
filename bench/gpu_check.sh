#!/usr/bin/env bash
# `make gpu-check`: every GPU test and GPU benchmark, results in one file. Under 5 minutes on one GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
out=_build/gpu-check.txt
mkdir -p _build
{
  echo "# gpu-check $(date -u +%FT%TZ)"
  .venv/bin/python -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
  GRADER_DEVICE=cuda timeout 240 .venv/bin/pytest -rs -s -q -p no:cacheprovider tests/test_gpu.py
} 2>&1 | tee "$out"
echo "results written to $out"
