"""The NLL-loss backward's descriptor lives in its family: this name is that module
(:mod:`xloss.kernels.nll.conformance`), so imports and ``monkeypatch`` reach the same module."""

import sys

from xloss.kernels.nll import conformance as _module

sys.modules[__name__] = _module
