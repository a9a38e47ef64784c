"""Moved to :mod:`xloss.kernels.flce.vocab_parallel_conformance`; this name stays an alias of that module."""

import sys

from xloss.kernels.flce import vocab_parallel_conformance as _module

sys.modules[__name__] = _module
