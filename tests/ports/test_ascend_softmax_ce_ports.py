"""`xloss check` against seeded-bug Ascend ports of ``aclnnSoftmaxCrossEntropyWithLogits`` (source:
ascend/port_softmax_ce.c; libraries: ascend/build.py's ``build_softmax_ce``, the operator alone). The correct
port passes the dense row's declared targets; each buggy port fails the targets its bug lives in and passes the
others, with a failing input that ``xloss check --replay`` reproduces against the buggy port and passes against
the correct one (the pattern of test_ascend_ports.py's seeded bugs, on one kernel: no sweep of the others, which
these libraries do not export).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xloss import cli
from xloss.backends.ascend_aclnn import make_backend
from xloss.conformance import runner
from xloss.conformance import targets as declared_targets
from xloss.conformance.casefile import case_from_json
from xloss.conformance.report import write_failures

HERE = Path(__file__).resolve().parent
KERNEL = "softmax_cross_entropy_with_logits"
SEED = 0
MAX_EXAMPLES = 8
DTYPES = ("float16", "bfloat16", "float32")


def _targets(dtypes=DTYPES):
    return frozenset((KERNEL, dt, None) for dt in dtypes)


#: variant -> the targets it must fail (every other declared target must pass). Built too, left out for the
#: suite's time: sce_half_loss_sum (the loss summed in the 16-bit dtype), which fails float16 and bfloat16 only,
#: at 1.1x the tolerance on the N=257 C=1537 edge case.
BUGS = {
    "sce_no_max_shift": _targets(),  # exp(x) overflows: inf / inf on the extreme-logits rows
    "sce_backprop_sign": _targets(),  # labels - softmax
    "sce_one_hot_labels": _targets(),  # smoothed and unnormalised label rows
}


@pytest.fixture(scope="module")
def ports(tmp_path_factory, port_harness):
    build = port_harness.load_module(HERE / "ascend" / "build.py", "ascend_port_build_sce")
    return build.build_softmax_ce(tmp_path_factory.mktemp("sce_ascend"), ["sce_correct", *BUGS])


def _run(backend, max_examples=MAX_EXAMPLES):
    todo = [t for t in declared_targets(backend) if t[0] == KERNEL]
    return todo, {t: runner.run_target(backend, *t, max_examples=max_examples, seed=SEED, shrink=False)
                  for t in todo}


def _numel(case_json) -> int:
    case = case_from_json(case_json)
    return max((v.size for v in case.kwargs.values() if isinstance(v, np.ndarray)), default=0)


def test_the_correct_port_passes_every_declared_target(ports):
    b = make_backend(lib=str(ports["sce_correct"]))
    assert set(b.capabilities()) == {KERNEL}  # the library exports the one operator
    todo, results = _run(b, max_examples=2 * MAX_EXAMPLES)
    assert set(todo) == _targets()
    assert all(r.status == "pass" for r in results.values()), {t: r.message for t, r in results.items()
                                                               if r.status != "pass"}


@pytest.mark.parametrize("variant", sorted(BUGS))
def test_seeded_bug_fails_its_targets_only(variant, ports, tmp_path, port_findings, capsys):
    lib, must = ports[variant], BUGS[variant]
    todo, results = _run(make_backend(lib=str(lib)))
    assert must <= set(todo)
    failing = {t for t, r in results.items() if r.status != "pass"}
    assert failing == must, sorted(failing, key=str)
    assert all(results[t].status == "fail" and "outside tolerance" in results[t].message for t in failing)
    shrunk = min(must, key=lambda t: _numel(results[t].case))
    if _numel(results[shrunk].case) > 100_000:  # first seen on the large edge case: shrink that target alone
        results[shrunk] = runner.run_target(make_backend(lib=str(lib)), *shrunk, max_examples=MAX_EXAMPLES, seed=SEED)
    assert _numel(results[shrunk].case) <= 100_000  # a replay file holds it
    saved = write_failures([results[shrunk]], tmp_path / "failures", "ascend", str(lib))
    path = saved[next(iter(saved))]
    assert cli.main(["check", "--replay", str(path), "--backend", "ascend", "--lib", str(lib)]) == 1
    assert cli.main(["check", "--replay", str(path), "--backend", "ascend", "--lib", str(ports["sce_correct"])]) == 0
    r = results[shrunk]
    port_findings.append(dict(vendor="ascend", port=variant, target=shrunk, first_failure=r.found_at,
                              examples=r.examples, seconds=r.seconds,
                              sweep_seconds=sum(x.seconds for x in results.values())))
    capsys.readouterr()
