"""The ``ascend`` backend: the CANN aclnn C ABI, driven through cffi.

By default it loads xloss's host emulator (``libxloss_aclnn.so``, the operators, which loads the
emulator's runtime ``libxloss_aclrt.so``; both built from ``csrc/`` at install);
``XLOSS_ASCEND_LIB`` or ``make_backend(lib=...)`` (one path, or several separated by
``os.pathsep``, e.g. CANN's ``libascendcl.so``, ``libnnopbase.so`` and ``libopapi.so``, or a port's
operator library and ``emulator_runtime_path()``) loads another library instead, with the same
adapter. What the backend declares is computed from the symbols the loaded libraries export, and
limited to what the vendor operators accept; ``info()`` says which library each operator came
from. Option ``layout="strided"`` lays every tensor out with an offset and gaps (see
:mod:`.runtime`), so a library's stride or offset bug shows in ``xloss check``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

import numpy as np

from ...backend import Backend, KernelCaps
from ...clib import library_paths
from ...errors import BackendUnavailableError, XLossValueError
from ...kernels import REDUCTION_CODES
from .runtime import LAYOUTS, AclRuntime, Session

__all__ = ["AscendBackend", "ENV_VAR", "LAYOUTS", "emulator_library_path", "emulator_runtime_path", "include_dir",
           "library_path", "make_backend"]

ENV_VAR = "XLOSS_ASCEND_LIB"
_HERE = Path(__file__).resolve().parent
_EMULATOR = _HERE / "libxloss_aclnn.so"
_EMULATOR_RUNTIME = _HERE / "libxloss_aclrt.so"

#: xloss kernel -> the aclnn operators it needs (each a GetWorkspaceSize/run pair)
FOCAL_FORWARD = "aclnnSigmoidFocalLoss"
FOCAL_BACKWARD = "aclnnSigmoidFocalLossBackward"
BCE_BACKWARD = "aclnnBinaryCrossEntropyBackward"
NLL_BACKWARD = "aclnnNLLLossBackward"
FLCE_GRAD = "aclnnFusedLinearCrossEntropyLossGrad"

_FLOATS = ("float32", "float16", "bfloat16")
_HALVES = ("float16", "bfloat16")


OPERATORS = (FOCAL_FORWARD, FOCAL_BACKWARD, BCE_BACKWARD, NLL_BACKWARD, FLCE_GRAD)


def emulator_library_path() -> str:
    """Path of xloss's emulator: its operator library, ``libxloss_aclnn.so`` (it loads the runtime
    library beside it). C programs link both: ``-lxloss_aclnn -lxloss_aclrt``."""
    return str(_EMULATOR)


def emulator_runtime_path() -> str:
    """Path of the emulator's runtime library, ``libxloss_aclrt.so``: device memory, streams,
    tensors (with CANN's accessors), executors and the executor interface of
    ``xloss_aclnn_emu.h``; no operators. Link a port's operator library against it and check it
    with ``xloss check --backend ascend --lib ./libmy_ops.so:<this path>``: an operator the port
    lacks is then reported *not implemented*."""
    return str(_EMULATOR_RUNTIME)


def include_dir() -> str:
    """The folder of the CANN-compatible headers (``acl/acl.h``, ``aclnnop/*.h``, ``xloss_aclnn_emu.h``)."""
    return str(_HERE / "include")


def library_path() -> str:
    """The library the default ``ascend`` backend loads: ``$XLOSS_ASCEND_LIB`` if set, else the emulator.

    Several vendor libraries come back joined with ``os.pathsep``.
    """
    return os.pathsep.join(library_paths(None, ENV_VAR, _EMULATOR))


class AscendBackend(Backend):
    """Runs the kernels through an aclnn library: the emulator, or a vendor's."""

    def __init__(self, lib=None, *, device: int = 0, layout: str = "contiguous"):
        if layout not in LAYOUTS:
            raise XLossValueError(f"ascend backend: layout must be one of {', '.join(LAYOUTS)}; got {layout!r}")
        paths = library_paths(lib, ENV_VAR, _EMULATOR)
        super().__init__(name="ascend",
                         description="CANN aclnn ABI through cffi (host emulator, or a vendor library via "
                                     f"{ENV_VAR})",
                         options={k: v for k, v in (("lib", lib), ("device", device), ("layout", layout))
                                  if v not in (None, 0, "contiguous")})
        self.paths = paths
        self.layout = layout
        self.rt: AclRuntime | None = None
        self._why = ""
        try:
            self.rt = AclRuntime(paths, device=device)
        except BackendUnavailableError as exc:
            hint = " (build it with: python backends/ascend_aclnn/build.py)" if paths == [str(_EMULATOR)] else ""
            self._why = f"{exc}{hint}"
        else:
            if self.rt.missing:
                self._why = f"{os.pathsep.join(paths)} lacks runtime symbols: {', '.join(self.rt.missing)}"
        self._caps = self._declare() if not self._why else {}

    # -- what it can do ------------------------------------------------------------------------
    def _has(self, op: str) -> bool:
        return self.rt is not None and self.rt.lib.has(op) and self.rt.lib.has(op + "GetWorkspaceSize")

    def _declare(self) -> dict:
        caps = {}
        modes = [m for m, ops in (("forward", (FOCAL_FORWARD,)), ("grad", (FOCAL_BACKWARD,)),
                                  ("forward+grad", (FOCAL_FORWARD, FOCAL_BACKWARD)))
                 if all(self._has(op) for op in ops)]
        if modes:
            caps["focal_loss"] = KernelCaps.declare("focal_loss", dtypes=_FLOATS, mode=modes,
                                                    notes="forward+grad runs both operators in one device session")
        if self._has(BCE_BACKWARD):
            caps["bce_grad"] = KernelCaps.declare(
                "bce_grad", dtypes=_FLOATS, eps_mode="clamp", fixed={"eps": 1e-12},
                notes="aclnnBinaryCrossEntropyBackward hard-wires max(x(1-x), 1e-12)")
        if self._has(NLL_BACKWARD):
            caps["nll_loss_grad"] = KernelCaps.declare("nll_loss_grad", dtypes=_FLOATS)
        if self._has(FLCE_GRAD):
            caps["fused_linear_cross_entropy_grad"] = KernelCaps.declare(
                "fused_linear_cross_entropy_grad", dtypes=_HALVES, label_smoothing=False,
                notes="aclnnFusedLinearCrossEntropyLossGrad takes float16 or bfloat16 input and weight only "
                      "(no float32 path) and label_smoothing=0 only")
        return caps

    def capabilities(self):
        return self._caps

    def availability(self):
        return (False, self._why) if self._why else (True, "")

    def info(self):
        out = {"library": os.pathsep.join(self.paths)}
        if self.rt is not None:
            if self.rt.is_emulator:
                out["implementation"] = self.rt.ffi.string(self.rt.lib.xlossEmuVersion()).decode()
            else:
                out["implementation"] = "vendor library"
            out["device"] = str(self.rt.device)
            origins = self.operator_origins()
            if origins:
                out["operators"] = _describe_origins(origins, self.paths[0])
        if self.layout != "contiguous":
            out["layout"] = self.layout
        return out

    def operator_origins(self) -> dict:
        """``{function: file}`` for every operator function the loaded libraries export: the file
        that actually defines it (``dladdr``), which may be a library the first one depends on.
        The file is None where the platform cannot tell."""
        if self.rt is None:
            return {}
        out = {}
        for op in OPERATORS:
            for fn in (op + "GetWorkspaceSize", op):
                if self.rt.lib.has(fn):
                    out[fn] = _defining_file(self.rt.ffi, self.rt.lib.symbol(fn))
        return out

    def session(self, layout: str | None = None) -> Session:
        """A device session on the loaded library (tests and tools drive the ABI through it); it lays
        tensors out as the backend's ``layout`` option says unless ``layout`` is given."""
        if self.rt is None:
            raise BackendUnavailableError(self._why)
        return self.rt.session(layout or self.layout)

    # -- the kernels -----------------------------------------------------------------------------
    @staticmethod
    def _upstream(s: Session, grad, dtype):
        """The upstream gradient as a tensor: an array in the input dtype, or a scalar as a 0-d
        FLOAT tensor (it broadcasts, and float32 keeps a Python float's value where a 16-bit
        input dtype would round it)."""
        if isinstance(grad, np.ndarray):
            return s.put(grad, dtype)[0]
        return s.put(np.asarray(grad, dtype=np.float32))[0]

    def focal_loss(self, a):
        dt = a.x.dtype
        red = REDUCTION_CODES[a.reduction]
        with self.session() as s:
            tx, ty = s.put(a.x)[0], s.put(a.y)[0]
            tw = s.put(a.weight)[0] if a.weight is not None else s.ffi.NULL
            if a.loss_out is not None:
                tl, bl = s.empty(a.loss_out.shape, dt)
                s.run(FOCAL_FORWARD, tx, ty, tw, a.gamma, a.alpha, red, tl)
            if a.grad_out is not None:
                tg = self._upstream(s, a.grad, dt)
                td, bd = s.empty(a.x.shape, dt)
                s.run(FOCAL_BACKWARD, tg, tx, ty, tw, a.gamma, a.alpha, red, td)
            s.synchronize()
            loss = s.download(bl, a.loss_out.shape, dt) if a.loss_out is not None else None
            dx = s.download(bd, a.x.shape, dt) if a.grad_out is not None else None
        # results reach the caller's buffers only after every call (and the cleanup) succeeded
        if loss is not None:
            np.copyto(a.loss_out, loss)
        if dx is not None:
            np.copyto(a.grad_out, dx)

    def bce_grad(self, a):
        dt = a.x.dtype
        with self.session() as s:
            tg = self._upstream(s, a.grad, dt)
            tx, ty = s.put(a.x)[0], s.put(a.y)[0]
            tw = s.put(a.weight)[0] if a.weight is not None else s.ffi.NULL
            to, bo = s.empty(a.x.shape, dt)
            s.run(BCE_BACKWARD, tg, tx, ty, tw, REDUCTION_CODES[a.reduction], to)
            s.synchronize()
            out = s.download(bo, a.x.shape, dt)
        np.copyto(a.out, out)

    def nll_loss_grad(self, a):
        dt = a.self.dtype
        two_d = a.self.ndim == 2
        classes = a.self.shape[-1]
        # The vendor takes gradOutput, weight and totalWeight in self's dtype; for 16-bit requests
        # the scalars are rounded on the way in, as on a real NPU (the conformance tolerance allows it).
        cdt = dt
        weight = np.ones(classes, cdt) if a.weight is None else a.weight.astype(cdt)
        total = a.total_weight
        if total is None:  # the vendor requires the tensor: sum of weight[target] over rows not ignored
            t = a.target.reshape(-1).astype(np.int64)
            w64 = np.ones(classes) if a.weight is None else a.weight.astype(np.float64)
            counted = (t != a.ignore_index) & (t >= 0) & (t < classes)  # a bad target is the device's to report
            total = float(w64[t[counted]].sum())
        if isinstance(a.grad, np.ndarray):
            grad = a.grad.astype(cdt)
        elif a.reduction == "none" and two_d:  # the vendor wants (N) here: expand the scalar
            grad = np.full(a.self.shape[0], a.grad, dtype=cdt)
        else:
            grad = np.asarray(a.grad, dtype=cdt)
        with np.errstate(over="ignore"):
            total_arr = np.asarray([total], dtype=cdt)
        with self.session() as s:
            tg = s.put(grad)[0]
            ts = s.put(a.self)[0]
            tt = s.put(a.target)[0]
            tw = s.put(weight)[0]
            ttw = s.put(total_arr)[0]
            to, bo = s.empty(a.self.shape, cdt)
            s.run(NLL_BACKWARD, tg, ts, tt, tw, REDUCTION_CODES[a.reduction], a.ignore_index, ttw, to)
            s.synchronize()
            out = s.download(bo, a.self.shape, cdt)
        np.copyto(a.out, out)

    def fused_linear_cross_entropy_grad(self, a):
        dt = a.input.dtype
        bt, h = a.input.shape
        v = a.weight.shape[0]
        with self.session() as s:
            null = s.ffi.NULL
            tg, ti, tw = s.put(a.grad)[0], s.put(a.input)[0], s.put(a.weight)[0]
            tm, tmt = s.put(a.target_mask)[0], s.put(a.masked_target)[0]
            tlm = s.put(a.logits_max)[0] if a.logits_max is not None else null
            tse = s.put(a.sum_exp_logits)[0] if a.sum_exp_logits is not None else null
            tsm = s.put(a.softmax)[0] if a.softmax is not None else null
            tig, big = s.empty((bt, h), dt)
            twg, bwg = s.empty((v, h), dt)
            s.run(FLCE_GRAD, tg, ti, tw, tm, tmt, float(a.label_smoothing), tlm, tse, tsm, tig, twg)
            s.synchronize()
            ig = s.download(big, (bt, h), dt)
            wg = s.download(bwg, (v, h), dt)
        np.copyto(a.input_grad_out, ig)
        np.copyto(a.weight_grad_out, wg)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p), ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", ctypes.c_void_p)]


def _load_dladdr():
    for name in (None, ctypes.util.find_library("dl")):  # glibc >= 2.34 has it in libc itself
        try:
            fn = ctypes.CDLL(name).dladdr
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        fn.restype = ctypes.c_int
        return fn
    return None


_dladdr = _load_dladdr()


def _defining_file(ffi, fn) -> str | None:
    """The shared object that defines the function ``fn`` (a cffi function pointer)."""
    if _dladdr is None:
        return None
    info = _DlInfo()
    if not _dladdr(ctypes.c_void_p(int(ffi.cast("uintptr_t", fn))), ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.fsdecode(info.dli_fname)


def _same_file(a, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _describe_origins(origins: dict, first: str) -> str:
    """``"aclnnA, aclnnB from /x/libfirst.so; aclnnC from /y/liby.so (not the first library given)"``:
    a phase-one/phase-two pair is named once, by its operator, when both come from one file."""
    groups: dict = {}
    for op in OPERATORS:
        files = {origins[f] for f in (op + "GetWorkspaceSize", op) if f in origins}
        if len(files) == 1:
            groups.setdefault(files.pop(), []).append(op)
        else:  # a pair split across libraries (or half missing): name each function
            for f in (op + "GetWorkspaceSize", op):
                if f in origins:
                    groups.setdefault(origins[f], []).append(f)
    parts = []
    for path, names in groups.items():
        where = path if path is not None else "an unknown library"
        note = "" if path is not None and _same_file(path, first) else " (not the first library given)"
        parts.append(f"{', '.join(names)} from {where}{note}")
    return "; ".join(parts)


def make_backend(lib=None, **options) -> AscendBackend:
    """Factory of the ``ascend`` entry point. ``lib``: vendor or port library path(s) in place of the
    emulator; option ``device``: the device id (default 0); option ``layout``: ``"contiguous"``
    (default) or ``"strided"`` (every tensor in larger storage at an offset, with gaps)."""
    unknown = set(options) - {"device", "layout"}
    if unknown:
        raise TypeError(f"the ascend backend takes lib=, device= and layout=; got {sorted(unknown)}")
    return AscendBackend(lib, **options)
