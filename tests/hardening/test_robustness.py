"""Issue 14 rows owned by the API layer: autograd misuse, the valid input domains, hostile
arguments, the per-call memory budget, cached and picklable backends, the source tree import.

Each test states the row it covers; all are fast (no large allocations: the memory limits are
simulated).
"""

from __future__ import annotations

import copy
import io
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import xloss
import xloss.torch as xt
from xloss import memory
from xloss import reference as ref
from xloss.conformance import backends_declaring

REPO = Path(__file__).resolve().parents[2]
rng = np.random.default_rng(14)
X = rng.normal(0, 2, (6, 5)).astype(np.float32)
Y = (rng.random((6, 5)) > 0.7).astype(np.float32)
P = (1 / (1 + np.exp(-X))).astype(np.float32)


# -- create_graph=True through xloss.torch: a clear error, never a silently constant gradient --

@pytest.mark.parametrize("loss", [
    lambda x: xt.sigmoid_focal_loss(x, torch.from_numpy(Y).double(), reduction="sum"),
    lambda x: xt.binary_cross_entropy(torch.sigmoid(x), torch.from_numpy(Y).double(), reduction="sum"),
    lambda x: xt.nll_loss(torch.log_softmax(x, 1), torch.tensor([0, 1, 2, 3, 4, 0]), reduction="sum"),
], ids=["focal", "bce", "nll"])
def test_second_order_gradients_raise_a_clear_error(loss):
    x = torch.from_numpy(X).double().requires_grad_()
    (g,) = torch.autograd.grad(loss(x), x)  # first order works
    assert torch.isfinite(g).all()
    with pytest.raises(xloss.XLossError, match="does not support second-order gradients"):
        torch.autograd.grad(loss(x), x, create_graph=True)


# -- out= with autograd: refuse what torch refuses, bump the version of what autograd saved ------

def test_out_tensor_saved_by_autograd_makes_backward_raise_as_torch_does():
    a = torch.from_numpy(X).clone().requires_grad_()
    out = torch.zeros(X.shape)
    saved = out * 1.0
    prod = (a * out).sum()  # autograd saves `out` for d prod / d a
    xloss.focal_loss_grad(X, Y, out=out, backend="reference")
    np.testing.assert_allclose(out.numpy(), ref.sigmoid_focal_loss_grad(X, Y), rtol=1e-6)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        prod.backward()
    assert not torch.equal(saved, out)


def test_out_leaf_requiring_grad_is_refused_in_grad_mode():
    out = torch.zeros(X.shape, requires_grad=True)
    with pytest.raises(xloss.XLossValueError, match="out is a leaf tensor that requires grad"):
        xloss.focal_loss_grad(X, Y, out=out, backend="reference")
    assert not out.detach().any()
    with torch.no_grad():  # as torch: allowed without grad mode (an optimizer-style update)
        xloss.focal_loss_grad(X, Y, out=out, backend="reference")
    assert out.detach().any()


def test_inference_tensor_out_only_inside_inference_mode():
    with torch.inference_mode():
        out = torch.zeros(X.shape)
    with pytest.raises(xloss.XLossValueError, match="inference tensor"):
        xloss.bce_grad(P, Y, reduction="none", out=out, backend="reference")
    with torch.inference_mode():
        xloss.bce_grad(P, Y, reduction="none", out=out, backend="reference")
    np.testing.assert_allclose(out.numpy(), ref.bce_grad(P, Y, reduction="none"), rtol=1e-5)


# -- one domain for focal targets and BCE probabilities, on every backend ------------------------

@pytest.mark.parametrize("backend", backends_declaring("focal_loss", "float32"))
@pytest.mark.parametrize("bad", [1.5, -0.25, 2])
def test_focal_targets_outside_unit_interval_are_refused_everywhere(backend, bad):
    y = Y.copy()
    y[2, 3] = bad
    with pytest.raises(xloss.XLossValueError, match=r"y must lie in \[0, 1\].*y\[2, 3\] = "):
        xloss.focal_loss_with_grad(X, y, backend=backend)
    yi = Y.astype(np.int64)
    yi[0, 1] = 3
    with pytest.raises(xloss.XLossValueError, match=r"y\[0, 1\] = 3"):
        xloss.focal_loss(X, yi, backend=backend)


