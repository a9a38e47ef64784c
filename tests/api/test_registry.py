"""Backend registry: entry points, explicit requests fail loudly, defaults choose, third parties join."""

import numpy as np
import pytest

import xloss
from xloss import registry
from xloss.backend import Backend, KernelCaps
from xloss.kernel_args import Request

X = np.linspace(-2, 2, 5).astype(np.float32)
Y = (X > 0).astype(np.float32)


def test_in_tree_backends_register_through_the_entry_point_group():
    from importlib import metadata

    names = {ep.name for ep in metadata.entry_points(group=registry.ENTRY_POINT_GROUP)}
    assert {"reference", "cpu", "ascend", "ft78ne", "mt7004"} <= names


def test_unknown_backend_names_the_registered_ones():
    with pytest.raises(xloss.BackendNotFoundError, match=r"no backend named 'tpu'; registered backends: .*reference"):
        xloss.focal_loss(X, Y, backend="tpu")


def test_backend_must_be_a_name_or_object():
    with pytest.raises(xloss.XLossTypeError, match=r"backend must be a name, a Backend or None, got int"):
        xloss.focal_loss(X, Y, backend=3)


class OnlyFloat32Focal(Backend):
    """A minimal third-party backend: forward focal loss in float32, reductions none and sum."""

    def __init__(self, **options):
        super().__init__(name="toy", description="test backend", options=options)
        self.calls = 0

    def capabilities(self):
        return {"focal_loss": KernelCaps.declare("focal_loss", dtypes=["float32"], reductions=["none", "sum"],
                                                 mode="forward", weight=False)}

    def focal_loss(self, a):
        self.calls += 1
        val = xloss.reference.sigmoid_focal_loss(a.x, a.y, alpha=a.alpha, gamma=a.gamma, reduction=a.reduction)
        a.loss_out[...] = val


@pytest.fixture
def toy():
    xloss.register_backend("toy", OnlyFloat32Focal)
    yield xloss.backend("toy")
    xloss.unregister_backend("toy")


def test_registered_backend_runs(toy):
    out = xloss.focal_loss(X, Y, backend="toy")
    assert toy.calls == 1
    np.testing.assert_allclose(out, xloss.reference.sigmoid_focal_loss(X, Y), rtol=1e-6)
    assert "toy" in [b.name for b in xloss.list_backends()]


@pytest.mark.parametrize("call, why", [
    (lambda: xloss.focal_loss(X.astype(np.float64), Y, backend="toy"), r"dtype float64 \(supported: float32\)"),
    (lambda: xloss.focal_loss(X, Y, reduction="mean", backend="toy"), r"reduction='mean' \(supported: none, sum\)"),
    (lambda: xloss.focal_loss(X, Y, weight=np.ones(5, np.float32), backend="toy"), r"weight=True \(supported: False\)"),
    (lambda: xloss.focal_loss_grad(X, Y, backend="toy"), r"mode='grad' \(supported: forward\)"),
    (lambda: xloss.bce_grad(1 / (1 + np.exp(-X)), Y, backend="toy"), r"kernel bce_grad \(supported: focal_loss\)"),
])
def test_explicit_backend_refuses_undeclared_requests_naming_what_it_supports(toy, call, why):
    with pytest.raises(xloss.UnsupportedRequestError, match=rf"backend 'toy' does not support {why}"):
        call()
    assert toy.calls == 0


def test_backend_object_with_options_is_usable(toy):
    configured = xloss.backend("toy", flavour="spicy")
    assert configured is not toy and configured.options == {"flavour": "spicy"}
    xloss.focal_loss(X, Y, backend=configured)
    assert configured.calls == 1 and toy.calls == 0


def test_duplicate_registration_needs_replace(toy):
    with pytest.raises(ValueError, match="already registered"):
        xloss.register_backend("toy", OnlyFloat32Focal)
    xloss.register_backend("toy", OnlyFloat32Focal, replace=True)


def test_a_backend_that_fails_to_load_is_listed_as_unavailable():
    def broken(**options):
        raise ImportError("libfoo.so: cannot open shared object file")

    xloss.register_backend("broken", broken)
    try:
        info = {b.name: b for b in xloss.list_backends()}["broken"]
        assert not info.available and "libfoo.so" in info.reason
        with pytest.raises(ImportError):
            xloss.focal_loss(X, Y, backend="broken")
    finally:
        xloss.unregister_backend("broken")


class Unavailable(OnlyFloat32Focal):
    def availability(self):
        return False, "no device attached"


def test_unavailable_backend_raises_when_named():
    xloss.register_backend("gone", Unavailable)
    try:
        with pytest.raises(xloss.BackendUnavailableError, match=r"backend 'toy' is not available here: no device"):
            xloss.focal_loss(X, Y, backend="gone")
    finally:
        xloss.unregister_backend("gone")


def test_default_backend_prefers_cpu_then_reference(monkeypatch):
    req = Request("focal_loss", "float32", "none", {"mode": "forward", "weight": False}, 5)
    assert registry.resolve(None, req).name == "cpu"
    monkeypatch.setattr(registry, "DEFAULT_ORDER", ("no-such-backend", "reference"))
    assert registry.resolve(None, req).name == "reference"


def test_default_backend_reports_why_nothing_fits(monkeypatch):
    monkeypatch.setattr(registry, "DEFAULT_ORDER", ("no-such-backend",))
    with pytest.raises(xloss.UnsupportedRequestError, match=r"no default backend can run focal_loss: no-such-backend"):
        xloss.focal_loss(X, Y)


def test_capability_declarations_are_checked():
    with pytest.raises(ValueError, match="unknown axes"):
        KernelCaps.declare("focal_loss", dtypes=["float32"], colour="red")
    with pytest.raises(ValueError, match="axis 'mode' takes"):
        KernelCaps.declare("focal_loss", dtypes=["float32"], mode="backward")
    with pytest.raises(ValueError, match="unknown dtypes"):
        KernelCaps.declare("focal_loss", dtypes=["int8"])


def test_fixed_parameters_are_enforced():
    caps = KernelCaps.declare("bce_grad", dtypes=["float32"], eps_mode="add", fixed={"eps": 1e-12})
    req = Request("bce_grad", "float32", "mean", {"eps_mode": "add", "weight": False}, 3, {"eps": 1e-6})
    assert caps.refusal(req) == "eps=1e-06 (this backend fixes eps=1e-12)"
    assert "eps fixed at 1e-12" in caps.describe()
