"""`xloss check` against C ports in the Ascend aclnn convention (tests/ports/ascend/).

One correct port implementing all five operator pairs, one that leaves an operator out, and one
library per seeded bug, all built from the same sources (build.py) as separate libraries linked
against the emulator's runtime library. The harness must pass the correct port, report the
missing operator as "not implemented", and fail every buggy port on the kernel (dtype, mode) where
its bug lives and nowhere else, with an input that `xloss check --replay` reproduces against the
buggy port and that passes against the correct one. One bug (a stride/offset bug) is invisible
to the default, compact tensors and must be caught with ``--option layout=strided``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import xloss
from xloss import cli, reference
from xloss.backends.ascend_aclnn import emulator_library_path, emulator_runtime_path, make_backend
from xloss.conformance import descriptor, runner
from xloss.conformance import targets as declared_targets
from xloss.conformance.casefile import case_from_json
from xloss.conformance.report import write_failures
from xloss.errors import InputModified, OutOfBoundsWrite

HERE = Path(__file__).resolve().parent
#: a replay in this process. A saved failure replays on the buggy port as a user runs it (a child process loads the
#: library), once per port at least; on the correct port, where it must pass, in this process (a child costs ~2 s of
#: CPU, and no finding depends on it)
IN_PROCESS = ("--in-process",)
MAX_EXAMPLES = 30
SPOT_EXAMPLES = 10  # kernels a bug cannot reach: the edge cases plus a few examples
SEED = 0
FLOATS = ("float16", "bfloat16", "float32")
HALVES = ("float16", "bfloat16")
FOCAL_MODES = ("forward", "grad", "forward+grad")
FLCE = "fused_linear_cross_entropy_grad"
CE, CE_GRAD, DENSE_CE = "cross_entropy_loss", "cross_entropy_loss_grad", "softmax_cross_entropy_with_logits"


def focal(modes=FOCAL_MODES, dtypes=FLOATS) -> set:
    return {("focal_loss", dt, m) for dt in dtypes for m in modes}


@dataclass(frozen=True)
class Bug:
    reach: tuple  # kernels whose code the switch changes
    must: frozenset  # targets that must fail
    may: frozenset  # targets that may fail (a superset of must); anything else must pass
    says: str = "outside tolerance"  # what the failure message must contain
    max_numel: int | None = 1024  # the shrunk input is at most this large (None: a statistic needs many elements)


def _bug(reach, must, may=None, **kw):
    return Bug(tuple(reach), frozenset(must), frozenset(must if may is None else may), **kw)


def flce(modes=("softmax", "recompute"), dtypes=HALVES) -> set:
    return {(FLCE, dt, m) for dt in dtypes for m in modes}


def _truncation() -> Bug:
    sixteen = focal(dtypes=HALVES) | {("bce_grad", dt, "clamp") for dt in HALVES}
    if descriptor.OUT_ULPS <= 0.5:
        return _bug(("focal_loss", "bce_grad"), sixteen)
    # The final rounding is RNE, half an ulp; truncation errs up to a whole one. An allowance of a
    # whole output ulp (descriptor.OUT_ULPS = 1, before 0.5) admits truncation, so the only
    # evidence is float16 overflow: round-toward-zero saturates at 65504 where RNE gives inf. The BCE
    # edge case with probabilities near 0 overflows float16 deterministically; the focal targets
    # overflow only if hypothesis draws a large enough upstream gradient.
    return _bug(("focal_loss", "bce_grad"), {("bce_grad", "float16", "clamp")},
                {t for t in sixteen if t[1] == "float16"})


SEEDED = {
    # x(1-x) + 1e-12 and max(x(1-x), 1e-12) differ by at most 1e-12: visible where x can be below
    # ~1e-9, i.e. not in float16 (its smallest positive x is 6e-8), where the port is within spec.
    "bce_eps_added": _bug(("bce_grad",), {("bce_grad", dt, "clamp") for dt in ("float32", "bfloat16")}),
    "focal_mean_padded_count": _bug(("focal_loss",), focal(("forward", "forward+grad"))),
    "focal_grad_gamma_sign": _bug(("focal_loss",), focal(("grad", "forward+grad"))),
    "focal_weight_tiled": _bug(("focal_loss",), focal()),
    "nll_ignore_by_range": _bug(("nll_loss_grad",), {("nll_loss_grad", dt, None) for dt in FLOATS}),
    "flce_mask_from_target": _bug((FLCE,), flce()),
    "half_output_trunc": None,  # depends on the harness's output allowance: _truncation()
    # FLCE numerics: per-element bounds cannot see the first and the last; the statistics over an
    # output (flce.statistics) do, on the edge case with 2048 tokens
    "flce_wgrad_half_partials": _bug((FLCE,), flce(), says="weight_grad (error scale)", max_numel=None),
    "flce_tile_max": _bug((FLCE,), flce(("recompute",))),
    "flce_g_trunc": _bug((FLCE,), flce(), says="input_grad (G rounding bias)", max_numel=None),
    # DrivingSDK's focal ABI (binary targets only): the gradient weighs the classes the other way round
    "drivingsdk_grad_alpha_swapped": _bug(("focal_loss",), focal(("grad", "forward+grad"), ("float32",))),
    # the NLL and BCE forward (issue #30)
    "nllf_mean_by_n": _bug(("nll_loss",), {("nll_loss", dt, None) for dt in FLOATS}),
    "nllf_ignored_in_total": _bug(("nll_loss",), {("nll_loss", dt, None) for dt in FLOATS}),
    "nll2d_target_column_major": _bug(("nll_loss",), {("nll_loss", dt, None) for dt in FLOATS}),
    "bcef_log_unclamped": _bug(("binary_cross_entropy",), {("binary_cross_entropy", dt, None) for dt in FLOATS}),
    "bcef_mean_by_weight_sum": _bug(("binary_cross_entropy",),
                                    {("binary_cross_entropy", dt, None) for dt in FLOATS}),
    # cross entropy: each bug in one of the two operators, every dtype the port declares (two per operator:
    # ce_mean_counts_ignored is built too and caught the same way; left out here for the suite's time)
    "ce_smooth_over_c_minus_1": _bug((CE,), {(CE, dt, None) for dt in FLOATS}),
    "ce_no_max_shift": _bug((CE,), {(CE, dt, None) for dt in FLOATS}),
    "ce_grad_smooth_unweighted": _bug((CE_GRAD,), {(CE_GRAD, dt, None) for dt in FLOATS}),
    "ce_grad_mean_counts_ignored": _bug((CE_GRAD,), {(CE_GRAD, dt, None) for dt in FLOATS}),
    # aclnnNLLLoss2dBackward (issue #30): N-d input of the NLL backward
    "nll2db_target_transposed": _bug(("nll_loss_grad",), {("nll_loss_grad", dt, None) for dt in FLOATS}),
    "nll2db_grad_per_sample": _bug(("nll_loss_grad",), {("nll_loss_grad", dt, None) for dt in FLOATS}),
    # the mean's divisor recomputed from the targets and weights: equal to totalWeight when the caller passes the
    # forward's, so only a caller's own total_weight (drawn for mean, and the 4-D edge case's 7.25) shows it
    "nll2db_mean_own_total": _bug(("nll_loss_grad",), {("nll_loss_grad", dt, None) for dt in FLOATS}),
}


def seeded(variant) -> Bug:
    return SEEDED[variant] or _truncation()


#: seeded bugs only a strided layout shows: (variant, the targets that must fail with layout=strided)
STRIDED_ONLY = {"bce_contiguous_fast_path": {("bce_grad", dt, "clamp") for dt in FLOATS}}


# ---- fixtures ------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def ports(port_harness):
    """{variant: library path}, built once per session (all nine take about 2 s).
    XLOSS_ASCEND_PORTS_DIR names a folder of prebuilt ones instead, e.g. ``build.py --sanitize``'s
    (run pytest with libasan and libubsan in LD_PRELOAD and ASAN_OPTIONS=detect_leaks=0)."""
    build = port_harness.load_module(HERE / "ascend" / "build.py", "ascend_port_build")
    prebuilt = os.environ.get("XLOSS_ASCEND_PORTS_DIR")
    if prebuilt:
        return {v: Path(prebuilt) / build.library_name(v) for v in build.VARIANTS}
    return port_harness.build(build.build)


@pytest.fixture(scope="session")
def port_backend(ports):
    cache = {}

    def get(variant, layout="contiguous"):
        if (variant, layout) not in cache:
            b = make_backend(lib=str(ports[variant]), layout=layout)
            ok, why = b.availability()
            assert ok, why
            cache[variant, layout] = b
        return cache[variant, layout]

    return get


def _sweep(backend, reach, changed=None) -> list:
    """Every declared target of the kernels the bug can reach, and the float16 targets (the dtype
    all four kernels declare) of the others whose code the port's switches change (``changed``; None:
    every kernel): enough to see a failure reported in the wrong place. The kernels left out link the
    correct port's very objects (``build.changed_kernels``), which test_correct_port_* passes."""
    return [t for t in declared_targets(backend)
            if t[0] in reach or (t[1] == "float16" and (changed is None or t[0] in changed))]