@pytest.mark.parametrize("backend", backends_declaring("bce_grad", "float32"))
def test_bce_probabilities_outside_unit_interval_are_refused_everywhere(backend):
    out = np.full(X.shape, 7.0, np.float32)
    with pytest.raises(xloss.XLossValueError, match=r"x must lie in \[0, 1\].*probabilities"):
        xloss.bce_grad(X, Y, reduction="none", out=out, backend=backend)
    assert (out == 7.0).all()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_domain_edges_are_accepted_and_nan_propagates(dtype):
    dt = xloss.dtypes.FLOAT_DTYPES[dtype]
    y = np.array([0.0, -0.0, 1.0, 0.5, np.nan]).astype(dt)
    x = np.array([0.5, 1.0, -1.0, 2.0, 0.0]).astype(dt)
    loss = xloss.focal_loss(x, y, backend="reference").astype(np.float64)
    assert np.isfinite(loss[:4]).all() and np.isnan(loss[4])
    p = np.array([0.0, -0.0, 1.0, 0.25, np.nan]).astype(dt)
    dx = xloss.bce_grad(p, np.ones(5, dt), reduction="none", backend="reference").astype(np.float64)
    assert np.isnan(dx[4]) and not np.isnan(dx[:4]).any()


# -- hostile arguments end in an XLossError ----------------------------------------------------

@pytest.mark.parametrize("call, match", [
    (lambda: xloss.focal_loss(X, Y, gamma=1e308), r"gamma must be <= 1000"),
    (lambda: xloss.nll_loss_grad(1.0, np.log(P), np.zeros(6, np.int64), ignore_index=2**64),
     r"ignore_index must fit in int64"),
    (lambda: xloss.focal_loss(X, torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])),
     r"y is a nested tensor"),
    (lambda: xloss.focal_loss(torch.zeros(6, 5).to_sparse(), Y), r"x has layout torch.sparse_coo"),
    (lambda: xloss.focal_loss(np.array([object(), object()]), [0, 1]), r"x must be a numeric array"),
    (lambda: xloss.backend("ft78ne", core_mask="all"), r"core_mask must be an int"),
    (lambda: xloss.backend("cpu", threads=0), r"backend 'cpu': bad options"),
    (lambda: xloss.backend("reference", nonsense=1), r"backend 'reference': bad options"),
], ids=["gamma 1e308", "ignore_index 2**64", "nested", "sparse", "object array", "ft78ne option",
        "cpu option value", "unknown option"])
def test_hostile_arguments_raise_xloss_errors(call, match):
    with pytest.raises(xloss.XLossError, match=match):
        call()


def test_big_endian_arrays_are_read_in_native_order():
    logp = np.log(P / P.sum(1, keepdims=True)).astype(np.float32)
    t = np.array([0, 1, 2, 3, 4, -100], dtype=">i8")
    got = xloss.nll_loss_grad(1.0, logp, t, backend="cpu")
    np.testing.assert_array_equal(got, xloss.nll_loss_grad(1.0, logp, t.astype("<i8"), backend="cpu"))
    got = xloss.focal_loss(X.astype(">f4"), Y.astype(">f8"), backend="cpu")
    np.testing.assert_array_equal(got, xloss.focal_loss(X, Y, backend="cpu"))


# -- overlap of any input with any output is refused -------------------------------------------

