"""Training-loop workloads: a small language-model step, stock PyTorch against the fused loss.

The two steps share one model (embedding, ``layers`` pre-norm MLP blocks, LM head); they differ
only in the loss: the stock step materialises ``hidden @ lm_head.T`` and calls
``F.cross_entropy`` (what a transformers model does, logits upcast to float32 for 16-bit
weights), the fused step calls :func:`xloss.torch.fused_linear_cross_entropy`. Each step is
forward, backward and an SGD update, so torch's thread pool and the xloss kernels alternate as
they do in a user's loop. The two are timed round-robin in one process, so a loaded machine
slows both alike and their ratio is what is reported.

A competing process (one Python interpreter spinning, optionally pinned to one core) stands in
for "another job on the machine": :class:`Competitor`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

from xloss.bench.steps import Step
from xloss.errors import XLossValueError

SPIN = "while True: pass"
BASELINE = "torch stock step"
DTYPES = ("float32", "bfloat16")
#: Backends a training step is timed on (the others take minutes per step at these sizes).
FUSED_BACKENDS = ("cpu",)


def fused_name(backend: str) -> str:
    """The label of the fused step on ``backend``."""
    return f"xloss fused step ({backend})"


def competitor_cpu() -> int:
    """The CPU a pinned competitor spins on: the last one this process may use."""
    try:
        return max(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) - 1


@dataclass(frozen=True)
class StepShape:
    tokens: int = 4096
    hidden: int = 256
    vocab: int = 32000
    layers: int = 2
    dtype: str = "float32"  # float32 | bfloat16 (weights and activations)

    @property
    def key(self) -> str:
        return f"lm step {self.tokens}x{self.hidden}x{self.vocab} L{self.layers} {self.dtype}"


def parse_step(text: str, dtype: str) -> StepShape:
    """``TOKENSxHIDDENxVOCAB`` (e.g. 4096x256x32000) as a :class:`StepShape`."""
    from xloss.bench.workloads import parse_dims

    try:
        t, h, v = parse_dims(text, 3)
    except ValueError as exc:
        raise XLossValueError(f"training-step size {text!r}: {exc}") from None
    if min(t, h, v) < 1:
        raise XLossValueError(f"training-step size {text!r}: every dimension must be at least 1")
    if dtype not in DTYPES:
        raise XLossValueError(f"training-step dtype must be float32 or bfloat16; got {dtype!r}")
    return StepShape(t, h, v, 2, dtype)


class LM:
    """Parameters and inputs of one step (seeded: both steps see the same numbers)."""

    def __init__(self, shape: StepShape, seed: int = 0):
        import torch

        self.torch = torch
        g = torch.Generator().manual_seed(seed)
        dt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[shape.dtype]
        h, v = shape.hidden, shape.vocab
        self.shape = shape
        self.embed = torch.nn.Embedding(v, h).to(dt)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.LayerNorm(h), torch.nn.Linear(h, 4 * h), torch.nn.GELU(),
                                torch.nn.Linear(4 * h, h)) for _ in range(shape.layers)).to(dt)
        self.norm = torch.nn.LayerNorm(h).to(dt)
        self.head = torch.nn.Linear(h, v, bias=False).to(dt)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32).to(dt) * 0.02)
        self.tokens = torch.randint(0, v, (shape.tokens,), generator=g)
        self.targets = torch.randint(0, v, (shape.tokens,), generator=g)
        self.targets[::97] = -100

    def parameters(self):
        return [*self.embed.parameters(), *self.blocks.parameters(), *self.norm.parameters(),
                *self.head.parameters()]

    def hidden(self):
        x = self.embed(self.tokens)
        for blk in self.blocks:
            x = x + blk(x)
        return self.norm(x)

    def _update(self, loss):
        loss.backward()
        with self.torch.no_grad():
            for p in self.parameters():
                p.add_(p.grad, alpha=-1e-3)
                p.grad = None
        return float(loss.detach())

    def stock_step(self) -> float:
        import torch.nn.functional as F

        logits = self.hidden() @ self.head.weight.T
        return self._update(F.cross_entropy(logits.float(), self.targets, ignore_index=-100))

    def fused_step(self, backend=None) -> float:
        from xloss.torch import fused_linear_cross_entropy

        loss = fused_linear_cross_entropy(self.hidden(), self.head.weight, self.targets, ignore_index=-100,
                                          backend=backend)
        return self._update(loss)


class Competitor:
    """A busy process for the enclosed block: one interpreter spinning, pinned to ``cpu`` if given."""

    def __init__(self, cpu: int | None = None):
        self.cpu = cpu
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        if self.cpu is not None and hasattr(os, "sched_setaffinity"):
            try:
                os.sched_setaffinity(self.proc.pid, {self.cpu})
            except OSError:
                pass
        time.sleep(0.2)  # let it start spinning
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait(timeout=10)
        return False


def _die_with_parent() -> None:
    """Linux: the spinner is killed when the benchmark process dies, however it dies."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def interleaved(calls: dict, rounds: int, warmup: int = 1) -> dict:
    """{name: [seconds, ...]}: every call timed ``rounds`` times, round-robin, after ``warmup`` calls."""
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    out = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            t = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - t)
    return out


