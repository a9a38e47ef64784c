"""On-target conformance for the FT78NE/MT7004 ports (xloss check --export / --judge, docs/on-target.md).

What this layer must show: the verdicts of the on-target flow (export the check's calls, build the exported C runner
with the host compiler against the port and the private-memory shim, run it, judge its results) are those of the
host check (`xloss check --lib`) on the same port with the same settings: per target, the status and the example it
first fails at. A port reaches a verdict only through the bytes the runner writes for each recorded call; the rest
(the cases, guards, input comparison, oracle, tolerances, configurations, the report) is the host check's own code,
run by the export on the emulator and by the judge. So the equality holds for any port once these are shown, each
by the cheapest port that shows it (ON_TARGET below: one export each, at one example):

1. every entry point, in both memory forms, is called with the host's arguments and its results come back where the
   host's do: the correct port on every kernel passes on target, in shared (`_s`) and in private (`_p`) memory
   (an argument lost or wrong, a result dropped or misplaced, fails it);
2. a wrong result of every entry point reaches the judge as the port's, not the emulator's nor dropped: for each
   kernel (its entry points), one port whose bug lives there fails on target where it fails on the host;
3. every kind of difference a port can make is carried and judged as on the host: output values, and half results
   one ulp off (half_truncate: exact bits); bytes past a shared buffer (nll_row_past_end) and around a private one
   (bce_p_vector_tail); an input written (flce_input_in_place); a result that depends on the core mask
   (bce_mask_contiguous) or on the arena's size (flce_accumulate_ignored, private_bytes); an entry point left out
   (omit_nll: the declarations); a crash (test_a_crashing_port_fails_as_not_run);
4. the same for the ports built apart: BCE with logits (its correct port, one bug); the softmax cross-entropy pages
   and the sparse page's gradient (is_grad = 1), whose cases are large (40 to 55 MiB an exported kernel):
   two ports that each pass some of the three kernels and fail the others (SPLIT_VERDICTS) show every entry point,
   and is_grad, passing and failing.

Another buggy port of a kernel shown adds nothing: its bug changes only its own bytes, and 1-3 show that bytes of
each kind arrive as the host's. (Each port used to run here, on the kernels its code changes: 124 s of CI, three
suite runs per port.) Each entry names a status its port must show on target: a bug the settings miss would show
nothing.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import xloss
from xloss.cli import main as xloss_main
from xloss.conformance import runner
from xloss.conformance.export import export
from xloss.conformance.export_format import OnTargetFormatError
from xloss.conformance.judge import judge_results

HERE = Path(__file__).resolve().parent
SHIM = "libxloss_ft78ne_private.so"
MAX_EXAMPLES = 6
CC = os.environ.get("CC", "gcc").split()[0]


@pytest.fixture(scope="module")
def build_mod(port_harness):
    return port_harness.load_module(HERE / "ft78ne" / "build.py", "ft78ne_port_build_on_target")


@pytest.fixture(scope="module")
def ports(port_harness, build_mod) -> dict[str, str]:
    if shutil.which(CC) is None:
        pytest.skip("no C compiler")
    return {v: str(p) for v, p in port_harness.build(build_mod.build_all).items()}


def _lib(ports, variant, private):
    lib = ports[variant]
    return lib + os.pathsep + str(Path(lib).with_name(SHIM)) if private else lib


def _settings(kernels, max_examples=MAX_EXAMPLES):
    return {"max_examples": max_examples, "seed": 0, "kernels": kernels, "large": False, "repeat": 3,
            "repeat_given": False}


def build_runner(folder: Path, lib: str, *extra) -> None:
    shim = str(Path(lib).with_name(SHIM))
    res = subprocess.run([str(folder / "build.sh"), lib, shim, f"-Wl,-rpath,{Path(lib).parent}", *extra],
                         capture_output=True, text=True, env=dict(os.environ, CC=CC), check=False)
    assert res.returncode == 0, res.stderr


def run_runner(folder: Path, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(folder / "xloss_runner"), str(folder)], capture_output=True, text=True,
                          env=env, check=False, timeout=300)


def on_target(folder, ports, variant, chip, kernels, *, private=False, options=(), max_examples=MAX_EXAMPLES):
    """Export, build, run and judge; {(kernel, dtype, mode, group): status}."""
    opts = dict(options, lib=_lib(ports, variant, private), **({"memory": "private"} if private else {}))
    export(folder, chip, opts, _settings(kernels, max_examples))
    build_runner(folder, ports[variant])
    run_runner(folder)
    _, results = judge_results(folder)
    return {(r.kernel, r.dtype, str(r.mode), r.group): r for r in results}


def on_host(ports, variant, chip, kernels, *, private=False, options=(), max_examples=MAX_EXAMPLES):
    """The host check on the port, in the judge's flow: unshrunk (the judge reports the first failure as found; a
    shrunk one may be another example) and without the leak measurement (which the judge leaves out)."""
    opts = dict(options, lib=_lib(ports, variant, private), **({"memory": "private"} if private else {}))
    results = runner.run_suite(xloss.backend(chip, **opts), kernels=kernels, max_examples=max_examples, seed=0,
                               shrink=False, leaks=False)
    return {(r.kernel, r.dtype, str(r.mode), r.group): r for r in results}


def assert_same_verdicts(target, host):
    """Per target: the same status, first failing at the same example, after the same number of examples (a target
    the judge passes without running it shows as a difference in the count)."""
    got = {k: (r.status, r.found_at, r.examples) for k, r in target.items()}
    want = {k: (r.status, r.found_at, r.examples) for k, r in host.items()}
    assert got == want, "\n".join(f"{k}: on target {got.get(k)}, host {want.get(k)}: {target[k].message}"
                                  for k in sorted(set(got) | set(want), key=str) if got.get(k) != want.get(k))


BCE, NLL, FLCE, FOCAL = "bce_grad", "nll_loss_grad", "fused_linear_cross_entropy_grad", "focal_loss"
MAXSUM, MAXSUM_LOSS = "fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum"
DENSE, SPARSE, GRAD = "softmax_cross_entropy_with_logits", "cross_entropy_loss", "cross_entropy_loss_grad"
SLOW = pytest.mark.slow  # every kernel through export, runner, judge and the host check: about 15 s each


FAILS = "fail"  # some target fails (any failing status); otherwise no target fails and the status named is shown


def entry(variant, kernels, shows, *, build="build_all", chip="mt7004", private=False, marks=(), **options):
    """One port on target (see the module docstring): ``kernels`` None is every kernel; ``shows``, a status the port
    must show on target (FAILS: some failing one; else none fails)."""
    return pytest.param(variant, build, chip, kernels, private, options, shows, marks=marks,
                        id=f"{variant}{'-private' if private else ''}")


ON_TARGET = [
    # 1. every entry point, _s and _p: the correct port passes everything
    entry("correct", None, runner.PASS, marks=SLOW),
    entry("correct", None, runner.PASS, private=True, marks=SLOW),
    # 2. one bug per kernel: a wrong result arrives as the port's
    entry("bce_eps_clamp", [BCE], FAILS),
    entry("focal_gamma_sign", [FOCAL], FAILS),
    entry("nll_row_past_end", [NLL], FAILS),  # 3. also: bytes past a shared buffer (the guards)
    entry("flce_input_in_place", [FLCE], FAILS, chip="ft78ne"),  # 3. also: an input written; the FT78NE chip
    entry("vp_sum_unshifted", [MAXSUM], FAILS),
    entry("vp_loss_half", [MAXSUM_LOSS], FAILS),
    entry("nllf_mean_by_batch", ["nll_loss"], FAILS),
    entry("bcef_weight_none_only", ["binary_cross_entropy"], FAILS),
    # 3. the kinds of difference
    entry("half_truncate", [BCE], FAILS),  # a half result one ulp off (port.h: every kernel; one shows the bits)
    entry("bce_mask_contiguous", [BCE], FAILS),  # a result that depends on the core mask
    entry("bce_p_vector_tail", [BCE], FAILS, private=True),  # bytes past a private buffer
    entry("flce_accumulate_ignored", [FLCE], FAILS, private=True, private_bytes=8192),  # the arena's size
    entry("omit_nll", [NLL], "not implemented"),  # an entry point left out: "not implemented" on both
    # 4. the ports built apart
    entry("sce_correct", ["bce_with_logits"], runner.PASS, build="build_bce_with_logits"),
    entry("sce_literal_log", ["bce_with_logits"], FAILS, build="build_bce_with_logits"),
    # (the pages' cases are 40 to 55 MiB an exported kernel: two ports show both pages and is_grad passing and failing)
    entry("smce_grad_no_one_hot", [DENSE, SPARSE, GRAD], FAILS, build="build_softmax_ce_grad",
          core_mask=0x07),  # both pages pass, is_grad = 1 fails
    entry("smce_split_by_eight", [DENSE, GRAD], FAILS, build="build_softmax_ce",
          core_mask=0x07),  # the dense page fails, is_grad = 1 passes
]


#: the ports above that stand for a kernel passing as well as one failing: the kernels they fail (the others pass)
SPLIT_VERDICTS = {"smce_grad_no_one_hot": {GRAD}, "smce_split_by_eight": {DENSE}}


@pytest.mark.parametrize("variant,build,chip,kernels,private,options,shows", ON_TARGET)
def test_on_target_verdict_equals_host(variant, build, chip, kernels, private, options, shows, ports, port_harness,
                                       build_mod, tmp_path):
    libs = ports if build == "build_all" else {
        v: str(p) for v, p in port_harness.build(getattr(build_mod, build), [variant]).items()}
    target = on_target(tmp_path / "x", libs, variant, chip, kernels, private=private, options=options,
                       max_examples=1)
    assert_same_verdicts(target, on_host(libs, variant, chip, kernels, private=private, options=options,
                                         max_examples=1))
    statuses = {r.status for r in target.values()}
    if shows == FAILS:
        assert statuses & set(runner.FAILING), statuses
    else:
        assert shows in statuses and not statuses & set(runner.FAILING), statuses
    if variant in SPLIT_VERDICTS:  # a port shown passing some kernels and failing others: which ones
        failed = {k[0] for k, r in target.items() if r.status in runner.FAILING}
        assert failed == SPLIT_VERDICTS[variant], failed


def test_a_crashing_port_fails_as_not_run(ports, tmp_path):
    """The runner dies in a call: every call from there on is "not run", a FAIL, never a pass."""
    folder = tmp_path / "x"
    export(folder, "mt7004", {"lib": ports["bce_weight_always"]}, _settings(["bce_grad"]))
    build_runner(folder, ports["bce_weight_always"])
    assert run_runner(folder).returncode != 0
    _, results = judge_results(folder)
    declared = [r for r in results if r.declared]
    assert declared and all(r.status == runner.FAIL and "not run" in r.message for r in declared)


# -- the runner's source and footprint -------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(ports, tmp_path_factory):
    """One export of the correct port's BCE through private memory (the `_p` forms, several cores),
    runner built and run."""
    folder = tmp_path_factory.mktemp("on_target") / "x"
    export(folder, "mt7004", {"lib": _lib(ports, "correct", FAILS), "memory": "private"}, _settings(["bce_grad"]))
    build_runner(folder, ports["correct"])
    assert run_runner(folder).returncode == 0
    return folder


@pytest.fixture(scope="module")
def exported_nll(ports, tmp_path_factory):
    """The NLL edge cases (large ones among them) through shared memory: many calls, a few MiB each."""
    folder = tmp_path_factory.mktemp("on_target") / "nll"
    export(folder, "mt7004", {"lib": ports["correct"]}, _settings(["nll_loss_grad"], 1))
    build_runner(folder, ports["correct"])
    assert run_runner(folder).returncode == 0
    return folder


@pytest.mark.parametrize("compiler", [["gcc", "-std=c99", "-pedantic"], ["g++", "-x", "c++", "-pedantic"]],
                         ids=["c99", "c++"])
def test_runner_builds_warning_free(compiler, exported):
    if shutil.which(compiler[0]) is None:
        pytest.skip(f"no {compiler[0]}")
    for folder in (exported,):
        res = subprocess.run([*compiler, "-Wall", "-Wextra", "-Werror", "-fsyntax-only", f"-I{folder / 'src'}",
                              str(folder / "src" / "xloss_runner.c")], capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stderr


def _largest_call(folder: Path) -> int:
    import json

    calls = json.loads((folder / "manifest.json").read_text())["calls"]
    return max(sum(b["front"] + b["extent"] + b["back"] for b in c["buffers"]) for c in calls)


@pytest.mark.slow  # 180 MiB of NLL edge cases written and run: about 10 s
def test_runner_memory_is_one_call(exported_nll):
    """Peak resident memory of the runner: a fixed base (the process, libc, the port) plus the
    largest single call's buffers with their guards, whatever the number of calls."""
    shared = exported_nll
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    peak = int(subprocess.run([sys.executable, "-c", code, str(shared / "xloss_runner"), str(shared)],
                              capture_output=True, text=True, check=True).stdout) * 1024
    total = (shared / "cases.bin").stat().st_size
    largest = _largest_call(shared)
    assert total > 4 * largest  # many calls: streaming is what keeps the peak down
    base = 8 << 20  # the process with libc, the port and the shim mapped
    assert peak <= base + largest, (peak, largest, total)


