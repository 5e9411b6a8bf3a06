"""Every comparison check.py makes, run against each spec itself: the specs meet their own checker."""
import sys, time, torch
import check
for a in sys.argv[1:] or check.ASSIGNMENTS:
    spec = check.spec_module(a)
    ns = check.build_namespace(a)
    for part in check.GRADED[a]:
        t = time.time()
        try:
            check.COMPARATORS[part](ns, spec, torch.Generator().manual_seed(1), quick=False)
            print(a, part, "ok", f"{time.time()-t:.1f}s")
        except Exception as e:
            print(a, part, "FAIL", type(e).__name__, str(e)[:300], f"{time.time()-t:.1f}s")
