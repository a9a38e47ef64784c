"""On-target conformance for the FT78NE/MT7004 ports (xloss check --export / --judge, docs/on-target.md).

For each port: export the check's calls, build the exported C runner with the host compiler against
the port (and the private-memory shim it links), run it, judge its results, and compare the verdict
per target with the host check (`xloss check --lib`) on the same port with the same settings. The
default suite runs a few ports on the kernels their bugs live in; the slow sweep runs every port.
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
CRASHES = ("bce_weight_always",)  # the port segfaults: the host check isolates it, the runner dies


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
    opts = dict(options, lib=_lib(ports, variant, private), **({"memory": "private"} if private else {}))
    results = runner.run_suite(xloss.backend(chip, **opts), kernels=kernels, max_examples=max_examples, seed=0)
    return {(r.kernel, r.dtype, str(r.mode), r.group): r for r in results}


def assert_same_verdicts(target, host):
    got = {k: r.status for k, r in target.items()}
    want = {k: r.status for k, r in host.items()}
    assert got == want, "\n".join(f"{k}: on target {got.get(k)}, host {want.get(k)}: {target[k].message}"
                                  for k in sorted(set(got) | set(want), key=str) if got.get(k) != want.get(k))


CASES = [  # (variant, chip, kernels, private, options): a bit of each kind of finding, kept short
    ("correct", "mt7004", ["bce_grad"], False, ()),
    ("nll_row_past_end", "mt7004", ["nll_loss_grad"], False, ()),  # guard bytes
    ("flce_input_in_place", "ft78ne", ["fused_linear_cross_entropy_grad"], False, ()),  # input written
    ("bce_mask_contiguous", "mt7004", ["bce_grad"], False, ()),  # mask-dependent
    ("bce_p_vector_tail", "mt7004", ["bce_grad"], True, ()),  # private memory guards
]


@pytest.mark.parametrize("variant,chip,kernels,private,options", CASES, ids=[c[0] for c in CASES])
def test_on_target_verdict_equals_host(variant, chip, kernels, private, options, ports, tmp_path):
    target = on_target(tmp_path / "x", ports, variant, chip, kernels, private=private, options=dict(options))
    host = on_host(ports, variant, chip, kernels, private=private, options=dict(options))
    assert_same_verdicts(target, host)
    assert (variant == "correct") != any(r.status in runner.FAILING for r in target.values())


def changed_kernels(build_mod, variant) -> list[str] | None:
    """The kernels whose code differs from the correct port's (None: every kernel, for the correct port):
    those its switches change, and those whose entry points it leaves out."""
    if variant == "correct":
        return None
    omitted = {k for source in build_mod.VARIANTS[variant][1] for k in build_mod.SOURCES[source]}
    return sorted(build_mod.touched_kernels(variant) | omitted)


#: the ports CASES already checks on target, in shared memory with no options, on the kernels their code
#: changes, with more examples than the sweep: the sweep leaves them out
IN_CASES = {(c[0], tuple(c[2])) for c in CASES if c[1] == "mt7004" and not c[3] and not c[4]}


@pytest.mark.slow  # every port, the kernels each bug lives in (all for the correct port): about a minute
def test_every_port_on_target(ports, build_mod, tmp_path):
    for variant in build_mod.VARIANTS:
        kernels = changed_kernels(build_mod, variant)
        if variant in CRASHES or (variant, tuple(kernels or ())) in IN_CASES:
            continue
        folder = tmp_path / variant
        assert_same_verdicts(on_target(folder, ports, variant, "mt7004", kernels, max_examples=2),
                             on_host(ports, variant, "mt7004", kernels, max_examples=2))
        shutil.rmtree(folder)  # the NLL edge cases are large: keep the disk use to one export
    for variant, options in (("correct", {}), ("bce_mean_per_chunk", {}),
                             ("flce_accumulate_ignored", {"private_bytes": 8192})):
        kernels = changed_kernels(build_mod, variant)
        folder = tmp_path / f"{variant}-private"
        assert_same_verdicts(on_target(folder, ports, variant, "mt7004", kernels, private=True, options=options,
                                       max_examples=2),
                             on_host(ports, variant, "mt7004", kernels, private=True, options=options, max_examples=2))
        shutil.rmtree(folder)


def test_bce_with_logits_ports_on_target(build_mod, port_harness, tmp_path):
    """BCE with logits' pages (ported in libraries of their own) through the runner: the correct port
    passes and the seeded bug fails, with the host's verdicts; before the runner knew these entry
    points, the export recorded no call and the judge reported a target it never ran."""
    libs = {v: str(p) for v, p in port_harness.build(build_mod.build_bce_with_logits,
                                                      ["sce_correct", "sce_literal_log"]).items()}
    for variant in libs:
        target = on_target(tmp_path / variant, libs, variant, "mt7004", ["bce_with_logits"], max_examples=2)
        assert_same_verdicts(target, on_host(libs, variant, "mt7004", ["bce_with_logits"], max_examples=2))
        assert (variant == "sce_correct") != any(r.status in runner.FAILING for r in target.values())
        assert sum(r.examples for r in target.values() if r.status == runner.PASS) > 0


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
    export(folder, "mt7004", {"lib": _lib(ports, "correct", True), "memory": "private"}, _settings(["bce_grad"]))
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
