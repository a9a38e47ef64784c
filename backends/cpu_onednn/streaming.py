"""Non-temporal ("streaming") stores: writing a large output without reading it first.

A normal store to a cache line that is not in cache first reads the line from memory (read for
ownership), so a kernel that reads N bytes and writes N bytes moves 3N over the memory bus. A
non-temporal store writes whole lines through a write-combining buffer straight to memory: 2N.
It pays only when the output is far larger than the caches (it would be evicted before it is read
again anyway); a small output is re-read soon and belongs in cache (:data:`STREAM_MIN_BYTES`). Nor
does it pay on memory never touched before (a fresh ``np.empty``): the kernel zeroes each new page as
it is first written, leaving the zeroed lines dirty in cache, where a normal store simply overwrites
them and a streaming store must first push them out, two writes for one. So only an output whose pages
are all resident already (a reused buffer, :func:`resident`) is streamed.

LLVM's loop vectorizer does not vectorize a ``!nontemporal`` store it cannot prove aligned, so the
kernels here stage a short run of finished output values in an L1-resident buffer of the output's
own storage type (the same rounding as a direct store: the staged bits are the final bits) and
:func:`stream_run` copies it out: the part before the first 64-byte boundary and the part after the
last one with normal stores, every whole 64-byte line between with one aligned vector store marked
``!nontemporal`` (``vmovntps``/``vmovntdq``; two 32-byte ones where the CPU has no 64-byte vectors).
Streaming stores are weakly ordered: each thread ends its share of the work with :func:`sfence`
before the parallel region joins.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import sys

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .intrinsics import inline_me
from .prefetch import LINE as _LINE

#: Outputs of at least this many bytes are written with streaming stores (far beyond the L2 and L3
#: of the machines this runs on; a smaller output is likely still in cache when it is read back).
STREAM_MIN_BYTES = 32 << 20
#: x86-64 Linux only: ``sfence`` and the streaming-store instructions are x86's, ``mincore`` is Linux's.
STREAMING_CPU = platform.machine().lower() in ("x86_64", "amd64") and sys.platform.startswith("linux")
#: elements per staging run: whole 64-byte lines for every element size (8 KiB of bfloat16, 16 of float32)
STAGE = 4096


_libc = None


def resident(address: int, nbytes: int) -> bool:
    """Whether every page of ``[address, address + nbytes)`` is in memory (``mincore``; False when it
    cannot tell). One bit per 4 KiB page: under a millisecond for a gigabyte."""
    global _libc
    if nbytes <= 0:
        return True
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
        page = mmap.PAGESIZE
        start = address - address % page
        length = address + nbytes - start
        vec = np.empty((length + page - 1) // page, np.uint8)
        if _libc.mincore(start, length, vec.ctypes.data) != 0:
            return False
    except (OSError, AttributeError):
        return False
    return bool(np.bitwise_and(vec, 1).all())


def use_streaming(nbytes: int, address: int, itemsize: int) -> bool:
    """Whether an output of ``nbytes`` at ``address`` is written with streaming stores."""
    return (STREAMING_CPU and nbytes >= STREAM_MIN_BYTES and address % itemsize == 0
            and resident(address, nbytes))


@intrinsic
def address_of(typingctx, arr, i):
    """The address (uint64) of element ``i`` of the C-contiguous 1-d array ``arr``."""
    if not isinstance(arr, types.Array) or not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, value=args[0])
        p = builder.gep(a.data, [args[1]])
        return builder.ptrtoint(p, ir.IntType(64))

    return types.uint64(arr, i), codegen


@intrinsic
def stream_line(typingctx, dst, di, src, si):
    """Copy the 64 bytes at ``src[si:]`` (any alignment) to ``dst[di:]`` (64-byte aligned: the caller's
    promise) with one non-temporal vector store; same element type, 1-d C-contiguous arrays."""
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and dst.dtype == src.dtype):
        return None

    def codegen(context, builder, signature, args):
        dty, _, sty, _ = signature.args
        elt = context.get_data_type(dty.dtype)
        lanes = _LINE // context.get_abi_sizeof(elt)
        vec = ir.VectorType(elt, lanes)
        d = context.make_array(dty)(context, builder, value=args[0])
        s = context.make_array(sty)(context, builder, value=args[2])
        sp = builder.bitcast(builder.gep(s.data, [args[3]]), vec.as_pointer())
        dp = builder.bitcast(builder.gep(d.data, [args[1]]), vec.as_pointer())
        v = builder.load(sp, align=context.get_abi_sizeof(elt))
        st = builder.store(v, dp, align=_LINE)
        st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return types.none(dst, di, src, si), codegen


@intrinsic
def sfence(typingctx):
    """Order this thread's streaming stores before its later stores (x86 ``sfence``)."""

    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                            "llvm.x86.sse.sfence")
        builder.call(fn, [])
        return context.get_dummy_value()

    return types.none(), codegen


@njit(error_model="numpy")
def line_head(dst, di):
    """Elements of ``dst`` from ``di`` up to its next 64-byte boundary (0 when ``di`` is on one)."""
    inline_me()
    size = np.uint64(dst.itemsize)
    off = address_of(dst, np.uint64(di)) % np.uint64(_LINE)
    return np.uint64(0) if off == 0 else (np.uint64(_LINE) - off) // size


@njit(error_model="numpy")
def stream_run(dst, di, src, si, n):
    """``dst[di:di+n] = src[si:si+n]``: whole 64-byte lines of ``dst`` with streaming stores, the rest
    with normal ones (``dst``'s elements must be aligned to their size)."""
    inline_me()
    lanes = np.uint64(_LINE // dst.itemsize)
    di, si, n = np.uint64(di), np.uint64(si), np.uint64(n)
    h = min(n, line_head(dst, di))
    for j in range(h):
        dst[di + j] = src[si + j]
    body = (n - h) // lanes * lanes
    for k in range(h, h + body, lanes):
        stream_line(dst, di + k, src, si + k)
    for j in range(h + body, n):
        dst[di + j] = src[si + j]