@pytest.mark.slow  # builds the runner with the sanitizers and runs both exports: about 10 s
def test_runner_is_sanitizer_clean(exported, exported_nll, ports):
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    for folder in (exported, exported_nll):
        build_runner(folder, ports["correct"], "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g")
        res = run_runner(folder, env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1"))
        assert res.returncode == 0 and "runtime error" not in res.stderr, res.stderr[-3000:]
        _, results = judge_results(folder)
        assert not any(r.status in runner.FAILING for r in results)


# -- damaged output --------------------------------------------------------------------------------


def _copy(exported, tmp_path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(exported, dst)
    return dst


def test_truncated_results_fail_as_not_run(exported, tmp_path, capsys):
    folder = _copy(exported, tmp_path)
    results = folder / "out" / "results.bin"
    results.write_bytes(results.read_bytes()[: results.stat().st_size // 2])
    assert xloss_main(["check", "--judge", str(folder), "--failures-dir", str(tmp_path / "f")]) == 1
    out = capsys.readouterr()
    assert "not run" in out.out and "partial record" in out.err and "PASSED" not in out.out


def test_empty_results_fail_every_declared_target(exported, tmp_path, capsys):
    folder = _copy(exported, tmp_path)
    (folder / "out" / "results.bin").write_bytes(b"XLRSLT01")
    assert xloss_main(["check", "--judge", str(folder), "--failures-dir", str(tmp_path / "f")]) == 1
    out = capsys.readouterr().out
    assert "FAIL: bce_grad float32" in out and "not run" in out


@pytest.mark.parametrize("damage,match", [
    (lambda b: b"NOTMAGIC" + b[8:], "does not start with the results magic"),
    (lambda b: b[:8] + b"JUNK" + b[12:], "does not start with RSLT"),
    (lambda b: b[:12] + struct.pack("<I", 10**6) + b[16:], "call index 1000000"),
    (lambda b: b[:16] + struct.pack("<I", 7) + b[20:], "run 7 of call 0"),
    (lambda b: b[:32] + struct.pack("<H", 60000) + b[34:], "status message of 60000 bytes"),
    (lambda b: b + b[8:], "a second record of call 0 run 0"),
], ids=["magic", "tag", "index", "run", "message", "duplicate"])
def test_damaged_results_are_one_error_line(damage, match, exported, tmp_path, capsys):
    folder = _copy(exported, tmp_path)
    results = folder / "out" / "results.bin"
    results.write_bytes(damage(results.read_bytes()))
    with pytest.raises(OnTargetFormatError, match=match):
        judge_results(folder)
    assert xloss_main(["check", "--judge", str(folder)]) == 2
    err = capsys.readouterr().err
    assert match.split()[0] in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("what", ["missing results", "missing manifest", "manifest not json", "foreign manifest",
                                  "hostile settings"])
def test_missing_or_foreign_files_are_one_error_line(what, exported, tmp_path, capsys):
    folder = _copy(exported, tmp_path)
    if what == "missing results":
        (folder / "out" / "results.bin").unlink()
    elif what == "missing manifest":
        (folder / "manifest.json").unlink()
    elif what == "manifest not json":
        (folder / "manifest.json").write_text("{not json")
    elif what == "foreign manifest":
        (folder / "manifest.json").write_text('{"format": "xloss-on-target-1", "calls": [{"fname": 3}]}')
    else:
        import json

        m = json.loads((folder / "manifest.json").read_text())
        m["settings"]["max_examples"] = "all of them"
        (folder / "manifest.json").write_text(json.dumps(m))
    assert xloss_main(["check", "--judge", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("xloss check: ") and "Traceback" not in err


# -- one case from a replay file ------------------------------------------------------------------


def test_single_case_export_from_a_replay_file(ports, tmp_path, capsys):
    """The failing case the judge saves, exported alone: it fails on the buggy port's runner and
    passes on the correct port's."""
    folder = tmp_path / "suite"
    export(folder, "mt7004", {"lib": ports["bce_eps_clamp"]}, _settings(["bce_grad"], 20))
    build_runner(folder, ports["bce_eps_clamp"])
    run_runner(folder)
    assert xloss_main(["check", "--judge", str(folder), "--failures-dir", str(tmp_path / "f")]) == 1
    saved = sorted((tmp_path / "f").glob("*float32*"))
    assert len(saved) == 1
    capsys.readouterr()
    for variant, want in (("bce_eps_clamp", 1), ("correct", 0)):
        one = tmp_path / f"one-{variant}"
        assert xloss_main(["check", "--export", str(one), "--replay", str(saved[0]), "--backend", "mt7004",
                           "--lib", ports[variant]]) == 0
        import json

        assert len(json.loads((one / "manifest.json").read_text())["calls"]) < 10  # the one case, not the suite
        build_runner(one, ports[variant])
        assert run_runner(one).returncode == 0
        assert xloss_main(["check", "--judge", str(one)]) == want
        out = capsys.readouterr().out
        assert ("FAIL" in out) == bool(want)


def test_export_again_replaces_the_earlier_one(exported, tmp_path):
    """An export folder may be exported into again: the runner's earlier results go (they would
    not match the new cases), and a judge before the runner ran says so."""
    folder = _copy(exported, tmp_path)
    export(folder, "mt7004", {}, _settings(["bce_grad"], 1))
    assert not (folder / "out" / "results.bin").exists()
    with pytest.raises(OnTargetFormatError, match="run the runner first"):
        judge_results(folder)


def test_export_refuses_other_backends_and_a_busy_folder(tmp_path, capsys):
    assert xloss_main(["check", "--export", str(tmp_path / "a"), "--backend", "cpu"]) == 2
    assert "support the backends" in capsys.readouterr().err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "mine.txt").write_text("keep")
    assert xloss_main(["check", "--export", str(tmp_path / "busy"), "--backend", "mt7004"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "busy" / "mine.txt").read_text() == "keep"
