"""bf16 x bf16 -> float32 products on oneDNN's matmul primitive, from the optional ``onednn-cpu-gomp`` wheel.

PyTorch's CPU build returns bf16 GEMMs only in bf16 and does not export oneDNN's C API, so the float32
logits of bf16 operands otherwise take a float32 GEMM of widened operands (:func:`.gemm.logits_f32`),
2.2-2.7x the time of a bf16 GEMM. oneDNN's matmul takes bf16 source and weights with a float32
destination natively (AVX512-BF16 / AMX brgemm kernels, float32 accumulation). The ``onednn-cpu-gomp``
wheel (``pip install xloss[fast]``) installs ``libdnnl.so.3`` under ``<prefix>/lib``, built on GNU
OpenMP; this module binds the handful of C functions it needs through cffi's ABI mode (no headers).

**One OpenMP runtime.** ``libdnnl`` needs ``libgomp.so.1``; loaded after ``import torch`` the dynamic
linker gives it PyTorch's copy (the same soname), so oneDNN runs on PyTorch's thread pool, with
PyTorch's thread count (``torch.set_num_threads`` sets the calling thread's OpenMP count, which oneDNN
reads) and PyTorch's fork rule (``threads.py`` sets one thread in a forked child). Like PyTorch's GEMMs
beside it, it does not follow the cpu backend's ``threads=`` option (Numba's count: oneDNN's C API has no
per-call thread count for OpenMP builds; the count is the calling thread's OpenMP setting). A library that
brings a second runtime, or a non-OpenMP build (e.g. the TBB-based ``onednn`` 2026 wheel), is not used.

:func:`logits` returns False wherever it declines (no library, other dtypes, a reference-only
implementation, any oneDNN error); the caller then takes its own route. ``XLOSS_ONEDNN_MATMUL=0``
turns the route off (ours, for A/B measurements).

**One thread per primitive.** oneDNN's library-managed scratchpad (its default) is shared: by every
primitive of the thread that made them (built with ``DNNL_ENABLE_CONCURRENT_EXEC=OFF``, the default; a
primitive may then run only on that thread) or by every run of one primitive (``=ON``; two threads may then
not run it at once). So each thread makes and keeps its own primitives, as it keeps its own stream (oneDNN's
own primitive cache makes another thread's copy cheap). A cache shared by the threads let the ranks of a
threaded process group run one primitive at once (same shapes, each its own weight shard), and now and then
a rank's logits came back wrong.
"""

from __future__ import annotations

import collections
import importlib.metadata
import os
import site
import sys
import threading

from . import threads as _threads

_CDEF = """
typedef struct dnnl_engine *dnnl_engine_t;
typedef struct dnnl_stream *dnnl_stream_t;
typedef struct dnnl_memory_desc *dnnl_memory_desc_t;
typedef struct dnnl_memory *dnnl_memory_t;
typedef struct dnnl_primitive_desc *dnnl_primitive_desc_t;
typedef struct dnnl_primitive *dnnl_primitive_t;
typedef struct { int major; int minor; int patch; const char *hash; unsigned cpu_runtime; unsigned gpu_runtime; }
    dnnl_version_t;
typedef struct { int arg; dnnl_memory_t memory; } dnnl_exec_arg_t;
const dnnl_version_t *dnnl_version(void);
int dnnl_engine_create(dnnl_engine_t *engine, int kind, size_t index);
int dnnl_stream_create(dnnl_stream_t *stream, dnnl_engine_t engine, unsigned flags);
int dnnl_stream_wait(dnnl_stream_t stream);
int dnnl_stream_destroy(dnnl_stream_t stream);
int dnnl_memory_desc_create_with_strides(dnnl_memory_desc_t *md, int ndims, const int64_t *dims, int data_type,
    const int64_t *strides);
int dnnl_memory_desc_destroy(dnnl_memory_desc_t md);
int dnnl_matmul_primitive_desc_create(dnnl_primitive_desc_t *pd, dnnl_engine_t engine, dnnl_memory_desc_t src,
    dnnl_memory_desc_t weights, dnnl_memory_desc_t bias, dnnl_memory_desc_t dst, void *attr);
int dnnl_primitive_desc_query(dnnl_primitive_desc_t pd, int what, int index, void *result);
int dnnl_primitive_desc_destroy(dnnl_primitive_desc_t pd);
int dnnl_primitive_create(dnnl_primitive_t *primitive, dnnl_primitive_desc_t pd);
int dnnl_primitive_destroy(dnnl_primitive_t primitive);
int dnnl_primitive_execute(dnnl_primitive_t primitive, dnnl_stream_t stream, int nargs, const dnnl_exec_arg_t *args);
int dnnl_memory_create(dnnl_memory_t *memory, dnnl_memory_desc_t md, dnnl_engine_t engine, void *handle);
int dnnl_memory_destroy(dnnl_memory_t memory);
"""