def measure(shape: StepShape, rounds: int = 5, competitor: str = "none", backend=None) -> dict:
    """Stock and fused step times (interleaved) for ``shape``; ``competitor``: "none", "pinned"
    (a spinning process pinned to the last CPU) or "free" (not pinned)."""
    if competitor not in ("none", "pinned", "free"):
        raise XLossValueError(f"competitor must be none, pinned or free; got {competitor!r}")
    lm = LM(shape)
    calls = {"stock": lm.stock_step, "xloss": lambda: lm.fused_step(backend)}
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if competitor == "none":
        times = interleaved(calls, rounds)
    else:
        with Competitor(competitor_cpu() if competitor == "pinned" else None):
            times = interleaved(calls, rounds)
    return {"workload": shape.key, "competitor": competitor, "rounds": rounds, "load_before": load_before,
            "times": times}


def _memory_bytes(dims: tuple[int, ...]) -> int:
    bt, h, v = dims
    return bt * v * 4 * 4 + v * h * 4 * 6 + bt * h * 4 * 40


#: (size, dtype, fused step) already run in this process: its kernels are compiled.
_STEPS_RUN: set = set()


def _cell(mode, size, cfg, torch, budget, max_call, say, min_sample_s, floor_s) -> dict:
    """One training-step cell: stock PyTorch step (baseline) against the fused step on each
    selected backend that can keep up (cpu); ``mode`` idle or busy (a spinning competitor)."""
    from xloss.bench import cells, impls, sampling

    def cell(run, skips):
        return cells.step_cell(LM_STEP.name, mode, size, cfg.dtype, BASELINE, run, skips,
                               "forward + backward + SGD update")

    t0 = time.perf_counter()
    skips = []
    if torch is None:
        return cell(None, [impls.Skip(LM_STEP.name, "torch is not installed")])
    if cfg.dtype not in DTYPES:
        return cell(None, [impls.Skip(LM_STEP.name, f"the training step runs in {' or '.join(DTYPES)}")])
    lm = LM(parse_step(size, cfg.dtype))
    calls = {BASELINE: lm.stock_step}
    for name in cfg.backends:
        if name in FUSED_BACKENDS:
            calls[fused_name(name)] = lambda name=name: lm.fused_step(name)
        else:
            skips.append(impls.Skip(fused_name(name), "a training step is timed on the cpu backend only"))
    left = max(floor_s, budget - (time.perf_counter() - t0))
    # the fused step compiles its kernels on a cold cache: in the first of the step's cells of this process
    fused = {(size, cfg.dtype, n) for n in calls if n != BASELINE}
    compiles = frozenset(n for _, _, n in fused - _STEPS_RUN)
    _STEPS_RUN.update(fused)
    kwargs = dict(min_sample_s=min_sample_s, max_rounds=cfg.repeat, memory=False, say=say, compiles=compiles)
    if mode == "busy":
        with Competitor(competitor_cpu()):
            run_ = sampling.measure(calls, BASELINE, left, max_call, **kwargs)
    else:
        run_ = sampling.measure(calls, BASELINE, left, max_call, **kwargs)
    run_.budget_s, run_.used_s = budget, time.perf_counter() - t0
    return cell(run_, skips)


#: A language-model training step (torch layers + the fused loss): tokens x hidden x vocab.
#: Weights: a step costs four calls before its first round (--quick).
LM_STEP = Step("lm_step", dims=3, sizes=("4096x256x32000", "512x128x8000"), modes=("idle", "busy"),
               weight=(2.0, 1.5), memory_bytes=_memory_bytes, run=_cell)
