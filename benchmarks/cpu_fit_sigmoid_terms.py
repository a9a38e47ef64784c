"""Recompute the two float32 polynomials of ``backends/cpu_onednn/sigmoid_terms.py`` and their fit errors.

    python benchmarks/cpu_fit_sigmoid_terms.py

* ``exp(-u) = 1 + u P(u)`` for the reduced argument ``|u| <= ln2/2`` (a margin for the reduction's
  rounding), P of degree 5: least squares on ``(exp(-u) - 1)/u`` weighted by ``u / exp(-u)``, so that
  it minimises the relative error of the result.
* ``log1p(e) = 2 atanh(t) = 2t + 2t z R(z)`` with ``t = e/(2 + e)`` in [0, 1/3] for e in [0, 1],
  ``z = t*t`` in [0, 1/9], R of degree 3: least squares on ``(atanh(t)/t - 1)/z`` weighted by
  ``z t / atanh(t)`` (the relative error of the result).

Both at 400 Chebyshev nodes in 50-digit arithmetic (mpmath), coefficients rounded to float32. The
script prints the coefficients (to paste into ``_EXP_P`` and ``_ATANH_R``) and each fit's relative
error in units of 2**-24 (half a float32 ulp at the bottom of a binade; at most one ulp anywhere), on
a grid in 50 digits. The rounding of the float32 evaluation is measured end to end by
``tests/backends/cpu/test_bce_with_logits_ulp.py``.
"""

from __future__ import annotations

import mpmath
import numpy as np

NODES = 400
EXP_DEGREE = 5
EXP_HALF_WIDTH = mpmath.mpf("0.3466")  # ln2/2 = 0.34657...: |u| never exceeds it by more than a rounding
ATANH_DEGREE = 3
Z_MAX = mpmath.mpf(1) / 9


def _lsq(xs, target, weight, degree):
    a = mpmath.matrix(len(xs), degree + 1)
    b = mpmath.matrix(len(xs), 1)
    for i, v in enumerate(xs):
        w = weight(v)
        b[i] = target(v) * w
        for j in range(degree + 1):
            a[i, j] = v**j * w
    c = mpmath.lu_solve(a.T * a, a.T * b)  # normal equations, in 50 digits
    return [np.float32(float(c[j])) for j in range(degree + 1)]


def _horner(coeffs, v):
    p = mpmath.mpf(0)
    for c in reversed(coeffs):
        p = p * v + mpmath.mpf(float(c))
    return p


def fit_exp():
    nodes = [EXP_HALF_WIDTH * mpmath.cos(mpmath.pi * (2 * j + 1) / (2 * NODES)) for j in range(NODES)]
    return _lsq(nodes, lambda u: (mpmath.exp(-u) - 1) / u, lambda u: u / mpmath.exp(-u), EXP_DEGREE)


def _atanh_ratio(z):
    t = mpmath.sqrt(z)
    return mpmath.atanh(t) / t


def fit_atanh():
    nodes = [Z_MAX * (1 - mpmath.cos(mpmath.pi * (2 * j + 1) / (2 * NODES))) / 2 for j in range(NODES)]
    return _lsq(nodes, lambda z: (_atanh_ratio(z) - 1) / z, lambda z: z / _atanh_ratio(z), ATANH_DEGREE)


def main():
    mpmath.mp.dps = 50
    pe, ra = fit_exp(), fit_atanh()
    grid = [mpmath.mpf(k) / 2000 for k in range(-2000, 2001) if k]
    exp_err = max(abs((1 + u * EXP_HALF_WIDTH * _horner(pe, u * EXP_HALF_WIDTH)) / mpmath.exp(-u * EXP_HALF_WIDTH) - 1)
                  for u in grid)
    zs = [Z_MAX * k / 4000 for k in range(1, 4001)]
    at_err = max(abs((1 + z * _horner(ra, z)) / _atanh_ratio(z) - 1) for z in zs)
    print("exp(-u) P coefficients (float32):", ", ".join(repr(float(c)) for c in pe))
    print(f"  fit error: {float(exp_err):.3e} relative = {float(exp_err) / 2**-24:.3f} x 2**-24")
    print("log1p atanh R coefficients (float32):", ", ".join(repr(float(c)) for c in ra))
    print(f"  fit error: {float(at_err):.3e} relative = {float(at_err) / 2**-24:.3f} x 2**-24")


if __name__ == "__main__":
    main()