# dnnl_types.h / dnnl_common_types.h / dnnl_config.h (oneDNN v3)
_SUCCESS = 0
_ENGINE_CPU = 1  # dnnl_cpu
_STREAM_IN_ORDER = 0x1  # dnnl_stream_in_order (= dnnl_stream_default_flags)
_BF16, _F32 = 2, 3  # dnnl_data_type_t
_ARG_SRC, _ARG_DST, _ARG_WEIGHTS, _ARG_BIAS = 1, 17, 33, 41  # DNNL_ARG_*
_QUERY_IMPL_INFO_STR = 8  # dnnl_query_impl_info_str
_RUNTIME_OMP = 2  # DNNL_RUNTIME_OMP (dnnl_version_t.cpu_runtime)
_LIBRARY = "libdnnl.so.3"
_CACHE_SIZE = 32  # primitives kept per thread (a chunked FLCE uses two or three shapes)

_lock = threading.Lock()
_loaded = None  # (ffi, lib, engine) once loaded; False once refused
_why = "not loaded yet"
_local = threading.local()  # per thread: its stream, and its primitives (key -> _Primitive, least recent first)


def _new_lock_in_child() -> None:  # another thread may have held the lock at the fork
    global _lock
    _lock = threading.Lock()


_threads.on_fork_child(_new_lock_in_child)


def _enabled() -> bool:
    return os.environ.get("XLOSS_ONEDNN_MATMUL", "1") not in ("0", "off", "false", "no")


def library_path() -> str | None:
    """Where the wheel put ``libdnnl.so.3``: the file its installed record lists (any install scheme),
    else the environment's ``lib`` or the user base's; None if it is not installed."""
    try:
        dist = importlib.metadata.distribution("onednn-cpu-gomp")
        for f in dist.files or ():
            if f.name == _LIBRARY and os.path.exists(dist.locate_file(f)):
                return os.path.normpath(str(dist.locate_file(f)))
    except importlib.metadata.PackageNotFoundError:
        pass
    for base in (sys.prefix, site.getuserbase()):
        path = os.path.join(base, "lib", _LIBRARY)
        if os.path.exists(path):
            return path
    return None


def status() -> str:
    """Whether the route is in use, and why not (for ``xloss doctor``-style diagnostics and tests)."""
    if not _enabled():
        return "turned off (XLOSS_ONEDNN_MATMUL=0)"
    _load()
    return _why


def available() -> bool:
    return bool(_enabled() and _load())


def _load():
    global _loaded, _why
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is None:
            _loaded, _why = _open()
    return _loaded


