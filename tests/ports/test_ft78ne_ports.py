"""`xloss check` against FT78NE/MT7004 port libraries with seeded bugs (sources in tests/ports/ft78ne/).

One source tree, built by ``ft78ne/build.py``, gives a correct port, a port without nlllossgrad
and one library per seeded bug (``-DBUG_<NAME>``; see ft78ne/README.md). The suite must pass the
correct port, report the missing operator without running it ("not implemented" is what it should
say; the adapter says "refused": xfail below), and fail each buggy port on the targets (kernel,
dtype, mode) its bug lives in and nowhere else, with an input that ``xloss check --replay``
reproduces against the buggy port and passes against the correct one.

Private memory: the ports link against the private-memory shim (``libxloss_ft78ne_private.so``,
built next to them) and export ``_p`` forms; two seeded bugs live only there (a tile-local BCE mean,
FLCE's ``accumulate`` ignored). Shared memory must pass them, ``xloss check --option
memory=private`` must fail them (FLCE's only when a small ``private_bytes`` makes the adapter tile).

Issue 12: six more seeded ports that need checked mode (a row written past ``logits_grad``, the
caller's FLCE ``input`` changed in place, a private BCE vector store past ``dx``), other core masks
(a split assuming low-bit masks, an unsynchronised cross-core sum) or sizes a tiling sees (a
uint16 per-core row count), each caught through ``Backend.checked()`` / ``configurations()`` /
ladder-sized inputs, and the correct port passing every configuration.

Everything runs in this process (``runner.run_target``, ``xloss check --in-process``), except one
``xloss check`` subprocess whose port crashes (child-process isolation, JSON report, replay).
Deterministic: a fixed hypothesis seed. The _s calls run on core_mask 0x07 (three cores: most
sizes do not split evenly).

build.py links every bug's library from the correct port's object files except the file the bug
is in, so the other kernels run the correct port's code; by default they are not re-run for each
bug (they would double the time). XLOSS_FT78NE_PORTS_FULL=1 runs every declared target for every bug.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import xloss
from xloss.backends.ft78ne_shim import abi
from xloss.cli import main as xloss_main
from xloss.conformance import DESCRIPTORS, casefile, runner, targets
from xloss.conformance.descriptor import Case
from xloss.conformance.report import table, write_failures
from xloss.errors import InputModified, OutOfBoundsWrite

HERE = Path(__file__).resolve().parent

SEED = 5
MAX_EXAMPLES = 40
MASK = 0x07
# A case file holds ~30 bytes per element (floats as hex text): a failing fixed edge case, which is
# not shrunk, can be millions of elements (NLL's 4097 x 1000). Larger inputs are replayed in process.
REPLAY_FILE_MAX = 100_000
FULL = os.environ.get("XLOSS_FT78NE_PORTS_FULL") == "1"

FOCAL, BCE, NLL, FLCE = "focal_loss", "bce_grad", "nll_loss_grad", "fused_linear_cross_entropy_grad"
MAX_SUM, LOSS = "fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum"
NLL_FWD, BCE_FWD = "nll_loss", "binary_cross_entropy"  # issue #30
F16, F32 = "float16", "float32"

#: what the correct port declares on mt7004: fp_ for all seven operators, hp_ for all but FLCE
DECLARED = frozenset({(BCE, F16, "add"), (BCE, F32, "add"), (NLL, F16, None), (NLL, F32, None),
                      (FLCE, F32, "softmax"), (FLCE, F32, "recompute")}
                     | {(FOCAL, d, m) for d in (F16, F32) for m in ("forward", "grad", "forward+grad")}
                     | {(k, d, None) for k in (MAX_SUM, LOSS) for d in (F16, F32)}
                     | {(k, d, None) for k in (NLL_FWD, BCE_FWD) for d in (F16, F32)})
#: the float16 targets with a float16 output (the vocabulary-parallel loss reads half logits, writes floats)
HALF_OUT = frozenset(t for t in DECLARED if t[1] == F16 and t[0] != LOSS)


def _focal(*modes, dtypes=(F16, F32)):
    return {(FOCAL, d, m) for d in dtypes for m in modes}


@dataclass(frozen=True)
class Bug:
    variant: str
    must: frozenset  # mt7004 targets the bug must fail
    may: frozenset  # targets it may fail (a superset of must); every other target run must pass
    why: str


def _bug(variant, must, why, may=None):
    return Bug(variant, frozenset(must), frozenset(must if may is None else may), why)


BUGS = [
    # In half, x(1-x) >= 6e-8 dwarfs eps: the f16 path has the bug but cannot show it.
    _bug("bce_eps_clamp", {(BCE, F32, "add")}, "max(x(1-x), eps) where the manual adds eps"),
    _bug("mean_per_slice", _focal("grad", "forward+grad"),
         "focal gradient's mean divides by the core's slice, not the element count"),
    _bug("nll_mean_by_batch", {(NLL, F16, None), (NLL, F32, None)},
         "NLL mean divides by the batch size where the manual divides by total_weight"),
    _bug("flce_masked_rows", {(FLCE, F32, "softmax"), (FLCE, F32, "recompute")},
         "target correction on tokens whose target is in another shard (index guarded, mask ignored)"),
    _bug("last_slice", _focal("forward", "forward+grad"),
         "focal loss: the last core stops at its equal share, the n % cores tail is lost"),
    # The suite allows half an output ulp for the final rounding, which truncation exceeds: every
    # float16 target catches it (test_half_ulp_allowance_catches_truncation_everywhere).
    _bug("half_truncate", HALF_OUT,
         "float -> half in the converter's round-toward-zero mode, not nearest-even"),
    _bug("focal_gamma_sign", _focal("grad", "forward+grad"),
         "focal gradient's gamma term uses (2y - 1) for d q / d p = (1 - 2y)"),
    # the forward pages (issue #30)
    _bug("nllf_mean_by_batch", {(NLL_FWD, F16, None), (NLL_FWD, F32, None)},
         "nllloss mean divides by batch_size where the page divides by the weight sum"),
    _bug("nllf_total_weight_count", {(NLL_FWD, F16, None), (NLL_FWD, F32, None)},
         "nllloss total_weight counts the rows instead of adding their class weights"),
    _bug("bcef_log_unclamped", {(BCE_FWD, F16, None), (BCE_FWD, F32, None)},
         "binarycrossentropy without the -100 clamp of the logs (inf at probabilities 0 and 1)"),
    _bug("bcef_weight_none_only", {(BCE_FWD, F16, None), (BCE_FWD, F32, None)},
         "binarycrossentropy weighs the stored element losses but sums the unweighted ones"),
]


@pytest.fixture(scope="session")
def ft78ne_build(port_harness):
    return port_harness.load_module(HERE / "ft78ne" / "build.py", "ft78ne_port_build")


@pytest.fixture(scope="session")
def ft78ne_ports(port_harness, ft78ne_build) -> dict[str, str]:
    """Every port variant, built once per session (under a second): {variant: library path}."""
    if shutil.which(os.environ.get("CC", "gcc").split()[0]) is None:
        pytest.skip("no C compiler")
    return {v: str(p) for v, p in port_harness.build(ft78ne_build.build_all).items()}


def port(libs, variant, chip="mt7004", core_mask=MASK):
    return xloss.backend(chip, lib=libs[variant], core_mask=core_mask)


def run_targets(backend, todo, max_examples=MAX_EXAMPLES, configurations=True, shrink=True) -> dict:
    """``shrink=False`` where only whether a target fails matters: the first failure as found (the same verdict)."""
    return {t: runner.run_target(backend, *t, max_examples=max_examples, seed=SEED, configurations=configurations,
                                 shrink=shrink)
            for t in todo}


def failing(results: dict) -> set:
    return {t for t, r in results.items() if r.status in runner.FAILING}


def _size(case_json) -> int:
    """Elements of a case's main input (x, self or input), read off its JSON."""
    kwargs = case_json["kwargs"]
    return next(int(np.prod(kwargs[k]["shape"])) for k in ("x", "self", "input") if k in kwargs)


