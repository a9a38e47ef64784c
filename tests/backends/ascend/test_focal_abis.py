"""The two focal-loss ABIs: xloss's own (aclnnXlossSigmoidFocalLoss[Backward]) and DrivingSDK's
(aclnnSigmoidFocalLoss[Grad]: INT32 target, full weight, FLOAT or FLOAT16, no reduction, no upstream
gradient, the vendor kernel's naive numerics). The adapter tells them apart by symbol names, never calls
one with the other's layout, and on a DrivingSDK-only library declares only what that ABI can express."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xloss
from xloss import reference as ref
from xloss.backends import ascend_aclnn


def _library(tmp_path_factory, helpers, name: str, hide: str) -> str:
    d = tmp_path_factory.mktemp(name)
    script = d / "hide.map"
    script.write_text(f"{{ local: {hide}; }};\n")
    out = d / f"lib{name}.so"
    helpers.compile_c(helpers.build.combined_command(out)[1:] + [f"-Wl,--version-script={script}"])
    return str(out)


@pytest.fixture(scope="module")
def drivingsdk_like(tmp_path_factory, helpers, emu):
    """The emulator with xloss's own focal operators hidden: DrivingSDK's pair is the only focal ABI."""
    return ascend_aclnn.make_backend(lib=_library(tmp_path_factory, helpers, "drivingsdk_like",
                                                  "aclnnXlossSigmoidFocalLoss*"))


def test_abi_detection_by_symbol_names(emu, drivingsdk_like):
    assert emu.focal_abi == "xloss"  # ours wins where present
    assert emu.capabilities()["focal_loss"].dtypes == {"float32", "float16", "bfloat16"}
    b = drivingsdk_like
    assert b.focal_abi == "drivingsdk" and "DrivingSDK" in b.info()["focal ABI"]
    caps = b.capabilities()["focal_loss"]
    assert caps.dtypes == {"float32"} and caps.reductions == {"none", "mean", "sum"}
    assert caps.variants["mode"] == {"forward", "grad", "forward+grad"} and "binary targets only" in caps.notes


def test_a_library_with_the_legacy_pairing_is_never_called(tmp_path_factory, helpers, emu):
    """aclnnSigmoidFocalLoss beside aclnnSigmoidFocalLossBackward is xloss's old 9-argument layout,
    not DrivingSDK's: neither ABI is assumed, focal loss is not declared."""
    from xloss.backends.ascend_aclnn.operators import focal_abi
    names = {"aclnnSigmoidFocalLoss", "aclnnSigmoidFocalLossBackward"}
    assert focal_abi(lambda op: op in names) is None
    assert focal_abi(lambda op: op in {"aclnnSigmoidFocalLoss"}) == "drivingsdk"
    assert focal_abi(lambda op: op in names | {"aclnnXlossSigmoidFocalLoss"}) == "xloss"


