"""Software prefetch: ask for a cache line ahead of the walk that will read it.

The fused row kernels read each row once from memory (their first walk) and then work on it from cache;
while they compute on one row the hardware prefetchers have nothing to follow, so the next row's first
walk starts at memory latency and runs at memory speed with the arithmetic units idle. Touching the next
row's lines during the compute walks (one prefetch per 64-byte line, spread over the walk) lets the memory
traffic overlap the arithmetic instead.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: bytes per cache line
LINE = 64


@intrinsic
def prefetch_line(typingctx, arr, i):
    """Prefetch (for reading, into all cache levels) the line holding element ``i`` of the 1-d C-contiguous
    array ``arr``; a hint: no fault and no effect on any value, whatever ``i`` is."""
    if not isinstance(arr, types.Array) or not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, value=args[0])
        p = builder.bitcast(builder.gep(a.data, [args[1]]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [p.type, i32, i32, i32]), "llvm.prefetch.p0")
        builder.call(fn, [p, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.none(arr, i), codegen
