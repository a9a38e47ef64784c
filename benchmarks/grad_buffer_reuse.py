"""Training-loop steps through the drop-ins with xloss.torch's gradient-buffer pool off and on, interleaved in
one process: forward + backward into a fresh leaf, the gradient dropped (as a step whose optimizer is done
with it), and gradient accumulation over two micro-batches. Checks the gradients equal bit for bit. Each
case's inputs are made when it runs (the large ones are 1 GiB each).

    python benchmarks/grad_buffer_reuse.py [ROUNDS] [WORD ...]   # WORDs: run only the cases whose name has one
"""

import os
import statistics
import sys
import time

import torch

import xloss.torch as xt
from xloss.torch import grad_buffers


def _step(fn, x, y, backend, micro=1):
    xg = x.detach().requires_grad_()
    for _ in range(micro):
        fn(xg, y, backend=backend).backward()
    return xg.grad


def _ce():
    return torch.randn(8192, 32000), torch.randint(0, 32000, (8192,))


def _bcewl():
    return torch.randn(8 << 20), torch.rand(8 << 20)


def _bce():
    return torch.rand(8 << 20).clamp_(1e-6, 1 - 1e-6), torch.rand(8 << 20)


def _nll():
    x, t = _ce()
    return x.log_softmax(1), t


def _nll_nd():  # a segmentation batch: 21 classes over 256 x 256, ignored positions included
    t = torch.randint(0, 21, (8, 256, 256))
    t[:, ::7] = -100
    return torch.randn(8, 21, 256, 256).log_softmax(1), t


def _ce_pair():  # a backend without the fused row (the Ascend emulator): the vendor pair, written in place
    return torch.randn(2048, 32000), torch.randint(0, 32000, (2048,))


def _compiled(fn):
    """``fn`` under torch.compile (fullgraph; aot_eager: the ops are opaque to inductor anyway). The traced
    backward returns a copy of the op's gradient, so only the op's own buffer can be reused there."""
    return torch.compile(fn, fullgraph=True, backend="aot_eager")


#: name, drop-in, inputs, backend, micro-batches
CASES = [("cross_entropy 8192x32000 float32", xt.cross_entropy, _ce, "cpu", 1),
         ("bce_with_logits 8M float32", xt.binary_cross_entropy_with_logits, _bcewl, "cpu", 1),
         ("cross_entropy, 2 micro-batches accumulated", xt.cross_entropy, _ce, "cpu", 2),
         ("bce_with_logits, 2 micro-batches accumulated", xt.binary_cross_entropy_with_logits, _bcewl, "cpu", 2),
         ("nll_loss 8192x32000 log-probs float32", xt.nll_loss, _nll, "cpu", 1),
         ("nll_loss N-d (8, 21, 256, 256) float32", xt.nll_loss, _nll_nd, "cpu", 1),
         ("binary_cross_entropy 8M float32", xt.binary_cross_entropy, _bce, "cpu", 1),
         ("cross_entropy vendor pair (ascend) 2048x32000 float32", xt.cross_entropy, _ce_pair, "ascend", 1),
         ("nll_loss 8192x32000 log-probs float32, torch.compile", _compiled(xt.nll_loss), _nll, "cpu", 1),
         ("cross_entropy 8192x32000 float32, torch.compile", _compiled(xt.cross_entropy), _ce, "cpu", 1)]


def main(rounds: int, words: list[str]) -> None:
    for name, fn, make, backend, micro in CASES:
        if words and not any(w in name for w in words):
            continue
        torch.manual_seed(0)
        x, y = make()
        grad_buffers.set_enabled(False)
        expect = _step(fn, x, y, backend, micro).clone()
        grad_buffers.set_enabled(True)
        _step(fn, x, y, backend, micro)  # the pool's first fill
        times = {False: [], True: []}
        for r in range(rounds):
            for on in (False, True) if r % 2 == 0 else (True, False):
                # not set_enabled(), which also releases the buffers: every "on" after an "off" would refill the
                # pool (fresh pages again) and half the pooled steps would time the refill
                grad_buffers._POOL.enabled = on
                start = time.perf_counter()
                got = _step(fn, x, y, backend, micro)
                times[on].append(time.perf_counter() - start)
                assert torch.equal(got, expect), name
                del got
        fresh, pooled = (statistics.median(times[k]) * 1e3 for k in (False, True))
        print(f"{name}: fresh buffers {fresh:.1f} ms, pooled {pooled:.1f} ms ({fresh / pooled:.2f}x); "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        del x, y, expect
        grad_buffers.release_buffers()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8, sys.argv[2:])
