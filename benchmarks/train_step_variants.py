"""One process, three LM training steps timed round-robin: stock PyTorch, the fused xloss loss,
and the fused loss with serial Numba kernels (``xloss.backend("cpu", threads=1)``).

    [OMP_WAIT_POLICY=... | GOMP_SPINCOUNT=...] python benchmarks/train_step_variants.py SIZE COMPETITORS ROUNDS
    e.g. python benchmarks/train_step_variants.py 512x128x8000 none,pinned 3

Prints, per competitor setting (none / pinned / free), each step's median and its ratio to the
stock median (above 1: faster than stock). Run it under each OpenMP setting in turn.
"""

import os
import statistics
import sys

import xloss  # first, as a user's script would: before torch loads OpenMP
from xloss.bench import training


def main(size: str, competitors: str, rounds: str, dtype: str = "float32") -> None:
    lm = training.LM(training.parse_step(size, dtype))
    serial = xloss.backend("cpu", threads=1)
    calls = {"stock": lm.stock_step, "xloss": lambda: lm.fused_step(None),
             "xloss-serial-numba": lambda: lm.fused_step(serial)}
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')} GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}")
    for comp in competitors.split(","):
        if comp == "none":
            t = training.interleaved(calls, int(rounds))
        else:
            with training.Competitor(training.competitor_cpu() if comp == "pinned" else None):
                t = training.interleaved(calls, int(rounds))
        base = statistics.median(t["stock"])
        print(comp, f"load {os.getloadavg()[0]:.2f}",
              {k: f"{statistics.median(v):.3f}s ratio {base / statistics.median(v):.2f}" for k, v in t.items()},
              flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
