"""The two focal-loss ABIs: xloss's own (aclnnXlossSigmoidFocalLoss[Backward]) and DrivingSDK's
(aclnnSigmoidFocalLoss[Grad]: INT32 one-hot target, full weight, float32, no reduction, no upstream
gradient). The adapter tells them apart by symbol names, never calls one with the other's layout,
and on a DrivingSDK-only library declares only what that ABI can express."""

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
    x = rng.uniform(-12, 12, shape).astype(np.float32)
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
def test_drivingsdk_abi_matches_the_reference(drivingsdk_like, data):
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
        np.testing.assert_allclose(loss, want_l, rtol=2e-5, atol=1e-30)
    np.testing.assert_allclose(dx, want_g, rtol=4e-5, atol=1e-37)
    # the same through xloss's own operators on the full emulator
    np.testing.assert_allclose(xloss.focal_loss_grad(x, y, grad, backend=drivingsdk_like, **kw), want_g,
                               rtol=4e-5, atol=1e-37)
    np.testing.assert_allclose(xloss.focal_loss(x, y, backend=drivingsdk_like, **kw), loss, rtol=0, atol=0)


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
