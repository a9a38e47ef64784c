"""The fused cross entropy's streaming-store path (``backends/cpu_onednn/streaming.py``: a large gradient is
written with non-temporal stores) gives the same bits as its normal-store path: the same arithmetic, only
the stores differ. Every dtype, rows shorter than a cache line and rows of several staging runs, targets
in the row's unaligned head, in later runs and ignored, label smoothing and class weights; a gradient
buffer on and off a 64-byte boundary; and one output past the default size threshold (streamed when reused,
not when fresh)."""

import numpy as np
import pytest

import xloss
from xloss.backends.cpu_onednn import cross_entropy_fused, streaming
from xloss.dtypes import FLOAT_DTYPES


@pytest.fixture
def took(monkeypatch):
    """The streaming decision of each call (so a test knows which path it ran)."""
    seen = []
    choose = cross_entropy_fused.use_streaming

    def spy(*args):
        seen.append(choose(*args))
        return seen[-1]

    monkeypatch.setattr(cross_entropy_fused, "use_streaming", spy)
    return seen


def _out(shape, dtype, offset):
    """An output buffer whose first element lies ``offset`` elements past a 64-byte boundary, its pages
    written once (streaming is for reused buffers), every byte 0xFF (so a missed element shows)."""
    dt = np.dtype(FLOAT_DTYPES[dtype])
    raw = np.full(int(np.prod(shape)) * dt.itemsize + 128, 0xFF, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset * dt.itemsize
    return raw[start:start + int(np.prod(shape)) * dt.itemsize].view(dt).reshape(shape)


def _both_paths(monkeypatch, took, x, t, offset, **kw):
    results = []
    for threshold in (1 << 62, 0):
        monkeypatch.setattr(streaming, "STREAM_MIN_BYTES", threshold)
        out = _out(x.shape, x.dtype.name, offset)
        loss, dx = xloss.cross_entropy_loss_with_grad(x, t, backend="cpu", grad_out=out, **kw)
        assert dx is out
        results.append((np.asarray(loss).tobytes(), dx.view(np.uint8).copy()))
    assert took[-2:] == [False, streaming.STREAMING_CPU]
    return results


@pytest.mark.parametrize("offset", [0, 3])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_streaming_stores_give_the_same_bits(monkeypatch, took, dtype, offset):
    rng = np.random.default_rng(7)
    for n, c, t in ((5, 3, [0, 2, -100, 1, 1]), (6, 5003, [0, 15, 2047, 2100, 5002, -100])):
        x = rng.normal(0, 3, (n, c)).astype(np.float32).astype(FLOAT_DTYPES[dtype])
        kw = dict(reduction="sum", label_smoothing=0.1, weight=rng.uniform(0.5, 2, c).astype(
            np.float64 if dtype == "float64" else np.float32))
        for extra in ({}, kw):
            normal, streamed = _both_paths(monkeypatch, took, x, np.array(t), offset, **extra)
            assert normal[0] == streamed[0] and np.array_equal(normal[1], streamed[1]), (n, c, extra)


def test_a_gradient_past_the_default_threshold_streams(took):
    """At the default threshold (no patch): 264 x 32003 float32 is 33.8 MB, the streaming path into a buffer
    in use, the normal one into a fresh one; the results against the normal path's on the same rows cut in
    two calls under the threshold."""
    rng = np.random.default_rng(3)
    x = rng.normal(0, 2, (264, 32003)).astype(np.float32)
    t = rng.integers(0, 32003, 264)
    t[::5] = -100
    _, dx = xloss.cross_entropy_loss_with_grad(x, t, reduction="sum", backend="cpu", grad_out=_out(x.shape, "float32",
                                                                                                      1))
    _, fresh = xloss.cross_entropy_loss_with_grad(x, t, reduction="sum", backend="cpu")
    assert took == [streaming.STREAMING_CPU, False]
    for half in (slice(0, 132), slice(132, 264)):
        _, part = xloss.cross_entropy_loss_with_grad(x[half], t[half], reduction="sum", backend="cpu")
        assert np.array_equal(part, dx[half]) and np.array_equal(part, fresh[half])
    assert took[2:] == [False, False]
