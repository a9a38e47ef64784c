"""The ``ft78ne`` and ``mt7004`` backends: xloss's validated arguments -> the DSP calling convention.

One backend class drives the in-tree emulator or a vendor's / port author's library (``lib=`` or
``$XLOSS_FT78NE_LIB``). It assembles the parts: :mod:`.options` (parsing), :mod:`.library`
(loading, optional helpers, status codes), :mod:`.capabilities` (what the symbols can express),
the kernels (:mod:`.elementwise`, :mod:`.nll`, :mod:`.flce`, :mod:`.vocab_parallel`), :mod:`.staging` (private memory)
and :mod:`.guards` (checked mode).

``memory="shared"`` calls ``<fp|hp>_<op>_s`` once with the caller's arrays (DDR) and the core
mask. ``memory="private"`` stages the data through the private memory of the cores in the mask,
in tiles that fit, like DMA into AM/SM: each tile's operands are copied into buffers allocated in
the core's arena, ``<fp|hp>_<op>_p`` runs on that core, and the results are copied out into host
scratch; the caller's output is written only once every tile has succeeded.
"""

from __future__ import annotations

import threading

import numpy as np

from ...backend import Backend
from ...errors import BackendUnavailableError, KernelError
from ...kernels.bce import FORWARD as BCE
from ...kernels.bce import ROW as BCE_GRAD
from ...kernels.bce_with_logits import ROW as BCE_WITH_LOGITS
from ...kernels.cross_entropy import DENSE as SOFTMAX_CROSS_ENTROPY
from ...kernels.cross_entropy import FORWARD as CROSS_ENTROPY
from ...kernels.cross_entropy import GRAD as CROSS_ENTROPY_GRAD
from ...kernels.flce import FLCE_GRAD, LOSS_WITH_MAX_SUM, ONLINE_MAX_SUM
from ...kernels.focal import ROW as FOCAL
from ...kernels.nll import FORWARD as NLL
from ...kernels.nll import ROW as NLL_GRAD
from . import (
    abi,
    capabilities,
    elementwise,
    flce,
    guards,
    library,
    loss_forward,
    nll,
    options,
    sigmoid_ce,
    softmax_ce,
    softmax_ce_grad,
    staging,
    vocab_parallel,
)

#: masks ``configurations()`` runs: one core, alternate cores, the two ends, the upper half, all
CONFIG_MASKS = (0x01, 0x55, 0x81, 0xF0, 0xFF)


#: ``{row: function(backend, args)}``: what runs each kernel (declared from :mod:`.capabilities`)
IMPLEMENTATIONS = {
    FOCAL: elementwise.focal_loss,
    BCE_GRAD: elementwise.bce_grad,
    NLL_GRAD: nll.nll_loss_grad,
    FLCE_GRAD: flce.fused_linear_cross_entropy_grad,
    ONLINE_MAX_SUM: vocab_parallel.online_max_sum,
    LOSS_WITH_MAX_SUM: vocab_parallel.loss_with_max_sum,
    BCE_WITH_LOGITS: sigmoid_ce.bce_with_logits,
    # NLL and BCE forward (issue #30)
    NLL: loss_forward.nll_loss,
    BCE: loss_forward.binary_cross_entropy,
}
# softmax cross entropy (issue #30)
IMPLEMENTATIONS[SOFTMAX_CROSS_ENTROPY] = softmax_ce.softmax_cross_entropy_with_logits
IMPLEMENTATIONS[CROSS_ENTROPY] = softmax_ce.cross_entropy_loss
IMPLEMENTATIONS[CROSS_ENTROPY_GRAD] = softmax_ce_grad.cross_entropy_loss_grad


