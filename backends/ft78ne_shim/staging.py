"""Private-memory staging for the FT78NE/MT7004 adapter: tile planning, per-core buffers, and
running tiles on the cores of a mask.

Interrupts and forks: the tiles of a call always run on worker threads (one long-lived thread per
core, shared by every staged call: a core serves one call at a time anyway), never on the calling
thread. Python delivers KeyboardInterrupt (SIGINT, ``_thread.interrupt_main``) to
the main thread only, so an interrupt can never fall between a private allocation and the record
that frees it: each worker frees every block it allocated, on every exit path, and releases its
core. The calling thread, interrupted while it waits, tells the workers to stop after their
current tile, waits for them, and re-raises; it shares no lock with them (:class:`_Done`), so an
interrupt anywhere in its wait cannot leave one corrupted. ``os.register_at_fork`` gives a forked child fresh
core locks and workers (a lock held by a parent thread that does not exist in the child would
never be released) and frees, in the child, the blocks those threads held; the arena code takes its own
mutex across ``fork`` (``csrc/arena.c``).
"""

from __future__ import annotations

import os
import queue
import threading
import traceback
from dataclasses import dataclass

import numpy as np

from ...errors import KernelError
from . import abi, guards

ALIGN = 64  # the emulator's allocation granularity; the tile planner counts in it

_locks: dict[tuple, threading.Lock] = {}
_locks_guard = threading.Lock()
#: live staging blocks: (library id, core, address) -> (library, owning thread ident)
_live: dict[tuple, tuple] = {}


def core_lock(lib, core: int) -> threading.Lock:
    """One lock per (library, core): a core's private memory serves one staged call at a time."""
    with _locks_guard:
        return _locks.setdefault((id(lib), core), threading.Lock())


class _Done:
    """A submitted function's completion, shared by one worker and the calling thread with no lock
    between them that an interrupt could leave corrupted (a ``threading.Event`` shares its
    condition's lock: an interrupt landing inside ``Event.wait`` can leave it released twice, and the
    worker's ``set`` then dies with "release unlocked lock", never serving its core again). The
    worker sets a flag and releases a lock it alone ever releases; the caller only polls the flag
    and takes that lock with a timeout to sleep, so an interrupt anywhere in its wait loses nothing."""

    __slots__ = ("flag", "_wake")

    def __init__(self):
        self.flag = False
        self._wake = threading.Lock()
        self._wake.acquire()  # released once, by the worker

    def set(self) -> None:
        self.flag = True
        self._wake.release()

    def wait(self, timeout: float) -> bool:
        if not self.flag:
            self._wake.acquire(timeout=timeout)  # C; an interrupt makes it return early, changes nothing
        return self.flag


class _Workers:
    """One daemon thread per core running submitted functions in order. No lock: a worker is started
    first and then filed with one ``dict.setdefault`` (atomic under the GIL), so an interrupt can leave
    at worst an idle thread unfiled, never a filed queue that nobody serves; a filed worker found dead
    is replaced (nothing it was given is awaited: its submitter was interrupted before it got the
    completion)."""

    def __init__(self):
        self.queues: dict[int, tuple[queue.SimpleQueue, threading.Thread]] = {}

    def submit(self, core: int, fn) -> _Done:
        entry = self.queues.get(core)
        if entry is None or not entry[1].is_alive():
            q = queue.SimpleQueue()
            mine = (q, threading.Thread(target=self._serve, args=(q,), name=f"xloss-ft78ne-core{core}", daemon=True))
            mine[1].start()
            if entry is None:
                entry = self.queues.setdefault(core, mine)
                if entry is not mine:  # another thread filed its worker first
                    q.put(None)
            else:
                self.queues[core] = entry = mine
        done = _Done()
        entry[0].put((fn, done))
        return done

    @staticmethod
    def _serve(q) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            fn, done = item
            try:
                fn()  # catches everything itself
            finally:
                done.set()
                del fn, done, item  # keep nothing of a finished call (its arrays) until the next one


_workers = _Workers()


def _after_fork_in_child() -> None:
    global _locks, _locks_guard, _workers
    _locks, _locks_guard, _workers = {}, threading.Lock(), _Workers()
    me = threading.get_ident()
    for (_, core, addr), (lib, owner) in list(_live.items()):
        if owner != me:  # that thread does not exist here: nobody else will free its block
            lib.ft78ne_emu_private_free(core, lib.ffi.cast("void *", addr))
            del _live[(id(lib), core, addr)]


os.register_at_fork(after_in_child=_after_fork_in_child)