def replay(path, lib, chip="mt7004", *extra) -> int:
    """``xloss check --replay FILE --backend CHIP --lib LIB`` (its cases in a child process, as a user runs
    it, unless ``extra`` says ``--in-process``); its exit status."""
    return xloss_main(["check", "--replay", str(path), "--backend", chip, "--lib", lib,
                       "--option", f"core_mask={MASK:#x}", *extra])


def fixed_port_replay(path, lib) -> int:
    """:func:`replay` on the correct port, where a saved failure must pass: in this process (a child costs
    ~2 s of CPU; the buggy port's replay, which shows the failure reproduces, runs in one)."""
    return replay(path, lib, "mt7004", "--in-process")


# -- the correct port ----------------------------------------------------------------------------


def test_correct_port_passes_everything_it_implements(ft78ne_ports):
    b = port(ft78ne_ports, "correct")
    assert set(targets(b)) == DECLARED
    results = runner.run_suite(b, max_examples=MAX_EXAMPLES, seed=SEED)
    by = {(r.kernel, r.dtype, r.mode): r for r in results}
    bad = [r for r in results if r.status != "pass" and r.declared]
    assert not bad, table(bad) + "\n" + "\n".join(r.message for r in bad)
    assert all(by[t].examples > MAX_EXAMPLES for t in DECLARED)  # edge cases + hypothesis ran
    # the undeclared targets (bf16, f64, eps clamp, FLCE in half) are turned away, never run
    assert {r.status for r in results if not r.declared} <= {runner.NOT_IMPLEMENTED, runner.REFUSED}


