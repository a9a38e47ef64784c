"""`xloss check` against seeded-bug FT78NE/MT7004 ports of the manual's softmax_cross_entropy_with_logits and
sparse_softmax_cross_entropy_with_logits (source: ft78ne/softmax_ce.c; libraries: ft78ne/build.py's
``build_softmax_ce``). The correct port passes every declared target of the two kernels the pages serve (the dense
row and the class-index forward); each buggy port fails the targets its bug lives in and passes the others, with
a failing input that ``xloss check --replay`` reproduces against the buggy port and passes against the correct
one. The _s calls run on core_mask 0x07 (three cores: most row counts do not split evenly).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xloss.conformance import runner

HERE = Path(__file__).resolve().parent
DENSE, SPARSE = "softmax_cross_entropy_with_logits", "cross_entropy_loss"
MAX_EXAMPLES = 12
DTYPES = ("float16", "float32")


def _targets(*kernels):
    return frozenset((k, dt, None) for k in kernels for dt in DTYPES)


#: variant -> the targets it must fail (every other declared target must pass)
BUGS = {
    "smce_no_max": _targets(DENSE, SPARSE),  # e^x overflows: inf / inf on the extreme-logits rows
    "smce_split_by_eight": _targets(DENSE),  # the rows of five of eight slices are never written
    "smce_labels_sum_to_one": _targets(DENSE),  # unnormalised label rows
    "smce_sum_of_first_row": _targets(SPARSE),  # rows normalised by their slice's first row
}
#: the bugs that need more drawn cases than MAX_EXAMPLES: unnormalised label rows are one of four label kinds (in
#: half, every label row's rounded sum already misses 1)
EXAMPLES = {"smce_labels_sum_to_one": 30}


@pytest.fixture(scope="module")
def ports(port_harness):
    build = port_harness.load_module(HERE / "ft78ne" / "build.py", "ft78ne_port_build_smce")
    return port_harness.build(build.build_softmax_ce)


@pytest.fixture(scope="module")
def smce(port_harness):
    """The helpers this file shares with test_softmax_ce_grad_ports.py (ft78ne/softmax_ce_checks.py)."""
    return port_harness.load_module(HERE / "ft78ne" / "softmax_ce_checks.py", "ft78ne_softmax_ce_checks")


def test_the_correct_port_passes_every_declared_target(ports, smce):
    todo, results = smce.run(smce.mt7004(ports["smce_correct"]), (DENSE, SPARSE), 2 * MAX_EXAMPLES)
    assert set(todo) == _targets(DENSE, SPARSE)
    assert all(r.status == "pass" for r in results.values()), {t: r.message for t, r in results.items()
                                                               if r.status != "pass"}


@pytest.mark.parametrize("variant", sorted(BUGS))
def test_seeded_bug_fails_its_targets_only(variant, ports, smce, tmp_path, port_findings, capsys):
    lib, must = ports[variant], BUGS[variant]
    todo, results = smce.run(smce.mt7004(lib), (DENSE, SPARSE), EXAMPLES.get(variant, MAX_EXAMPLES))
    assert must <= set(todo)
    failing = {t for t, r in results.items() if r.status != "pass"}
    assert failing == must, sorted(failing, key=str)
    assert all(results[t].status == "fail" and "outside tolerance" in results[t].message for t in failing)
    smce.replay_the_smallest_failure(variant, must, results, lib, ports["smce_correct"], tmp_path / "failures",
                                     port_findings)
    capsys.readouterr()


def test_a_port_of_the_scalar_reading_passes_under_its_option_only(ports, smce):
    """The pages' loss output is "usually a scalar or each sample's loss": a port writing one mean loss per call
    fails the default reading (a loss per row) and passes softmax_ce_losses=one (a row per call)."""
    lib = str(ports["smce_scalar_loss"])
    for given, status in (({}, "fail"), ({"softmax_ce_losses": "one"}, "pass")):
        b = smce.mt7004(lib, **given)
        results = {t: runner.run_target(b, *t, max_examples=2, seed=smce.SEED, shrink=False, configurations=False)
                   for t in _targets(DENSE, SPARSE) if t[1] == "float32"}  # the reading is the same in half
        assert all(r.status == status for r in results.values()), (given, {t: r.message for t, r in results.items()})
        if status == "fail":  # the report names the reading the library matches
            assert all("pass --option softmax_ce_losses=one" in r.message for r in results.values())
