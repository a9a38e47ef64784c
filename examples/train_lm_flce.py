"""Train a tiny language model with xloss.torch.FusedLinearCrossEntropyLoss — on one process, or
vocabulary-parallel over 2 ranks (torch.distributed, gloo).

    python examples/train_lm_flce.py                  # single process
    python examples/train_lm_flce.py --ranks 2        # lm_head split by vocabulary over 2 ranks
    python examples/train_lm_flce.py --backend reference --steps 10
    python examples/train_lm_flce.py --autocast       # forward under torch.autocast("cpu", bfloat16)

The data is synthetic but learnable (each next token is a fixed function of the current one,
with some noise), so the loss falls from about log(V) within a few dozen steps. Before training,
the script measures the peak memory of one loss forward+backward through the LM head with the
fused loss and with PyTorch's materialised logits (``F.cross_entropy(h @ W.T, t)``).

With ``--ranks 2`` every rank holds the whole (replicated) backbone and its half of
``lm_head``; the fused loss all-reduces the row statistics and the input gradient, so the
backbone's gradients — and after each optimizer step its parameters — are the same on every
rank without any extra synchronisation (checked at the end).

With ``--autocast`` the forward (backbone and loss) runs under ``torch.autocast("cpu",
bfloat16)``: the fused loss then computes in bf16 like the stock ``F.linear`` + cross entropy
would (bf16 products with float32 accumulation, float32 loss), with float32 parameters.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import socket
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import xloss.torch as xt

# the checkout's measuring tool (benchmarks/peak_memory.py), not part of the installed package
sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))
from peak_memory import track_peak_memory  # noqa: E402


class TinyLM(nn.Module):
    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.mlp = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, 2 * hidden), nn.GELU(),
                                 nn.Linear(2 * hidden, hidden))
        self.norm = nn.LayerNorm(hidden)

    def forward(self, tokens):
        h = self.embed(tokens)
        return self.norm(h + self.mlp(h))


def batch(step: int, args):
    """Tokens and next-token targets: t[i+1] = (7 t[i] + 3) mod V, 10% of them random, last one
    ignored; a pool of ``--pool`` batches is cycled, so a tiny model can fit it in a few steps."""
    g = torch.Generator().manual_seed(1000 + step % args.pool)
    v = args.vocab
    first = torch.randint(0, v, (args.batch, 1), generator=g)
    seq = [first]
    for _ in range(args.seq):
        seq.append((seq[-1] * 7 + 3) % v)
    tokens = torch.cat(seq, 1)
    noise = torch.rand(tokens.shape, generator=g) < 0.1
    tokens = torch.where(noise, torch.randint(0, v, tokens.shape, generator=g), tokens)
    inputs, targets = tokens[:, :-1], tokens[:, 1:].clone()
    targets[:, -1] = -100  # e.g. padding: ignored, and excluded from the mean
    return inputs, targets


def memory_report(args):
    """Peak memory of one loss forward+backward at the example's size: fused vs materialised logits."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(args.batch * args.seq, args.hidden, generator=g).requires_grad_()
    w = (torch.randn(args.vocab, args.hidden, generator=g) * 0.02).requires_grad_()
    t = torch.randint(0, args.vocab, (args.batch * args.seq,), generator=g)
    fused = lambda: xt.fused_linear_cross_entropy(h, w, t, backend=args.backend).backward()
    materialised = lambda: F.cross_entropy(h @ w.T, t).backward()
    peaks = {}
    for name, fn in (("xloss fused", fused), ("materialised logits", materialised)):
        fn()
        h.grad = w.grad = None
        with track_peak_memory() as peak:
            fn()
        h.grad = w.grad = None
        peaks[name] = peak.mib
    print(f"loss forward+backward, {args.batch * args.seq} tokens, V={args.vocab}, H={args.hidden}: peak extra memory "
          + ", ".join(f"{k} {v:.1f} MiB" for k, v in peaks.items())
          + f" ({peaks['materialised logits'] / peaks['xloss fused']:.1f}x less with the fused loss)")


def train(args, rank: int = 0, group=None):
    torch.manual_seed(0)  # the same initial model on every rank
    model = TinyLM(args.vocab, args.hidden)
    head = torch.randn(args.vocab, args.hidden) * 0.02
    head = nn.Parameter(xt.shard_vocab(head, group).clone() if group is not None else head)
    loss_fn = xt.FusedLinearCrossEntropyLoss(backend=args.backend, process_group=group)
    opt = torch.optim.Adam(list(model.parameters()) + [head], lr=args.lr)
    losses = []
    for step in range(args.steps):
        inputs, targets = batch(step, args)
        amp = torch.autocast("cpu", dtype=torch.bfloat16) if args.autocast else contextlib.nullcontext()
        with amp:
            loss = loss_fn(model(inputs), head, targets)  # every rank gets the full loss (float32)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if rank == 0 and (step % max(1, args.steps // 10) == 0 or step == args.steps - 1):
            print(f"  step {step:3d}  loss {loss.item():.4f}")
    return model, losses


def rank_main(rank: int, world: int, port: int, args):
    import torch.distributed as dist

    torch.set_num_threads(max(1, torch.get_num_threads() // world))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        model, losses = train(args, rank, dist.group.WORLD)
        # replicas stay identical: the largest parameter difference from rank 0's
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        ref = flat.clone()
        dist.broadcast(ref, 0)
        diff = torch.tensor([(flat - ref).abs().max().item()])
        dist.all_reduce(diff, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"{world} ranks: loss {losses[0]:.4f} -> {losses[-1]:.4f}; backbone replicas differ by at most "
                  f"{diff.item():.2e} after {args.steps} steps")
    finally:
        dist.destroy_process_group()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--backend", default=None, help="xloss backend (default: cpu where available)")
    p.add_argument("--vocab", type=int, default=16000)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--pool", type=int, default=2, help="distinct batches, cycled")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--autocast", action="store_true", help='forward under torch.autocast("cpu", bfloat16)')
    args = p.parse_args(argv)

    memory_report(args)
    print(f"training: log(V) = {math.log(args.vocab):.3f}")
    if args.ranks == 1:
        _, losses = train(args)
        print(f"1 rank: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
        return losses
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(args.ranks, port, args), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
