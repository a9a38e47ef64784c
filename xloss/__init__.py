"""xloss: loss kernels (focal, BCE gradient, NLL backward, fused linear cross entropy) with
one API over a Numba CPU backend and C backends that speak vendor ABIs (Ascend aclnn,
FT78NE/MT7004 DSP).

    >>> import numpy as np, xloss
    >>> x = np.array([-2.0, 0.5], dtype=np.float32); y = np.array([0.0, 1.0], dtype=np.float32)
    >>> loss, dx = xloss.focal_loss_with_grad(x, y, reduction="mean")
"""

import pathlib as _pathlib

# Installed, ``xloss.reference`` and ``xloss.backends`` live in this folder (setup.py maps the
# repository's top-level ``reference/`` and ``backends/`` here). From a source checkout they are
# this folder's siblings: search the checkout root too, so the tree imports as it installs.
_here = _pathlib.Path(__file__).resolve().parent
if not (_here / "reference").is_dir() and (_here.parent / "reference" / "__init__.py").is_file():
    __path__.append(str(_here.parent))  # noqa: F821 (a package's __path__)
del _here, _pathlib

from .backend import Backend, KernelCaps
from .errors import (
    BackendNotFoundError,
    BackendUnavailableError,
    KernelError,
    UnsupportedRequestError,
    XLossError,
    XLossIndexError,
    XLossMemoryError,
    XLossTypeError,
    XLossValueError,
)
from .kernels import KERNELS as _KERNELS
from .registry import backend, list_backends, register_backend, unregister_backend

#: each kernel's public functions and result types, as its row names them
_KERNEL_EXPORTS = {name: getattr(row.load("api"), name) for row in _KERNELS.values()
                   for name in (*row.functions, *row.exports)}
globals().update(_KERNEL_EXPORTS)

__version__ = "0.1.0"

__all__ = [
    "Backend", "BackendNotFoundError", "BackendUnavailableError", "KernelCaps", "KernelError",
    "UnsupportedRequestError", "XLossError", "XLossIndexError", "XLossMemoryError", "XLossTypeError",
    "XLossValueError",
    "backend", "list_backends", "register_backend", "unregister_backend",
    *_KERNEL_EXPORTS,
]

# The OpenMP wait policy must be set before any OpenMP runtime loads (before torch): see xloss/openmp.py.
from . import openmp as _openmp  # noqa: E402,F401
