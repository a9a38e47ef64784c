"""`xloss check` against FT78NE/MT7004 ports of the manual's sparse_softmax_cross_entropy_with_logits whose seeded bug
lives in its gradient (``is_grad = 1``), the page behind the cross-entropy gradient row (source: ft78ne/softmax_ce.c;
libraries: ft78ne/build.py's ``build_softmax_ce_grad``). The correct port passes the gradient row; each buggy port
fails it and passes the two rows the same page and its dense sibling serve without a gradient, with a failing input
that ``xloss check --replay`` reproduces against the buggy port and passes against the correct one. The _s calls run
on core_mask 0x07 (three cores: most row counts do not split evenly).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import xloss
from xloss.conformance import runner

HERE = Path(__file__).resolve().parent
GRAD, SPARSE, DENSE = "cross_entropy_loss_grad", "cross_entropy_loss", "softmax_cross_entropy_with_logits"
MAX_EXAMPLES = 6
DTYPES = ("float16", "float32")
#: variant -> the targets it must fail (the other declared targets of the three rows must pass)
BUGS = {
    "smce_grad_no_one_hot": frozenset((GRAD, dt, None) for dt in DTYPES),
    "smce_grad_slice_rows": frozenset((GRAD, dt, None) for dt in DTYPES),
}


@pytest.fixture(scope="module")
def ports(port_harness):
    build = port_harness.load_module(HERE / "ft78ne" / "build.py", "ft78ne_port_build_smce_grad")
    return port_harness.build(build.build_softmax_ce_grad)


@pytest.fixture(scope="module")
def smce(port_harness):
    """The helpers this file shares with test_softmax_ce_ports.py (ft78ne/softmax_ce_checks.py)."""
    return port_harness.load_module(HERE / "ft78ne" / "softmax_ce_checks.py", "ft78ne_softmax_ce_checks")


def test_the_correct_port_passes_the_gradient_row(ports, smce):
    todo, results = smce.run(smce.mt7004(ports["smce_correct"]), (GRAD,), MAX_EXAMPLES, DTYPES)
    assert {t[1] for t in todo} == set(DTYPES)
    assert all(r.status == "pass" for r in results.values()), {t: r.message for t, r in results.items()
                                                               if r.status != "pass"}


def test_the_correct_port_passes_in_class_chunks(ports, smce):
    """A 4 KiB arena: rows of more than about 500 float32 classes go to the page in chunks of their classes."""
    b = smce.mt7004(ports["smce_correct"], memory="private", private_bytes=4096)
    r = runner.run_target(b, GRAD, "float32", None, max_examples=MAX_EXAMPLES, seed=smce.SEED, shrink=False,
                          configurations=False, leaks=False)
    assert r.status == "pass", r.message


@pytest.mark.parametrize("variant", sorted(BUGS))
def test_seeded_bug_fails_the_gradient_row_only(variant, ports, smce, tmp_path, port_findings, capsys):
    lib, must = ports[variant], BUGS[variant]
    todo, results = smce.run(smce.mt7004(lib), (GRAD,), MAX_EXAMPLES, DTYPES)
    # the rows the page serves without a gradient: is_grad = 0 never reaches the bug (float32 is enough)
    others, passing = smce.run(smce.mt7004(lib), (SPARSE, DENSE), 2, ("float32",), configurations=False, leaks=False)
    assert must <= set(todo) and {t[0] for t in others} == {SPARSE, DENSE}
    todo, results = todo + others, {**results, **passing}
    failing = {t for t, r in results.items() if r.status != "pass"}
    assert failing == must, sorted(failing, key=str)
    assert all(results[t].status == "fail" for t in failing), {t: results[t].message for t in failing}
    smce.replay_the_smallest_failure(variant, must, results, lib, ports["smce_correct"], tmp_path / "failures",
                                     port_findings)
    capsys.readouterr()


def test_a_core_split_bug_is_invisible_on_one_core(ports, smce):
    """Gradient rows addressed within a core's slice are right when one core holds every row: the bug shows only
    under a mask of several cores (here the check's own configurations of the one-core backend find it)."""
    lib = ports["smce_grad_slice_rows"]
    one = xloss.backend("mt7004", lib=str(lib), core_mask=0x01)
    r = runner.run_target(one, GRAD, "float32", None, max_examples=2, seed=smce.SEED, shrink=False,
                          configurations=False)
    assert r.status == "pass", r.message
    r = runner.run_target(one, GRAD, "float32", None, max_examples=2, seed=smce.SEED, shrink=False)
    assert r.status in runner.FAILING, r.message

