"""The int8 check (``xloss.backends.ft78ne_shim.sigmoid_ce_i8.check``) against port libraries of the FT78NE's
``i8_sigmoidcrossentropywithlogits`` (source: ft78ne/sigmoid_ce_i8.c; libraries: ft78ne/build.py,
``build_sigmoid_ce_i8``). The correct port, which rounds half away from zero rather than the emulator's nearest
even, passes in shared memory (``_s``, every core mask) and private memory (``_p``); each seeded bug fails in
both, on the input it lives in."""

from __future__ import annotations

from pathlib import Path

import pytest

import xloss
from xloss.backends.ft78ne_shim import sigmoid_ce_i8 as i8

HERE = Path(__file__).resolve().parent
EXAMPLES = 10
#: variant -> the first failure it must report, as the check words it
BUGS = {
    "sce_i8_wrap": "input0=-128, input1=1 gave -128",  # 128 wraps
    "sce_i8_abs_int8": "input0=-128, input1=0 gave 127",  # |-128| wraps, e^128 overflows
}
MEMORIES = {"shared": dict(core_mask=0x07), "private": dict(memory="private", core_mask=0x03)}


@pytest.fixture(scope="module")
def ports(port_harness):
    build = port_harness.load_module(HERE / "ft78ne" / "build.py", "ft78ne_port_build_sce_i8")
    return port_harness.build(build.build_sigmoid_ce_i8)


@pytest.mark.parametrize("memory", sorted(MEMORIES))
def test_the_correct_port_passes(ports, memory):
    assert i8.check(xloss.backend("ft78ne", lib=str(ports["sce_i8_correct"]), **MEMORIES[memory]),
                    examples=EXAMPLES) == []


@pytest.mark.parametrize("memory", sorted(MEMORIES))
@pytest.mark.parametrize("variant", sorted(BUGS))
def test_a_seeded_bug_is_caught_where_it_lives(ports, variant, memory):
    failures = i8.check(xloss.backend("ft78ne", lib=str(ports[variant]), **MEMORIES[memory]), examples=EXAMPLES)
    assert failures and all("outside tolerance" in f for f in failures)
    assert BUGS[variant] in failures[0], failures[0]
    assert all("input0=-128," in f for f in failures)  # the bug lives at x = -128 only: no other element fails
