"""Recompute the float32 log1p polynomial of ``backends/cpu_onednn/vecmath.py`` and its error.

    python benchmarks/cpu_fit_log1p.py

``log1p(t) = t * P(t)`` on [0, 1] with P of degree 10: a least-squares fit of log1p(t)/t at
400 Chebyshev nodes, in 50-digit arithmetic (mpmath), coefficients rounded to float32. The
script prints the coefficients (to paste into ``_FP``) and the fit's relative error in
float32 ulps, evaluated in float64 on a dense grid (the rounding of the float32 evaluation
itself is measured by ``tests/backends/cpu/test_vecmath.py``).
"""

from __future__ import annotations

import mpmath
import numpy as np

DEGREE = 10
NODES = 400


def fit(degree: int = DEGREE, nodes: int = NODES) -> list:
    mpmath.mp.dps = 50
    pts = [(1 - mpmath.cos(mpmath.pi * (2 * j + 1) / (2 * nodes))) / 2 for j in range(nodes)]  # in (0, 1)
    a = mpmath.matrix(nodes, degree + 1)
    b = mpmath.matrix(nodes, 1)
    for i, t in enumerate(pts):
        b[i] = mpmath.log1p(t) / t
        for j in range(degree + 1):
            a[i, j] = t**j
    c = mpmath.lu_solve(a.T * a, a.T * b)  # normal equations, in 50 digits
    return [np.float32(float(c[j])) for j in range(degree + 1)]


def main():
    coeffs = fit()
    t = np.linspace(0.0, 1.0, 400001)[1:]
    p = np.zeros_like(t)
    for c in reversed(coeffs):
        p = p * t + float(c)
    rel = np.abs(t * p - np.log1p(t)) / np.log1p(t)
    print("coefficients (float32):", ", ".join(repr(float(c)) for c in coeffs))
    print(f"fit error: {rel.max():.3e} relative = {rel.max() / 2**-24:.3f} float32 ulp (at most)")


if __name__ == "__main__":
    main()
