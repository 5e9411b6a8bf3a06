"""Every comparison the corpus checker (examples/blind/check.py) makes, run against this round's specs themselves:
the specs meet their own checker. Run: .venv/bin/python examples/blind/round4/selftest.py [assignment ...]"""
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import check  # noqa: E402 - the checker of every round, beside this round's folder

sys.path.insert(0, HERE)               # this round's specs, before round 1's
for a in sys.argv[1:] or check.ASSIGNMENTS:
    spec = check.spec_module(a)
    ns = check.build_namespace(a)
    for part in check.GRADED[a]:
        t = time.time()
        try:
            check.COMPARATORS[part](ns, spec, torch.Generator().manual_seed(1), quick=False)
            print(a, part, "ok", f"{time.time() - t:.1f}s")
        except Exception as e:  # noqa: BLE001 - a comparison that fails, whatever it raises, is reported
            print(a, part, "FAIL", type(e).__name__, str(e)[:300], f"{time.time() - t:.1f}s")
