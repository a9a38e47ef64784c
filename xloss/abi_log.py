"""The vendor-ABI calls one kernel call made, as text: ``xloss check`` shows a failing case as the
call the library received (function, every scalar, buffer sizes), not only as xloss's arguments.

Recording is on only between :func:`begin` and :func:`taken` (the conformance runner brackets each
checked call with them); backends call :func:`record` for every ABI call, from any thread, before
making it. The check's child process listens (:func:`listen`): it sends each recorded text to the parent as
it is recorded, so a call that crashes or hangs the child is still shown as the library received it.
"""

from __future__ import annotations

import threading

#: At most this many calls are kept (a tiled private-memory run makes one per tile); the rest are counted.
LIMIT = 8

_lock = threading.Lock()
_calls: list[str] | None = None
_more = 0
_listener = None


def listen(fn) -> None:
    """Call ``fn(first, text)`` with each text :func:`record` keeps (``first``: the first since
    :func:`begin`), before the library is called; ``None`` stops."""
    global _listener
    _listener = fn


def begin() -> None:
    global _calls, _more
    with _lock:
        _calls, _more = [], 0


def record(text) -> None:
    """Keep ``text`` (a string, or a callable giving it: built only while recording)."""
    global _more
    with _lock:
        if _calls is None:
            return
        if len(_calls) >= LIMIT:
            _more += 1
            return
        first = not _calls
        _calls.append(text() if callable(text) else str(text))
        kept, listener = _calls[-1], _listener
    if listener is not None:
        listener(first, kept)


def taken() -> list[str]:
    """The calls recorded since :func:`begin` (recording stops)."""
    global _calls
    with _lock:
        calls, _calls = _calls or [], None
        return calls + ([f"... and {_more} more call(s)"] if _more else [])
