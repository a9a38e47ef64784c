"""Moved to :mod:`xloss.kernels.flce.conformance`; this name stays an alias of that module."""

import sys

from xloss.kernels.flce import conformance as _module

sys.modules[__name__] = _module
