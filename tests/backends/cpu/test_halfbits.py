"""bfloat16/float16 widening (all 65536 patterns) and rounding back (a sweep of float32
patterns plus every rounding boundary), against ml_dtypes and NumPy casts."""

import ml_dtypes
import numpy as np
import pytest

from xloss.backends.cpu_onednn.access import convert_into, storage_view

BF16 = np.dtype(ml_dtypes.bfloat16)
ALL16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)


def _same_bits_or_both_nan(got_f32: np.ndarray, ref_f32: np.ndarray):
    nan = np.isnan(ref_f32)
    np.testing.assert_array_equal(np.isnan(got_f32), nan)
    np.testing.assert_array_equal(got_f32[~nan].view(np.uint32), ref_f32[~nan].view(np.uint32))


@pytest.mark.parametrize("half", [BF16, np.dtype(np.float16)], ids=["bfloat16", "float16"])
def test_widening_is_exact_for_every_pattern(half):
    src = ALL16.view(half)
    out = np.empty(src.size, np.float32)
    convert_into(storage_view(src), out)
    _same_bits_or_both_nan(out, src.astype(np.float32))


def _narrowing_inputs() -> np.ndarray:
    sweep = np.arange(0, 2**32, 4093, dtype=np.uint64).astype(np.uint32)
    near = []
    for half in (BF16, np.dtype(np.float16)):
        # every representable half value, and float32 neighbours of every midpoint between two
        centers = ALL16.view(half).astype(np.float32)
        centers = centers[np.isfinite(centers)].astype(np.float64)
        mids = ((centers[:-1] + centers[1:]) / 2).astype(np.float32)
        for base in (centers.astype(np.float32), mids):
            b = base.view(np.uint32).astype(np.int64)
            for d in (-1, 0, 1):
                near.append((b + d).astype(np.uint32))
    specials = np.array([np.inf, -np.inf, np.nan, 65504.0, 65519.996, 65520.0, 3.3895314e38, 3.4e38, 1e-45,
                         5.96e-8, 2.98e-8, 2.9802322e-08, 6.1035156e-05], np.float32).view(np.uint32)
    return np.concatenate([sweep, *near, specials]).view(np.float32)


@pytest.mark.parametrize("half", [BF16, np.dtype(np.float16)], ids=["bfloat16", "float16"])
def test_narrowing_rounds_to_nearest_even(half):
    x = _narrowing_inputs()
    out = np.empty(x.size, half)
    convert_into(x, storage_view(out))
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(half)
    _same_bits_or_both_nan(out.astype(np.float32), ref.astype(np.float32))
    # and the bit patterns themselves (signed zeros, infinities), NaN aside
    nan = np.isnan(ref.astype(np.float32))
    np.testing.assert_array_equal(out.view(np.uint16)[~nan], ref.view(np.uint16)[~nan])
