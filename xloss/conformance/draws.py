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
_depth = 0  # blocks open, over all threads: the first installs the empty pool, the last restores
_saved = None


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


def has_local_pool() -> bool:
    """Whether this hypothesis mixes the importing program's constants into its draws."""
    return _providers() is not None


@contextlib.contextmanager
def program_constants():
    """The state outside every :func:`seed_only` block, for the test that shows the guard matters:
    inside, hypothesis uses the importing program's constants again (a block opened inside still
    empties them). Not for use while other threads draw."""
    global _depth, _saved
    providers = _providers()
    if providers is None:
        yield
        return
    with _lock:
        state = _depth, _saved, providers._get_local_constants
        providers._get_local_constants = _saved if _depth else providers._get_local_constants
        _depth, _saved = 0, None
        _clear(providers)
    try:
        yield
    finally:
        with _lock:
            _depth, _saved, providers._get_local_constants = state
            _clear(providers)


@contextlib.contextmanager
def seed_only():
    """Hypothesis draws inside the block use no constants from the importing program."""
    global _depth, _saved
    providers = _providers()
    if providers is None:
        yield
        return
    with _lock:
        if _depth == 0:
            empty = providers.Constants()
            _saved, providers._get_local_constants = providers._get_local_constants, lambda: empty
            _clear(providers)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                providers._get_local_constants, _saved = _saved, None
                _clear(providers)
