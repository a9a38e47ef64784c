"""Every exception xloss raises derives from :class:`XLossError`.

The concrete classes also derive from the matching builtin (``ValueError``,
``TypeError``, ``IndexError``, ``RuntimeError``) so callers that already catch
those keep working.
"""

from __future__ import annotations


class XLossError(Exception):
    """Base class of every error raised by xloss."""


class XLossValueError(XLossError, ValueError):
    """An argument has the right type but a bad value or shape."""


class UsageError(XLossError):
    """A mistake on the command line (printed as one line; exit status 2)."""


class XLossTypeError(XLossError, TypeError):
    """An argument has the wrong type or dtype."""


class XLossIndexError(XLossError, IndexError):
    """A class index (target) lies outside the valid range."""


class BackendNotFoundError(XLossValueError):
    """No backend of that name is registered."""


class BackendUnavailableError(XLossError, RuntimeError):
    """The backend is registered but cannot run here (missing library, compiler, ...)."""


class UnsupportedRequestError(XLossValueError):
    """The backend does not declare the requested dtype, reduction or variant."""


class XLossMemoryError(XLossError, MemoryError):
    """A kernel ran out of memory after validation let it through (the guard counts what validation
    allocates, not a backend's own working arrays)."""


class KernelError(XLossError, RuntimeError):
    """A backend kernel reported a failure (e.g. a vendor status code).

    ``status`` is the vendor's numeric code (or None) and ``status_name`` its symbolic name.
    """

    def __init__(self, message: str, *, status: int | None = None, status_name: str | None = None):
        super().__init__(message)
        self.status = status
        self.status_name = status_name


class PortViolation(KernelError):
    """A library broke the memory contract of its ABI: it wrote where it must not.

    Raised by the C adapters in their checked mode (:meth:`xloss.Backend.checked`, used by
    ``xloss check``). ``buffer`` names the argument as the ABI names it (``dx``, ``self``,
    ``softmaxOptional``), ``offset`` is the first offending byte relative to the start of that
    buffer (negative: before it), ``nbytes`` how many bytes differ.
    """

    kind = "memory contract violation"

    def __init__(self, message: str, *, buffer: str, offset: int | None = None, nbytes: int | None = None):
        super().__init__(message)
        self.buffer = buffer
        self.offset = offset
        self.nbytes = nbytes


class OutOfBoundsWrite(PortViolation):
    """Bytes in a guard region around a buffer handed to the library changed during the call."""

    kind = "out-of-bounds write"


class InputModified(PortViolation):
    """The library changed a buffer the ABI declares as an input (const)."""

    kind = "wrote into input"


class PhaseOneWrite(PortViolation):
    """A two-phase ABI's first phase (Ascend ``GetWorkspaceSize``) wrote into a buffer: on the device
    that phase runs on the host and cannot write device memory."""

    kind = "write during phase one"


class RepeatMismatch(PortViolation):
    """An executor made repeatable (Ascend ``aclSetAclOpExecutorRepeatable``) gave other results
    when run a second time."""

    kind = "repeatable executor disagrees with itself"
