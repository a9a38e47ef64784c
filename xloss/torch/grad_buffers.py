"""A small reuse pool for the large output buffers of xloss's torch ops (xloss's own; no vendor has one).

Why: a fresh multi-hundred-megabyte buffer costs more than the kernel that fills it. glibc serves every
allocation above its mmap threshold (at most 32 MiB) with a new mapping, and the kernel faults in and
zeroes each page on first write: about 5x the cost of the write itself for an (8192, 32000) float32
gradient, every training step. The pool keeps a few such buffers mapped and hands one out again only when
no tensor uses it any more.

How it knows: each hand-out is a ``torch.from_numpy`` tensor over a fresh NumPy view of the pool's raw
buffer; that tensor's storage holds the view, and every torch view, detached alias, ``x.grad`` or
``.numpy()`` of the tensor keeps the storage. The pool keeps only a weak reference to the view, so the
buffer is free exactly when that reference is dead: a gradient the user holds (``x.grad``, a view of it,
one being accumulated into across micro-batches, one a retained graph saved) is never handed out again.

Bounds: buffers of at least :data:`MIN_BYTES` only (smaller ones are plain ``torch.empty``), at most
``XLOSS_TORCH_POOL_BUFFERS`` buffers (default 4) and ``XLOSS_TORCH_POOL_BYTES`` bytes (default 2 GiB) held;
a request that fits nowhere gets a plain ``torch.empty``. ``XLOSS_TORCH_POOL=0`` (read at import) or
:func:`set_enabled` turns it off; :func:`release_buffers` drops the free buffers and forgets the ones in use
(their memory then goes with their tensors).

Under ``torch.compile`` (and ``torch.func``) the ops' bodies run as in eager use and take pooled buffers, but
the traced backward hands autograd a copy of the op's gradient (the second-order guard's clone, or an
out-of-place product): the pooled buffer is free again when the backward ends and is reused next step, while
``x.grad`` is a fresh tensor there.
"""

from __future__ import annotations

import math
import os
import threading
import weakref

import numpy as np
import torch

from ..errors import XLossValueError

#: smallest buffer pooled. glibc maps anew each allocation whose chunk (request + header, page-rounded) exceeds
#: its 32 MiB mmap ceiling, so a request just under 32 MiB (8M floats less a row) is fresh too; at half the
#: ceiling a freed buffer's memory comes back from the heap (measured: a fresh 16 MiB write costs 1.3x a reused
#: one, 33 MiB 4.8x)
MIN_BYTES = 16 << 20
_ALIGN = 64  # torch's CPU allocator's alignment (AVX-512 loads); NumPy promises only 16


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit():
        raise XLossValueError(f"{name} must be a non-negative whole number; got {text!r}")
    return int(text)


class _Slot:
    """One raw buffer and the weak reference to the view its current tensor holds (None: never handed out)."""

    __slots__ = ("raw", "offset", "nbytes", "lease")

    def __init__(self, nbytes: int):
        self.raw = np.empty(nbytes + _ALIGN, dtype=np.uint8)
        self.offset = -self.raw.ctypes.data % _ALIGN
        self.nbytes = nbytes
        self.lease = None

    def free(self) -> bool:
        return self.lease is None or self.lease() is None

    def hand_out(self, shape, dtype: torch.dtype) -> torch.Tensor:
        view = self.raw[self.offset:self.offset + self.nbytes]  # a new ndarray each time: this lease's marker
        storage = torch.from_numpy(view).untyped_storage()  # the storage holds `view`
        self.lease = weakref.ref(view)
        return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


class BufferPool:
    """At most ``max_buffers`` raw buffers and ``max_bytes`` bytes, reused by exact byte size."""

    def __init__(self, *, enabled: bool = True, min_bytes: int = MIN_BYTES, max_buffers: int = 4,
                 max_bytes: int = 2 << 30):
        self.enabled, self.min_bytes = enabled, min_bytes
        self.max_buffers, self.max_bytes = max_buffers, max_bytes
        self._slots: list[_Slot] = []  # least recently handed out first
        self._lock = threading.Lock()

    def empty(self, shape, dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised contiguous CPU tensor of ``shape`` and ``dtype``: a pooled buffer when it is large
        enough and one is free or can be added within the bounds, else ``torch.empty``."""
        shape = tuple(shape)
        nbytes = math.prod(shape) * dtype.itemsize
        if not self.enabled or nbytes < self.min_bytes:
            return torch.empty(shape, dtype=dtype)
        with self._lock:  # a free slot is claimed (its lease set) before another thread can look at it
            slot = self._claim(nbytes)
            if slot is None:
                return torch.empty(shape, dtype=dtype)
            self._slots.append(slot)  # most recently used last
            return slot.hand_out(shape, dtype)

    def _claim(self, nbytes: int) -> _Slot | None:
        """A free slot of ``nbytes`` taken out of the list, or a new one if the bounds allow after evicting
        free slots of other sizes (least recently used first); None if every candidate is in use."""
        for i, slot in enumerate(self._slots):
            if slot.nbytes == nbytes and slot.free():
                return self._slots.pop(i)
        in_use = [s for s in self._slots if not s.free()]
        if len(in_use) >= self.max_buffers or sum(s.nbytes for s in in_use) + nbytes > self.max_bytes:
            return None  # no room even with every free slot evicted: evict nothing
        held = sum(s.nbytes for s in self._slots)
        for slot in [s for s in self._slots if s.free()]:
            if len(self._slots) < self.max_buffers and held + nbytes <= self.max_bytes:
                break
            self._slots.remove(slot)
            held -= slot.nbytes
        return _Slot(nbytes)

    def release(self) -> int:
        """Drop every buffer: free ones now; ones in use stay with their tensors. Returns the bytes dropped."""
        with self._lock:
            dropped, self._slots = self._slots, []
        return sum(s.nbytes for s in dropped)

    def stats(self) -> dict:
        """``{"buffers", "bytes", "in_use"}`` held now."""
        with self._lock:
            return {"buffers": len(self._slots), "bytes": sum(s.nbytes for s in self._slots),
                    "in_use": sum(not s.free() for s in self._slots)}


_POOL = BufferPool(enabled=os.environ.get("XLOSS_TORCH_POOL", "1").strip() != "0",
                   max_buffers=_env_int("XLOSS_TORCH_POOL_BUFFERS", 4),
                   max_bytes=_env_int("XLOSS_TORCH_POOL_BYTES", 2 << 30))


def empty(shape, dtype: torch.dtype) -> torch.Tensor:
    """A large op output from the process's pool (see the module text); small ones are ``torch.empty``."""
    return _POOL.empty(shape, dtype)


def release_buffers() -> int:
    """Give the pooled buffers' memory back (the free ones at once); returns the bytes the pool dropped."""
    return _POOL.release()


def set_enabled(enabled: bool) -> bool:
    """Turn the pool on or off for the process (off also releases its buffers); returns the previous setting."""
    previous, _POOL.enabled = _POOL.enabled, bool(enabled)
    if not enabled:
        _POOL.release()
    return previous


def pool_stats() -> dict:
    """What the pool holds now: ``{"buffers", "bytes", "in_use"}``."""
    return _POOL.stats()
