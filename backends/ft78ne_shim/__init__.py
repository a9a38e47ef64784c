"""The ``ft78ne`` and ``mt7004`` backends: the FT78NE/MT7004 DSP calling convention in C.

``libxloss_ft78ne.so`` (built from ``csrc/`` at install, headers in ``include/``) emulates
the DSPs on the host: ``fp_``/``hp_`` x ``_s`` (shared memory, work split over the cores of
``core_mask``) / ``_p`` (private memory of one core) for the five vendor operators. The
adapter (:mod:`.adapter`) drives it, or a vendor's / port author's library named by ``lib=`` or
``$XLOSS_FT78NE_LIB``, through cffi::

    xloss.focal_loss(x, y, backend="ft78ne")
    b = xloss.backend("mt7004", memory="private", core_mask=0x0F)
    xloss.bce_grad(x, y, eps_mode="add", backend=b)

Options: ``memory="shared"|"private"``, ``core_mask=`` (0x01..0xff, default 0xff),
``lib=`` (path, or list of paths), ``private_bytes=`` (the private memory per core that
``memory="private"`` stages into; default: the library's capacity). See README.md.
"""

from __future__ import annotations

import os

from . import abi
from .abi import EMULATOR, ENV_VAR
from .adapter import DspBackend


def library_path(lib=None) -> str:
    """The shared library in use: ``lib``, else ``$XLOSS_FT78NE_LIB``, else the in-tree emulator
    (several libraries are joined with ``os.pathsep``). C programs can link against it."""
    return os.pathsep.join(abi.resolve(lib))


def make_ft78ne(**options) -> DspBackend:
    """The ``ft78ne`` backend (fp32). Options: memory, core_mask, lib, private_bytes."""
    return DspBackend("ft78ne", **options)


def make_mt7004(**options) -> DspBackend:
    """The ``mt7004`` backend (fp16 and fp32). Options: memory, core_mask, lib, private_bytes."""
    return DspBackend("mt7004", **options)


__all__ = ["DspBackend", "EMULATOR", "ENV_VAR", "library_path", "make_ft78ne", "make_mt7004"]
