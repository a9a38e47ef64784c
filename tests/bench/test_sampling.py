"""The budget logic of `xloss bench`, on a fake clock (no real timing is asserted): the run's budget
shared among cells, loop calibration, strides for slow candidates, the rounds that fit, and the
skip rule (only a measured call over the limit; a compiling first call is judged by its warm call)."""

import pytest

from xloss.bench import sampling, timing


class FakeClock:
    """perf_counter/thread_time/process_time that advance only when a fake candidate 'runs'."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    thread_time = process_time = perf_counter

    def candidate(self, *seconds):
        """A callable taking ``seconds[i]`` on its i-th call (the last value thereafter)."""
        calls = []

        def fn():
            self.now += seconds[min(len(calls), len(seconds) - 1)]
            calls.append(1)

        fn.calls = calls
        return fn


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    for module in (sampling, timing):
        monkeypatch.setattr(module.time, "perf_counter", c.perf_counter)
        monkeypatch.setattr(module.time, "thread_time", c.thread_time)
        monkeypatch.setattr(module.time, "process_time", c.process_time)
    monkeypatch.setattr(timing, "peak_extra_bytes", lambda fn: (0, timing.first_call_seconds(fn)))
    return c


def test_cell_budget_shares_what_is_left_by_weight():
    weights = [1.0, 1.0, 2.0]
    assert sampling.cell_budget(40.0, weights, 0.0, 0, 0.5) == pytest.approx(10.0)
    # the first cell overran: the others share what is left, not the original plan
    assert sampling.cell_budget(40.0, weights, 25.0, 1, 0.5) == pytest.approx(5.0)
    assert sampling.cell_budget(40.0, weights, 25.0, 2, 0.5) == pytest.approx(15.0)
    assert sampling.cell_budget(40.0, weights, 45.0, 2, 0.5) == 0.5  # over budget: the floor, one round


def test_loops_and_strides():
    assert sampling.loops_for(0.001, 0.05) == 50 and sampling.loops_for(0.2, 0.05) == 1
    assert sampling.loops_for(0.0, 0.05, max_loops=7) == 7
    assert sampling.stride_for(0.05, 0.05) == 1 and sampling.stride_for(1.0, 0.1) == 10


def test_rounds_fit_the_budget_and_slow_candidates_get_fewer_samples(clock):
    calls = {"base": clock.candidate(0.010), "fast": clock.candidate(0.001), "slow": clock.candidate(0.100)}
    run = sampling.measure(calls, "base", budget_s=3.0, max_call_s=3.0, min_sample_s=0.01)
    base, fast, slow = (run.sampled[n] for n in ("base", "fast", "slow"))
    assert run.skipped == {}
    assert fast.loops == 10 and base.loops == 1 and slow.loops == 1  # ~one 10 ms sample each
    assert base.stride == 1 and fast.stride == 1 and slow.stride == 10
    assert base.rounds == list(range(run.rounds))  # the baseline is in every round
    assert slow.rounds == list(range(0, run.rounds, 10))  # the slow one every 10th, paired with the baseline
    assert len(slow.wall_s) < len(fast.wall_s) == run.rounds
    assert run.used_s <= 3.0 + 0.12  # stops before a round that would not fit
    assert run.used_s > 3.0 - 0.2  # and uses what it was given
    assert fast.wall_s[0] == pytest.approx(0.001)  # a sample's time is per call
    a, b = sampling.paired(base, slow)
    assert len(a) == len(b) == len(slow.wall_s)


def test_max_rounds_caps_and_one_round_always_runs(clock):
    calls = {"base": clock.candidate(0.010), "x": clock.candidate(0.02)}
    assert sampling.measure(calls, "base", 10.0, 10.0, min_sample_s=0.01, max_rounds=4).rounds == 4
    late = sampling.measure(calls, "base", 0.001, 10.0, min_sample_s=0.01)
    assert late.rounds == 1 and all(len(s.wall_s) == 1 for s in late.sampled.values())


def test_only_a_measured_call_over_the_limit_is_skipped(clock):
    def broken():
        raise RuntimeError("no such thing here")

    calls = {"base": clock.candidate(0.01), "emulator": clock.candidate(5.0), "compiled": clock.candidate(8.0, 0.01),
             "slow but within": clock.candidate(0.9), "broken": broken}
    run = sampling.measure(calls, "base", budget_s=20.0, max_call_s=1.0, min_sample_s=0.01, compiles={"compiled"})
    assert set(run.skipped) == {"emulator", "broken"}
    assert "5.0 s (measured)" in run.skipped["emulator"] and "1.0 s limit" in run.skipped["emulator"]
    assert run.skipped["broken"] == "RuntimeError: no such thing here"
    assert calls["emulator"].calls == [1]  # one call, measured: no warm call, no extrapolation
    assert run.sampled["compiled"].first_call_s == pytest.approx(8.0)  # judged by its warm call
    assert run.sampled["slow but within"].stride > 1  # kept, with fewer samples


def test_a_compiled_candidate_whose_warm_call_is_over_the_limit_is_skipped(clock):
    calls = {"base": clock.candidate(0.01), "compiled": clock.candidate(8.0, 2.0)}
    run = sampling.measure(calls, "base", 20.0, 1.0, min_sample_s=0.01, compiles={"compiled"})
    assert "warm call took 2.0 s" in run.skipped["compiled"]


def test_an_expensive_first_call_is_the_first_sample(clock):
    """A first call (not compiling) that took a tenth of the budget is not repeated as a warm
    call: it is the candidate's round-0 sample, and the candidate joins later rounds by stride."""
    slow = clock.candidate(1.5)
    calls = {"base": clock.candidate(0.1), "slow": slow}
    run = sampling.measure(calls, "base", budget_s=10.0, max_call_s=10.0, min_sample_s=0.01)
    s = run.sampled["slow"]
    assert s.first_call_s == s.warm_call_s == s.wall_s[0] == pytest.approx(1.5) and s.rounds[0] == 0
    assert s.stride == 15 and len(slow.calls) == len(s.wall_s)  # no warm call: every call is a sample
    assert s.rounds == list(range(0, run.rounds, 15)) and len(s.rounds) > 1
    assert run.sampled["base"].rounds == list(range(run.rounds)) and run.used_s <= 10.0
