"""The ``ascend`` backend: the CANN aclnn C ABI, driven through cffi.

By default it loads xloss's host emulator (``libxloss_aclnn.so``, the operators, which loads the
emulator's runtime ``libxloss_aclrt.so``; both built from ``csrc/`` at install);
``XLOSS_ASCEND_LIB`` or ``make_backend(lib=...)`` (one path, or several separated by
``os.pathsep``, e.g. CANN's ``libascendcl.so``, ``libnnopbase.so`` and ``libopapi.so``, or a port's
operator library and ``emulator_runtime_path()``) loads another library instead, with the same
adapter. What the backend declares is computed from the symbols the loaded libraries export, and
limited to what the vendor operators accept; ``info()`` says which library each operator came
from. Option ``layout="strided"`` lays every tensor out with an offset and gaps (see
:mod:`.runtime`), so a library's stride or offset bug shows in ``xloss check``. Every buffer sits
between guard regions checked after every operator; option ``checked`` (``checked()``) also
compares every input with what was uploaded. Focal loss goes through xloss's own operators or
DrivingSDK's (:mod:`.operators` tells them apart by symbol names, :mod:`.focal` drives them);
the other kernels go through :mod:`.bce`, :mod:`.nll`, :mod:`.flce` and :mod:`.vocab_parallel`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

from ...backend import Backend
from ...clib import library_paths
from ...errors import BackendUnavailableError, XLossTypeError, XLossValueError
from ...kernels.bce import FORWARD as BCE
from ...kernels.bce import ROW as BCE_GRAD
from ...kernels.bce_with_logits import ROW as BCE_WITH_LOGITS
from ...kernels.cross_entropy import DENSE as SOFTMAX_CE
from ...kernels.cross_entropy import FORWARD as CROSS_ENTROPY
from ...kernels.cross_entropy import GRAD as CROSS_ENTROPY_GRAD
from ...kernels.flce import FLCE_GRAD, LOSS_WITH_MAX_SUM, ONLINE_MAX_SUM
from ...kernels.focal import ROW as FOCAL
from ...kernels.nll import FORWARD as NLL
from ...kernels.nll import ROW as NLL_GRAD
from . import bce, cross_entropy, flce, focal, loss_forward, nll, vocab_parallel
from . import bce_with_logits as _bce_with_logits
from . import softmax_ce as _softmax_ce
from .operators import OPERATORS, declare
from .runtime import GUARD_BYTES, LAYOUTS, AclRuntime, Session

__all__ = ["AscendBackend", "ENV_VAR", "LAYOUTS", "emulator_library_path", "emulator_runtime_path", "include_dir",
           "library_path", "make_backend"]

ENV_VAR = "XLOSS_ASCEND_LIB"
_HERE = Path(__file__).resolve().parent
_EMULATOR = _HERE / "libxloss_aclnn.so"
_EMULATOR_RUNTIME = _HERE / "libxloss_aclrt.so"
GUARD_NOTE = f"{GUARD_BYTES} poisoned bytes before and after every buffer, checked after every operator"


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


#: ``{row: function(backend, args)}``: what runs each kernel (declared from :mod:`.operators`)
IMPLEMENTATIONS = {
    FOCAL: focal.run,
    BCE_GRAD: bce.bce_grad,
    NLL_GRAD: nll.nll_loss_grad,
    FLCE_GRAD: flce.fused_linear_cross_entropy_grad,
    ONLINE_MAX_SUM: vocab_parallel.online_max_sum,
    LOSS_WITH_MAX_SUM: vocab_parallel.loss_with_max_sum,
    BCE_WITH_LOGITS: _bce_with_logits.run,
    # NLL and BCE forward (issue #30)
    NLL: loss_forward.nll_loss,
    BCE: loss_forward.binary_cross_entropy,
}
# -- cross entropy (xloss/kernels/cross_entropy)
IMPLEMENTATIONS[CROSS_ENTROPY] = cross_entropy.cross_entropy_loss
IMPLEMENTATIONS[CROSS_ENTROPY_GRAD] = cross_entropy.cross_entropy_loss_grad
# -- dense-label cross entropy (xloss/kernels/cross_entropy)
IMPLEMENTATIONS[SOFTMAX_CE] = _softmax_ce.softmax_cross_entropy_with_logits


class AscendBackend(Backend):
    """Runs the kernels through an aclnn library: the emulator, or a vendor's.

    Option ``checked``: every input is compared with what was uploaded after every operator
    (guard regions around every buffer are always there and always checked)."""

    implementations = IMPLEMENTATIONS

    def __init__(self, lib=None, *, device: int = 0, layout: str = "contiguous", checked: bool = False):
        if layout not in LAYOUTS:
            raise XLossValueError(f"ascend backend: layout must be one of {', '.join(LAYOUTS)}; got {layout!r}")
        device = _device_id(device)
        paths = library_paths(lib, ENV_VAR, _EMULATOR)
        super().__init__(name="ascend",
                         description="CANN aclnn ABI through cffi (host emulator, or a vendor library via "
                                     f"{ENV_VAR})",
                         options={k: v for k, v in (("lib", lib), ("device", device), ("layout", layout),
                                                    ("checked", bool(checked)))
                                  if v not in (None, 0, "contiguous", False)})
        self.paths = paths
        self.layout = layout
        self.is_checked = bool(checked)
        self.rt: AclRuntime | None = None
        self._why = ""
        self.focal_abi = None
        try:
            self.rt = AclRuntime.shared(paths, device=device)
        except BackendUnavailableError as exc:
            hint = " (build it with: python backends/ascend_aclnn/build.py)" if paths == [str(_EMULATOR)] else ""
            self._why = f"{exc}{hint}"
        else:
            if self.rt.missing:
                self._why = f"{os.pathsep.join(paths)} lacks runtime symbols: {', '.join(self.rt.missing)}"
        self._caps = {}
        if not self._why:
            self._caps, self.focal_abi = declare(self._has)

    # -- what it can do ------------------------------------------------------------------------
    def _has(self, op: str) -> bool:
        return self.rt is not None and self.rt.lib.has(op) and self.rt.lib.has(op + "GetWorkspaceSize")

    def capabilities(self):
        return self._caps

    def availability(self):
        return (False, self._why) if self._why else (True, "")

    def checked(self) -> AscendBackend:
        """This backend with ``checked=True``: inputs compared after every operator (guards are
        always checked)."""
        if self.is_checked:
            return self
        return AscendBackend(self.options.get("lib"), device=self.rt.device if self.rt else 0, layout=self.layout,
                             checked=True)

    def info(self):
        out = {"library": os.pathsep.join(self.paths)}
        if self.rt is not None:
            if self.rt.is_emulator:
                out["implementation"] = self.rt.ffi.string(self.rt.lib.xlossEmuVersion()).decode()
            else:
                out["implementation"] = "vendor library"
            out["device"] = str(self.rt.device)
            out["error reporting"] = ("yes (aclGetRecentErrMsg)" if self.rt.lib.has("aclGetRecentErrMsg") else
                                      "no: the library lacks aclGetRecentErrMsg, so failures show status codes only")
            origins = self.operator_origins()
            if origins:
                out["operators"] = _describe_origins(origins, self.paths[0])
            if self.focal_abi is not None:
                out["focal ABI"] = {"xloss": "xloss's own aclnnXlossSigmoidFocalLoss[Backward]",
                                    "drivingsdk": "DrivingSDK's aclnnSigmoidFocalLoss[Grad] (float32, binary targets; "
                                                  "reductions and upstream gradient applied by the adapter)"}[
                    self.focal_abi]
        if self.layout != "contiguous":
            out["layout"] = self.layout
        out["guards"] = f"{GUARD_NOTE}" + ("; inputs compared after every operator" if self.is_checked else "")
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
        return self.rt.session(layout or self.layout, checked=self.is_checked)


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


def _device_id(device) -> int:
    """``device`` as aclrtSetDevice's ``int32_t deviceId`` (a string of digits too: ``--option device=1``)."""
    if isinstance(device, str) and device.strip().lstrip("+").isdigit():
        device = int(device)
    if isinstance(device, bool) or not isinstance(device, int):
        raise XLossTypeError(f"ascend backend: device must be an int (a device id); got {type(device).__name__} "
                             f"{device!r}")
    if not 0 <= device < 2**31:
        raise XLossValueError(f"ascend backend: device must be a device id in [0, 2**31) (aclrtSetDevice takes an "
                              f"int32_t); got {device}")
    return device


def make_backend(lib=None, **options) -> AscendBackend:
    """Factory of the ``ascend`` entry point. ``lib``: vendor or port library path(s) in place of the
    emulator; option ``device``: the device id (default 0); option ``layout``: ``"contiguous"``
    (default) or ``"strided"`` (every tensor in larger storage at an offset, with gaps); option
    ``checked``: compare every input with what was uploaded after every operator."""
    unknown = set(options) - {"device", "layout", "checked"}
    if unknown:
        raise TypeError(f"the ascend backend takes lib=, device=, layout= and checked=; got {sorted(unknown)}")
    if isinstance(options.get("checked"), str):  # --option checked=true
        options["checked"] = options["checked"].strip().lower() in ("1", "true", "yes", "on")
    return AscendBackend(lib, **options)
