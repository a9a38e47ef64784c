"""`xloss check` against ports of the vocabulary-parallel forward with seeded bugs (issue 17).

The bugs an outside port author makes reading CANN's contract for aclnnFusedLinearOnlineMaxSum /
aclnnFusedCrossEntropyLossWithMaxSum: in the Ascend convention (tests/ports/ascend/port_vocab_parallel.c)
and in our FT78NE/MT7004 one (tests/ports/ft78ne/vocab_parallel.c). The correct ports pass both
kernels; each buggy port fails its own kernel, with the finding the bug makes (the output named),
on a small shrunk input that ``xloss check --replay`` reproduces against the buggy port and that
passes against the correct one. Only the first failing target is shrunk (as the other port tests).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import xloss
from xloss import cli
from xloss.backends.ascend_aclnn import make_backend
from xloss.conformance import runner, targets
from xloss.conformance.casefile import case_from_json
from xloss.conformance.report import write_failures

HERE = Path(__file__).resolve().parent
MAX_SUM, LOSS = "fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum"
KERNELS = (MAX_SUM, LOSS)
SEED = 0
MAX_EXAMPLES = 20
MASK = 0x07


@dataclass(frozen=True)
class Bug:
    vendor: str  # "ascend" or "mt7004"
    variant: str
    kernel: str  # the kernel the bug lives in: every declared target of it must fail, the other kernel pass
    says: str  # the output the finding names
    why: str


BUGS = [
    Bug("ascend", "vp_end_inclusive", MAX_SUM, "target_mask",
        "the doc page's `target > vocabEndIndex`: the row at vocabEndIndex counted in the shard"),
    Bug("ascend", "vp_padding_set", MAX_SUM, "target_mask", "the padding bits of the mask's last byte always set"),
    Bug("ascend", "vp_pred_unshifted", MAX_SUM, "predicted_logits_local",
        "the predicted logit not relative to the shard's max"),
    Bug("ascend", "vp_softmax_half_inv", LOSS, "softmax", "the softmax multiplied by a FLOAT16 1/sum"),
    Bug("mt7004", "vp_sum_unshifted", MAX_SUM, "sum_exp_logits_local",
        "the exponentials summed without the max shift (overflow above ~88.7)"),
    Bug("mt7004", "vp_masked_target_kept", MAX_SUM, "masked_target", "a masked token keeps its global target"),
    Bug("mt7004", "vp_loss_half", LOSS, "loss", "the loss goes through a half"),
]


def _variants(vendor):
    return ["correct"] + [b.variant for b in BUGS if b.vendor == vendor]


@pytest.fixture(scope="session")
def vp_ports(port_harness):
    """{(vendor, variant): library path} for the correct ports and the vocabulary-parallel bugs."""
    if shutil.which(os.environ.get("CC", "gcc").split()[0]) is None:
        pytest.skip("no C compiler")
    ascend = port_harness.load_module(HERE / "ascend" / "build.py", "ascend_port_build")
    ft78ne = port_harness.load_module(HERE / "ft78ne" / "build.py", "ft78ne_port_build")
    out = {("ascend", v): p for v, p in port_harness.build(ascend.build, _variants("ascend")).items()}
    built = port_harness.build(ft78ne.build_all, _variants("mt7004"))
    out.update({("mt7004", v): p for v, p in built.items()})
    return {k: str(p) for k, p in out.items()}


def _backend(vendor, lib):
    if vendor == "ascend":
        b = make_backend(lib=lib)
        assert b.availability() == (True, "")
        return b
    return xloss.backend("mt7004", lib=lib, core_mask=MASK)


def _replay(vendor, path, lib, *extra) -> int:
    opts = [] if vendor == "ascend" else ["--option", f"core_mask={MASK:#x}"]
    return cli.main(["check", "--replay", str(path), "--backend", vendor, "--lib", lib, *opts, *extra])


@pytest.mark.parametrize("vendor", ["ascend", "mt7004"])
def test_correct_port_passes_both_kernels(vendor, vp_ports):
    b = _backend(vendor, vp_ports[vendor, "correct"])
    todo = [t for t in targets(b) if t[0] in KERNELS]
    # Ascend: input FLOAT16/BF16 only, the loss's statistics FLOAT; MT7004: fp_ and hp_ forms
    assert {t[0] for t in todo} == set(KERNELS) and len(todo) == (5 if vendor == "ascend" else 4)
    for t in todo:
        r = runner.run_target(b, *t, max_examples=MAX_EXAMPLES, seed=SEED)
        assert r.status == runner.PASS and r.examples > MAX_EXAMPLES, (t, r.message)


@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.variant)
def test_seeded_bug_fails_its_kernel_with_a_replayable_input(bug, vp_ports, port_harness, port_findings, tmp_path,
                                                             capsys):
    lib = vp_ports[bug.vendor, bug.variant]
    b = _backend(bug.vendor, lib)
    todo = [t for t in targets(b) if t[0] in KERNELS]
    must = {t for t in todo if t[0] == bug.kernel}
    shrunk = next(t for t in todo if t in must)
    t0 = time.perf_counter()
    measured = []
    for t in todo:
        measured += port_harness.check(b, [t], max_examples=MAX_EXAMPLES, seed=SEED, shrink=t == shrunk)
    sweep_seconds = time.perf_counter() - t0
    results = {m.target: m.result for m in measured}
    failed = {t for t, r in results.items() if r.status in runner.FAILING}
    assert failed == must, f"{bug.why}: failing {sorted(failed, key=str)}"
    for t in failed:
        r = results[t]
        assert r.status == runner.FAIL and r.declared and bug.says in r.message and "outside tolerance" in r.message, \
            r.message
    first = next(m for m in measured if m.target == shrunk)
    case = case_from_json(first.result.case)
    assert max(v.size for v in case.kwargs.values() if isinstance(v, np.ndarray)) <= 1024, case.describe()

    saved = write_failures([results[shrunk]], tmp_path / "failures", bug.vendor, lib)
    for path in saved.values():
        assert _replay(bug.vendor, path, lib) == 1, "the saved input does not reproduce the failure"
        # the correct port in this process (a child costs ~2 s of CPU; the buggy port's replay runs in one)
        assert _replay(bug.vendor, path, vp_ports[bug.vendor, "correct"], "--in-process") == 0, \
            "the correct port fails it"
    capsys.readouterr()
    port_findings.append(dict(vendor=bug.vendor, port=bug.variant, target=first.target,
                              first_failure=first.first_failure, examples=first.result.examples,
                              seconds=first.seconds, sweep_seconds=sweep_seconds))
