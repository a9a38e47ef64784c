"""Driving an aclnn library the way an NPU program does.

:class:`AclRuntime` owns the loaded library (the emulator or a vendor's), initialises it once
per process (``aclInit`` and one ``aclrtSetDevice`` reference, both released at exit) and turns
every non-zero status into :class:`~xloss.KernelError`. A
:class:`Session` is one program run on one thread: set the device, create a stream, allocate
device memory and copy inputs in, create tensors, run two-phase operators, synchronise, copy
results out; leaving the ``with`` block destroys every tensor, frees every allocation,
destroys the stream and resets the device, whether the block succeeded or not.

A session's ``layout`` decides how :meth:`Session.put` and :meth:`Session.empty` lay tensors out
in device memory: ``"contiguous"`` (offset 0, row-major) or ``"strided"`` (larger storage, a
non-zero offset and a non-unit innermost stride, or a transposed 2-D+ view; the storage around
the view holds poison), which makes a library that ignores strides or offsets visibly wrong. In
strided mode the session also checks that the library wrote nothing outside the output views and
nothing into the inputs.
"""

from __future__ import annotations

import atexit
import math
import threading
import weakref

import numpy as np

from ...clib import CLibrary
from ...errors import KernelError
from . import _cdef as C

#: Symbols an adapter session cannot work without.
RUNTIME_SYMBOLS = ("aclInit", "aclrtSetDevice", "aclrtResetDevice", "aclrtCreateStream", "aclrtDestroyStream",
                   "aclrtSynchronizeStream", "aclrtMalloc", "aclrtFree", "aclrtMemcpy", "aclCreateTensor",
                   "aclDestroyTensor")


LAYOUTS = ("contiguous", "strided")


def contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


def strided_layout(shape, k: int) -> tuple[tuple, int, int]:
    """``(strides, offset, storage elements)`` of the ``k``-th strided tensor of a session.

    Even ``k``: row-major order with innermost stride 2, one element of padding after every row,
    offset 3. Odd ``k``: 2-D and up, transposed (the first axis is the fastest, stride 1, every
    other axis padded by one element: the innermost stride is a column's length + 1); below 2-D,
    innermost stride 3; offset 5. Two spare elements follow the view, so the storage always
    extends past it. Deterministic: a replayed case gets the same layout.
    """
    shape = tuple(int(d) for d in shape)
    nd = len(shape)
    strides = [0] * nd
    if nd >= 2 and k % 2:
        order, acc = range(nd), 1
    else:
        order, acc = reversed(range(nd)), 2 if k % 2 == 0 else 3
    for ax in order:
        strides[ax] = acc
        acc = acc * max(shape[ax], 1) + 1
    offset = 3 if k % 2 == 0 else 5
    reach = sum((d - 1) * st for d, st in zip(shape, strides)) if all(shape) else -1
    return tuple(strides), offset, offset + reach + 1 + 2


def view_indices(shape, strides, offset) -> np.ndarray:
    """Flat storage indices of a view's elements, in row-major order of the view."""
    shape = tuple(shape)
    if math.prod(shape) == 0:
        return np.zeros(0, np.int64)
    idx = np.full(shape, offset, dtype=np.int64)
    for ax, st in enumerate(strides):
        idx += np.arange(shape[ax], dtype=np.int64).reshape([-1 if i == ax else 1 for i in range(len(shape))]) * st
    return idx.reshape(-1)


def _poison(dtype, output: bool) -> int:
    """Fill byte around strided views: all-ones (NaN in every float type; -1 in integers) for
    outputs and float inputs, 0xA5 for integer inputs (a large negative class index)."""
    floating = C.ACL_DTYPES.get(np.dtype(dtype)) in (C.ACL_FLOAT, C.ACL_FLOAT16, C.ACL_BF16, C.ACL_DOUBLE)
    return 0xFF if output or floating else 0xA5


