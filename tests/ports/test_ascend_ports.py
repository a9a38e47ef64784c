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
from xloss.errors import InputModified, OutOfBoundsWrite
from xloss.backends.ascend_aclnn import emulator_library_path, emulator_runtime_path, make_backend
from xloss.conformance import descriptor, runner
from xloss.conformance import targets as declared_targets
from xloss.conformance.casefile import case_from_json
from xloss.conformance.report import write_failures

HERE = Path(__file__).resolve().parent
MAX_EXAMPLES = 30
SPOT_EXAMPLES = 10  # kernels a bug cannot reach: the edge cases plus a few examples
SEED = 0
FLOATS = ("float16", "bfloat16", "float32")
HALVES = ("float16", "bfloat16")
FOCAL_MODES = ("forward", "grad", "forward+grad")
FLCE = "fused_linear_cross_entropy_grad"


def focal(modes=FOCAL_MODES, dtypes=FLOATS) -> set:
    return {("focal_loss", dt, m) for dt in dtypes for m in modes}


@dataclass(frozen=True)
class Bug:
    reach: tuple  # kernels whose code the switch changes
    must: frozenset  # targets that must fail
    may: frozenset  # targets that may fail (a superset of must); anything else must pass


def _bug(reach, must, may=None):
    return Bug(tuple(reach), frozenset(must), frozenset(must if may is None else may))


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
    "flce_mask_from_target": _bug((FLCE,), {(FLCE, dt, m) for dt in HALVES for m in ("softmax", "recompute")}),
    "half_output_trunc": None,  # depends on the harness's output allowance: _truncation()
}


def seeded(variant) -> Bug:
    return SEEDED[variant] or _truncation()


#: seeded bugs only a strided layout shows: (variant, the targets that must fail with layout=strided)
STRIDED_ONLY = {"bce_contiguous_fast_path": {("bce_grad", dt, "clamp") for dt in FLOATS}}


# ---- fixtures ------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def ports(tmp_path_factory, port_harness):
    """{variant: library path}, built once per session (all nine take about 2 s).
    XLOSS_ASCEND_PORTS_DIR names a folder of prebuilt ones instead, e.g. ``build.py --sanitize``'s
    (run pytest with libasan and libubsan in LD_PRELOAD and ASAN_OPTIONS=detect_leaks=0)."""
    build = port_harness.load_module(HERE / "ascend" / "build.py", "ascend_port_build")
    prebuilt = os.environ.get("XLOSS_ASCEND_PORTS_DIR")
    if prebuilt:
        return {v: Path(prebuilt) / build.library_name(v) for v in build.VARIANTS}
    return build.build(tmp_path_factory.mktemp("ascend_ports"))


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


def _sweep(backend, reach) -> list:
    """Every declared target of the kernels the bug can reach, and the float16 targets (the dtype
    all four kernels declare) of the others: enough to see a failure reported in the wrong place."""
    return [t for t in declared_targets(backend) if t[0] in reach or t[1] == "float16"]


def _numel(case_json) -> int:
    case = case_from_json(case_json)
    return max((v.size for v in case.kwargs.values() if isinstance(v, np.ndarray)), default=0)


# ---- the correct port, the incomplete port, the port ABI ------------------------------------------