def _case(data, n_max=40):
    draw = data.draw
    shape = draw(st.sampled_from([(0,), (7,), (3, 5), (2, 3, 4), (1, 130)]), label="shape")
    rng = np.random.default_rng(draw(st.integers(0, 2**31), label="seed"))
    x = rng.uniform(-4, 4, shape).astype(np.float32)  # the declared vendor range (the kernel's naive float32)
    y = (rng.random(shape) < 0.3).astype(np.float32)
    weight = None
    if draw(st.booleans(), label="weighted"):
        weight = rng.uniform(0, 2, (1,) * (len(shape) - 1) + shape[-1:]).astype(np.float32)
    alpha = draw(st.sampled_from([0.25, -1.0, 0.0, 1.0, 0.6]), label="alpha")
    gamma = draw(st.sampled_from([0.0, 0.5, 2.0, 3.0]), label="gamma")
    reduction = draw(st.sampled_from(["none", "mean", "sum"]), label="reduction")
    return x, y, weight, alpha, gamma, reduction, rng


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_drivingsdk_abi_matches_the_reference_in_the_vendor_range(drivingsdk_like, data):
    """Within the logit range the backend declares for DrivingSDK's kernel (|x| <= 4), the adapter on top of
    the emulated vendor operators agrees with the float64 reference."""
    x, y, weight, alpha, gamma, reduction, rng = _case(data)
    kw = dict(alpha=alpha, gamma=gamma, weight=weight, reduction=reduction)
    grad = rng.uniform(-2, 2, x.shape).astype(np.float32) if reduction == "none" and data.draw(st.booleans()) \
        else 0.75
    loss, dx = xloss.focal_loss_with_grad(x, y, grad, backend=drivingsdk_like, **kw)
    want_l = ref.sigmoid_focal_loss(x, y, **kw)
    want_g = ref.sigmoid_focal_loss_grad(x, y, grad, **kw)
    if reduction == "mean" and x.size == 0:
        assert np.isnan(loss)
    else:
        np.testing.assert_allclose(loss, want_l, rtol=1e-4, atol=1e-30)
    np.testing.assert_allclose(dx, want_g, rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(xloss.focal_loss(x, y, backend=drivingsdk_like, **kw), loss, rtol=0, atol=0)


def _vendor_kernel(x, t, w, gamma, alpha, grad, dt):
    """DrivingSDK kernels/sigmoid_focal_loss/op_kernel/arch35/sigmoid_focal_loss[_grad].cpp, step for step in
    the logit's type dt (NumPy; exp and log correctly rounded from float64, MulAddDst as one rounding)."""
    def r(v):
        with np.errstate(all="ignore"):
            return np.asarray(v, np.float64).astype(dt).astype(np.float64)

    with np.errstate(all="ignore"):
        x, w = r(x), r(w)
        t = r(np.asarray(t, np.float32))
        g = r(np.float32(gamma))
        a32 = np.float32(alpha)
        p = r(1.0 / r(r(np.exp(-x)) + 1.0))
        s = r(-p + 1.0)
        lp, ls = r(np.log(p)), r(np.log(s))
        pg, sg = r(np.exp(r(lp * g))), r(np.exp(r(ls * g)))
        if not grad:
            pos = r(r(sg * r(-a32)) * lp)
            neg = r(r(pg * r(a32 - np.float32(1))) * ls)
        else:
            pos = r(s * r(sg * r(-a32)) + r(r(sg * r(a32 * np.float32(gamma))) * r(p * lp)))
            neg_a = r(pg * r((a32 - np.float32(1)) * np.float32(gamma)))
            neg = r(neg_a * r(s * ls) + r(r(pg * r(np.float32(1) - a32)) * p))
        omt = r(-t + 1.0)
        return r(r(r(pos * t) + neg * omt) * w)


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["FLOAT", "FLOAT16"])
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "grad"])
def test_drivingsdk_operators_compute_as_the_vendor_kernel(emu, dt, grad):
    """The emulated aclnnSigmoidFocalLoss[Grad] (DrivingSDK's op definition: FLOAT or FLOAT16) computes as its
    kernel does: naively in the logit's type, the target entering as float(target) in pos*t + neg*(1-t) (so
    targets other than 0/1 count), any gamma and alpha (no check); NaN/inf where the naive formula gives them."""
    x = np.array([-100.0, -30.0, -3.0, -1.25, -0.5, 0.0, 0.3, 1.0, 2.5, 3.75, 20.0, 40.0], dt)
    t = np.array([0, 1, 1, 0, 2, 1, -1, 0, 1, 3, 0, 1], np.int32)
    w = np.linspace(0.5, 2.0, x.size).astype(dt)
    op = "aclnnSigmoidFocalLossGrad" if grad else "aclnnSigmoidFocalLoss"
    for gamma, alpha in ((2.0, 0.25), (0.0, 0.6), (-1.5, 3.0), (1.0, -0.5)):
        with emu.session() as s:
            out, buf = s.empty(x.shape, dt)
            s.run(op, s.put(x)[0], s.put(t)[0], s.put(w)[0], gamma, alpha, out)
            got = s.download(buf, x.shape, dt).astype(np.float64)
        want = _vendor_kernel(x, t, w, gamma, alpha, grad, dt)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"gamma={gamma}, alpha={alpha}")
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin], want[fin], rtol=4e-3 if dt == np.float16 else 2e-6, atol=1e-30)
    if dt == np.float32:  # the naive float32 formula: NaN/inf beyond about +16.6 and -88.7
        assert not np.isfinite(got[[0, -2, -1]]).all()


def test_drivingsdk_abi_refuses_what_it_cannot_express(drivingsdk_like):
    x = np.linspace(-2, 2, 6).astype(np.float32)
    with pytest.raises(xloss.UnsupportedRequestError, match="soft targets are not supported"):
        xloss.focal_loss(x, np.full(6, 0.5, np.float32), backend=drivingsdk_like)
    with pytest.raises(xloss.UnsupportedRequestError, match="dtype float16"):
        xloss.focal_loss(x.astype(np.float16), np.zeros(6, np.float16), backend=drivingsdk_like)


def test_drivingsdk_operators_check_their_own_layout(emu):
    """Called with xloss's layout (a FLOAT target), DrivingSDK's operator refuses: the emulator checks
    the ABI a DrivingSDK library has, so an adapter mix-up cannot pass silently."""
    with emu.session() as s:
        x = s.put(np.zeros((2, 3), np.float32))[0]
        out = s.empty((2, 3), np.float32)[0]
        with pytest.raises(xloss.KernelError, match="target has dtype FLOAT; expected INT32"):
            s.run("aclnnSigmoidFocalLoss", x, x, x, 2.0, 0.25, out)
        with pytest.raises(xloss.KernelError) as info:  # weight is required
            s.run("aclnnSigmoidFocalLossGrad", x, s.put(np.zeros((2, 3), np.int32))[0], s.ffi.NULL, 2.0, 0.25, out)
        assert info.value.status == 161001
