"""The ft78ne / mt7004 backends as xloss sees them: options, declared capabilities, the library
override (a port author's library), error reporting, and outputs left untouched on failure."""

from __future__ import annotations

import os

import numpy as np
import pytest

import xloss
from xloss import reference
from xloss.backends import ft78ne_shim
from xloss.backends.ft78ne_shim import DspBackend, abi

HERE = os.path.dirname(__file__)


@pytest.fixture(scope="module")
def port_lib(compile_c, tmp_path_factory):
    out = tmp_path_factory.mktemp("port") / "libport_minimal.so"
    return str(compile_c([os.path.join(HERE, "c", "port_minimal.c")], out, "-shared", "-fPIC"))


def _data(n=300, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.01, 0.99, n).astype(dtype), (rng.random(n) > 0.5).astype(dtype)


# -- construction and options --------------------------------------------------------------------


def test_registered_and_configurable():
    b = xloss.backend("ft78ne", memory="private", core_mask=0x0F)
    assert isinstance(b, DspBackend) and b.name == "ft78ne" and b.cores == [0, 1, 2, 3]
    assert b.availability() == (True, "")
    assert xloss.backend("ft78ne") is xloss.backend("ft78ne")  # the default instance is shared
    assert xloss.backend("mt7004").memory == os.environ.get(abi.MEMORY_ENV_VAR, "shared")
    assert xloss.backend("mt7004").core_mask == 0xFF
    info = b.info()
    assert info["chip"] == "FT78NE" and info["memory"] == "private" and info["core_mask"] == "0x0f"
    assert info["library"] == str(abi.EMULATOR)
    if "FT78NE_EMU_PRIVATE_BYTES" not in os.environ:
        assert info["private memory per core"] == f"{768 * 1024} bytes"
    assert ft78ne_shim.library_path() == str(abi.EMULATOR)
    x, y = _data()
    np.testing.assert_array_equal(xloss.bce_grad(x, y, eps_mode="add", backend=b),
                                  xloss.bce_grad(x, y, eps_mode="add", backend="ft78ne"))


@pytest.mark.parametrize("options, exc, match", [
    (dict(memory="dram"), xloss.XLossValueError, r"memory must be 'shared' or 'private'; got 'dram'"),
    (dict(core_mask=0), xloss.XLossValueError, r"core_mask 0x0 selects no core"),
    (dict(core_mask=0x100), xloss.XLossValueError, r"core_mask 0x100 names cores outside 0..7"),
    (dict(core_mask=-1), xloss.XLossValueError, r"names cores outside 0..7"),
    (dict(core_mask=True), xloss.XLossTypeError, r"core_mask must be an int"),
    (dict(core_mask="0xff"), xloss.XLossTypeError, r"core_mask must be an int"),
    (dict(private_bytes=10), xloss.XLossValueError, r"private_bytes must be >= 64"),
    (dict(cores=3), xloss.XLossTypeError, r"unknown option\(s\) cores; options: memory, core_mask, lib"),
])
def test_bad_options(options, exc, match):
    for name in ("ft78ne", "mt7004"):
        with pytest.raises(exc, match=match):
            xloss.backend(name, **options)


def test_memory_default_from_the_environment(monkeypatch):
    monkeypatch.setenv(abi.MEMORY_ENV_VAR, "private")
    assert DspBackend("ft78ne").memory == "private" and DspBackend("ft78ne", memory="shared").memory == "shared"
    monkeypatch.setenv(abi.MEMORY_ENV_VAR, "sram")
    with pytest.raises(xloss.XLossValueError, match=r"got 'sram' \(from \$XLOSS_FT78NE_MEMORY\)"):
        DspBackend("mt7004")
    monkeypatch.delenv(abi.MEMORY_ENV_VAR)
    assert DspBackend("mt7004").memory == "shared"


