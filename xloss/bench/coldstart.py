"""``python -m xloss.bench.coldstart SPEC``: time one candidate's first call in this (fresh) process.

Started by :func:`xloss.bench.timing.cold_first_call` with empty compiler caches. Prints one JSON
line: ``{"seconds": s}`` or ``{"error": why}``.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv=None) -> int:
    spec = json.loads((argv or sys.argv[1:])[0])
    try:
        from . import impls, workloads

        w = workloads.build(spec["kernel"], spec["mode"], spec["size"], spec["dtype"])
        if spec["candidate"].startswith("xloss:"):  # no torch import for an xloss backend
            cands = impls.xloss_candidates(w, spec["backends"])[0]
        else:
            try:
                import torch
            except ImportError:
                torch = None
            cands = impls.torch_candidates(w, torch, compile_=True)[0]
        fn = next((c.fn for c in cands if c.name == spec["candidate"]), None)
        if fn is None:
            print(json.dumps({"error": f"no candidate {spec['candidate']!r} here"}))
            return 0
        t = time.perf_counter()
        fn()
        print(json.dumps({"seconds": time.perf_counter() - t}))
    except Exception as exc:  # reported, never raised: the parent shows it as the reason
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
