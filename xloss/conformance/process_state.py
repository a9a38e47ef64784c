"""Process-wide state a port must leave as it found it, and the memory a port must give back.

Around every checked call (:func:`.execute.call_checked`) xloss takes a :func:`snapshot` of what a
library can change for the whole process and compares it after the call (:func:`changes`):

* the floating-point environment: the rounding mode (``fegetround``), and on x86-64 the x87
  control word and the MXCSR control bits (flush-to-zero, denormals-are-zero, SSE rounding,
  exception masks; the sticky exception flags are results, not state, and are ignored); on
  AArch64 the FPCR;
* every signal's disposition (``sigaction``: handler and flags) and the blocked-signal mask;
* the threads the libraries started (the process's threads less those Python's ``threading``
  started, e.g. an adapter's own workers). A pool started or grown lazily is fine: only the
  threads the checked calls themselves left running are counted, net, over the process's life
  (threads other code starts between calls are not theirs), and a call fails when that count
  passes what thread pools need, two per CPU (say an OpenMP runtime and a BLAS each): a thread
  left behind per call gets there within a few calls.

Whatever changed is put back (:func:`restore`) so the rest of the run, the oracle included, is not
computed under the port's rounding mode. :func:`bytes_per_call` measures how much memory a call
keeps (malloc's bytes in use, ``mallinfo2``, and the resident set), for the leak warning.

Linux with glibc; elsewhere the parts that cannot be read are left out (:data:`AVAILABLE` says which).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import platform
import signal
import time
from dataclasses import dataclass

_MACHINE = platform.machine().lower()
_X86 = _MACHINE in ("x86_64", "amd64")
_ARM = _MACHINE in ("aarch64", "arm64")
#: glibc's fenv_t (x86-64: 32 bytes, MXCSR at byte 28; AArch64: FPCR, FPSR) and struct sigaction
#: (64-bit: 152 bytes, sa_flags at byte 136)
_FENV_BYTES, _MXCSR_AT = 32, 28
_SIGACTION_BYTES, _SA_FLAGS_AT = 152, 136
_SA_RESTORER = 0x04000000  # glibc's sigaction sets it with any handler: not the library's doing
ROUNDING = {0x000: "to nearest", 0x400: "downward", 0x800: "upward", 0xC00: "toward zero"}
#: MXCSR bits that are control, not sticky flags (bits 0-5 are the exception flags)
_MXCSR_CONTROL = 0xFFC0
_MXCSR_BITS = (((1 << 15), "flush-to-zero (FTZ)"), ((1 << 6), "denormals-are-zero (DAZ)"))
_SSE_ROUNDING = {0: "to nearest", 1: "downward", 2: "upward", 3: "toward zero"}
_SIGNALS = [s for s in range(1, signal.NSIG) if s not in (signal.SIGKILL, signal.SIGSTOP)]


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        libm.fegetround.restype = ctypes.c_int
        libm.fegetenv.argtypes = libm.fesetenv.argtypes = [ctypes.c_void_p]
        libc.sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        return libc, libm
    except (OSError, AttributeError):
        return None, None


_LIBC, _LIBM = _libc() if os.name == "posix" else (None, None)
_MALLINFO2 = getattr(_LIBC, "mallinfo2", None)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


if _MALLINFO2 is not None:
    _MALLINFO2.restype = _Mallinfo2

#: which checks this platform can make
AVAILABLE = {"fenv": _LIBM is not None, "signals": _LIBC is not None and platform.system() == "Linux",
             "threads": os.path.isdir("/proc/self/task"), "malloc": _MALLINFO2 is not None,
             "rss": os.path.exists("/proc/self/statm")}


@dataclass
class Snapshot:
    rounding: int | None
    fenv: bytes | None  # the raw fenv_t (restored as is)
    actions: dict  # signal -> raw struct sigaction
    blocked: frozenset
    threads: int | None


def _threads() -> int | None:
    """Threads of this process that Python's ``threading`` did not start (None: cannot tell)."""
    import threading

    try:
        tasks = {int(t) for t in os.listdir("/proc/self/task")}
    except (OSError, ValueError):
        return None
    python = {t.native_id for t in threading.enumerate() if t.native_id != os.getpid()}
    return len(tasks - python)


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: the threads the checked calls have left running in this process, net (see the module docstring)
_LEFT_BY_CALLS = [0]
#: False inside :func:`unwatched`
_WATCHING = [True]


@contextlib.contextmanager
def unwatched():
    """Calls made inside are not compared (an on-target export or judge: the calls run on the in-tree
    emulator or are answered from the runner's results, so this process's state says nothing about the
    port)."""
    saved = _WATCHING[0]
    _WATCHING[0] = False
    try:
        yield
    finally:
        _WATCHING[0] = saved