def _open():
    """(ffi, lib, engine), "in use: ..." or (False, why not)."""
    path = library_path()
    if path is None:
        return False, f"{_LIBRARY} not found (pip install onednn-cpu-gomp)"
    import cffi
    import torch  # noqa: F401  (first: its libgomp.so.1 is the one libdnnl must bind to)

    from ...openmp import loaded_openmp_runtimes

    before = set(map(os.path.realpath, loaded_openmp_runtimes()))
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    try:
        lib = ffi.dlopen(path)
    except OSError as e:
        return False, f"{path} did not load: {e}"
    added = set(map(os.path.realpath, loaded_openmp_runtimes())) - before
    if before and added:  # a second pool would compete with PyTorch's for the cores (and survive no fork)
        return False, f"{path} loaded a second OpenMP runtime ({', '.join(sorted(added))}); not used"
    v = lib.dnnl_version()
    version = f"oneDNN {v.major}.{v.minor}.{v.patch}"
    if v.major != 3:
        return False, f"{version} at {path}: this binding is written against the v3 C API"
    if v.cpu_runtime != _RUNTIME_OMP:
        return False, f"{version} at {path}: CPU runtime {v.cpu_runtime:#x} is not OpenMP (PyTorch's pool)"
    engine = ffi.new("dnnl_engine_t *")
    if lib.dnnl_engine_create(engine, _ENGINE_CPU, 0) != _SUCCESS:
        return False, f"{version} at {path}: no CPU engine"
    return (ffi, lib, engine[0]), f"in use: {version} at {path}"


class _Primitive:
    """One matmul primitive and its memory descriptors (freed when the last user lets go)."""

    def __init__(self, ffi, lib, engine, mds, with_bias: bool):
        self.mds = mds  # src, weights, dst[, bias]
        pd = ffi.new("dnnl_primitive_desc_t *")
        bias_md = mds[3] if with_bias else ffi.NULL
        if lib.dnnl_matmul_primitive_desc_create(pd, engine, mds[0], mds[1], bias_md, mds[2], ffi.NULL) != _SUCCESS:
            raise _Declined("no matmul implementation")
        pd = ffi.gc(pd[0], lib.dnnl_primitive_desc_destroy)
        impl = ffi.new("char **")
        if lib.dnnl_primitive_desc_query(pd, _QUERY_IMPL_INFO_STR, 0, impl) != _SUCCESS:
            raise _Declined("implementation unknown")
        self.impl = ffi.string(impl[0]).decode()
        if self.impl.startswith("ref"):  # the reference loops: slower than the caller's float32 route
            raise _Declined(f"only {self.impl}")
        prim = ffi.new("dnnl_primitive_t *")
        if lib.dnnl_primitive_create(prim, pd) != _SUCCESS:
            raise _Declined("primitive creation failed")
        self.prim = ffi.gc(prim[0], lib.dnnl_primitive_destroy)


class _Declined(Exception):
    pass


def _md(ffi, lib, dims, strides, dt):
    md = ffi.new("dnnl_memory_desc_t *")
    if lib.dnnl_memory_desc_create_with_strides(md, 2, dims, dt, strides) != _SUCCESS:
        raise _Declined("memory descriptor refused")
    return ffi.gc(md[0], lib.dnnl_memory_desc_destroy)


def _primitives() -> collections.OrderedDict:
    """The calling thread's primitives: no other thread runs them (see the module's notes)."""
    cache = getattr(_local, "primitives", None)
    if cache is None:
        cache = _local.primitives = collections.OrderedDict()
    return cache


def _primitive(loaded, key) -> _Primitive:
    cache = _primitives()
    p = cache.get(key)
    if p is not None:
        cache.move_to_end(key)
        return p
    ffi, lib, engine = loaded
    (m, n, k), sa, sb, so, out_dt, bias_dt, _nthr = key
    mds = [_md(ffi, lib, [m, k], list(sa), _BF16), _md(ffi, lib, [k, n], list(sb), _BF16),
           _md(ffi, lib, [m, n], list(so), out_dt)]
    if bias_dt is not None:
        mds.append(_md(ffi, lib, [1, n], [n, 1], bias_dt))
    p = _Primitive(ffi, lib, engine, mds, bias_dt is not None)
    cache[key] = p
    while len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)  # (freed here, on the thread that made it)
    return p