def test_flce_outputs_overlapping_target_mask_or_masked_target_are_refused():
    bt, h, v = 8, 4, 16
    inp = rng.normal(size=(bt, h)).astype(np.float32)
    w = rng.normal(size=(v, h)).astype(np.float32)
    store = np.zeros(bt * h, np.int32)
    masked_target = store[:bt]
    masked_target[:] = rng.integers(0, v, bt)
    input_grad = store.view(np.float32).reshape(bt, h)  # shares masked_target's memory
    logits = inp.astype(np.float64) @ w.T.astype(np.float64)
    lm = logits.max(1).astype(np.float32)
    se = np.exp(logits - lm[:, None]).sum(1).astype(np.float32)
    kw = dict(logits_max=lm, sum_exp_logits=se, backend="reference")
    with pytest.raises(xloss.XLossValueError, match="input_grad_out overlaps input masked_target"):
        xloss.fused_linear_cross_entropy_grad(np.ones(bt, np.float32), inp, w, np.zeros(bt, bool), masked_target,
                                              input_grad_out=input_grad, **kw)
    mask_store = np.zeros(v * h, np.float32)
    mask = mask_store.view(np.bool_)[:bt]
    with pytest.raises(xloss.XLossValueError, match="weight_grad_out overlaps input target_mask"):
        xloss.fused_linear_cross_entropy_grad(np.ones(bt, np.float32), inp, w, mask, masked_target.copy(),
                                              weight_grad_out=mask_store.reshape(v, h), **kw)


# -- memory: every allocation of one call counts, against cgroup limits too --------------------

def test_allocations_of_one_call_are_checked_together(monkeypatch):
    x = rng.normal(size=(512, 1024)).astype(np.float32)  # 2 MiB per float32 array
    y = (x > 1).astype(np.int8)  # converted to float32: a third allocation
    monkeypatch.setattr(memory, "CHECK_ABOVE", 0)
    monkeypatch.setattr(memory, "available_bytes", lambda: 5 << 20)  # each 2 MiB fits alone, 6 MiB do not
    with pytest.raises(xloss.XLossValueError, match=r"6\.0 MiB in all.*5\.0 MiB is available"):
        xloss.focal_loss_with_grad(x, y, backend="reference")
    monkeypatch.setattr(memory, "available_bytes", lambda: 7 << 20)
    xloss.focal_loss_with_grad(x, y, backend="reference")


@pytest.mark.parametrize("version", [1, 2])
def test_cgroup_limits_bound_the_available_memory(tmp_path, monkeypatch, version):
    root = tmp_path / "cgroup"
    if version == 2:
        proc = "0::/jobs/one\n"
        (root / "jobs" / "one").mkdir(parents=True)
        (root / "cgroup.controllers").write_text("memory\n")
        (root / "jobs" / "memory.max").write_text(str(300 << 20))
        (root / "jobs" / "memory.current").write_text(str(200 << 20))
        (root / "jobs" / "one" / "memory.max").write_text("max\n")
        (root / "jobs" / "one" / "memory.current").write_text(str(50 << 20))
    else:
        proc = "4:memory:/jobs/one\n0::/\n"
        (root / "memory" / "jobs" / "one").mkdir(parents=True)
        (root / "memory" / "jobs" / "one" / "memory.limit_in_bytes").write_text(str(400 << 20))
        (root / "memory" / "jobs" / "one" / "memory.usage_in_bytes").write_text(str(300 << 20))
    (tmp_path / "cgroup-of-self").write_text(proc)
    monkeypatch.setattr(memory, "_CGROUP_ROOT", root)
    monkeypatch.setattr(memory, "_PROC_CGROUP", tmp_path / "cgroup-of-self")
    monkeypatch.setattr(memory, "_meminfo_available", lambda: 20 << 30)
    assert memory.available_bytes() == 100 << 20  # the tightest ancestor's limit minus its usage


# -- backends are cached by (name, options), and pickle/copy by them ----------------------------

@pytest.mark.parametrize("name, options", [("ascend", {"layout": "strided"}),
                                           ("ft78ne", {"memory": "private", "core_mask": 0x0F}),
                                           ("cpu", {"threads": 1})])
def test_configured_backends_are_shared_and_picklable(name, options):
    b = xloss.backend(name, **options)
    assert xloss.backend(name, **options) is b
    assert copy.deepcopy(b) is b and pickle.loads(pickle.dumps(b)) is b
    module = xt.SigmoidFocalLoss(backend=b)
    buf = io.BytesIO()
    torch.save(module, buf)
    buf.seek(0)
    assert torch.load(buf, weights_only=False).backend is b


# -- the source tree imports as installed ------------------------------------------------------

def test_import_from_the_repository_root():
    code = "import xloss, xloss.reference, xloss.backends.numpy_reference; print(xloss.reference.__file__)"
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).resolve() == (REPO / "reference" / "__init__.py").resolve()