class AclRuntime:
    """One loaded aclnn library (one or several ``.so`` files) plus its process-wide init."""

    def __init__(self, paths: list[str], *, device: int = 0):
        self.lib = CLibrary(C.CDEF, paths)
        self.ffi = self.lib.ffi
        self.paths = list(paths)
        self.device = int(device)
        self._init_lock = threading.Lock()
        self._initialized = False
        self.missing = [s for s in RUNTIME_SYMBOLS if not self.lib.has(s)]

    # -- status handling ------------------------------------------------------------------
    def recent_message(self) -> str:
        if not self.lib.has("aclGetRecentErrMsg"):
            return ""
        msg = self.lib.aclGetRecentErrMsg()
        return self.ffi.string(msg).decode("utf-8", "replace") if msg != self.ffi.NULL else ""

    def error(self, api: str, status: int) -> KernelError:
        name = C.status_name(int(status))
        detail = self.recent_message()
        return KernelError(f"{api} failed with {name} ({status})" + (f": {detail}" if detail else ""),
                           status=int(status), status_name=name)

    def call(self, api: str, *args) -> None:
        """Call ``api`` and raise KernelError unless it returns 0."""
        status = self.lib.symbol(api)(*args)
        if status != 0:
            raise self.error(api, status)

    # -- process-wide init ----------------------------------------------------------------
    def ensure_initialized(self) -> None:
        if self._initialized:
            return
        with self._init_lock:
            if self._initialized:
                return
            status = self.lib.aclInit(self.ffi.NULL)
            if status not in (C.ACL_SUCCESS, C.ACL_ERROR_REPEAT_INITIALIZE):
                raise self.error("aclInit", status)
            # One device reference held for the runtime's lifetime: each session's set/reset pair
            # then never takes the count to zero, which on an NPU would tear the context down.
            self.call("aclrtSetDevice", self.device)
            # we initialised it, so we finalise it (someone else's init is theirs to undo)
            atexit.register(_finalize, weakref.ref(self), status == C.ACL_SUCCESS)
            self._initialized = True

    def session(self, layout: str = "contiguous") -> "Session":
        self.ensure_initialized()
        return Session(self, layout)

    # -- emulator-only helpers ------------------------------------------------------------
    def live(self, kind: int = C.LIVE_ALL) -> int | None:
        """Live object count from the emulator's leak counter; None for a library without it."""
        if not self.lib.has("xlossEmuLiveAllocations"):
            return None
        return int(self.lib.xlossEmuLiveAllocations(kind))

    @property
    def is_emulator(self) -> bool:
        return self.lib.has("xlossEmuVersion")


def _finalize(ref, finalize: bool) -> None:
    rt = ref()
    if rt is not None:
        rt.lib.aclrtResetDevice(rt.device)
        if finalize and rt.lib.has("aclFinalize"):
            rt.lib.aclFinalize()


class DeviceBuffer:
    """A block of device memory owned by a session. ``view``: for a strided output, its
    ``(shape, strides, offset, storage as uploaded)``; ``download`` reads that view back."""

    __slots__ = ("ptr", "nbytes", "view")

    def __init__(self, ptr, nbytes: int):
        self.ptr = ptr
        self.nbytes = nbytes
        self.view = None