def test_correct_port_on_other_core_masks(ft78ne_ports):
    """The split is the port's own: eight cores (the default), core 0 alone and core 7 alone pass too."""
    todo = [(FOCAL, F32, "forward+grad"), (BCE, F32, "add"), (FLCE, F32, "recompute")]
    for mask in (0xFF, 0x01, 0x80):
        results = run_targets(port(ft78ne_ports, "correct", chip="ft78ne", core_mask=mask), todo, max_examples=20)
        assert not failing(results), table(list(results.values()))


def test_correct_port_honours_the_abi_contract(ft78ne_ports):
    """core_mask, NULL and index refusals through the error pair, outputs untouched; errors cleared."""
    lib = abi.load([ft78ne_ports["correct"]])
    ffi = lib.ffi

    def p(a):
        return ffi.from_buffer({"float32": "float[]", "float16": "half[]", "int32": "int[]"}[a.dtype.name], a)

    def status():
        return int(lib.ft78ne_emu_last_error()), ffi.string(lib.ft78ne_emu_last_error_message()).decode()

    x = np.array([0.25, 0.5, 0.75], np.float32)
    y = np.array([0.0, 1.0, 1.0], np.float32)
    dl = np.ones(1, np.float32)
    for mask in (0, 0x100, -1):
        dx = np.full(3, 7.0, np.float32)
        lib.fp_binarycrossentropygrad_s(3, 2, p(x), p(y), ffi.NULL, p(dl), p(dx), 0, mask)
        code, msg = status()
        assert code == 3 and "fp_binarycrossentropygrad_s: core_mask" in msg, msg
        assert (dx == 7.0).all()
        dx16 = np.full(3, 7.0, np.float16)
        lib.hp_binarycrossentropygrad_s(3, 2, p(x.astype(np.float16)), p(y.astype(np.float16)), ffi.NULL,
                                        p(dl.astype(np.float16)), p(dx16), 0, mask)
        assert status()[0] == 3 and (dx16 == 7.0).all()
    dx = np.full(3, 7.0, np.float32)
    lib.fp_binarycrossentropygrad_s(3, 2, p(x), p(y), ffi.NULL, p(dl), p(dx), 0, 0x80)  # core 7 alone
    assert status() == (0, "")  # the previous error is cleared
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(dx, (x64 - y) / (x64 * (1 - x64) + 1e-12), rtol=1e-6)

    lib.fp_binarycrossentropygrad_s(3, 2, p(x), p(y), ffi.NULL, p(dl), p(dx), 1, 0xFF)  # weight_defined, NULL
    assert status()[0] == 1
    loss = np.full(1, 7.0, np.float32)
    lib.fp_sigmoidfocalloss_s(3, 1, 0.25, -1.0, p(x), p(y), p(loss), 0xFF)
    assert status()[0] == 2 and "gamma" in status()[1] and loss[0] == 7.0
    out = np.full((2, 3), 7.0, np.float32)
    tw = np.ones(1, np.float32)
    lib.fp_nlllossgrad_s(ffi.NULL, p(dl), p(np.array([1, 3], np.int32)), p(np.ones(3, np.float32)), p(tw), p(out),
                         2, 3, 2, 0xFF)
    assert status()[0] == 7 and "labels[1] = 3" in status()[1] and (out == 7.0).all()


