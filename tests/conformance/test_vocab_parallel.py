"""Self-tests of the vocabulary-parallel descriptors (xloss/conformance/vocab_parallel.py): the oracle
against an independent PyTorch computation, the edge cases on the reference and cpu backends, the
error cases, the tolerance against seeded wrong results, and the shrinker's and ladder's hooks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xloss
from xloss import registry
from xloss.backend import KernelCaps
from xloss.conformance import DESCRIPTORS, large, shrink, supports
from xloss.conformance.execute import Mismatch, check_case
from xloss.conformance.vocab_parallel import LOSS_WITH_MAX_SUM, ONLINE_MAX_SUM

MAX_SUM, LOSS = ONLINE_MAX_SUM.name, LOSS_WITH_MAX_SUM.name
DTYPES = ("float16", "bfloat16", "float32", "float64")


def _torch_max_sum(case):
    """The shard's statistics by PyTorch in float64, written independently of the reference."""
    kw = case.kwargs
    x = torch.from_numpy(np.asarray(kw["input"]).astype(np.float64))
    w = torch.from_numpy(np.asarray(kw["weight"]).astype(np.float64))
    t = torch.from_numpy(np.asarray(kw["target"]).astype(np.int64))
    start = kw["vocab_start"]
    end = kw.get("vocab_end", start + w.shape[0])
    z = x @ w.T
    m = z.max(dim=1).values
    s = torch.exp(z - m[:, None]).sum(dim=1)
    here = (t >= start) & (t < end)
    local = torch.where(here, t - start, torch.zeros_like(t))
    pred = torch.where(here, z.gather(1, local[:, None])[:, 0] - m, torch.zeros_like(m))
    # the padding: target 0's mask (ops-nn's kernel and golden pad the targets with 0)
    bits = (~here).to(torch.uint8).tolist() + [int(not start <= 0 < end)] * (-len(t) % 8)
    mask = np.array(bits if kw.get("mask_format") == "bitpacked" else bits[:len(t)], np.uint8)
    return m.numpy(), s.numpy(), pred.numpy(), mask, local.numpy(), z.numpy()


def _caps(kernel, **variants):
    return KernelCaps.declare(kernel, dtypes=DTYPES, **variants)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_max_sum_oracle_matches_torch(data, dtype):
    case = data.draw(ONLINE_MAX_SUM.strategy(dtype, None, _caps(MAX_SUM)))
    got = ONLINE_MAX_SUM.oracle(case)
    want = _torch_max_sum(case)
    for name, a, b in zip(ONLINE_MAX_SUM.output_names(None), got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=name)
    assert len(got) == (6 if case.kwargs["return_logits"] else 5)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_loss_oracle_matches_torch(data, dtype):
    case = data.draw(LOSS_WITH_MAX_SUM.strategy(dtype, None, _caps(LOSS)))
    kw = case.kwargs
    m, s, p = (torch.from_numpy(np.asarray(kw[k], np.float64)) for k in
               ("logits_max", "sum_exp_logits", "predicted_logits"))
    got = LOSS_WITH_MAX_SUM.oracle(case)
    np.testing.assert_allclose(got[0], (torch.log(s) - p).numpy(), rtol=1e-12, equal_nan=True)
    if "vocab_parallel_logits" in kw:
        z = torch.from_numpy(np.asarray(kw["vocab_parallel_logits"]).astype(np.float64))
        np.testing.assert_allclose(got[1], (torch.exp(z - m[:, None]) / s[:, None]).numpy(), rtol=1e-12,
                                   equal_nan=True)


def test_sharded_statistics_give_the_full_cross_entropy():
    """The oracle's shard outputs, all-reduced, and the loss oracle give torch's cross entropy."""
    rng = np.random.default_rng(5)
    x, w = rng.normal(0, 1, (12, 6)), rng.normal(0, 1, (30, 6))
    t = rng.integers(0, 30, 12)
    from xloss import reference
    from xloss.conformance.vocab_parallel import loss_case, max_sum_case
    shards = []
    for a, b in reference.vocab_shards(30, 3):
        c = max_sum_case("float64", x=x, w=w[a:b], target=t, start=a)
        o = ONLINE_MAX_SUM.oracle(c)
        shards.append(reference.OnlineMaxSumOut(o[0], o[1], o[2], np.packbits(o[3], bitorder="little"), o[4], None))
    m, s, p = reference.all_reduce_online_max_sum(shards)
    loss = LOSS_WITH_MAX_SUM.oracle(loss_case("float64", logits_max=m, sum_exp=s, predicted=p))[0]
    want = torch.nn.functional.cross_entropy(torch.from_numpy(x @ w.T), torch.from_numpy(t), reduction="none")
    np.testing.assert_allclose(loss, want.numpy(), rtol=1e-12)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("kernel", [MAX_SUM, LOSS])
def test_edge_cases_pass(backend, kernel):
    b = registry.backend(backend)
    d = DESCRIPTORS[kernel]
    caps = b.capabilities()[kernel]
    for dtype in ("float16", "float32"):
        cases = [c for c in d.edge_cases(dtype, None, caps) if supports(caps, c)]
        assert len(cases) >= 8
        for c in cases:
            check_case(d, c, b.checked(), caps)