def blk(nbytes: int) -> int:
    """Bytes an allocation of ``nbytes`` takes (at least one granule, as the allocator does)."""
    return max(1, -(-nbytes // ALIGN)) * ALIGN


def fit(budget: int, need, hi: int) -> int:
    """The largest t in [1, hi] with need(t) <= budget (need is non-decreasing); 0 if none."""
    if hi < 1 or need(1) > budget:
        return 0
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def ranges(n: int, t: int):
    """Bounds [lo, hi) of the fewest tiles of at most t items covering n, balanced (sizes differ by at
    most one: no small last tile, whose mean scale g*m/n would be the smallest); [(0, 0)] for n == 0."""
    if n == 0:
        return [(0, 0)]
    k = -(-n // t)
    bounds = [i * (n // k) + min(i, n % k) for i in range(k + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


@dataclass
class PBuf:
    """A buffer in a core's private memory: the vendor-call pointer and a NumPy view for staging."""

    ptr: object
    arr: np.ndarray


def run_private(backend, specs: dict, ntiles: int, stage_call, cores) -> None:
    """Run tiles 0..ntiles-1 on ``cores`` (tile i on core i mod k), each core on its own worker
    thread with its own buffers (module docstring).

    ``specs``: name -> (ctype, dtype, max count) of the private buffers a tile needs;
    ``stage_call(i, bufs)`` stages tile i into them, calls the vendor function and copies its
    results to host scratch. The first failure stops the other cores and is raised."""
    k = max(1, min(len(cores), ntiles))
    stop = threading.Event()
    errors: list[BaseException] = []

    def work(core, tiles):
        try:
            with core_lock(backend.lib, core):
                _on_core(backend, core, specs, tiles, stage_call, stop)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
            errors.append(exc)
            stop.set()

    pending = []
    interrupted = None
    try:
        for j in range(k):
            pending.append(_workers.submit(cores[j], lambda j=j: work(cores[j], range(j, ntiles, k))))
    except BaseException as exc:  # noqa: BLE001 - interrupted while submitting: the submitted ones stop early
        stop.set()
        interrupted = exc
    while True:  # whatever interrupts the caller, the workers finish their tile and free their blocks
        try:
            for done in pending:
                while not done.wait(0.05):
                    pass
            break
        except BaseException as exc:  # noqa: BLE001 - a KeyboardInterrupt while waiting
            stop.set()
            interrupted = interrupted or exc
    if interrupted is not None:
        raise interrupted
    if errors:
        # popped, not indexed: the traceback holds this frame, which must not hold the error (a cycle
        # that keeps the call's arrays alive until the garbage collector runs)
        error = errors.pop(0)
        # the workers' finished frames let their arrays go now, not at the next garbage collection
        traceback.clear_frames(error.__traceback__)
        raise error


def _on_core(backend, core, specs, tiles, stage_call, stop) -> None:
    lib, ffi = backend.lib, backend.ffi
    backend._select_core(core)
    held = []
    g = guards.GUARD if backend.guards else 0  # checked mode: guard bytes each side of every block
    blocks = backend._private_blocks.blocks = {} if backend.guards else None
    me = threading.get_ident()
    try:
        bufs = {}
        for name, (ctype, dtype, count) in specs.items():
            nbytes = max(1, count) * np.dtype(dtype).itemsize
            p = lib.ft78ne_emu_private_alloc(core, nbytes + 2 * g)
            if p == ffi.NULL:
                backend._raise_for_status("ft78ne_emu_private_alloc")
                raise KernelError(f"backend {backend.name!r}: could not allocate {nbytes} bytes for {name} in core "
                                  f"{core}'s private memory", status=abi.ERR_CAPACITY,
                                  status_name=abi.STATUS[abi.ERR_CAPACITY])
            held.append(p)
            _live[(id(lib), core, int(ffi.cast("uintptr_t", p)))] = (lib, me)
            inner = ffi.cast("char *", p) + g
            if blocks is not None:
                raw = np.frombuffer(ffi.buffer(p, nbytes + 2 * g), np.uint8)
                guards.poison(raw)
                blocks[int(ffi.cast("uintptr_t", inner))] = raw
            bufs[name] = PBuf(ffi.cast(ctype + " *", inner), np.frombuffer(ffi.buffer(inner, nbytes), dtype=dtype))
        for i in tiles:
            if stop.is_set():
                return
            stage_call(i, bufs)
    finally:
        backend._private_blocks.blocks = None
        for p in held:  # freed, then forgotten: a child forked in between frees nothing twice that exists
            lib.ft78ne_emu_private_free(core, p)
            _live.pop((id(lib), core, int(ffi.cast("uintptr_t", p))), None)
