"""Run the checker's own comparators on round 6's specs: .venv/bin/python examples/blind/round6/selftest.py [assignment ...]"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import check  # noqa: E402

sys.path.insert(0, HERE)              # check puts examples/blind first on import: round 6's specs go before it
import torch  # noqa: E402

chosen = sys.argv[1:] or ["positional_encoding", "transformer", "fused_attention"]
failed = 0
for a in chosen:
    ns = check.build_namespace(a)
    spec = check.spec_module(a)
    assert spec.__file__.startswith(HERE), spec.__file__
    for part in check.GRADED[a]:
        start = time.perf_counter()
        try:
            check.COMPARATORS[part](ns, spec, torch.Generator().manual_seed(1), quick=False)
            status = "ok"
        except Exception as e:  # noqa: BLE001
            status, failed = f"FAIL {type(e).__name__}: {e}", failed + 1
        print(f"{a:<20} {part:<28} {status} ({time.perf_counter() - start:.1f}s)", flush=True)
    failing = check.run_visible_checks(a)
    print(f"{a:<20} visible checks: {'pass' if not failing else 'FAIL ' + ','.join(failing)}", flush=True)
    failed += bool(failing)
sys.exit(1 if failed else 0)