def _stream(loaded):
    s = getattr(_local, "stream", None)
    if s is None:
        ffi, lib, engine = loaded
        h = ffi.new("dnnl_stream_t *")
        if lib.dnnl_stream_create(h, engine, _STREAM_IN_ORDER) != _SUCCESS:
            raise _Declined("no stream")
        s = _local.stream = ffi.gc(h[0], lib.dnnl_stream_destroy)
    return s


def _strides_ok(t) -> bool:
    return all(st > 0 or size == 1 for st, size in zip(t.stride(), t.shape))


def logits(out, x, w, b=None) -> bool:
    """``out = x @ w.T (+ b)`` with bf16 ``x`` (M, K) and ``w`` (N, K) into float32 ``out`` (M, N, any
    strides: e.g. a column slice), ``b``: (N,) bf16 or float32, or None. The products are exact in
    float32 and accumulated in float32. True when done; False where declined (``out`` may then hold
    anything: the caller's own route writes all of it)."""
    import torch

    if out.dtype != torch.float32 or x.dim() != 2 or w.dim() != 2:
        return False
    return matmul(out, x, w.T, b)


def matmul(out, a, b, bias=None) -> bool:
    """``out = a @ b (+ bias)``: bf16 ``a`` (M, K) and ``b`` (K, N), any strides; ``out`` (M, N) float32
    or bf16 (rounded once from the float32 accumulator); ``bias`` (N,) bf16 or float32, or None.
    True when done; False where declined (``out`` may then hold anything)."""
    import torch

    if not (a.dtype == b.dtype == torch.bfloat16 and out.dtype in (torch.float32, torch.bfloat16)):
        return False
    if not (a.dim() == b.dim() == out.dim() == 2 and a.shape[1] == b.shape[0]):
        return False
    if out.shape != (a.shape[0], b.shape[1]):
        return False
    if not all(t.device.type == "cpu" for t in (a, b, out) + (() if bias is None else (bias,))):
        return False
    if bias is not None and (bias.dtype not in (torch.bfloat16, torch.float32) or bias.shape != (b.shape[1],)):
        return False
    if not (_strides_ok(a) and _strides_ok(b) and _strides_ok(out)) or not available():
        return False
    (m, k), n = a.shape, b.shape[1]
    if m == 0 or n == 0:
        return True
    if k == 0:  # an empty sum: oneDNN is not asked about zero-sized reductions
        out.zero_() if bias is None else out.copy_(bias.expand(m, n))
        return True
    loaded = _load()
    ffi, lib, engine = loaded
    bias = None if bias is None else bias.contiguous()
    dt = {torch.bfloat16: _BF16, torch.float32: _F32}
    # oneDNN fixes its thread split when the primitive is made: the key holds the calling thread's count
    key = ((m, n, k), a.stride(), b.stride(), out.stride(), dt[out.dtype], None if bias is None else dt[bias.dtype],
           torch.get_num_threads())
    try:
        p = _primitive(loaded, key)
        stream = _stream(loaded)
        tensors = [a, b, out] + ([bias] if bias is not None else [])
        ids = [_ARG_SRC, _ARG_WEIGHTS, _ARG_DST, _ARG_BIAS]
        mems = []
        for md, t in zip(p.mds, tensors):
            h = ffi.new("dnnl_memory_t *")
            if lib.dnnl_memory_create(h, md, engine, ffi.cast("void *", t.data_ptr())) != _SUCCESS:
                raise _Declined("memory refused")
            mems.append(ffi.gc(h[0], lib.dnnl_memory_destroy))
        args = ffi.new("dnnl_exec_arg_t[]", [(i, mem) for i, mem in zip(ids, mems)])
        if lib.dnnl_primitive_execute(p.prim, stream, len(mems), args) != _SUCCESS:
            raise _Declined("execution failed")
        if lib.dnnl_stream_wait(stream) != _SUCCESS:
            raise _Declined("stream wait failed")
    except _Declined:
        return False
    return True