def watching() -> bool:
    return _WATCHING[0]


def snapshot() -> Snapshot:
    rounding = fenv = None
    if _LIBM is not None:
        rounding = int(_LIBM.fegetround())
        buf = ctypes.create_string_buffer(_FENV_BYTES)
        if _LIBM.fegetenv(buf) == 0:
            fenv = buf.raw
    actions = {}
    if AVAILABLE["signals"]:
        buf, query = ctypes.create_string_buffer(_SIGACTION_BYTES), _LIBC.sigaction
        for s in _SIGNALS:
            if query(s, None, buf) == 0:
                actions[s] = buf.raw
    try:
        blocked = frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, []))
    except (AttributeError, OSError):
        blocked = frozenset()
    return Snapshot(rounding, fenv, actions, blocked, _threads())


def dispositions(snap: Snapshot) -> dict:
    """``{signal: (handler address, sa_flags)}``: what :func:`changes` compares of each sigaction."""
    return {s: (raw[:8], int.from_bytes(raw[_SA_FLAGS_AT:_SA_FLAGS_AT + 4], "little") & ~_SA_RESTORER)
            for s, raw in snap.actions.items()}


def _signame(s: int) -> str:
    try:
        return signal.Signals(s).name
    except ValueError:
        return f"signal {s}"


def _handler(raw: bytes) -> str:
    h = int.from_bytes(raw[:8], "little")
    return {0: "default", 1: "ignored"}.get(h, f"a handler at {h:#x}")


def _fenv_changes(before: bytes, after: bytes) -> list[str]:
    out = []
    if _X86:
        cw0, cw1 = int.from_bytes(before[:2], "little"), int.from_bytes(after[:2], "little")
        if cw0 != cw1:
            out.append(f"the x87 control word: {cw0:#06x} before the call, {cw1:#06x} after it")
        m0 = int.from_bytes(before[_MXCSR_AT:_MXCSR_AT + 4], "little") & _MXCSR_CONTROL
        m1 = int.from_bytes(after[_MXCSR_AT:_MXCSR_AT + 4], "little") & _MXCSR_CONTROL
        for bit, name in _MXCSR_BITS:
            if (m0 ^ m1) & bit:
                out.append(f"MXCSR {name} switched {'on' if m1 & bit else 'off'}")
        r0, r1 = (m0 >> 13) & 3, (m1 >> 13) & 3
        if r0 != r1:
            out.append(f"the SSE rounding mode (MXCSR): {_SSE_ROUNDING[r0]} before the call, {_SSE_ROUNDING[r1]} "
                       "after it")
        if (m0 ^ m1) & 0x1F80:
            out.append(f"the MXCSR exception masks: {(m0 >> 7) & 0x3F:#04x} before the call, {(m1 >> 7) & 0x3F:#04x} "
                       "after it (a cleared bit unmasks a floating-point trap)")
    elif _ARM:
        c0, c1 = int.from_bytes(before[:4], "little"), int.from_bytes(after[:4], "little")
        if c0 != c1:
            fz = " (flush-to-zero switched " + ("on)" if c1 & (1 << 24) else "off)") if (c0 ^ c1) & (1 << 24) else ""
            out.append(f"the FPCR: {c0:#010x} before the call, {c1:#010x} after it{fz}")
    return out


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """What the call changed, one phrase each (empty: nothing)."""
    out = []
    if before.rounding != after.rounding:
        out.append(f"the rounding mode (fegetround): {ROUNDING.get(before.rounding, before.rounding)} before the "
                   f"call, {ROUNDING.get(after.rounding, after.rounding)} after it")
    if before.fenv is not None and after.fenv is not None:
        rounding_told = bool(out)  # fesetround sets the x87 and the SSE rounding: say it once
        out.extend(c for c in _fenv_changes(before.fenv, after.fenv) if not (rounding_told and "SSE rounding" in c))
    now = dispositions(after) if after.actions != before.actions else {}
    for s, (handler, flags) in (dispositions(before) if now else {}).items():
        if s not in now:
            continue
        if now[s][0] != handler:
            out.append(f"the disposition of {_signame(s)}: {_handler(handler)} before the call, "
                       f"{_handler(now[s][0])} after it")
        elif now[s][1] != flags:
            out.append(f"the sigaction flags of {_signame(s)}")
    if before.blocked != after.blocked:
        added = sorted(after.blocked - before.blocked)
        removed = sorted(before.blocked - after.blocked)
        parts = ([f"blocked {', '.join(_signame(s) for s in added)}"] if added else []) + (
            [f"unblocked {', '.join(_signame(s) for s in removed)}"] if removed else [])
        out.append(f"the blocked-signal mask ({'; '.join(parts)})")
    # Fewer threads is no fault of the call: a pool stops its threads before a fork (OpenBLAS does,
    # so any fork+exec in a library shrinks it) and starts them again when next used.
    if before.threads is not None and after.threads is not None:
        _LEFT_BY_CALLS[0] = max(0, _LEFT_BY_CALLS[0] + after.threads - before.threads)
        pools = 2 * _cpus()
        if after.threads > before.threads and _LEFT_BY_CALLS[0] > pools:
            out.append(f"the thread count: {before.threads} before the call, {after.threads} after it (the call "
                       f"left {after.threads - before.threads} thread(s) running, the checked calls "
                       f"{_LEFT_BY_CALLS[0]} in all; more than thread pools need: at most {pools}, two per CPU)")
            _LEFT_BY_CALLS[0] = 0  # reported once; later calls are judged by what they leave themselves
    return out


