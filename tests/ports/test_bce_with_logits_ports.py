"""`xloss check` against seeded-bug ports of BCE with logits, in both vendors' conventions (sources:
ascend/port_bce_with_logits.c, ft78ne/sigmoid_ce.c; libraries: each folder's build.py,
``build_bce_with_logits``). The correct port passes every declared target; each buggy port fails the
targets its bug lives in and passes the others, with a failing input that ``xloss check --replay``
reproduces against the buggy port and passes against the correct one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xloss
from xloss import cli
from xloss.backends.ascend_aclnn import make_backend
from xloss.conformance import runner
from xloss.conformance import targets as declared_targets
from xloss.conformance.casefile import case_from_json
from xloss.conformance.report import write_failures

HERE = Path(__file__).resolve().parent
KERNEL = "bce_with_logits"
SEED = 0
MAX_EXAMPLES = 8
ASCEND_DTYPES = ("float16", "bfloat16", "float32")
FT_DTYPES = ("float16", "float32")


def _targets(dtypes, modes):
    return frozenset((KERNEL, dt, m) for dt in dtypes for m in modes)


WITH_FORWARD, WITH_GRAD = ("forward", "forward+grad"), ("grad", "forward+grad")
#: variant -> the targets it must fail (every other declared target must pass)
ASCEND_BUGS = {
    "bcel_naive_softplus": _targets(ASCEND_DTYPES, WITH_FORWARD),  # exp(-x) overflows: inf where the loss is 0
    "bcel_pos_weight_negative": _targets(ASCEND_DTYPES, ("forward", "grad", "forward+grad")),
    "bcel_half_accumulate": _targets(("float16", "bfloat16"), WITH_FORWARD),  # float32 sums are not rounded
    "bcel_mean_by_rows": _targets(ASCEND_DTYPES, WITH_GRAD),
}
FT_BUGS = {  # mt7004, core_mask 0x07
    "sce_literal_log": _targets(FT_DTYPES, WITH_FORWARD),
    "sce_split_by_eight": _targets(FT_DTYPES, WITH_FORWARD),
    "sce_grad_literal": _targets(FT_DTYPES, WITH_GRAD),
    "sce_grad_one_sided": _targets(FT_DTYPES, WITH_GRAD),
}


@pytest.fixture(scope="module")
def ascend_ports(port_harness):
    build = port_harness.load_module(HERE / "ascend" / "build.py", "ascend_port_build_bcel")
    return port_harness.build(build.build_bce_with_logits)


@pytest.fixture(scope="module")
def ft_ports(port_harness):
    build = port_harness.load_module(HERE / "ft78ne" / "build.py", "ft78ne_port_build_bcel")
    return port_harness.build(build.build_bce_with_logits)


def _numel(case_json) -> int:
    case = case_from_json(case_json)
    return max((v.size for v in case.kwargs.values() if isinstance(v, np.ndarray)), default=0)


def _ascend(path):
    return make_backend(lib=str(path))


def _mt7004(path):
    return xloss.backend("mt7004", lib=str(path), core_mask=0x07)


def _run(backend, max_examples=MAX_EXAMPLES):
    """Every declared target of the kernel, failures reported as found (the fixed edge cases come first:
    each bug here shows on one of them, a few dozen elements, which is what the replay below holds)."""
    todo = [t for t in declared_targets(backend) if t[0] == KERNEL]
    return todo, {t: runner.run_target(backend, *t, max_examples=max_examples, seed=SEED, shrink=False)
                  for t in todo}


@pytest.mark.parametrize("vendor", ["ascend", "mt7004"])
def test_the_correct_ports_pass_every_declared_target(vendor, ascend_ports, ft_ports):
    b = _ascend(ascend_ports["bcel_correct"]) if vendor == "ascend" else _mt7004(ft_ports["sce_correct"])
    todo, results = _run(b, max_examples=2 * MAX_EXAMPLES)
    assert len(todo) == (9 if vendor == "ascend" else 6)
    assert all(r.status == "pass" for r in results.values()), {t: r.message for t, r in results.items()
                                                               if r.status != "pass"}


def _check_bug(b, correct_lib, must, vendor, lib, tmp_path, port_findings, variant):
    todo, results = _run(b)
    assert must <= set(todo)
    failing = {t for t, r in results.items() if r.status != "pass"}
    assert failing == must, sorted(failing, key=str)
    assert all(results[t].status == "fail" and "outside tolerance" in results[t].message for t in failing)
    shrunk = next(t for t in todo if t in must)
    assert _numel(results[shrunk].case) <= 100_000  # a replay file holds it
    saved = write_failures([results[shrunk]], tmp_path / "failures", vendor, str(lib))
    path = saved[next(iter(saved))]
    backend = "ascend" if vendor == "ascend" else "mt7004"
    options = [] if vendor == "ascend" else ["--option", "core_mask=7"]
    assert cli.main(["check", "--replay", str(path), "--backend", backend, "--lib", str(lib), *options]) == 1
    # the correct port in this process (a child costs ~2 s of CPU; the buggy port's replay above runs in one)
    assert cli.main(["check", "--replay", str(path), "--backend", backend, "--lib", str(correct_lib), *options,
                     "--in-process"]) == 0
    r = results[shrunk]
    port_findings.append(dict(vendor=vendor, port=variant, target=shrunk, first_failure=r.found_at,
                              examples=r.examples, seconds=r.seconds,
                              sweep_seconds=sum(x.seconds for x in results.values())))


@pytest.mark.parametrize("variant", sorted(ASCEND_BUGS))
def test_ascend_seeded_bug_fails_its_targets_only(variant, ascend_ports, tmp_path, port_findings, capsys):
    _check_bug(_ascend(ascend_ports[variant]), ascend_ports["bcel_correct"], ASCEND_BUGS[variant], "ascend",
               ascend_ports[variant], tmp_path, port_findings, variant)
    capsys.readouterr()


@pytest.mark.parametrize("variant", sorted(FT_BUGS))
def test_ft78ne_seeded_bug_fails_its_targets_only(variant, ft_ports, tmp_path, port_findings, capsys):
    _check_bug(_mt7004(ft_ports[variant]), ft_ports["sce_correct"], FT_BUGS[variant], "ft78ne", ft_ports[variant],
               tmp_path, port_findings, variant)
    capsys.readouterr()