@pytest.mark.parametrize("memory", ["shared", "private"])
def test_misaligned_arrays_are_realigned_for_the_abi(memory):
    """A NumPy array may start at any byte; the ABI (and the emulator, which refuses them) needs
    aligned elements: the adapter copies misaligned inputs and writes a misaligned out= through
    aligned scratch. Results are those of aligned arrays, bit for bit."""
    def misaligned(a):
        raw = np.zeros(a.nbytes + 1, np.uint8)
        view = np.frombuffer(raw.data, a.dtype, a.size, 1).reshape(a.shape)
        view[...] = a
        assert not view.flags.aligned
        return view

    b = xloss.backend("mt7004", memory=memory, core_mask=0x15)
    rng = np.random.default_rng(4)
    for dt in (np.float32, np.float16):
        x, y = _data(2051, seed=4, dtype=dt)
        w = rng.uniform(0.5, 1.5, 2051).astype(dt)
        expected = xloss.bce_grad(x, y, weight=w, reduction="sum", eps_mode="add", backend=b)
        out = misaligned(np.full(2051, 7, dt))
        got = xloss.bce_grad(misaligned(x), misaligned(y), weight=misaligned(w), reduction="sum", eps_mode="add",
                             backend=b, out=out)
        assert got is out or np.shares_memory(got, out)
        np.testing.assert_array_equal(out.view(np.uint8), expected.view(np.uint8))
        s = np.log(rng.dirichlet(np.ones(9), 40)).astype(dt)
        t = rng.integers(0, 9, 40)
        np.testing.assert_array_equal(xloss.nll_loss_grad(1.0, misaligned(s), t, backend=b),
                                      xloss.nll_loss_grad(1.0, s, t, backend=b))


# -- capabilities ----------------------------------------------------------------------------------


def test_declared_capabilities():
    ft, mt = xloss.backend("ft78ne"), xloss.backend("mt7004")
    for kernel in ("focal_loss", "bce_grad", "nll_loss_grad", "fused_linear_cross_entropy_grad"):
        assert ft.capabilities()[kernel].dtypes == {"float32"}
        assert mt.capabilities()[kernel].dtypes == {"float16", "float32"}
        assert ft.capabilities()[kernel].max_elements == 2**31 - 1
    caps = ft.capabilities()
    assert caps["focal_loss"].variants["weight"] == {False}
    assert caps["focal_loss"].variants["mode"] == {"forward", "grad", "forward+grad"}
    assert caps["bce_grad"].variants["eps_mode"] == {"add"} and dict(caps["bce_grad"].fixed) == {"eps": 1e-12}
    assert caps["fused_linear_cross_entropy_grad"].variants["label_smoothing"] == {False}
    assert caps["fused_linear_cross_entropy_grad"].variants["mask"] == {"bool", "bitpacked"}
    assert caps["nll_loss_grad"].variants["target_dtype"] == {"int64", "int32", "uint8"}


@pytest.mark.parametrize("call, match", [
    (lambda b: xloss.focal_loss(np.zeros(3, np.float16), np.zeros(3, np.float16), backend=b),
     r"backend 'ft78ne' does not support dtype float16 \(supported: float32\)"),
    (lambda b: xloss.focal_loss(np.zeros(3, np.float32), np.zeros(3, np.float32), weight=np.ones(3, np.float32),
                                backend=b), r"weight=True \(supported: False\)"),
    (lambda b: xloss.bce_grad(np.zeros(3, np.float32), np.zeros(3, np.float32), backend=b),
     r"eps_mode='clamp' \(supported: add\)"),
    (lambda b: xloss.bce_grad(np.zeros(3, np.float32), np.zeros(3, np.float32), eps=1e-7, eps_mode="add",
                              backend=b), r"eps=1e-07 \(this backend fixes eps=1e-12\)"),
    (lambda b: xloss.nll_loss_grad(1.0, np.zeros((2, 3)), np.array([0, 1]), backend=b), r"dtype float64"),
    (lambda b: xloss.fused_linear_cross_entropy_grad(
        np.ones(2, np.float32), np.ones((2, 3), np.float32), np.ones((4, 3), np.float32), np.zeros(2, bool),
        np.zeros(2, np.int64), softmax=np.full((2, 4), 0.25, np.float32), label_smoothing=0.1, backend=b),
     r"label_smoothing=True \(supported: False\)"),
])
def test_undeclared_requests_are_refused(call, match):
    with pytest.raises(xloss.UnsupportedRequestError, match=match):
        call(xloss.backend("ft78ne"))