def test_correct_port_passes_everything_it_declares_through_the_cli(ports, port_backend, xloss_cli, tmp_path):
    """Through the CLI (child-process isolation, JSON): every declared target passes; the undeclared
    ones are refused, except BCE's "add" form, which runs but computes the clamp ("wrong if forced")."""
    out = xloss_cli("check", "--backend", "ascend", "--lib", ports["correct"], "--no-large", "--max-examples", MAX_EXAMPLES,
                    "--seed", SEED, "--json", tmp_path / "r.json", "--failures-dir", tmp_path / "f", cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["passed"] and report["settings"]["isolated"]
    by = {(r["kernel"], r["dtype"], r["mode"]): r for r in report["results"]}
    assert len(by) == len(runner.universe())
    declared = {k for k, r in by.items() if r["declared"]}
    assert declared == set(declared_targets(port_backend("correct")))
    assert len(declared) == 19  # focal 3 dtypes x 3 modes, BCE clamp x 3, NLL x 3, FLCE 2 halves x 2 modes
    assert all(by[k]["status"] == "pass" and by[k]["examples"] > MAX_EXAMPLES for k in declared)
    undeclared = {k: r["status"] for k, r in by.items() if not r["declared"]}
    assert all(s == "refused" for k, s in undeclared.items() if k[1] == "float64" or k[0] == FLCE)
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
    assert (f"aclnnXlossSigmoidFocalLossBackward, aclnnSigmoidFocalLoss, aclnnSigmoidFocalLossGrad from "
            f"{emulator_library_path()} (not the first library given)") in origin
    assert f"aclnnXlossSigmoidFocalLoss, aclnnBinaryCrossEntropyBackward, aclnnNLLLossBackward, " \
           f"aclnnFusedLinearCrossEntropyLossGrad from {ports['no_focal_backward']}" in origin


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
    todo = _sweep(b, bug.reach)
    assert bug.may <= set(todo)
    t0 = time.perf_counter()
    measured = []
    for t in todo:
        n = MAX_EXAMPLES if t[0] in bug.reach else SPOT_EXAMPLES
        measured += port_harness.check(b, [t], max_examples=n, seed=SEED)
    sweep_seconds = time.perf_counter() - t0

    failing = {m.target for m in measured if m.result.status != "pass"}
    assert bug.must <= failing <= bug.may, f"failing {sorted(failing, key=str)}"
    bad = [m.result for m in measured if m.target in failing]
    assert all(r.status == "fail" and r.declared and "outside tolerance" in r.message for r in bad), bad
    # the input is small: an edge case or hypothesis's shrunk example
    assert all(r.case is not None and _numel(r.case) <= 1024 for r in bad)

    saved = write_failures(bad, tmp_path / "failures", "ascend", str(ports[variant]))
    assert {k[:3] for k in saved} == failing  # keys: (kernel, dtype, mode, group)
    for path in list(saved.values())[:2]:  # two replays per bug (each failing target saves the same way)
        assert cli.main(["check", "--replay", path, "--backend", "ascend", "--lib", str(ports[variant])]) == 1, path
        assert cli.main(["check", "--replay", path, "--backend", "ascend", "--lib", str(ports["correct"])]) == 0, path
    capsys.readouterr()

    first = next(m for m in measured if m.target in failing)  # in the harness's target order
    port_findings.append(dict(vendor="ascend", port=variant, target=first.target, first_failure=first.first_failure,
                              examples=first.result.examples, seconds=first.seconds, sweep_seconds=sweep_seconds))


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
    assert cli.main(["check", "--replay", replay, "--backend", "ascend", "--lib", str(ports["correct"])]) == 0
    assert "FAIL" not in capsys.readouterr().out


# ---- a stride/offset bug: invisible to compact tensors, caught with layout=strided ------------------

@pytest.mark.parametrize("variant", sorted(STRIDED_ONLY))
def test_stride_bug_is_caught_only_with_layout_strided(variant, ports, port_backend, xloss_cli, tmp_path, capsys,
                                                       port_findings):
    compact = port_backend(variant)
    for t in _sweep(compact, ("bce_grad",)):  # the default layout: the port looks right
        r = runner.run_target(compact, *t, max_examples=MAX_EXAMPLES if t[0] == "bce_grad" else SPOT_EXAMPLES,
                              seed=SEED)
        assert r.status == "pass", (t, r.message)

    out = xloss_cli("check", "--backend", "ascend", "--lib", ports[variant], "--option", "layout=strided",
                    "--kernels", "bce", "--no-large", "--max-examples", MAX_EXAMPLES, "--seed", SEED, "--json", tmp_path / "r.json",
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
    for r in report["results"]:
        if r["status"] == "fail":
            replay = r["replay_file"]
            # the saved case keeps the layout: the buggy port fails it again, the correct one passes it
            assert xloss_cli("check", "--replay", replay, "--lib", ports[variant], "--option", "layout=strided",
                             cwd=tmp_path).returncode == 1
            assert cli.main(["check", "--replay", replay, "--backend", "ascend", "--lib", str(ports["correct"]),
                             "--option", "layout=strided"]) == 0
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
    assert cli.main(["check", "--replay", path, "--backend", "ascend", "--lib", str(ports["correct"])]) == 0, path


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
