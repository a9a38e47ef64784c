"""Fixtures of the cpu backend tests: the backend, and a checker against the float64 oracle.

The checker goes through the conformance descriptors (``xloss.conformance``): the oracle is
``xloss.reference`` and the tolerance is the project's per-dtype model (a few output ulps plus
a small multiple of the compute epsilon times the magnitude of the terms), so these tests
and the generic suite agree on what "correct" means. The cases here are the ones that only
this backend's structure makes interesting: block and SIMD boundaries, weight walks, thread
counts, chunking, output buffers, BLAS providers.
"""

import numpy as np
import pytest

import xloss
from xloss.conformance import DESCRIPTORS, Case


@pytest.fixture(scope="session")
def cpu():
    b = xloss.backend("cpu")
    ok, why = b.availability()
    if not ok:
        pytest.skip(f"cpu backend unavailable: {why}")
    return b


def run_case(kernel: str, mode, dtype: str, backend, **kwargs) -> list:
    """Run one call on ``backend`` and assert every output is within tolerance of the oracle."""
    case = Case(kernel, mode, dtype, kwargs)
    results = DESCRIPTORS[kernel].check(case, backend)
    bad = [r for r in results if not r.ok]
    assert not bad, "\n".join(f"{r.name}: {r.detail} (max ulp {r.max_ulp:.3g})" for r in bad) + "\n" + case.describe()
    return results


@pytest.fixture(scope="session")
def check():
    return run_case


def cast_to(values, dtype: str) -> np.ndarray:
    """float64 values rounded to the named dtype (bfloat16 as an ml_dtypes array)."""
    return np.asarray(values, dtype=np.float64).astype(xloss.dtypes.FLOAT_DTYPES[dtype])


@pytest.fixture(scope="session")
def cast():
    return cast_to
