"""A/B of the torch-level class-index check that ``xloss::nll_loss_forward`` made before its validator
(removed: the validator makes the same check). Interleaved in one process, medians in ms.

A ("old") runs ``xloss.torch._checks.check_class_indices`` and then the op, the work the old body did;
B ("new") runs the op only. ``pieces`` times each torch operation of the old check right after a Numba
kernel: with libgomp's default wait policy, Numba's OpenMP workers still spin then, and each parallel
torch operation waits for the cores (run once with ``OMP_WAIT_POLICY=PASSIVE`` to separate the two).

    python benchmarks/nll_check_ab.py [2d] [nd]      (REPS=9 by default)
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch

import xloss.torch as xt
from xloss.kernels.nll import api
from xloss.torch._checks import check_class_indices

CASES = {"2d": ((8192, 32000), (8192,)), "nd": ((8, 21, 256, 256), (8, 256, 256))}


def ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def ab(name: str, reps: int) -> None:
    shape, t_shape = CASES[name]
    classes = shape[1]
    x = torch.randn(shape).log_softmax(1)
    t = torch.randint(0, classes, t_shape)
    t.view(-1)[::7] = -100
    xg = x.clone().requires_grad_()
    fns = {
        "forward A old (torch check + op)": lambda: (check_class_indices(t, classes, -100), xt.nll_loss(x, t)),
        "forward B new (op only)": lambda: xt.nll_loss(x, t),
        "fwd+bwd A old": lambda: (check_class_indices(t, classes, -100), xt.nll_loss(xg, t).backward()),
        "fwd+bwd B new": lambda: xt.nll_loss(xg, t).backward(),
        "torch check alone": lambda: check_class_indices(t, classes, -100),
        "api.nll_loss (validator + kernel)": lambda: api.nll_loss(x, t),
    }
    for fn in fns.values():
        fn()
    times: dict = {k: [] for k in fns}
    for r in range(reps):  # alternate the order so that neither side always follows the other
        for k, fn in fns.items() if r % 2 else reversed(fns.items()):
            times[k].append(ms(fn))
    for k, v in times.items():
        print(f"{name} {k:36s} median {statistics.median(v):7.2f}  min {min(v):7.2f}  (n={len(v)})")


def pieces(reps: int) -> None:
    shape, t_shape = CASES["nd"]
    x = torch.randn(shape).log_softmax(1)
    t = torch.randint(0, shape[1], t_shape).reshape(-1)
    t[::7] = -100
    times: dict = {}
    for _ in range(reps):
        xt.nll_loss(x, t.reshape(t_shape))  # a Numba kernel just before each timed operation
        times.setdefault("t != ignore_index", []).append(ms(lambda: t != -100))
        xt.nll_loss(x, t.reshape(t_shape))
        times.setdefault("the bad-index mask (5 ops)", []).append(
            ms(lambda: (t != -100) & ((t < 0) | (t >= shape[1]))))
        bad = (t != -100) & ((t < 0) | (t >= shape[1]))
        xt.nll_loss(x, t.reshape(t_shape))
        times.setdefault("mask.any()", []).append(ms(lambda b=bad: bool(b.any())))
        times.setdefault("mask.any() again (no kernel before)", []).append(ms(lambda b=bad: bool(b.any())))
    print("nd after a Numba kernel:", {k: round(statistics.median(v), 2) for k, v in times.items()})


if __name__ == "__main__":
    reps = int(os.environ.get("REPS", "9"))
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')} threads={torch.get_num_threads()} "
          f"loadavg {open('/proc/loadavg').read().strip()}")
    for case in sys.argv[1:] or list(CASES):
        ab(case, reps)
    pieces(reps)
    print(f"loadavg {open('/proc/loadavg').read().strip()}")
