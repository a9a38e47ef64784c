"""The int8 check (``xloss.backends.ft78ne_shim.nllloss_i8.check``) against port libraries of the FT78NE's
``i8_nllloss_s`` (source: ft78ne/nllloss_i8.c; libraries: ft78ne/build.py, ``build_nllloss_i8``). The correct
port, which rounds the mean to nearest rather than the emulator's truncation toward zero, passes under every core
mask; each seeded bug fails, on the cases it lives in and no others."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xloss
from xloss.backends.ft78ne_shim import nllloss_i8 as i8

HERE = Path(__file__).resolve().parent
EXAMPLES = 12
#: variant -> (the first failure it must report, as the check words it; what every failure names)
BUGS = {
    "nll_i8_sum_int16": ("sum past int16, sum: loss[0] = 15232, expected the sum 146304", "past int16"),
    "nll_i8_mean_by_batch": ("sum past int16, mean: loss[0] = 16256, expected 128", "rounded either way"),
}


@pytest.fixture(scope="module")
def ports(port_harness):
    build = port_harness.load_module(HERE / "ft78ne" / "build.py", "ft78ne_port_build_nll_i8")
    return port_harness.build(build.build_nllloss_i8)


def test_the_correct_port_passes_and_rounds_otherwise_than_the_emulator(ports):
    port = xloss.backend("ft78ne", lib=str(ports["nll_i8_correct"]), core_mask=0x07)
    assert i8.check(port, examples=EXAMPLES) == []
    x, t, w = np.array([[7, 3], [5, -1], [2, 9]], np.int8), np.array([0, 1, 0]), np.array([3, -1], np.int8)
    assert int(i8.nll_loss_i8(port, x, t, w)[0]) == -6  # -28 / 5 to nearest
    assert int(i8.nll_loss_i8(xloss.backend("ft78ne"), x, t, w)[0]) == -5  # toward zero: both pass


@pytest.mark.parametrize("variant", sorted(BUGS))
def test_a_seeded_bug_is_caught_where_it_lives(ports, variant):
    failures = i8.check(xloss.backend("ft78ne", lib=str(ports[variant]), core_mask=0x07), examples=EXAMPLES)
    first, every = BUGS[variant]
    assert failures and first in failures[0], failures[0]
    if variant == "nll_i8_mean_by_batch":  # none, sum and total_weight right: only means fail
        assert all(every in f for f in failures)
    else:  # a wrapped sum: sums and means past int16, nothing else (total_weight is right)
        assert all("total_weight" not in f and "row loss" not in f for f in failures)
        assert any(every in f for f in failures)
