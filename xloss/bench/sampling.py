"""Time budgets, calibration and interleaved sampling for ``xloss bench``.

A run has a budget (seconds, for the whole run); each cell gets a share of what is left, by its
weight, so a slow start (a busy machine, a compilation) leaves later cells less rather than the
run going over. Within a cell every candidate is called once (its first call: compilation,
loading), then once more, timed, as its warm estimate (the peak-memory call; a first call that
took a tenth of the budget is not repeated but becomes the first sample). Like pyperf, a
fast candidate is then timed in samples of ``loops`` calls each, calibrated so that one sample
lasts at least ``min_sample_s``. The baseline is sampled in every round, so every sample has a
baseline sample from the same round to pair with; a candidate whose sample costs more than the
baseline's joins only every ``stride``-th round, so a slow candidate gets fewer samples
(reported) instead of slowing every round. Rounds run interleaved, in rotated order, while the
next one fits the budget. Only a candidate whose single call (measured) exceeds ``max_call_s`` is skipped: a first
call that compiles is not held against it, its warm call is.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import XLossError
from . import timing

#: Calls of a candidate faster than this share of the sample time are re-estimated over several calls.
_REFINE_BELOW = 0.05
#: A first call (not compiling) taking this share of the cell's budget is not repeated as a warm
#: call: it is the candidate's first sample.
EXPENSIVE = 0.1


@dataclass
class Sampled:
    """One candidate's measurements in a cell; times are per call (a sample's total / loops)."""

    name: str
    first_call_s: float
    warm_call_s: float
    peak_extra_bytes: int | None
    loops: int = 1
    stride: int = 1
    rounds: list[int] = field(default_factory=list)  # the round of each sample
    wall_s: list[float] = field(default_factory=list)
    thread_cpu_s: list[float] = field(default_factory=list)  # the calling thread's CPU time
    process_cpu_s: list[float] = field(default_factory=list)  # every thread of this process


@dataclass
class CellRun:
    budget_s: float
    used_s: float
    rounds: int
    sample_s: float  # the calibrated duration of one sample
    sampled: dict  # name -> Sampled, in the order given
    skipped: dict  # name -> reason


def loops_for(call_s: float, sample_s: float, max_loops: int = 1_000_000) -> int:
    """Calls per sample so that one sample lasts about ``sample_s`` (at least one)."""
    if call_s <= 0:
        return max_loops
    return int(min(max_loops, max(1, round(sample_s / call_s))))


def stride_for(cost_s: float, sample_s: float) -> int:
    """Every how many rounds a candidate whose sample costs ``cost_s`` is sampled (1: every round)."""
    return max(1, round(cost_s / sample_s)) if sample_s > 0 else 1


def cell_budget(total_s: float, weights: list[float], spent_s: float, index: int, floor_s: float) -> float:
    """The budget of cell ``index``: its weight's share of what is left of ``total_s`` after
    ``spent_s``, never below ``floor_s`` (a run already over its budget still takes one round)."""
    left = total_s - spent_s
    share = left * weights[index] / sum(weights[index:])
    return max(floor_s, share)


def _timed_sample(fn, loops: int) -> tuple[float, float, float]:
    w0, t0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
    for _ in range(loops):
        fn()
    w1, t1, p1 = time.perf_counter(), time.thread_time(), time.process_time()
    return (w1 - w0) / loops, (t1 - t0) / loops, (p1 - p0) / loops


def reason(exc: Exception) -> str:
    """One line: an xloss refusal in its own words, anything else with its type."""
    text = str(exc).splitlines()[0][:300] if str(exc) else ""
    return text if isinstance(exc, XLossError) else f"{type(exc).__name__}: {text}"


def fmt_s(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.1f} s"


def measure(calls: dict, baseline: str | None, budget_s: float, max_call_s: float, *, min_sample_s: float,
            max_rounds: int | None = None, compiles: frozenset = frozenset(), first_calls: dict | None = None,
            memory: bool = True, say: Callable[[str], None] | None = None) -> CellRun:
    """Sample ``calls`` ({name: zero-argument callable}) within ``budget_s`` seconds; see the module."""
    start = time.perf_counter()
    deadline = start + budget_s
    say = say or (lambda text: None)
    timing.release()
    sampled, skipped = {}, {}
    for name, fn in calls.items():
        say(f"first call of {name}")
        try:
            mem, first, thread, process = _first_call(fn, memory)
            if first > max_call_s and name not in compiles:
                skipped[name] = f"one call took {fmt_s(first)} (measured), more than the {fmt_s(max_call_s)} limit"
                continue
            if name not in compiles and first >= EXPENSIVE * budget_s:
                # no time for a separate warm call: the first call is this candidate's round-0 sample
                s = Sampled(name, first, first, mem, rounds=[0], wall_s=[first], thread_cpu_s=[thread],
                            process_cpu_s=[process])
                sampled[name] = s
                continue
            mem, warm = timing.peak_extra_bytes(fn) if memory else (None, timing.first_call_seconds(fn))
        except Exception as exc:  # a candidate that cannot run here is reported, never raised
            skipped[name] = reason(exc)
            continue
        if warm > max_call_s:
            skipped[name] = (f"one warm call took {fmt_s(warm)} (measured; first call {fmt_s(first)}), "
                             f"more than the {fmt_s(max_call_s)} limit")
            continue
        sampled[name] = Sampled(name, first, warm, mem)
    if not sampled:
        return CellRun(budget_s, time.perf_counter() - start, 0, 0.0, sampled, skipped)
    base = sampled.get(baseline)
    sample_s = min_sample_s
    for s in sampled.values():
        if s.warm_call_s < _REFINE_BELOW * sample_s:  # one call is too short a clock reading: take more
            n = loops_for(s.warm_call_s, _REFINE_BELOW * sample_s, 10_000)
            s.warm_call_s = _timed_sample(calls[s.name], n)[0]
        s.loops = loops_for(s.warm_call_s, sample_s)
    # the baseline is in every round; what costs more per sample joins every stride-th round
    base_cost = max(sample_s, base.loops * base.warm_call_s) if base else sample_s
    for s in sampled.values():
        s.stride = 1 if s is base else stride_for(s.loops * s.warm_call_s, base_cost)
    order = list(sampled)
    r = 0
    while True:
        members = [n for n in order if r % sampled[n].stride == 0 and r not in sampled[n].rounds]
        members = members[r % len(members):] + members[:r % len(members)] if members else []  # rotated
        cost = sum(_sample_cost(sampled[n]) for n in members)
        if r > 0 and (time.perf_counter() + cost > deadline or (max_rounds is not None and r >= max_rounds)):
            break
        say(f"round {r + 1}: {len(members)} implementations")
        for n in members:
            s = sampled[n]
            wall, thread, process = _timed_sample(calls[n], s.loops)
            s.rounds.append(r)
            s.wall_s.append(wall)
            s.thread_cpu_s.append(thread)
            s.process_cpu_s.append(process)
        r += 1
    return CellRun(budget_s, time.perf_counter() - start, r, sample_s, sampled, skipped)


def _first_call(fn, memory: bool) -> tuple[int | None, float, float, float]:
    """(peak extra bytes, wall, thread CPU, process CPU seconds) of one call."""
    t0, p0 = time.thread_time(), time.process_time()
    mem, wall = timing.peak_extra_bytes(fn) if memory else (None, timing.first_call_seconds(fn))
    return mem, wall, time.thread_time() - t0, time.process_time() - p0


def _sample_cost(s: Sampled) -> float:
    """Expected seconds of the candidate's next sample: its recent samples' median, else its warm call."""
    recent = s.wall_s[-5:]
    per_call = statistics.median(recent) if recent else s.warm_call_s
    return per_call * s.loops if math.isfinite(per_call) else 0.0


def paired(a: Sampled, b: Sampled) -> tuple[list[float], list[float]]:
    """The wall times of ``a`` and ``b`` from the rounds both were sampled in."""
    at = dict(zip(a.rounds, a.wall_s))
    common = [(at[r], w) for r, w in zip(b.rounds, b.wall_s) if r in at]
    return [x for x, _ in common], [y for _, y in common]
