"""Building blocks of the hypothesis strategies: shapes, value distributions, weights, upstream grads.

Small arrays are drawn element by element (hypothesis shrinks every value); larger arrays
come from a NumPy generator seeded by a drawn integer with special values sprinkled in
(hypothesis shrinks the size, the distribution and the seed). Values are drawn in float64
and rounded to the dtype under test; the oracle sees the rounded values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from .. import dtypes as xdt

#: Arrays up to this many elements are drawn element by element.
ELEMENTWISE_MAX = 16
#: 1-D sizes that straddle SIMD widths (8/16 lanes), unroll factors and thread chunks.
ODD_SIZES = (0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 255, 257, 1023, 1025, 4097)


@dataclass(frozen=True)
class Dist:
    """A distribution of float64 values: a hypothesis element strategy and a NumPy sampler."""

    name: str
    element: st.SearchStrategy
    sample: Callable[[np.random.Generator, int], np.ndarray]
    specials: tuple = ()

    def elements(self) -> st.SearchStrategy:
        return st.one_of(st.sampled_from(self.specials), self.element) if self.specials else self.element


def uniform(name, lo, hi, specials=()) -> Dist:
    return Dist(name, st.floats(lo, hi, allow_nan=False, allow_infinity=False),
                lambda rng, n: rng.uniform(lo, hi, n), tuple(specials))


def constant(name, value) -> Dist:
    return Dist(name, st.just(float(value)), lambda rng, n: np.full(n, float(value)), ())


def choice(name, values) -> Dist:
    values = tuple(float(v) for v in values)
    return Dist(name, st.sampled_from(values), lambda rng, n: rng.choice(np.array(values), n), ())


def draw_values(draw, n: int, dists: Sequence[Dist]) -> np.ndarray:
    """``n`` float64 values from one of ``dists`` (chosen by hypothesis)."""
    dist = draw(st.sampled_from(dists), label="distribution")
    if n <= ELEMENTWISE_MAX:
        return np.array(draw(st.lists(dist.elements(), min_size=n, max_size=n)), dtype=np.float64)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    vals = dist.sample(rng, n).astype(np.float64)
    if dist.specials:  # about 1 in 8 positions take a special value
        where = rng.random(n) < 0.125
        vals[where] = rng.choice(np.array(dist.specials, dtype=np.float64), int(where.sum()))
    return vals


def shapes(max_numel: int = 4097) -> st.SearchStrategy:
    """Shapes with 0, 1, odd and SIMD-straddling sizes, 0-d to 4-d."""
    one_d = st.one_of(st.sampled_from(ODD_SIZES), st.integers(0, 300)).map(lambda n: (n,))
    nd = st.lists(st.integers(0, 7), min_size=2, max_size=4).map(tuple)
    return st.one_of(one_d, st.just(()), nd).filter(lambda s: math.prod(s) <= max_numel)


def broadcast_shape(draw, shape) -> tuple:
    """A shape that broadcasts to ``shape``: some dims set to 1, some leading dims dropped."""
    keep = draw(st.integers(0, len(shape)), label="weight ndim")
    tail = shape[len(shape) - keep:]
    return tuple(d if draw(st.booleans(), label="keep dim") else 1 for d in tail)


def draw_elementwise(draw, x_dists, caps):
    """``(shape, x, y, reduction, weight)`` for an elementwise kernel (focal, BCE): ``x`` from
    ``x_dists``, targets, a declared reduction, and a broadcastable weight where declared."""
    shape = draw(shapes(), label="shape")
    n = math.prod(shape)
    x = draw_values(draw, n, x_dists).reshape(shape)
    y = draw_values(draw, n, target_dists(caps)).reshape(shape)
    reduction = draw(st.sampled_from(sorted(caps.reductions)), label="reduction")
    weight = None
    if draw(st.sampled_from(sorted(caps.variants["weight"])), label="weighted"):
        wshape = broadcast_shape(draw, shape)
        weight = draw_values(draw, math.prod(wshape), WEIGHT_DISTS).reshape(wshape)
    return shape, x, y, reduction, weight


def binary_targets_only(caps) -> bool:
    """Whether ``caps`` declares binary targets only (the ``targets`` axis of focal loss): every y
    drawn or built for it is 0 or 1."""
    return caps is not None and set(caps.variants.get("targets", ("soft",))) == {"binary"}


def target_dists(caps) -> tuple:
    """The target distributions for ``caps``: soft ones only where it declares soft targets."""
    return BINARY_TARGET_DISTS if binary_targets_only(caps) else TARGET_DISTS


def binarized(y, caps):
    """``y`` rounded to {0, 1} where ``caps`` declares binary targets only (fixed cases built with
    soft targets keep their shape and most of their values), else ``y`` unchanged."""
    return np.round(np.asarray(y, dtype=np.float64)) if binary_targets_only(caps) else y


def cast(values, dtype: str) -> np.ndarray:
    return xdt.cast(values, dtype)


def smallest_subnormal(dtype: str) -> float:
    """The smallest positive value of the dtype: an upstream gradient whose mean scale ``g/n`` underflows."""
    return xdt.tiny(dtype) * xdt.eps(dtype)


def draw_upstream(draw, reduction: str, shape, dtype: str, *, per_element: bool = True):
    """The upstream gradient: a float, or (``none``) sometimes an array of ``shape``."""
    scalar = st.one_of(st.sampled_from((1.0, -1.0, 0.5, 0.0)), st.floats(-4, 4, allow_nan=False))
    if reduction == "none" and per_element and draw(st.booleans(), label="array grad"):
        n = math.prod(shape)
        return cast(draw_values(draw, n, GRAD_DISTS).reshape(shape), dtype)
    return float(xdt.cast(draw(scalar, label="grad"), dtype))  # representable in the dtype


# -- value distributions shared by the descriptors -------------------------------------------

EXTREME_LOGITS = (0.0, -0.0, 1e-30, -1e-30, 1e-6, -1e-6, 15.0, -15.0, 17.0, -17.0, 30.0, -30.0, 88.7, -88.7,
                  88.8, -88.8, 100.0, -100.0, 745.0, -745.0, 1e3, -1e3, 1e4, -1e4)
LOGIT_DISTS = (
    uniform("moderate logits", -8.0, 8.0, (0.0,)),
    uniform("wide logits", -120.0, 120.0, EXTREME_LOGITS),
    uniform("extreme logits", -1e4, 1e4, EXTREME_LOGITS),
    uniform("near-zero logits", -1e-3, 1e-3, (0.0, 1e-30, -1e-30)),
)
TARGET_DISTS = (
    choice("binary targets", (0.0, 1.0)),
    uniform("soft targets", 0.0, 1.0, (0.0, 1.0, 0.5, 1e-7, 1.0 - 1e-7)),
    constant("all-zero targets", 0.0),
    constant("all-one targets", 1.0),
)
BINARY_TARGET_DISTS = tuple(d for d in TARGET_DISTS if d.name != "soft targets")
PROB_DISTS = (
    uniform("probabilities", 0.0, 1.0, (0.0, 1.0, 0.5)),
    uniform("probabilities near 0 and 1", 0.0, 1.0, (0.0, 1.0, 1e-12, 1e-9, 1e-7, 1e-4, 1 - 1e-7, 1 - 1e-4, 0.999)),
    choice("probabilities at 0 and 1", (0.0, 1.0, 1e-12, 1.0 - 2.0**-24)),
)
WEIGHT_DISTS = (
    uniform("weights", 0.0, 2.0, (0.0, 1.0)),
    constant("unit weights", 1.0),
)
GRAD_DISTS = (
    uniform("upstream grads", -2.0, 2.0, (0.0, 1.0, -1.0)),
)