# -- seeded bugs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.variant)
def test_seeded_bug_fails_where_it_lives(bug, ft78ne_ports, ft78ne_build, port_harness, port_findings, tmp_path,
                                         capsys):
    b = port(ft78ne_ports, bug.variant)
    kernels = None if FULL else ft78ne_build.touched_kernels(bug.variant)
    todo = [t for t in targets(b) if kernels is None or t[0] in kernels]
    assert bug.may <= set(todo)
    # only the first target that must fail is shrunk (what a port author reads); the others need only
    # show that they fail, unshrunk, at a fraction of the cost
    shrunk = next(t for t in todo if t in bug.must)
    t0 = time.perf_counter()
    measured = []
    for t in todo:
        measured += port_harness.check(b, [t], max_examples=MAX_EXAMPLES, seed=SEED, shrink=t == shrunk)
    sweep_seconds = time.perf_counter() - t0
    results = {m.target: m.result for m in measured}
    failed = failing(results)
    assert bug.must <= failed <= bug.may, f"{bug.why}\n" + table(list(results.values()))
    for t in failed:
        r = results[t]
        assert r.status == runner.FAIL and r.declared and "outside tolerance" in r.message and r.case, r.message

    # each failing input replays: wrong on the buggy port, right on the correct one (the first on the buggy port in
    # a child process, as a user runs it; the others in this process: a child costs ~2 s of CPU and shows nothing
    # the first does not, the port's failure being the same in either)
    small = [results[t] for t in failed if _size(results[t].case) <= REPLAY_FILE_MAX]
    saved = write_failures(small, tmp_path / "failures", "mt7004", ft78ne_ports[bug.variant])
    assert len(saved) == len(small)
    for i, (t, path) in enumerate(sorted(saved.items(), key=str)):
        assert replay(path, ft78ne_ports[bug.variant], "mt7004", *(("--in-process",) if i else ())) == 1, \
            f"{t}: the saved input does not reproduce the failure"
        assert fixed_port_replay(path, ft78ne_ports["correct"]) == 0, f"{t}: the correct port fails the saved input"
    capsys.readouterr()  # the replays' case listings
    for t in failed - set(saved):  # what --replay does, without the file
        case = casefile.case_from_json(results[t].case)
        assert not all(c.ok for c in DESCRIPTORS[t[0]].check(case, b)), f"{t}: the input does not reproduce"
        assert all(c.ok for c in DESCRIPTORS[t[0]].check(case, port(ft78ne_ports, "correct"))), t

    first = next(m for m in measured if m.target in failed)  # in the harness's target order
    port_findings.append(dict(vendor="mt7004", port=bug.variant, target=first.target,
                              first_failure=first.first_failure, examples=first.result.examples,
                              seconds=first.seconds, sweep_seconds=sweep_seconds))


@pytest.mark.parametrize("variant", ["mean_per_slice", "last_slice"])
def test_split_bugs_need_a_split(variant, ft78ne_ports):
    """On one core nothing is split, and the same libraries pass what they fail on three cores (the
    other configurations, which split, are left out here: they are where these bugs show)."""
    todo = [t for t in next(b.must for b in BUGS if b.variant == variant) if t[1] == F32]
    results = run_targets(port(ft78ne_ports, variant, core_mask=0x01), todo, configurations=False)
    assert not failing(results), table(list(results.values()))


@pytest.mark.slow  # about 7 s
def test_half_ulp_allowance_catches_truncation_everywhere(ft78ne_ports, port_harness):
    """Float32 math and one round-to-nearest-even stay within half an output ulp plus the compute
    term (the correct port meets it: the first test); truncation does not: every float16 target
    catches the bug, early (the loss of the vocabulary-parallel forward has no float16 output)."""
    b = port(ft78ne_ports, "half_truncate")
    todo = [t for t in targets(b) if t in HALF_OUT]
    # unshrunk: the first failure as found, and the example it was found at, are what this test reads
    measured = port_harness.check(b, todo, max_examples=MAX_EXAMPLES, seed=SEED, shrink=False)
    assert all(m.result.status == runner.FAIL for m in measured), table([m.result for m in measured])
    assert all(m.first_failure <= 20 for m in measured), [(m.target, m.first_failure) for m in measured]


# -- nlllossgrad's reduction codes: the manual reads both ways ----------------------------------------


@pytest.mark.slow  # about 6 s
def test_nll_reduction_codes_option_selects_the_reading(ft78ne_ports, tmp_path, capsys):
    """A port built from the page's parameter list (0 sum, 1 mean, 2 none) fails the default
    reading (0 none, 1 sum, 2 mean) and passes with nll_reduction_codes=sum,mean,none, given as
    the command line gives it (a string); the correct port fails with the option."""
    todo = [(NLL, F32, None), (NLL, F16, None)]
    other = port(ft78ne_ports, "nll_codes_sum_mean_none")
    # (codes do not depend on the cores: the mask configurations are left out here)
    assert failing(run_targets(other, todo, max_examples=10, configurations=False, shrink=False)) == set(todo)
    assert not failing(run_targets(xloss.backend("mt7004", lib=ft78ne_ports["nll_codes_sum_mean_none"],
                                                 core_mask=MASK, nll_reduction_codes="sum,mean,none"), todo,
                                   configurations=False))
    assert failing(run_targets(xloss.backend("mt7004", lib=ft78ne_ports["correct"], core_mask=MASK,
                                             nll_reduction_codes="sum,mean,none"), todo, max_examples=10,
                               configurations=False, shrink=False))
    status = xloss_main(["check", "--backend", "mt7004", "--lib", ft78ne_ports["nll_codes_sum_mean_none"],
                         "--option", "nll_reduction_codes=sum,mean,none", "--kernels", "nll", "--max-examples", "10",
                         "--no-large",
                         "--seed", str(SEED), "--in-process", "--json", str(tmp_path / "r.json")])
    capsys.readouterr()
    assert status == 0
    assert json.loads((tmp_path / "r.json").read_text())["settings"]["options"]["nll_reduction_codes"] == \
        "sum,mean,none"
    with pytest.raises(xloss.XLossValueError, match="nll_reduction_codes must name none, sum and mean"):
        xloss.backend("mt7004", nll_reduction_codes="sum,mean")


