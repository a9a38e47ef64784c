"""Drawn cases that depend on the seed alone.

Since 6.131 hypothesis mixes into its draws the numeric and string literals of every *local*
module the process has imported (anything outside site-packages and the standard library that is
not a test file). So one ``--seed`` drew different cases from an editable install of xloss than from
``pip install .``, and would from a port author's own script folder: a probe that found a bug on
a developer's checkout called the same port PASSED in CI. While the suite draws, that pool is
empty: the cases are a function of the seed and the hypothesis version only.
"""

from __future__ import annotations

import contextlib
import threading

_lock = threading.Lock()


def _providers():
    """Hypothesis's provider module where it has a local-constant pool (None before 6.131)."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - a hypothesis without the module has no pool either
        return None
    if not callable(getattr(providers, "_get_local_constants", None)) or not hasattr(providers, "Constants"):
        return None
    return providers


def _clear(providers) -> None:
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if cache is not None and hasattr(getattr(cache, "cache", None), "clear"):
        cache.cache.clear()  # the permitted-constant tuples were computed from the pool in force


@contextlib.contextmanager
def seed_only():
    """Hypothesis draws inside the block use no constants from the importing program."""
    providers = _providers()
    if providers is None:
        yield
        return
    with _lock:
        empty = providers.Constants()
        saved = providers._get_local_constants
        providers._get_local_constants = lambda: empty
        _clear(providers)
        try:
            yield
        finally:
            providers._get_local_constants = saved
            _clear(providers)
