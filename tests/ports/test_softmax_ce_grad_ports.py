"""`xloss check` against FT78NE/MT7004 ports of the manual's sparse_softmax_cross_entropy_with_logits whose seeded bug
lives in its gradient (``is_grad = 1``), the page behind the cross-entropy gradient row (source: ft78ne/softmax_ce.c;
libraries: ft78ne/build.py's ``build_softmax_ce_grad``). The correct port passes the gradient row; each buggy port
fails it and passes the two rows the same page and its dense sibling serve without a gradient, with a failing input
that ``xloss check --replay`` reproduces against the buggy port and passes against the correct one. The _s calls run
on core_mask 0x07 (three cores: most row counts do not split evenly).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xloss
from xloss import cli
from xloss.conformance import runner
from xloss.conformance import targets as declared_targets
from xloss.conformance.casefile import case_from_json
from xloss.conformance.report import write_failures

HERE = Path(__file__).resolve().parent
GRAD, SPARSE, DENSE = "cross_entropy_loss_grad", "cross_entropy_loss", "softmax_cross_entropy_with_logits"
SEED = 0
MAX_EXAMPLES = 6
DTYPES = ("float16", "float32")
#: variant -> the targets it must fail (the other declared targets of the three rows must pass)
BUGS = {
    "smce_grad_no_one_hot": frozenset((GRAD, dt, None) for dt in DTYPES),
    "smce_grad_slice_rows": frozenset((GRAD, dt, None) for dt in DTYPES),
}


@pytest.fixture(scope="module")
def ports(tmp_path_factory, port_harness):
    build = port_harness.load_module(HERE / "ft78ne" / "build.py", "ft78ne_port_build_smce_grad")
    return build.build_softmax_ce_grad(tmp_path_factory.mktemp("smce_grad_ft78ne"))


def _mt7004(path, **options):
    return xloss.backend("mt7004", lib=str(path), core_mask=0x07, **options)


def _run(backend, kernels, max_examples=MAX_EXAMPLES, dtypes=DTYPES, **kw):
    todo = [t for t in declared_targets(backend) if t[0] in kernels and t[1] in dtypes]
    return todo, {t: runner.run_target(backend, *t, max_examples=max_examples, seed=SEED, shrink=False, **kw)
                  for t in todo}


def _numel(case_json) -> int:
    case = case_from_json(case_json)
    return max((v.size for v in case.kwargs.values() if isinstance(v, np.ndarray)), default=0)


def test_the_correct_port_passes_the_gradient_row(ports):
    todo, results = _run(_mt7004(ports["smce_correct"]), (GRAD,))
    assert {t[1] for t in todo} == set(DTYPES)
    assert all(r.status == "pass" for r in results.values()), {t: r.message for t, r in results.items()
                                                               if r.status != "pass"}


def test_the_correct_port_passes_in_class_chunks(ports):
    """A 4 KiB arena: rows of more than about 500 float32 classes go to the page in chunks of their classes."""
    b = _mt7004(ports["smce_correct"], memory="private", private_bytes=4096)
    r = runner.run_target(b, GRAD, "float32", None, max_examples=MAX_EXAMPLES, seed=SEED, shrink=False,
                          configurations=False, leaks=False)
    assert r.status == "pass", r.message


@pytest.mark.parametrize("variant", sorted(BUGS))
def test_seeded_bug_fails_the_gradient_row_only(variant, ports, tmp_path, port_findings, capsys):
    lib, must = ports[variant], BUGS[variant]
    todo, results = _run(_mt7004(lib), (GRAD,))
    # the rows the page serves without a gradient: is_grad = 0 never reaches the bug (float32 is enough)
    others, passing = _run(_mt7004(lib), (SPARSE, DENSE), 2, ("float32",), configurations=False, leaks=False)
    assert must <= set(todo) and {t[0] for t in others} == {SPARSE, DENSE}
    todo, results = todo + others, {**results, **passing}
    failing = {t for t, r in results.items() if r.status != "pass"}
    assert failing == must, sorted(failing, key=str)
    assert all(results[t].status == "fail" for t in failing), {t: results[t].message for t in failing}
    shrunk = min(must, key=lambda t: _numel(results[t].case))
    assert _numel(results[shrunk].case) <= 100_000  # a replay file holds it
    saved = write_failures([results[shrunk]], tmp_path / "failures", "mt7004", str(lib))
    path = saved[next(iter(saved))]
    options = ["--option", "core_mask=7"]
    assert cli.main(["check", "--replay", str(path), "--backend", "mt7004", "--lib", str(lib), *options]) == 1
    # the correct port in this process (a child costs ~2 s of CPU; the buggy port's replay above runs in one)
    assert cli.main(["check", "--replay", str(path), "--backend", "mt7004", "--lib", str(ports["smce_correct"]),
                     *options, "--in-process"]) == 0
    r = results[shrunk]
    port_findings.append(dict(vendor="ft78ne", port=variant, target=shrunk, first_failure=r.found_at,
                              examples=r.examples, seconds=r.seconds,
                              sweep_seconds=sum(x.seconds for x in results.values())))
    capsys.readouterr()


def test_a_core_split_bug_is_invisible_on_one_core(ports):
    """Gradient rows addressed within a core's slice are right when one core holds every row: the bug shows only
    under a mask of several cores (here the check's own configurations of the one-core backend find it)."""
    lib = ports["smce_grad_slice_rows"]
    one = xloss.backend("mt7004", lib=str(lib), core_mask=0x01)
    r = runner.run_target(one, GRAD, "float32", None, max_examples=2, seed=SEED, shrink=False, configurations=False)
    assert r.status == "pass", r.message
    r = runner.run_target(one, GRAD, "float32", None, max_examples=2, seed=SEED, shrink=False)
    assert r.status in runner.FAILING, r.message

