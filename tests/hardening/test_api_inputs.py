"""The bad-input matrix at the Python API, the same on every backend.

Each case is either a clear error or a documented result, identical across backends:

* NaN in an operand propagates: the affected output elements, and any reduction over them, are
  NaN (NLL never reads the values of ``self``, so NaN there changes nothing);
* non-contiguous, negative-stride and read-only inputs give exactly what their contiguous copies
  give;
* operands of other dtypes are converted to the primary input's dtype (targets: also bool and
  integers), so mixed dtypes give what the converted call gives;
* 0-d inputs work where the kernel defines them (focal, BCE; NLL with 1-D ``self``).
"""

import numpy as np
import pytest

import xloss
from xloss.conformance import available_backends

BACKENDS = {b.name: b for b in available_backends()}


def _declares(b, kernel, dtype):
    caps = b.capabilities().get(kernel)
    return caps is not None and dtype in caps.dtypes


def _dtype_for(b, kernel):
    return "float32" if _declares(b, kernel, "float32") else "float16"


def _calls(b):
    """(label, kernel, function(**arrays) -> outputs, arrays) for every kernel this backend declares."""
    rng = np.random.default_rng(0)
    out = []
    if "focal_loss" in b.capabilities():
        dt = np.dtype(_dtype_for(b, "focal_loss"))
        x = rng.uniform(-4, 4, (6, 5)).astype(dt)
        y = (rng.random((6, 5)) > 0.5).astype(dt)
        for red in ("none", "mean"):
            out.append((f"focal {red}", "focal_loss",
                        lambda x, y, red=red: xloss.focal_loss_with_grad(x, y, reduction=red, backend=b),
                        {"x": x, "y": y}))
    if "bce_grad" in b.capabilities():
        caps = b.capabilities()["bce_grad"]
        dt = np.dtype(_dtype_for(b, "bce_grad"))
        mode = sorted(caps.variants["eps_mode"])[0]
        x = rng.uniform(0.05, 0.95, (6, 5)).astype(dt)
        y = (rng.random((6, 5)) > 0.5).astype(dt)
        out.append(("bce", "bce_grad", lambda x, y: (xloss.bce_grad(x, y, eps_mode=mode, backend=b),),
                    {"x": x, "y": y}))
    if "nll_loss_grad" in b.capabilities():
        dt = np.dtype(_dtype_for(b, "nll_loss_grad"))
        s = -rng.random((7, 4)).astype(dt)
        t = np.array([0, 3, -100, 1, 2, 2, 0])
        out.append(("nll", "nll_loss_grad", lambda self, target: (xloss.nll_loss_grad(1.0, self, target, backend=b),),
                    {"self": s, "target": t}))
    return out


CASES = [(name, label) for name, b in BACKENDS.items() for label, *_ in _calls(b)]


def _find(name, label):
    b = BACKENDS[name]
    return b, next(c for c in _calls(b) if c[0] == label)


def _same(a, b):
    for u, v in zip(a, b):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


@pytest.mark.parametrize("name,label", CASES)
def test_non_contiguous_negative_stride_and_read_only_inputs(name, label):
    b, (_, kernel, fn, arrays) = _find(name, label)
    want = fn(**arrays)
    strided = {}
    for k, v in arrays.items():
        big = np.zeros((2 * v.shape[0],) + v.shape[1:], v.dtype) if v.ndim else None
        if big is not None:
            big[::2] = v
            strided[k] = big[::2]
    _same(fn(**{**arrays, **strided}), want)
    flipped = {k: np.ascontiguousarray(v[::-1])[::-1] for k, v in arrays.items() if v.ndim}
    _same(fn(**{**arrays, **flipped}), want)
    frozen = {k: v.copy() for k, v in arrays.items()}
    for v in frozen.values():
        v.flags.writeable = False
    _same(fn(**frozen), want)


@pytest.mark.parametrize("name,label", CASES)
def test_nan_propagates_to_the_elements_it_touches(name, label):
    b, (_, kernel, fn, arrays) = _find(name, label)
    key = "self" if kernel == "nll_loss_grad" else "x"
    poisoned = {k: v.copy() for k, v in arrays.items()}
    poisoned[key].reshape(-1)[3] = np.nan
    got = fn(**poisoned)
    if kernel == "nll_loss_grad":  # the values of self are never read
        _same(got, fn(**arrays))
        return
    for out in got:
        out = np.asarray(out, dtype=np.float64)
        if out.ndim == 0:
            assert np.isnan(out), f"a reduction over a NaN should be NaN, got {out}"
        else:
            flat = out.reshape(-1)
            assert np.isnan(flat[3]) and np.isfinite(np.delete(flat, 3)).all(), flat


@pytest.mark.parametrize("name,label", CASES)
def test_targets_and_weights_of_other_dtypes_are_converted(name, label):
    b, (_, kernel, fn, arrays) = _find(name, label)
    if kernel == "nll_loss_grad":
        _same(fn(self=arrays["self"], target=arrays["target"].astype(np.int32)), fn(**arrays))
        return
    want = fn(**arrays)
    for dt in (np.float64, np.int64, bool):
        _same(fn(x=arrays["x"], y=arrays["y"].astype(dt)), want)


def test_zero_d_inputs_on_every_backend():
    for b in BACKENDS.values():
        if _declares(b, "focal_loss", "float32"):
            loss, dx = xloss.focal_loss_with_grad(np.float32(1.5), np.float32(1.0), backend=b)
            assert loss.shape == () and dx.shape == ()
            np.testing.assert_allclose(loss, xloss.reference.sigmoid_focal_loss(1.5, 1.0), rtol=1e-5)
        if _declares(b, "nll_loss_grad", "float32"):
            g = xloss.nll_loss_grad(1.0, -np.ones(4, np.float32), np.array(2), backend=b)
            np.testing.assert_array_equal(g, [0, 0, -1, 0])


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_inf_logits_give_the_reference_result_class(name):
    """±inf logits lie outside the guaranteed domain (|x| <= 1e4); every backend must still agree
    with the reference on whether each result is NaN, ±inf or finite, and on finite values."""
    b = BACKENDS[name]
    if not _declares(b, "focal_loss", "float32"):
        pytest.skip(f"{name} declares no float32 focal loss")
    x = np.array([np.inf, -np.inf, np.inf, -np.inf], np.float32)
    y = np.array([1.0, 0.0, 0.0, 1.0], np.float32)
    got = xloss.focal_loss_with_grad(x, y, backend=b)
    want = xloss.focal_loss_with_grad(x, y, backend="reference")
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.isinf(g), np.isinf(w))
        np.testing.assert_allclose(g[np.isfinite(w)], w[np.isfinite(w)], rtol=1e-6)
