"""The ascend adapter: registration, declared capabilities, vendor-library override, error
translation, resource release on every path, thread safety, and numerics the vendor contract
fixes (G rounded to the input dtype, NLL's total weight)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

import ml_dtypes
import numpy as np
import pytest

import xloss
from xloss import reference as ref
from xloss.backends import ascend_aclnn
from xloss.backends.ascend_aclnn import _cdef as C
from xloss.errors import InputModified, OutOfBoundsWrite
from xloss.kernel_args import FLCEArgs, NLLArgs

BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def vendor_like(tmp_path_factory, helpers, emu):
    """The emulator built as a "vendor" library would look: no focal operators (they are xloss's
    own), none of the emulator-only helpers, no aclGetRecentErrMsg. Self-contained (its own runtime
    copy): loaded after the emulator (``emu``), so that in this process's global symbol scope
    (xloss.clib loads with RTLD_GLOBAL) libxloss_aclrt.so comes first and libraries linked against
    it keep binding to it."""
    d = tmp_path_factory.mktemp("vendor")
    script = d / "hide.map"
    script.write_text("{ local: aclnnXlossSigmoidFocalLoss*; aclnnSigmoidFocalLoss*; xlossEmu*; "
                      "aclGetRecentErrMsg; };\n")
    out = d / "libvendor_like.so"
    cmd = helpers.build.combined_command(out)[1:] + [f"-Wl,--version-script={script}"]
    helpers.compile_c(cmd)
    return str(out)


def test_registered_and_shows_its_library(emu):
    infos = {i.name: i for i in xloss.list_backends()}
    assert infos["ascend"].available, infos["ascend"].reason
    assert infos["ascend"].info["library"] == ascend_aclnn.library_path()
    assert emu.info()["library"] == ascend_aclnn.emulator_library_path()
    assert emu.info()["implementation"].startswith("xloss aclnn host emulator")
    # every operator comes from the operator library itself (dladdr), none from elsewhere
    assert emu.info()["operators"] == ("aclnnXlossSigmoidFocalLoss, aclnnXlossSigmoidFocalLossBackward, "
                                       "aclnnSigmoidFocalLoss, aclnnSigmoidFocalLossGrad, "
                                       "aclnnBinaryCrossEntropyBackward, aclnnNLLLossBackward, "
                                       "aclnnFusedLinearCrossEntropyLossGrad, aclnnFusedLinearOnlineMaxSum, "
                                       "aclnnFusedCrossEntropyLossWithMaxSum, "
                                       "aclnnNLLLoss, aclnnNLLLoss2d, aclnnBinaryCrossEntropy, "
                                       "aclnnCrossEntropyLoss, aclnnCrossEntropyLossGrad, "
                                       "aclnnBinaryCrossEntropyWithLogits, "
                                       "aclnnBinaryCrossEntropyWithLogitsBackward, "
                                       "aclnnSoftmaxCrossEntropyWithLogits, aclnnNLLLoss2dBackward from "
                                       f"{ascend_aclnn.emulator_library_path()}")
    # the runtime library alone: a working runtime with no operator at all
    bare = ascend_aclnn.make_backend(lib=ascend_aclnn.emulator_runtime_path())
    assert bare.availability() == (True, "") and bare.capabilities() == {} and "operators" not in bare.info()
    assert os.path.isfile(os.path.join(ascend_aclnn.include_dir(), "aclnnop", "aclnn_nll_loss_backward.h"))
    assert set(emu.capabilities()) == {"focal_loss", "bce_grad", "nll_loss_grad", "fused_linear_cross_entropy_grad",
                                       "fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum",
                                       "nll_loss", "binary_cross_entropy", "bce_with_logits",
                                       "cross_entropy_loss", "cross_entropy_loss_grad",
                                       "softmax_cross_entropy_with_logits"}


def test_only_vendor_supported_requests_are_declared(emu):
    x16 = np.ones((4, 3), np.float16)
    w16 = np.ones((5, 3), np.float16)
    kw = dict(target_mask=np.zeros(4, bool), masked_target=np.zeros(4, np.int64), softmax=np.full((4, 5), 0.2))
    with pytest.raises(xloss.UnsupportedRequestError, match=r"dtype float32 .*no float32 path"):
        xloss.fused_linear_cross_entropy_grad(np.ones(4), x16.astype(np.float32), w16.astype(np.float32), **kw,
                                              backend=emu)
    with pytest.raises(xloss.UnsupportedRequestError, match=r"label_smoothing=True"):
        xloss.fused_linear_cross_entropy_grad(np.ones(4), x16, w16, **kw, label_smoothing=0.1, backend=emu)
    p = np.array([0.2, 0.7], np.float32)
    with pytest.raises(xloss.UnsupportedRequestError, match=r"eps=1e-07 \(this backend fixes eps=1e-12\)"):
        xloss.bce_grad(p, p, eps=1e-7, backend=emu)
    with pytest.raises(xloss.UnsupportedRequestError, match=r"eps_mode='add'"):
        xloss.bce_grad(p, p, eps_mode="add", backend=emu)
    with pytest.raises(xloss.UnsupportedRequestError, match=r"dtype float64"):
        xloss.focal_loss(p.astype(np.float64), p.astype(np.float64), backend=emu)


def test_vendor_override_by_environment_and_argument(emu, tmp_path, monkeypatch):
    vendor = tmp_path / "libascend_vendor.so"
    shutil.copy(ascend_aclnn.emulator_library_path(), vendor)
    shutil.copy(ascend_aclnn.emulator_runtime_path(), tmp_path)  # found through RUNPATH $ORIGIN
    monkeypatch.setenv(ascend_aclnn.ENV_VAR, str(vendor))
    assert ascend_aclnn.library_path() == str(vendor)
    b = ascend_aclnn.make_backend()
    assert b.paths == [str(vendor)] and b.info()["library"] == str(vendor)
    x = np.linspace(-4, 4, 9).astype(np.float32)
    y = (x > 0).astype(np.float32)
    np.testing.assert_array_equal(xloss.focal_loss(x, y, backend=b), xloss.focal_loss(x, y, backend=emu))
    # several libraries, separated by os.pathsep: a symbol comes from the first that has it
    libm = subprocess.run(["gcc", "-print-file-name=libm.so.6"], capture_output=True, text=True).stdout.strip()
    monkeypatch.setenv(ascend_aclnn.ENV_VAR, os.pathsep.join([str(vendor), libm]))
    b2 = ascend_aclnn.make_backend()
    assert b2.paths == [str(vendor), libm] and b2.availability() == (True, "")
    np.testing.assert_array_equal(xloss.focal_loss(x, y, backend=b2), xloss.focal_loss(x, y, backend=emu))
    monkeypatch.delenv(ascend_aclnn.ENV_VAR)
    b3 = ascend_aclnn.make_backend(lib=str(vendor))
    assert b3.paths == [str(vendor)]
    assert ascend_aclnn.library_path() == ascend_aclnn.emulator_library_path()


def test_a_library_without_some_symbols(vendor_like):
    b = ascend_aclnn.make_backend(lib=vendor_like)
    assert b.availability() == (True, "")
    assert set(b.capabilities()) == {"bce_grad", "nll_loss_grad", "fused_linear_cross_entropy_grad",
                                     "fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum",
                                     "nll_loss", "binary_cross_entropy", "bce_with_logits",
                                     "cross_entropy_loss", "cross_entropy_loss_grad",
                                     "softmax_cross_entropy_with_logits"}
    assert b.info()["implementation"] == "vendor library"
    assert b.info()["error reporting"].startswith("no") and emu_info_error_reporting().startswith("yes")
    assert b.rt.live() is None  # no leak counter: tolerated
    x = np.linspace(-4, 4, 9).astype(np.float32)
    with pytest.raises(xloss.UnsupportedRequestError, match=r"kernel focal_loss"):
        xloss.focal_loss(x, np.zeros_like(x), backend=b)
    s = -np.random.default_rng(0).random((5, 4)).astype(np.float32)
    t = np.array([0, 3, -100, 2, 1])
    np.testing.assert_allclose(xloss.nll_loss_grad(1.0, s, t, backend=b), ref.nll_loss_grad(1.0, s, t), rtol=1e-6)
    # errors still carry their status, without a message to add
    with b.session() as sess:
        with pytest.raises(xloss.KernelError) as info:
            sess.run("aclnnNLLLossBackward", sess.ffi.NULL, sess.ffi.NULL, sess.ffi.NULL, sess.ffi.NULL, 0, -100,
                     sess.ffi.NULL, sess.ffi.NULL)
    assert info.value.status == 161001 and info.value.status_name == "ACLNN_ERR_PARAM_NULLPTR"


def emu_info_error_reporting() -> str:
    return ascend_aclnn.make_backend(lib=ascend_aclnn.emulator_library_path()).info()["error reporting"]


def test_unusable_libraries_make_the_backend_unavailable(tmp_path):
    b = ascend_aclnn.make_backend(lib=str(tmp_path / "missing.so"))
    ok, why = b.availability()
    assert not ok and "does not exist" in why and b.capabilities() == {}
    with pytest.raises(xloss.BackendUnavailableError, match="does not exist"):
        xloss.focal_loss(np.zeros(2, np.float32), np.zeros(2, np.float32), backend=b)
    libm = subprocess.run(["gcc", "-print-file-name=libm.so.6"], capture_output=True, text=True).stdout.strip()
    ok, why = ascend_aclnn.make_backend(lib=libm).availability()
    assert not ok and "lacks runtime symbols: aclInit" in why
    with pytest.raises(TypeError, match="lib=, device=, layout= and checked="):
        ascend_aclnn.make_backend(memory="private")
    with pytest.raises(xloss.XLossError, match="layout must be one of contiguous, strided"):
        ascend_aclnn.make_backend(layout="diagonal")


def test_status_codes_become_kernel_errors(emu):
    with emu.session() as s:
        g, _ = s.put(np.ones(2, np.float32))
        x, _ = s.put(np.full(2, 0.5, np.float32))
        out, _ = s.empty((2,), np.float32)
        with pytest.raises(xloss.KernelError) as info:
            s.run("aclnnBinaryCrossEntropyBackward", g, x, x, s.ffi.NULL, 7, out)
    e = info.value
    assert (e.status, e.status_name) == (161002, "ACLNN_ERR_PARAM_INVALID")
    assert "aclnnBinaryCrossEntropyBackwardGetWorkspaceSize failed with ACLNN_ERR_PARAM_INVALID (161002)" in str(e)
    assert "reduction 7" in str(e)
    assert isinstance(e, xloss.XLossError)


def test_failures_release_everything_and_leave_outputs_alone(emu, abi):
    before = abi.live()
    # a target the validation would have refused, so the device finds it (phase two, 361001)
    out = np.full((3, 4), 7.0, np.float32)
    bad = NLLArgs(-np.ones((3, 4), np.float32), np.array([0, 9, 1]), None, 1.0, "sum", -100, 3.0, out)
    with pytest.raises(xloss.KernelError) as info:
        emu.nll_loss_grad(bad)
    assert info.value.status == 361001 and "target[1] = 9" in str(info.value)
    assert (out == 7.0).all()
    # a phase-one refusal (label smoothing), after inputs were already on the device
    x16, w16 = np.ones((2, 3), np.float16), np.ones((4, 3), np.float16)
    ig, wg = np.full((2, 3), 7, np.float16), np.full((4, 3), 7, np.float16)
    a = FLCEArgs(np.ones(2, np.float32), x16, w16, np.zeros(2, bool), "bool", np.zeros(2, np.int64), "softmax",
                 None, None, np.full((2, 4), 0.25, np.float32), 0.1, 4, ig, wg)
    with pytest.raises(xloss.KernelError, match="labelSmoothing"):
        emu.fused_linear_cross_entropy_grad(a)
    assert (ig == 7).all() and (wg == 7).all()
    assert abi.live() == before


def test_no_leaks_over_many_cycles(emu, abi):
    rng = np.random.default_rng(5)
    x = rng.uniform(-3, 3, (7, 5)).astype(np.float16)
    y = (rng.random((7, 5)) > 0.5).astype(np.float16)
    s = -rng.random((6, 4)).astype(BF16)
    t = np.array([0, 1, 2, 3, -100, 1])
    xi, w = rng.uniform(-1, 1, (6, 3)).astype(BF16), rng.uniform(-1, 1, (5, 3)).astype(BF16)
    before = abi.live()
    for i in range(100):
        red = ("none", "mean", "sum")[i % 3]
        xloss.focal_loss_with_grad(x, y, reduction=red, backend=emu)
        xloss.bce_grad(np.abs(np.tanh(x)), y, reduction=red, backend=emu)
        xloss.nll_loss_grad(0.5, s, t, reduction=red, backend=emu)
        xloss.fused_linear_cross_entropy_grad(np.ones(6, np.float32), xi, w, np.zeros(6, bool), np.arange(6) % 5,
                                              logits_max=np.zeros(6, np.float32),
                                              sum_exp_logits=np.full(6, 5.0, np.float32), backend=emu)
        assert abi.live() == before
    assert abi.live(C.LIVE_DEVICE_MEMORY) == 0 and abi.live(C.LIVE_STREAMS) == 0


def test_concurrent_calls_from_threads(emu, abi):
    """cffi releases the GIL: sessions on several threads run at once, each on its own stream."""
    rng = np.random.default_rng(11)
    jobs = []
    for i in range(8):
        x = rng.uniform(-6, 6, (33, 17)).astype(np.float32)
        y = (rng.random((33, 17)) > 0.7).astype(np.float32)
        jobs.append((x, y, ("none", "mean", "sum")[i % 3]))
    expected = [xloss.focal_loss_with_grad(x, y, reduction=r, backend=emu) for x, y, r in jobs]
    errors, barrier = [], threading.Barrier(4)

    def worker(k):
        try:
            barrier.wait()
            for rep in range(15):
                j = (k + rep) % len(jobs)
                x, y, r = jobs[j]
                loss, dx = xloss.focal_loss_with_grad(x, y, reduction=r, backend=emu)
                np.testing.assert_array_equal(loss, expected[j][0])
                np.testing.assert_array_equal(dx, expected[j][1])
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert abi.live() == 0


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_flce_rounds_g_to_the_input_dtype_before_the_matmuls(emu, dtype):
    """Bit-exact against the contract computed independently: G in float32, rounded to the input
    dtype, exact float32 GEMMs (products of 16-bit values and short sums are exact), rounded."""
    softmax = np.array([[0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.3, 0.2]], np.float32)
    grad = np.array([1.0, -0.5], np.float32)
    x = np.array([[3.0], [1.5]], dtype)
    w = np.ones((4, 1), dtype)
    mask, mt = np.array([False, True]), np.array([0, 0])
    gi, gw = xloss.fused_linear_cross_entropy_grad(grad, x, w, mask, mt, softmax=softmax, backend=emu)
    g32 = softmax.copy()
    g32[0, 0] = np.float32(g32[0, 0]) - np.float32(1.0)
    g32 *= grad[:, None]
    g = g32.astype(dtype).astype(np.float32)
    want_i = (g @ w.astype(np.float32)).astype(dtype)
    want_w = (g.T @ x.astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(gi.view(np.uint16), want_i.view(np.uint16))
    np.testing.assert_array_equal(gw.view(np.uint16), want_w.view(np.uint16))
    # without the rounding of G the weight gradient would differ here
    assert not np.array_equal((g32.T @ x.astype(np.float32)).astype(dtype).view(np.uint16), gw.view(np.uint16))


@pytest.mark.parametrize("dtype", [np.float16, BF16])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_16_bit_runs_the_16_bit_operator(emu, dtype, reduction):
    """A 16-bit request runs the vendor's 16-bit operator: gradOutput, weight and totalWeight are
    tensors of self's dtype, so a scalar grad and the total weight are rounded on the way in, as on
    an NPU; each element is then the float32 result rounded once."""
    rng = np.random.default_rng(3)
    s = -rng.random((40, 7)).astype(dtype)
    t = rng.integers(0, 7, 40)
    t[::5] = -100
    w = rng.uniform(0.1, 2, 7).astype(dtype)
    grad = 0.3 if reduction != "none" else rng.uniform(-1, 1, 40).astype(dtype)
    got = xloss.nll_loss_grad(grad, s, t, weight=w, reduction=reduction, backend=emu).astype(np.float64)
    rounded = lambda v: float(np.asarray(v).astype(dtype).astype(np.float64))  # noqa: E731
    g16 = rounded(grad) if reduction != "none" else grad
    tw16 = rounded(ref.nll_total_weight(t, 7, w)) if reduction == "mean" else None
    want = ref.nll_loss_grad(g16, s, t, weight=w, reduction=reduction, total_weight=tw16)
    name = "float16" if dtype == np.float16 else "bfloat16"
    bound = 0.5 * xloss.dtypes.ulp(want, name) + 8 * 2.0**-24 * np.abs(want)
    assert (np.abs(got - want) <= bound).all()


def test_torch_tensors_and_combined_mode(emu):
    torch = pytest.importorskip("torch")
    x = torch.linspace(-5, 5, 12, dtype=torch.bfloat16).reshape(3, 4)
    y = (x > 0).to(torch.bfloat16)
    loss, dx = xloss.focal_loss_with_grad(x, y, reduction="mean", backend="ascend")
    assert isinstance(loss, torch.Tensor) and loss.dtype == torch.bfloat16 and dx.shape == (3, 4)
    assert torch.equal(loss, xloss.focal_loss(x, y, reduction="mean", backend=emu))
    assert torch.equal(dx, xloss.focal_loss_grad(x, y, reduction="mean", backend=emu))


# ---- layout="strided" ---------------------------------------------------------------------------------


def test_strided_layout_puts_every_view_at_an_offset_with_gaps():
    from xloss.backends.ascend_aclnn.runtime import strided_layout, view_indices

    for shape in [(), (0,), (1,), (7,), (3, 4), (4, 1), (0, 5), (2, 3, 4), (1, 1, 1, 6)]:
        for k in range(4):
            strides, offset, size = strided_layout(shape, k)
            idx = view_indices(shape, strides, offset)
            assert offset > 0 and len(strides) == len(shape)
            if shape:
                assert strides[-1] != 1, (shape, k)  # the innermost stride is never unit
            if len(shape) >= 2 and k % 2:
                assert strides[0] == 1  # transposed: the first axis is the fastest
            assert len(np.unique(idx)) == idx.size == int(np.prod(shape))  # no two elements share a place
            assert idx.size == 0 or (idx.min() == offset and idx.max() + 2 < size)  # storage extends past the view


def test_emulator_passes_every_declared_target_with_strided_layout():
    from xloss.conformance import runner, targets

    b = ascend_aclnn.make_backend(lib=ascend_aclnn.emulator_library_path(), layout="strided")
    assert b.options["layout"] == "strided" and b.info()["layout"] == "strided"
    results = [runner.run_target(b, *t, max_examples=2, seed=1) for t in targets(b)]  # mostly the edge cases
    # 24, the NLL and BCE forward's 3 dtypes each, BCE with logits' 3 dtypes x 3 modes, cross entropy's two
    # rows x 3 dtypes (issue #30), the dense-label row's 3 dtypes
    assert len(results) == 48, len(results)
    assert {r.status for r in results} == {"pass"}, \
        [(r.kernel, r.dtype, r.mode, r.message) for r in results if r.status != "pass"]


def test_strided_session_catches_writes_outside_output_views_and_into_inputs(emu, abi):
    x = np.array([0.2, 0.4, 0.6], np.float32)
    with emu.session(layout="strided") as s:
        g = s.put(np.asarray(1.0, np.float32))[0]
        tx, bx = s.put(x)
        ty = s.put(np.zeros(3, np.float32))[0]
        to, bo = s.empty((3,), np.float32)
        s.run("aclnnBinaryCrossEntropyBackward", g, tx, ty, s.ffi.NULL, 0, to)
        s.synchronize()
        np.testing.assert_allclose(s.download(bo, (3,), np.float32), x / (x * (1 - x)), rtol=1e-6)
        # a library writing past the view: an output tensor over the whole storage, read as the view
        whole = s.tensor(bo, (bo.view[3].size,), np.float32)
        s.run("aclnnBinaryCrossEntropyBackward", g, s.put(np.full(bo.view[3].size, 0.5, np.float32))[0],
              s.put(np.zeros(bo.view[3].size, np.float32))[0], s.ffi.NULL, 0, whole)
        with pytest.raises(OutOfBoundsWrite, match="outside the view of output `out`") as info:
            s.download(bo, (3,), np.float32)
        assert info.value.buffer == "out" and info.value.nbytes > 0
        # a library writing into an input: an output tensor aliasing x's storage
        alias = s.tensor(bx, (3,), np.float32)
        with pytest.raises(InputModified, match="aclnnBinaryCrossEntropyBackward wrote into input") as info:
            s.run("aclnnBinaryCrossEntropyBackward", g, ty, ty, s.ffi.NULL, 0, alias)
        assert info.value.offset is not None and info.value.nbytes > 0
    assert abi.live() == 0
