"""The FT78NE's int8 ``sigmoidcrossentropywithlogits`` (its ``i8_`` forms), in float64: the oracle of xloss's
emulation, whose conversion rule is xloss's choice (the manual's page gives int8 logits, labels and loss and no
scale, rounding or saturation).

Each int8 value is the integer itself (no scale: the page names none) and the loss is the page's formula
``-[y ln p + (1 - y) ln(1 - p)]``, ``p = sigmoid(x)``, evaluated exactly (:func:`exact`). An int8 result
``q`` is accepted where it is within one unit of the exact loss ``v``, saturated: ``v`` rounded down or up to an
integer, then clamped to [-128, 127] (:func:`accepted`). Any rounding to a neighbouring integer (to nearest,
half away from zero, toward zero) saturated to int8 passes; a wrap-around past 127, a wrong formula or swapped
inputs do not.
"""

from __future__ import annotations

import numpy as np

from .bce_logits import terms

INT8_MIN, INT8_MAX = -128, 127


def exact(x, y) -> np.ndarray:
    """The page's loss of the integers ``x`` (logits) and ``y`` (labels), float64, unsaturated."""
    linear, lw, tail = terms(np.asarray(x, np.float64), np.asarray(y, np.float64))
    return linear + lw * tail


def saturated(x, y) -> np.ndarray:
    """:func:`exact` clamped to the int8 range."""
    return np.clip(exact(x, y), INT8_MIN, INT8_MAX)


def accepted(q, x, y) -> np.ndarray:
    """Per element: the integer ``q`` is within one unit of the exact loss, saturated: the float64 loss rounded
    down or up to an integer, then clamped to int8 (a loss within float64's rounding of an integer, such as
    ``100 + e^-100``, counts as that integer)."""
    v = exact(x, y)
    q = np.asarray(q, np.float64)
    return (q == np.clip(np.floor(v), INT8_MIN, INT8_MAX)) | (q == np.clip(np.ceil(v), INT8_MIN, INT8_MAX))
