"""How the ``cpu`` backend shares threads with its host process: fork, interrupts, locks.

**Fork.** GNU OpenMP (the runtime behind Numba's ``omp`` threading layer, and behind PyTorch's
CPU build) does not survive ``fork()``: the child inherits the pool's bookkeeping but not its
threads. Numba's ``omp`` layer kills such a child with SIGTERM at its first parallel launch
("fork() called from a process already using GNU OpenMP"), and a multi-threaded PyTorch
operation in it waits forever for threads that do not exist. So a child forked after this
process launched a parallel kernel runs the cpu kernels *serially*: every ``parallel=True``
kernel of this package is swapped, in the child only, for a twin compiled without
``parallel`` (cached on disk beside the parallel one, under its own name), and PyTorch's
thread count is set to 1 there — what a DataLoader worker does — so the FLCE products do not
wait on the dead pool. Locks of this package that another thread held at the fork are
replaced in the child (only the forking thread survives ``fork()``).

**One OpenMP runtime.** PyTorch's CPU wheel ships its own GNU OpenMP; Numba's ``omp`` layer
links whichever ``libgomp`` the dynamic linker finds. Two copies mean two thread pools whose
idle threads spin (GNU OpenMP's default wait) while the other pool works: on a 2-core machine,
a training loop alternating torch layers and xloss kernels then runs up to four busy threads on
two cores. Before Numba's layer first loads, :func:`share_openmp_runtime` puts PyTorch's runtime
(when PyTorch is installed) in the process's global symbol scope, so Numba's parallel regions
bind to it: one pool, whose threads go straight from a torch operation to an xloss kernel.
(With ``import torch`` before the first kernel this happens anyway; this makes the import order
irrelevant, and costs a ``dlopen``, not a torch import.)

**Passive waiting** (``OMP_WAIT_POLICY=PASSIVE``, set when xloss is imported) is decided in
:mod:`xloss.openmp`, before any backend loads.

**Interrupts.** Numba's thread count is a per-thread setting that the backend changes for the
duration of a call (the ``threads=`` option, the single-thread rule for small inputs). A
KeyboardInterrupt raised between the change and the ``finally`` that undoes it would leave it
changed for good. In the main thread (the only one Python delivers signals to) a cpu call
therefore holds SIGINT until it returns: a Ctrl-C during the call is delivered to the
previous handler right after the call, with every setting restored and every output
complete. A Numba kernel cannot be interrupted mid-way anyway, so this costs no
responsiveness beyond the call's own duration.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import types

from ...openmp import OPENMP_NAMES

#: The package whose kernel modules (every loaded submodule) are switched to serial twins in a
#: forked child.
_PACKAGE = __name__.rsplit(".", 1)[0]

_state = threading.local()  # per thread: inside a deferred-SIGINT region?
_serial_only = False  # set in a forked child whose parent had started a parallel layer
_twins: dict = {}  # original dispatcher -> serial twin (filled lazily in the child)
_twin_lock = threading.Lock()


# -- fork ------------------------------------------------------------------------------------


def parallel_layer_started() -> bool:
    """True once Numba has loaded its threading layer in this process (a parallel kernel ran)."""
    mod = sys.modules.get("numba.np.ufunc.parallel")
    return bool(mod is not None and getattr(mod, "_is_initialized", False))


def fork_unsafe_layer() -> bool:
    """True if the loaded layer cannot launch in a forked child (GNU OpenMP)."""
    if not parallel_layer_started():
        return False
    import numba

    try:
        return numba.threading_layer() == "omp"
    except ValueError:
        return False


def serial_only() -> bool:
    """True in a forked child that must run every kernel on the calling thread."""
    return _serial_only


def _serial_twin(dispatcher):
    """``dispatcher``'s function compiled without ``parallel`` (``prange`` becomes ``range``),
    cached on disk under its own name so it never shares an entry with the parallel one."""
    from numba import njit

    f = dispatcher.py_func
    g = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    g.__qualname__ = f"{f.__qualname__}__serial"
    g.__module__, g.__doc__ = f.__module__, f.__doc__
    g.__kwdefaults__ = f.__kwdefaults__
    options = dict(dispatcher.targetoptions)
    options["parallel"] = False
    options.pop("nopython", None)  # implied by njit (it warns when given)
    twin = njit(**options)(g)
    # ``cache=True`` is not a target option: it made the original's cache, so ask for one alike
    # (else the twin gets Numba's NullCache and every forked child compiles every kernel again)
    if type(dispatcher._cache).__name__ != "NullCache":
        twin.enable_caching()
    return twin


def _is_parallel_dispatcher(obj) -> bool:
    opts = getattr(obj, "targetoptions", None)
    return isinstance(opts, dict) and bool(opts.get("parallel")) and hasattr(obj, "py_func")


def use_serial_kernels() -> None:
    """Point every loaded module of this package at serial twins of its parallel kernels (this
    process only; a kernel must be called through its module's global, as every driver here
    does). Idempotent; twins compile (or load from the disk cache) on first use."""
    with _twin_lock:
        for mod_name, mod in list(sys.modules.items()):
            if mod is None or not mod_name.startswith(_PACKAGE + "."):
                continue
            for name, obj in list(vars(mod).items()):
                if _is_parallel_dispatcher(obj):
                    twin = _twins.get(obj)
                    if twin is None:
                        twin = _twins[obj] = _serial_twin(obj)
                    setattr(mod, name, twin)


def _after_fork_in_child() -> None:
    global _serial_only, _twin_lock
    _twin_lock = threading.Lock()
    _state.__dict__.clear()
    for hook in _child_hooks:
        hook()
    if fork_unsafe_layer():
        _serial_only = True
        torch = sys.modules.get("torch")
        if torch is not None:
            try:
                torch.set_num_threads(1)  # the parent's OpenMP pool did not come along
            except Exception:  # never fail a fork over this
                pass


_child_hooks: list = []


def on_fork_child(hook) -> None:
    """Run ``hook()`` in every child forked from now on (e.g. to replace a lock)."""
    _child_hooks.append(hook)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- one OpenMP runtime ---------------------------------------------------------------------


def torch_openmp_runtime() -> str | None:
    """Path of the OpenMP runtime bundled with the installed PyTorch (without importing it)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    libdir = os.path.join(list(spec.submodule_search_locations)[0], "lib")
    try:
        names = sorted(os.listdir(libdir))
    except OSError:
        return None
    for stem in OPENMP_NAMES:
        for name in names:
            if name.startswith(stem) and ".so" in name:
                return os.path.join(libdir, name)
    return None


