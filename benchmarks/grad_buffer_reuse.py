"""Training-loop steps through the drop-ins with xloss.torch's gradient-buffer pool off and on, interleaved in
one process: forward + backward into a fresh leaf, the gradient dropped (as a step whose optimizer is done
with it), and gradient accumulation over two micro-batches. Checks the gradients equal bit for bit.

    python benchmarks/grad_buffer_reuse.py [ROUNDS]
"""

import os
import statistics
import sys
import time

import torch

import xloss.torch as xt
from xloss.torch import grad_buffers


def _step(fn, x, y, micro=1):
    xg = x.detach().requires_grad_()
    for _ in range(micro):
        fn(xg, y, backend="cpu").backward()
    return xg.grad


def main(rounds: int) -> None:
    torch.manual_seed(0)
    ce = (torch.randn(8192, 32000), torch.randint(0, 32000, (8192,)))
    bce = (torch.randn(8 << 20), torch.rand(8 << 20))
    cases = [("cross_entropy 8192x32000 float32", xt.cross_entropy, *ce, 1),
             ("bce_with_logits 8M float32", xt.binary_cross_entropy_with_logits, *bce, 1),
             ("cross_entropy, 2 micro-batches accumulated", xt.cross_entropy, *ce, 2),
             ("bce_with_logits, 2 micro-batches accumulated", xt.binary_cross_entropy_with_logits, *bce, 2)]
    for name, fn, x, y, micro in cases:
        grad_buffers.set_enabled(False)
        expect = _step(fn, x, y, micro).clone()
        grad_buffers.set_enabled(True)
        _step(fn, x, y, micro)  # the pool's first fill
        times = {False: [], True: []}
        for r in range(rounds):
            for on in (False, True) if r % 2 == 0 else (True, False):
                grad_buffers.set_enabled(on)
                start = time.perf_counter()
                got = _step(fn, x, y, micro)
                times[on].append(time.perf_counter() - start)
                assert torch.equal(got, expect), name
                del got
        fresh, pooled = (statistics.median(times[k]) * 1e3 for k in (False, True))
        print(f"{name}: fresh buffers {fresh:.1f} ms, pooled {pooled:.1f} ms ({fresh / pooled:.2f}x); "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    grad_buffers.release_buffers()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
