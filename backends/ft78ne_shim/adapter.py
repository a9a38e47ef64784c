"""The ``ft78ne`` and ``mt7004`` backends: xloss's validated arguments -> the DSP calling convention.

One adapter drives the in-tree emulator or a vendor's / port author's library (``lib=`` or
``$XLOSS_FT78NE_LIB``). What it declares follows the symbols the library exports; what it
needs beyond the vendor entry points is optional and named in ``abi`` (error reporting, chip
selection, private-memory allocation).

``memory="shared"`` calls ``<fp|hp>_<op>_s`` once with the caller's arrays (DDR) and the core
mask. ``memory="private"`` stages the data through the private memory of the cores in the mask,
in tiles that fit, like DMA into AM/SM: each tile's operands are copied into buffers allocated in
the core's arena, ``<fp|hp>_<op>_p`` runs on that core, and the results are copied out into host
scratch; the caller's output is written only once every tile has succeeded.
"""

from __future__ import annotations

import math
import os
import threading

import numpy as np

from ...backend import Backend, KernelCaps
from ...errors import BackendUnavailableError, KernelError, XLossTypeError, XLossValueError
from . import abi, guards, staging
from .staging import blk as _blk, fit as _fit, ranges as _ranges

BCE_EPS = 1e-12  # FT78NE_BCE_EPS: the eps of x(1-x) + eps, fixed inside the library
ALIGN = staging.ALIGN

_PREFIX = {"float32": "fp", "float16": "hp"}
_CTYPE = {"float32": "float", "float16": "half"}
_CHIP_DTYPES = {"ft78ne": ("float32",), "mt7004": ("float32", "float16")}
_DESCRIPTION = {
    "ft78ne": "FT78NE DSP calling convention (fp32), host emulator or vendor library via cffi",
    "mt7004": "MT7004 DSP calling convention (fp16, fp32), host emulator or vendor library via cffi",
}
_FOCAL_MODES = {
    "forward": ("sigmoidfocalloss",),
    "grad": ("sigmoidfocallossgrad",),
    "forward+grad": ("sigmoidfocalloss", "sigmoidfocallossgrad"),
}

#: masks ``configurations()`` runs: one core, alternate cores, the two ends, the upper half, all
CONFIG_MASKS = (0x01, 0x55, 0x81, 0xF0, 0xFF)

def _check_int(what: str, value: int) -> int:
    if value > abi.INT_MAX:
        raise XLossValueError(f"{what}={value} does not fit the C int of the FT78NE/MT7004 signature "
                              f"(at most {abi.INT_MAX})")
    return int(value)


def _flag(chip: str, name: str, value) -> bool:
    """A boolean option, also as the command line passes it (a string)."""
    if isinstance(value, (bool, np.bool_)) or value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return text in ("true", "yes", "on", "1")
    raise XLossValueError(f"backend {chip!r}: {name} must be true or false; got {value!r}")


def _mean_operands(g, tw, dt):
    """(loss_grad, total_weight) of a mean call in the dtype. A total weight beyond the dtype's
    range (a half sum over more than 65504 unit weights) is scaled with g by the same power of
    two, exactly: the library's g / total_weight is unchanged."""
    big = float(np.finfo(dt).max) / 2
    scale = 2.0 ** math.ceil(math.log2(abs(tw) / big)) if math.isfinite(tw) and abs(tw) > big else 1.0
    return (np.asarray(g, np.float64) / scale).astype(dt), np.array([tw / scale], dt)


