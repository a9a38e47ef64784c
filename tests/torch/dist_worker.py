"""Two-rank vocabulary-parallel FLCE run for test_distributed.py (not a test module itself).

    python dist_worker.py PORT OUTDIR

spawns 2 ranks (torch.multiprocessing, gloo on 127.0.0.1:PORT). Each rank builds every case
of :data:`CASES` from its seed (identical on every rank), takes its vocabulary shard of the
weight and bias with ``xloss.torch.shard_vocab``, runs forward and backward through
``fused_linear_cross_entropy(..., process_group=WORLD)`` and saves loss and gradients to
OUTDIR/rank<r>.pt. The test compares them with the single-process results.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2

# name -> settings; dtype/backend pairs exercise the reference, a vendor ABI in fp32 (FT78NE)
# and in bf16 (Ascend), and the Numba CPU backend where it is registered
CASES = {
    "f64_mean_bias_smoothing": dict(dtype="float64", bt=23, h=5, v=37, reduction="mean", ls=0.1, bias=True,
                                    chunk=8, block=6, backend="reference"),
    "f64_none_classweight_smoothing": dict(dtype="float64", bt=17, h=4, v=29, reduction="none", ls=0.2,
                                           class_weight=True, chunk=5, backend="reference"),
    "f64_none_bias": dict(dtype="float64", bt=11, h=3, v=13, reduction="none", bias=True, chunk=4, block=3,
                          backend="reference"),
    "f64_sum_classweight": dict(dtype="float64", bt=15, h=4, v=10, reduction="sum", class_weight=True,
                                backend="reference"),
    "f64_one_class_empty_shard": dict(dtype="float64", bt=6, h=3, v=1, reduction="mean", bias=True,
                                      backend="reference"),
    "f64_all_ignored": dict(dtype="float64", bt=5, h=3, v=9, reduction="mean", ignore_all=True,
                            backend="reference"),
    "f32_mean_ft78ne": dict(dtype="float32", bt=33, h=8, v=50, reduction="mean", ls=0.1, chunk=16,
                            backend="ft78ne"),
    "bf16_mean_ascend": dict(dtype="bfloat16", bt=20, h=8, v=40, reduction="mean", bias=True, chunk=8,
                             backend="ascend"),
    "f32_none_cpu": dict(dtype="float32", bt=40, h=16, v=64, reduction="none", ls=0.05, chunk=16, backend="cpu"),
    # 16-bit operands on xloss.torch's native path (flce_native): bf16 GEMMs, float32 partials over ranks
    "bf16_mean_cpu_native": dict(dtype="bfloat16", bt=24, h=8, v=45, reduction="mean", ls=0.1, chunk=10,
                                 backend="cpu"),
    "bf16_none_cpu_bias_classweight": dict(dtype="bfloat16", bt=18, h=8, v=33, reduction="none", ls=0.1, bias=True,
                                           class_weight=True, chunk=7, backend="cpu"),
    "f16_sum_cpu_classweight": dict(dtype="float16", bt=20, h=6, v=30, reduction="sum", class_weight=True, chunk=8,
                                    backend="cpu"),
    # Liger-Kernel's options: soft-capping and z-loss (the torch-GEMM path, float64 and bf16), token
    # accuracy (the first maximum over the ranks: with zero input every logit ties, rank 0 holds it)
    "f64_mean_cpu_softcap_zloss_accuracy": dict(dtype="float64", bt=19, h=5, v=31, reduction="mean", ls=0.1,
                                                class_weight=True, chunk=6, backend="cpu", softcap=3.0, z=1e-3,
                                                accuracy=True),
    "bf16_none_cpu_softcap_zloss_accuracy": dict(dtype="bfloat16", bt=16, h=8, v=27, reduction="none", bias=True,
                                                 chunk=5, backend="cpu", softcap=2.0, z=1e-3, accuracy=True,
                                                 scaling=True),
    # under torch.compile(fullgraph=True, dynamic=True), the cpu backend's native bf16 path
    "bf16_mean_cpu_compiled": dict(dtype="bfloat16", bt=21, h=8, v=35, reduction="mean", ls=0.1, bias=True, chunk=8,
                                   backend="cpu", compiled=True),
    "f64_sum_reference_accuracy_ties": dict(dtype="float64", bt=8, h=3, v=9, reduction="sum", zero_input=True,
                                            chunk=3, block=2, backend="reference", accuracy=True),
}


def extras(cfg):
    """The fused function's keyword arguments for the Liger-Kernel-style options of a case."""
    return dict(softcap=cfg.get("softcap"), lse_square_scale=cfg.get("z", 0.0),
                return_token_accuracy=cfg.get("accuracy", False), use_token_scaling=cfg.get("scaling", False))


