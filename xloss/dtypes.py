"""The floating dtypes xloss speaks, by name, and their precision facts.

NumPy has no bfloat16; xloss uses ``ml_dtypes.bfloat16`` for it, so a bf16 NumPy array is
an ``ml_dtypes`` array and a bf16 torch tensor crosses over as one without a copy.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

#: name -> NumPy dtype, for every floating dtype xloss knows.
FLOAT_DTYPES: dict[str, np.dtype] = {
    "float16": np.dtype(np.float16),
    "bfloat16": BFLOAT16,
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
}

#: Integer dtypes accepted for class indices (NLL target, FLCE masked_target).
INDEX_DTYPES: dict[str, np.dtype] = {
    "int64": np.dtype(np.int64),
    "int32": np.dtype(np.int32),
    "uint8": np.dtype(np.uint8),
}

_MANTISSA_BITS = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}
_MIN_EXPONENT = {"float16": -14, "bfloat16": -126, "float32": -126, "float64": -1022}


def float_name(dtype) -> str | None:
    """The xloss name of a floating dtype, or None if xloss does not support it."""
    dt = np.dtype(dtype)
    for name, known in FLOAT_DTYPES.items():
        if dt == known:
            return name
    return None


def compute_dtype(name: str) -> np.dtype:
    """The dtype kernels compute and accumulate in: float64 for float64, float32 otherwise."""
    return FLOAT_DTYPES["float64"] if name == "float64" else FLOAT_DTYPES["float32"]


def eps(name: str) -> float:
    """Machine epsilon (distance from 1 to the next value) of the named dtype."""
    return 2.0 ** -_MANTISSA_BITS[name]


def tiny(name: str) -> float:
    """Smallest positive normal number of the named dtype."""
    return 2.0 ** _MIN_EXPONENT[name]


def ulp(values, name: str) -> np.ndarray:
    """Unit in the last place of ``|values|`` in the named dtype (float64 array).

    Below the smallest normal the spacing is the smallest subnormal; inf stays inf.
    """
    v = np.abs(np.asarray(values, dtype=np.float64))
    mant, emin = _MANTISSA_BITS[name], _MIN_EXPONENT[name]
    with np.errstate(divide="ignore", invalid="ignore"):
        _, exp = np.frexp(v)  # v = m * 2**exp with m in [0.5, 1)
    spacing = np.ldexp(1.0, np.maximum(exp - 1, emin) - mant)
    return np.where(np.isfinite(v), spacing, np.inf)


def cast(values, name: str) -> np.ndarray:
    """Round float64 values to the named dtype (round-to-nearest-even)."""
    return np.asarray(values).astype(FLOAT_DTYPES[name])
