"""`xloss check` catches ports that break the contract: writes into inputs, out-of-bounds writes
(through checked mode), run- and configuration-dependent results, biased rounding, logits formed
in bf16; and reports a one-element bug on one element. Backends: tests/conformance/misbehaving.py."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import misbehaving as M  # noqa: E402

from xloss.conformance import DESCRIPTORS, large, runner  # noqa: E402
from xloss.conformance.casefile import case_from_json, load_cases  # noqa: E402
from xloss.conformance.execute import InputWritten, call_checked, check_case  # noqa: E402
from xloss.conformance.report import failures_text, write_failures  # noqa: E402


def test_write_into_input_fails_and_the_replay_file_holds_the_snapshot(tmp_path):
    r = runner.run_target(M.ClampsLogitsInPlace(), "focal_loss", "float32", "forward", max_examples=20)
    assert r.status == "fail"
    assert "wrote into input `x`" in r.message and "element [" in r.message
    case = case_from_json(r.case)
    assert np.abs(case.kwargs["x"]).max() > 10, "the saved case must be the pre-call input, not the clamped one"
    assert case.kwargs["x"].size <= 2, f"not minimal: {case.kwargs['x'].size} elements"
    saved = write_failures([r], tmp_path, "clamps", None)
    cases, _ = load_cases(saved[("focal_loss", "float32", "forward")])
    with pytest.raises(InputWritten, match="wrote into input `x`"):
        call_checked(DESCRIPTORS["focal_loss"], cases[0], M.ClampsLogitsInPlace())


def test_write_into_input_is_caught_even_when_the_result_is_right():
    r = runner.run_target(M.ScalesSelfInPlace(), "nll_loss_grad", "float32", None, max_examples=5)
    assert r.status == "fail" and "wrote into input `self`" in r.message


def test_checked_mode_is_used_and_an_out_of_bounds_write_names_buffer_and_offset():
    b = M.GuardTripped()
    r = runner.run_target(b, "bce_grad", "float32", "clamp", max_examples=20)
    assert r.status == "fail"
    assert "out-of-bounds write in `dx` at byte offset" in r.message and "by bce_grad" in r.message
    case = case_from_json(r.case)
    assert case.kwargs["x"].size == 3, "the smallest input that trips the guard"
    assert f"offset {4 * case.kwargs['x'].size}" in r.message
    with pytest.raises(Exception, match="4 bytes after dx"):  # the replay reproduces it
        check_case(DESCRIPTORS["bce_grad"], case, b.checked())


def test_a_one_element_bug_is_reported_on_one_element():
    r = runner.run_target(M.OffByOneElement(), "bce_grad", "float32", "clamp", max_examples=30)
    assert r.status == "fail"
    case = case_from_json(r.case)
    assert case.kwargs["x"].size <= 3, case.describe()
    assert "_Mismatch" not in r.message and "np.float" not in r.message and "array(" not in r.message


def test_mask_dependent_results_are_reported_with_both_outputs(tmp_path):
    r = runner.run_target(M.MaskDependent(), "bce_grad", "float32", "clamp", max_examples=0)
    assert r.status == "mask-dependent", r.message
    assert "core_mask=0x01" in r.message
    assert r.outputs["first"]["label"] == "core_mask=255" and r.outputs["second"]["label"] == "core_mask=0x01"
    saved = write_failures([r], tmp_path, "masked", None)
    path = saved[("bce_grad", "float32", "clamp")]
    assert json.loads(Path(path).read_text())["outputs"]["second"]["outputs"]["dx"]["dtype"] == "float32"
    load_cases(path)  # valid
    assert "MASK-DEPENDENT" in failures_text([r], saved)


def test_run_dependent_large_results_are_nondeterministic():
    r = runner.run_large(M.Racy(), "nll_loss_grad", "float32", None, repeats=3)
    assert r.group == "large" and r.status == "nondeterministic", r.message
    assert "run 1 and run 2 disagree" in r.message
    assert r.case["ladder"]["rung"] in large.rungs("nll_loss_grad")


def test_deterministic_backends_must_be_bit_identical():
    class SlightlyRacy(M.Racy):
        deterministic = True

        def nll_loss_grad(self, a):
            M.REF.nll_loss_grad(a)
            self.calls += 1
            if a.out.size > 100000 and self.calls % 2 == 0:
                flat = a.out.reshape(-1)
                i = int(np.flatnonzero(flat)[0])
                flat[i] = np.nextafter(flat[i], np.float32(np.inf))  # one ulp: within tolerance
    r = runner.run_large(SlightlyRacy(), "nll_loss_grad", "float32", None, repeats=2)
    assert r.status == "nondeterministic" and "not bit-identical" in r.message
    plain = SlightlyRacy()
    plain.deterministic = False
    assert runner.run_large(plain, "nll_loss_grad", "float32", None, repeats=2).status == "pass"


def test_truncation_to_bf16_fails_the_bias_check():
    d = DESCRIPTORS["bce_grad"]
    case = next(c for c in d.edge_cases("bfloat16", "clamp") if c.label == "odd size 4097, none")
    with pytest.raises(Exception, match="rounding bias.*truncated toward zero"):
        check_case(d, case, M.TruncatesToBF16())
    good = M.Wrapper()
    good.dtypes = ("bfloat16",)
    check_case(d, case, good)  # round-to-nearest-even passes


def test_flce_logits_in_bf16_fail():
    r = runner.run_target(M.FlceLogitsInBF16(), "fused_linear_cross_entropy_grad", "bfloat16", "recompute",
                          max_examples=10)
    assert r.status == "fail", "a port forming the logits in bf16 must not pass"
    ok = runner.run_target(M.FlceLogitsInBF16(), "fused_linear_cross_entropy_grad", "bfloat16", "softmax",
                           max_examples=10)
    assert ok.status == "pass", ok.message


def test_write_into_input_of_a_large_case_is_found_and_the_snapshot_kept():
    r = runner.run_large(M.ClampsLargeInputs(), "bce_grad", "float32", "clamp", repeats=1)
    assert r.status == "fail" and f"wrote into input `x`: element [{2**20 + 7}]" in r.message, r.message
    case = case_from_json(r.case)  # rebuilt from the ladder: the pre-call input
    assert case.kwargs["x"][2**20 + 7] != np.float32(0.5)


def test_a_nondeterministic_failure_replays_with_repeats(tmp_path, capsys):
    from xloss import cli

    r = runner.run_large(M.Racy(), "nll_loss_grad", "float32", None, repeats=3)
    saved = write_failures([r], tmp_path, "racy", None)
    path = saved[("nll_loss_grad", "float32", None, "large")]
    assert cli.main(["check", "--replay", path, "--backend", "misbehaving:Racy"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "run 1 and run 2 disagree" in out
    assert cli.main(["check", "--replay", path, "--backend", "reference", "--repeat", "2"]) == 0


def test_a_one_row_bug_is_reported_on_one_row():
    r = runner.run_target(M.NllSignOfClassZero(), "nll_loss_grad", "float32", None, max_examples=0)
    assert r.status == "fail"
    case = case_from_json(r.case)
    assert case.kwargs["self"].shape[0] == 1, case.describe()