_shared_runtime: str | None = None


def share_openmp_runtime() -> str | None:
    """Make Numba's ``omp`` layer use PyTorch's OpenMP runtime (call before the layer loads).
    Returns the runtime's path, or None where there is nothing to share or it is too late."""
    global _shared_runtime
    if _shared_runtime is not None or parallel_layer_started() or sys.platform != "linux":
        return _shared_runtime
    if os.environ.get("NUMBA_THREADING_LAYER", "default") not in ("default", "omp", "safe", "threadsafe"):
        return None
    path = torch_openmp_runtime()
    if path is None:
        return None
    import ctypes

    try:
        ctypes.CDLL(path, mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    except OSError:
        return None
    _shared_runtime = path
    return path


# -- interrupts ------------------------------------------------------------------------------


@contextlib.contextmanager
def sigint_held():
    """Hold SIGINT for the enclosed block (main thread only; elsewhere a no-op) and deliver it
    to the previous handler on the way out, after the block's own cleanup has run."""
    if (threading.current_thread() is not threading.main_thread() or getattr(_state, "holding", False)):
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or previous is signal.SIG_IGN:  # set outside Python, or ignored: leave it
        yield
        return
    caught = []

    def hold(signum, frame):
        caught.append(frame)

    signal.signal(signal.SIGINT, hold)
    _state.holding = True
    try:
        yield
    finally:
        _state.holding = False
        signal.signal(signal.SIGINT, previous)
        if caught:
            _deliver(previous, caught[0])


def _deliver(handler, frame) -> None:
    if handler is signal.SIG_DFL:
        os.kill(os.getpid(), signal.SIGINT)  # the default action, now that it is back
    else:
        handler(signal.SIGINT, frame)