def settle(before: Snapshot, after: Snapshot) -> Snapshot:
    """``after`` again, a few times for up to 0.1 s, while it has more threads than ``before``: a
    joined thread can still be listed for a moment after ``pthread_join`` returns."""
    deadline = time.monotonic() + 0.1
    while after.threads is not None and after.threads > before.threads and time.monotonic() < deadline:
        time.sleep(0.005)
        after.threads = _threads()
    return after


def restore(before: Snapshot) -> None:
    """Put back the floating-point environment and the signal dispositions of ``before``."""
    if _LIBM is not None and before.fenv is not None:
        _LIBM.fesetenv(ctypes.create_string_buffer(before.fenv, _FENV_BYTES))
    now = dispositions(snapshot()) if before.actions else {}
    for s, was in dispositions(before).items():
        if now.get(s, was) != was:
            _LIBC.sigaction(s, ctypes.create_string_buffer(before.actions[s], _SIGACTION_BYTES), None)
    try:
        now = frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        if now != before.blocked:
            signal.pthread_sigmask(signal.SIG_SETMASK, before.blocked)
    except (AttributeError, OSError):
        pass


# ---- memory -------------------------------------------------------------------------------------

#: a call that keeps at least this many bytes, call after call, is reported as leaking
LEAK_BYTES_PER_CALL = 4096
#: calls before the measurement (lazy initialisation), calls per window, and at most this many windows:
#: a bounded cache stops growing within them, a leak does not. The in-tree Ascend runtime quarantines
#: 256 freed blocks (EMU_MEM_QUARANTINE): at one block per call that is 256 calls, and 8 windows
#: called its focal loss leaking (54 KB a call for the first 85 calls, then nothing).
LEAK_WARMUP, LEAK_WINDOW, LEAK_WINDOWS = 2, 8, 40
#: the measurement stops once the process has grown this much (two windows at least): a leak for sure
LEAK_BUDGET = 64 << 20


def memory_in_use() -> tuple[int, int]:
    """(malloc's bytes in use: ``mallinfo2``'s small blocks plus mmapped ones, touched or not; the
    resident set size in bytes); 0 for what cannot be read."""
    heap = rss = 0
    if _MALLINFO2 is not None:
        m = _MALLINFO2()
        heap = int(m.uordblks) + int(m.hblkhd)
    try:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    return heap, rss


def bytes_per_call(call) -> float | None:
    """The memory ``call()`` keeps per call (the larger of the heap's and the resident set's growth),
    measured over windows of :data:`LEAK_WINDOW` calls after :data:`LEAK_WARMUP`: the smallest growth
    of any window. The first window that grows less than :data:`LEAK_BYTES_PER_CALL` per call ends
    it (whatever grew before was a cache filling up). None where memory cannot be measured."""
    if not (AVAILABLE["malloc"] or AVAILABLE["rss"]):
        return None
    for _ in range(LEAK_WARMUP):
        call()
    start = mark = memory_in_use()
    smallest = None
    for window in range(LEAK_WINDOWS):
        for _ in range(LEAK_WINDOW):
            call()
        now = memory_in_use()
        grew = max(now[0] - mark[0], now[1] - mark[1]) / LEAK_WINDOW
        smallest = grew if smallest is None else min(smallest, grew)
        mark = now
        if grew < LEAK_BYTES_PER_CALL or (window and max(now[0] - start[0], now[1] - start[1]) >= LEAK_BUDGET):
            break
    return max(0.0, smallest)


def leak_warning(per_call: float | None) -> str | None:
    """The warning for a measured growth (None below :data:`LEAK_BYTES_PER_CALL`)."""
    if per_call is None or per_call < LEAK_BYTES_PER_CALL:
        return None
    size = f"{per_call / 2**20:.1f} MiB" if per_call >= 2**20 else f"{per_call / 1024:.1f} KiB"
    return (f"memory leak: the process kept about {size} ({int(per_call)} bytes) more after every call of one "
            "passing case, call after call (malloc's bytes in use, and the resident set)")