def test_kernel_methods_check_even_when_called_directly():
    from xloss import validation

    a = validation.focal_args(np.zeros(3, np.float16), np.zeros(3, np.float16), None, alpha=0.25, gamma=2.0,
                              weight=None, reduction="none", mode="forward")
    with pytest.raises(xloss.UnsupportedRequestError):
        xloss.backend("ft78ne").focal_loss(a)


# -- the library override: a port author's library ---------------------------------------------------


def test_port_library_by_argument(port_lib):
    b = xloss.backend("ft78ne", lib=port_lib)
    assert b.availability() == (True, "")
    assert ft78ne_shim.library_path(port_lib) == port_lib
    caps = b.capabilities()
    assert set(caps) == {"bce_grad", "focal_loss"}  # only what it exports
    assert caps["focal_loss"].variants["mode"] == {"forward"}
    assert b.info()["library kind"] == "external (vendor or port) library"
    x, y = _data()
    got = xloss.bce_grad(x, y, 0.5, eps_mode="add", reduction="sum", backend=b)
    np.testing.assert_allclose(got, reference.bce_grad(x, y, 0.5, eps_mode="add", reduction="sum"), rtol=1e-5)
    with pytest.raises(xloss.UnsupportedRequestError, match="kernel nll_loss_grad"):
        xloss.nll_loss_grad(1.0, np.zeros((2, 3), np.float32), np.array([0, 1]), backend=b)
    with pytest.raises(xloss.UnsupportedRequestError, match=r"mode='grad' \(supported: forward\)"):
        xloss.focal_loss_grad(x, y, backend=b)
    # no hp_ symbols: MT7004 over this library is fp32 only
    assert xloss.backend("mt7004", lib=port_lib).capabilities()["bce_grad"].dtypes == {"float32"}
    # no private-memory helpers (a port written from the manual): memory="private" runs it on
    # xloss's own private-memory shim, listed after it, and says so
    private = xloss.backend("ft78ne", lib=port_lib, memory="private")
    assert private.availability() == (True, "")
    assert "xloss's private-memory shim" in private.info()["private memory"]
    got = xloss.bce_grad(x, y, 0.5, eps_mode="add", reduction="sum", backend=private)
    np.testing.assert_allclose(got, reference.bce_grad(x, y, 0.5, eps_mode="add", reduction="sum"), rtol=1e-5)


def test_ours_are_called_only_in_libraries_that_declare_them(compile_c, tmp_path):
    """The same port without xloss_ft78ne_ext_abi(): its fp_sigmoidfocalloss_s could be a vendor's
    function of another layout, so focal loss is not declared, and a call names the marker; the
    vendor-paged BCE is used as before."""
    lib = str(compile_c([os.path.join(HERE, "c", "port_minimal.c")], tmp_path / "libport_nomarker.so", "-shared",
                        "-fPIC", "-DPORT_NO_EXT_MARKER"))
    b = xloss.backend("ft78ne", lib=lib)
    assert set(b.capabilities()) == {"bce_grad"}
    x, y = _data()
    with pytest.raises(xloss.UnsupportedRequestError, match="kernel focal_loss"):
        xloss.focal_loss(x, y, backend=b)
    from xloss.conformance import runner
    r = runner.run_target(b, "focal_loss", "float32", "forward", max_examples=2, seed=0)
    assert r.status == runner.NOT_IMPLEMENTED and "but not xloss_ft78ne_ext_abi" in r.message, r.message
    got = xloss.bce_grad(x, y, 0.5, eps_mode="add", reduction="sum", backend=b)
    np.testing.assert_allclose(got, reference.bce_grad(x, y, 0.5, eps_mode="add", reduction="sum"), rtol=1e-5)