class DspBackend(Backend):
    """``ft78ne`` (fp32) or ``mt7004`` (fp16, fp32) over the DSP calling convention."""

    OPTIONS = ("memory", "core_mask", "lib", "private_bytes", *abi.CODE_OPTIONS, "guards", "deterministic")

    def __init__(self, chip: str, **options):
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise XLossTypeError(f"backend {chip!r}: unknown option(s) {', '.join(unknown)}; "
                                 f"options: {', '.join(self.OPTIONS)}")
        memory = options.get("memory")
        source = ""
        if memory is None:  # the environment may set the default (e.g. to run a suite in private memory)
            memory, source = os.environ.get(abi.MEMORY_ENV_VAR) or "shared", f" (from ${abi.MEMORY_ENV_VAR})"
        if memory not in ("shared", "private"):
            raise XLossValueError(f"backend {chip!r}: memory must be 'shared' or 'private'; got {memory!r}{source}")
        core_mask = options.get("core_mask", abi.CORE_MASK_ALL)
        if isinstance(core_mask, (bool, np.bool_)) or not isinstance(core_mask, (int, np.integer)):
            raise XLossTypeError(f"backend {chip!r}: core_mask must be an int (bit i = core i); "
                                 f"got {type(core_mask).__name__}")
        core_mask = int(core_mask)
        if not 0 < core_mask <= abi.CORE_MASK_ALL:
            what = "selects no core" if core_mask == 0 else "names cores outside 0..7"
            raise XLossValueError(f"backend {chip!r}: core_mask {core_mask:#x} {what}; valid masks are "
                                  f"0x01..0xff (bit i = core i of {abi.NUM_CORES}, 0xff = all)")
        private_bytes = options.get("private_bytes")
        if private_bytes is not None:
            if isinstance(private_bytes, bool) or not isinstance(private_bytes, (int, np.integer)):
                raise XLossTypeError(f"backend {chip!r}: private_bytes must be an int; got {private_bytes!r}")
            if private_bytes < ALIGN:
                raise XLossValueError(f"backend {chip!r}: private_bytes must be >= {ALIGN}; got {private_bytes}")
            private_bytes = int(private_bytes)
        self.guards = _flag(chip, "guards", options.get("guards", False))
        # the in-tree emulator is deterministic for every mask (fixed blocks, fixed order); a
        # library says so with deterministic=True
        declared = options.get("deterministic")
        self._given = {k: v for k, v in options.items() if v is not None}
        self.chip = chip
        self.memory = memory
        self.core_mask = core_mask
        self.cores = [c for c in range(abi.NUM_CORES) if core_mask >> c & 1]
        self.private_bytes = private_bytes
        self.paths = abi.resolve(options.get("lib"))
        try:
            self._codes = abi.code_table(**{k: options.get(k) for k in abi.CODE_OPTIONS})
        except ValueError as exc:
            raise XLossValueError(f"backend {chip!r}: {exc}") from None
        shown = {"memory": memory, "core_mask": f"{core_mask:#04x}"}
        shown.update({k: ",".join(abi.parse_codes(k, options[k])) for k in abi.CODE_OPTIONS
                      if options.get(k) is not None})
        if options.get("lib") is not None:
            shown["lib"] = ":".join(self.paths)
        if private_bytes is not None:
            shown["private_bytes"] = private_bytes
        if self.guards:
            shown["guards"] = True
        if declared is not None:
            shown["deterministic"] = _flag(chip, "deterministic", declared)
        super().__init__(name=chip, description=_DESCRIPTION[chip], options=shown)
        self.deterministic = (abi.is_emulator(self.paths) if declared is None
                              else _flag(chip, "deterministic", declared))
        self._private_blocks = threading.local()  # checked mode: this core thread's guarded blocks
        self._lib = None
        self._caps = None

    # -- the library ---------------------------------------------------------------------
    @property
    def lib(self):
        if self._lib is None:
            with abi.state_lock():  # not per backend: a forked child gets a fresh one
                if self._lib is None:
                    lib = abi.load(self.paths)  # BackendUnavailableError if missing
                    self._has_errors = all(lib.has(s) for s in abi.ERROR_HELPERS)
                    self._has_clear = lib.has("ft78ne_emu_clear_error")
                    self._has_chip = lib.has(abi.CHIP_HELPER)
                    self._has_private = all(lib.has(s) for s in abi.PRIVATE_HELPERS)
                    self._has_capacity = lib.has(abi.CAPACITY_HELPER)
                    self._direct = abi.is_emulator(self.paths)
                    self._has_ext = lib.has(abi.EXT_MARKER) and int(lib.symbol(abi.EXT_MARKER)()) == abi.EXT_ABI
                    self._lib = lib
        return self._lib

    @property
    def ffi(self):
        return self.lib.ffi

    def availability(self):
        try:
            lib = self.lib
        except BackendUnavailableError as exc:
            hint = ""
            if abi.is_emulator(self.paths) or self.paths == [str(abi.EMULATOR)]:
                hint = " (build the emulator: python backends/ft78ne_shim/build.py, or reinstall xloss)"
            return False, f"{exc}{hint}"
        suffix = "_s" if self.memory == "shared" else "_p"
        if not self.capabilities():
            return False, (f"{':'.join(self.paths)} exports no {'/'.join(_PREFIX[d] for d in _CHIP_DTYPES[self.chip])}"
                           f"_<op>{suffix} entry point")
        if self.memory == "private":
            missing = [s for s in abi.PRIVATE_HELPERS if not lib.has(s)]
            if missing:
                return False, (f"memory='private' needs the private-memory helpers {', '.join(missing)} "
                               f"(see include/ft78ne_emu.h), which {':'.join(self.paths)} does not export")
            if not self._has_capacity and self.private_bytes is None:
                return False, (f"memory='private' needs {abi.CAPACITY_HELPER} or the private_bytes= option "
                               "(the private memory per core)")
        return True, ""

    def info(self):
        out = {"library": ":".join(self.paths), "chip": self.chip.upper(), "memory": self.memory,
               "core_mask": f"{self.core_mask:#04x}"}
        try:
            lib = self.lib
        except BackendUnavailableError as exc:
            out["error"] = str(exc)
            return out
        out["library kind"] = "in-tree emulator" if self._direct else "external (vendor or port) library"
        if self._has_capacity:
            out["private memory per core"] = f"{int(lib.ft78ne_emu_private_capacity())} bytes"
        if self.private_bytes is not None:
            out["staging budget per core"] = f"{self.private_bytes} bytes"
        if self._has_errors:
            out["error reporting"] = "yes (ft78ne_emu_last_error and ft78ne_emu_last_error_message)"
        else:
            have = [s for s in abi.ERROR_HELPERS if lib.has(s)]
            out["error reporting"] = (f"no: the library exports {' and '.join(have) or 'neither'} of "
                                      f"{', '.join(abi.ERROR_HELPERS)}, so its refusals cannot be seen")
        out["deterministic"] = "yes" if self.deterministic else "not declared (deterministic=True declares it)"
        return out

    # -- capabilities: what the loaded library's symbols can express -----------------------
    def capabilities(self):
        if self._caps is None:
            try:
                lib = self.lib
            except BackendUnavailableError:
                return {}
            self._caps = self._declare(lib)
        return self._caps

    def _declare(self, lib):
        suffix = "_s" if self.memory == "shared" else "_p"
        dtypes = _CHIP_DTYPES[self.chip]

        def has(dtype, *ops):  # ours only where the library declares our layouts (abi.OURS_OPS)
            return all(lib.has(f"{_PREFIX[dtype]}_{op}{suffix}") and (op in abi.VENDOR_OPS or self._has_ext)
                       for op in ops)

        limit = abi.INT_MAX  # sizes are C ints
        memory_note = f"{self.memory} memory, core_mask {self.core_mask:#04x}"
        caps = {}
        # focal: a dtype's modes are those whose entry points it exports; declare the largest
        # (dtypes x modes) block every declared dtype fully supports.
        per_dtype = {d: {m for m, ops in _FOCAL_MODES.items() if has(d, *ops)} for d in dtypes}
        candidates = [tuple(dtypes)] + ([(d,) for d in dtypes] if len(dtypes) > 1 else [])
        best = (0, (), ())
        for subset in candidates:
            modes = set.intersection(*(per_dtype[d] for d in subset))
            if len(modes) * len(subset) > best[0]:
                best = (len(modes) * len(subset), subset, tuple(sorted(modes)))
        if best[0]:
            # private memory tiles a mean: each tile's scale g*m/n crosses the ABI in the data's dtype
            caps["focal_loss"] = KernelCaps.declare(
                "focal_loss", dtypes=best[1], mode=best[2], weight=False, max_elements=limit,
                upstream_in_dtype=self.memory == "private",
                notes=f"no per-element weight in the DSP signature; {memory_note}")
        d = [x for x in dtypes if has(x, "binarycrossentropygrad")]
        if d:
            caps["bce_grad"] = KernelCaps.declare(
                "bce_grad", dtypes=d, eps_mode="add", fixed={"eps": BCE_EPS}, max_elements=limit,
                upstream_in_dtype=self.memory == "private", notes=f"the manual's x(1-x) + eps; {memory_note}")
        d = [x for x in dtypes if has(x, "nlllossgrad")]
        if d:
            caps["nll_loss_grad"] = KernelCaps.declare("nll_loss_grad", dtypes=d, max_elements=limit,
                                                       notes=memory_note)
        d = [x for x in dtypes if has(x, "fusedlinearcrossentropylossgrad")]
        if d:
            caps["fused_linear_cross_entropy_grad"] = KernelCaps.declare(
                "fused_linear_cross_entropy_grad", dtypes=d, label_smoothing=False, max_elements=limit,
                partials_in_dtype=self.memory == "private",  # tiles add into 16-bit outputs (accumulate=1)
                notes=f"no label smoothing in the DSP signature; {memory_note}")
        return caps

    # -- calling the library -----------------------------------------------------------------
    def _ptr(self, arr, ctype):
        if arr is None:
            return self.ffi.NULL
        if self.guards:  # staged into guarded scratch by _invoke
            return guards.HostArg(arr, ctype)
        if not arr.flags.aligned:  # the ABI needs naturally aligned elements (the emulator refuses others)
            arr = arr.copy()  # the cdata keeps the copy alive
        return self.ffi.from_buffer(ctype + "[]", arr)

    def _raise_for_status(self, what: str) -> None:
        if not self._has_errors:
            return
        lib = self.lib
        code = int(lib.ft78ne_emu_last_error())
        if code:
            msg = self.ffi.string(lib.ft78ne_emu_last_error_message()).decode("utf-8", "replace") or what
            name = abi.STATUS.get(code, f"status {code}")
            raise KernelError(f"backend {self.name!r}: {msg} [{name}]", status=code, status_name=abi.STATUS.get(code))

    def _invoke(self, fname: str, *args) -> None:
        """Call a vendor function on this thread (emulating this backend's chip) and raise its error."""
        lib = self.lib
        fn = lib.symbol(fname)
        if self._has_chip:  # per thread: set before every call, as any caller on this thread must
            lib.ft78ne_emu_set_chip(abi.CHIPS[self.chip])
        if self._has_clear:
            lib.ft78ne_emu_clear_error()
        if self.guards:
            guards.checked_call(self, fname, fn, args, self.ffi, 2 if fname.startswith("hp") else 4,
                                self._codes[fname[3:-2]], getattr(self._private_blocks, "blocks", None))
            return
        fn(*args)
        self._raise_for_status(fname)

    _OPS = {"bce_grad": ("binarycrossentropygrad",), "nll_loss_grad": ("nlllossgrad",),
            "fused_linear_cross_entropy_grad": ("fusedlinearcrossentropylossgrad",)}

    def _require(self, req):
        """Check ``req``; a request this chip could express but the library does not export is
        "not implemented" (BackendUnavailableError naming the symbol), not merely undeclared."""
        if self.refusal(req) is not None and req.dtype in _CHIP_DTYPES[self.chip]:
            ops = _FOCAL_MODES[req.variant["mode"]] if req.kernel == "focal_loss" else self._OPS[req.kernel]
            suffix = "_s" if self.memory == "shared" else "_p"
            for op in ops:
                symbol = f"{_PREFIX[req.dtype]}_{op}{suffix}"
                if not self.lib.has(symbol):
                    raise BackendUnavailableError(f"{':'.join(self.paths)} does not export {symbol}")
                if op in abi.OURS_OPS and not self._has_ext:
                    raise BackendUnavailableError(
                        f"{':'.join(self.paths)} exports {symbol} but not {abi.EXT_MARKER}() returning {abi.EXT_ABI}: "
                        f"{op} is xloss's own layout (no vendor page), called only in libraries that declare it")
        self.check(req)

    def _names(self, dtype, op):
        name = dtype.name  # float32 or float16: the request was checked against the declaration
        suffix = "_s" if self.memory == "shared" else "_p"
        return f"{_PREFIX[name]}_{op}{suffix}", _CTYPE[name]

    def _out(self, arr: np.ndarray) -> np.ndarray:
        """Where a shared call writes: the output itself for the emulator (it validates before it
        writes), host scratch for an external library (a port that fails half-way cannot corrupt it)."""
        if self._direct and arr.flags.aligned:
            return arr
        return np.full_like(arr, np.nan)  # aligned; unwritten elements show as NaN

    # -- upstream gradients --------------------------------------------------------------------
    def _upstream(self, op: str, grad, reduction: str, dtype):
        """(reduction code of ``op``, dloss) for one call over the whole input.

        A uniform gradient for ``none`` goes as one element with reduction=sum, which the
        convention defines identically (dx_n = dloss * ...), instead of an n-element array."""
        codes = self._codes[op]
        if isinstance(grad, np.ndarray):
            return codes["none"], grad.reshape(-1)
        return codes["mean" if reduction == "mean" else "sum"], np.array([grad], dtype=dtype)

    def _tile_upstream(self, op: str, grad, reduction: str, dtype, lo: int, hi: int, n: int, ntiles: int):
        """(reduction code, dloss) for the tile [lo, hi) of n elements: ``mean`` stays global.

        The library divides a mean's upstream gradient by the size it is given, the tile's m, so the
        tile gets g * m / n (rounded once to the dtype; balanced tiles keep it near g / ntiles, far
        from underflow)."""
        if isinstance(grad, np.ndarray):
            return self._codes[op]["none"], grad.reshape(-1)[lo:hi]
        if reduction != "mean" or ntiles == 1:
            return self._upstream(op, grad, reduction, dtype)
        with np.errstate(over="ignore", under="ignore"):
            return self._codes[op]["mean"], np.array([grad * (hi - lo) / n], dtype=dtype)

    # -- private memory -------------------------------------------------------------------------
    def _blk(self, nbytes: int) -> int:
        """Arena bytes one staged buffer of ``nbytes`` takes (checked mode: with its guards)."""
        return _blk(nbytes) + (2 * guards.GUARD if self.guards else 0)

    def configurations(self) -> list:
        """This backend under the core masks of ``CONFIG_MASKS`` (all options but the mask kept):
        in shared memory the cores splitting each call, in private memory the cores whose arenas
        hold the tiles. Each must give this backend's results."""
        return [(f"core_mask={m:#04x}", DspBackend(self.chip, **dict(self._given, core_mask=m)))
                for m in CONFIG_MASKS]

    def checked(self) -> "DspBackend":
        """This backend with guards=True (see :mod:`.guards`); a replay that records the options
        reproduces it."""
        return self if self.guards else DspBackend(self.chip, **dict(self._given, guards=True))

    def _budget(self) -> int:
        if self.private_bytes is not None:
            return self.private_bytes
        return int(self.lib.ft78ne_emu_private_capacity())

    def _too_big(self, what: str, need: int):
        return KernelError(
            f"backend {self.name!r} (memory='private'): {what} needs {need} bytes of private memory, more than "
            f"the {self._budget()} bytes per core available for staging; use memory='shared', or a larger "
            f"capacity (FT78NE_EMU_PRIVATE_BYTES / ft78ne_emu_set_private_capacity / private_bytes=)",
            status=abi.ERR_CAPACITY, status_name=abi.STATUS[abi.ERR_CAPACITY])

    def _select_core(self, core: int) -> None:
        lib = self.lib
        if int(lib.ft78ne_emu_set_core(core)) != 0:
            self._raise_for_status("ft78ne_emu_set_core")
            raise KernelError(f"backend {self.name!r}: ft78ne_emu_set_core({core}) failed")

    def _run_private(self, specs: dict, ntiles: int, stage_call, *, cores=None) -> None:
        """Tiles on the cores of the mask, each core on a worker thread (:func:`.staging.run_private`)."""
        staging.run_private(self, specs, ntiles, stage_call, list(cores or self.cores))

    # -- kernels -----------------------------------------------------------------------------------
    def focal_loss(self, a):
        self._require(a.request())
        # alpha crosses the ABI as a C float; the conformance tolerance models that rounding
        self._focal(a)

    def _focal(self, a):
        n = _check_int("input_size", a.x.size)
        x, y = a.x.reshape(-1), a.y.reshape(-1)
        if a.loss_out is not None:
            fname, ct = self._names(a.x.dtype, "sigmoidfocalloss")
            if self.memory == "shared":
                out = self._out(a.loss_out.reshape(-1))
                self._invoke(fname, n, self._codes["sigmoidfocalloss"][a.reduction], a.alpha, a.gamma, self._ptr(x, ct),
                             self._ptr(y, ct), self._ptr(out, ct), self.core_mask)
                self._finish(a.loss_out, out)
            else:
                self._focal_forward_private(a, fname, ct, x, y, n)
        if a.grad_out is not None:
            fname, ct = self._names(a.x.dtype, "sigmoidfocallossgrad")
            if self.memory == "shared":
                red, dl = self._upstream("sigmoidfocallossgrad", a.grad, a.reduction, a.x.dtype)
                out = self._out(a.grad_out.reshape(-1))
                self._invoke(fname, n, red, a.alpha, a.gamma, self._ptr(x, ct), self._ptr(y, ct),
                             self._ptr(dl, ct), self._ptr(out, ct), self.core_mask)
                self._finish(a.grad_out, out)
            else:
                self._elementwise_grad_private(
                    a, fname, ct, n, [x, y], lambda b, m, red, has_w: (
                        m, red, a.alpha, a.gamma, b["x0"].ptr, b["x1"].ptr, b["dl"].ptr, b["dx"].ptr),
                    a.grad_out)

    def bce_grad(self, a):
        self._require(a.request())
        n = _check_int("input_size", a.x.size)
        x, y = a.x.reshape(-1), a.y.reshape(-1)
        # the vendor takes one weight per element: expand the broadcastable weight
        w = None if a.weight is None else np.ascontiguousarray(np.broadcast_to(a.weight, a.x.shape)).reshape(-1)
        fname, ct = self._names(a.x.dtype, "binarycrossentropygrad")
        if self.memory == "shared":
            red, dl = self._upstream("binarycrossentropygrad", a.grad, a.reduction, a.x.dtype)
            out = self._out(a.out.reshape(-1))
            self._invoke(fname, n, red, self._ptr(x, ct), self._ptr(y, ct), self._ptr(w, ct), self._ptr(dl, ct),
                         self._ptr(out, ct), int(w is not None), self.core_mask)
            self._finish(a.out, out)
        else:
            ins = [x, y] + ([w] if w is not None else [])
            self._elementwise_grad_private(
                a, fname, ct, n, ins, lambda b, m, red, has_w: (
                    m, red, b["x0"].ptr, b["x1"].ptr, b["x2"].ptr if has_w else self.ffi.NULL, b["dl"].ptr,
                    b["dx"].ptr, int(has_w)),
                a.out, has_weight=w is not None)

    @staticmethod
    def _finish(dst: np.ndarray, src: np.ndarray) -> None:
        flat = dst.reshape(-1)
        if src.size and not np.shares_memory(src, flat):  # scratch of an external library: copy it over
            flat[...] = src.reshape(-1)

    def _elementwise_grad_private(self, a, fname, ct, n, ins, args_of, out, *, has_weight=False):
        """BCE / focal gradient through private memory: tiles of m elements, mean kept global (a
        tile gets g*m/n with reduction=mean). float16 means over several tiles run the fp_ form on
        exact float32 copies when the library has it: g*m/n in half would be rounded (below half's
        normal range, by more than half an ulp) before the library applies it; the float32 results
        are rounded once to half here. Without fp_, hp_ with the half scale (upstream_in_dtype)."""
        op = fname[3:-2]
        dt = sdt = a.x.dtype
        per_element = isinstance(a.grad, np.ndarray)

        def plan(es):
            def need(t):
                return len(ins) * self._blk(t * es) + self._blk((t if per_element else 1) * es) + self._blk(t * es)
            t = _fit(self._budget(), need, max(n, 1))
            if t == 0:
                raise self._too_big(f"{fname} on one element", need(1))
            return t, _ranges(n, t)

        t, tiles = plan(dt.itemsize)
        if (len(tiles) > 1 and a.reduction == "mean" and not per_element and dt == np.float16
                and self.lib.has("fp" + fname[2:])):
            sdt, fname, ct = np.dtype(np.float32), "fp" + fname[2:], "float"
            t, tiles = plan(4)
        host = np.empty(n, dt)
        specs = {f"x{i}": (ct, sdt, t) for i in range(len(ins))}
        specs["dl"] = (ct, sdt, t if per_element else 1)
        specs["dx"] = (ct, sdt, t)

        def stage(i, b):
            lo, hi = tiles[i]
            m = hi - lo
            for j, arr in enumerate(ins):
                b[f"x{j}"].arr[:m] = arr[lo:hi]
            red, dl = self._tile_upstream(op, a.grad, a.reduction, sdt, lo, hi, n, len(tiles))
            b["dl"].arr[:dl.size] = dl
            self._invoke(fname, *args_of(b, m, red, has_weight))
            with np.errstate(over="ignore"):  # float32 results past half's range round to inf, as one call's would
                host[lo:hi] = b["dx"].arr[:m]

        self._run_private(specs, len(tiles), stage)
        out.reshape(-1)[...] = host

    def _focal_forward_private(self, a, fname, ct, x, y, n):
        """Focal loss through private memory. ``none`` or one tile: the library's own reduction.
        ``mean``/``sum`` over several tiles: each tile returns its sum, combined here in float64
        (``math.fsum``, in tile order, whatever core ran it) and rounded once to the dtype. float16
        tiles run the ``fp_`` form on exact float32 copies when the library has it: a half tile sum
        would be rounded (and could overflow) before the tiles meet, one rounding more than a
        single call makes (without ``fp_``, half sums: README, "memory model")."""
        dt = a.x.dtype
        none = a.reduction == "none"

        def plan(es):
            def need(t):
                return 2 * self._blk(t * es) + self._blk((t if none else 1) * es)
            t = _fit(self._budget(), need, max(n, 1))
            if t == 0:
                raise self._too_big(f"{fname} on one element", need(1))
            return t, _ranges(n, t)

        t, tiles = plan(dt.itemsize)
        single = none or len(tiles) == 1
        tdt, suffix = dt, fname[2:]
        if not single and dt == np.float16 and self.lib.has("fp" + suffix):
            tdt, fname, ct = np.dtype(np.float32), "fp" + suffix, "float"
            t, tiles = plan(4)
        tile_red = self._codes["sigmoidfocalloss"][a.reduction if single else "sum"]
        host = np.empty(n if none else 1, dt)
        partial = np.zeros(len(tiles), np.float64)
        specs = {"x": (ct, tdt, t), "y": (ct, tdt, t), "loss": (ct, tdt, t if none else 1)}

        def stage(i, b):
            lo, hi = tiles[i]
            m = hi - lo
            b["x"].arr[:m] = x[lo:hi]
            b["y"].arr[:m] = y[lo:hi]
            self._invoke(fname, m, tile_red, a.alpha, a.gamma, b["x"].ptr, b["y"].ptr, b["loss"].ptr)
            if none:
                host[lo:hi] = b["loss"].arr[:m]
            elif single:
                host[0] = b["loss"].arr[0]
            else:
                partial[i] = float(b["loss"].arr[0])

        self._run_private(specs, len(tiles), stage)
        if not single:
            total = math.fsum(partial)
            with np.errstate(over="ignore", invalid="ignore"):
                host[0] = np.asarray(total / n if a.reduction == "mean" else total).astype(dt)
        a.loss_out.reshape(-1)[...] = host

    def nll_loss_grad(self, a):
        """The manual's nlllossgrad has no ignore_index: rows whose target is ignore_index are
        left out of the call (the kept rows are compacted, their gradient rows scattered back, the
        ignored ones zero), so the port's own none/sum/mean paths run on exactly the rows PyTorch
        counts, with the global total_weight: no extra rounding, whatever is ignored."""
        self._require(a.request())
        dt = a.self.dtype
        batch = _check_int("batch", a.self.shape[0] if a.self.ndim == 2 else 1)
        classes = _check_int("class_num", a.self.shape[-1])
        t64 = a.target.reshape(-1).astype(np.int64)
        kept = t64 != a.ignore_index
        rows = None if kept.all() else np.flatnonzero(kept)  # None: every row, no copy
        w = np.ones(classes, dt) if a.weight is None else a.weight  # the signature has no weight_defined
        codes = self._codes["nlllossgrad"]
        per_row = isinstance(a.grad, np.ndarray)
        g = a.grad.reshape(-1) if per_row else np.array([a.grad], dt)
        # a uniform gradient for none is the sum call's (-g * w), as for the element-wise operators
        red = codes["none" if per_row else "mean" if a.reduction == "mean" else "sum"]
        tw = None
        if a.reduction == "mean":
            tw = a.total_weight
            if tw is None:
                ws = np.ones(classes) if a.weight is None else a.weight.astype(np.float64)
                tw = math.fsum(ws[t64[kept]])
            g, tw = _mean_operands(g, tw, dt)
        out = a.out.reshape(batch, classes)
        labels = (t64 if rows is None else t64[rows]).astype(np.int32)
        fname, ct = self._names(dt, "nlllossgrad")
        if self.memory == "private":
            return self._nll_private(a, fname, ct, rows, labels, w, g, red, tw, per_row, out)
        if rows is not None:
            out[...] = 0
            if rows.size == 0:
                return
        logits = a.self.reshape(batch, classes) if rows is None else a.self.reshape(batch, classes)[rows]
        dl = g if rows is None or not per_row else g[rows]
        dst = self._out(out) if rows is None else np.empty((rows.size, classes), dt)
        self._invoke(fname, self._ptr(logits, ct), self._ptr(dl, ct), self._ptr(labels, "int"), self._ptr(w, ct),
                     self._ptr(tw, ct), self._ptr(dst, ct), labels.size, classes, red, self.core_mask)
        if rows is None:
            self._finish(a.out, dst)
        else:
            out[rows] = dst

    def _nll_private(self, a, fname, ct, rows, labels, w, g, red, tw, per_row, out):
        """Tiles of kept rows (and class chunks when a row does not fit: a chunk's call gets the
        rows whose label lies in it, relative to it); total_weight stays global."""
        dt = a.self.dtype
        es = dt.itemsize
        batch, classes = out.shape
        rows = np.arange(batch) if rows is None else rows
        logits = a.self.reshape(batch, classes)

        def need(r, cc):
            return (2 * self._blk(r * cc * es) + self._blk((r if per_row else 1) * es) + self._blk(r * 4) + self._blk(cc * es)
                    + (self._blk(es) if tw is not None else 0))

        budget = self._budget()
        cc = classes if need(1, classes) <= budget else _fit(budget, lambda c: need(1, c), classes)
        if classes and cc == 0:
            raise self._too_big(f"{fname} on one row and one class", need(1, 1))
        rmax = _fit(budget, lambda r: need(r, cc), max(rows.size, 1))
        tiles = []  # (rows of the call, their labels relative to the chunk, chunk start, chunk end)
        for c0, c1 in _ranges(classes, cc) if cc else []:
            inside = (labels >= c0) & (labels < c1)
            sel, lab = rows[inside], labels[inside] - c0
            tiles += [(sel[lo:hi], lab[lo:hi], c0, c1) for lo, hi in _ranges(sel.size, rmax) if hi > lo]
        host = np.zeros((batch, classes), dt)
        specs = {"lg": (ct, dt, rmax * cc), "dl": (ct, dt, rmax if per_row else 1), "t": ("int", np.int32, rmax),
                 "w": (ct, dt, cc), "dx": (ct, dt, rmax * cc)}
        if tw is not None:
            specs["tw"] = (ct, dt, 1)

        def stage(i, b):
            sel, lab, c0, c1 = tiles[i]
            m, k = sel.size, c1 - c0
            b["lg"].arr[:m * k] = logits[sel, c0:c1].reshape(-1)
            dl = g[sel] if per_row else g
            b["dl"].arr[:dl.size] = dl
            b["t"].arr[:m] = lab
            b["w"].arr[:k] = w[c0:c1]
            if tw is not None:
                b["tw"].arr[0] = tw[0]
            self._invoke(fname, b["lg"].ptr, b["dl"].ptr, b["t"].ptr, b["w"].ptr,
                         b["tw"].ptr if tw is not None else self.ffi.NULL, b["dx"].ptr, m, k, red)
            host[sel, c0:c1] = b["dx"].arr[:m * k].reshape(m, k)

        if tiles:
            self._run_private(specs, len(tiles), stage)
        out[...] = host

    def fused_linear_cross_entropy_grad(self, a):
        self._require(a.request())
        dt = a.input.dtype
        bt, hidden = a.input.shape
        vocab = a.weight.shape[0]
        for what, v in (("bt", bt), ("hidden", hidden), ("vocab", vocab)):
            _check_int(what, v)
        # the DSP layout: one byte per token, nonzero = target not in this shard
        if a.mask_format == "bitpacked":
            mask = np.unpackbits(a.target_mask, count=bt, bitorder="little")
        else:
            mask = np.ascontiguousarray(a.target_mask).view(np.uint8)
        mt = a.masked_target.astype(np.int32)  # in [0, V), checked by validation
        softmax = a.mode == "softmax"
        fname, ct = self._names(dt, "fusedlinearcrossentropylossgrad")
        if self.memory == "shared":
            ig, wg = self._out(a.input_grad_out), self._out(a.weight_grad_out)
            self._invoke(fname, bt, hidden, vocab, self._ptr(a.grad, "float"), self._ptr(a.input, ct),
                         self._ptr(a.weight, ct), self._ptr(mask, "unsigned char"), self._ptr(mt, "int"),
                         self._ptr(a.logits_max, "float"), self._ptr(a.sum_exp_logits, "float"),
                         self._ptr(a.softmax, "float"), self._ptr(ig, ct), self._ptr(wg, ct), int(softmax),
                         self.core_mask)
            self._finish(a.input_grad_out, ig)
            self._finish(a.weight_grad_out, wg)
        else:
            self._flce_private(a, fname, ct, bt, hidden, vocab, mask, mt, softmax)

    def _flce_private(self, a, fname, ct, bt, hidden, vocab, mask, mt, softmax):
        """Tiles of tokens x vocabulary rows, accumulated in place with the ``accumulate`` flag.

        input_grad[b-tile] sums over the vocabulary tiles, weight_grad[v-tile] over the token
        tiles: tile (b, v) stages both partial outputs in and adds (accumulate=1), except the very
        first, which overwrites (accumulate=0). The tiles form one accumulation chain, so they run
        in order on the first core of the mask."""
        dt = a.input.dtype
        es = dt.itemsize

        def need(b, v):
            n = (self._blk(b * 4) + 2 * self._blk(b * hidden * es) + 2 * self._blk(v * hidden * es) + self._blk(b) + self._blk(b * 4)
                 + (self._blk(b * v * 4) if softmax else 2 * self._blk(b * 4)))
            return n + (_blk(hidden * 4) if hidden else 0)  # the library's row accumulator (private scratch)

        budget = self._budget()
        if need(1, 1) > budget:
            raise self._too_big(f"{fname} on one token and one vocabulary row (hidden={hidden})", need(1, 1))
        if need(1, vocab) <= budget:
            vt = vocab
        else:  # vocabulary rows take at most half the budget, tokens the rest
            vt = max(1, _fit(budget // 2, lambda v: need(1, v), vocab))
        btile = _fit(budget, lambda b: need(b, vt), max(bt, 1))
        v_tiles = _ranges(vocab, vt) if vt else [(0, 0)]
        b_tiles = _ranges(bt, btile)
        tiles = [(bi, vi) for vi in range(len(v_tiles)) for bi in range(len(b_tiles))]
        ig = np.zeros((bt, hidden), dt)
        wg = np.zeros((vocab, hidden), dt)
        in_shard = mask == 0
        specs = {"grad": ("float", np.float32, btile), "x": (ct, dt, btile * hidden), "w": (ct, dt, vt * hidden),
                 "mask": ("unsigned char", np.uint8, btile), "mt": ("int", np.int32, btile),
                 "ig": (ct, dt, btile * hidden), "wg": (ct, dt, vt * hidden)}
        if softmax:
            specs["sm"] = ("float", np.float32, btile * vt)
        else:
            specs["lm"] = ("float", np.float32, btile)
            specs["se"] = ("float", np.float32, btile)
        whole_v = len(v_tiles) == 1

        def stage(i, b):
            bi, vi = tiles[i]
            (b0, b1), (v0, v1) = b_tiles[bi], v_tiles[vi]
            m, k = b1 - b0, v1 - v0
            b["grad"].arr[:m] = a.grad[b0:b1]
            b["x"].arr[:m * hidden] = a.input[b0:b1].reshape(-1)
            b["w"].arr[:k * hidden] = a.weight[v0:v1].reshape(-1)
            if whole_v:
                b["mask"].arr[:m] = mask[b0:b1]
                b["mt"].arr[:m] = mt[b0:b1]
            else:  # targets relative to the vocabulary tile; elsewhere counts as "not in this shard"
                inside = in_shard[b0:b1] & (mt[b0:b1] >= v0) & (mt[b0:b1] < v1)
                b["mask"].arr[:m] = ~inside
                b["mt"].arr[:m] = np.where(inside, mt[b0:b1] - v0, 0)
            if softmax:
                b["sm"].arr[:m * k] = a.softmax[b0:b1, v0:v1].reshape(-1)
            else:
                b["lm"].arr[:m] = a.logits_max[b0:b1]
                b["se"].arr[:m] = a.sum_exp_logits[b0:b1]
            accumulate = int(i != 0)
            if accumulate:  # partial sums so far (zeros where this tile is the first to touch them)
                b["ig"].arr[:m * hidden] = ig[b0:b1].reshape(-1)
                b["wg"].arr[:k * hidden] = wg[v0:v1].reshape(-1)
            nul = self.ffi.NULL
            self._invoke(fname, m, hidden, k, b["grad"].ptr, b["x"].ptr, b["w"].ptr, b["mask"].ptr, b["mt"].ptr,
                         nul if softmax else b["lm"].ptr, nul if softmax else b["se"].ptr,
                         b["sm"].ptr if softmax else nul, b["ig"].ptr, b["wg"].ptr, int(softmax), accumulate)
            ig[b0:b1] = b["ig"].arr[:m * hidden].reshape(m, hidden)
            wg[v0:v1] = b["wg"].arr[:k * hidden].reshape(k, hidden)

        self._run_private(specs, len(tiles), stage, cores=self.cores[:1])
        a.input_grad_out[...] = ig
        a.weight_grad_out[...] = wg
