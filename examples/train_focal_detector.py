"""Train a tiny RetinaNet-style classification head with xloss.torch.SigmoidFocalLoss.

    python examples/train_focal_detector.py
    python examples/train_focal_detector.py --backend reference --steps 10

A small conv net predicts, per anchor (every cell of an 8x8 grid, 9 anchors) and class, whether
the class is present. The synthetic task is learnable: class c is present at a cell when
channel c % 3 of the image is bright there. The loss is RetinaNet's: focal loss summed over
all anchors and classes, divided by the number of positives. Before training the script
compares one loss forward+backward on the head's logits — time and peak memory — with the
paper's appendix A.1 code under eager autograd.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import xloss.torch as xt
from xloss.torch.paper import paper_focal_loss as appendix_a1

# the checkout's measuring tool (benchmarks/peak_memory.py), not part of the installed package
sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))
from peak_memory import track_peak_memory  # noqa: E402

ANCHORS = 9


class TinyHead(nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.classes = classes
        self.body = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.cls = nn.Conv2d(64, ANCHORS * classes, 3, padding=1)
        nn.init.constant_(self.cls.bias, -4.0)  # RetinaNet's prior: start with p ~ 0.02

    def forward(self, images):
        logits = self.cls(self.body(images))  # (B, A*C, 8, 8)
        b = logits.shape[0]
        return logits.permute(0, 2, 3, 1).reshape(b, -1, self.classes)  # (B, anchors, C)


def batch(step: int, args):
    g = torch.Generator().manual_seed(step % args.pool)
    images = torch.rand(args.batch, 3, 32, 32, generator=g)
    cells = F.avg_pool2d(images, 4)  # (B, 3, 8, 8)
    present = cells > 0.53  # a bright cell
    per_class = torch.stack([present[:, c % 3] for c in range(args.classes)], -1)  # (B, 8, 8, C)
    targets = per_class.unsqueeze(3).expand(-1, -1, -1, ANCHORS, -1).reshape(args.batch, -1, args.classes)
    return images, targets.float()


def compare_loss_step(args):
    """One focal loss forward+backward on logits of this head's size x 64: xloss vs eager A.1."""
    n = args.batch * 64 * ANCHORS * args.classes * 64
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(n, generator=g) * 3).requires_grad_()
    y = (torch.rand(n, generator=g) < 0.01).float()
    variants = {"xloss": lambda: xt.sigmoid_focal_loss(x, y, reduction="sum", backend=args.backend),
                "eager A.1": lambda: appendix_a1(x, y, reduction="sum")}
    report = []
    for name, fn in variants.items():
        fn().backward()
        x.grad = None
        with track_peak_memory() as peak:
            fn().backward()
        x.grad = None
        t0 = time.perf_counter()
        for _ in range(3):
            fn().backward()
            x.grad = None
        report.append(f"{name} {(time.perf_counter() - t0) / 3 * 1e3:.1f} ms, peak {peak.mib:.1f} MiB")
    print(f"focal loss forward+backward on {n} logits: " + "; ".join(report))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default=None, help="xloss backend (default: cpu where available)")
    p.add_argument("--classes", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--pool", type=int, default=4, help="distinct batches, cycled")
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args(argv)

    compare_loss_step(args)
    torch.manual_seed(0)
    model = TinyHead(args.classes)
    loss_fn = xt.SigmoidFocalLoss(alpha=0.25, gamma=2.0, reduction="sum", backend=args.backend)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    losses = []
    for step in range(args.steps):
        images, targets = batch(step, args)
        loss = loss_fn(model(images), targets) / targets.sum().clamp_min(1.0)  # RetinaNet: per positive
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % max(1, args.steps // 10) == 0 or step == args.steps - 1:
            print(f"  step {step:3d}  focal loss / positive {loss.item():.4f}")
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    return losses


if __name__ == "__main__":
    main()