def test_port_library_by_environment(port_lib, monkeypatch):
    monkeypatch.setenv(abi.ENV_VAR, port_lib)
    assert ft78ne_shim.library_path() == port_lib
    b = ft78ne_shim.make_ft78ne()
    assert b.paths == [port_lib] and set(b.capabilities()) == {"bce_grad", "focal_loss"}
    # several libraries: a symbol comes from the first that exports it
    monkeypatch.setenv(abi.ENV_VAR, os.pathsep.join([port_lib, str(abi.EMULATOR)]))
    both = ft78ne_shim.make_ft78ne()
    assert set(both.capabilities()) == {"bce_grad", "focal_loss", "nll_loss_grad", "fused_linear_cross_entropy_grad",
                                        "fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum",
                                        "nll_loss", "binary_cross_entropy", "bce_with_logits",
                                        "softmax_cross_entropy_with_logits", "cross_entropy_loss",
                                        "cross_entropy_loss_grad"}


def test_port_failure_leaves_the_callers_output_untouched(port_lib):
    b = xloss.backend("ft78ne", lib=port_lib)
    x, y = _data(1500)
    out = np.full(1500, 7.0, np.float32)
    with pytest.raises(xloss.KernelError, match="this port handles at most 1000 elements") as info:
        xloss.focal_loss(x, y, out=out, backend=b)
    assert info.value.status == 2 and info.value.status_name == "FT78NE_ERR_INVALID_ARGUMENT"
    assert (out == 7.0).all()
    small = xloss.focal_loss(x[:999], y[:999], reduction="mean", backend=b)
    np.testing.assert_allclose(small, reference.sigmoid_focal_loss(x[:999], y[:999], reduction="mean"), rtol=1e-6)


def test_missing_library_is_unavailable(tmp_path):
    b = xloss.backend("ft78ne", lib=str(tmp_path / "nowhere.so"))
    ok, why = b.availability()
    assert not ok and "does not exist" in why and b.capabilities() == {}
    with pytest.raises(xloss.BackendUnavailableError):
        xloss.bce_grad(*_data(), eps_mode="add", backend=b)


# -- errors from the library, and the untouched-output guarantee --------------------------------------


def test_emulator_errors_become_kernel_errors_and_leave_outputs():
    b = ft78ne_shim.make_ft78ne(core_mask=0x01)  # a private instance (the registry shares its own)
    b.core_mask = 0  # as if it had slipped past the constructor: the emulator itself refuses it
    x, y = _data()
    out = np.full(x.shape, 7.0, np.float32)
    with pytest.raises(xloss.KernelError, match=r"core_mask 0x0 selects no core.*\[FT78NE_ERR_CORE_MASK\]") as info:
        xloss.bce_grad(x, y, eps_mode="add", out=out, backend=b)
    assert info.value.status == 3 and (out == 7.0).all()


def test_staging_budget_beyond_the_private_memory_is_over_capacity():
    b = xloss.backend("ft78ne", memory="private", private_bytes=4 << 20)  # more than the 768 KiB there are
    x, y = _data(300_000)
    out = np.full(x.shape, 7.0, np.float32)
    with pytest.raises(xloss.KernelError, match=r"do not fit in core 0's private memory.*FT78NE_ERR_CAPACITY") as e:
        xloss.bce_grad(x, y, eps_mode="add", out=out, backend=b)
    assert e.value.status == 5 and (out == 7.0).all()


