"""Focal loss through either focal ABI (see :mod:`.operators`): xloss's own operators, or
DrivingSDK's with the adapter supplying what that ABI lacks."""

from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedRequestError
from ...kernels import REDUCTION_CODES
from .operators import DS_FOCAL_FORWARD, DS_FOCAL_GRAD, XLOSS_FOCAL_BACKWARD, XLOSS_FOCAL_FORWARD


def upstream_tensor(s, grad, dtype):
    """The upstream gradient as a tensor: an array in the input dtype, or a scalar as a 0-d FLOAT
    tensor (it broadcasts, and float32 keeps a Python float's value where a 16-bit input dtype
    would round it)."""
    if isinstance(grad, np.ndarray):
        return s.put(grad, dtype)[0]
    return s.put(np.asarray(grad, dtype=np.float32))[0]


def run(backend, a):
    """Through the focal ABI the loaded library exports (``backend.focal_abi``, from :mod:`.operators`)."""
    if backend.focal_abi == "drivingsdk":
        run_drivingsdk(backend, a)
    else:
        run_xloss(backend, a)


def run_xloss(backend, a):
    """xloss's own operators: everything crosses the ABI as it is."""
    dt = a.x.dtype
    red = REDUCTION_CODES[a.reduction]
    with backend.session() as s:
        tx, ty = s.put(a.x)[0], s.put(a.y)[0]
        tw = s.put(a.weight)[0] if a.weight is not None else s.ffi.NULL
        if a.loss_out is not None:
            tl, bl = s.empty(a.loss_out.shape, dt)
            s.run(XLOSS_FOCAL_FORWARD, tx, ty, tw, a.gamma, a.alpha, red, tl)
        if a.grad_out is not None:
            tg = upstream_tensor(s, a.grad, dt)
            td, bd = s.empty(a.x.shape, dt)
            s.run(XLOSS_FOCAL_BACKWARD, tg, tx, ty, tw, a.gamma, a.alpha, red, td)
        s.synchronize()
        loss = s.download(bl, a.loss_out.shape, dt) if a.loss_out is not None else None
        dx = s.download(bd, a.x.shape, dt) if a.grad_out is not None else None
    # results reach the caller's buffers only after every call (and the cleanup) succeeded
    if loss is not None:
        np.copyto(a.loss_out, loss)
    if dx is not None:
        np.copyto(a.grad_out, dx)


def _matrix_shape(shape) -> tuple[int, int]:
    """(N, C) for DrivingSDK's 2-D operands: the leading dims flattened (one row below 2-D)."""
    if len(shape) < 2:
        return 1, math.prod(shape)
    return math.prod(shape[:-1]), shape[-1]


def run_drivingsdk(backend, a):
    """DrivingSDK's ABI: float32, binary targets as INT32 one-hot, weight in full. ``alpha < 0``
    (no class weighting) becomes alpha 0.5 with the weight doubled (exact). Reductions are summed
    on the host in float64 and rounded once; the upstream gradient (and the mean's 1/n) multiplies
    the operator's per-element gradient in float64, rounded once more."""
    if not np.all((a.y == 0) | (a.y == 1)):
        raise UnsupportedRequestError("the ascend backend's focal loss runs through DrivingSDK's "
                                      "aclnnSigmoidFocalLoss, whose target is INT32 one-hot: y must hold only 0 and 1 "
                                      "(soft targets are not supported)")
    shape2 = _matrix_shape(a.x.shape)
    n = a.x.size
    x = a.x.reshape(shape2)
    onehot = (a.y != 0).astype(np.int32).reshape(shape2)
    w = np.ones(a.x.shape, np.float32) if a.weight is None else np.broadcast_to(a.weight, a.x.shape)
    alpha = a.alpha
    if alpha < 0:
        alpha, w = 0.5, w * np.float32(2)
    w = np.ascontiguousarray(w, dtype=np.float32).reshape(shape2)
    with backend.session() as s:
        tx, ty, tw = s.put(x)[0], s.put(onehot)[0], s.put(w)[0]
        if a.loss_out is not None:
            tl, bl = s.empty(shape2, np.float32)
            s.run(DS_FOCAL_FORWARD, tx, ty, tw, a.gamma, alpha, tl)
        if a.grad_out is not None:
            td, bd = s.empty(shape2, np.float32)
            s.run(DS_FOCAL_GRAD, tx, ty, tw, a.gamma, alpha, td)
        s.synchronize()
        loss = s.download(bl, shape2, np.float32) if a.loss_out is not None else None
        dx = s.download(bd, shape2, np.float32) if a.grad_out is not None else None
    if loss is not None:
        if a.reduction == "none":
            np.copyto(a.loss_out, loss.reshape(a.x.shape))
        else:
            with np.errstate(invalid="ignore", over="ignore"):
                total = loss.sum(dtype=np.float64)
                if a.reduction == "mean":
                    total = total / n if n else np.nan  # mean of nothing is NaN, as torch
            np.copyto(a.loss_out, np.float32(total))
    if dx is not None:
        scale = a.grad if isinstance(a.grad, np.ndarray) else np.float64(a.grad)
        with np.errstate(invalid="ignore", over="ignore"):
            g = dx.reshape(a.x.shape).astype(np.float64) * np.asarray(scale, np.float64)
            if a.reduction == "mean" and n:
                g /= n
        np.copyto(a.grad_out, g.astype(np.float32))
