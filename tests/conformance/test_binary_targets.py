"""The focal ``targets`` axis: a backend whose ABI takes binary targets only (DrivingSDK's INT32
one-hot) declares ``targets: binary``; it is never handed a soft target, by the public API (which
refuses naming ``y``) or by ``xloss check`` (which draws and builds only y in {0, 1} for it)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import xloss
from xloss.backend import KernelCaps
from xloss.conformance import DESCRIPTORS, large, runner
from xloss.conformance.report import declared_variants, variants_text
from xloss.kernel_args import LazyVariant, Request, target_kind

sys.path.insert(0, str(Path(__file__).parent))
from misbehaving import BinaryTargetsOnly  # noqa: E402


def test_target_kind():
    assert target_kind(np.array([0.0, 1.0, 1.0], np.float32)) == "binary"
    assert target_kind(np.zeros((0, 3), np.float32)) == "binary"
    assert target_kind(np.array([0.0, 0.5], np.float32)) == "soft"
    assert target_kind(np.array([np.nan], np.float32)) == "soft"
    y = np.ones(3 << 20, np.float32)
    y[-1] = 0.25  # in the last block
    assert target_kind(y) == "soft"


def test_the_api_refuses_soft_targets_naming_y_and_takes_binary_ones():
    b = BinaryTargetsOnly()
    x = np.linspace(-2, 2, 5).astype(np.float32)
    with pytest.raises(xloss.XLossError, match=r"y with soft targets: soft targets are not supported") as info:
        xloss.focal_loss(x, np.full(5, 0.5, np.float32), backend=b)
    assert isinstance(info.value, xloss.UnsupportedRequestError)
    y = (x > 0).astype(np.float32)
    np.testing.assert_allclose(xloss.focal_loss(x, y, backend=b), xloss.focal_loss(x, y, backend="reference"))


def test_a_fully_declared_backend_never_computes_the_target_kind():
    """The kind costs a pass over y: it is computed only for a backend that restricts the axis."""
    calls = []

    class Spy(np.ndarray):
        def __eq__(self, other):
            calls.append(1)
            return super().__eq__(other)

    args_y = np.array([0.0, 0.5], np.float32).view(Spy)
    caps = KernelCaps.declare("focal_loss", dtypes=("float32",))
    req = Request("focal_loss", "float32", "mean", LazyVariant({"mode": "forward", "weight": False,
                                                                "targets": lambda: target_kind(args_y)}), 2)
    assert caps.refusal(req) is None and not calls
    binary_only = KernelCaps.declare("focal_loss", dtypes=("float32",), targets="binary")
    assert binary_only.refusal(req).startswith("y with soft")
    assert calls


def test_check_draws_and_builds_only_binary_targets_for_it():
    b = BinaryTargetsOnly()
    caps = b.capabilities()["focal_loss"]
    assert declared_variants(b.capabilities()) == ["focal_loss: targets: binary"]
    assert "targets: binary" in variants_text(b.capabilities()) and "targets: binary" in caps.describe()
    seen = set()

    def note(case):
        seen.update(np.unique(np.asarray(case.kwargs["y"], np.float64)).tolist())

    for mode in ("forward", "grad"):
        r = runner.run_target(b, "focal_loss", "float32", mode, max_examples=15, seed=3, on_case=note)
        assert r.status == "pass", r.message
    assert seen == {0.0, 1.0}
    # the soft-only edge cases are left out, the others keep their sizes with targets rounded
    soft = DESCRIPTORS["focal_loss"].edge_cases("float32", "grad")
    binary = DESCRIPTORS["focal_loss"].edge_cases("float32", "grad", caps)
    assert 0 < len(binary) < len(soft)
    assert any("odd size 65537, binary targets" in c.label for c in binary)
    y = large.build("focal_loss", "float32", "forward", large.rungs("focal_loss")[0], 0, caps).kwargs["y"]
    assert set(np.unique(y).tolist()) == {0.0, 1.0}
