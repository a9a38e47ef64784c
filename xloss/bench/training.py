"""Moved to :mod:`xloss.kernels.flce.training`; this name stays an alias of that module."""

import sys

from xloss.kernels.flce import training as _module

sys.modules[__name__] = _module
