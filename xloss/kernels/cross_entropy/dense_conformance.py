"""Descriptor of the dense-label cross entropy (``softmax_cross_entropy_with_logits``): loss per row and
``softmax - labels``, against the float64 reference."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from xloss.conformance import values as V
from xloss.conformance.descriptor import Case, ErrorCase, KernelDescriptor, allowance
from xloss.conformance.shrink import Shrinking
from xloss.errors import XLossTypeError, XLossValueError
from xloss.reference import as_f64
from xloss.reference import cross_entropy_loss as ref

from . import DENSE, api


def dense_case(features, labels, dtype, label="") -> Case:
    return Case(DENSE.name, None, dtype, {"features": V.cast(features, dtype), "labels": V.cast(labels, dtype)}, label)


def _labels(rng, n, c, kind):
    if kind == "one-hot":
        y = np.zeros((n, c))
        y[np.arange(n), rng.integers(0, c, n)] = 1.0
        return y
    if kind == "smoothed":
        y = np.full((n, c), 0.1 / c)
        y[np.arange(n), rng.integers(0, c, n)] += 0.9
        return y
    if kind == "distributions":
        y = rng.random((n, c))
        return y / np.maximum(y.sum(axis=1, keepdims=True), 1e-300)
    return rng.uniform(0, 1, (n, c))  # not normalised: the vendors' formula still holds as written


def draw_case(draw, dtype, mode, caps) -> Case:
    c = draw(st.one_of(st.integers(1, 12), st.sampled_from((1, 2, 17, 64, 513, 1000))), label="C")
    n = draw(st.one_of(st.integers(0, 16), st.sampled_from(V.ODD_SIZES)), label="N")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    kind = draw(st.sampled_from(("one-hot", "smoothed", "distributions", "unnormalised")), label="labels")
    return dense_case(V.draw_values(draw, n * c, V.LOGIT_DISTS).reshape(n, c), _labels(rng, n, c, kind), dtype)


def edge_cases(dtype, mode, caps=None) -> list[Case]:
    rng = np.random.default_rng(9)
    big = 60000.0 if dtype == "float16" else 1e4
    return [
        dense_case(np.zeros((0, 4)), np.zeros((0, 4)), dtype, "no rows"),
        dense_case(rng.normal(0, 3, (5, 1)), np.ones((5, 1)), dtype, "one class"),
        dense_case(np.array([[big, -big, 0.0], [-big, -big, -big]]), _labels(rng, 2, 3, "smoothed"), dtype,
                   "extreme logits"),
        dense_case(rng.normal(0, 4, (257, 1537)), _labels(rng, 257, 1537, "distributions"), dtype,
                   "N=257 C=1537 (chunks of the online max/sum)"),
    ]


def error_cases() -> list[ErrorCase]:
    x = np.random.default_rng(3).normal(0, 1, (4, 3)).astype(np.float32)
    y = np.full((4, 3), 1 / 3, np.float32)
    name = DENSE.name
    return [
        ErrorCase(name, {"features": x, "labels": np.array([0, 1, 2, 0])}, XLossTypeError,
                  r"labels must have a floating dtype", "class-index labels"),
        ErrorCase(name, {"features": x, "labels": y[:3]}, XLossValueError, r"labels must have features' shape",
                  "labels of another shape"),
        ErrorCase(name, {"features": x.reshape(2, 2, 3), "labels": y.reshape(2, 2, 3)}, XLossValueError,
                  r"features must have shape \(N, C\)", "3-D features"),
        ErrorCase(name, {"features": x, "labels": y, "backprop_out": np.zeros((4, 3), np.float64)}, XLossTypeError,
                  r"backprop_out must have dtype float32", "backprop_out of another dtype", "backprop_out"),
    ]


def call(case: Case, backend):
    r = api.softmax_cross_entropy_with_logits(**case.kwargs, backend=backend)
    return np.asarray(r.loss), np.asarray(r.backprop)


def oracle(case: Case):
    return ref.softmax_cross_entropy_with_logits(case.kwargs["features"], case.kwargs["labels"])


def allowed(case: Case, expected, caps=None):
    x, y = as_f64(case.kwargs["features"]), np.abs(as_f64(case.kwargs["labels"]))
    n, c = x.shape
    lse = ref.log_softmax_rows(x)[1] if n else np.zeros(0)
    a = np.where(np.isfinite(lse), np.abs(lse), 0.0) + 2.0 + math.log2(c + 1)
    ax = np.where(np.isfinite(x), np.abs(x), 0.0)
    loss_scale = (y * (ax + a[:, None])).sum(axis=1) * (1 + math.log2(c + 1))
    p = np.abs(expected[1] + as_f64(case.kwargs["labels"]))
    p = np.where(np.isfinite(p), p, 0.0)
    return (allowance(expected[0], loss_scale, case.dtype),
            allowance(expected[1], p * (ax + a[:, None]) + y, case.dtype))


def _select(case: Case, keep) -> dict:
    return {k: v[keep] for k, v in case.kwargs.items()}


SHRINKING = Shrinking(lambda case: len(case.kwargs["features"]), _select,
                      lambda case, i, output: i if output == 0 else i // max(1, case.kwargs["features"].shape[1]))

DESCRIPTOR = KernelDescriptor(spec=DENSE, draw_case=draw_case, edge_cases=edge_cases, error_cases=error_cases,
                              call=call, oracle=oracle, allowed=allowed,
                              output_names=lambda mode: ("loss", "backprop"), shrinking=SHRINKING)
