"""Property tests of the configured backends against the float64 oracle.

The generic conformance suite runs the default instances (shared memory, all cores). Here the
same kernel descriptors (strategies, oracle, tolerances) drive what it does not reach: any core
mask, and private memory with a staging budget that forces several (uneven) tiles spread over
the cores. fp32 private-memory tiling must reproduce the shared-memory bits.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xloss
from xloss import dtypes as xdt
from xloss.backends.ft78ne_shim import abi
from xloss.conformance import DESCRIPTORS, supports, targets
from xloss.conformance.descriptor import Case
from xloss.conformance.execute import check_case
from xloss.conformance.runner import PASS, run_target

# what the emulator declares (a collection-time constant, whatever library the environment names)
TARGETS = [(name, *t) for name in ("ft78ne", "mt7004") for t in targets(xloss.backend(name, lib=str(abi.EMULATOR)))]
CAPACITY = int(abi.load([str(abi.EMULATOR)]).ft78ne_emu_private_capacity())


def _id(t):
    return "-".join(str(p) for p in t if p is not None)


def _budget(case, tiles):
    """A staging budget that splits the case into roughly ``tiles`` tiles (None: the whole memory)."""
    if tiles == 1:
        return None
    total = sum(v.nbytes for v in case.kwargs.values() if isinstance(v, np.ndarray))
    return min(CAPACITY, max(1024, total // tiles))


def check(case, backend):
    """Judge ``case`` on ``backend`` as ``xloss check`` does (its declaration's tolerances included:
    a private-memory instance declares that a tiled mean's scale crosses the ABI in the dtype)."""
    check_case(DESCRIPTORS[case.kernel], case, backend)


#: The configurations the default conformance run does not reach: cores split differently, and
#: private memory with staging budgets that cut the drawn cases into several uneven tiles.
CONFIGS = {
    "shared-cores-0x05": dict(core_mask=0x05),
    "private-4KiB-cores-0x29": dict(memory="private", core_mask=0x29, private_bytes=4096),
    "private-16KiB-cores-0xF0": dict(memory="private", core_mask=0xF0, private_bytes=16384),
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("target", TARGETS, ids=_id)
def test_any_mask_and_memory_matches_oracle(target, config):
    """The conformance runner of ``xloss check`` on this configuration (edge cases and examples)."""
    name, kernel, dtype, mode = target
    b = xloss.backend(name, **CONFIGS[config])
    res = run_target(b, kernel, dtype, mode, max_examples=max(1, settings().max_examples // 3),
                     seed=zlib.crc32(f"{name}{kernel}{dtype}{mode}{config}".encode()), configurations=False)
    assert res.status == PASS, f"{res.status}: {res.message}\n{res.case}"


def _bits(outputs):
    return [np.asarray(o).view(np.uint8) if np.asarray(o).ndim else np.asarray(o).reshape(1).view(np.uint8)
            for o in outputs]


def _tiled_exactly(case):
    """Which private-memory results reproduce the shared ones bit for bit (see the adapter): all but
    a tiled mean (its scale g*m/n is rounded), a tiled forward reduction (tile partials are
    combined), fp16 FLCE (partial sums are stored in half between tiles) and the online max/sum of
    vocabulary tiles (tests/backends/ft78ne/test_vocab_parallel_backend.py holds its token tiles to bits)."""
    if case.kwargs.get("reduction") == "mean" and case.kernel in ("focal_loss", "bce_grad"):
        return False
    if case.kernel == "fused_linear_online_max_sum":
        return False  # vocabulary tiles' statistics are combined in float64: within rounding, not bits
    if case.kernel in ("nll_loss", "binary_cross_entropy"):  # the forward of issue #30: tile sums are combined
        return case.kwargs["reduction"] == "none"
    if case.kernel in ("cross_entropy_loss", "softmax_cross_entropy_with_logits", "cross_entropy_loss_grad"):
        return False  # issue #30's softmax pages: a row too long for the arena is class chunks, combined in float64
    if case.dtype == "float32":
        return not (case.kernel == "focal_loss" and case.mode != "grad" and case.kwargs["reduction"] != "none")
    return case.kernel == "nll_loss_grad" or (case.kernel in ("focal_loss", "bce_grad")
                                              and (case.kwargs["reduction"] == "none" or case.mode == "grad"))


@pytest.mark.parametrize("target", [t for t in TARGETS
                                    if t[2] == "float32" or t[1] != "fused_linear_cross_entropy_grad"], ids=_id)
@given(data=st.data())
def test_private_tiles_reproduce_shared_bits(target, data):
    name, kernel, dtype, mode = target
    d = DESCRIPTORS[kernel]
    case = data.draw(d.strategy(dtype, mode, xloss.backend(name).capabilities()[kernel]), label="case")
    if not _tiled_exactly(case):
        return
    tiles = data.draw(st.sampled_from((2, 3, 7)), label="tiles")
    shared = xloss.backend(name, core_mask=data.draw(st.integers(1, 255), label="shared mask"))
    private = xloss.backend(name, memory="private", core_mask=data.draw(st.integers(1, 255), label="private mask"),
                            private_bytes=_budget(case, tiles))
    for a, b in zip(_bits(d.call(case, shared)), _bits(d.call(case, private))):
        np.testing.assert_array_equal(a, b)


# -- fixed edge cases ---------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS, ids=_id)
def test_descriptor_edge_cases_through_private_memory(target):
    """Every conformance edge case the backend declares, staged in about three tiles over cores 0, 3, 5
    (but the 4M-element NLL ones, whose oracle tolerances alone take seconds: the conformance suite runs
    them in shared memory, test_nll_rows_and_class_chunks tiles NLL here)."""
    name, kernel, dtype, mode = target
    caps = xloss.backend(name).capabilities()[kernel]
    cases = [c for c in DESCRIPTORS[kernel].edge_cases(dtype, mode)
             if supports(caps, c) and max(np.size(v) for v in c.kwargs.values()) < 10**6]
    assert cases
    for case in cases:
        check(case, xloss.backend(name, memory="private", core_mask=0x29, private_bytes=_budget(case, 3)))


SIZES = (0, 1, 7, 8, 9, 1023, 1024, 1025, 3 * 1024 + 5, 9 * 1024 + 17)
MASKS = (0x01, 0x80, 0x55, 0x0E, 0xFF)


class Spy:
    """Counts the vendor calls a backend makes (so a "tiled" test cannot pass untiled)."""

    def __init__(self, backend, monkeypatch):
        self.calls = []
        real = backend._invoke
        self.args = []
        monkeypatch.setattr(backend, "_invoke", lambda fname, *a: (self.calls.append(fname), self.args.append(a),
                                                                   real(fname, *a)))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_sizes_that_divide_by_neither_cores_nor_tiles(dtype, monkeypatch):
    rng = np.random.default_rng(5)
    for n in SIZES:
        x = rng.uniform(-6, 6, n)
        p = rng.uniform(0, 1, n)
        y = (rng.random(n) > 0.6).astype(float)
        w = rng.uniform(0, 2, n)
        cases = []
        for red in ("none", "mean", "sum"):
            cases.append(Case("bce_grad", "add", dtype, dict(x=xdt.cast(p, dtype), y=xdt.cast(y, dtype), grad=0.5,
                                                              weight=xdt.cast(w, dtype), reduction=red, eps=1e-12,
                                                              eps_mode="add")))
            for mode, extra in (("forward", {}), ("grad", {"grad": -1.5}), ("forward+grad", {"grad": 2.0})):
                cases.append(Case("focal_loss", mode, dtype, dict(x=xdt.cast(x, dtype), y=xdt.cast(y, dtype),
                                                                   alpha=0.25, gamma=2.0, reduction=red, **extra)))
        for i, case in enumerate(cases):
            mask = MASKS[(n + i) % len(MASKS)]
            name = "ft78ne" if dtype == "float32" and i % 2 else "mt7004"
            check(case, xloss.backend(name, core_mask=mask))
            # 700 B of staging: tiles of 32..128 elements (64-byte granules), the last one partial
            b = xloss.backend(name, memory="private", core_mask=mask, private_bytes=700)
            spy = Spy(b, monkeypatch)
            check(case, b)
            per_call = 2 if case.mode == "forward+grad" else 1
            assert len(spy.calls) >= per_call * max(1, math.ceil(n / 128))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_nll_rows_and_class_chunks(dtype, monkeypatch):
    """Rows too wide for the staging budget are cut into class chunks; total_weight stays global."""
    rng = np.random.default_rng(6)
    for n, c, budget in ((37, 11, 1024), (5, 300, 1024), (1, 1000, 700), (0, 7, 700), (13, 1, 512)):
        t = rng.integers(0, c, n)
        t[::4] = -100
        for red, grad in (("mean", 0.75), ("sum", -2.0), ("none", xdt.cast(rng.uniform(-1, 1, n), dtype))):
            for weight in (None, xdt.cast(rng.uniform(0, 2, c), dtype)):
                kw = dict(grad=grad, self=xdt.cast(-rng.random((n, c)), dtype), target=t, reduction=red,
                          ignore_index=-100)
                if weight is not None:
                    kw["weight"] = weight
                case = Case("nll_loss_grad", None, dtype, kw)
                b = xloss.backend("mt7004", memory="private", core_mask=0x81, private_bytes=budget)
                spy = Spy(b, monkeypatch)
                check(case, b)
                kept = t[t != -100]
                if c * 2 > budget and kept.size:  # class chunks: every call narrower than a row
                    assert max(a[7] for a in spy.args) < c and len(spy.calls) >= 1
                # ignored rows are left out of the calls (the manual's ABI has no ignore_index)
                assert sum(a[6] for a in spy.args) == kept.size


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("mode", ["softmax", "recompute"])
def test_flce_tiles_over_tokens_and_vocabulary(dtype, mode, monkeypatch):
    from xloss.conformance.flce import shard_case

    rng = np.random.default_rng(7)
    for bt, h, k, start, v, budget in ((33, 8, 60, 10, 41, 2048), (9, 16, 20, 0, 20, 1500), (0, 4, 6, 0, 6, 1024),
                                       (17, 3, 9, 8, 1, 1024)):
        target = rng.integers(0, k, bt)
        target[::5] = -100
        grad = np.where(target == -100, 0.0, rng.uniform(-1, 1, bt))
        case = shard_case(dtype, mode, x=rng.uniform(-2, 2, (bt, h)), w_global=rng.uniform(-1, 1, (k, h)),
                          target=target, start=start, v=v, grad=grad,
                          mask_format="bitpacked" if bt % 2 else "bool")
        b = xloss.backend("mt7004", memory="private", core_mask=0xF0, private_bytes=budget)
        spy = Spy(b, monkeypatch)
        check(case, b)
        if bt * v * h > 200:
            assert len(spy.calls) > 2
        if dtype == "float32":  # the accumulate chain reproduces the untiled sums exactly
            for a, s in zip(_bits(DESCRIPTORS[case.kernel].call(case, b)),
                            _bits(DESCRIPTORS[case.kernel].call(case, xloss.backend("ft78ne")))):
                np.testing.assert_array_equal(a, s)


def test_focal_alpha_crosses_the_abi_as_float_in_one_call(monkeypatch):
    """The DSP signature takes float alpha: one vendor call per function, even near alpha = 1 where
    1 - float32(alpha) keeps few digits (the conformance tolerance models alpha's rounding)."""
    x = np.array([0.0, 2.0, -3.0, 40.0], np.float32)
    y = np.array([0.0, 0.0, 1.0, 0.3], np.float32)
    b = xloss.backend("ft78ne")
    spy = Spy(b, monkeypatch)
    for alpha in (0.99999, 0.999, 0.7, 0.75):
        for red in ("none", "mean", "sum"):
            check(Case("focal_loss", "forward+grad", "float32",
                       dict(x=x, y=y, alpha=alpha, gamma=2.0, reduction=red, grad=1.0)), b)
    assert len(spy.calls) == 4 * 3 * 2  # loss and gradient, once each
