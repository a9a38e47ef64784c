"""Making the backend under check from a name and options, as the command line gives them.

``xloss check`` makes it here (``--in-process``, ``--replay``), and so does each isolated child
(:func:`xloss.conformance.isolated.child_backend`): a refusal is the same one-line
:class:`~xloss.errors.UsageError` (exit status 2) in both.
"""

from __future__ import annotations

from .. import registry
from ..errors import BackendNotFoundError, BackendUnavailableError, UsageError


def make_backend(name: str, options: dict):
    """``xloss.backend(name, **options)`` with any refusal (unknown name, option or value, a library
    the backend cannot take) turned into one :class:`UsageError` line."""
    try:
        return registry.backend(name, **options) if options else registry.backend(name)
    except (BackendNotFoundError, BackendUnavailableError):
        raise
    except (TypeError, ValueError) as exc:  # a factory refusing an option it does not take
        exc = exc.__cause__ or exc  # the factory's own words, not the registry's wrapping
        given = ", ".join(f"{k}={v}" for k, v in options.items())
        what = "--lib (it takes no library)" if "lib" in options and "'lib'" in str(exc) else f"options {given}"
        raise UsageError(f"backend {name!r} does not accept {what}: {exc}") from None
