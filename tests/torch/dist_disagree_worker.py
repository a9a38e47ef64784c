"""Two-rank (gloo) attacks on the vocabulary-parallel FLCE for test_distributed_disagreement.py (not a
test module itself): ranks that disagree on an argument, an argument error on one rank only, errors
that need the global vocabulary, shards that overlap or leave a gap, and ``group=None`` read as the
default group.

    python dist_disagree_worker.py PORT OUTDIR [SCENARIO ...]

Each rank runs the scenarios in order and writes OUTDIR/rank<r>.json: scenario -> ["ok", loss] or
["error", exception class, message]. The process group's timeout is short, so a rank left waiting
in a collective fails the scenario (and the run) in seconds, not after 30 minutes.
"""

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
BT, H, V = 12, 4, 10


def _case():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(BT, H, generator=g, dtype=torch.float64)
    w = torch.randn(V, H, generator=g, dtype=torch.float64)
    t = torch.randint(0, V, (BT,), generator=g)
    t[::5] = -100
    return x, w, t


def _flce(rank, **over):
    """The FLCE on this rank's shard, with per-rank overrides ``over[name] = (rank 0's, rank 1's)``."""
    import xloss.torch as xt

    x, w, t = _case()
    kw = dict(reduction="mean", process_group=dist.group.WORLD, backend="reference")
    weight = xt.shard_vocab(w)
    for name, values in over.items():
        value = values[rank]
        if name == "weight":
            weight = value(w)
        elif name == "target":
            t = value(t)
        elif name == "dtype":
            x, weight = x.to(value), weight.to(value)
        else:
            kw[name] = value
    return xt.fused_linear_cross_entropy(x, weight, t, **kw)


def _flip(t):
    t = t.clone()
    t[1] = (t[1] + 1) % V
    return t


def _out_of_range(t):
    t = t.clone()
    t[2] = V  # in range of neither shard's own rows nor the global vocabulary
    return t


SCENARIOS = {
    # group=None is the default group: shard_vocab(W) is this rank's shard, the loss the single-process one
    "default_group": lambda r: _flce(r),
    "targets": lambda r: _flce(r, target=(lambda t: t, _flip)),
    "reduction": lambda r: _flce(r, reduction=("mean", "sum")),
    "label_smoothing": lambda r: _flce(r, label_smoothing=(0.0, 0.1)),
    "dtype": lambda r: _flce(r, dtype=(torch.float64, torch.float32)),
    "ignore_index": lambda r: _flce(r, ignore_index=(-100, -1)),
    "class_weight": lambda r: _flce(r, class_weight=(torch.ones(V, dtype=torch.float64),
                                                     torch.full((V,), 2.0, dtype=torch.float64))),
    "softcap": lambda r: _flce(r, softcap=(None, 5.0), backend=("cpu", "cpu")),
    "lse_square_scale": lambda r: _flce(r, lse_square_scale=(0.0, 1e-3), backend=("cpu", "cpu")),
    "chunk_size": lambda r: _flce(r, chunk_size=(4, 6)),
    "bad_argument_on_one_rank": lambda r: _flce(r, label_smoothing=(0.0, 1.5)),
    "target_out_of_global_range": lambda r: _flce(r, target=(_out_of_range, _out_of_range)),
    "class_weight_shape": lambda r: _flce(r, class_weight=(torch.ones(V + 1, dtype=torch.float64),) * 2),
    "overlapping_shards": lambda r: _flce(r, weight=(lambda w: w[0:6], lambda w: w[4:10])),
    "gap_between_shards": lambda r: _flce(r, weight=(lambda w: w[0:4], lambda w: w[6:10])),
    # torch's own checks would fail only in a later collective: the backend on one rank differs
    "backend": lambda r: _flce(r, backend=("reference", "cpu")),
}


def rank_main(rank, port, outdir, names):
    torch.set_num_threads(1)
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=20))
    results = {}
    try:
        for name in names:
            try:
                results[name] = ["ok", float(SCENARIOS[name](rank))]
            except Exception as exc:  # noqa: BLE001 - recorded for the test
                results[name] = ["error", type(exc).__name__, str(exc)]
            with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
                json.dump(results, f)
            dist.barrier()  # a rank still stuck in a collective fails here within the timeout
    finally:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: gloo's threads may still be winding down when C++
    # static destructors run, and about one run in ten aborted after its results were saved
    # ("terminate called without an active exception"). Reached only when the rank succeeded.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    port, outdir = int(sys.argv[1]), sys.argv[2]
    mp.spawn(rank_main, args=(port, outdir, sys.argv[3:] or list(SCENARIOS)), nprocs=WORLD, join=True)