def test_edge_cases_cover_what_they_say():
    labels = " | ".join(c.label for c in ONLINE_MAX_SUM.edge_cases("float32", None))
    for want in ("no tokens", "V=1", "every target masked", "no target masked", "padding bits", "exp overflows",
                 "NaN", "int32 targets near the int32 limits", "every target in another shard", "several tiles",
                 "vocab_end < vocab_start + V"):
        assert want in labels
    # an int32-only, bool-mask declaration still gets every fixed case, in its variants
    caps = _caps(MAX_SUM, mask="bool", target_dtype="int32")
    cases = ONLINE_MAX_SUM.edge_cases("float32", None, caps)
    assert len(cases) >= 18 and all(supports(caps, c) for c in cases)


@pytest.mark.parametrize("kernel", [MAX_SUM, LOSS])
def test_error_cases_raise_what_they_say(kernel):
    errs = DESCRIPTORS[kernel].error_cases()
    assert len(errs) >= 10
    for e in errs:
        with pytest.raises(e.exc, match=e.match):
            getattr(xloss, e.function)(**e.kwargs, backend="reference")


def _wrong(kernel, fix):
    """A backend giving the reference's results changed by ``fix(args)`` after the call."""
    base = registry.backend("reference")

    class Wrong(type(base)):
        def capabilities(self):
            return base.capabilities()

    b = Wrong()
    original = getattr(base, kernel)

    def run(a):
        original(a)
        fix(a)

    setattr(b, kernel, run)
    return b


@pytest.mark.parametrize("label, kernel, fix, says", [
    ("predicted not shifted by the max", MAX_SUM,
     lambda a: np.add(a.predicted_out, np.where(a.masked_target_out != 0, a.logits_max_out, 0), out=a.predicted_out),
     "predicted_logits_local"),
    ("padding bits cleared", MAX_SUM,
     lambda a: a.target_mask_out.__setitem__(-1, a.target_mask_out[-1] & ((1 << (a.input.shape[0] % 8)) - 1))
     if a.mask_format == "bitpacked" and a.input.shape[0] % 8 else None, "target_mask"),
    ("masked target kept", MAX_SUM,
     lambda a: np.copyto(a.masked_target_out, np.where((a.target < a.vocab_start) | (a.target >= a.vocab_end),
                                                       a.target, a.masked_target_out), casting="unsafe"),
     "masked_target"),
    ("sum relative error 1e-5", MAX_SUM, lambda a: np.multiply(a.sum_exp_out, 1 + 1e-5, out=a.sum_exp_out),
     "sum_exp_logits_local"),
    ("loss in float16", LOSS, lambda a: np.copyto(a.loss_out, a.loss_out.astype(np.float16)), "loss"),
])
def test_tolerance_catches_seeded_wrong_results(label, kernel, fix, says):
    b = _wrong(kernel, fix)
    d = DESCRIPTORS[kernel]
    caps = b.capabilities()[kernel]
    cases = [c for c in d.edge_cases("float32", None, caps) if supports(caps, c)]
    failed = []
    for c in cases:
        try:
            check_case(d, c, b, caps)
        except Mismatch as e:
            failed.append(str(e))
    assert failed and any(says in f for f in failed), label


def test_shrink_hooks_restrict_tokens():
    case = ONLINE_MAX_SUM.edge_cases("float32", None)[2]  # every target masked
    small = shrink.select(case, [1, 3])
    assert small.kwargs["input"].shape[0] == 2
    assert small.kwargs["target"].tolist() == case.kwargs["target"][[1, 3]].tolist()
    assert shrink.units(case) == case.kwargs["input"].shape[0]
    assert shrink._unit_of(case, 11, 3) == case.kwargs["input"].shape[0] - 1  # a padding bit: the last token
    lc = LOSS_WITH_MAX_SUM.edge_cases("float32", None)[-1]
    v = lc.kwargs["vocab_parallel_logits"].shape[1]
    assert shrink._unit_of(lc, 3 * v + 2, 1) == 3 and shrink.units(lc) == 65


def test_large_ladder_builds_whole_periods():
    caps = registry.backend("cpu").capabilities()[MAX_SUM]
    assert large.rungs(MAX_SUM) == ["BT=288 H=8 V=4099, logits", "BT=4128 H=8 V=32003"]
    case = large.build(MAX_SUM, "float16", None, large.rungs(MAX_SUM)[0], 0, caps)
    assert case.kwargs["input"].shape == (288, 8) and case.kwargs["weight"].shape == (4099, 8)
    assert large.repetitions(case) == (3, 288) and large.agrees(MAX_SUM, large.rungs(MAX_SUM)[0])
    assert not large.agrees(MAX_SUM, large.rungs(MAX_SUM)[1])
    lc = large.build(LOSS, "float32", None, large.rungs(LOSS)[0], 0, registry.backend("cpu").capabilities()[LOSS])
    assert lc.kwargs["logits_max"].shape == (288,) and lc.kwargs["vocab_parallel_logits"].shape == (288, 32003)