def test_a_row_too_large_for_private_memory_is_refused_before_anything_runs(monkeypatch):
    b = xloss.backend("mt7004", memory="private", private_bytes=4096)
    calls = []
    monkeypatch.setattr(b, "_invoke", lambda *a: calls.append(a))
    rng = np.random.default_rng(0)
    h = 512
    with pytest.raises(xloss.KernelError, match=r"needs \d+ bytes of private memory, more than the 4096") as e:
        xloss.fused_linear_cross_entropy_grad(
            np.ones(3, np.float32), rng.random((3, h)).astype(np.float32), rng.random((5, h)).astype(np.float32),
            np.zeros(3, bool), np.zeros(3, np.int64), logits_max=np.ones(3, np.float32),
            sum_exp_logits=np.ones(3, np.float32), backend=b)
    assert e.value.status_name == "FT78NE_ERR_CAPACITY" and calls == []


@pytest.mark.parametrize("mask", [0x01, 0xFF])
def test_a_failure_mid_way_through_the_tiles_leaves_the_output_untouched(monkeypatch, mask):
    b = xloss.backend("ft78ne", memory="private", core_mask=mask, private_bytes=2048)
    real = b._invoke
    count = [0]

    def failing(fname, *args):
        count[0] += 1
        if count[0] == 5:
            raise xloss.KernelError("injected failure on the fifth tile")
        real(fname, *args)

    monkeypatch.setattr(b, "_invoke", failing)
    x, y = _data(3000)
    for call in (lambda out: xloss.bce_grad(x, y, np.float32(0.5), eps_mode="add", reduction="none", out=out,
                                            backend=b),
                 lambda out: xloss.focal_loss_grad(x, y, out=out, backend=b),
                 lambda out: xloss.focal_loss(x, y, out=out, backend=b)):
        count[0] = 0
        out = np.full(3000, 7.0, np.float32)
        with pytest.raises(xloss.KernelError, match="injected"):
            call(out)
        assert count[0] >= 5 and (out == 7.0).all()
    assert all(int(b.lib.ft78ne_emu_private_in_use(c)) == 0 for c in range(8))  # every buffer freed


def test_many_threads_over_shared_and_overlapping_private_cores():
    """Backends used from many threads at once, private ones competing for the same cores: every
    result is the single-threaded one, bit for bit (fp32 staging reproduces the shared sums)."""
    import threading

    from xloss.conformance.flce import shard_case

    rng = np.random.default_rng(3)
    x, y = _data(5000, seed=3)
    t = rng.integers(0, 40, 300)
    s = -rng.random((300, 40)).astype(np.float32)
    fl = shard_case("float32", "recompute", x=rng.uniform(-1, 1, (20, 8)), w_global=rng.uniform(-1, 1, (30, 8)),
                    target=rng.integers(0, 30, 20), start=5, v=20, grad=rng.uniform(-1, 1, 20)).kwargs
    jobs = {
        "bce": lambda b: xloss.bce_grad(x, y, 0.5, reduction="sum", eps_mode="add", backend=b),
        "focal": lambda b: xloss.focal_loss_grad(x * 8 - 4, y, backend=b),
        "nll": lambda b: xloss.nll_loss_grad(0.5, s, t, reduction="mean", backend=b),
        "flce": lambda b: np.concatenate([g.reshape(-1)
                                          for g in xloss.fused_linear_cross_entropy_grad(**fl, backend=b)]),
    }
    expected = {k: f("ft78ne") for k, f in jobs.items()}
    backends = [xloss.backend("ft78ne", core_mask=0x3C), xloss.backend("mt7004", core_mask=0x01),
                xloss.backend("ft78ne", memory="private", core_mask=0x03, private_bytes=3000),
                xloss.backend("mt7004", memory="private", core_mask=0x06, private_bytes=5000),
                xloss.backend("ft78ne", memory="private", core_mask=0xFF, private_bytes=20000)]
    failures = []

    def worker(i):
        try:
            for rep in range(6):
                b = backends[(i + rep) % len(backends)]
                for k, f in jobs.items():
                    np.testing.assert_array_equal(f(b), expected[k], err_msg=f"{k} on {b!r}")
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, failures[0]
    assert all(int(backends[0].lib.ft78ne_emu_private_in_use(c)) == 0 for c in range(8))


