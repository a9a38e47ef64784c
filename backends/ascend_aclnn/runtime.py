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

Every tensor :meth:`Session.put` or :meth:`Session.empty` makes sits between guard regions of
poisoned bytes (:data:`GUARD_BYTES` each side; the view's data still starts 32-byte aligned and
the trailing guard starts right at the end of the view's bytes, not at the next 32-byte
boundary), checked after every operator: a write past a buffer raises
:class:`~xloss.errors.OutOfBoundsWrite` naming the operator, the ABI argument, the byte offset
and the bytes changed. A ``checked`` session also fills every output with poison (NaN bytes)
before the operator runs, whatever runtime gave the memory, and compares every input with what
was uploaded after every operator (:class:`~xloss.errors.InputModified`).

A checked (or strided) session also holds the two phases to their contract: after phase one
(``GetWorkspaceSize``) alone, every buffer of the call must be as it was (outputs still poison,
inputs as uploaded, guards intact; a write is :class:`~xloss.errors.PhaseOneWrite` naming the
buffer), and where the library accepts ``aclSetAclOpExecutorRepeatable`` the executor is run a
second time, which must leave every buffer of the call bit-identical
(:class:`~xloss.errors.RepeatMismatch`); calls whose operands exceed :data:`REPEAT_MAX_BYTES` run
once (the large ladder's cost would double for a bug that small cases show as well).

A session defers SIGINT (on the main thread) from its start to the end of its release, so an
interrupt never leaves device memory, tensors, executors or streams behind; it is raised when
the session has released everything.
"""

from __future__ import annotations

import atexit
import math
import signal
import threading
import weakref

import numpy as np

from ... import abi_log
from ...clib import CLibrary
from ...errors import InputModified, KernelError, OutOfBoundsWrite, PhaseOneWrite, RepeatMismatch
from . import _cdef as C

#: bytes of poison on each side of every buffer put()/empty() makes (a multiple of 32, so the
#: data start keeps the device's 32-byte alignment)
GUARD_BYTES = 64
GUARD_FILL = 0xA5
#: what a checked session fills every output buffer with before the operator runs (all-ones: NaN in
#: every float type), so an element the library never writes shows whatever memory the device gave
OUTPUT_POISON = 0xFF
_GUARD_PATTERN = bytes([GUARD_FILL]) * GUARD_BYTES
#: ABI parameters an operator documents as written in place although they are inputs
#: (ops-nn aclnnFusedLinearCrossEntropyLossGrad.md: the high-performance mode forms G in softmax)
WRITTEN_INPUTS = {"aclnnFusedLinearCrossEntropyLossGrad": frozenset({"softmaxOptional"})}
PARAMETERS = C.phase_one_parameters()
#: a checked call whose operands hold more bytes than this runs its repeatable executor once only
REPEAT_MAX_BYTES = 64 << 20
#: CANN's reduction codes (aclnn loss operators)
_REDUCTION_NAMES = {0: "none", 1: "mean", 2: "sum"}
_DTYPE_NAMES = {C.ACL_FLOAT: "FLOAT", C.ACL_FLOAT16: "FLOAT16", C.ACL_BF16: "BF16", C.ACL_DOUBLE: "DOUBLE",
                C.ACL_INT8: "INT8", C.ACL_INT16: "INT16", C.ACL_INT32: "INT32", C.ACL_INT64: "INT64",
                C.ACL_UINT8: "UINT8", C.ACL_BOOL: "BOOL"}


def _tensor_text(code: int, shape, strides, offset: int) -> str:
    text = f"{_DTYPE_NAMES.get(code, f'dtype {code}')}{list(shape)}"
    if tuple(strides) != contiguous_strides(shape) or offset:
        text += f" (strides {list(strides)}, offset {offset})"
    return text

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


_SHARED: dict = {}
_SHARED_LOCK = threading.Lock()


class AclRuntime:
    """One loaded aclnn library (one or several ``.so`` files) plus its process-wide init.

    :meth:`shared` gives one runtime per (library paths, device) for the whole process, so a new
    backend object costs no library load and adds no exit callback."""

    @classmethod
    def shared(cls, paths: list[str], *, device: int = 0) -> AclRuntime:
        key = (tuple(paths), int(device))
        with _SHARED_LOCK:
            rt = _SHARED.get(key)
            if rt is None:
                rt = _SHARED[key] = cls(paths, device=device)
            return rt

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

    def session(self, layout: str = "contiguous", *, checked: bool = False) -> Session:
        self.ensure_initialized()
        return Session(self, layout, checked=checked)

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


class _DeferredSigint:
    """Holds SIGINT back (main thread only) while resources are in flight; re-delivers it after."""

    def __init__(self):
        self.previous = None
        self.pending = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            try:
                self.previous = signal.signal(signal.SIGINT, self._hold)
            except ValueError:  # not the main interpreter
                self.previous = None
        return self

    def _hold(self, signum, frame):
        self.pending = (signum, frame)

    def release(self):
        if self.previous is None:
            return
        previous, self.previous = self.previous, None
        signal.signal(signal.SIGINT, previous)
        if self.pending is not None:
            signum, frame = self.pending
            self.pending = None
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                raise KeyboardInterrupt


class DeviceBuffer:
    """A block of device memory owned by a session. ``ptr``: where the data starts (``guard``
    bytes of poison before it and ``tail`` after it, inside the allocation at ``base``).
    ``view``: for a strided output, its ``(shape, strides, offset, storage as uploaded)``;
    ``download`` reads that view back. ``uploaded``: an input's bytes as uploaded (compared after
    every operator in a checked session). ``name``: the ABI argument it was last passed as."""

    __slots__ = ("ptr", "nbytes", "view", "base", "guard", "tail", "uploaded", "name", "written")

    def __init__(self, ptr, nbytes: int, *, base=None, guard: int = 0, tail: int = 0):
        self.ptr = ptr
        self.nbytes = nbytes
        self.view = None
        self.base = ptr if base is None else base
        self.guard = guard
        self.tail = tail
        self.uploaded = None
        self.name = None
        self.written = False  # an operator documents writing it in place: no longer compared


class Session:
    """One thread's device session; every resource it creates is released on exit."""

    def __init__(self, rt: AclRuntime, layout: str = "contiguous", *, checked: bool = False):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.rt = rt
        self.ffi = rt.ffi
        self.lib = rt.lib
        self.layout = layout
        self.checked = checked
        self.stream = None
        self._device_set = False
        self._buffers: list[DeviceBuffer] = []
        self._tensors: list = []
        self._tensor_buffer: dict = {}  # aclTensor address -> the DeviceBuffer it views
        self._tensor_text: dict = {}  # aclTensor address -> its dtype, shape and layout, for abi_log
        self._strided = 0  # tensors laid out so far (picks each one's layout)
        self._sigint = _DeferredSigint()
        self._guard_scratch = None  # a host buffer the guard checks reuse

    def __enter__(self) -> Session:
        self._sigint.__enter__()
        try:
            self.rt.call("aclrtSetDevice", self.rt.device)
            self._device_set = True
            stream = self.ffi.new("aclrtStream *")
            self.rt.call("aclrtCreateStream", stream)
            self.stream = stream[0]
        except BaseException:
            self.close()
            self._sigint.release()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            failure = self.close()
        finally:
            self._sigint.release()  # an interrupt held during the session is raised here, after the release
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
        self._tensor_buffer.clear()
        self._tensor_text.clear()
        while self._buffers:
            note("aclrtFree", self.lib.aclrtFree(self._buffers.pop().base))
        if self.stream is not None:
            note("aclrtDestroyStream", self.lib.aclrtDestroyStream(self.stream))
            self.stream = None
        if self._device_set:
            note("aclrtResetDevice", self.lib.aclrtResetDevice(self.rt.device))
            self._device_set = False
        return first

    # -- memory ---------------------------------------------------------------------------
    def malloc(self, nbytes: int, *, guarded: bool = False) -> DeviceBuffer:
        """Device memory for ``nbytes``; ``guarded``: between two poisoned guard regions."""
        nbytes = int(nbytes)
        pad = GUARD_BYTES if guarded else 0
        total = pad + nbytes + pad
        p = self.ffi.new("void **")
        self.rt.call("aclrtMalloc", p, max(total, 1), C.ACL_MEM_MALLOC_HUGE_FIRST)  # size 0 is refused
        base = p[0]
        buf = DeviceBuffer(self.ffi.cast("char *", base) + pad if pad else base, nbytes, base=base, guard=pad,
                           tail=pad)
        self._buffers.append(buf)
        if pad:  # poison the guards only: the data keeps what the device gave it
            for ptr in (base, self.ffi.cast("char *", buf.ptr) + nbytes):
                self.rt.call("aclrtMemcpy", ptr, pad, self.ffi.from_buffer(_GUARD_PATTERN), pad,
                             C.ACL_MEMCPY_HOST_TO_DEVICE)
        return buf

    def poison(self, buf: DeviceBuffer) -> None:
        """Fill ``buf``'s data with :data:`OUTPUT_POISON` bytes. The emulator's runtime fills fresh
        memory so already, a vendor runtime need not (it may hand back zeros, or a block holding
        an earlier call's results): a checked session poisons every output itself."""
        if not buf.nbytes:
            return
        if self.lib.has("aclrtMemset"):
            self.rt.call("aclrtMemset", buf.ptr, buf.nbytes, OUTPUT_POISON, buf.nbytes)
        else:
            self.upload(np.full(buf.nbytes, OUTPUT_POISON, np.uint8), buf)

    def upload(self, arr: np.ndarray, buf: DeviceBuffer | None = None, *, guarded: bool = False) -> DeviceBuffer:
        """Copy a C-contiguous host array to (new) device memory."""
        arr = np.ascontiguousarray(arr)
        if buf is None:
            buf = self.malloc(arr.nbytes, guarded=guarded)
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
            a = after.view(np.uint8).reshape(before.size, -1)
            b = before.view(np.uint8).reshape(before.size, -1)
            diff = (a != b) & outside[:, None]
            if diff.any():
                first = int(np.flatnonzero(diff.reshape(-1))[0])
                raise OutOfBoundsWrite(
                    f"the library wrote {int(diff.sum())} byte(s) outside the view of output `{buf.name or '?'}` "
                    f"(layout=strided: shape {vshape}, strides {strides}, offset {offset}), first at byte {first} of "
                    "its storage", buffer=buf.name or "?", offset=first, nbytes=int(diff.sum()))
            return after[idx].reshape(shape).astype(dtype, copy=False)
        return self._read(buf, shape, dtype)

    def _read(self, buf: DeviceBuffer, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        if out.nbytes:
            self.rt.call("aclrtMemcpy", self.ffi.cast("void *", out.ctypes.data), out.nbytes, buf.ptr, out.nbytes,
                         C.ACL_MEMCPY_DEVICE_TO_HOST)
        return out

    def _read_raw(self, ptr, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, np.uint8)
        if nbytes:
            self.rt.call("aclrtMemcpy", self.ffi.cast("void *", out.ctypes.data), nbytes, ptr, nbytes,
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
        self._tensor_buffer[int(self.ffi.cast("uintptr_t", t))] = buf
        self._tensor_text[int(self.ffi.cast("uintptr_t", t))] = _tensor_text(code, shape, strides, offset)
        return t

    def _strided_storage(self, shape, dtype, output: bool):
        strides, offset, size = strided_layout(shape, self._strided)
        self._strided += 1
        storage = np.full(size * np.dtype(dtype).itemsize, _poison(dtype, output), np.uint8).view(dtype)
        return strides, offset, storage

    def put(self, arr: np.ndarray, dtype=None):
        """Upload ``arr`` (optionally converted to ``dtype``) between guard regions and wrap it in an
        aclTensor laid out as the session's ``layout`` says."""
        arr = np.asarray(arr)
        if dtype is not None and arr.dtype != np.dtype(dtype):
            arr = arr.astype(dtype)
        if self.layout == "contiguous":
            arr = arr if arr.flags.c_contiguous else arr.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
            buf = self.upload(arr, guarded=True)
            # the bytes uploaded, by reference (no copy): the host array is not written during the call
            buf.uploaded = arr.reshape(-1).view(np.uint8) if self.checked else None
            return self.tensor(buf, arr.shape, arr.dtype), buf
        strides, offset, storage = self._strided_storage(arr.shape, arr.dtype, output=False)
        storage[view_indices(arr.shape, strides, offset)] = arr.reshape(-1)
        buf = self.upload(storage, guarded=True)
        buf.uploaded = storage.view(np.uint8)  # strided mode compares its inputs always
        return self.tensor(buf, arr.shape, arr.dtype, strides=strides, offset=offset,
                           storage_shape=(storage.size,)), buf

    def empty(self, shape, dtype):
        """A new output tensor of ``shape`` and ``dtype`` (laid out as the session's ``layout``
        says, between guard regions) and its device buffer, for :meth:`download`."""
        shape = tuple(int(d) for d in shape)
        if self.layout == "contiguous":
            buf = self.malloc(math.prod(shape) * np.dtype(dtype).itemsize, guarded=True)
            if self.checked:
                self.poison(buf)
            return self.tensor(buf, shape, dtype), buf
        strides, offset, storage = self._strided_storage(shape, dtype, output=True)
        buf = self.upload(storage, guarded=True)
        buf.view = (shape, strides, offset, storage)
        return self.tensor(buf, shape, dtype, strides=strides, offset=offset, storage_shape=(storage.size,)), buf

    # -- the memory contract -------------------------------------------------------------------
    def _name_operands(self, op: str, args) -> None:
        names = PARAMETERS.get(op, ())
        written = WRITTEN_INPUTS.get(op, frozenset())
        for name, arg in zip(names, args):
            if isinstance(arg, self.ffi.CData):
                buf = self._tensor_buffer.get(int(self.ffi.cast("uintptr_t", arg)))
                if buf is not None:
                    buf.name = name
                    buf.written |= name in written

    def _describe_call(self, op: str, args) -> str:
        """``aclnnXxxGetWorkspaceSize(self=FLOAT[4, 3], reduction=2 (sum), ...)``: every scalar and tensor."""
        parts = []
        for name, arg in zip(PARAMETERS.get(op, ()), args):
            if isinstance(arg, self.ffi.CData):
                text = "NULL" if arg == self.ffi.NULL else self._tensor_text.get(int(self.ffi.cast("uintptr_t", arg)),
                                                                                 "a pointer")
            elif name == "reduction":
                text = f"{arg} ({_REDUCTION_NAMES.get(arg, 'no such code')})"
            else:
                text = repr(arg)
            parts.append(f"{name}={text}")
        return f"{op}GetWorkspaceSize({', '.join(parts)})"

    def check_guards(self, op: str) -> None:
        """Raise OutOfBoundsWrite if a guard region of any buffer changed."""
        if self._guard_scratch is None:
            self._guard_scratch = self.ffi.new("unsigned char[]", GUARD_BYTES)
        scratch, view = self._guard_scratch, self.ffi.buffer(self._guard_scratch)
        for k, buf in enumerate(self._buffers):
            if not buf.guard:
                continue
            for side, ptr in (("before", buf.base), ("after", self.ffi.cast("char *", buf.ptr) + buf.nbytes)):
                self.rt.call("aclrtMemcpy", scratch, GUARD_BYTES, ptr, GUARD_BYTES, C.ACL_MEMCPY_DEVICE_TO_HOST)
                if view[:] == _GUARD_PATTERN:  # the common case: one bytes comparison
                    continue
                bad = np.flatnonzero(np.frombuffer(view[:], np.uint8) != GUARD_FILL)
                offset = int(bad[0]) - GUARD_BYTES if side == "before" else buf.nbytes + int(bad[0])
                name = buf.name or f"device buffer #{k}"
                raise OutOfBoundsWrite(
                    f"{op} wrote {bad.size} byte(s) out of bounds {side} `{name}` ({buf.nbytes} bytes): first "
                    f"at byte offset {offset} from the start of `{name}`", buffer=name, offset=offset,
                    nbytes=int(bad.size))

    def check_inputs(self, op: str = "the library") -> None:
        """Raise InputModified if an input's device bytes differ from what was uploaded."""
        for k, buf in enumerate(self._buffers):
            if buf.uploaded is None or buf.written:
                continue
            got = self._read_raw(buf.ptr, buf.uploaded.size)
            bad = np.flatnonzero(got != buf.uploaded)
            if bad.size:
                name = buf.name or f"device buffer #{k}"
                raise InputModified(f"{op} wrote into input `{name}`: {bad.size} byte(s) changed, first at byte offset "
                                    f"{int(bad[0])}", buffer=name, offset=int(bad[0]), nbytes=int(bad.size))

    # -- the two phases ---------------------------------------------------------------------------
    def _operands(self, args) -> list[DeviceBuffer]:
        """The device buffers of the operator's tensor arguments, in argument order."""
        out = []
        for arg in args:
            if isinstance(arg, self.ffi.CData):
                buf = self._tensor_buffer.get(int(self.ffi.cast("uintptr_t", arg)))
                if buf is not None and buf not in out:
                    out.append(buf)
        return out

    def check_phase_one(self, op: str, operands: list[DeviceBuffer], before: list) -> None:
        """Raise PhaseOneWrite if ``opGetWorkspaceSize`` changed a byte of any operand (``before``: their
        bytes just before it) or of a guard."""
        api = op + "GetWorkspaceSize"
        try:
            self.check_guards(api)
        except OutOfBoundsWrite as exc:
            raise PhaseOneWrite(f"{exc} (during phase one, which on the device runs on the host and cannot write "
                                "device memory)", buffer=exc.buffer, offset=exc.offset, nbytes=exc.nbytes) from None
        for buf, want in zip(operands, before):
            bad = np.flatnonzero(self._read_raw(buf.ptr, buf.nbytes) != want)
            if bad.size:
                role = "input" if buf.uploaded is not None else "output"
                raise PhaseOneWrite(
                    f"{api} wrote into {role} `{buf.name or '?'}`: {bad.size} byte(s) changed before phase two ran, "
                    f"first at byte offset {int(bad[0])}; phase one runs on the host and cannot write device memory "
                    "on an NPU, so a kernel that relies on it is wrong there", buffer=buf.name or "?",
                    offset=int(bad[0]), nbytes=int(bad.size))

    def _run_again(self, op: str, operands, workspace, size: int, executor) -> None:
        """Phase two a second time on a repeatable executor; RepeatMismatch unless every operand ends
        bit-identical to the first run (inputs the operator documents writing get their upload back)."""
        first = [self._read_raw(b.ptr, b.nbytes) for b in operands]
        for b in operands:
            if b.written and b.uploaded is not None:
                self.upload(b.uploaded, b)
        status = self.lib.symbol(op)(workspace, size, executor, self.stream)
        self.rt.lib.aclrtSynchronizeStream(self.stream)
        self.check_guards(op)
        if status != 0:
            raise self.rt.error(op + " (second run of a repeatable executor)", status)
        for b, before in zip(operands, first):
            after = self._read_raw(b.ptr, b.nbytes)
            bad = np.flatnonzero(after != before)
            if bad.size:
                raise RepeatMismatch(
                    f"{op}: the executor, made repeatable with aclSetAclOpExecutorRepeatable, left `{b.name or '?'}` "
                    f"different after its second run: {bad.size} byte(s), first at byte offset {int(bad[0])} (a "
                    "kernel must not consume its plan or add into its outputs)", buffer=b.name or "?",
                    offset=int(bad[0]), nbytes=int(bad.size))

    # -- running ---------------------------------------------------------------------------
    def run(self, op: str, *args) -> int:
        """Phase one (``opGetWorkspaceSize``), workspace allocation, phase two; then the guard check
        (and, checked or strided, the input comparison). Checked or strided, phase one is also held
        to writing nothing and a repeatable executor to giving the same results twice. Returns the
        workspace size.

        ``args`` are the operator's arguments before ``workspaceSize`` and ``executor``.
        """
        self._name_operands(op, args)
        abi_log.record(lambda: self._describe_call(op, args))
        size = self.ffi.new("uint64_t *")
        exe = self.ffi.new("aclOpExecutor **")
        strict = self.checked or self.layout == "strided"
        operands = self._operands(args) if strict else []
        before = [self._read_raw(b.ptr, b.nbytes) for b in operands]
        self.rt.call(op + "GetWorkspaceSize", *args, size, exe)
        executor = exe[0]
        repeatable = False
        try:
            if strict:
                self.check_phase_one(op, operands, before)
                if (self.lib.has("aclSetAclOpExecutorRepeatable") and self.lib.has("aclDestroyAclOpExecutor")
                        and sum(b.nbytes for b in operands) <= REPEAT_MAX_BYTES):
                    repeatable = self.lib.aclSetAclOpExecutorRepeatable(executor) == 0
            if size[0]:
                ws = self.malloc(size[0], guarded=True)
                ws.name = "workspace"
                workspace = ws.ptr
            else:
                workspace = self.ffi.NULL
        except BaseException:
            # phase two never ran, so nothing released the executor
            if self.lib.has("aclDestroyAclOpExecutor"):
                self.lib.aclDestroyAclOpExecutor(executor)
            raise
        try:
            # (this consumes a single-use executor)
            status = self.lib.symbol(op)(workspace, size[0], executor, self.stream)
            # the memory contract first: an overrun explains a failure better than its status does
            self.rt.lib.aclrtSynchronizeStream(self.stream)
            self.check_guards(op)
            if strict:
                self.check_inputs(op)
            if status != 0:
                raise self.rt.error(op, status)
            if repeatable:
                self._run_again(op, operands, workspace, size[0], executor)
        finally:
            if repeatable:  # a repeatable executor is the caller's to destroy
                self.lib.aclDestroyAclOpExecutor(executor)
        return int(size[0])

    def synchronize(self) -> None:
        self.rt.call("aclrtSynchronizeStream", self.stream)