class Session:
    """One thread's device session; every resource it creates is released on exit."""

    def __init__(self, rt: AclRuntime, layout: str = "contiguous"):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.rt = rt
        self.ffi = rt.ffi
        self.lib = rt.lib
        self.layout = layout
        self.stream = None
        self._device_set = False
        self._buffers: list[DeviceBuffer] = []
        self._tensors: list = []
        self._strided = 0  # tensors laid out so far (picks each one's layout)
        self._inputs: list = []  # strided mode: (buffer, storage as uploaded) of every input

    def __enter__(self) -> "Session":
        try:
            self.rt.call("aclrtSetDevice", self.rt.device)
            self._device_set = True
            stream = self.ffi.new("aclrtStream *")
            self.rt.call("aclrtCreateStream", stream)
            self.stream = stream[0]
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        failure = self.close()
        if failure is not None and exc_type is None:
            raise failure  # a leak must not pass silently; the caller's outputs are not yet written
        return False

    def close(self) -> KernelError | None:
        """Release everything, in reverse order of creation; the first failure is returned."""
        first = None

        def note(api, status):
            nonlocal first
            if status != 0 and first is None:
                first = self.rt.error(api, status)

        while self._tensors:
            note("aclDestroyTensor", self.lib.aclDestroyTensor(self._tensors.pop()))
        while self._buffers:
            note("aclrtFree", self.lib.aclrtFree(self._buffers.pop().ptr))
        if self.stream is not None:
            note("aclrtDestroyStream", self.lib.aclrtDestroyStream(self.stream))
            self.stream = None
        if self._device_set:
            note("aclrtResetDevice", self.lib.aclrtResetDevice(self.rt.device))
            self._device_set = False
        return first

    # -- memory ---------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> DeviceBuffer:
        p = self.ffi.new("void **")
        self.rt.call("aclrtMalloc", p, max(int(nbytes), 1), C.ACL_MEM_MALLOC_HUGE_FIRST)  # size 0 is refused
        buf = DeviceBuffer(p[0], int(nbytes))
        self._buffers.append(buf)
        return buf

    def upload(self, arr: np.ndarray, buf: DeviceBuffer | None = None) -> DeviceBuffer:
        """Copy a C-contiguous host array to (new) device memory."""
        arr = np.ascontiguousarray(arr)
        if buf is None:
            buf = self.malloc(arr.nbytes)
        if arr.nbytes:
            self.rt.call("aclrtMemcpy", buf.ptr, buf.nbytes, self.ffi.cast("void *", arr.ctypes.data), arr.nbytes,
                         C.ACL_MEMCPY_HOST_TO_DEVICE)
        return buf

    def download(self, buf: DeviceBuffer, shape, dtype) -> np.ndarray:
        """A new host array holding the device data (for a strided output: its view, after checking
        that nothing around the view was written)."""
        if buf.view is not None:
            vshape, strides, offset, before = buf.view
            after = self._read(buf, before.size, before.dtype)
            idx = view_indices(vshape, strides, offset)
            outside = np.ones(before.size, bool)
            outside[idx] = False
            if not np.array_equal(after.view(np.uint8).reshape(before.size, -1)[outside],
                                  before.view(np.uint8).reshape(before.size, -1)[outside]):
                raise KernelError(f"layout=strided: the library wrote outside the output view (shape {vshape}, "
                                  f"strides {strides}, offset {offset}) into the surrounding storage",
                                  status=None, status_name="WRITE_OUTSIDE_VIEW")
            return after[idx].reshape(shape).astype(dtype, copy=False)
        return self._read(buf, shape, dtype)

    def _read(self, buf: DeviceBuffer, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        if out.nbytes:
            self.rt.call("aclrtMemcpy", self.ffi.cast("void *", out.ctypes.data), out.nbytes, buf.ptr, out.nbytes,
                         C.ACL_MEMCPY_DEVICE_TO_HOST)
        return out

    # -- tensors --------------------------------------------------------------------------
    def tensor(self, buf: DeviceBuffer, shape, dtype, *, strides=None, offset: int = 0, storage_shape=None,
               fmt: int = C.ACL_FORMAT_ND):
        """An aclTensor over ``buf`` (dtype: NumPy dtype or aclDataType code)."""
        code = dtype if isinstance(dtype, int) else C.ACL_DTYPES[np.dtype(dtype)]
        shape = tuple(int(d) for d in shape)
        strides = contiguous_strides(shape) if strides is None else tuple(int(s) for s in strides)
        storage = shape if storage_shape is None else tuple(int(d) for d in storage_shape)
        dims = self.ffi.new("int64_t[]", list(shape) or [0])
        st = self.ffi.new("int64_t[]", list(strides) or [0])
        sdims = self.ffi.new("int64_t[]", list(storage) or [0])
        t = self.lib.aclCreateTensor(dims, len(shape), code, st, int(offset), fmt, sdims, len(storage), buf.ptr)
        if t == self.ffi.NULL:
            detail = self.rt.recent_message()
            raise KernelError("aclCreateTensor returned NULL" + (f": {detail}" if detail else ""),
                              status=None, status_name="NULL_TENSOR")
        self._tensors.append(t)
        return t

    def _strided_storage(self, shape, dtype, output: bool):
        strides, offset, size = strided_layout(shape, self._strided)
        self._strided += 1
        storage = np.full(size * np.dtype(dtype).itemsize, _poison(dtype, output), np.uint8).view(dtype)
        return strides, offset, storage

    def put(self, arr: np.ndarray, dtype=None):
        """Upload ``arr`` (optionally converted to ``dtype``) and wrap it in an aclTensor laid out
        as the session's ``layout`` says."""
        arr = np.asarray(arr)
        if dtype is not None and arr.dtype != np.dtype(dtype):
            arr = arr.astype(dtype)
        if self.layout == "contiguous":
            buf = self.upload(arr)
            return self.tensor(buf, arr.shape, arr.dtype), buf
        strides, offset, storage = self._strided_storage(arr.shape, arr.dtype, output=False)
        storage[view_indices(arr.shape, strides, offset)] = arr.reshape(-1)
        buf = self.upload(storage)
        self._inputs.append((buf, storage))
        return self.tensor(buf, arr.shape, arr.dtype, strides=strides, offset=offset,
                           storage_shape=(storage.size,)), buf

    def empty(self, shape, dtype):
        """A new output tensor of ``shape`` and ``dtype`` (laid out as the session's ``layout``
        says) and its device buffer, for :meth:`download`."""
        shape = tuple(int(d) for d in shape)
        if self.layout == "contiguous":
            buf = self.malloc(math.prod(shape) * np.dtype(dtype).itemsize)
            return self.tensor(buf, shape, dtype), buf
        strides, offset, storage = self._strided_storage(shape, dtype, output=True)
        buf = self.upload(storage)
        buf.view = (shape, strides, offset, storage)
        return self.tensor(buf, shape, dtype, strides=strides, offset=offset, storage_shape=(storage.size,)), buf

    def check_inputs(self) -> None:
        """Strided mode: raise KernelError if the library wrote into an input's storage."""
        for k, (buf, before) in enumerate(self._inputs):
            after = self._read(buf, before.shape, before.dtype)
            if after.tobytes() != before.tobytes():
                raise KernelError(f"layout=strided: the library wrote into input tensor #{k} (a const aclTensor)",
                                  status=None, status_name="WROTE_INPUT")

    # -- running ---------------------------------------------------------------------------
    def run(self, op: str, *args) -> int:
        """Phase one (``opGetWorkspaceSize``), workspace allocation, phase two. Returns the workspace size.

        ``args`` are the operator's arguments before ``workspaceSize`` and ``executor``.
        """
        size = self.ffi.new("uint64_t *")
        exe = self.ffi.new("aclOpExecutor **")
        self.rt.call(op + "GetWorkspaceSize", *args, size, exe)
        executor = exe[0]
        try:
            workspace = self.malloc(size[0]).ptr if size[0] else self.ffi.NULL
        except BaseException:
            # phase two never ran, so nothing released the executor
            if self.lib.has("aclDestroyAclOpExecutor"):
                self.lib.aclDestroyAclOpExecutor(executor)
            raise
        self.rt.call(op, workspace, size[0], executor, self.stream)  # consumes the single-use executor
        return int(size[0])

    def synchronize(self) -> None:
        self.rt.call("aclrtSynchronizeStream", self.stream)
        if self._inputs:
            self.check_inputs()