# -- issue 12: checked mode, configurations, determinism, info ------------------------------------------


def _kernel_calls(rng, dtype):
    x = rng.uniform(0.05, 0.95, 70001).astype(dtype)
    y = (rng.random(70001) > 0.5).astype(dtype)
    s = rng.standard_normal((301, 13)).astype(dtype)
    t = rng.integers(0, 13, 301)
    t[::7] = -100
    return [lambda b: xloss.bce_grad(x, y, 0.5, eps_mode="add", reduction="mean", backend=b),
            lambda b: xloss.focal_loss_with_grad(x, y, reduction="mean", backend=b),
            lambda b: xloss.nll_loss_grad(0.75, s, t, reduction="mean", backend=b)]


@pytest.mark.parametrize("memory", ["shared", "private"])
def test_emulator_is_deterministic_under_every_configuration(memory):
    """The in-tree emulator declares determinism: every configuration (core masks 0x01, 0x55, 0x81,
    0xf0, 0xff), checked or not, gives bit-identical results."""
    b = xloss.backend("mt7004", memory=memory, private_bytes=8192 if memory == "private" else None)
    assert b.deterministic and b.info()["deterministic"] == "yes"
    configs = b.configurations()
    assert [label for label, _ in configs] == [f"core_mask={m:#04x}" for m in (0x01, 0x55, 0x81, 0xF0, 0xFF)]
    for dtype in (np.float32, np.float16):
        calls = _kernel_calls(np.random.default_rng(0), dtype)
        # checked private blocks carry guards, which take staging budget: other tiles, so the checked
        # configurations are compared with each other (in shared memory with the plain ones too)
        checked = [("checked " + label, cb) for label, cb in b.checked().configurations()]
        for call in calls:
            ref, ref_checked = _outputs(call(b)), _outputs(call(b.checked()))
            for label, cb in configs + checked:
                want = ref_checked if label.startswith("checked") and memory == "private" else ref
                for r, g in zip(want, _outputs(call(cb))):
                    np.testing.assert_array_equal(g.view(np.uint8), r.view(np.uint8), err_msg=label)


def _outputs(result):
    return [np.atleast_1d(np.asarray(o)) for o in (result if isinstance(result, tuple) else (result,))]


def test_checked_backend_keeps_its_options_and_replays_them():
    b = xloss.backend("mt7004", memory="private", core_mask=0x0F, private_bytes=4096,
                      nll_reduction_codes="none,sum,mean")
    c = b.checked()
    assert c is not b and c.guards and c.checked() is c
    assert c.options == dict(b.options, guards=True)
    again = xloss.backend("mt7004", **{k: v for k, v in c.options.items() if k != "core_mask"}, core_mask=0x0F)
    assert again.guards and again.private_bytes == 4096
    assert xloss.backend("ft78ne", guards="false").guards is False
    with pytest.raises(xloss.XLossValueError, match="guards must be true or false"):
        xloss.backend("ft78ne", guards="maybe")


def test_info_says_whether_refusals_can_be_seen(port_lib, compile_c, tmp_path):
    assert xloss.backend("ft78ne").info()["error reporting"].startswith("yes")
    assert xloss.backend("ft78ne", lib=port_lib).info()["error reporting"].startswith("yes")
    silent = tmp_path / "silent.c"
    silent.write_text("void fp_binarycrossentropygrad_s(int n, int r, float *x, float *y, float *w, float *dl,\n"
                      "    float *dx, int wd, int mask) { for (int i = 0; i < n; i++) dx[i] = 0; }\n")
    lib = str(compile_c([silent], tmp_path / "libsilent.so", "-shared", "-fPIC", "-Wno-unused-parameter"))
    text = xloss.backend("ft78ne", lib=lib).info()["error reporting"]
    assert text.startswith("no") and "cannot be seen" in text