# -- an operator left out --------------------------------------------------------------------------


def _omitted(libs):
    b = port(libs, "omit_nll", chip="ft78ne")
    return b, runner.run_suite(b, kernels=[NLL, BCE], max_examples=10, seed=SEED)


def test_omitted_operator_is_reported_not_run(ft78ne_ports):
    b, results = _omitted(ft78ne_ports)
    assert NLL not in b.capabilities() and {FOCAL, BCE, FLCE} <= set(b.capabilities())
    by = {(r.kernel, r.dtype, r.mode): r for r in results}
    nll = by[(NLL, F32, None)]
    assert not nll.declared and nll.status == runner.NOT_IMPLEMENTED and nll.case is None
    assert "does not export fp_nlllossgrad_s" in nll.message
    assert by[(BCE, F32, "add")].status == runner.PASS
    assert not failing(by)


# -- the command line, in a subprocess: a crashing port --------------------------------------------


def test_cli_isolates_a_crashing_port(ft78ne_ports, xloss_cli, tmp_path):
    """bce_weight_always reads weight when weight_defined = 0 (NULL): a SIGSEGV, which the isolated
    check reports as a crash with the input, and carries on with the other targets."""
    crashing = ft78ne_ports["bce_weight_always"]
    out = xloss_cli("check", "--backend", "ft78ne", "--lib", crashing, "--option", f"core_mask={MASK:#x}",
                    "--kernels", "bce", "flce", "--max-examples", 30, "--seed", SEED, "--json", tmp_path / "r.json",
                    "--failures-dir", tmp_path / "failures", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["backend"] == "ft78ne" and not report["passed"]
    assert report["settings"]["options"] == {"core_mask": MASK, "lib": crashing} and report["settings"]["isolated"]
    by = {(r["kernel"], r["dtype"], r["mode"]): r for r in report["results"]}
    crash = by[(BCE, F32, "add")]
    assert crash["status"] == "crash" and "SIGSEGV" in crash["message"], crash
    assert "weight" not in casefile.case_from_json(crash["case"]).kwargs  # the unweighted call crashed
    assert by[(FLCE, F32, "softmax")]["status"] == by[(FLCE, F32, "recompute")]["status"] == "pass"
    assert [t for t, r in by.items() if r["status"] in runner.FAILING] == [(BCE, F32, "add")]
    assert "CRASH: bce_grad float32" in out.stdout and "input that crashed" in out.stdout

    saved = crash["replay_file"]
    # the backend comes from the case file; its library is only shown, so it is named again
    again = xloss_cli("check", "--replay", saved, "--lib", crashing, cwd=tmp_path)
    # replayed in a child too: a CRASH line naming the case and the call, never the checker's own death
    assert again.returncode == 1, again.stdout + again.stderr
    assert "  CRASH the backend crashed the process (SIGSEGV)" in again.stdout, again.stdout
    assert "fp_binarycrossentropygrad_s(" in again.stdout.split("CRASH", 1)[1] and "weight=NULL" in again.stdout
    fixed = xloss_cli("check", "--replay", saved, "--backend", "ft78ne", "--lib", ft78ne_ports["correct"],
                      cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "dx: ok" in fixed.stdout


# -- private memory: the ports' _p forms over the private-memory shim --------------------------------


def private_lib(libs, variant) -> str:
    """The port followed by the shim it links against (the documented ``--lib`` form)."""
    return os.pathsep.join([libs[variant], str(Path(libs[variant]).with_name(SHIM))])


SHIM = "libxloss_ft78ne_private.so"


@dataclass(frozen=True)
class PrivateBug:
    variant: str
    must: frozenset  # mt7004 targets `xloss check --option memory=private` must fail (and nothing else)
    options: tuple  # further --option KEY=VALUE the check needs
    why: str


PRIVATE_BUGS = [
    PrivateBug("bce_mean_per_chunk", frozenset({(BCE, F16, "add"), (BCE, F32, "add")}), (),
               "_p streams through L1 in 256-element chunks and takes the mean per chunk"),
    # the conformance inputs fit 768 KiB whole: only a small staging budget makes the adapter tile and
    # pass accumulate = 1, which is where the bug lives
    PrivateBug("flce_accumulate_ignored", frozenset({(FLCE, F32, "softmax"), (FLCE, F32, "recompute")}),
               ("private_bytes=8192",), "_p overwrites input_grad/weight_grad where accumulate asks it to add"),
]


@pytest.mark.slow  # every declared target twice through the private arenas: about 15 s
def test_correct_port_passes_in_private_memory(ft78ne_ports):
    """Every declared target through the shim's arenas: whole (default budget) and tiled over three
    cores (a small budget: uneven tiles, global means, FLCE accumulation), float16 included: tiled
    float16 means (forward, and gradients through the fp_ form) are rounded once (backend README,
    "memory model")."""
    lib = private_lib(ft78ne_ports, "correct")
    whole = xloss.backend("mt7004", lib=lib, memory="private")
    assert set(targets(whole)) == DECLARED and whole.availability() == (True, "")
    results = run_targets(whole, sorted(DECLARED, key=str), max_examples=8)
    tiled = xloss.backend("mt7004", lib=lib, memory="private", core_mask=0x0B, private_bytes=4096)
    exact = sorted(DECLARED, key=str)
    # (the core-mask and repeat configurations ran on the whole arenas above; tiled adds the tiling)
    results.update({("tiled",) + t: r for t, r in run_targets(tiled, exact, max_examples=8,
                                                              configurations=False).items()})
    assert not failing(results), table(list(results.values())) + "\n".join(r.message for r in results.values())
    assert all(int(whole.lib.ft78ne_emu_private_in_use(c)) == 0 for c in range(8))  # every tile buffer freed


@pytest.mark.slow  # private-memory builds and sweeps: about 8 s
@pytest.mark.parametrize("bug", PRIVATE_BUGS, ids=lambda b: b.variant)
def test_private_only_bug_is_caught_in_private_memory(bug, ft78ne_ports, port_findings, tmp_path, capsys):
    kernel = next(iter(bug.must))[0]
    # shared memory runs the _s code: the same library passes there
    shared = run_targets(port(ft78ne_ports, bug.variant), sorted(bug.must, key=str))
    assert not failing(shared), table(list(shared.values()))

    t0 = time.perf_counter()
    opts = [a for o in ("memory=private", *bug.options) for a in ("--option", o)]
    lib = private_lib(ft78ne_ports, bug.variant)
    status = xloss_main(["check", "--backend", "mt7004", "--lib", lib, *opts, "--kernels", kernel, "--max-examples",
                         str(MAX_EXAMPLES), "--seed", str(SEED), "--in-process", "--json", str(tmp_path / "r.json"),
                         "--failures-dir", str(tmp_path / "failures")])
    seconds = time.perf_counter() - t0
    capsys.readouterr()
    report = json.loads((tmp_path / "r.json").read_text())
    by = {(r["kernel"], r["dtype"], r["mode"]): r for r in report["results"]}
    failed = {t for t, r in by.items() if r["status"] in runner.FAILING}
    assert status == 1 and failed == set(bug.must), (bug.why, {t: by[t]["status"] for t in by})
    assert report["settings"]["options"]["memory"] == "private"
    for t in failed:  # the saved input (with the private-memory options) replays: wrong here, right on the fix
        path = by[t]["replay_file"]
        assert replay(path, lib) == 1, t
        assert fixed_port_replay(path, private_lib(ft78ne_ports, "correct")) == 0, t
    capsys.readouterr()
    first = min((by[t] for t in failed), key=lambda r: r["found_at"])
    port_findings.append(dict(vendor="mt7004 private", port=bug.variant,
                              target=(first["kernel"], first["dtype"], first["mode"]),
                              first_failure=first["found_at"], examples=first["examples"], seconds=first["seconds"],
                              sweep_seconds=seconds))


def test_correct_port_private_calls_check_their_buffers(ft78ne_ports):
    """The port's _p functions refuse, through its error pair, any buffer outside the calling core's
    private memory (the shim's ft78ne_shim_private_check), and write nothing then."""
    lib = abi.load(private_lib(ft78ne_ports, "correct").split(os.pathsep))
    ffi = lib.ffi

    def status():
        return int(lib.ft78ne_emu_last_error()), ffi.string(lib.ft78ne_emu_last_error_message()).decode()

    n = 33
    lib.ft78ne_emu_set_core(2)
    raws = {k: lib.ft78ne_emu_private_alloc(2, n * 4) for k in ("x", "y", "dl", "dx")}
    other = lib.ft78ne_emu_private_alloc(5, n * 4)  # core 5's memory
    try:
        view = {k: np.frombuffer(ffi.buffer(p, n * 4), np.float32) for k, p in raws.items()}
        view["x"][:] = np.linspace(0.05, 0.95, n)
        view["y"][:] = (np.arange(n) % 2).astype(np.float32)
        view["dl"][:] = 1.0
        view["dx"][:] = 7.0
        f = {k: ffi.cast("float *", p) for k, p in raws.items()}
        ddr = np.full(n, 7.0, np.float32)
        base = ffi.cast("char *", lib.ft78ne_emu_private_base(2))
        straddling = ffi.cast("float *", base + int(lib.ft78ne_emu_private_capacity()) - 64)
        for name, bad, code in (("dx", ffi.from_buffer("float[]", ddr), 4), ("input_x", ffi.cast("float *", other), 4),
                                ("dx", straddling, 4), ("input_y", ffi.NULL, 1)):
            args = dict(f, **{{"input_x": "x", "input_y": "y"}.get(name, name): bad})
            lib.fp_binarycrossentropygrad_p(n, 0, args["x"], args["y"], ffi.NULL, args["dl"], args["dx"], 0)
            got = status()
            assert got[0] == code and "fp_binarycrossentropygrad_p" in got[1], (name, got)
            assert (view["dx"] == 7.0).all() and (ddr == 7.0).all()
        lib.fp_binarycrossentropygrad_p(n, 0, f["x"], f["y"], ffi.NULL, f["dl"], f["dx"], 0)
        assert status() == (0, "")
        x64 = view["x"].astype(np.float64)
        np.testing.assert_allclose(view["dx"], (x64 - view["y"]) / (x64 * (1 - x64) + 1e-12), rtol=1e-6)
        lib.ft78ne_emu_set_core(5)  # the same buffers are not core 5's
        lib.fp_binarycrossentropygrad_p(n, 0, f["x"], f["y"], ffi.NULL, f["dl"], f["dx"], 0)
        assert status()[0] == 4
    finally:
        for p in raws.values():
            lib.ft78ne_emu_private_free(2, p)
        lib.ft78ne_emu_private_free(5, other)
        lib.ft78ne_emu_set_core(0)


# -- issue 12: checked mode, core masks, sizes a tiling sees ------------------------------------------
#
# `xloss check` runs every case through Backend.checked(), the edge cases under configurations(),
# and the large ladder (runner.run_large): the seeded ports below are caught there, on the kernel
# their bug lives in. The correct port passes every configuration: checked, under the five masks
# (test_correct_port_passes_everything_it_implements) and in private memory whole and with a
# 4096-byte staging budget (test_correct_port_passes_in_private_memory), both through the runner.


def _lib(libs, variant, private=False):
    return private_lib(libs, variant) if private else libs[variant]


VIOLATIONS = [  # variant, backend options, target, the error class and ABI argument the message names
    ("nll_row_past_end", {}, (NLL, F32, None), "out-of-bounds write", "logits_grad"),
    ("nll_row_past_end", {"memory": "private", "private_bytes": 4096}, (NLL, F16, None), "out-of-bounds write",
     "logits_grad"),
    ("flce_input_in_place", {}, (FLCE, F32, "recompute"), "wrote into input", "input"),
    ("bce_p_vector_tail", {"memory": "private", "private_bytes": 1024}, (BCE, F32, "add"), "out-of-bounds write",
     "dx"),
]


@pytest.mark.slow  # checked-mode builds of four ports: about 19 s
@pytest.mark.parametrize("variant,options,target,kind,buffer", VIOLATIONS,
                         ids=lambda v: v if isinstance(v, str) else None)
def test_checked_mode_names_the_buffer_a_port_violates(ft78ne_ports, variant, options, target, kind, buffer,
                                                       port_findings):
    """A write past an output or into an input fails the target, naming the ABI argument; the
    correct port passes the same target in the same configuration."""
    private = options.get("memory") == "private"
    bad = xloss.backend("mt7004", lib=_lib(ft78ne_ports, variant, private), core_mask=MASK, **options)
    assert bad.checked().options["guards"] is True and not bad.guards
    t0 = time.perf_counter()
    r = runner.run_target(bad, *target, max_examples=10, seed=SEED)
    seconds = time.perf_counter() - t0
    assert r.status == runner.FAIL and f"`{buffer}`" in r.message, r.message
    good = xloss.backend("mt7004", lib=_lib(ft78ne_ports, "correct", private), core_mask=MASK, **options)
    ok = runner.run_target(good, *target, max_examples=10, seed=SEED)
    assert ok.status == runner.PASS, ok.message
    port_findings.append(dict(vendor="mt7004 checked" + (" private" if private else ""), port=variant,
                              target=target, first_failure=r.found_at, examples=r.examples, seconds=r.seconds,
                              sweep_seconds=seconds))


def test_checked_violation_leaves_the_callers_output_untouched(ft78ne_ports):
    rng = np.random.default_rng(1)
    s, t = rng.standard_normal((37, 5)).astype(np.float32), rng.integers(0, 5, 37)
    out = np.full((37, 5), 7.0, np.float32)
    b = xloss.backend("mt7004", lib=ft78ne_ports["nll_row_past_end"], core_mask=MASK).checked()
    with pytest.raises(OutOfBoundsWrite) as info:
        xloss.nll_loss_grad(1.0, s, t, reduction="sum", backend=b, out=out)
    assert (info.value.buffer, info.value.offset, info.value.nbytes) == ("logits_grad", 37 * 5 * 4, 5 * 4)
    assert "fp_nlllossgrad_s" in str(info.value) and (out == 7.0).all()
    x = rng.standard_normal((6, 4)).astype(np.float32)
    w = rng.standard_normal((9, 4)).astype(np.float32)
    before = x.copy()
    b = xloss.backend("mt7004", lib=ft78ne_ports["flce_input_in_place"], core_mask=MASK).checked()
    with pytest.raises(InputModified) as info:
        xloss.fused_linear_cross_entropy_grad(rng.uniform(0.5, 1, 6).astype(np.float32), x, w, np.zeros(6, bool),
                                              rng.integers(0, 9, 6).astype(np.int32), softmax=None,
                                              logits_max=np.zeros(6, np.float32),
                                              sum_exp_logits=np.full(6, 9.0, np.float32), backend=b)
    assert info.value.buffer == "input" and info.value.nbytes > 0 and (x == before).all()


@pytest.mark.parametrize("variant,target,status", [
    ("bce_mask_contiguous", (BCE, F32, "add"), runner.MASK_DEPENDENT),
    ("focal_sum_race", (FOCAL, F32, "forward"), runner.FAIL)])
def test_core_mask_bugs_are_caught(ft78ne_ports, variant, target, status, port_findings):
    """Main configuration 0x07 (contiguous, three cores). A split that assumes the mask is low bits
    passes it and fails the configurations 0x55, 0x81, 0xf0 (mask-dependent); a cross-core sum
    without a barrier fails on the main configuration already (and passes on one core)."""
    b = port(ft78ne_ports, variant)
    assert [label for label, _ in b.configurations()] == ["core_mask=0x01", "core_mask=0x55", "core_mask=0x81",
                                                          "core_mask=0xf0", "core_mask=0xff"]
    t0 = time.perf_counter()
    r = runner.run_target(b, *target, max_examples=10, seed=SEED)
    seconds = time.perf_counter() - t0
    assert r.status == status, (r.status, r.message)
    if status == runner.MASK_DEPENDENT:
        assert "core_mask=0x55" in r.message or "core_mask=0x81" in r.message or "core_mask=0xf0" in r.message
    one = runner.run_target(port(ft78ne_ports, variant, core_mask=0x01), *target, max_examples=5, seed=SEED,
                            configurations=False)
    assert one.status == runner.PASS, one.message
    port_findings.append(dict(vendor="mt7004 masks", port=variant, target=target, first_failure=r.found_at,
                              examples=r.examples, seconds=r.seconds, sweep_seconds=seconds))


def test_sixteen_bit_fill_count_is_caught_by_the_large_ladder(ft78ne_ports, port_findings):
    """NLL's ladder (C = 32003 classes) puts more than 65535 elements on each core: a zero-fill
    whose element count is 16 bits leaves most of the row unwritten. The correct port passes it."""
    t0 = time.perf_counter()
    bad = runner.run_large(port(ft78ne_ports, "nll_fill_u16"), NLL, F32, None, seed=SEED, configurations=False)
    seconds = time.perf_counter() - t0
    # the unwritten cells hold whatever the buffer held: wrong, and different from run to run
    assert bad is not None and bad.status in runner.FAILING and bad.group == runner.LARGE, bad and bad.message
    assert "C=32003" in bad.message
    good = runner.run_large(port(ft78ne_ports, "correct"), NLL, F32, None, seed=SEED, configurations=False)
    assert good.status == runner.PASS, good.message
    port_findings.append(dict(vendor="mt7004 large", port="nll_fill_u16", target=(NLL, F32, None),
                              first_failure=bad.found_at, examples=bad.examples, seconds=bad.seconds,
                              sweep_seconds=seconds))


def _big_case(kernel, dtype, mode, n, seed=3, **kw):
    rng = np.random.default_rng(seed)
    kwargs = dict(x=rng.uniform(-4, 4, n).astype(dtype), y=(rng.random(n) > 0.5).astype(dtype), **kw)
    return Case(kernel, mode, dtype, kwargs, label=f"{n} elements")


def test_fp16_focal_mean_in_tiny_private_memory_is_not_a_false_alarm(ft78ne_ports):
    """Issue 12's false alarm: a correct MT7004 port, memory="private", private_bytes=8192, fp16 focal
    mean over 4097 elements. Tiles are summed in float32 and combined in float64 now: one rounding."""
    case = _big_case(FOCAL, F16, "forward", 4097, alpha=0.25, gamma=2.0, reduction="mean")
    for lib in (private_lib(ft78ne_ports, "correct"), None):  # the port, and the emulator
        b = xloss.backend("mt7004", lib=lib, memory="private", private_bytes=8192, core_mask=MASK)
        for backend in (b, b.checked()):
            assert all(c.ok for c in DESCRIPTORS[FOCAL].check(case, backend))