def _numel(case_json) -> int:
    case = case_from_json(case_json)
    return max((v.size for v in case.kwargs.values() if isinstance(v, np.ndarray)), default=0)


# ---- the correct port, the incomplete port, the port ABI ------------------------------------------

@pytest.mark.slow  # the CLI over every declared target: about 12 s
def test_correct_port_passes_everything_it_declares_through_the_cli(ports, port_backend, xloss_cli, tmp_path):
    """Through the CLI (child-process isolation, JSON): every declared target passes; the undeclared
    ones are refused, except BCE's "add" form, which runs but computes the clamp ("wrong if forced")."""
    out = xloss_cli("check", "--backend", "ascend", "--lib", ports["correct"], "--no-large",
                    "--max-examples", MAX_EXAMPLES,
                    "--seed", SEED, "--json", tmp_path / "r.json", "--failures-dir", tmp_path / "f", cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["passed"] and report["settings"]["isolated"]
    by = {(r["kernel"], r["dtype"], r["mode"]): r for r in report["results"]}
    assert len(by) == len(runner.universe())
    declared = {k for k, r in by.items() if r["declared"]}
    assert declared == set(declared_targets(port_backend("correct")))
    # focal 3 dtypes x 3 modes, BCE clamp x 3, NLL x 3, FLCE 2 halves x 2 modes, the vocabulary-parallel
    # max/sum 2 halves and loss 3 dtypes; the NLL and BCE forward 3 dtypes each, cross entropy forward and grad
    # x 3 (issue #30)
    assert len(declared) == 36
    assert all(by[k]["status"] == "pass" and by[k]["examples"] > MAX_EXAMPLES for k in declared)
    undeclared = {k: r["status"] for k, r in by.items() if not r["declared"]}
    # kernels with no operator in this port are not implemented: the dense-label cross entropy and BCE with
    # logits (their operators are ported in libraries of their own)
    absent = {k for k, _, _ in runner.universe()} - set(port_backend("correct").capabilities())
    assert DENSE_CE in absent and "bce_with_logits" in absent
    assert all(s == "not implemented" for k, s in undeclared.items() if k[0] in absent)
    assert all(s == "refused" for k, s in undeclared.items()
               if (k[1] == "float64" or k[0] == FLCE) and k[0] not in absent)
    assert {k for k, s in undeclared.items() if s == "wrong if forced"} == {("bce_grad", dt, "add") for dt in FLOATS}
    assert not (tmp_path / "f").exists()


def test_a_port_without_an_operator_reports_it_not_implemented(ports):
    """With the runtime library after the port (what the porting guide says), nothing fills the gap;
    with the full emulator after it, the gap is filled, and info() says where from."""
    b = make_backend(lib=os.pathsep.join([str(ports["no_focal_backward"]), emulator_runtime_path()]))
    assert b.availability() == (True, "")
    caps = b.capabilities()
    assert caps["focal_loss"].variants["mode"] == {"forward"}
    assert {"bce_grad", "nll_loss_grad", FLCE} <= set(caps)
    results = runner.run_suite(b, kernels=["focal_loss"], max_examples=MAX_EXAMPLES, seed=SEED)
    status = {(r.dtype, r.mode): r.status for r in results}
    for dt in FLOATS:
        assert status[(dt, "forward")] == "pass"
        assert status[(dt, "grad")] == status[(dt, "forward+grad")] == "not implemented"
    # float64: the forward operator refuses the dtype; the missing backward is reported as missing
    assert status[("float64", "forward")] == status[("float64", "forward+grad")] == "refused"
    assert status[("float64", "grad")] == "not implemented"
    assert not [r for r in results if r.status in runner.FAILING]
    assert "(not the first library given)" not in b.info()["operators"]

    filled = make_backend(lib=os.pathsep.join([str(ports["no_focal_backward"]), emulator_library_path()]))
    assert filled.capabilities()["focal_loss"].variants["mode"] == {"forward", "grad", "forward+grad"}
    origin = filled.info()["operators"]
    # the focal operators the port lacks, and BCE with logits and the dense-label cross entropy (ported in
    # libraries of their own)
    assert (f"aclnnXlossSigmoidFocalLossBackward, aclnnSigmoidFocalLoss, aclnnSigmoidFocalLossGrad, "
            f"aclnnBinaryCrossEntropyWithLogits, aclnnBinaryCrossEntropyWithLogitsBackward, "
            f"aclnnSoftmaxCrossEntropyWithLogits from "
            f"{emulator_library_path()} (not the first library given)") in origin
    assert f"aclnnXlossSigmoidFocalLoss, aclnnBinaryCrossEntropyBackward, aclnnNLLLossBackward, " \
           f"aclnnFusedLinearCrossEntropyLossGrad, aclnnFusedLinearOnlineMaxSum, " \
           f"aclnnFusedCrossEntropyLossWithMaxSum, aclnnNLLLoss, aclnnNLLLoss2d, aclnnBinaryCrossEntropy, " \
           f"aclnnCrossEntropyLoss, aclnnCrossEntropyLossGrad, aclnnNLLLoss2dBackward from " \
           f"{ports['no_focal_backward']}" in origin


def test_port_executors_are_the_runtimes_and_views_go_through_the_accessors(port_backend):
    """Drive the ABI directly for what xloss check does not do: repeatable and abandoned
    executors, an executor run by another operator, a strided view."""
    b = port_backend("correct")
    lib, ffi = b.rt.lib, b.rt.ffi
    x = np.array([0.1, 0.5, 0.9, 0.3], np.float32)
    y = np.array([0.0, 1.0, 1.0, 0.0], np.float32)
    storage = np.zeros(11, np.float32)
    storage[3::2] = x  # x as a view: offset 3, stride 2
    before = b.rt.live()
    with b.session() as s:
        tg = s.put(np.asarray(1.0, np.float32))[0]
        tx = s.tensor(s.upload(storage), (4,), np.float32, strides=(2,), offset=3, storage_shape=(11,))
        ty = s.put(y)[0]
        to, bo = s.empty((4,), np.float32)
        size, exe = ffi.new("uint64_t *"), ffi.new("aclOpExecutor **")
        args = (tg, tx, ty, ffi.NULL, 0, to, size, exe)
        assert lib.aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(*args) == 0
        assert lib.aclSetAclOpExecutorRepeatable(exe[0]) == 0
        for _ in range(2):  # a repeatable executor runs more than once
            assert lib.aclnnBinaryCrossEntropyBackward(ffi.NULL, 0, exe[0], s.stream) == 0
        assert lib.aclDestroyAclOpExecutor(exe[0]) == 0
        np.testing.assert_allclose(s.download(bo, (4,), np.float32), reference.bce_grad(x, y, 1.0, reduction="none"),
                                   rtol=1e-6)
        assert lib.aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(*args) == 0
        assert lib.aclDestroyAclOpExecutor(exe[0]) == 0  # abandoned between the phases
        assert lib.aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(*args) == 0
        assert lib.aclnnBinaryCrossEntropyBackward(ffi.NULL, 0, exe[0], s.stream) == 0
        assert lib.aclnnBinaryCrossEntropyBackward(ffi.NULL, 0, exe[0], s.stream) == 561000  # single use: unknown now
        assert lib.aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(*args) == 0
        assert lib.aclnnNLLLossBackward(ffi.NULL, 0, exe[0], s.stream) == 161002  # not its operator
        assert lib.aclDestroyAclOpExecutor(exe[0]) == 0
    assert b.rt.live() == before, "the port leaked runtime objects"


# ---- seeded bugs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", sorted(SEEDED))
def test_seeded_bug_fails_its_kernel_only_with_a_replayable_input(variant, ports, port_backend, port_harness,
                                                                 port_findings, tmp_path, capsys):
    bug = seeded(variant)
    b = port_backend(variant)
    todo = _sweep(b, bug.reach, port_harness.load_module(HERE / "ascend" / "build.py", "ascend_port_build")
                  .changed_kernels(variant))
    assert bug.may <= set(todo)
    # Only the first target that must fail is shrunk (what a port author reads); the others need only
    # show that they fail, which costs a fraction of a shrink (focal_weight_tiled fails nine targets).
    shrunk = next(t for t in todo if t in bug.must)
    t0 = time.perf_counter()
    measured = []
    for t in todo:
        n = MAX_EXAMPLES if t[0] in bug.reach else SPOT_EXAMPLES
        measured += port_harness.check(b, [t], max_examples=n, seed=SEED, shrink=t == shrunk)
    sweep_seconds = time.perf_counter() - t0

    failing = {m.target for m in measured if m.result.status != "pass"}
    assert bug.must <= failing <= bug.may, f"failing {sorted(failing, key=str)}"
    bad = [m.result for m in measured if m.target in failing]
    assert all(r.status == "fail" and r.declared and bug.says in r.message for r in bad), bad
    first = next(m for m in measured if m.target == shrunk)
    # the shrunk input is small: an edge case or hypothesis's shrunk example
    assert first.result.case is not None
    assert bug.max_numel is None or _numel(first.result.case) <= bug.max_numel

    saved = write_failures(bad, tmp_path / "failures", "ascend", str(ports[variant]))
    assert {k[:3] for k in saved} == failing  # keys: (kernel, dtype, mode, group)
    replays = [saved[shrunk]] + [p for t, p in saved.items() if t[:3] != shrunk][:1]  # the shrunk one, one unshrunk
    for i, path in enumerate(replays):
        # the shrunk one on the buggy port in a child process, as a user runs it; the unshrunk one in this process
        # (a child costs ~2 s of CPU and shows nothing the first does not: the port's failure is the same in either)
        assert cli.main(["check", "--replay", path, "--backend", "ascend", "--lib", str(ports[variant]),
                         *(IN_PROCESS if i else ())]) == 1, path
        assert cli.main(["check", "--replay", path, "--backend", "ascend", "--lib", str(ports["correct"]),
                         *IN_PROCESS]) == 0, path
    capsys.readouterr()

    port_findings.append(dict(vendor="ascend", port=variant, target=first.target, first_failure=first.first_failure,
                              examples=first.result.examples, seconds=first.seconds, sweep_seconds=sweep_seconds))


@pytest.mark.slow  # about 6 s
def test_a_buggy_port_through_the_cli_saves_a_replay_that_tells_the_ports_apart(ports, xloss_cli, tmp_path, capsys):
    out = xloss_cli("check", "--backend", "ascend", "--lib", ports["bce_eps_added"], "--kernels", "bce",
                    "--no-large", "--max-examples", MAX_EXAMPLES, "--seed", SEED, "--json", tmp_path / "r.json",
                    "--failures-dir", tmp_path / "f", cwd=tmp_path)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    by = {(r["dtype"], r["mode"]): r for r in report["results"]}
    assert {k for k, r in by.items() if r["status"] == "fail"} == {("float32", "clamp"), ("bfloat16", "clamp")}
    assert by[("float16", "clamp")]["status"] == "pass"
    r = by[("float32", "clamp")]
    assert "FAIL: bce_grad float32 mode=clamp" in out.stdout and "smallest failing input" in out.stdout
    x = case_from_json(r["case"]).kwargs["x"]
    assert x.size <= 16 and np.any((x > 0) & (x < 1e-9)), "the input shows where the epsilon matters"
    replay = r["replay_file"]
    # the saved file names the library it failed on (shown, never loaded from the file): replay with --lib
    bad = xloss_cli("check", "--replay", replay, "--lib", ports["bce_eps_added"], cwd=tmp_path)
    assert "libport_bce_eps_added.so" in bad.stdout
    assert bad.returncode == 1 and "FAIL" in bad.stdout, bad.stdout + bad.stderr
    assert cli.main(["check", "--replay", replay, "--backend", "ascend", "--lib", str(ports["correct"]),
                     *IN_PROCESS]) == 0
    assert "FAIL" not in capsys.readouterr().out


# ---- a stride/offset bug: invisible to compact tensors, caught with layout=strided ------------------

@pytest.mark.slow  # about 7 s
@pytest.mark.parametrize("variant", sorted(STRIDED_ONLY))
def test_stride_bug_is_caught_only_with_layout_strided(variant, ports, port_backend, xloss_cli, tmp_path, capsys,
                                                       port_findings):
    compact = port_backend(variant)
    for t in _sweep(compact, ("bce_grad",)):  # the default layout: the port looks right
        r = runner.run_target(compact, *t, max_examples=MAX_EXAMPLES if t[0] == "bce_grad" else SPOT_EXAMPLES,
                              seed=SEED)
        assert r.status == "pass", (t, r.message)

    out = xloss_cli("check", "--backend", "ascend", "--lib", ports[variant], "--option", "layout=strided",
                    "--kernels", "bce", "--no-large", "--max-examples", MAX_EXAMPLES, "--seed", SEED,
                    "--json", tmp_path / "r.json",
                    "--failures-dir", tmp_path / "f", cwd=tmp_path)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["backend_info"]["layout"] == "strided"
    failing = {(r["kernel"], r["dtype"], r["mode"]) for r in report["results"] if r["status"] == "fail"}
    assert failing == STRIDED_ONLY[variant]
    first = next(r for r in report["results"] if r["status"] == "fail")
    port_findings.append(dict(vendor="ascend", port=f"{variant} (layout=strided)",
                              target=(first["kernel"], first["dtype"], first["mode"]), first_failure=first["found_at"],
                              examples=first["examples"], seconds=first["seconds"],
                              sweep_seconds=sum(r["seconds"] for r in report["results"])))
    for i, r in enumerate(r for r in report["results"] if r["status"] == "fail"):
        replay = r["replay_file"]
        # the saved case keeps the layout: the buggy port fails it again, the correct one passes it (the first replay
        # on the buggy port in a child process, as a user runs it; the others in this process, as the seeded bugs')
        again = ["check", "--replay", replay, "--lib", str(ports[variant]), "--option", "layout=strided"]
        assert (cli.main([*again, *IN_PROCESS]) if i else xloss_cli(*again, cwd=tmp_path).returncode) == 1, replay
        assert cli.main(["check", "--replay", replay, "--backend", "ascend", "--lib", str(ports["correct"]),
                         "--option", "layout=strided", *IN_PROCESS]) == 0
    capsys.readouterr()


# ---- memory-contract and large-size bugs (issue 12): guards, input comparison, the large ladder -----

#: variant -> (the target where it lives, what it violates, the ABI argument the report must name)
CONTRACT = {
    "nll_zero_fill_rounded": (("nll_loss_grad", "float32", None), OutOfBoundsWrite, "out"),
    "focal_grad_scratch_in_self": (("focal_loss", "float32", "grad"), InputModified, "self"),
}


def _replays(path, ports, variant, times=2):
    """The replay fails against the buggy port every time and passes against the correct one."""
    for _ in range(times):
        assert cli.main(["check", "--replay", path, "--backend", "ascend", "--lib", str(ports[variant])]) == 1, path
    assert cli.main(["check", "--replay", path, "--backend", "ascend", "--lib", str(ports["correct"]),
                     *IN_PROCESS]) == 0, path


@pytest.mark.parametrize("variant", sorted(CONTRACT))
def test_memory_contract_bug_is_caught_naming_the_buffer(variant, ports, port_backend, port_findings, tmp_path,
                                                         capsys):
    target, error, buffer = CONTRACT[variant]
    b = port_backend(variant)
    # the violation is raised at the call, before any result reaches the caller's array
    x = np.linspace(-3, 3, 7).astype(np.float32)
    out = np.full(7, 42.0, np.float32)
    with pytest.raises(error) as info:
        if variant.startswith("nll"):  # 7 floats: 28 bytes, not a multiple of 32
            xloss.nll_loss_grad(1.0, x, np.asarray(2), reduction="sum", backend=b.checked(), out=out)
        else:
            xloss.focal_loss_grad(x, (x > 0).astype(np.float32), backend=b.checked(), out=out)
    assert info.value.buffer == buffer and info.value.nbytes > 0 and (out == 42.0).all()
    t0 = time.perf_counter()
    r = runner.run_target(b, *target, max_examples=MAX_EXAMPLES, seed=SEED)
    assert r.status == "fail" and f"`{buffer}`" in r.message and error.kind in r.message, r.message
    assert _numel(r.case) <= 64  # a small input shows it
    assert runner.run_target(port_backend("correct"), *target, max_examples=MAX_EXAMPLES, seed=SEED).status == "pass"
    saved = write_failures([r], tmp_path / "failures", "ascend", str(ports[variant]))
    _replays(next(iter(saved.values())), ports, variant)
    capsys.readouterr()
    port_findings.append(dict(vendor="ascend", port=variant, target=target, first_failure=r.found_at,
                              examples=r.examples, seconds=time.perf_counter() - t0, sweep_seconds=r.seconds))


@pytest.mark.slow  # about 35 s on a loaded 2-core machine: 16.9 M elements through the port
def test_count_overflow_above_2_24_is_caught_by_the_large_ladder(ports, port_backend, port_findings, tmp_path,
                                                                 capsys):
    target = ("bce_grad", "float32", "clamp")
    b = port_backend("bce_mean_count_24bit")
    drawn = runner.run_target(b, *target, max_examples=MAX_EXAMPLES, seed=SEED)
    assert drawn.status == "pass"  # drawn cases never reach 2^24 elements
    t0 = time.perf_counter()
    r = runner.run_large(b, *target, seed=SEED, repeats=1)
    assert r.status == "fail" and "2^24+ elements, mean" in r.message, r.message
    saved = write_failures([r], tmp_path / "failures", "ascend", str(ports["bce_mean_count_24bit"]))
    _replays(next(iter(saved.values())), ports, "bce_mean_count_24bit", times=1)
    capsys.readouterr()
    port_findings.append(dict(vendor="ascend", port="bce_mean_count_24bit (large ladder)", target=target,
                              first_failure=r.found_at, examples=r.examples, seconds=time.perf_counter() - t0,
                              sweep_seconds=r.seconds))


# ---- a library with only DrivingSDK's focal ABI: binary targets only ----------------------------------

def test_a_drivingsdk_only_port_is_checked_on_binary_targets_and_passes(ports, port_backend, port_findings):
    """DrivingSDK's INT32 one-hot target cannot carry a soft y: the backend declares focal loss for
    binary targets only, xloss check draws (and builds, edge and large) only y in {0, 1} for it and
    passes a correct library; the public API refuses soft targets naming y."""
    from xloss.conformance import large
    from xloss.conformance.report import declared_variants

    b = port_backend("drivingsdk")
    assert b.focal_abi == "drivingsdk"
    caps = b.capabilities()["focal_loss"]
    assert caps.variants["targets"] == {"binary"} and "targets: binary" in caps.describe()
    assert "focal_loss: targets: binary" in declared_variants(b.capabilities())
    # xloss's own ABI: soft and binary targets (FLCE's fixed label smoothing is listed for both)
    assert not [v for v in declared_variants(port_backend("correct").capabilities()) if v.startswith("focal_loss")]

    targets_seen = set()

    def note(case):
        targets_seen.update(np.unique(np.asarray(case.kwargs["y"], dtype=np.float64)).tolist())

    t0 = time.perf_counter()
    for mode in FOCAL_MODES:
        r = runner.run_target(b, "focal_loss", "float32", mode, max_examples=MAX_EXAMPLES, seed=SEED, on_case=note)
        assert r.status == "pass", r.message
    assert targets_seen == {0.0, 1.0}
    # undeclared: the library refuses other dtypes (it is probed with binary targets, so it is reached)
    assert runner.run_target(b, "focal_loss", "float16", "grad", max_examples=4, seed=SEED).status == "refused"
    # the ladder builds binary targets for it, soft ones (about 5%) otherwise
    rung = large.rungs("focal_loss")[0]
    y = large.build("focal_loss", "float32", "grad", rung, SEED, caps).kwargs["y"]
    assert set(np.unique(y).tolist()) == {0.0, 1.0}
    assert np.unique(large.build("focal_loss", "float32", "grad", rung, SEED).kwargs["y"]).size > 2
    seconds = time.perf_counter() - t0

    x = np.linspace(-3, 3, 6).astype(np.float32)
    with pytest.raises(xloss.UnsupportedRequestError, match=r"y with soft targets: soft targets are not supported"):
        xloss.focal_loss(x, np.full(6, 0.25, np.float32), backend=b)
    binary = (x > 0).astype(np.float32)
    np.testing.assert_allclose(xloss.focal_loss(x, binary, reduction="none", backend=b),
                               reference.sigmoid_focal_loss(x, binary, reduction="none"), rtol=1e-5)
    port_findings.append(dict(vendor="ascend", port="drivingsdk (correct, binary targets)",
                              target=("focal_loss", "float32", "all modes"), first_failure=None, examples=0,
                              seconds=seconds, sweep_seconds=seconds))


def test_a_port_reproducing_the_vendor_kernel_passes_within_the_vendor_range(ports, port_backend, port_findings):
    """A DrivingSDK-ABI port computing exactly as DrivingSDK's kernel does (its naive float32 arithmetic,
    kernels/sigmoid_focal_loss/op_kernel/arch35) is not reported as a plain FAIL: the backend declares the
    logit range that kernel is good for, and xloss check says it passes within that range and fails outside
    it, on a line of its own; the summary counts it as passed. A port accurate everywhere passes plainly
    (test above), and a real bug still fails inside the range (drivingsdk_grad_alpha_swapped)."""
    from xloss.conformance.report import failures_text, summary

    b = port_backend("drivingsdk_vendor_numerics")
    caps = b.capabilities()["focal_loss"]
    assert dict(caps.vendor_range) == {"x": (-4.0, 4.0)}
    assert "the vendor kernel's range: x in [-4, 4]" in caps.describe()
    t0 = time.perf_counter()
    results = [runner.run_target(b, "focal_loss", "float32", mode, max_examples=MAX_EXAMPLES, seed=SEED)
               for mode in FOCAL_MODES]
    for r in results:
        assert r.status == runner.PASS_IN_VENDOR_RANGE, r.message
        out = r.outside_vendor_range
        assert out["range"] == "x in [-4, 4]" and 0 < out["failed"] <= out["cases"], out
        assert r.message.startswith("passes within the vendor's range (x in [-4, 4]), fails outside it")
        assert "vendor kernel's own numerics" in r.message and r.examples > MAX_EXAMPLES
    text = failures_text(results, {})
    assert text.count("OUTSIDE THE VENDOR'S RANGE: focal_loss float32") == 3
    assert summary(results).startswith("PASSED: 3 pass in the vendor's range")
    # the same port with the range taken away: a plain FAIL (the extreme-logit edge cases)
    import dataclasses

    plain = dataclasses.replace(caps, vendor_range={})
    assert runner.outside_vendor_range(caps, runner.clipped_to_vendor_range(caps, _big_logit_case())) is False
    assert runner.outside_vendor_range(plain, _big_logit_case()) is False
    assert runner.outside_vendor_range(caps, _big_logit_case()) is True
    port_findings.append(dict(vendor="ascend", port="drivingsdk_vendor_numerics (the vendor's own arithmetic)",
                              target=("focal_loss", "float32", "all modes"), first_failure=None,
                              examples=sum(r.examples for r in results), seconds=time.perf_counter() - t0,
                              sweep_seconds=time.perf_counter() - t0))


def _big_logit_case():
    from xloss.conformance.descriptor import Case

    return Case("focal_loss", "forward", "float32", {"x": np.array([1.0, 30.0], np.float32),
                                                     "y": np.array([0.0, 1.0], np.float32)})


# ---- a vendor runtime's fresh memory is not poisoned: the adapter poisons outputs in checked mode ----

def test_an_unwritten_output_element_fails_whatever_the_runtime_memory_held(ports, port_harness, port_findings,
                                                                           tmp_path, capsys):
    """``nll_zero_fill_short`` never writes the last element of out. With the emulator's runtime
    that element is NaN (its fresh memory is 0xFF); a vendor runtime may hand back zeros, which is the
    right value there. ``zeroed_memory`` stands in for such a runtime: unchecked, the port looks
    right on it; checked, the adapter poisons every output before the operator, and it fails."""
    build = port_harness.load_module(HERE / "ascend" / "build.py", "ascend_port_build")
    zeroed = build.build_zeroed_memory(tmp_path / "zeroed")
    lib = os.pathsep.join([str(zeroed), str(ports["nll_zero_fill_short"])])
    plain = make_backend(lib=lib)
    x, t = np.zeros((3, 5), np.float32), np.array([0, 1, 2])
    want = reference.nll_loss_grad(1.0, x, t, reduction="sum")
    np.testing.assert_array_equal(xloss.nll_loss_grad(1.0, x, t, reduction="sum", backend=plain), want)
    got = xloss.nll_loss_grad(1.0, x, t, reduction="sum", backend=plain.checked())
    assert np.isnan(got[-1, -1]) and np.array_equal(got.reshape(-1)[:-1], want.reshape(-1)[:-1])

    t0 = time.perf_counter()
    target = ("nll_loss_grad", "float32", None)
    r = runner.run_target(plain, *target, max_examples=MAX_EXAMPLES, seed=SEED)
    assert r.status == "fail" and "outside tolerance" in r.message, r.message
    assert _numel(r.case) <= 16
    saved = write_failures([r], tmp_path / "failures", "ascend", lib)
    path = next(iter(saved.values()))
    for _ in range(2):
        assert cli.main(["check", "--replay", path, "--backend", "ascend", "--lib", lib]) == 1
    assert cli.main(["check", "--replay", path, "--backend", "ascend", "--lib", str(ports["correct"]),
                     *IN_PROCESS]) == 0
    capsys.readouterr()
    port_findings.append(dict(vendor="ascend", port="nll_zero_fill_short (zero-filled runtime memory)",
                              target=target, first_failure=r.found_at, examples=r.examples,
                              seconds=time.perf_counter() - t0, sweep_seconds=r.seconds))