class DspBackend(Backend):
    """``ft78ne`` (fp32) or ``mt7004`` (fp16, fp32) over the DSP calling convention."""

    OPTIONS = options.OPTIONS
    implementations = IMPLEMENTATIONS

    def __init__(self, chip: str, **opts):
        o = options.parse(chip, opts)
        super().__init__(name=chip, description=capabilities.DESCRIPTION[chip], options=o.shown)
        self.chip = chip
        self.memory = o.memory
        self.core_mask = o.core_mask
        self.cores = o.cores
        self.private_bytes = o.private_bytes
        self.paths = o.paths
        self.guards = o.guards
        self._codes = o.codes
        self._given = o.given
        self._suffix = o.suffix
        self.deterministic = abi.is_emulator(self.paths) if o.deterministic is None else o.deterministic
        self._private_blocks = threading.local()  # checked mode: this core thread's guarded blocks
        self._lib = None
        self._features = None
        self._shim_supplied = False  # memory="private" on a library without the helpers: xloss's shim added
        self._caps = None

    # -- the library ---------------------------------------------------------------------------
    @property
    def lib(self):
        if self._lib is None:
            with abi.state_lock():  # not per backend: a forked child gets a fresh one
                if self._lib is None:
                    lib, features = library.load(self.paths)  # BackendUnavailableError if missing
                    if self.memory == "private" and library.needs_private_shim(lib):
                        # a port written from the manual brings no private memory of its own: the
                        # arenas and helpers come from xloss's shim, listed after it
                        self.paths = [*self.paths, str(abi.PRIVATE_SHIM)]
                        self._shim_supplied = True
                        lib, features = library.load(self.paths)
                    self._lib, self._features = lib, features
        return self._lib

    @property
    def ffi(self):
        return self.lib.ffi

    def availability(self):
        try:
            lib = self.lib
        except BackendUnavailableError as exc:
            return False, f"{exc}{library.unavailable_hint(self.paths)}"
        if not self.capabilities():
            prefixes = "/".join(capabilities.PREFIX[d] for d in capabilities.CHIP_DTYPES[self.chip])
            return False, f"{':'.join(self.paths)} exports no {prefixes}_<op>{self._suffix} entry point"
        if self.memory == "private":
            why = library.private_refusal(lib, self._features, self.paths, self.private_bytes)
            if why:
                return False, why
        return True, ""

    def info(self):
        out = {"library": ":".join(self.paths), "chip": self.chip.upper(), "memory": self.memory,
               "core_mask": f"{self.core_mask:#04x}"}
        try:
            lib = self.lib
        except BackendUnavailableError as exc:
            out["error"] = str(exc)
            return out
        out.update(library.facts(lib, self._features, self.private_bytes))
        if self._shim_supplied:
            out["private memory"] = (f"xloss's private-memory shim ({abi.PRIVATE_SHIM.name}), added because the "
                                     "library exports none of the private-memory helpers")
        out["deterministic"] = "yes" if self.deterministic else "not declared (deterministic=True declares it)"
        return out

    # -- capabilities: what the loaded library's symbols can express ----------------------------
    def capabilities(self):
        if self._caps is None:
            try:
                lib = self.lib
            except BackendUnavailableError:
                return {}
            self._caps = capabilities.declare(lib, self._features.ext, self.chip, self.memory, self.core_mask,
                                              self._suffix)
        return self._caps

    def _require(self, req):
        """Check ``req``; a request this chip could express but the library does not export is
        "not implemented" (BackendUnavailableError naming the symbol), not merely undeclared."""
        if self.refusal(req) is not None and req.dtype in capabilities.CHIP_DTYPES[self.chip]:
            capabilities.require_symbols(self.lib, self._features.ext, self.paths, self._suffix, req)
        self.check(req)

    # -- configurations and checked mode ------------------------------------------------------------
    def configurations(self) -> list:
        """This backend under the core masks of ``CONFIG_MASKS`` (all options but the mask kept):
        in shared memory the cores splitting each call, in private memory the cores whose arenas
        hold the tiles. Each must give this backend's results."""
        return [(f"core_mask={m:#04x}", DspBackend(self.chip, **dict(self._given, core_mask=m)))
                for m in CONFIG_MASKS]

    def readings(self, kernel: str) -> list:
        """nlllossgrad's page gives two sets of reduction codes, the softmax cross entropy pages two shapes of
        their loss output: the other reading, with the option that selects it (the library's results are
        compared under it when the kernel fails)."""
        if kernel in ("softmax_cross_entropy_with_logits", "cross_entropy_loss"):  # issue #30: the loss output
            mine = self._given.get("softmax_ce_losses", "rows")
            return [(f"softmax_ce_losses={other} ({'one loss per call' if other == 'one' else 'a loss per row'})",
                     f"--option softmax_ce_losses={other}",
                     DspBackend(self.chip, **dict(self._given, softmax_ce_losses=other)))
                    for other in options.SOFTMAX_CE_LOSSES if other != mine]
        if kernel != "nll_loss_grad":
            return []
        codes = self._codes["nlllossgrad"]
        mine = tuple(sorted(codes, key=codes.get))
        out = []
        for what, names in abi.NLL_READINGS:
            if names != mine:
                value = ",".join(names)
                out.append((what, f"--option nll_reduction_codes={value}",
                            DspBackend(self.chip, **dict(self._given, nll_reduction_codes=value))))
        return out

    def checked(self) -> DspBackend:
        """This backend with guards=True (see :mod:`.guards`); a replay that records the options
        reproduces it."""
        return self if self.guards else DspBackend(self.chip, **dict(self._given, guards=True))

    # -- calling the library: what the kernels use ------------------------------------------------
    def _names(self, dtype, op):
        """(entry point, C element type) of ``op`` for ``dtype`` in this backend's memory model."""
        name = dtype.name  # float32 or float16: the request was checked against the declaration
        return capabilities.symbol(name, op, self._suffix), capabilities.CTYPE[name]

    def _ptr(self, arr, ctype):
        if arr is None:
            return self.ffi.NULL
        if self.guards:  # staged into guarded scratch by _invoke
            return guards.HostArg(arr, ctype)
        if not arr.flags.aligned:  # the ABI needs naturally aligned elements (the emulator refuses others)
            arr = arr.copy()  # the cdata keeps the copy alive
        return self.ffi.from_buffer(ctype + "[]", arr)

    def _out(self, arr: np.ndarray) -> np.ndarray:
        """Where a shared call writes: the output itself for the emulator (it validates before it
        writes), host scratch for an external library (a port that fails half-way cannot corrupt it)."""
        if self._features.direct and arr.flags.aligned:
            return arr
        return np.full_like(arr, np.nan)  # aligned; unwritten elements show as NaN

    @staticmethod
    def _finish(dst: np.ndarray, src: np.ndarray) -> None:
        flat = dst.reshape(-1)
        if src.size and not np.shares_memory(src, flat):  # scratch of an external library: copy it over
            flat[...] = src.reshape(-1)

    def _raise_for_status(self, what: str) -> None:
        library.raise_for_status(self.lib, self._features, self.name, what)

    def _invoke(self, fname: str, *args) -> None:
        """Call a vendor function on this thread (emulating this backend's chip) and raise its error."""
        lib = self.lib
        fn = lib.symbol(fname)
        library.prepare_call(lib, self._features, self.chip)
        if self.guards:
            guards.checked_call(self, fname, fn, args, self.ffi, {"hp": 2, "i8": 1}.get(fname[:2], 4),
                                self._codes.get(fname[3:-2], {}), getattr(self._private_blocks, "blocks", None))
            return
        fn(*args)
        self._raise_for_status(fname)

    # -- private memory ---------------------------------------------------------------------------
    def _blk(self, nbytes: int) -> int:
        """Arena bytes one staged buffer of ``nbytes`` takes (checked mode: with its guards)."""
        return staging.blk(nbytes) + (2 * guards.GUARD if self.guards else 0)

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
        library.select_core(self.lib, self._features, self.name, core)

    def _run_private(self, specs: dict, ntiles: int, stage_call, *, cores=None) -> None:
        """Tiles on the cores of the mask, each core on a worker thread (:func:`.staging.run_private`)."""
        staging.run_private(self, specs, ntiles, stage_call, list(cores or self.cores))
