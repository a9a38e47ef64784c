"""A training step with xloss losses under torch.compile(fullgraph=True): no graph break, the
xloss kernels recorded as opaque custom ops (torch.ops.xloss.*), gradients equal to eager.

    python examples/compile_training_step.py            # dynamo backend "eager" (fast to compile)
    python examples/compile_training_step.py inductor   # the default backend (compiles C++: slow)
"""

from __future__ import annotations

import sys
import time

import torch

import xloss.torch as xt


def step_losses(model, images, boxes_present, classes):
    hidden = model[:2](images)
    logits = model[2](hidden)
    detection = xt.sigmoid_focal_loss(logits, boxes_present, reduction="sum") / boxes_present.sum().clamp_min(1)
    # a language-model-style head on the same features: fused linear + cross entropy (no logits),
    # with Liger-Kernel's soft-capping and z-loss
    tokens = classes * 7 % model.vocab
    lm = xt.fused_linear_cross_entropy(hidden, model.lm_head.weight, tokens, softcap=30.0, lse_square_scale=1e-4)
    return detection + xt.nll_loss(torch.log_softmax(logits, 1), classes) + lm


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "eager"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    model.lm_head, model.vocab = torch.nn.Linear(64, 100, bias=False), 100
    images = torch.randn(16, 32)
    present = (torch.rand(16, 10) > 0.8).float()
    classes = torch.randint(0, 10, (16,))

    explained = torch._dynamo.explain(step_losses)(model, images, present, classes)
    print(f"graphs: {explained.graph_count}, graph breaks: {explained.graph_break_count}")

    def grads(fn):
        model.zero_grad()
        loss = fn(model, images, present, classes)
        loss.backward()
        return loss.item(), [p.grad.clone() for p in model.parameters()]

    eager_loss, eager_grads = grads(step_losses)
    t0 = time.perf_counter()
    compiled = torch.compile(step_losses, fullgraph=True, backend=backend)
    loss, compiled_grads = grads(compiled)
    print(f"compiled ({backend}) in {time.perf_counter() - t0:.1f} s; loss {loss:.7f} (eager {eager_loss:.7f})")
    worst = max((a - b).abs().max().item() for a, b in zip(compiled_grads, eager_grads))
    print(f"largest gradient difference compiled vs eager: {worst:.3g}")


if __name__ == "__main__":
    main()