def make_case(cfg, seed):
    """(x, w, b, target, class_weight, upstream): float64 masters (rounded to the case's dtype by the caller)."""
    g = torch.Generator().manual_seed(seed)
    bt, h, v = cfg["bt"], cfg["h"], cfg["v"]
    x = torch.randn(bt, h, generator=g, dtype=torch.float64) * (0.0 if cfg.get("zero_input") else 1.0)
    w = torch.randn(v, h, generator=g, dtype=torch.float64) * 0.5
    b = torch.randn(v, generator=g, dtype=torch.float64) if cfg.get("bias") else None
    t = torch.randint(0, v, (bt,), generator=g)
    t[::4] = -100
    if cfg.get("ignore_all"):
        t[:] = -100
    cw = torch.rand(v, generator=g, dtype=torch.float64) + 0.5 if cfg.get("class_weight") else None
    up = torch.rand(bt, generator=g, dtype=torch.float64) + 0.5 if cfg["reduction"] == "none" else \
        torch.tensor(1.7, dtype=torch.float64)
    return x, w, b, t, cw, up


def available(backend):
    import xloss

    return any(i.name == backend and i.available for i in xloss.list_backends())


def run_case(name, cfg, seed, group):
    import xloss.torch as xt

    dt = getattr(torch, cfg["dtype"])
    x, w, b, t, cw, up = make_case(cfg, seed)
    x = x.to(dt).requires_grad_()
    ws = xt.shard_vocab(w.to(dt), group).clone().requires_grad_()
    bs = None if b is None else xt.shard_vocab(b.to(dt), group).clone().requires_grad_()

    def loss_fn(x, ws, bs):
        return xt.fused_linear_cross_entropy(x, ws, t, bs, reduction=cfg["reduction"],
                                             label_smoothing=cfg.get("ls", 0.0), chunk_size=cfg.get("chunk"),
                                             backend=cfg["backend"], class_weight=cw,
                                             vocab_chunk_size=cfg.get("block"), process_group=group, **extras(cfg))

    if cfg.get("compiled"):  # one graph: the ranks agree on the layout inside the ops
        loss_fn = torch.compile(loss_fn, fullgraph=True, backend="eager", dynamic=True)
    loss = loss_fn(x, ws, bs)
    acc = None
    if cfg.get("accuracy"):
        loss, acc = loss.loss, loss.token_accuracy
    loss.backward(up.to(dt))
    return {"loss": loss.detach(), "dx": x.grad, "dw": ws.grad, "db": None if bs is None else bs.grad,
            "rows": ws.shape[0], "accuracy": acc}


def rank_main(rank, port, outdir):
    torch.set_num_threads(1)
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    try:
        results = {}
        for i, (name, cfg) in enumerate(CASES.items()):
            if not available(cfg["backend"]):
                continue
            results[name] = run_case(name, cfg, 100 + i, dist.group.WORLD)
        torch.save(results, os.path.join(outdir, f"rank{rank}.pt"))
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
    mp.spawn(rank_main, args=(port, outdir), nprocs=WORLD, join=True)
