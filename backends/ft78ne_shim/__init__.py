"""The ``ft78ne`` and ``mt7004`` backends: the FT78NE/MT7004 DSP calling convention in C.

``libxloss_ft78ne.so`` (built from ``csrc/`` at install, headers in ``include/``) emulates
the DSPs on the host: ``fp_``/``hp_`` x ``_s`` (shared memory, work split over the cores of
``core_mask``) / ``_p`` (private memory of one core) for the five vendor operators. The
backend (:mod:`.backend`) drives it, or a vendor's / port author's library named by ``lib=`` or
``$XLOSS_FT78NE_LIB``, through cffi::

    xloss.focal_loss(x, y, backend="ft78ne")
    b = xloss.backend("mt7004", memory="private", core_mask=0x0F)
    xloss.bce_grad(x, y, eps_mode="add", backend=b)

Options: ``memory="shared"|"private"`` (default ``$XLOSS_FT78NE_MEMORY`` or shared),
``core_mask=`` (0x01..0xff, default 0xff), ``lib=`` (path, or list of paths), ``private_bytes=``
(the private memory per core that ``memory="private"`` stages into; default: the library's
capacity). See README.md.

A port author links against the private-memory shim (:func:`private_shim_path`: the emulator's
arenas and helpers, no operator) to test their ``_p`` functions with ``memory="private"``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import BackendUnavailableError
from . import abi
from .abi import EMULATOR, ENV_VAR
from .backend import DspBackend

PRIVATE_SHIM = abi.PRIVATE_SHIM


def library_path(lib=None) -> str:
    """The shared library in use: ``lib``, else ``$XLOSS_FT78NE_LIB``, else the in-tree emulator
    (several libraries are joined with ``os.pathsep``). C programs can link against it."""
    return os.pathsep.join(abi.resolve(lib))


def include_dir() -> str:
    """The folder of ``ft78ne.h``, the per-operator headers and ``ft78ne_emu.h``, for ``-I``."""
    return str(Path(__file__).resolve().with_name("include"))


def private_shim_path() -> str:
    """``libxloss_ft78ne_private.so``: the emulator's private arenas and helpers without any operator.
    Link a port against it (``-L<dir> -lxloss_ft78ne_private -Wl,-rpath,<dir>``) and list it after
    the port (``--lib ./libmy_dsp.so:<this path>``) to test the port's ``_p`` functions; see README.md.
    Built with the emulator; BackendUnavailableError (with the command that builds it) if it is not."""
    if not PRIVATE_SHIM.exists():
        raise BackendUnavailableError(
            f"{PRIVATE_SHIM} is not built: python {Path(__file__).resolve().with_name('build.py')} --shim "
            f"(or --shim --out DIR/{PRIVATE_SHIM.name})")
    return str(PRIVATE_SHIM)


def make_ft78ne(**options) -> DspBackend:
    """The ``ft78ne`` backend (fp32). Options: memory, core_mask, lib, private_bytes."""
    return DspBackend("ft78ne", **options)


def make_mt7004(**options) -> DspBackend:
    """The ``mt7004`` backend (fp16 and fp32). Options: memory, core_mask, lib, private_bytes."""
    return DspBackend("mt7004", **options)


__all__ = ["DspBackend", "EMULATOR", "ENV_VAR", "PRIVATE_SHIM", "include_dir", "library_path", "make_ft78ne",
           "make_mt7004", "private_shim_path"]
